"""Extract recorded requests and their billed input tokens from VCR cassettes (issue 21).

Reads the YAML cassettes of a local snapshot of a public repository and writes one JSON line per
recorded request to an OpenAI or Anthropic endpoint whose response carries usage: the request
body as it was sent, the billed input tokens, and whether the provider ran its own server tools
in that response (a bill no client can see, left out of the goal). Only data is copied: the
source of each line (repository, commit, cassette path, interaction) is in the line.

    python -m benchmarks.billed_extract SNAPSHOT REPO SHA | gzip > benchmarks/data/billed.jsonl.gz

SNAPSHOT is a local copy of the repository REPO (owner/name) at commit SHA.

`benchmarks.estimate_vs_billed` reads the result.

Needs PyYAML (``pip install pyyaml``), which only these two data-building scripts use, so it
is not a dependency of the package or of its tests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

_ENDPOINTS = {
    "/v1/messages/count_tokens": "anthropic_count",
    "/v1/messages": "anthropic",
    "/v1/chat/completions": "openai_chat",
    "/v1/responses": "openai_responses",
}
_SERVER_ITEMS = ("web_search_call", "file_search_call", "code_interpreter_call",
                 "image_generation_call", "mcp_call", "mcp_list_tools", "web_fetch_call")
_MAX_BODY_BYTES = 3_000_000
_HOSTS = ("api.openai.com", "api.anthropic.com")  # the providers whose pricing the rules follow


def _endpoint(uri: str) -> str | None:
    path = uri.split("://", 1)[-1].partition("/")[2].partition("?")[0]
    for suffix, api in _ENDPOINTS.items():
        if ("/" + path).endswith(suffix):
            return api
    return None


def _host(uri: str) -> str:
    return uri.split("://", 1)[-1].partition("/")[0]


def _body(part: dict[str, Any]) -> Any:
    if "parsed_body" in part:
        return part["parsed_body"]
    raw = (part.get("body") or {})
    text = raw.get("string") if isinstance(raw, dict) else raw
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text  # a server-sent event stream


def _stream_events(text: str) -> list[dict[str, Any]]:
    events = []
    for line in text.splitlines():
        if line.startswith("data:"):
            try:
                events.append(json.loads(line[5:].strip()))
            except ValueError:
                continue
    return events


def _usage(api: str, response: Any) -> tuple[dict[str, Any] | None, Any]:
    """(usage, the response's output) of a JSON or streamed response."""
    if isinstance(response, dict):
        if api == "anthropic_count":
            return ({"input_tokens": response["input_tokens"]} if "input_tokens" in response
                    else None), []
        output = response.get("content") or response.get("output") or response.get("choices")
        return response.get("usage"), output
    if not isinstance(response, str):
        return None, None
    usage: dict[str, Any] = {}
    output: list[Any] = []
    for event in _stream_events(response):
        kind = event.get("type")
        if kind == "message_start":
            usage.update(event["message"].get("usage") or {})
        elif kind == "message_delta" and event.get("usage"):
            usage.update({k: v for k, v in event["usage"].items() if v is not None})
        elif kind == "content_block_start":
            output.append(event.get("content_block"))
        elif kind == "response.completed":
            usage.update(event["response"].get("usage") or {})
            output = event["response"].get("output") or []
        elif event.get("usage") and "choices" in event:
            usage.update(event["usage"])
    return (usage or None), output


def _billed(api: str, usage: dict[str, Any]) -> int | None:
    if api.startswith("anthropic"):
        parts = [usage.get(k) or 0 for k in ("input_tokens", "cache_creation_input_tokens",
                                              "cache_read_input_tokens")]
        return sum(parts) if usage.get("input_tokens") is not None else None
    if api == "openai_chat":
        return usage.get("prompt_tokens")
    return usage.get("input_tokens")


def _server_tools(api: str, usage: dict[str, Any], output: Any) -> bool:
    passes = usage.get("server_tool_use")
    if isinstance(passes, dict) and any(v for v in passes.values() if isinstance(v, int)):
        return True
    for item in output if isinstance(output, list) else []:
        kind = item.get("type", "") if isinstance(item, dict) else ""
        if kind == "server_tool_use" or kind.startswith("mcp_tool") or kind in _SERVER_ITEMS:
            return True
    return False


def extract(root: Path, repo: str, commit: str) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(root.rglob("*.yaml")):
        if "cassettes" not in path.parts:
            continue
        try:
            cassette = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
        except (yaml.YAMLError, UnicodeDecodeError, OSError):
            continue
        interactions = cassette.get("interactions") if isinstance(cassette, dict) else None
        for n, interaction in enumerate(interactions or []):
            request, response = interaction.get("request", {}), interaction.get("response", {})
            api = _endpoint(str(request.get("uri", "")))
            host = _host(str(request.get("uri", "")))
            status = (response.get("status") or {}).get("code")
            if api is None or host not in _HOSTS or status != 200:
                continue
            body = _body(request)
            usage, output = _usage(api, _body(response))
            billed = _billed(api, usage) if usage else None
            if not isinstance(body, dict) or not billed:
                continue
            if len(json.dumps(body)) > _MAX_BODY_BYTES:
                continue
            rows.append({
                "source": {"repository": repo, "commit": commit,
                           "path": str(path.relative_to(root)), "interaction": n},
                "api": api, "host": host, "body": body, "billed_input_tokens": billed,
                "server_tools": _server_tools(api, usage, output),
            })
    return rows


def main(argv: list[str]) -> int:
    root, repo, commit = Path(argv[0]), argv[1], argv[2]
    for row in extract(root, repo, commit):
        print(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
