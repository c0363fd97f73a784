"""The providers' own request types, to check the bodies turnledger builds (issue 21).

`problems(api, body)` validates a body part against the ``openai`` and ``anthropic`` SDKs'
``*Param`` TypedDicts with pydantic (no extra field allowed: a field the type does not define
is a problem), and checks the rules the types cannot express: no foreign signature, every tool
call answered by the next message(s), no result without its call.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from functools import cache
from typing import Any

from anthropic.types.beta import BetaContentBlockParam, BetaTextBlockParam
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam
from pydantic import ConfigDict, TypeAdapter, ValidationError

_STRICT = ConfigDict(extra="forbid")
_ITERATOR = type(TypeAdapter(typing.Iterable[int]).validate_python([]))


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
        kind = BetaTextBlockParam if message.get("role") == "system" else BetaContentBlockParam
        found += [p for j, b in enumerate(content or [])
                  for p in _check(kind, b, f"{where}.content[{j}]")]
    return found


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
