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
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, BinaryIO, Final, assert_never, cast

import attrs

from turnledger.domain.bodies import (
    API_ANTHROPIC,
    API_OPENAI_CHAT,
    API_OPENAI_RESPONSES,
    LeftOut,
    fit_messages,
    is_its_own,
    render_body,
)
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.events import (
    ChangesRecord,
    Deciders,
    DomainEvent,
    MessageAppended,
    MessagePopped,
)
from turnledger.domain.formats.bedrock import (
    from_bedrock_json,
    to_bedrock_json,
    to_bedrock_record,
)
from turnledger.domain.formats.bedrock import (
    is_block as is_converse_block,
)
from turnledger.domain.formats.genai import (
    from_genai_json,
    snake_case_contents,
    to_genai_json,
    to_genai_record,
)
from turnledger.domain.messages import (
    ChatMessage,
    ConversationMessage,
    chat_tool_call_id,
    chat_tool_calls,
    compact_json,
    from_chat_messages,
    to_chat_messages,
)
from turnledger.domain.providers import (
    TranscriptError,
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
)
from turnledger.domain.sweep import sweep_orphans
from turnledger.replay.formats import (
    AGENT_FORMATS,
    AUTO,
    CLAUDE_CODE,
    CODEX,
    FORMATS,
    GEMINI_CLI,
)

__all__ = [
    "changes",
    "decode_lines",
    "read_conversations",
    "record_of",
    "stream_lines",
    "write_conversation",
    "write_record",
    "write_view",
]

_Importer = Callable[[Any], list[ConversationMessage]]
_Exporter = Callable[[Sequence[ConversationMessage | ChatMessage]], Any]
_CODECS: Final[dict[str, tuple[_Importer, _Exporter, str]]] = {
    "openai": (from_openai_chat, to_openai_chat, "messages"),
    "anthropic": (from_anthropic, to_anthropic, ""),
    "responses": (from_openai_responses, to_openai_responses, "input"),
    "bedrock": (from_bedrock_json, to_bedrock_json, ""),
    "gemini": (lambda body: from_genai_json(snake_case_contents(body)), to_genai_json,
               "contents"),
}
assert tuple(_CODECS) == FORMATS, "turnledger.replay.formats names every codec, in order"


@attrs.frozen
class Conversation:
    """One parsed line: its number (1-based), the JSON value it held, its history and the
    format it was read in (the named one, or the one `detect_format` found)."""

    line: int
    raw: Any
    history: list[ConversationMessage]
    format: str = ""
    notes: tuple[str, ...] = ()
    """What an agent transcript's session did not record (`agent_transcripts`); a line of a
    provider format says it through `changes`."""


def _check_format(fmt: str, *, auto: bool = False) -> None:
    if auto and (fmt == AUTO or fmt in AGENT_FORMATS):
        return
    if fmt not in _CODECS:
        raise ValueError(f"unknown transcript format {fmt!r}; expected one of {', '.join(FORMATS)}")


def _messages_of(value: Any, fmt: str) -> Any:
    """The part of a line's value the importer reads: a request object's list, or the value."""
    key = _CODECS[fmt][2]
    if key and isinstance(value, dict) and isinstance(value.get(key), list):
        return value[key]
    return value


def _parse(line: str, fmt: str) -> tuple[Any, list[ConversationMessage], str]:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise TranscriptError(f"invalid JSON: {exc}") from exc
    detected, evidence = detect_format(value)
    if fmt == AUTO:
        fmt = detected
    elif evidence is not None and detected != fmt:
        raise TranscriptError(
            f"not the {fmt} format: {evidence}, which is the {detected} format (use --format "
            f"{detected}, or --format auto)"
        )
    importer = _CODECS[fmt][0]
    body = _messages_of(value, fmt)
    if not isinstance(body, list | dict) or (
            fmt not in ("anthropic", "bedrock") and not isinstance(body, list)):
        raise TranscriptError(f"expected a JSON list of messages, got {type(value).__name__}")
    try:
        history = importer(body)
    except TranscriptError:
        raise
    except InvalidMessage as exc:
        raise TranscriptError(str(exc)) from exc
    if not history:
        raise TranscriptError("an empty conversation: there is no message to record")
    _check_given_back(body, history, fmt)
    return value, history, fmt


def _check_given_back(body: Any, history: list[ConversationMessage], fmt: str) -> None:
    """Refuse a line whose record its own format could not give back (issue 36): a block
    of no shape the format defines (one without a ``type``: a Bedrock Converse ``{"text":
    ...}`` read as another format) is named where it sits in the line; a message the
    format's export would leave out whole is named as `write_record` numbers it. Never store
    what no reader of the record can give back."""
    messages = body.get("messages") if isinstance(body, dict) else body
    if fmt == "bedrock":  # its blocks have no type: each is one member naming its kind
        messages = None
    for index, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        for number, block in enumerate(content if isinstance(content, list) else ()):
            if isinstance(block, dict) and not isinstance(block.get("type"), str):
                raise TranscriptError(
                    f"message {index}, block {number} has no type, so it is no block of the "
                    f"{fmt} format: {_shown(block)}; nothing of this line was stored (is it "
                    "another provider's format?)"
                )
    left_out = write_record(history, fmt)[1]
    lost = [entry for entry in left_out if entry.what == "message"]
    if lost:
        index = lost[0].message
        first = next((e for e in left_out if e.message == index and e.what != "message"),
                     lost[0])
        raise TranscriptError(
            f"message {index} of the record: the {fmt} format could give nothing of it back "
            f"(its {first.what}: {first.reason}); nothing of this line was stored"
        )


def _shown(value: Any, limit: int = 80) -> str:
    text = compact_json(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."



_ANTHROPIC_BLOCKS: Final = frozenset({
    "tool_use", "tool_result", "thinking", "redacted_thinking", "document", "server_tool_use",
    "search_result", "mcp_tool_use", "container_upload",
})
_OPENAI_PARTS: Final = frozenset({"image_url", "input_audio", "file", "refusal"})
_RESPONSES_PARTS: Final = frozenset({"input_text", "output_text", "input_image", "input_file"})
_RESPONSES_ITEMS: Final = frozenset({
    "message", "function_call", "function_call_output", "reasoning", "web_search_call",
    "file_search_call", "code_interpreter_call", "image_generation_call", "mcp_call",
    "mcp_list_tools", "computer_call", "item_reference", "compaction", "custom_tool_call",
    "custom_tool_call_output",
})


def detect_format(value: Any) -> tuple[str, str | None]:
    """The format a line's value is written in, and the evidence (None: a plain list of
    role/content messages, which every format reads alike; it is read as ``openai``)."""
    messages = value
    if isinstance(value, dict):
        if "messages" not in value and "input" in value:
            return "responses", "it has an input key"
        if "messages" not in value and "contents" in value:
            return "gemini", "it has a contents key"
        messages = value.get("messages")
        if "system" in value:
            if _converse_blocks(value["system"]):
                return "bedrock", "its system blocks have no type (Bedrock Converse)"
            found = _messages_format(messages)
            if found is not None and found[0] == "bedrock":  # e.g. an empty system list
                return found
            return "anthropic", "it has a top-level system key"
    if not isinstance(messages, list):
        return ("anthropic" if isinstance(value, dict) else "openai"), None
    return _messages_format(messages) or ("openai", None)


def _messages_format(messages: object) -> tuple[str, str] | None:
    """The format the first message that says one is in, with the evidence."""
    for index, message in enumerate(messages if isinstance(messages, list) else ()):
        found = _message_format(message)
        if found is not None:
            return found[0], f"message {index} {found[1]}"
    return None


def _message_format(message: object) -> tuple[str, str] | None:
    if not isinstance(message, dict):
        return None
    kind, role = message.get("type"), message.get("role")
    if isinstance(message.get("parts"), list) and "content" not in message:
        return "gemini", "has parts (a Gemini content)"
    if isinstance(kind, str) and kind in _RESPONSES_ITEMS:
        return "responses", f"is a {kind!r} item"
    if role == "tool":
        return "openai", f"has the role {role!r}"
    if message.get("tool_calls"):
        return "openai", "has tool_calls"
    content = message.get("content")
    if _converse_blocks(content):
        return "bedrock", "holds blocks with no type (Bedrock Converse)"
    for part in content if isinstance(content, list) else ():
        part_type = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part_type, str):
            continue
        if part_type in _ANTHROPIC_BLOCKS or part_type.endswith("_tool_result") or (
            part_type == "image" and "source" in part
        ):
            return "anthropic", f"holds a {part_type!r} block"
        if part_type in _RESPONSES_PARTS:
            return "responses", f"holds an {part_type!r} part"
        if part_type in _OPENAI_PARTS:
            return "openai", f"holds an {part_type!r} part"
    return None


def _converse_blocks(blocks: object) -> bool:
    """Whether ``blocks`` is a non-empty list of Converse blocks: objects of one member among
    Converse's block kinds, none with a ``type``."""
    return isinstance(blocks, list) and bool(blocks) and all(map(is_converse_block, blocks))


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
    _refuse_utf32(data)
    for bom, codec in _UTF16_BOMS:
        if data.startswith(bom):
            return _utf16_lines(data[len(bom):], codec)
    data = data.removeprefix(codecs.BOM_UTF8)
    return [_utf8_line(number, raw) for number, raw in enumerate(data.split(b"\n"), start=1)]


def _refuse_utf32(head: bytes) -> None:
    for bom, name in _UTF32_BOMS:  # before UTF-16: the UTF-32 LE mark starts with UTF-16 LE's
        if head.startswith(bom):
            raise TranscriptError(
                f"the file is {name} (it starts with that byte order mark); import reads "
                "UTF-8, or UTF-16 with its byte order mark: convert it first, e.g. with "
                "iconv -f UTF-32 -t UTF-8"
            )


def stream_lines(handle: BinaryIO) -> Iterator[Line]:
    """`decode_lines` of a file read one line at a time: memory bounded by a line, not by the
    file. The same rules: UTF-8 (a leading byte order mark dropped), UTF-16 when the file
    starts with its byte order mark, each line judged on its own.

    Raises `TranscriptError` for a file that starts with a UTF-32 byte order mark (at the
    first line read).
    """
    head = handle.read(4)
    _refuse_utf32(head)
    for bom, codec in _UTF16_BOMS:
        if head.startswith(bom):
            yield from _utf16_stream(head[len(bom):], handle, codec)
            return
    rest = head.removeprefix(codecs.BOM_UTF8)
    lines = itertools.chain(_first_line(rest, handle), handle)
    for number, raw in enumerate(lines, start=1):
        yield _utf8_line(number, raw.removesuffix(b"\n"))


def _first_line(head: bytes, handle: BinaryIO) -> Iterator[bytes]:
    """The lines the first bytes of the file begin (read already to find a byte order mark),
    the last of them completed from the file."""
    *complete, partial = head.split(b"\n")
    yield from (line + b"\n" for line in complete)
    yield partial + handle.readline()


def _utf16_stream(head: bytes, handle: BinaryIO, codec: str) -> Iterator[Line]:
    decoder = codecs.getincrementaldecoder(codec)(errors="surrogatepass")
    pending = ""
    number = 0
    chunk = head
    while True:
        pending += decoder.decode(chunk)  # never final: an odd last byte is said below
        *complete, pending = pending.split("\n")
        for text in complete:
            number += 1
            yield _utf16_line(number, text)
        if not chunk:
            break
        chunk = handle.read(65_536)
    number += 1
    if decoder.getstate()[0]:
        yield TranscriptError("not valid UTF-16: the file ends in the middle of a character "
                              "(an odd number of bytes)", line=number)
    else:
        yield _utf16_line(number, pending)


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
    text: str | Iterable[Line], fmt: str
) -> Iterator[Conversation | TranscriptError]:
    """Parse one conversation per line (blank lines skipped); a bad line yields its error.

    ``text`` is the file's text, split here on line feeds only (JSON text may hold a raw
    U+2028), or its lines as `decode_lines` or `stream_lines` give them (a line that is not
    text yields its error), read one at a time. ``fmt`` is one of `FORMATS`, or ``"auto"``:
    each line is read in the format it is written in (`detect_format`). A line that is
    plainly another format than the one named is refused, saying which; an empty conversation
    is refused.

    Raises:
        ValueError: ``fmt`` is not one of `FORMATS` or auto (at the call, before any reading).
    """
    _check_format(fmt, auto=True)
    lines = iter(text.split("\n") if isinstance(text, str) else text)
    if fmt == AUTO:
        seen: list[Line] = []
        for line in lines:
            seen.append(line)
            if isinstance(line, TranscriptError) or line.strip():
                fmt = _agent_format(line) or AUTO
                break
        if fmt == AUTO and _opens_a_document(seen[-1] if seen else ""):
            seen += list(lines)  # a pretty-printed JSON document: read it whole
            fmt, seen = _whole_document(seen)
        lines = itertools.chain(seen, lines)
    if fmt in AGENT_FORMATS:
        return _read_agent(lines, fmt)
    return _read(lines, fmt)


def _opens_a_document(line: Line) -> bool:
    """Whether a file's first line is the start of a JSON document spread over lines (``{`` or
    ``[`` that is no JSON value by itself)."""
    return not isinstance(line, TranscriptError) and line.strip() in ("{", "[")


def _whole_document(lines: list[Line]) -> tuple[str, list[Line]]:
    """A pretty-printed file read whole: an agent's session document (Gemini CLI), or one
    conversation written over several lines (then given as one line); the lines as they were
    when they are no JSON document either (each is then refused on its own)."""
    if any(isinstance(line, TranscriptError) for line in lines):
        return AUTO, lines
    text = "\n".join(cast("list[str]", lines))
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return AUTO, lines
    from turnledger.replay.agent_transcripts import detect_agent_format

    found = detect_agent_format(value)
    if found is not None:
        return found, lines
    return AUTO, [compact_json(value)]


def _agent_format(line: Line) -> str | None:
    """The agent transcript format a file's first line says (None: one conversation a line)."""
    from turnledger.replay.agent_transcripts import detect_agent_format

    if isinstance(line, TranscriptError):
        return None
    try:
        return detect_agent_format(json.loads(line))
    except (ValueError, RecursionError):
        return None


def _read_agent(lines: Iterable[Line], fmt: str) -> Iterator[Conversation | TranscriptError]:
    """The sessions of a whole agent transcript, each checked as a line of its provider's
    format would be (nothing stored that no reader could give back)."""
    from turnledger.replay.agent_transcripts import read_agent_transcript

    base = {CLAUDE_CODE: "anthropic", CODEX: "responses", GEMINI_CLI: "gemini"}[fmt]
    for found in read_agent_transcript(lines, fmt):
        if isinstance(found, TranscriptError):
            yield found
            continue
        try:
            _check_given_back(None, found.history, base)
        except TranscriptError as exc:
            yield TranscriptError(f"{found.source_id or 'session'}: {exc.reason}",
                                  line=found.line)
            continue
        yield Conversation(found.line, found.raw, found.history, fmt, tuple(found.notes))


def _read(lines: Iterable[Line], fmt: str) -> Iterator[Conversation | TranscriptError]:
    for number, line in enumerate(lines, start=1):
        if isinstance(line, TranscriptError):
            yield line
            continue
        if not line.strip():
            continue
        try:
            raw, history, found = _parse(line, fmt)
        except TranscriptError as exc:
            yield TranscriptError(exc.reason, line=number)
            continue
        yield Conversation(number, raw, history, found)


def write_conversation(history: Sequence[ConversationMessage | ChatMessage], fmt: str) -> str:
    """One compact JSON line (no newline) of ``history`` in ``fmt``; same input, same bytes."""
    _check_format(fmt)
    return compact_json(_CODECS[fmt][1](history))


_FORMAT_API: Final = {"openai": API_OPENAI_CHAT, "anthropic": API_ANTHROPIC,
                      "responses": API_OPENAI_RESPONSES}
_API_NAMES: Final = {API_OPENAI_CHAT: "OpenAI Chat Completions", API_ANTHROPIC: "Anthropic",
                     API_OPENAI_RESPONSES: "OpenAI Responses"}


_CHANGES_RECORD: Final = Deciders(ChangesRecord)


def record_of(events: Iterable[DomainEvent]) -> list[ConversationMessage]:
    """A session's record (issue 21, E13): every message appended, in log order, a trailing
    tool call still waiting for its result included, except the messages popped
    (`MessagePopped`: the runtime took its append back). Nothing else changes the record: a
    `HistoryCleared` only empties the views, trims and the breadcrumb are the views' (R31), an
    orphan sweep hides from the views what the log keeps (R36), and a tool result truncated when
    it was recorded (R38) is recorded truncated. The events may come page by page."""
    kept: dict[int, ConversationMessage] = {}
    for event in events:
        if not _CHANGES_RECORD[event.__class__]:  # TypeError for a class nobody registered
            continue  # they change no message of the record (see above)
        changes = cast("ChangesRecord", event)
        match changes:
            case MessageAppended():
                kept[changes.position] = changes.message
            case MessagePopped():
                kept.pop(changes.position, None)
            case _:
                assert_never(changes)
    return [kept[position] for position in sorted(kept)]


def write_record(
    history: Sequence[ConversationMessage], fmt: str
) -> tuple[str, tuple[LeftOut, ...]]:
    """One JSONL line of ``history`` in ``fmt`` and what that format could not carry.

    A provider format is written by one writer, `render_body`, the one of request bodies
    (issue 36). A record of ``fmt`` itself (`_is_its_own`) is copied: its messages rendered
    as they are, so an imported session gives its line back. Any other record is first
    fitted to ``fmt``'s API as a request is (`fit_messages`: what it cannot carry left out, what
    has an equivalent translated, only the fields it defines kept), a call without its result
    left out too (R36, a trailing one waiting for it kept), and what was left out is said.
    Bedrock and Gemini have their own writers, which leave out and say what they cannot carry.
    """
    _check_format(fmt)
    if fmt == "bedrock":  # no request body of turnledger's: the format's own writer says
        body, left_out = to_bedrock_record(history)
        return compact_json(body), left_out
    if fmt == "gemini":  # its writer leaves out and says what has no genai part
        contents, left_out = to_genai_record(history)
        return compact_json(contents), left_out
    api = _FORMAT_API[fmt]
    messages = to_chat_messages(history)
    if _is_its_own(history, messages, fmt):
        return compact_json(render_body(messages, api)), ()
    answered, where, swept = _answered(messages, api)
    sent, left_out = fit_messages(answered, api)
    moved = tuple(attrs.evolve(entry, message=where[entry.message]) for entry in left_out)
    return compact_json(render_body(sent, api)), tuple(sorted(
        swept + moved, key=lambda entry: entry.message))


def write_view(view: Sequence[ChatMessage], fmt: str) -> tuple[str, tuple[LeftOut, ...]]:
    """`write_record` of a view's messages (``export --view chat``: what the model sees)."""
    return write_record(from_chat_messages(view), fmt)


def _is_its_own(history: Sequence[ConversationMessage], messages: list[ChatMessage],
                fmt: str) -> bool:
    """Whether ``history`` is a record of ``fmt`` that its export copies (issue 36): it is
    the format's own (`is_its_own`) and the format's writer and reader give it back exactly.
    Any other record is written by the one writer of the format's requests (`fit_messages`,
    `render_body`), as `PreparedRequest.body` writes it."""
    if not is_its_own(messages, _FORMAT_API[fmt]):
        return False
    importer, exporter, _ = _CODECS[fmt]
    try:
        return importer(json.loads(compact_json(exporter(history)))) == list(history)
    except (TranscriptError, InvalidMessage):
        return False


def _answered(
    messages: list[ChatMessage], api: str
) -> tuple[list[ChatMessage], list[int], tuple[LeftOut, ...]]:
    """``messages`` without the tool calls no result answers and the results no call made
    (the orphan sweep, R36: every provider refuses both), a trailing call still waiting for
    its result kept; where each kept message was, and what was left out."""
    pending = bool(messages) and chat_tool_calls(messages[-1]) is not None
    head = messages[:-1] if pending else messages
    swept = sweep_orphans(head)
    if not swept.orphan_tool_call_ids:
        return messages, list(range(len(messages))), ()
    removed = set(swept.removed_indices)
    rewritten = dict(swept.rewritten)
    where = [i for i in range(len(head)) if i not in removed]
    if pending:
        where.append(len(messages) - 1)
    left: list[LeftOut] = []
    for index in sorted(removed | set(rewritten)):
        message = head[index]
        answer = chat_tool_call_id(message)
        if answer is not None or message.role == "tool":
            left.append(LeftOut(index, f"tool result {answer or '(no id)'}",
                                "it answers no recorded call"))
            continue
        kept = set(_call_ids(rewritten.get(index)))
        ids = [i for i in _call_ids(message) if i not in kept]
        left.append(LeftOut(index, f"tool call {', '.join(ids)}",
                            f"no result was recorded for it, and {_API_NAMES[api]} refuses a "
                            "call without its result"))
    return [rewritten.get(i, m) for i, m in enumerate(messages) if i not in removed], where, (
        tuple(left))


def _call_ids(message: ChatMessage | None) -> list[str]:
    calls = chat_tool_calls(message) if message is not None else None
    return [call.id for call in calls[1]] if calls else []


def changes(conversation: Conversation, fmt: str) -> list[str]:
    """What ``export`` would not give back of this line; empty when it gives it back exactly."""
    if fmt in AGENT_FORMATS:  # no writing it back: what its reader said it left
        return list(conversation.notes)
    _check_format(fmt)
    body = _messages_of(conversation.raw, fmt)
    found: list[str] = []
    if body is not conversation.raw and isinstance(conversation.raw, dict):
        others = sorted(k for k in conversation.raw if k != _CODECS[fmt][2])
        if others:
            found.append(f"not recorded (request fields, not messages): {', '.join(others)}")
    elif fmt == "bedrock" and isinstance(body, dict):  # a Converse request as sent
        others = sorted(k for k in body if k not in ("system", "messages"))
        if others:
            found.append(f"not recorded (request fields, not messages): {', '.join(others)}")
        body = {k: v for k, v in body.items() if k == "messages" or (k == "system" and v)}
    elif isinstance(body, list) and fmt in ("anthropic", "bedrock"):
        found.append("a bare list of messages is exported as {\"messages\": [...]}")
        body = {"messages": body}
    if fmt == "gemini" and snake_case_contents(body) != body:
        found.append("the REST API's camelCase field names are exported as google-genai's "
                     "snake_case (functionCall as function_call)")
        body = snake_case_contents(body)
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
