"""The providers' own request types, to check the bodies turnledger builds (issue 21).

`problems(api, body)` validates a body part against the ``openai`` and ``anthropic`` SDKs'
``*Param`` TypedDicts with pydantic (no extra field allowed: a field the type does not define
is a problem), and checks the rules the types cannot express: no foreign signature, every tool
call answered by the next message(s), no result without its call, at most four
``cache_control`` breakpoints and none on an empty text block (issue 35).
`request_problems(api, body, fields)` validates the whole request (the body with its request
fields, such as ``prompt_cache_key``) against the SDKs' ``*CreateParams`` types.

The Anthropic SDK's ``BetaContentBlockParam`` also admits its response blocks (pydantic models
that keep any extra field), which would accept a block of any shape: the checks use the union's
``TypedDict`` members only (`_params_only`).
"""

from __future__ import annotations

import typing
import warnings
from collections.abc import Iterable
from functools import cache
from typing import Any

from anthropic.types.beta import BetaContentBlockParam, BetaTextBlockParam
from anthropic.types.beta.message_create_params import (
    MessageCreateParamsNonStreaming as AnthropicRequest,
)
from openai.types.chat import ChatCompletionMessageParam
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming as ChatRequest,
)
from openai.types.responses import ResponseInputItemParam
from openai.types.responses.response_create_params import (
    ResponseCreateParamsNonStreaming as ResponsesRequest,
)
from pydantic import ConfigDict, TypeAdapter, ValidationError
from typing_extensions import is_typeddict

_STRICT = ConfigDict(extra="forbid")
_ITERATOR = type(TypeAdapter(typing.Iterable[int]).validate_python([]))


MAX_BREAKPOINTS = 4
"""Anthropic's limit of ``cache_control`` breakpoints in one request."""


def _members(kind: object) -> list[object]:
    origin = typing.get_origin(kind)
    if origin is typing.Union:
        return [m for arg in typing.get_args(kind) for m in _members(arg)]
    if origin is typing.Annotated:
        return _members(typing.get_args(kind)[0])
    return [kind]


def _params_only(kind: object) -> object:
    """The union of the request ``TypedDict`` members of ``kind``: without the SDK's response
    models, which keep extra fields and so would accept any block of their ``type``."""
    members = tuple(m for m in _members(kind) if is_typeddict(m))
    return typing.Union[members]  # noqa: UP007 - a union built at run time


_ANTHROPIC_BLOCK = _params_only(BetaContentBlockParam)


@cache
def _adapter(kind: object) -> TypeAdapter[Any]:
    # A list of the type: pydantic takes a config for a container, not for a TypedDict itself.
    return TypeAdapter(list[kind], config=_STRICT)  # type: ignore[valid-type]


def _consume(value: object) -> None:
    """Walk a validated value: pydantic validates an ``Iterable`` field lazily, as it is read."""
    if isinstance(value, dict):
        for item in value.values():
            _consume(item)
    elif isinstance(value, list | tuple | _ITERATOR):
        for item in value:
            _consume(item)


def _check(kind: object, value: object, where: str) -> list[str]:
    try:
        _consume(_adapter(kind).validate_python([value]))
    except ValidationError as error:
        return [f"{where}: {_best(error)}"]
    return []


def _best(error: ValidationError) -> str:
    """The errors of the union member that came closest (fewest errors), in one line."""
    errors = error.errors()
    by_member: dict[object, list[Any]] = {}
    for e in errors:
        by_member.setdefault(e["loc"][1:2], []).append(e)
    best = min(by_member.values(), key=len)
    return "; ".join(f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}" for e in best[:3])


def _anthropic_messages(body: dict[str, Any]) -> list[str]:
    found: list[str] = []
    extra = sorted(set(body) - {"system", "messages"})
    if extra:
        found.append(f"body: unexpected keys {extra}")
    system = body.get("system")
    if isinstance(system, list):
        found += [p for i, b in enumerate(system)
                  for p in _check(BetaTextBlockParam, b, f"system[{i}]")]
    elif system is not None and not isinstance(system, str):
        found.append("system: not a string or a list of text blocks")
    for i, message in enumerate(body.get("messages", [])):
        where = f"messages[{i}]"
        keys = sorted(set(message) - {"role", "content"})
        if keys or message.get("role") not in ("user", "assistant", "system"):
            found.append(f"{where}: role {message.get('role')!r}, extra keys {keys}")
        content = message.get("content")
        if isinstance(content, str):
            continue
        kind = BetaTextBlockParam if message.get("role") == "system" else _ANTHROPIC_BLOCK
        found += [p for j, b in enumerate(content or [])
                  for p in _check(kind, b, f"{where}.content[{j}]")]
    return found + _anthropic_breakpoints(body)


def cache_breakpoints(body: dict[str, Any]) -> list[str]:
    """Where an Anthropic body carries ``cache_control`` (``system[0]``,
    ``messages[3].content[1]``, ``messages[2].content[0].content[1]`` inside a tool result),
    in request order: found here on its own, not by turnledger's code."""
    found: list[str] = []

    def walk(blocks: object, where: str) -> None:
        for j, block in enumerate(blocks if isinstance(blocks, list) else []):
            if isinstance(block, dict):
                if "cache_control" in block:
                    found.append(f"{where}[{j}]")
                walk(block.get("content") if block.get("type") == "tool_result" else None,
                     f"{where}[{j}].content")

    walk(body.get("system"), "system")
    for i, message in enumerate(body.get("messages", [])):
        walk(message.get("content"), f"messages[{i}].content")
    return found


def _anthropic_breakpoints(body: dict[str, Any]) -> list[str]:
    """The rules of breakpoints the types cannot express: at most `MAX_BREAKPOINTS`, and none
    on an empty text block (the API refuses both)."""
    places = cache_breakpoints(body)
    found = ([f"body: {len(places)} cache_control breakpoints, more than {MAX_BREAKPOINTS}"]
             if len(places) > MAX_BREAKPOINTS else [])

    def block(where: str) -> Any:
        value: Any = body
        for part in where.replace("]", "").replace("[", ".").split("."):
            value = value[int(part)] if part.isdigit() else value[part]
        return value

    return found + [f"{where}: cache_control on an empty text block" for where in places
                    if block(where).get("type") == "text" and not block(where).get("text")]


def problems(api: str, body: Any) -> list[str]:
    """What the provider's request types (and the rules they cannot express) refuse in
    ``body``: an empty list when it is accepted."""
    if api == "anthropic":
        return _anthropic_messages(body) + _anthropic_pairs(body.get("messages", []))
    if api == "openai_chat":
        found = [p for i, m in enumerate(body)
                 for p in _check(ChatCompletionMessageParam, m, f"messages[{i}]")]
        return found + _chat_pairs(body)
    found = [p for i, item in enumerate(body)
             for p in _check(ResponseInputItemParam, item, f"input[{i}]")]
    return found + _responses_pairs(body)


def request_problems(api: str, body: Any, fields: dict[str, Any] | None = None) -> list[str]:
    """What the provider's request type refuses in the whole request: ``body`` (as `problems`
    takes it) with the request ``fields`` beside it (``prompt_cache_key``), a model and, for
    Anthropic, ``max_tokens``; no field the type does not define."""
    extra = dict(fields or {})
    if api == "anthropic":
        request = {"model": "m", "max_tokens": 1, **body, **extra}
        with warnings.catch_warnings():  # the SDK's fallback entry is an open TypedDict
            warnings.filterwarnings("ignore", message=".*allows extra items")
            return _check(AnthropicRequest, request, "request")
    if api == "openai_chat":
        return _check(ChatRequest, {"model": "m", "messages": body, **extra}, "request")
    return _check(ResponsesRequest, {"model": "m", "input": body, **extra}, "request")


def _chat_pairs(messages: list[dict[str, Any]]) -> list[str]:
    """Every assistant tool call is answered by the tool messages right after it, and every
    tool message answers such a call."""
    found: list[str] = []
    open_calls: set[str] = set()
    for i, m in enumerate(messages):
        if m.get("role") == "tool":
            if m.get("tool_call_id") not in open_calls:
                found.append(f"messages[{i}]: a tool result without its call")
            open_calls.discard(m.get("tool_call_id"))
            continue
        if open_calls:
            found.append(f"messages[{i}]: calls {sorted(open_calls)} have no result")
        open_calls = {c["id"] for c in m.get("tool_calls") or ()}
    return found


def _responses_pairs(items: list[dict[str, Any]]) -> list[str]:
    calls = {i.get("call_id") for i in items if i.get("type") == "function_call"}
    outputs = {i.get("call_id") for i in items if i.get("type") == "function_call_output"}
    return [f"input: call {c} has no output" for c in sorted(calls - outputs, key=str)] + [
        f"input: output {c} has no call" for c in sorted(outputs - calls, key=str)]


def _anthropic_pairs(messages: list[dict[str, Any]]) -> list[str]:
    """A ``tool_use`` is answered by a ``tool_result`` at the start of the next message."""
    found: list[str] = []
    for i, m in enumerate(messages):
        blocks = m.get("content") if isinstance(m.get("content"), list) else []
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if not uses:
            continue
        after = messages[i + 1] if i + 1 < len(messages) else {}
        answers = after.get("content") if isinstance(after.get("content"), list) else []
        answered = {b.get("tool_use_id") for b in answers if b.get("type") == "tool_result"}
        if after.get("role") != "user" or not set(uses) <= answered:
            found.append(f"messages[{i}]: tool_use {uses} not answered by messages[{i + 1}]")
    return found


def signatures(api: str, body: Any) -> set[str]:
    """Every signature or ciphertext a body carries (thinking signatures, redacted data,
    Responses ``encrypted_content``)."""
    found: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for key in ("signature", "encrypted_content"):
                if isinstance(value.get(key), str) and value[key]:
                    found.add(value[key])
            if value.get("type") == "redacted_thinking" and isinstance(value.get("data"), str):
                found.add(value["data"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(body)
    return found


def all_problems(bodies: Iterable[tuple[str, Any]]) -> list[str]:
    return [p for api, body in bodies for p in problems(api, body)]
