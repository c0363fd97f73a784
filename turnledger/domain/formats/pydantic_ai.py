"""pydantic-ai ``ModelRequest`` / ``ModelResponse`` JSON ⇄ turnledger messages, losslessly
(ADR-0081).

The JSON is pydantic-ai's own (``ModelMessagesTypeAdapter``'s form); the integration
(`turnledger.integrations.pydantic_ai`) dumps and validates the objects. A request becomes one
message per run of parts (a system prompt, a user prompt — its multimodal content as typed
blocks, images as `ImageBlock` — the tool returns as one `ToolResults`, a retry feedback as a
``[Tool results]`` carrier of the same turn, R2); a response becomes one assistant message
(text, thinking and opaque parts as blocks, tool calls as `ToolCall`). Every field turnledger
does not interpret is kept beside it under ``"pydantic_ai"``; a part kind with no turnledger
form is refused by name (`InvalidMessage`), never dropped.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from turnledger.domain.blocks import (
    ContentBlock,
    ImageBlock,
    OpaqueBlock,
    TextBlock,
    ThinkingBlock,
    canonical_json,
)
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.formats import (
    Json,
    Keyed,
    Piece,
    assistant_blocks,
    conversation_of,
    grouped,
    user_side,
)
from turnledger.domain.messages import (
    TOOL_RESULTS_PREFIX,
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    compact_json,
)

__all__ = [
    "from_pydantic_ai_json",
    "from_pydantic_ai_message",
    "pydantic_ai_groups",
    "pydantic_ai_message_json",
    "pydantic_ai_opens",
    "to_pydantic_ai_json",
]

_KEYED = Keyed("pydantic_ai")
_ns, _fields = _KEYED.text, _KEYED.fields
_CARRIER = TOOL_RESULTS_PREFIX + "\n"  # a retry feedback continues its turn (R2)
_EPOCH = "1970-01-01T00:00:00Z"  # the breadcrumb's time when its request has none

# Response parts with no client-side counterpart: kept whole, as opaque blocks (a server tool
# call carries its own return; a file, a compaction or a speech part is content).
_OPAQUE_RESPONSE_KINDS = frozenset({
    "builtin-tool-call", "builtin-tool-return", "compaction", "file", "speech",
})
# Items of a user prompt's content kept whole, as opaque blocks.
_OPAQUE_USER_ITEMS = frozenset({
    "audio-url", "video-url", "document-url", "binary", "uploaded-file", "cache-point",
    "structured-content",
})


def _json_text(value: Any) -> tuple[str, bool]:
    """(text, was it JSON): a str as it is, any other value as its compact JSON."""
    return (value, False) if isinstance(value, str) else (compact_json(value), True)


# --- pydantic-ai -> turnledger ----------------------------------------------------------------


def _user_block(item: Any, where: str) -> ContentBlock:
    if isinstance(item, str):
        return TextBlock(item)
    kind = item.get("kind") if isinstance(item, dict) else None
    rest = dict(item) if isinstance(item, dict) else {}
    if kind == "text-content":
        return TextBlock(rest.pop("content"), extra=_ns(rest))
    if kind == "image-url":
        return ImageBlock(rest.pop("url"), extra=_ns(rest))
    if kind == "binary" and str(rest.get("media_type", "")).startswith("image/"):
        data, media_type = rest.pop("data"), rest.pop("media_type")
        return ImageBlock(data=data, media_type=media_type, extra=_ns(rest))
    if kind in _OPAQUE_USER_ITEMS:
        return OpaqueBlock(canonical_json({_KEYED.key: item}))
    raise InvalidMessage(f"{where}: user content of kind {kind!r} has no turnledger form; "
                         "it was not recorded")


def _request_piece(part: Json, where: str) -> ConversationMessage | ToolResult:
    kind = part.pop("part_kind")
    if kind == "system-prompt":
        return Chat(ChatMessage("system", part.pop("content"), extra=_ns(part)))
    if kind == "user-prompt":
        content = part.pop("content")
        if isinstance(content, str):
            return Chat(ChatMessage("user", content, extra=_ns(part)))
        blocks = [_user_block(item, f"{where}.content[{i}]") for i, item in enumerate(content)]
        return Chat(ChatMessage.from_blocks("user", blocks, extra=_ns(part)))
    if kind == "tool-return":
        text, was_json = _json_text(part.pop("content", None))
        call_id, name = part.pop("tool_call_id"), part.pop("tool_name")
        return ToolResult(call_id, text, name, extra=_ns(part | {"json_content": was_json}))
    if kind == "retry-feedback":
        text, was_json = _json_text(part.pop("content"))
        fields = part | {"json_content": was_json}
        return Chat(ChatMessage("user", _CARRIER + text, extra=_ns(fields)))
    raise InvalidMessage(f"{where}: a request part of kind {kind!r} has no turnledger form; "
                         "it was not recorded")


def _with_header(piece: ConversationMessage | ToolResult, header: Json) -> Any:
    """``piece`` carrying its request's own fields: the first piece of each request does."""
    if isinstance(piece, ToolResult):
        fields = _fields(piece.extra) | {"request": header}
        return ToolResult(piece.tool_call_id, piece.content, piece.tool_name,
                          extra=_ns(fields))
    assert isinstance(piece, Chat)  # a request's pieces are chats and tool results
    message = piece.message
    return Chat(ChatMessage(message.role, message.content, blocks=message.blocks,
                            extra=_ns(_fields(message.extra) | {"request": header}),
                            envelope=message.envelope))


def _from_request(raw: Json, where: str) -> list[ConversationMessage]:
    parts = raw.pop("parts")
    if not parts:
        raise InvalidMessage(f"{where}: a ModelRequest without parts has no turnledger form")
    out: list[ConversationMessage] = []
    results: list[ToolResult] = []
    for i, part in enumerate(parts):
        piece = _request_piece(dict(part), f"{where}.parts[{i}]")
        if i == 0:
            piece = _with_header(piece, raw)
        if isinstance(piece, ToolResult):
            results.append(piece)
            continue
        if results:
            out.append(ToolResults(tuple(results)))
            results = []
        out.append(piece)
    if results:
        out.append(ToolResults(tuple(results)))
    return out


def _response_block(part: Json, where: str) -> ContentBlock | ToolCall:
    kind = part.pop("part_kind")
    if kind == "text":
        return TextBlock(part.pop("content"), extra=_ns(part))
    if kind == "thinking":
        signature = part.pop("signature", None)
        if signature == "":
            part["signature"] = ""  # an explicit empty signature stays explicit
        return ThinkingBlock(part.pop("content"), signature or "", extra=_ns(part))
    if kind == "tool-call":
        args = part.pop("args", None)
        form = "none" if args is None else "text" if isinstance(args, str) else "object"
        arguments = "{}" if args is None else _json_text(args)[0]
        return ToolCall(part.pop("tool_call_id"), part.pop("tool_name"), arguments,
                        extra=_ns(part | {"args": form}))
    if kind in _OPAQUE_RESPONSE_KINDS:
        return OpaqueBlock(canonical_json({_KEYED.key: part | {"part_kind": kind}}))
    raise InvalidMessage(f"{where}: a response part of kind {kind!r} has no turnledger form; "
                         "it was not recorded")


def _from_response(raw: Json, where: str) -> ConversationMessage:
    blocks = [_response_block(dict(p), f"{where}.parts[{i}]")
              for i, p in enumerate(raw.pop("parts"))]
    extra = _ns({"response": raw})
    if any(isinstance(b, ToolCall) for b in blocks):
        return AssistantToolCalls.from_blocks(blocks, extra=extra)
    content = [b for b in blocks if not isinstance(b, ToolCall)]
    return Chat(ChatMessage.from_blocks("assistant", content, extra=extra))


def from_pydantic_ai_message(raw: Json, where: str = "message") -> list[ConversationMessage]:
    """The turnledger messages of one message's JSON; `InvalidMessage` names ``where`` (and
    the part) when it is no request or response or holds a kind with no turnledger form."""
    raw = dict(raw)
    kind = raw.get("kind")
    if kind == "request":
        return _from_request(raw, where)
    if kind == "response":
        return [_from_response(raw, where)]
    raise InvalidMessage(f"{where}: not a pydantic-ai ModelRequest or ModelResponse")


def from_pydantic_ai_json(messages: Iterable[Json]) -> list[ConversationMessage]:
    """The turnledger messages of pydantic-ai messages' JSON (module doc)."""
    return [converted for i, raw in enumerate(messages)
            for converted in from_pydantic_ai_message(raw, f"messages[{i}]")]


# --- turnledger -> pydantic-ai ----------------------------------------------------------------


def _user_item(block: ContentBlock) -> Any:
    rest = _fields(block.extra) if not isinstance(block, OpaqueBlock) else {}
    match block:
        case TextBlock(text=text):
            return rest | {"content": text} if rest else text
        case ImageBlock(url=url) if url:
            return rest | {"url": url}
        case ImageBlock():
            return rest | {"data": block.data, "media_type": block.media_type}
        case OpaqueBlock():
            return _fields(block.json)
    raise InvalidMessage(f"a {type(block).__name__} has no pydantic-ai user content form")


def _request_part(message: ChatMessage) -> Json:
    fields = _fields(message.extra)
    fields.pop("request", None)
    if message.synthetic or (message.role == "user" and not fields):  # breadcrumb, plain user
        return {"part_kind": "user-prompt", "content": message.content}
    if message.role == "system":
        return fields | {"part_kind": "system-prompt", "content": message.content}
    if message.content.startswith(_CARRIER) and "json_content" in fields:
        text = message.content[len(_CARRIER):]
        feedback = json.loads(text) if fields.pop("json_content") else text
        return fields | {"part_kind": "retry-feedback", "content": feedback}
    content: Any = ([_user_item(b) for b in message.blocks] if message.blocks
                    else message.content)
    return fields | {"part_kind": "user-prompt", "content": content}


def _return_part(result: ToolResult) -> Json:
    fields = _fields(result.extra)
    fields.pop("request", None)
    was_json = fields.pop("json_content", False)
    content = json.loads(result.content) if was_json else result.content
    return fields | {"part_kind": "tool-return", "tool_call_id": result.tool_call_id,
                     "tool_name": result.tool_name, "content": content}


def _response_part(block: ContentBlock | ToolCall) -> Json:
    match block:
        case ToolCall():
            fields = _fields(block.extra)
            form = fields.pop("args", "text")
            args = (None if form == "none" else json.loads(block.arguments) if form == "object"
                    else block.arguments)
            return fields | {"part_kind": "tool-call", "tool_call_id": block.id,
                             "tool_name": block.name, "args": args}
        case TextBlock(text=text):
            return _fields(block.extra) | {"part_kind": "text", "content": text}
        case ThinkingBlock(thinking=thinking, signature=signature):
            part = {"part_kind": "thinking", "content": thinking}
            if signature:
                part["signature"] = signature
            return part | _fields(block.extra)
        case OpaqueBlock():
            return _fields(block.json)
    raise InvalidMessage(f"a {type(block).__name__} has no pydantic-ai response part form")


def _response(message: ConversationMessage) -> Json:
    blocks: list[ContentBlock | ToolCall]
    if isinstance(message, AssistantToolCalls):
        extra, blocks = message.extra, assistant_blocks(message)
    else:
        assert isinstance(message, Chat)  # the other messages of a window are requests'
        extra, blocks = message.message.extra, list(message.message.blocks)
        if not blocks and message.message.content:  # recorded by another runtime: its text
            blocks = [TextBlock(message.message.content)]
    header: Json = _fields(extra).get("response", {})
    return header | {"kind": "response", "parts": [_response_part(b) for b in blocks]}


@functools.lru_cache(maxsize=4096)
def pydantic_ai_opens(extra: str) -> bool:
    """Whether a request part with this ``extra`` starts a request of its own (it carries
    that request's fields); memoised: a window is grouped again at every model call."""
    return _fields(extra).get("request") is not None


def pydantic_ai_groups(conversation: Sequence[ConversationMessage]) -> list[tuple[Piece, ...]]:
    """The pieces of each pydantic-ai message ``conversation`` makes (`grouped`)."""
    return grouped(conversation, pydantic_ai_opens)


def pydantic_ai_message_json(pieces: tuple[Piece, ...]) -> Json:
    """pydantic-ai's JSON of the message built from ``pieces`` (`pydantic_ai_groups`); a
    request takes the fields its first piece carries (none for the breadcrumb)."""
    first, index = pieces[0]
    if not user_side(first):
        return _response(first)
    if isinstance(first, ToolResults):
        extra = first.results[index].extra
    else:
        assert isinstance(first, Chat)
        extra = "" if first.message.synthetic else first.message.extra
    request: Json = (_fields(extra).get("request") or {}) | {"kind": "request", "parts": []}
    for message, i in pieces:
        if isinstance(message, ToolResults):
            request["parts"].append(_return_part(message.results[i]))
            continue
        assert isinstance(message, Chat)
        part = _request_part(message.message)
        if message.message.synthetic:  # the same window gives the same JSON (E12)
            part["timestamp"] = request.get("timestamp") or _EPOCH
        request["parts"].append(part)
    return request


def to_pydantic_ai_json(history: Iterable[ChatMessage | ConversationMessage]) -> list[Json]:
    """pydantic-ai's JSON of a turnledger window or history (the inverse of
    `from_pydantic_ai_json`); the breadcrumb is a user prompt of the request it opens.
    Messages another runtime recorded come back as the plain parts of their role."""
    groups = pydantic_ai_groups(conversation_of(list(history)))
    return [pydantic_ai_message_json(group) for group in groups]
