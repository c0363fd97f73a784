"""Transcript files: one conversation per JSONL line, in a provider format (issue 8: import).

The formats are those of `turnledger.providers`: ``openai`` (a Chat Completions ``messages``
list, or a request object holding one), ``anthropic`` (``{"system", "messages"}`` or a list)
and ``responses`` (a list of Responses input items, or an object holding them as ``input``).
`read_conversations` parses each line on its own: a bad line is an error naming its number and
what is wrong, the others still parse. `changes` says what an import would not give back on
export (the line is not in the format's normal form, or keys beside the messages); an empty list
means ``export`` gives the line back, JSON-equal. Nothing here does I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import attrs

from turnledger.domain.errors import InvalidMessage
from turnledger.domain.messages import ChatMessage, ConversationMessage, compact_json
from turnledger.domain.providers import (
    TranscriptError,
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
)

__all__ = ["FORMATS", "Conversation", "changes", "read_conversations", "write_conversation"]

_Importer = Callable[[Any], list[ConversationMessage]]
_Exporter = Callable[[Sequence[ConversationMessage | ChatMessage]], Any]
_CODECS: Final[dict[str, tuple[_Importer, _Exporter, str]]] = {
    "openai": (from_openai_chat, to_openai_chat, "messages"),
    "anthropic": (from_anthropic, to_anthropic, ""),
    "responses": (from_openai_responses, to_openai_responses, "input"),
}
FORMATS: Final = tuple(_CODECS)


@attrs.frozen
class Conversation:
    """One parsed line: its number (1-based), the JSON value it held and its history."""

    line: int
    raw: Any
    history: list[ConversationMessage]


def _check_format(fmt: str) -> None:
    if fmt not in _CODECS:
        raise ValueError(f"unknown transcript format {fmt!r}; expected one of {', '.join(FORMATS)}")


def _messages_of(value: Any, fmt: str) -> Any:
    """The part of a line's value the importer reads: a request object's list, or the value."""
    key = _CODECS[fmt][2]
    if key and isinstance(value, dict) and isinstance(value.get(key), list):
        return value[key]
    return value


def _parse(line: str, fmt: str) -> tuple[Any, list[ConversationMessage]]:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise TranscriptError(f"invalid JSON: {exc}") from exc
    importer = _CODECS[fmt][0]
    body = _messages_of(value, fmt)
    if not isinstance(body, list | dict) or (fmt != "anthropic" and not isinstance(body, list)):
        raise TranscriptError(f"expected a JSON list of messages, got {type(value).__name__}")
    try:
        return value, importer(body)
    except TranscriptError:
        raise
    except InvalidMessage as exc:
        raise TranscriptError(str(exc)) from exc


def read_conversations(text: str, fmt: str) -> Iterator[Conversation | TranscriptError]:
    """Parse one conversation per line (blank lines skipped); a bad line yields its error.

    Lines are split on line feeds only (JSON text may hold a raw U+2028).

    Raises:
        ValueError: ``fmt`` is not one of `FORMATS` (at the call, before any reading).
    """
    _check_format(fmt)
    return _read(text, fmt)


def _read(text: str, fmt: str) -> Iterator[Conversation | TranscriptError]:
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            raw, history = _parse(line, fmt)
        except TranscriptError as exc:
            yield TranscriptError(exc.reason, line=number)
            continue
        yield Conversation(number, raw, history)


def write_conversation(history: Sequence[ConversationMessage | ChatMessage], fmt: str) -> str:
    """One compact JSON line (no newline) of ``history`` in ``fmt``; same input, same bytes."""
    _check_format(fmt)
    return compact_json(_CODECS[fmt][1](history))


def changes(conversation: Conversation, fmt: str) -> list[str]:
    """What ``export`` would not give back of this line; empty when it gives it back exactly."""
    _check_format(fmt)
    body = _messages_of(conversation.raw, fmt)
    found: list[str] = []
    if body is not conversation.raw and isinstance(conversation.raw, dict):
        others = sorted(k for k in conversation.raw if k != _CODECS[fmt][2])
        found.append(f"not recorded (request fields, not messages): {', '.join(others)}")
    elif isinstance(body, list) and fmt == "anthropic":
        found.append("a bare list of messages is exported as {\"messages\": [...]}")
        body = {"messages": body}
    exported = json.loads(write_conversation(conversation.history, fmt))
    where = _first_difference(body, exported, "")
    if where is not None:
        found.append(f"exported in the format's normal form, which differs at {where or '$'}")
    return found


def _first_difference(a: Any, b: Any, path: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key}"
            found = _first_difference(a[key], b[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_difference(x, y, f"{path}[{i}]")
            if found is not None:
                return found
        return None if len(a) == len(b) else f"{path}[{min(len(a), len(b))}]"
    return None if a == b else path
