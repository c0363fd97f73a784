"""The token estimate of recorded requests against the input tokens the provider billed.

Reads ``benchmarks/data/billed_*.jsonl.gz``, one file per public repository (recorded requests
from its VCR cassettes, with their billed input tokens: `benchmarks.billed_extract`), prepares
each one as a session would (imported, routed to a provider profile that names the request's API,
trimming off, the tool schemas given) and compares the prepared estimate with the bill. Prints
one table per content kind and one per repository, and writes
``benchmarks/results/estimate_vs_billed.json``.

A request recorded twice with the same bill (a parametrised test replaying one cassette body,
or two repositories sending the same body) counts once, the first in file-name order:
``--keep-duplicates`` counts every recording.

The goal (issue 21): within 0.5x to 2x of the bill on 90 % of the requests whose bill does not
include the provider's own server-side passes, which no client can see: server tools it ran in
that response, or context it holds or edits itself (``previous_response_id``, ``conversation``,
Anthropic ``context_management``).

    python -m benchmarks.estimate_vs_billed [--pricing default|spec|by-size|openai-tools|opt-in]
        [--keep-duplicates]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import turnledger as tl
from turnledger.profiles import Pricing
from turnledger.providers import from_anthropic, from_openai_chat, from_openai_responses

HERE = Path(__file__).parent
DATA = HERE / "data"
RESULTS = HERE / "results" / "estimate_vs_billed.json"
API_OF = {"anthropic": "anthropic", "anthropic_count": "anthropic",
          "openai_chat": "openai_chat", "openai_responses": "openai_responses"}
KINDS = ("audio", "document", "image", "server tool results", "reasoning ciphertext", "tools",
         "text")


def rows() -> Iterator[dict[str, Any]]:
    for path in sorted(DATA.glob("billed_*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                yield json.loads(line)


def distinct(every: Iterator[dict[str, Any]], dropped: dict[str, int]) -> Iterator[dict[str, Any]]:
    """The rows whose body and bill were not seen before: a duplicate measures the same thing
    again and would weigh a parametrised test's one request as many. ``dropped`` counts the
    duplicates per repository, and under ``"across"`` those first seen in another one."""
    seen: dict[tuple[str, int], str] = {}
    for row in every:
        key = (json.dumps(row["body"], sort_keys=True, ensure_ascii=False),
               row["billed_input_tokens"])
        repo = row["source"]["repository"]
        if key not in seen:
            seen[key] = repo
            yield row
            continue
        dropped[repo] = dropped.get(repo, 0) + 1
        if seen[key] != repo:
            dropped["across"] = dropped.get("across", 0) + 1


def _history(api: str, body: dict[str, Any]) -> list[tl.ConversationMessage]:
    if api.startswith("anthropic"):
        return from_anthropic({k: body[k] for k in ("system", "messages") if k in body})
    if api == "openai_chat":
        return from_openai_chat(body["messages"])
    items = body.get("input", [])
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    head = [tl.Chat(tl.ChatMessage.system(body["instructions"]))] if body.get(
        "instructions") else []
    return [*head, *from_openai_responses(items)]


def _server_side_context(body: dict[str, Any]) -> bool:
    """Whether the provider adds or edits context the request does not show: an earlier
    response it holds (``previous_response_id``, ``conversation``), a prompt it stores
    (Responses' ``prompt``: a template named by id, filled with the request's variables), an
    item given by its id alone (an ``item_reference``, or an item of only ``id`` and ``type``:
    the provider reads the stored item, a generated image say) or a context edit it runs
    (Anthropic ``context_management``, e.g. compaction). Such a bill is a server-side pass."""
    items = body.get("input") if isinstance(body.get("input"), list) else []
    by_reference = any(isinstance(i, dict) and i.get("type") != "message" and (
        i.get("type") == "item_reference" or set(i) <= {"id", "type"}) for i in items)
    return bool(body.get("previous_response_id") or body.get("conversation")
                or body.get("context_management") or body.get("prompt") or by_reference)


def _tools(body: dict[str, Any]) -> list[str]:
    """The request's tool definitions; Chat's deprecated ``functions`` (LangChain's older
    function calling still sends them) are function tools the model sees the same way."""
    legacy = [{"type": "function", "function": f} for f in body.get("functions") or ()]
    return [json.dumps(t, ensure_ascii=False) for t in [*(body.get("tools") or ()), *legacy]]


def _schemas(body: dict[str, Any]) -> list[str]:
    """The request's output schema, which the runtime injects as a hook text: Chat's
    ``response_format``, Responses' ``text.format``, Anthropic's ``output_format``."""
    found = [body.get("response_format"), body.get("output_format"),
             (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict)
             else None, (body.get("output_config") or {}).get("format")
             if isinstance(body.get("output_config"), dict) else None]
    return [json.dumps(f, ensure_ascii=False) for f in found if isinstance(f, dict)
            and f.get("type") not in (None, "text")]


CONTENT = ("system", "messages", "input", "instructions")
"""The body fields that carry the conversation; the others are settings, whose text (such as
Responses' ``include: ["reasoning.encrypted_content"]``) names kinds the request need not hold."""


def _kind(body: dict[str, Any]) -> str:
    """The content kind a request is filed under: the costliest kind its conversation holds."""
    text = json.dumps({k: body[k] for k in CONTENT if k in body})
    checks = {
        "audio": ("input_audio",),
        "document": ("application/pdf", '"type": "document"', '"input_file"', '"file_data"',
                     '"file": {'),  # an OpenAI Chat file part, a file_id one too
        "image": ('"image"', "image_url", "input_image", "image_generation_call"),
        "server tool results": ("_tool_result", "web_search_call", "code_interpreter_call",
                                "mcp_call", "file_search_call", "mcp_list_tools"),
        "reasoning ciphertext": ("encrypted_content", "redacted_thinking", '"signature"'),
    }
    for kind, needles in checks.items():
        if any(n in text for n in needles):
            return kind
    return "tools" if body.get("tools") or body.get("functions") else "text"


def estimate(row: dict[str, Any], pricing: Any) -> int | str:
    """The prepared estimate of one recorded request, or why it could not be prepared."""
    api, body = API_OF[row["api"]], row["body"]
    profile = tl.RuntimeProfile(max_context_tokens=0, pricing=pricing)
    provider = tl.ProviderProfile("p", "m", 10_000_000, api=api)
    tools = _tools(body)
    hooks = _schemas(body)
    try:
        with tl.open_store("memory://") as store:
            session = store.import_conversation(_history(row["api"], body), profile, [provider])
            return session.prepare_request(tools=tools, hooks=hooks).estimated_tokens
    except tl.TurnledgerError as error:
        return f"{type(error).__name__}: {str(error)[:120]}"


PRICINGS = {
    "default": Pricing(),
    "spec": Pricing.spec(),  # R20-R23 alone
    "by-size": Pricing(image_by_size=True),
    "openai-tools": Pricing(openai_tool_counting=True),
    "opt-in": Pricing(image_by_size=True, openai_tool_counting=True),  # every opt-in
}


def summary(ratios: list[float]) -> dict[str, Any]:
    inside = sum(1 for r in ratios if 0.5 <= r <= 2.0)
    return {
        "requests": len(ratios),
        "inside_0.5x_2x": inside,
        "share_inside": round(inside / len(ratios), 3) if ratios else None,
        "min": round(min(ratios), 2) if ratios else None,
        "median": round(statistics.median(ratios), 2) if ratios else None,
        "max": round(max(ratios), 2) if ratios else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pricing", choices=tuple(PRICINGS), default="default")
    parser.add_argument("--keep-duplicates", action="store_true",
                        help="count a request recorded again with the same bill each time")
    args = parser.parse_args(argv)
    pricing = PRICINGS[args.pricing]
    per_kind: dict[tuple[str, bool], list[float]] = {}
    per_repo: dict[tuple[str, bool], list[float]] = {}
    dropped: dict[str, int] = {}
    detail = []
    for row in rows() if args.keep_duplicates else distinct(rows(), dropped):
        row["server_tools"] = row["server_tools"] or _server_side_context(row["body"])
        kind = _kind(row["body"])
        estimated = estimate(row, pricing)
        ratio = estimated / row["billed_input_tokens"] if isinstance(estimated, int) else 0.0
        per_kind.setdefault((kind, row["server_tools"]), []).append(ratio)
        per_repo.setdefault((row["source"]["repository"], row["server_tools"]), []).append(ratio)
        detail.append({"source": row["source"], "api": row["api"], "kind": kind,
                       "server_tools": row["server_tools"], "billed": row["billed_input_tokens"],
                       "estimated": estimated, "ratio": round(ratio, 3)})
    table = []
    for server in (False, True):
        for kind in KINDS:
            ratios = per_kind.get((kind, server), [])
            if ratios:
                table.append({"kind": kind, "server_tool_passes": server, **summary(ratios)})
        every = [r for (k, s), rs in per_kind.items() if s == server for r in rs]
        table.append({"kind": "all", "server_tool_passes": server, **summary(every)})
    repos = _per_repository(per_repo, dropped)
    _print(table, args.pricing)
    _print_repositories(repos, dropped, args.keep_duplicates)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"pricing": args.pricing,
                                   "keep_duplicates": args.keep_duplicates,
                                   "duplicates_dropped": dropped, "table": table,
                                   "per_repository": repos, "requests": detail},
                                  indent=1) + "\n", encoding="utf-8")
    return 0


def _per_repository(per_repo: dict[tuple[str, bool], list[float]],
                    dropped: dict[str, int]) -> list[dict[str, Any]]:
    """One row per repository: the goal's requests (no server-side pass) summarised, with the
    count of the others and of the duplicates dropped, so a repository's weight shows."""
    table = []
    for repo in sorted({r for r, _ in per_repo}, key=str.lower):
        table.append({"repository": repo, **summary(per_repo.get((repo, False), [])),
                      "server_tool_passes": len(per_repo.get((repo, True), [])),
                      "duplicates_dropped": dropped.get(repo, 0)})
    return table


def _print(table: list[dict[str, Any]], pricing: str) -> None:
    print(f"estimate / billed input tokens (pricing: {pricing}); goal: 0.5x-2x on 90 % of the "
          "requests without server-tool passes")
    print("| kind | server-tool passes | requests | inside 0.5x-2x | share | min | median | max |")
    print("|---|---|---|---|---|---|---|---|")
    for r in table:
        print(f"| {r['kind']} | {'yes' if r['server_tool_passes'] else 'no'} | {r['requests']} "
              f"| {r['inside_0.5x_2x']} | {r['share_inside']:.0%} | {r['min']} | {r['median']} "
              f"| {r['max']} |")


def _print_repositories(table: list[dict[str, Any]], dropped: dict[str, int],
                        kept: bool) -> None:
    total = sum(r["requests"] for r in table)
    print()
    print("per repository, requests without server-tool passes "
          + ("(duplicates kept)" if kept else
             f"(duplicates dropped: {sum(r['duplicates_dropped'] for r in table)}, "
             f"{dropped.get('across', 0)} of them first seen in another repository)"))
    print("| repository | requests | of all | inside 0.5x-2x | share | min | median | max "
          "| with server-tool passes | duplicates dropped |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in table:
        share = f"{r['share_inside']:.0%}" if r["requests"] else "-"
        print(f"| {r['repository']} | {r['requests']} | {r['requests'] / total:.0%} "
              f"| {r['inside_0.5x_2x']} | {share} | {r['min']} | {r['median']} | {r['max']} "
              f"| {r['server_tool_passes']} | {r['duplicates_dropped']} |")


if __name__ == "__main__":
    sys.exit(main())
