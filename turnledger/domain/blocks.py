"""Typed content blocks: what a provider message holds, kept as the provider sent it.

A message's content is a string or a sequence of blocks. turnledger interprets the fields it
needs (a text, an image reference, a thinking text and its signature, ...) and keeps every other
field of a block verbatim in ``extra``: the canonical JSON text of an object (sorted keys, compact,
non-ASCII kept), ``""`` when there is none. A block of a type nobody knows yet is an
`OpaqueBlock` holding its whole JSON: it never rejects a conversation.

Each block has a `block_text`: what the token estimate and the rules see (R20-R23). Text
and thinking are text; an image is an ``[IMAGE:ref]`` marker (so a user image keeps the fixed
1,600 cost of R21, and a tool result's images are its attachments, R22); a document, a server tool
call or result and an opaque block count by their JSON bytes.

The tool call and tool result blocks are `turnledger.domain.messages.ToolCall` and
``ToolResult``, which these blocks complete.
"""

from __future__ import annotations

import functools
import json
import json.encoder
import math
import re
from collections.abc import Mapping
from typing import Any, Final, TypeAlias

import attrs

from turnledger.domain.errors import InvalidMessage

__all__ = [
    "BLOCK_TAGS",
    "ContentBlock",
    "DocumentBlock",
    "ImageBlock",
    "OpaqueBlock",
    "RedactedThinkingBlock",
    "ServerToolResult",
    "ServerToolUse",
    "TextBlock",
    "ThinkingBlock",
    "block_json_texts",
    "block_text",
    "canonical_flat_object",
    "canonical_json",
    "canonical_text",
    "check_finite_json",
    "check_object_text",
    "extra_fields",
    "extra_text",
]


class _CanonicalText(str):
    """A text `canonical_json` wrote: already canonical, so `canonical_text` need not parse and
    write it again (canonical JSON is a fixed point of parsing then writing it)."""

    __slots__ = ()


def canonical_json(value: object) -> str:
    """``value`` as canonical JSON text: sorted keys, compact, non-ASCII kept.

    Equal JSON values give equal texts, so values holding it compare and hash by content.
    Raises `InvalidMessage` naming the place of what is no JSON value (``bytes``, a set, an
    object, ...), where ``json`` raised a bare `TypeError` (issue 33).
    """
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as error:  # ValueError: a circular reference
        raise InvalidMessage(f"not a JSON value: {_not_json(value) or error}") from None
    return _CanonicalText(text)


def _not_json(value: object, path: str = "") -> str | None:
    """Where ``value`` holds what `canonical_json` cannot write (``"meta is bytes"``); None
    when it finds no such leaf (a circular reference, keys of mixed types)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if not isinstance(key, str | int | float | bool) and key is not None:
                return f"a key of {path or 'the value'} is {type(key).__name__}"
            found = _not_json(inner, f"{path}.{key}" if path else str(key))
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, inner in enumerate(value):
            found = _not_json(inner, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(value, str | int | float | bool) or value is None:
        return None
    return f"{path or 'the value'} is {type(value).__name__}"


def canonical_flat_object(fields: list[tuple[str, str]]) -> str:
    """`canonical_json` of an object whose fields are given as (name, the JSON text of its
    value), names unique and each value written as `canonical_json` would (a string through
    ``json``'s own writer, ``[]``): the same text, without building and dumping a dict.
    Sorts ``fields`` in place. ``""`` for no field, as `extra_text` gives."""
    if not fields:
        return ""
    fields.sort()  # by name, as canonical_json sorts the keys
    write = json.encoder.encode_basestring
    return _CanonicalText("{" + ",".join([f"{write(n)}:{v}" for n, v in fields]) + "}")


def extra_text(fields: Mapping[str, Any]) -> str:
    """The ``extra`` text of the uninterpreted fields ``fields``: ``""`` when there is none."""
    return canonical_json(dict(fields)) if fields else ""


def extra_fields(extra: str) -> dict[str, Any]:
    """The fields an ``extra`` text holds, as a new dict (empty for ``""``)."""
    if not extra:
        return {}
    if len(extra) <= _FLAT_TEXT_MOST:
        flat = _flat_fields(extra)
        if flat is not None:
            return dict(flat)
    value = json.loads(extra)
    if not isinstance(value, dict):
        raise InvalidMessage("extra must be the JSON text of an object")
    return value


_FLAT_TEXT_MOST: Final = 512
"""The longest ``extra`` text `_flat_fields` remembers (an item's id, type and status)."""


@functools.lru_cache(maxsize=4096)
def _flat_fields(extra: str) -> Mapping[str, Any] | None:
    """The fields of a short ``extra`` text whose values are all scalars (a copy of them is
    the whole value, so it can be shared), else None. The same few texts (an item's ``type``
    and ``status``) are read for every message of every body; parsing each again was a third
    of building a request body."""
    try:
        value = json.loads(extra)
    except ValueError:
        return None
    if not isinstance(value, dict) or not all(
        v is None or isinstance(v, str | int | float | bool) for v in value.values()
    ):
        return None
    return value


def canonical_text(text: str) -> str:
    """A JSON text in canonical form (`canonical_json`); ``""`` stays ``""``.

    The converter of every field that holds JSON text, so equal JSON gives equal values.
    Raises `InvalidMessage` for a text that is not JSON.
    """
    if not isinstance(text, str) or not text:
        return text
    if type(text) is _CanonicalText:  # written by canonical_json: a plain str of it suffices
        return str.__str__(text)
    short = len(text) <= _MEMO_CHARS
    if short:
        known = _CANONICAL.get(text)
        if known is not None:
            return known
    try:
        canonical = str.__str__(canonical_json(json.loads(text)))
    except (ValueError, RecursionError) as exc:
        raise InvalidMessage(f"not JSON text: {text[:60]!r}") from exc
    if short:
        if len(_CANONICAL) >= _MEMO_SIZE:
            _CANONICAL.clear()  # one atomic step: threads may convert meanwhile
        _CANONICAL[text] = canonical
        _CANONICAL[canonical] = canonical
    return canonical


_MEMO_CHARS = 256
_MEMO_SIZE = 8192
_CANONICAL: dict[str, str] = {}
"""`canonical_text`'s memo of short texts (an item id, a status, small tool arguments): text
-> its canonical form, and that form -> itself. Decoding a record converts the JSON texts it
holds again, the same ones in every message object built from it and at every restore of the
session; a text already canonical but not written by `canonical_json` in this process (read
back from a record) costs a parse and a write each time, ~18 % of a restore at 100 turns. A
pure function's memo: the same answer, or the same `InvalidMessage` (errors are not kept).
At most `_MEMO_SIZE` entries of `_MEMO_CHARS` characters or fewer (a few MB); emptied when
full."""


def _json_field(default: str = "") -> Any:
    return attrs.field(default=default, kw_only=True, converter=canonical_text)


def _check_str(owner: str, **fields: object) -> None:
    for name, value in fields.items():
        if not isinstance(value, str):
            raise InvalidMessage(f"{owner}.{name} must be a str, got {type(value).__name__}")


def _check_extra(owner: str, extra: object) -> None:
    _check_str(owner, extra=extra)
    check_object_text(f"{owner}.extra", str(extra))


def check_object_text(field: str, text: str) -> None:
    """`InvalidMessage` naming ``field`` unless ``text`` (already JSON, `canonical_text`) is an
    object's or empty: what every ``extra`` holds, merged into an object by the writers."""
    if text and not text.startswith("{"):
        raise InvalidMessage(f"{field} must be the JSON text of an object or empty")


class _NonFinite(ValueError):
    """What `check_finite_json`'s parser raises at a NaN or an infinity."""


_MAY_NOT_BE_FINITE: Final = re.compile(r"NaN|Infinity|[eE]\+?\d{3}|\d{309}")
"""What a JSON text holding NaN or an infinity contains: the words, or a number too large for
a float (an exponent of three digits, or 309 digits before the point); a text without any
needs no parse."""


def _refuse_constant(token: str) -> Any:
    raise _NonFinite(token)


def _finite_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):  # ``1e999``: json reads it as an infinity
        raise _NonFinite(token)
    return value


def check_finite_json(field: str, text: str, *, canonical: bool = True) -> None:
    """`InvalidMessage` naming ``field`` and the place inside it when the JSON text ``text``
    holds NaN or an infinity (ADR-0099): Python's ``json`` reads and writes them, no
    provider's parser takes them, so every later request of the session would fail.

    Run when a message is appended (`messages.check_appended`), never when a record is
    decoded: records stored before stay readable. ``canonical``: ``text`` is `canonical_text`
    (an infinity is then written ``Infinity``, so texts without the words need no parse);
    False for tool-call arguments, kept as the model wrote them. A text that is no JSON at
    all passes (malformed arguments are what the model said, ADR-0096)."""
    if not text or (
        "NaN" not in text and "Infinity" not in text
        if canonical else _MAY_NOT_BE_FINITE.search(text) is None
    ):
        return
    try:
        json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NonFinite as found:
        where = _non_finite(json.loads(text))
        at = f" at {where}" if where else ""
        raise InvalidMessage(f"{field} holds {found}{at}: NaN and infinities are not JSON "
                             "values (no provider reads them)") from None
    except (ValueError, RecursionError):
        return


def _non_finite(value: object, path: str = "") -> str | None:
    """The place of the first NaN or infinity in a parsed JSON value ("" for the value)."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    if isinstance(value, dict):
        items: Any = ((f"{path}.{k}" if path else k, v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for place, inner in items:
        found = _non_finite(inner, place)
        if found is not None:
            return found
    return None


def block_json_texts(owner: str, block: ContentBlock) -> list[tuple[str, str]]:
    """(field, JSON text) of every JSON field of ``block`` (its ``extra``, an opaque block's
    JSON, a document's source, a server tool's input or content), fields named under
    ``owner``: what `check_finite_json` reads of a block."""
    match block:
        case OpaqueBlock(json=raw):
            return [(f"{owner}.json", raw)]
        case DocumentBlock(source=source, extra=extra):
            return [(f"{owner}.source", source), (f"{owner}.extra", extra)]
        case ServerToolUse(input=value, extra=extra):
            return [(f"{owner}.input", value), (f"{owner}.extra", extra)]
        case ServerToolResult(content=content, extra=extra):
            return [(f"{owner}.content", content), (f"{owner}.extra", extra)]
    return [(f"{owner}.extra", block.extra)]


@attrs.frozen
class TextBlock:
    """A text block (OpenAI ``text``/``input_text``/``output_text``, Anthropic ``text``)."""

    text: str
    extra: str = _json_field()

    def __attrs_post_init__(self) -> None:
        _check_str("text_block", text=self.text)
        _check_extra("text_block", self.extra)


@attrs.frozen
class ImageBlock:
    """An image: by ``url``, or inline as base64 ``data`` with its ``media_type``.

    ``ref`` is what the estimate and the views see: the URL, or a ``data:`` URL of the inline
    image (both loadable, R21).
    """

    url: str = ""
    media_type: str = attrs.field(default="", kw_only=True)
    data: str = attrs.field(default="", kw_only=True)
    extra: str = _json_field()

    def __attrs_post_init__(self) -> None:
        _check_str("image_block", url=self.url, media_type=self.media_type, data=self.data)
        _check_extra("image_block", self.extra)
        if bool(self.url) == bool(self.data):
            raise InvalidMessage("image_block needs a url or base64 data, not both")

    @property
    def ref(self) -> str:
        return self.url or f"data:{self.media_type};base64,{self.data}"


@attrs.frozen
class DocumentBlock:
    """A document (a PDF, a text file, ...); ``source`` is the JSON text of its source."""

    source: str = attrs.field(converter=canonical_text)
    extra: str = _json_field()

    def __attrs_post_init__(self) -> None:
        _check_str("document_block", source=self.source)
        _check_extra("document_block", self.extra)


@attrs.frozen
class ThinkingBlock:
    """A model's thinking text and the ``signature`` the provider needs to get it back."""

    thinking: str
    signature: str = ""
    extra: str = _json_field()

    def __attrs_post_init__(self) -> None:
        _check_str("thinking_block", thinking=self.thinking, signature=self.signature)
        _check_extra("thinking_block", self.extra)


@attrs.frozen
class RedactedThinkingBlock:
    """Thinking the provider encrypted (``data``), sent back as it came."""

    data: str
    extra: str = _json_field()

    def __attrs_post_init__(self) -> None:
        _check_str("redacted_thinking_block", data=self.data)
        _check_extra("redacted_thinking_block", self.extra)


@attrs.frozen
class ServerToolUse:
    """A tool the provider ran itself (Anthropic ``server_tool_use``); ``input`` is JSON text.

    No client result answers it, so the orphan sweep never pairs it (R36).
    """

    id: str
    name: str
    input: str = attrs.field(default="{}", converter=canonical_text)
    extra: str = _json_field()

    def __attrs_post_init__(self) -> None:
        _check_str("server_tool_use", id=self.id, name=self.name, input=self.input)
        _check_extra("server_tool_use", self.extra)


@attrs.frozen
class ServerToolResult:
    """The result of a server tool (``type`` such as ``web_search_tool_result``).

    ``content`` is the JSON text of its content.
    """

    type: str
    tool_use_id: str
    content: str = attrs.field(converter=canonical_text)
    extra: str = _json_field()

    def __attrs_post_init__(self) -> None:
        _check_str("server_tool_result", type=self.type, tool_use_id=self.tool_use_id,
                   content=self.content)
        _check_extra("server_tool_result", self.extra)


@attrs.frozen
class OpaqueBlock:
    """A block of a type turnledger does not know: ``json`` is its canonical JSON text."""

    json: str = attrs.field(converter=canonical_text)

    def __attrs_post_init__(self) -> None:
        _check_str("opaque_block", json=self.json)
        if not self.json.startswith("{"):
            raise InvalidMessage("opaque_block.json must be the JSON text of an object")

    @property
    def type(self) -> str:
        kind = extra_fields(self.json).get("type")
        return kind if isinstance(kind, str) else ""


ContentBlock: TypeAlias = (
    TextBlock
    | ImageBlock
    | DocumentBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ServerToolUse
    | ServerToolResult
    | OpaqueBlock
)

BLOCK_TAGS: Final[Mapping[type, str]] = {
    TextBlock: "text",
    ImageBlock: "image",
    DocumentBlock: "document",
    ThinkingBlock: "thinking",
    RedactedThinkingBlock: "redacted_thinking",
    ServerToolUse: "server_tool_use",
    ServerToolResult: "server_tool_result",
    OpaqueBlock: "opaque",
}
"""The stable tag of each block class in stored records. Never change a value."""


def block_text(block: ContentBlock) -> str:
    """What the estimate and the rules see of one block (R20-R23)."""
    match block:
        case TextBlock(text=text):
            return text
        case ThinkingBlock(thinking=thinking):
            return thinking
        case ImageBlock():
            return f"[IMAGE:{block.ref}]"
        case RedactedThinkingBlock(data=data):
            return data
        case DocumentBlock(source=source):
            return source
        case ServerToolUse(input=value):
            return value
        case ServerToolResult(content=content):
            return content
        case OpaqueBlock(json=raw):
            return raw
    raise InvalidMessage(f"not a content block: {type(block).__name__}")
