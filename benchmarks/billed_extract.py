"""Extract recorded requests and their billed input tokens from VCR cassettes (issue 21).

Reads the cassettes of a local snapshot of a public repository and writes one JSON line per
recorded request to an OpenAI or Anthropic endpoint whose response carries usage: the request
body as it was sent, the billed input tokens, and whether the provider ran its own server tools
in that response (a bill no client can see, left out of the goal). Only data is copied: the
source of each line (repository, commit, cassette path, interaction) is in the line.

    python -m benchmarks.billed_extract SNAPSHOT REPO SHA \
        | gzip > benchmarks/data/billed_OWNER_NAME.jsonl.gz

Cassettes come in several dialects, all read here: vcrpy's YAML (bodies as text, as gzip bytes
under ``!!binary`` when the recorder kept the wire encoding, headers under Python tags such as
``multidict.istr``), pydantic-ai's ``parsed_body``, R vcr's ``http_interactions`` (ellmer), one
interaction per JSON file (ddtrace's test agent), Polly.js's HAR recordings (openllmetry-js), and
any of them gzip-compressed (``.gz``).
A file is a cassette if it names one of the two hosts and parses into interactions, wherever it
lies in the tree: repositories name their cassette folders differently (``cassettes``, ``_vcr``,
``recordings``).

SNAPSHOT is a local copy of the repository REPO (owner/name) at commit SHA.

`benchmarks.estimate_vs_billed` reads the result.

Needs PyYAML (``pip install pyyaml``), which only these two data-building scripts use, so it
is not a dependency of the package or of its tests.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
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
_MODELS = {"api.openai.com": re.compile(r"(gpt|o\d|chatgpt|codex|computer-use|ft:)"),
           "api.anthropic.com": re.compile(r"claude")}
_WORDS = ("test", "mock", "fake", "dummy", "stub", "example", "redacted", "placeholder")
_MADE_UP = re.compile("|".join([w for word in _WORDS for w in (word, word.title(), word.upper())]
                               + ["1234", "abcdef"]))
"""Words a person writes into an id; as written, since a random id mixes case (``9stUBRE``)."""


def _endpoint(uri: str) -> str | None:
    path = uri.split("://", 1)[-1].partition("/")[2].partition("?")[0]
    for suffix, api in _ENDPOINTS.items():
        if ("/" + path).endswith(suffix):
            return api
    return None


def _host(uri: str) -> str:
    return uri.split("://", 1)[-1].partition("/")[0]


def _decoded(data: bytes) -> str:
    """The text of a recorded body: a recorder that kept the wire encoding stored the gzip
    bytes (the response's ``Content-Encoding``); anything else is taken as UTF-8."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8", "replace")


def _body(part: dict[str, Any]) -> Any:
    if "parsed_body" in part:
        return part["parsed_body"]
    raw = (part.get("body") or {})
    text = raw.get("string") if isinstance(raw, dict) else raw
    if isinstance(raw, dict) and isinstance(raw.get("base64_string"), str):  # R vcr, binary
        text = base64.b64decode(raw["base64_string"])
    if isinstance(text, bytes):
        try:
            text = _decoded(text)
        except (OSError, EOFError):
            return None  # a truncated stream: no text to read
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
                event = json.loads(line[5:].strip())
            except ValueError:
                continue
            if isinstance(event, dict):  # not a bare value some streams end with
                events.append(event)
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


def _identity(response: Any) -> tuple[Any, Any]:
    """(id, model) the response names: its own, or for a stream the first event's (a Chat
    chunk), ``message_start``'s message or ``response.created``'s response."""
    events = [response] if isinstance(response, dict) else (
        _stream_events(response) if isinstance(response, str) else [])
    for event in events:
        inner = event.get("message") or event.get("response")
        for part in (event, inner if isinstance(inner, dict) else {}):
            if isinstance(part.get("id"), str) and ("model" in part or "usage" in part):
                return part["id"], part.get("model")
    return None, None


def _recorded(host: str, response: Any) -> bool:
    """Whether the response came from the host's provider, so its bill is that provider's. Some
    cassettes were written by hand (``chatcmpl-ai-guard-test``, ``resp_test123abc``: an id
    whose random part is a word or too short for a provider's) or recorded against another
    provider behind the host's name (kimi-k2 through OpenRouter as api.openai.com): their usage
    is not a bill of that tokenizer."""
    rid, model = _identity(response)
    if isinstance(model, str) and not _MODELS[host].match(model):
        return False
    if not isinstance(rid, str):
        return True  # a token count or a stream without ids: nothing says otherwise
    tail = re.split(r"[-_]", rid, maxsplit=1)[-1]
    return len(tail) >= 20 and not _MADE_UP.search(tail)


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


class _Loader(yaml.CSafeLoader):
    """The safe loader, plus Python tags read as plain data instead of refused: aiohttp's
    recorder writes header names as ``!!python/object/apply:multidict._multidict.istr [Name]``,
    and one such header would otherwise drop the whole cassette. Nothing is constructed."""


def _plain(loader: yaml.Loader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.SequenceNode):
        items = tuple(loader.construct_sequence(node, deep=True))
        return items[0] if len(items) == 1 else items  # istr [Name] is the name
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    return loader.construct_scalar(node)


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", _plain)
_SUFFIXES = (".yaml", ".yml", ".json", ".har", ".yaml.gz", ".yml.gz", ".json.gz", ".har.gz")


def _cassette_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.name.endswith(_SUFFIXES) and p.is_file())


def _load(path: Path) -> Any:
    """The parsed file, or None: only files that name one of the hosts are parsed, since a
    repository's other YAML and JSON files are many and none of them is wanted."""
    try:
        data = path.read_bytes()
        text = (gzip.decompress(data) if path.name.endswith(".gz") else data).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError):
        return None
    if not any(host in text for host in _HOSTS):
        return None
    try:
        if path.name.endswith((".json", ".json.gz", ".har", ".har.gz")):
            return json.loads(text)
        return yaml.load(text, Loader=_Loader)
    except (ValueError, yaml.YAMLError):
        return None


def _har_content(content: dict[str, Any]) -> str | bytes:
    """A HAR response's text; Polly.js writes a compressed body as a JSON list of base64
    chunks (``encoding: base64``), which joined are the wire bytes."""
    text = content.get("text") or ""
    if content.get("encoding") != "base64":
        return text
    try:
        chunks = json.loads(text)
    except ValueError:
        chunks = [text]
    return b"".join(base64.b64decode(c) for c in (chunks if isinstance(chunks, list) else [text]))


def _har_interaction(entry: dict[str, Any]) -> dict[str, Any]:
    """A HAR entry in vcrpy's shape, so one reading serves both."""
    request, response = entry.get("request") or {}, entry.get("response") or {}
    return {"request": {"uri": request.get("url"),
                        "body": (request.get("postData") or {}).get("text")},
            "response": {"status": response.get("status"),
                         "body": _har_content(response.get("content") or {})}}


def _interactions(cassette: Any) -> list[dict[str, Any]]:
    """A cassette's interactions: vcrpy's ``interactions``, R vcr's ``http_interactions``,
    a HAR log's entries, or a file that holds one interaction (a request and its response)."""
    if not isinstance(cassette, dict):
        return []
    if "request" in cassette and "response" in cassette:
        return [cassette]
    if isinstance(cassette.get("log"), dict):
        entries = cassette["log"].get("entries") or []
        return [_har_interaction(e) for e in entries if isinstance(e, dict)]
    found = cassette.get("interactions") or cassette.get("http_interactions") or []
    return [i for i in found if isinstance(i, dict)] if isinstance(found, list) else []


def _status(response: dict[str, Any]) -> Any:
    """vcrpy writes ``status: {code: 200, ...}``; R vcr ``status: 200`` or ``{status_code}``."""
    status = response.get("status")
    if isinstance(status, dict):
        return status.get("code", status.get("status_code"))
    return status


def extract(root: Path, repo: str, commit: str) -> list[dict[str, Any]]:
    rows = []
    for path in _cassette_files(root):
        for n, interaction in enumerate(_interactions(_load(path))):
            request = interaction.get("request") or {}
            response = interaction.get("response") or {}
            uri = str(request.get("uri") or request.get("url") or "")
            api, host = _endpoint(uri), _host(uri)
            if api is None or host not in _HOSTS or str(_status(response)) != "200":
                continue
            body, answer = _body(request), _body(response)
            usage, output = _usage(api, answer)
            billed = _billed(api, usage) if usage else None
            if not isinstance(body, dict) or not billed or not _recorded(host, answer):
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
