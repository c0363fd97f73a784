"""Provider conversions: turnledger histories <-> the message formats of provider APIs.

Three formats, both directions, for plain dicts and for provider SDK objects (anything with a
``model_dump()`` method is read through it):

- OpenAI Chat Completions ``messages`` (`from_openai_chat`, `to_openai_chat`);
- Anthropic Messages ``system`` + ``messages`` (`from_anthropic`, `to_anthropic`);
- OpenAI Responses input items (`from_openai_responses`, `to_openai_responses`), as the OpenAI
  Agents SDK keeps them.

Import (``from_*``) builds the structured history (`ConversationMessage`); export (``to_*``)
takes a structured history or a provider-facing chat view (`ChatMessage`, e.g.
``PreparedRequest.messages``). Nothing is dropped: a content list becomes typed blocks
(`turnledger.domain.blocks`), every field turnledger does not interpret is kept verbatim
(``extra``) and written back, a block of an unknown type is kept whole (`OpaqueBlock`). So, for
a history ``h`` this format can express and a ``raw`` value in the format's normal form:

    from_X(to_X(h)) == h        to_X(from_X(raw)) == raw   (JSON-equal)

The normal form is what the provider documents: OpenAI tool calls carry ``"type": "function"``;
an Anthropic user message holds its ``tool_result`` blocks first, and two consecutive user
messages are one (the API combines them: the blocks that follow tool results in one message are
imported as the user message that follows them, and exported back into that message, while a
user message whose content is a string stays a message of its own); the
Anthropic ``system`` is one value. Converting from one format to another keeps what the target
can express (a block it has no type for is written in the Anthropic shape).

Bad input raises `TranscriptError` (an `InvalidMessage`, E11) naming the message index (0-based)
and the field. Nothing here does I/O.
"""

from __future__ import annotations

import json
import json.encoder
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeGuard, TypeVar

from turnledger.domain.blocks import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    OpaqueBlock,
    RedactedThinkingBlock,
    ServerToolResult,
    ServerToolUse,
    TextBlock,
    ThinkingBlock,
    canonical_flat_object,
    canonical_json,
    extra_fields,
    extra_text,
)
from turnledger.domain.errors import InvalidMessage, TranscriptError
from turnledger.domain.estimate import image_markers
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    assistant_blocks,
    compact_json,
    from_chat_messages,
    to_chat_messages,
)

__all__ = [
    "CUSTOM_CALL",
    "CUSTOM_OUTPUT",
    "TranscriptError",
    "block_json",
    "declared_images",
    "exact_openai_responses_item",
    "from_anthropic",
    "from_openai_chat",
    "from_openai_responses",
    "from_openai_responses_item",
    "is_custom_call",
    "marker_blocks",
    "plain",
    "structured_item",
    "to_anthropic",
    "to_anthropic_marked",
    "to_openai_chat",
    "to_openai_responses",
]

Json = dict[str, Any]
_T = TypeVar("_T")
_RAW_ARGUMENTS_KEY: Final = "_raw"


# --- shared ---------------------------------------------------------------------------------


def plain(value: object) -> Any:
    """``value`` as plain JSON data: an SDK object through ``model_dump()``, lists element-wise."""
    if type(value) is dict:  # the common case, and a dict has no model_dump
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json", exclude_unset=True)
        except TypeError:
            return dump()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


class _Where:
    """Builds error texts that name the message index and the field path."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def error(self, text: str) -> TranscriptError:
        return TranscriptError(f"{self.prefix}: {text}" if self.prefix else text)

    def obj(self, value: object, path: str) -> Json:
        if not isinstance(value, dict):
            raise self.error(f"{path} must be an object, got {_type_name(value)}")
        return value

    def text(self, obj: Json, path: str, key: str, *, empty: bool = True) -> str:
        full = f"{path}.{key}" if path else key
        if key not in obj:
            raise self.error(f"{full} missing")
        value = obj[key]
        if not isinstance(value, str):
            raise self.error(f"{full} must be a string, got {_type_name(value)}")
        if not empty and not value:
            raise self.error(f"{full} must not be empty")
        return value

    def build(self, path: str, make: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Call a domain constructor; its InvalidMessage gains the message index and path."""
        try:
            return make(*args, **kwargs)
        except TranscriptError:
            raise
        except InvalidMessage as exc:
            raise self.error(f"{path}: {exc}" if path else str(exc)) from exc


def _rest(obj: Json, *interpreted: str) -> str:
    """The ``extra`` text of ``obj``: every key not interpreted, and any interpreted one that
    holds null (kept verbatim, since the interpretation has no null)."""
    return extra_text(
        {k: v for k, v in obj.items() if k not in interpreted or v is None}
    )


_STRUCTURAL: Final = frozenset({"content", "tool_calls", "tool_call_id", "call_id",
                                 "tool_use_id"})
"""The fields that say what a message says and which calls it makes or answers. An importer
keeps one in ``extra`` only when it held null (`_rest`). (Not ``role``: OpenAI's
``developer`` is a system message whose extra keeps its role.)"""


def _with(base: Json, extra: str, *, nulls: bool = True) -> Json:
    """``base`` updated with the fields kept in ``extra`` (which win), except over a field
    ``base`` writes: a structural one (`_STRUCTURAL`) only a kept null replaces (an ``extra``
    built by hand with a ``content`` or a ``tool_call_id`` must not replace what the message
    says or the call it answers), and with ``nulls`` False no null does: a writer for messages
    another format may have recorded (OpenAI's ``"content": null`` beside tool calls is kept
    for OpenAI's exact form; in an Anthropic message it would erase the ``tool_use`` blocks)."""
    if extra:
        for key, value in extra_fields(extra).items():
            if key in base and (key in _STRUCTURAL if value is not None else not nulls):
                continue
            base[key] = value
    return base


def _typed(obj: Json, default: str, *interpreted: str) -> str:
    """Like `_rest`, keeping ``type`` in the extra only when it is not ``default``."""
    extra = {k: v for k, v in obj.items() if k not in interpreted or v is None}
    if extra.get("type") == default:
        del extra["type"]
    return extra_text(extra)


def _arguments_of(value: object) -> str:
    """An Anthropic ``input`` object as JSON text (a wrapped non-object comes back as it was)."""
    if isinstance(value, dict) and list(value) == [_RAW_ARGUMENTS_KEY]:
        raw = value[_RAW_ARGUMENTS_KEY]
        if isinstance(raw, str):
            return raw
    return compact_json(value)


def _input_of(arguments: str) -> Any:
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        value = None
    return value if isinstance(value, dict) else {_RAW_ARGUMENTS_KEY: arguments}


def _chat_items(history: Iterable[ConversationMessage | ChatMessage]) -> list[ChatMessage]:
    """Any history as provider-facing messages, each carrying its item when it has one."""
    items = list(history)
    if all(isinstance(m, ChatMessage) for m in items):
        return [m for m in items if isinstance(m, ChatMessage)]
    out: list[ChatMessage] = []
    for index, item in enumerate(items):
        if isinstance(item, ChatMessage):
            out.append(item)
        elif isinstance(item, Chat | AssistantToolCalls | ToolResults):
            out.extend(to_chat_messages([item]))
        else:
            raise InvalidMessage(
                f"history[{index}] must be a ChatMessage or a ConversationMessage, "
                f"got {type(item).__name__}"
            )
    return out


def structured_item(message: ChatMessage) -> ConversationMessage:
    """The structured item of one chat message (its own item, or the seed's reading)."""
    if message.role == "tool":
        (results,) = from_chat_messages([message])
        return results
    (item,) = from_chat_messages([message])
    return item


def block_json(block: ContentBlock | ToolCall) -> Json:
    """A block in the Anthropic shape: what a format without a type of its own receives.

    Also the stable JSON of a block in a request digest (`request_digest`).
    """
    match block:
        case TextBlock(text=text, extra=extra):
            return _with({"type": "text", "text": text}, extra)
        case ImageBlock():
            return _with({"type": "image", "source": _anthropic_source(block)}, block.extra)
        case DocumentBlock(source=source, extra=extra):
            return _with({"type": "document", "source": json.loads(source)}, extra)
        case ThinkingBlock(thinking=thinking, signature=signature, extra=extra):
            return _with({"type": "thinking", "thinking": thinking, "signature": signature},
                         extra)
        case RedactedThinkingBlock(data=data, extra=extra):
            return _with({"type": "redacted_thinking", "data": data}, extra)
        case ServerToolUse(id=id_, name=name, input=value, extra=extra):
            return _with({"type": "server_tool_use", "id": id_, "name": name,
                          "input": json.loads(value)}, extra)
        case ServerToolResult(type=kind, tool_use_id=use_id, content=content, extra=extra):
            return _with({"type": kind, "tool_use_id": use_id, "content": json.loads(content)},
                         extra)
        case ToolCall(id=id_, name=name, arguments=arguments, extra=extra):
            return _with({"type": "tool_use", "id": id_, "name": name,
                          "input": _input_of(arguments)}, extra)
        case OpaqueBlock(json=raw):
            return dict(json.loads(raw))
    raise InvalidMessage(f"not a content block: {type(block).__name__}")


def _anthropic_source(block: ImageBlock) -> Json:
    if block.data:
        return {"type": "base64", "media_type": block.media_type, "data": block.data}
    return {"type": "url", "url": block.url}


def _content_list(where: _Where, content: object, path: str = "content") -> list[Json] | None:
    """A non-empty list of block objects, or None for a value that is not one."""
    if not isinstance(content, list) or not content:
        return None
    # A block may be an SDK object (a reply's ``content``): read through its model_dump().
    return [where.obj(plain(raw), f"{path}[{j}]") for j, raw in enumerate(content)]


def _results_batch(out: list[ConversationMessage], pending: list[ToolResult]) -> None:
    if pending:
        out.append(ToolResults(tuple(pending)))
        pending.clear()


def _name_results(history: list[ConversationMessage]) -> list[ConversationMessage]:
    """Each tool result named after its call (``tool_name``), as a runtime would record it."""
    names: dict[str, str] = {}
    out: list[ConversationMessage] = []
    for item in history:
        if isinstance(item, AssistantToolCalls):
            names.update((c.id, c.name) for c in item.tool_calls)
        elif isinstance(item, ToolResults):
            item = ToolResults(tuple(
                _named(r, names.get(r.tool_call_id, "")) for r in item.results
            ))
        out.append(item)
    return out


def _named(result: ToolResult, name: str) -> ToolResult:
    if result.tool_name or not name:
        return result
    return ToolResult(result.tool_call_id, result.content, name, result.attachments,
                      blocks=result.blocks, is_error=result.is_error, extra=result.extra)


# --- OpenAI Chat Completions ----------------------------------------------------------------

_OPENAI_ROLES: Final = ("system", "developer", "user", "assistant", "tool")


def _openai_part(part: Json) -> ContentBlock:
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        return TextBlock(part["text"], extra=_rest(part, "type", "text"))
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    if kind == "image_url" and isinstance(image, dict) and isinstance(url, str) and url:
        rest = {k: v for k, v in image.items() if k != "url"}
        kept = {k: v for k, v in part.items() if k not in ("type", "image_url")}
        if rest:
            kept["image_url"] = rest
        return image_of_ref(url, extra_text(kept))
    return OpaqueBlock(canonical_json(part))


def _openai_blocks(where: _Where, content: object) -> tuple[str, tuple[ContentBlock, ...]]:
    parts = _content_list(where, content)
    if parts is None:
        return (content if isinstance(content, str) else ""), ()
    blocks = tuple(_openai_part(p) for p in parts)
    return "", blocks


def _openai_content_interpreted(content: object) -> bool:
    return isinstance(content, str) or (isinstance(content, list) and bool(content))


def _openai_message(where: _Where, raw: Json) -> Chat:
    role = raw["role"]
    rest = dict(raw)
    if role == "developer":
        role = "system"
    else:
        del rest["role"]
    content = raw.get("content")
    text, blocks = _openai_blocks(where, content)
    if _openai_content_interpreted(content):
        del rest["content"]
    extra = extra_text(rest)
    if blocks:
        return Chat(where.build("", ChatMessage.from_blocks, role, blocks, extra=extra))
    return Chat(where.build("", ChatMessage, role, text, extra=extra, envelope=False))


def _openai_call(where: _Where, raw: object, path: str) -> ToolCall:
    call = where.obj(raw, path)
    call_id = where.text(call, path, "id", empty=False)
    if call.get("type") == "custom":  # a custom tool's call: its kind kept, as Responses'
        custom = where.obj(call.get("custom"), f"{path}.custom")
        name = where.text(custom, f"{path}.custom", "name", empty=False)
        text = where.text(custom, f"{path}.custom", "input")
        rest = {k: v for k, v in call.items() if k not in ("id", "type", "custom")}
        more = {k: v for k, v in custom.items() if k not in ("name", "input")}
        kept = rest | ({"custom": more} if more else {}) | {"type": CUSTOM_CALL}
        return where.build(path, ToolCall, call_id, name, text, extra=extra_text(kept))
    function = where.obj(call.get("function"), f"{path}.function")
    name = where.text(function, f"{path}.function", "name", empty=False)
    arguments = where.text(function, f"{path}.function", "arguments")
    if call.get("type", "function") != "function":
        raise where.error(f"{path}.type must be 'function' or 'custom', got "
                          f"{call.get('type')!r}")
    rest = {k: v for k, v in call.items() if k not in ("id", "type", "function")}
    more = {k: v for k, v in function.items() if k not in ("name", "arguments")}
    if more:
        rest["function"] = more
    return where.build(path, ToolCall, call_id, name, arguments, extra=extra_text(rest))


def _openai_assistant(where: _Where, raw: Json) -> ConversationMessage:
    raw_calls = raw.get("tool_calls")
    if raw_calls is not None and not isinstance(raw_calls, list):  # calls kept as text: lost
        raise where.error(f"tool_calls must be a list, got {_type_name(raw_calls)}")
    if not raw_calls:
        return _openai_message(where, raw)
    calls = [_openai_call(where, c, f"tool_calls[{k}]") for k, c in enumerate(raw_calls)]
    content = raw.get("content")
    text, blocks = _openai_blocks(where, content)
    reasoning = raw.get("reasoning_content")
    interpreted = ["role", "tool_calls"]
    if _openai_content_interpreted(content):
        interpreted.append("content")
    if isinstance(reasoning, str):
        interpreted.append("reasoning_content")
    else:
        reasoning = None
    extra = _rest(raw, *interpreted)
    if blocks:
        return where.build("", AssistantToolCalls.from_blocks, [*blocks, *calls],
                           reasoning_content=reasoning, extra=extra)
    said = text if isinstance(content, str) else None
    return where.build("", AssistantToolCalls, said, tuple(calls), reasoning, extra=extra)


def _openai_tool(where: _Where, raw: Json) -> ToolResult:
    call_id = where.text(raw, "", "tool_call_id", empty=False)
    content = raw.get("content")
    text, blocks = _openai_blocks(where, content)
    interpreted = ["role", "tool_call_id"]
    if _openai_content_interpreted(content):
        interpreted.append("content")
    extra = _rest(raw, *interpreted)
    if blocks:
        return where.build("", ToolResult.from_blocks, call_id, blocks, extra=extra)
    return where.build("", ToolResult, call_id, text, extra=extra)


def from_openai_chat(messages: object) -> list[ConversationMessage]:
    """Import an OpenAI Chat Completions ``messages`` list (dicts or SDK objects).

    ``developer`` becomes ``system`` (the role name kept); assistant ``tool_calls`` become
    `AssistantToolCalls` (``reasoning_content`` kept); consecutive ``tool`` messages become one
    `ToolResults`, each result named after its call. A content list becomes blocks: ``text``
    and ``image_url`` parts typed, any other part opaque. Every other field is kept.

    Raises:
        TranscriptError: a message or field is missing or ill-typed ("message 3: ...").
    """
    messages = plain(messages)
    if not isinstance(messages, list):
        raise TranscriptError(f"messages must be a list, got {_type_name(messages)}")
    out: list[ConversationMessage] = []
    pending: list[ToolResult] = []
    for i, item in enumerate(messages):
        where = _Where(f"message {i}")
        raw = where.obj(plain(item), "message")
        role = where.text(raw, "", "role")
        if role not in _OPENAI_ROLES:
            raise where.error(f"role {role!r} is not supported")
        if role == "tool":
            pending.append(_openai_tool(where, raw))
            continue
        _results_batch(out, pending)
        out.append(_openai_assistant(where, raw) if role == "assistant"
                   else _openai_message(where, raw))
    _results_batch(out, pending)
    return _name_results(out)


def _openai_part_json(block: ContentBlock | ToolCall) -> Json:
    if isinstance(block, TextBlock):
        return _with({"type": "text", "text": block.text}, block.extra)
    if isinstance(block, ImageBlock):
        fields = extra_fields(block.extra)
        image = {"url": block.ref, **fields.pop("image_url", {})}
        return {"type": "image_url", "image_url": image, **fields}
    return block_json(block)


def _openai_content(text: str, blocks: Sequence[ContentBlock | ToolCall]) -> Any:
    if not blocks:
        return text
    return [_openai_part_json(b) for b in blocks if not isinstance(b, ToolCall)]


def _openai_message_json(message: ChatMessage) -> Json:
    item = structured_item(message)
    if isinstance(item, AssistantToolCalls):
        out: Json = {"role": "assistant"}
        if item.blocks or item.text is not None:
            out["content"] = _openai_content(item.text or "", item.blocks)
        out["tool_calls"] = [_openai_call_json(c) for c in item.tool_calls]
        if item.reasoning_content is not None:
            out["reasoning_content"] = item.reasoning_content
        return _with(out, item.extra)
    if isinstance(item, ToolResults):
        (result,) = item.results
        blocks = result.blocks or declared_images(result)
        out = {"role": "tool", "tool_call_id": result.tool_call_id,
               "content": _openai_content(result.content, blocks)}
        return _with(out, result.extra)
    chat = item.message
    blocks = chat.blocks or marker_blocks(chat)
    out = {"role": chat.role, "content": _openai_content(chat.content, blocks)}
    return _with(out, chat.extra)


def _openai_call_json(call: ToolCall) -> Json:
    fields = extra_fields(call.extra)
    if is_custom_call(call):
        del fields["type"]
        custom = {"name": call.name, "input": call.arguments, **fields.pop("custom", {})}
        return {"id": call.id, "type": "custom", "custom": custom, **fields}
    function = {"name": call.name, "arguments": call.arguments, **fields.pop("function", {})}
    return {"id": call.id, "type": "function", "function": function, **fields}


def to_openai_chat(history: Iterable[ConversationMessage | ChatMessage]) -> list[Json]:
    """Export a history as an OpenAI Chat Completions ``messages`` list (see the module doc).

    Images travel as ``image_url`` parts (a tool's images too, an extension: OpenAI documents
    text parts only for tool messages); the breadcrumb is a plain user message.
    """
    return [_openai_message_json(message) for message in _chat_items(history)]


# --- Anthropic ------------------------------------------------------------------------------


def _anthropic_image(block: Json) -> ContentBlock:
    source = block.get("source")
    rest = {k: v for k, v in block.items() if k not in ("type", "source")}
    if isinstance(source, dict) and source.get("type") == "base64" and len(source) == 3:
        media, data = source.get("media_type"), source.get("data")
        if isinstance(media, str) and isinstance(data, str) and data:
            return ImageBlock(media_type=media, data=data, extra=extra_text(rest))
    if isinstance(source, dict) and source.get("type") == "url" and len(source) == 2:
        url = source.get("url")
        if isinstance(url, str) and url:
            return ImageBlock(url, extra=extra_text(rest))
    return OpaqueBlock(canonical_json(block))


def _anthropic_block(where: _Where, block: Json, path: str) -> ContentBlock | ToolCall:
    kind = block.get("type")
    text_of = block.get
    if kind == "text" and isinstance(text_of("text"), str):
        return TextBlock(block["text"], extra=_rest(block, "type", "text"))
    if kind == "image":
        return _anthropic_image(block)
    if kind == "document" and isinstance(text_of("source"), dict):
        return DocumentBlock(canonical_json(block["source"]), extra=_rest(block, "type", "source"))
    if kind == "thinking" and isinstance(text_of("thinking"), str) and isinstance(
        text_of("signature"), str
    ):
        return ThinkingBlock(block["thinking"], block["signature"],
                             extra=_rest(block, "type", "thinking", "signature"))
    if kind == "redacted_thinking" and isinstance(text_of("data"), str):
        return RedactedThinkingBlock(block["data"], extra=_rest(block, "type", "data"))
    if kind == "tool_use":
        # A call the runtime must answer: kept opaque, it would vanish from the requests and
        # leave its result an orphan. Refused, naming what is wrong.
        where.text(block, path, "id", empty=False)
        where.text(block, path, "name", empty=False)
        if "input" not in block:
            raise where.error(f"{path}.input missing")
        where.obj(block["input"], f"{path}.input")
        return where.build(path, ToolCall, block["id"], block["name"],
                           _arguments_of(block["input"]),
                           extra=_rest(block, "type", "id", "name", "input"))
    if kind == "server_tool_use" and _is_call(block):
        return ServerToolUse(block["id"], block["name"], canonical_json(block["input"]),
                             extra=_rest(block, "type", "id", "name", "input"))
    if isinstance(kind, str) and kind.endswith("_tool_result") and _is_server_result(block):
        return ServerToolResult(kind, block["tool_use_id"], canonical_json(block["content"]),
                                extra=_rest(block, "type", "tool_use_id", "content"))
    return OpaqueBlock(canonical_json(block))


def _is_call(block: Json) -> bool:
    return (
        isinstance(block.get("id"), str) and bool(block["id"])
        and isinstance(block.get("name"), str) and bool(block["name"])
        and isinstance(block.get("input"), dict)
    )


def _is_server_result(block: Json) -> bool:
    return isinstance(block.get("tool_use_id"), str) and "content" in block


def _anthropic_result(where: _Where, block: Json, path: str) -> ToolResult:
    call_id = where.text(block, path, "tool_use_id", empty=False)
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise where.error(f"{path}.is_error must be a bool, got {_type_name(is_error)}")
    content = block.get("content")
    interpreted = ["type", "tool_use_id", "is_error"]
    inner = _content_list(where, content, f"{path}.content")
    if (isinstance(content, str) and content) or inner is not None:
        interpreted.append("content")
    extra = _rest(block, *interpreted)
    if inner is None:
        text = content if isinstance(content, str) else ""
        return where.build(path, ToolResult, call_id, text, is_error=is_error, extra=extra)
    blocks = [_anthropic_block(where, b, f"{path}.content[{j}]") for j, b in enumerate(inner)]
    if any(isinstance(b, ToolCall) for b in blocks):
        raise where.error(f"{path}.content cannot hold a tool_use block")
    return where.build(path, ToolResult.from_blocks, call_id,
                       [b for b in blocks if not isinstance(b, ToolCall)],
                       is_error=is_error, extra=extra)


def _anthropic_user(where: _Where, raw: Json, out: list[ConversationMessage]) -> None:
    blocks = _content_list(where, raw.get("content"))
    extra = _rest(raw, "role", "content")
    if blocks is None:
        out.append(_anthropic_text_message(where, raw, "user", extra))
        return
    results: list[ToolResult] = []
    others: list[ContentBlock] = []
    for j, block in enumerate(blocks):
        path = f"content[{j}]"
        if block.get("type") == "tool_result":
            if others:
                raise where.error(f"{path}: tool_result blocks must come first in a message")
            results.append(_anthropic_result(where, block, path))
            continue
        parsed = _anthropic_block(where, block, path)
        if isinstance(parsed, ToolCall):
            raise where.error(f"{path}.type 'tool_use' is not allowed in a user message")
        others.append(parsed)
    if results:
        out.append(ToolResults(tuple(results)))
    if others or not results:
        out.append(Chat(where.build("", ChatMessage.from_blocks, "user", others, extra=extra)))
    elif extra:
        raise where.error("a tool-result message cannot keep fields beside role and content")


def _anthropic_text_message(where: _Where, raw: Json, role: str, extra: str) -> Chat:
    content = raw.get("content")
    if isinstance(content, str):
        return Chat(where.build("", ChatMessage, role, content, extra=extra, envelope=False))
    keep = _rest(raw, "role")  # an empty list or null content is kept as it was
    return Chat(where.build("", ChatMessage, role, "", extra=keep, envelope=False))


def _anthropic_assistant(where: _Where, raw: Json) -> ConversationMessage:
    blocks = _content_list(where, raw.get("content"))
    extra = _rest(raw, "role", "content")
    if blocks is None:
        return _anthropic_text_message(where, raw, "assistant", extra)
    parsed = [_anthropic_block(where, b, f"content[{j}]") for j, b in enumerate(blocks)]
    if any(isinstance(b, ToolCall) for b in parsed):
        return where.build("", AssistantToolCalls.from_blocks, parsed, extra=extra)
    content = [b for b in parsed if not isinstance(b, ToolCall)]
    return Chat(where.build("", ChatMessage.from_blocks, "assistant", content, extra=extra))


def _anthropic_system(value: object) -> Chat:
    where = _Where("")
    if isinstance(value, str):
        return Chat(ChatMessage("system", value, envelope=False))
    blocks = _content_list(where, value, "system")
    if blocks is None:
        raise where.error(f"system must be a string or a list of blocks, got {_type_name(value)}")
    parsed = [_anthropic_block(where, b, f"system[{j}]") for j, b in enumerate(blocks)]
    content = [b for b in parsed if not isinstance(b, ToolCall)]
    return Chat(where.build("system", ChatMessage.from_blocks, "system", content))


def _anthropic_inline_system(where: _Where, raw: Json) -> Chat:
    """A ``role: system`` message among the messages (the API takes one there): a system
    message whose kept ``role`` field says it stands in place, so it is written back there."""
    extra = _rest(raw, "content")  # the role is kept: it marks the message as inline
    blocks = _content_list(where, raw.get("content"))
    if blocks is None:
        return _anthropic_text_message(where, raw, "system", extra)
    parsed = [_anthropic_block(where, b, f"content[{j}]") for j, b in enumerate(blocks)]
    if any(isinstance(b, ToolCall) for b in parsed):
        raise where.error("a system message cannot hold a tool_use block")
    content = [b for b in parsed if not isinstance(b, ToolCall)]
    return Chat(where.build("", ChatMessage.from_blocks, "system", content, extra=extra))


def from_anthropic(conversation: object) -> list[ConversationMessage]:
    """Import an Anthropic Messages conversation: ``{"system", "messages"}`` or a list.

    ``system`` (a string or blocks) becomes a leading system message; an empty list of blocks,
    which the API takes, is no system prompt. Other top-level keys (``model``, ``tools``...)
    are not part of the history and are ignored. Content blocks are
    typed: text, image, document, thinking (with its signature), redacted thinking, tool use
    (with ``caller`` and any other field), server tool use and results; an unknown block is kept
    opaque. ``tool_result`` blocks become `ToolResults` (their own blocks, ``is_error``); the
    blocks after them in the same message become the user message that follows. An assistant
    message with a ``tool_use`` is an `AssistantToolCalls` whose blocks keep their order.

    Raises:
        TranscriptError: a message or field is missing or ill-typed ("message 3: ...").
    """
    conversation = plain(conversation)
    out: list[ConversationMessage] = []
    if isinstance(conversation, dict):
        if "messages" not in conversation:
            raise TranscriptError("messages missing")
        if conversation.get("system", []) != []:  # an empty list of blocks is no system prompt
            out.append(_anthropic_system(conversation["system"]))
        conversation = conversation["messages"]
    if not isinstance(conversation, list):
        raise TranscriptError(f"messages must be a list, got {_type_name(conversation)}")
    for i, item in enumerate(conversation):
        where = _Where(f"message {i}")
        raw = where.obj(plain(item), "message")
        role = where.text(raw, "", "role")
        if "content" not in raw:
            raise where.error("content missing")
        if role == "user":
            _anthropic_user(where, raw, out)
        elif role == "assistant":
            out.append(_anthropic_assistant(where, raw))
        elif role == "system":
            out.append(_anthropic_inline_system(where, raw))
        else:
            raise where.error(f"role {role!r} is not supported (user, assistant or system)")
    return _name_results(out)


def _anthropic_content(text: str, blocks: Sequence[ContentBlock | ToolCall]) -> Any:
    return [block_json(b) for b in blocks] if blocks else text


def _anthropic_result_json(result: ToolResult) -> Json:
    out: Json = {"type": "tool_result", "tool_use_id": result.tool_call_id}
    if result.blocks:
        out["content"] = [block_json(b) for b in result.blocks]
    elif result.attachments:  # a result recorded without blocks, with declared images (R22)
        inner = [{"type": "text", "text": result.content}] if result.content else []
        out["content"] = inner + [
            block_json(image_of_ref(ref)) for ref in result.attachments
        ]
    elif result.content:
        out["content"] = result.content
    if result.is_error is not None:
        out["is_error"] = result.is_error
    return _with(out, result.extra)


def marker_blocks(chat: ChatMessage) -> tuple[ContentBlock, ...]:
    """The blocks a bare user message's loadable ``[IMAGE:ref]`` markers stand for (R21).

    A message appended by a runtime in the rules' vocabulary carries its images as markers: they
    are sent as images. A message that came from a provider (not bare) is sent as it came.
    """
    if chat.role != "user" or chat.envelope is not None or chat.blocks:
        return ()
    markers = [m for m in image_markers(chat.content) if m.loadable]
    if not markers:
        return ()
    blocks: list[ContentBlock] = []
    cursor = 0
    for marker in markers:
        text = chat.content[cursor:marker.start].strip("\n")
        if text.strip():
            blocks.append(TextBlock(text))
        blocks.append(image_of_ref(marker.ref))
        cursor = marker.end
    tail = chat.content[cursor:].strip("\n")
    if tail.strip():
        blocks.append(TextBlock(tail))
    return tuple(blocks)


def declared_images(result: ToolResult) -> tuple[ContentBlock, ...]:
    """The blocks of a result recorded without blocks but with declared images (R22)."""
    if not result.attachments:
        return ()
    text = (TextBlock(result.content),) if result.content else ()
    return (*text, *(image_of_ref(ref) for ref in result.attachments))


def image_of_ref(ref: str, extra: str = "") -> ImageBlock:
    """An image block of a reference: a base64 ``data:`` URL is kept as inline data."""
    head, sep, data = ref.partition(";base64,")
    if ref.startswith("data:") and sep and data:
        return ImageBlock(media_type=head[len("data:"):], data=data, extra=extra)
    return ImageBlock(ref, extra=extra)


def _inline_system(message: ChatMessage) -> bool:
    """Whether a system message was recorded in place among Anthropic messages."""
    return bool(message.extra) and extra_fields(message.extra).get("role") == "system"


class _AnthropicWriter:
    """Collects the messages of `to_anthropic`, grouping tool results into user messages."""

    def __init__(self) -> None:
        self.system: list[ChatMessage] = []
        self.messages: list[Json] = []
        self.results: list[Json] | None = None  # the content of the open tool-result message

    def add(self, message: ChatMessage) -> None:
        if message.role == "system" and not _inline_system(message):
            self.system.append(message)
            return
        item = structured_item(message)
        if isinstance(item, ToolResults):
            if self.results is None:
                self.results = []
                self.messages.append({"role": "user", "content": self.results})
            self.results.extend(_anthropic_result_json(r) for r in item.results)
            return
        results, self.results = self.results, None
        if isinstance(item, AssistantToolCalls):
            self.messages.append(_with(
                {"role": "assistant", "content": [block_json(b) for b in assistant_blocks(item)]},
                item.extra,
                nulls=False,
            ))
            return
        chat = item.message if isinstance(item, Chat) else message
        if results is not None and chat.role == "user" and chat.blocks and not chat.extra:
            results.extend(block_json(b) for b in chat.blocks)  # one message, as imported
            return
        content = _anthropic_content(chat.content, chat.blocks or marker_blocks(chat))
        self.messages.append(_with({"role": chat.role, "content": content}, chat.extra,
                                   nulls=False))

    def mark(self) -> tuple[int, int] | None:
        """Where the messages added so far end in ``messages``: the index of the last message
        and its number of content blocks then (a string content counts as one block), or None
        before any message. Later messages only append messages or join the open tool-result
        message, so the mark stays where it is (`to_anthropic_marked`)."""
        if not self.messages:
            return None
        content = self.messages[-1].get("content")
        return len(self.messages) - 1, len(content) if isinstance(content, list) else 1

    def result(self) -> Json:
        out: Json = {}
        if len(self.system) == 1:
            only = self.system[0]
            out["system"] = _anthropic_content(only.content, only.blocks)
        elif self.system:
            out["system"] = "\n\n".join(m.content for m in self.system)
        out["messages"] = self.messages
        return out


def to_anthropic(history: Iterable[ConversationMessage | ChatMessage]) -> Json:
    """Export a history as an Anthropic ``{"system", "messages"}`` object (see the module doc).

    System messages, leading or late, form ``system`` (one keeps its form, several are joined
    with a blank line; the key is left out when there is none). Consecutive tool results are one
    user message of ``tool_result`` blocks; a user message of blocks right after them joins it.
    Thinking blocks and their signatures stay in place in their assistant message.
    """
    writer = _AnthropicWriter()
    for message in _chat_items(history):
        writer.add(message)
    return writer.result()


def to_anthropic_marked(
    messages: Sequence[ChatMessage], end: int
) -> tuple[Json, tuple[int, int] | None]:
    """`to_anthropic` of ``messages``, and where its first ``end`` messages end in the body's
    ``messages`` (`_AnthropicWriter.mark`; None when they hold none but system messages): the
    prefix a cache breakpoint marks (`turnledger.domain.cache`), found in the one pass."""
    writer = _AnthropicWriter()
    for message in messages[:end]:
        writer.add(message)
    mark = writer.mark()
    for message in messages[end:]:
        writer.add(message)
    return writer.result(), mark


# --- OpenAI Responses -----------------------------------------------------------------------

_RESPONSES_TEXT: Final = {"assistant": "output_text"}


def _text_type(role: str) -> str:
    return _RESPONSES_TEXT.get(role, "input_text")


def _responses_part(part: Json, role: str) -> ContentBlock:
    kind = part.get("type")
    if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
        return TextBlock(part["text"], extra=_typed(part, _text_type(role), "type", "text"))
    url = part.get("image_url")
    if kind == "input_image" and isinstance(url, str) and url:
        return image_of_ref(url, _rest(part, "type", "image_url"))
    return OpaqueBlock(canonical_json(part))


def _responses_message(where: _Where, raw: Json) -> Chat:
    role = where.text(raw, "", "role")
    if role not in ("system", "developer", "user", "assistant"):
        raise where.error(f"role {role!r} is not supported")
    rest = dict(raw)
    if role == "developer":
        role = "system"
    else:
        del rest["role"]
    content = raw.get("content")
    parts = _content_list(where, content)
    if isinstance(content, str) or parts is not None:
        del rest["content"]
    extra = extra_text(rest)
    if parts is None:
        text = content if isinstance(content, str) else ""
        return Chat(where.build("", ChatMessage, role, text, extra=extra, envelope=False))
    blocks = [_responses_part(p, role) for p in parts]
    return Chat(where.build("", ChatMessage.from_blocks, role, blocks, extra=extra))


CUSTOM_CALL: Final = "custom_tool_call"
CUSTOM_OUTPUT: Final = "custom_tool_call_output"
"""A Responses custom tool call (a free-form input, as Codex's ``apply_patch``) and its
output (issue 36): recorded as a `ToolCall` (its ``input`` as the arguments) and a
`ToolResult` whose ``extra`` keep the item ``type``, the call's kind."""


def is_custom_call(call: ToolCall) -> bool:
    """Whether ``call`` is a custom tool call (its input free text, not JSON arguments)."""
    return bool(call.extra) and extra_fields(call.extra).get("type") == CUSTOM_CALL


def _responses_call(where: _Where, raw: Json) -> ToolCall:
    call_id = where.text(raw, "", "call_id", empty=False)
    name = where.text(raw, "", "name", empty=False)
    if raw.get("type") == CUSTOM_CALL:  # its kind kept in the extra: type custom_tool_call
        arguments = where.text(raw, "", "input")
        extra = _rest(raw, "call_id", "name", "input")
    else:
        arguments = where.text(raw, "", "arguments")
        extra = _rest(raw, "type", "call_id", "name", "arguments")
    return where.build("", ToolCall, call_id, name, arguments, extra=extra)


def _responses_output(where: _Where, raw: Json) -> ToolResult:
    call_id = where.text(raw, "", "call_id", empty=False)
    output = raw.get("output")
    parts = _content_list(where, output, "output")
    interpreted = ["type", "call_id"] if raw.get("type") != CUSTOM_OUTPUT else ["call_id"]
    if isinstance(output, str) or parts is not None:
        interpreted.append("output")
    extra = _rest(raw, *interpreted)
    if parts is None:
        text = output if isinstance(output, str) else ""
        return where.build("", ToolResult, call_id, text, extra=extra)
    blocks = [_responses_part(p, "tool") for p in parts]
    return where.build("", ToolResult.from_blocks, call_id, blocks, extra=extra)


def _responses_reasoning(where: _Where, raw: Json) -> Chat:
    summary = raw.get("summary")
    texts = _summary_texts(summary)
    interpreted = ["type"]
    if texts is not None:
        interpreted.append("summary")
    signature = raw.get("encrypted_content")
    if isinstance(signature, str) and signature:
        interpreted.append("encrypted_content")
    else:
        signature = ""
    thinking = "\n".join(texts) if texts is not None else _summary_join(summary)
    block = ThinkingBlock(thinking, signature, extra=_rest(raw, *interpreted))
    return Chat(where.build("", ChatMessage.from_blocks, "assistant", [block],
                            extra=extra_text({"type": "reasoning"})))


def _summary_texts(summary: object) -> list[str] | None:
    """The texts of a summary in its simple form: [] or one ``summary_text`` part."""
    if summary == []:
        return []
    if (
        isinstance(summary, list) and len(summary) == 1 and isinstance(summary[0], dict)
        and set(summary[0]) == {"type", "text"} and summary[0]["type"] == "summary_text"
        and isinstance(summary[0]["text"], str) and summary[0]["text"]
    ):
        return [summary[0]["text"]]
    return None


def _summary_join(summary: object) -> str:
    if not isinstance(summary, list):
        return ""
    return "\n".join(
        p["text"] for p in summary if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


def _responses_item(where: _Where, raw: Json) -> ConversationMessage | ToolCall | ToolResult:
    kind = raw.get("type", "message")
    if kind == "message":
        return _responses_message(where, raw)
    if kind in ("function_call", CUSTOM_CALL):
        return _responses_call(where, raw)
    if kind in ("function_call_output", CUSTOM_OUTPUT):
        return _responses_output(where, raw)
    if kind == "reasoning":
        return _responses_reasoning(where, raw)
    # Any other item (a hosted tool call, an item reference, ...) is kept whole.
    block = OpaqueBlock(canonical_json(raw))
    return Chat(ChatMessage.from_blocks("assistant", [block], extra=extra_text({"type": kind})))


def from_openai_responses(items: object) -> list[ConversationMessage]:
    """Import OpenAI Responses input items (dicts or SDK objects).

    ``message`` items become messages (``input_text``/``output_text`` and ``input_image``
    parts typed, others opaque); consecutive ``function_call`` items one `AssistantToolCalls`
    and consecutive ``function_call_output`` items one `ToolResults`; a ``reasoning`` item an
    assistant message of one `ThinkingBlock` (summary text, ``encrypted_content`` as its
    signature); any other item an assistant message of one `OpaqueBlock`. Item fields
    (``id``, ``status``...) are kept.

    Raises:
        TranscriptError: an item or field is missing or ill-typed ("message 3: ...").
    """
    items = plain(items)
    if not isinstance(items, list):
        raise TranscriptError(f"items must be a list, got {_type_name(items)}")
    out: list[ConversationMessage] = []
    calls: list[ToolCall] = []
    results: list[ToolResult] = []
    for i, item in enumerate(items):
        where = _Where(f"message {i}")
        parsed = _responses_item(where, where.obj(plain(item), "item"))
        if not isinstance(parsed, ToolCall) and calls:
            out.append(AssistantToolCalls(None, tuple(calls)))
            calls.clear()
        if not isinstance(parsed, ToolResult):
            _results_batch(out, results)
        if isinstance(parsed, ToolCall):
            calls.append(parsed)
        elif isinstance(parsed, ToolResult):
            results.append(parsed)
        else:
            out.append(parsed)
    if calls:
        out.append(AssistantToolCalls(None, tuple(calls)))
    _results_batch(out, results)
    return _name_results(out)


def from_openai_responses_item(item: object) -> ConversationMessage:
    """One Responses input item (a dict or an SDK object) as one message: what
    ``from_openai_responses([item])`` gives, without the list around it (a lone call is an
    `AssistantToolCalls` of one call, a lone output `ToolResults` of one result).

    Raises:
        TranscriptError: the item or a field is missing or ill-typed ("message 0: ...").
    """
    where = _Where("message 0")
    parsed = _responses_item(where, where.obj(plain(item), "item"))
    if isinstance(parsed, ToolCall):
        return AssistantToolCalls(None, (parsed,))
    if isinstance(parsed, ToolResult):
        return ToolResults((parsed,))
    return parsed


# An item of the shapes below converts to a message whose export is, by construction, a dict
# equal to the item with values of the same types: the interpreted fields are exact strings,
# rebuilt as they were, and every other field goes through canonical JSON, which gives back an
# equal value of the same type for exact JSON data (`_exact_json`). Such an item needs no
# round-trip check; any other item (an SDK object, another type or role, a list output, a
# non-simple summary, a tuple, a subclass...) returns None and is converted and checked.
# tests/unit/test_responses_exact.py proves both against `from_openai_responses_item` and
# `to_openai_responses`.

_json_string: Final = json.encoder.encode_basestring  # what json.dumps(ensure_ascii=False) uses
_EXACT_DEPTH: Final = 32  # deeper values take the checked path (no recursion limit to meet)
_REASONING_EXTRA: Final = extra_text({"type": "reasoning"})
_MESSAGE_ROLES: Final = frozenset(("system", "user", "assistant"))


def _exact_json(value: object, depth: int = 0) -> bool:
    """Whether canonical JSON gives ``value`` back equal and of the same types (JSON data
    built of exact dicts with string keys, lists, strings, ints, bools, None, finite floats)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if type(value) is float:
        return math.isfinite(value)
    if depth >= _EXACT_DEPTH:
        return False
    if type(value) is list:
        return all(_exact_json(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _exact_json(v, depth + 1) for k, v in value.items())
    return False


def _exact_extra(obj: Json, interpreted: frozenset[str]) -> str | None:
    """`extra_text` of the fields of ``obj`` not in ``interpreted``; None when a key of ``obj``
    is not an exact string or one of those fields is not exact JSON (`_exact_json`).

    Fields that are all strings or empty lists (``id``, ``status``, ``annotations``...) are
    written here, as `canonical_json` writes them (sorted keys, ``json``'s own string writer);
    any other value through `canonical_json`.
    """
    fields: list[tuple[str, str]] = []  # (name, its value's JSON text)
    flat = True
    for name, value in obj.items():
        if type(name) is not str:
            return None
        if name in interpreted:
            continue
        if type(value) is str:
            fields.append((name, _json_string(value)))
        elif type(value) is list and not value:
            fields.append((name, "[]"))
        elif _exact_json(value):
            flat = False
        else:
            return None
    if not flat:
        return extra_text({k: v for k, v in obj.items() if k not in interpreted})
    return canonical_flat_object(fields)


_MESSAGE_KEYS: Final = frozenset(("role", "content"))
_PART_KEYS: Final = frozenset(("type", "text"))


def _exact_message(raw: Json) -> ConversationMessage | None:
    """`_responses_message` of a system, user or assistant message whose content is a string
    or a list of text parts of its role's default type."""
    role, content = raw.get("role"), raw.get("content")
    if type(role) is not str or role not in _MESSAGE_ROLES:
        return None
    extra = _exact_extra(raw, _MESSAGE_KEYS)
    if extra is None:
        return None
    if type(content) is str:
        return Chat(ChatMessage(role, content, extra=extra, envelope=False))
    if type(content) is not list or not content:
        return None
    kind = _text_type(role)
    blocks: list[ContentBlock] = []
    for part in content:
        if type(part) is not dict:
            return None
        part_type, text = part.get("type"), part.get("text")
        if type(part_type) is not str or part_type != kind or type(text) is not str:
            return None
        part_extra = _exact_extra(part, _PART_KEYS)
        if part_extra is None:
            return None
        blocks.append(TextBlock(text, extra=part_extra))
    if len(blocks) == 1:  # ChatMessage.from_blocks, without joining the text twice
        return Chat(ChatMessage(role, content[0]["text"], blocks=blocks, extra=extra,
                                envelope=False))
    return Chat(ChatMessage.from_blocks(role, blocks, extra=extra))


_CALL_KEYS: Final = frozenset(("type", "call_id", "name", "arguments"))


def _exact_call(raw: Json) -> ConversationMessage | None:
    """`_responses_call` of a call whose id, name and arguments are strings."""
    call_id, name, arguments = raw.get("call_id"), raw.get("name"), raw.get("arguments")
    if type(call_id) is not str or type(name) is not str or type(arguments) is not str:
        return None
    extra = _exact_extra(raw, _CALL_KEYS)
    if extra is None or not call_id or not name:
        return None
    return AssistantToolCalls(None, (ToolCall(call_id, name, arguments, extra=extra),))


_OUTPUT_KEYS: Final = frozenset(("type", "call_id", "output"))


def _exact_output(raw: Json) -> ConversationMessage | None:
    """`_responses_output` of an output that is a string."""
    call_id, output = raw.get("call_id"), raw.get("output")
    if type(call_id) is not str or not call_id or type(output) is not str:
        return None
    extra = _exact_extra(raw, _OUTPUT_KEYS)
    if extra is None:
        return None
    return ToolResults((ToolResult(call_id, output, extra=extra),))


_REASONING_KEYS: Final = frozenset(("type", "summary"))
_SIGNED_REASONING_KEYS: Final = frozenset(("type", "summary", "encrypted_content"))


def _exact_reasoning(raw: Json) -> ConversationMessage | None:
    """`_responses_reasoning` of a reasoning item whose summary is [] or one ``summary_text``
    part (`_summary_texts`)."""
    summary = raw.get("summary")
    if type(summary) is not list or len(summary) > 1:
        return None
    thinking: object = ""
    if summary:
        part = summary[0]
        if type(part) is not dict or len(part) != 2:
            return None
        part_type, thinking = part.get("type"), part.get("text")
        if type(part_type) is not str or part_type != "summary_text" or not thinking:
            return None
    signature = raw.get("encrypted_content")
    if type(signature) is not str:
        signature = ""  # the field, if any, is kept in the extra (as an empty one is)
    extra = _exact_extra(raw, _SIGNED_REASONING_KEYS if signature else _REASONING_KEYS)
    if extra is None or type(thinking) is not str:
        return None
    block = ThinkingBlock(thinking, signature, extra=extra)
    return Chat(ChatMessage("assistant", thinking, blocks=(block,), extra=_REASONING_EXTRA,
                            envelope=False))  # ChatMessage.from_blocks of the one block


_EXACT_ITEMS: Final[dict[str, Callable[[Json], ConversationMessage | None]]] = {
    "message": _exact_message,
    "function_call": _exact_call,
    "function_call_output": _exact_output,
    "reasoning": _exact_reasoning,
}


def exact_openai_responses_item(item: object) -> ConversationMessage | None:
    """`from_openai_responses_item` of ``item`` when the item is a plain dict of a shape whose
    conversion is exact by construction: `to_openai_responses` of the message gives back a dict
    equal to ``item``, its values of the same types. None for any other item (convert it and
    check the round trip).

    The shapes: a system, user or assistant message whose content is a string or text parts,
    a function call, a function call output that is a string, a reasoning item with a simple
    summary; every other field exact JSON data (dicts with string keys, lists, strings, ints,
    bools, None, finite floats).
    """
    if type(item) is not dict:
        return None
    kind = item.get("type", "message")
    convert = _EXACT_ITEMS.get(kind) if type(kind) is str else None
    if convert is None:
        return None
    try:
        return convert(item)
    except (InvalidMessage, ValueError):  # the checked path raises or refuses it, as it does
        return None


def _responses_content(role: str, text: str, blocks: Sequence[ContentBlock | ToolCall]) -> Any:
    if not blocks:
        return text
    return [_responses_part_json(b, role) for b in blocks]


def _responses_part_json(block: ContentBlock | ToolCall, role: str) -> Json:
    if isinstance(block, TextBlock):
        return _with({"type": _text_type(role), "text": block.text}, block.extra)
    if isinstance(block, ImageBlock):
        return _with({"type": "input_image", "image_url": block.ref}, block.extra)
    return block_json(block)


def _reasoning_json(block: ThinkingBlock) -> Json:
    summary = [{"type": "summary_text", "text": block.thinking}] if block.thinking else []
    out: Json = {"type": "reasoning", "summary": summary}
    if block.signature:
        out["encrypted_content"] = block.signature
    return _with(out, block.extra)


def _responses_chat(chat: ChatMessage) -> Json:
    fields = extra_fields(chat.extra)
    only = chat.blocks[0] if len(chat.blocks) == 1 else None
    if isinstance(only, ThinkingBlock) and fields == {"type": "reasoning"}:
        return _reasoning_json(only)
    if isinstance(only, OpaqueBlock) and fields == {"type": only.type} != {"type": "message"}:
        return dict(json.loads(only.json))
    blocks = chat.blocks or marker_blocks(chat)
    out = {"role": chat.role, "content": _responses_content(chat.role, chat.content, blocks)}
    return _with(out, chat.extra)


def _responses_json(item: ConversationMessage) -> list[Json]:
    if isinstance(item, ToolResults):
        return [
            _with({"type": "function_call_output", "call_id": r.tool_call_id,
                   "output": _responses_content("tool", r.content,
                                                r.blocks or declared_images(r))}, r.extra)
            for r in item.results
        ]
    if isinstance(item, AssistantToolCalls):
        out: list[Json] = []
        blocks = item.blocks or ((TextBlock(item.text),) if item.text else ())
        for block in blocks:
            if isinstance(block, ThinkingBlock):
                out.append(_reasoning_json(block))
            elif isinstance(block, TextBlock) and not block.extra:
                # A bare text is what Responses takes from an assistant without an item id.
                out.append({"role": "assistant", "content": block.text})
            elif not isinstance(block, ToolCall):
                out.append({"role": "assistant", "content": [_responses_part_json(block,
                                                                                  "assistant")]})
        out.extend(
            _with({"type": CUSTOM_CALL, "call_id": c.id, "name": c.name, "input": c.arguments}
                  if is_custom_call(c) else {"type": "function_call", "call_id": c.id,
                                             "name": c.name, "arguments": c.arguments},
                  c.extra)
            for c in item.tool_calls
        )
        return out
    return [_responses_chat(item.message)]


def to_openai_responses(history: Iterable[ConversationMessage | ChatMessage]) -> list[Json]:
    """Export a history as OpenAI Responses input items (see the module doc).

    Messages become ``message`` items (``{"role", "content"}``, with their kept fields such as
    ``type``, ``id`` and ``status``), tool calls ``function_call`` items, tool results
    ``function_call_output`` items, thinking ``reasoning`` items (its signature as
    ``encrypted_content``).
    """
    items = list(history)
    direct = [item for item in items if _reads_as_itself(item)]
    out: list[Json] = []
    if len(direct) != len(items):
        for message in _chat_items(items):
            out.extend(_responses_json(structured_item(message)))
        return out
    for item in direct:
        out.extend(_responses_json(item))
    return out


def _reads_as_itself(item: object) -> TypeGuard[ConversationMessage]:
    """Whether the provider-facing messages of ``item`` read back as ``item`` itself
    (`_structured` of each of `to_chat_messages`), so it can be exported without them: a
    tool-call step, tool results, or a plain message whose structure is recorded or plain by
    its role (not a tool message, not an assistant message carrying or read as calls)."""
    if isinstance(item, AssistantToolCalls | ToolResults):
        return True
    if not isinstance(item, Chat):
        return False
    message = item.message
    return message.item is None and message.role != "tool" and (
        message.role != "assistant" or message.envelope is False
    )
