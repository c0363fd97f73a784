"""Transcript files: one conversation per JSONL line, in a provider format (issue 8: import).

The formats are those of `turnledger.providers`: ``openai`` (a Chat Completions ``messages``
list, or a request object holding one), ``anthropic`` (``{"system", "messages"}`` or a list)
and ``responses`` (a list of Responses input items, or an object holding them as ``input``).
`read_conversations` parses each line on its own: a bad line is an error naming its number and
what is wrong, the others still parse. `decode_lines` decodes a file's bytes line by line in the
same spirit: a line that is not valid text is an error, the others are read. `changes` says
what an import would not give back on export (the line is not in the format's normal form, or
keys beside the messages); an empty list means ``export`` gives the line back, JSON-equal.
Nothing here does I/O.
"""

from __future__ import annotations

import codecs
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

__all__ = [
    "FORMATS",
    "Conversation",
    "changes",
    "decode_lines",
    "read_conversations",
    "write_conversation",
]

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


Line = str | TranscriptError
"""One line of a file as `decode_lines` gives it: its text, or why it is not text."""

_UTF16_BOMS: Final = ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_UTF32_BOMS: Final = ((codecs.BOM_UTF32_LE, "UTF-32 LE"), (codecs.BOM_UTF32_BE, "UTF-32 BE"))


def decode_lines(data: bytes) -> list[Line]:
    """The lines of a transcript file's bytes (split on line feeds), each decoded on its own.

    The file is UTF-8 (a leading UTF-8 byte order mark is dropped), or UTF-16 when it starts
    with a UTF-16 byte order mark (as Windows PowerShell 5 writes ``>`` and ``Out-File``): the
    mark says the encoding, nothing is guessed. A line that is not valid text in it is a
    `TranscriptError` naming the line and the bad byte or character; the other lines are kept.

    Raises `TranscriptError` for a file that starts with a UTF-32 byte order mark, naming it.
    """
    for bom, name in _UTF32_BOMS:  # before UTF-16: the UTF-32 LE mark starts with UTF-16 LE's
        if data.startswith(bom):
            raise TranscriptError(
                f"the file is {name} (it starts with that byte order mark); import reads "
                "UTF-8, or UTF-16 with its byte order mark: convert it first, e.g. with "
                "iconv -f UTF-32 -t UTF-8"
            )
    for bom, codec in _UTF16_BOMS:
        if data.startswith(bom):
            return _utf16_lines(data[len(bom):], codec)
    data = data.removeprefix(codecs.BOM_UTF8)
    return [_utf8_line(number, raw) for number, raw in enumerate(data.split(b"\n"), start=1)]


def _utf8_line(number: int, raw: bytes) -> Line:
    if b"\x00" in raw:  # never in a JSON line: the usual sign of a wider encoding
        return TranscriptError(
            "holds NUL bytes: is the file UTF-16 or UTF-32 without a byte order mark? "
            "import reads UTF-8, or UTF-16 that starts with its byte order mark", line=number,
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return TranscriptError(
            f"not valid UTF-8: byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the "
            f"line ({error.reason})", line=number,
        )


def _utf16_lines(data: bytes, codec: str) -> list[Line]:
    """Decode first, then split: a line feed's two bytes may also occur across two other
    characters. ``surrogatepass`` lets a lone surrogate through so that only its line fails."""
    whole = len(data) - len(data) % 2
    texts = data[:whole].decode(codec, errors="surrogatepass").split("\n")
    lines = [_utf16_line(number, text) for number, text in enumerate(texts, start=1)]
    if whole < len(data):
        lines[-1] = TranscriptError(
            "not valid UTF-16: the file ends in the middle of a character (an odd number of "
            "bytes)", line=len(lines),
        )
    return lines


def _utf16_line(number: int, line: str) -> Line:
    try:
        line.encode("utf-8")  # fails only on a lone surrogate: every other code point encodes
    except UnicodeEncodeError as error:
        return TranscriptError(
            f"not valid UTF-16: a lone surrogate U+{ord(line[error.start]):04X} at character "
            f"{error.start + 1} of the line", line=number,
        )
    return line


def read_conversations(
    text: str | Sequence[Line], fmt: str
) -> Iterator[Conversation | TranscriptError]:
    """Parse one conversation per line (blank lines skipped); a bad line yields its error.

    ``text`` is the file's text, split here on line feeds only (JSON text may hold a raw
    U+2028), or its lines as `decode_lines` gives them (a line that is not text yields its
    error).

    Raises:
        ValueError: ``fmt`` is not one of `FORMATS` (at the call, before any reading).
    """
    _check_format(fmt)
    return _read(text.split("\n") if isinstance(text, str) else text, fmt)


def _read(lines: Sequence[Line], fmt: str) -> Iterator[Conversation | TranscriptError]:
    for number, line in enumerate(lines, start=1):
        if isinstance(line, TranscriptError):
            yield line
            continue
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
