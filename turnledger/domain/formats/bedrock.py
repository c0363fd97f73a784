"""Amazon Bedrock Converse JSON ⇄ turnledger messages, losslessly (issue 36).

A Converse conversation is ``{"system": [...], "messages": [...]}`` (the request's other
fields are not messages: the importer leaves them and says so). A block is an object with one
member naming its kind (``{"text": ...}``, ``{"toolUse": {...}}``): there is no ``type``. The
mapping, each way:

- ``system``: one system message whose blocks are the system blocks (text as `TextBlock`,
  ``guardContent`` / ``cachePoint`` kept whole as `OpaqueBlock`);
- an ``assistant`` message: one assistant message (`AssistantToolCalls` when it holds a
  ``toolUse``: each a `ToolCall` whose arguments are the ``input`` JSON); ``reasoningContent``
  is kept whole (its signature goes back to Bedrock only, docs/behaviour.md);
- a ``user`` message: one message per run of blocks, its text and images as blocks, its
  ``toolResult`` blocks as one `ToolResults` (``status`` ``error`` / ``success`` as
  ``is_error``, the result's blocks as the result's blocks), so the turns and tool exchanges are
  what the rules see. Converse alternates user and assistant (two messages of one role in a
  row are refused), so the export groups the user-side pieces between two assistant messages
  back into the one message they came from, with no mark of their own.

Every other block kind (document, video, audio, guardContent, cachePoint, citationsContent,
searchResult) is kept whole as an `OpaqueBlock` under ``"bedrock"``, as are the fields
turnledger does not interpret, so ``to_bedrock_json(from_bedrock_json(raw)) == raw``. A block
that is not an object of one member, a role or a message field Converse does not define is
refused by name (`InvalidMessage`), never dropped. Content recorded from another provider that
Converse has no form for (a URL image, another provider's thinking or server-tool blocks) is
left out of an export and said (`LeftOut`). Nothing here does I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

from turnledger.domain.blocks import (
    ContentBlock,
    ImageBlock,
    OpaqueBlock,
    TextBlock,
    canonical_json,
)
from turnledger.domain.bodies import LeftOut
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
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    compact_json,
)
from turnledger.domain.providers import is_custom_call

__all__ = ["from_bedrock_json", "is_block", "to_bedrock_json", "to_bedrock_record"]

_KEYED = Keyed("bedrock")
_ns, _fields = _KEYED.text, _KEYED.fields

BLOCK_KINDS: Final = frozenset({
    "text", "image", "document", "video", "audio", "toolUse", "toolResult", "guardContent",
    "cachePoint", "reasoningContent", "citationsContent", "searchResult",
})
"""The members of Converse's ``ContentBlock`` union (one per block)."""
_RESULT_KINDS: Final = frozenset({"text", "image", "document", "video", "json", "searchResult"})
"""The members of ``ToolResultContentBlock``."""
_SYSTEM_KINDS: Final = frozenset({"text", "guardContent", "cachePoint"})
"""The members of ``SystemContentBlock``."""
_STATUS: Final = {"error": True, "success": False}


def is_block(block: object, kinds: frozenset[str] = BLOCK_KINDS) -> bool:
    """Whether ``block`` is a Converse block: an object of one member among ``kinds``."""
    return isinstance(block, dict) and len(block) == 1 and next(iter(block)) in kinds


def _kind(block: object, kinds: frozenset[str], where: str) -> str:
    if is_block(block, kinds):
        return str(next(iter(block)))  # type: ignore[call-overload]
    shown = sorted(block) if isinstance(block, dict) else type(block).__name__
    raise InvalidMessage(f"{where}: a block must be an object of one member among "
                         f"{', '.join(sorted(kinds))}; got {shown}")


# --- Converse -> turnledger -------------------------------------------------------------------


def _block(block: Json, kind: str) -> ContentBlock:
    value = block[kind]
    if kind == "text" and isinstance(value, str):
        return TextBlock(value)
    if kind == "image" and isinstance(value, dict) and set(value) == {"format", "source"}:
        source = value["source"]
        if (isinstance(source, dict) and set(source) == {"bytes"} and isinstance(
                source["bytes"], str) and source["bytes"] and isinstance(value["format"], str)):
            return ImageBlock(data=source["bytes"], media_type=f"image/{value['format']}")
    return OpaqueBlock(canonical_json({_KEYED.key: block}))


def _tool_call(value: object, where: str) -> ToolCall:
    if not isinstance(value, dict) or not isinstance(value.get("toolUseId"), str) or not (
            isinstance(value.get("name"), str)) or "input" not in value:
        raise InvalidMessage(f"{where}: a toolUse needs a toolUseId, a name and an input")
    rest = {k: v for k, v in value.items() if k not in ("toolUseId", "name", "input")}
    return ToolCall(value["toolUseId"], value["name"], compact_json(value["input"]),
                    extra=_ns({"call": rest} if rest else {}))


def _tool_result(value: object, names: dict[str, str], where: str) -> ToolResult:
    if not isinstance(value, dict) or not isinstance(value.get("toolUseId"), str) or not (
            isinstance(value.get("content"), list)):
        raise InvalidMessage(f"{where}: a toolResult needs a toolUseId and a content list")
    status = value.get("status")
    if status is not None and status not in _STATUS:
        raise InvalidMessage(f"{where}: a toolResult status must be error or success, got "
                             f"{status!r}")
    blocks = [_block(b, _kind(b, _RESULT_KINDS, f"{where}.content[{i}]"))
              for i, b in enumerate(value["content"])]
    rest = {k: v for k, v in value.items() if k not in ("toolUseId", "content", "status")}
    call_id = value["toolUseId"]
    return ToolResult.from_blocks(call_id, blocks, names.get(call_id, ""),
                                  is_error=None if status is None else _STATUS[status],
                                  extra=_ns({"result": rest} if rest else {}))


def _from_assistant(content: list[Any], names: dict[str, str], where: str) -> ConversationMessage:
    blocks: list[ContentBlock | ToolCall] = []
    for i, block in enumerate(content):
        kind = _kind(block, BLOCK_KINDS, f"{where}.content[{i}]")
        if kind == "toolResult":
            raise InvalidMessage(f"{where}.content[{i}]: a toolResult in an assistant message")
        if kind == "toolUse":
            call = _tool_call(block[kind], f"{where}.content[{i}]")
            names[call.id] = call.name
            blocks.append(call)
        else:
            blocks.append(_block(block, kind))
    if any(isinstance(b, ToolCall) for b in blocks):
        return AssistantToolCalls.from_blocks(blocks)
    return Chat(ChatMessage.from_blocks(
        "assistant", [b for b in blocks if not isinstance(b, ToolCall)]))


def _from_user(content: list[Any], names: dict[str, str], where: str) -> list[ConversationMessage]:
    out: list[ConversationMessage] = []
    blocks: list[ContentBlock] = []
    results: list[ToolResult] = []

    def flush() -> None:
        if blocks:
            out.append(Chat(ChatMessage.from_blocks("user", blocks)))
            blocks.clear()
        elif results:
            out.append(ToolResults(tuple(results)))
            results.clear()

    for i, block in enumerate(content):
        kind = _kind(block, BLOCK_KINDS, f"{where}.content[{i}]")
        if kind == "toolUse":
            raise InvalidMessage(f"{where}.content[{i}]: a toolUse in a user message")
        if kind == "toolResult":
            if blocks:
                flush()
            results.append(_tool_result(block[kind], names, f"{where}.content[{i}]"))
        else:
            if results:
                flush()
            blocks.append(_block(block, kind))
    flush()
    return out


def from_bedrock_json(body: Json | Sequence[Json]) -> list[ConversationMessage]:
    """The turnledger messages of a Converse conversation: ``{"system", "messages"}`` (other
    keys are the request's, not messages) or a list of messages. `InvalidMessage` names the
    message and block of what has no turnledger form."""
    if isinstance(body, dict):
        system, messages = body.get("system"), body.get("messages")
    else:
        system, messages = None, body
    if not isinstance(messages, list):
        raise InvalidMessage("a Converse conversation needs a messages list")
    out: list[ConversationMessage] = []
    if system is not None and not isinstance(system, list):
        raise InvalidMessage("system: must be a list of system blocks")
    if system:  # an empty list is no system prompt (as a request without one)
        blocks = [_block(b, _kind(b, _SYSTEM_KINDS, f"system[{i}]")) for i, b in
                  enumerate(system)]
        out.append(Chat(ChatMessage.from_blocks("system", blocks)))
    names: dict[str, str] = {}
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if i and isinstance(message, dict) and message.get("role") == messages[i - 1].get(
                "role"):
            raise InvalidMessage(f"{where}: two {message.get('role')} messages in a row; "
                                 "Converse alternates user and assistant")
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            shown = sorted(message) if isinstance(message, dict) else type(message).__name__
            raise InvalidMessage(f"{where}: a Converse message has exactly role and content, "
                                 f"got {shown}")
        role, content = message["role"], message["content"]
        if not isinstance(content, list) or not content:
            raise InvalidMessage(f"{where}: content must be a non-empty list of blocks")
        if role == "assistant":
            out.append(_from_assistant(content, names, where))
        elif role == "user":
            out.extend(_from_user(content, names, where))
        else:
            raise InvalidMessage(f"{where}: a Converse role is user or assistant, got {role!r}")
    return out


# --- turnledger -> Converse -------------------------------------------------------------------


class _Export:
    """Builds the Converse JSON of a conversation and says what had no Converse form."""

    def __init__(self) -> None:
        self.left_out: list[LeftOut] = []
        self.index = 0

    def leave_out(self, what: str, reason: str) -> None:
        self.left_out.append(LeftOut(self.index, what, reason))

    def block(self, block: ContentBlock | ToolCall) -> Json | None:
        match block:
            case ToolCall() if is_custom_call(block):
                self.leave_out(f"kind custom_tool_call of call {block.id} ({block.name})",
                               "Bedrock Converse has no custom tool calls: written as a "
                               "toolUse with its input as the argument input")
                return {"toolUse": {"toolUseId": block.id, "name": block.name,
                                    "input": {"input": block.arguments}}}
            case ToolCall():
                call = dict(_fields(block.extra).get("call", {}))
                return {"toolUse": {"toolUseId": block.id, "name": block.name,
                                    "input": json.loads(block.arguments), **call}}
            case TextBlock(text=text):
                return {"text": text}
            case ImageBlock(data=data, media_type=media_type) if data and media_type.startswith(
                    "image/"):
                return {"image": {"format": media_type.removeprefix("image/"),
                                  "source": {"bytes": data}}}
            case OpaqueBlock() if _KEYED.key in json.loads(block.json):
                value = json.loads(block.json)[_KEYED.key]
                return value if isinstance(value, dict) else None
        self.leave_out(_block_name(block), "Bedrock Converse has no form for it (it came "
                       "from another provider)")
        return None

    def blocks(self, blocks: Iterable[ContentBlock | ToolCall]) -> list[Json]:
        return [b for b in map(self.block, blocks) if b is not None]

    def result(self, result: ToolResult) -> Json:
        fields = _fields(result.extra)
        if result.blocks or not result.content:  # a Converse result's blocks, none included
            content = self.blocks(result.blocks)
        else:  # recorded by another runtime: its text
            content = [{"text": result.content}]
        value: Json = {"toolUseId": result.tool_call_id, "content": content}
        if result.is_error is not None:
            value["status"] = "error" if result.is_error else "success"
        return {"toolResult": value | dict(fields.get("result", {}))}

    def chat_blocks(self, chat: ChatMessage) -> list[Json]:
        return self.blocks(chat.blocks) if chat.blocks else [{"text": chat.content}]


def _block_name(block: object) -> str:
    if isinstance(block, OpaqueBlock):
        return f"{block.type or 'untyped'} block"
    return f"{type(block).__name__.removesuffix('Block').lower()} block"


def _never_opens(extra: str) -> bool:
    """Converse alternates user and assistant: the user-side pieces between two assistant
    messages are one user message, so no piece needs a mark of where its message began."""
    return False


def to_bedrock_record(
    history: Iterable[ChatMessage | ConversationMessage],
) -> tuple[Json, tuple[LeftOut, ...]]:
    """The Converse JSON of a turnledger history or window (the inverse of
    `from_bedrock_json`) and what it could not carry (``LeftOut.message``: the index of the
    message in the history). The system messages make ``system``; the user-side pieces are
    grouped back into the messages they came from (`grouped`); the breadcrumb is a user
    text."""
    conversation = conversation_of(list(history))
    export = _Export()
    system: list[Json] = []
    messages: list[Json] = []
    positions = {id(m): i for i, m in enumerate(conversation)}
    rest: list[ConversationMessage] = []
    for message in conversation:
        if isinstance(message, Chat) and message.message.role == "system":
            export.index = positions[id(message)]
            system += export.chat_blocks(message.message)
        else:
            rest.append(message)
    for group in grouped(rest, _never_opens):
        messages.append(_message(group, export, positions))
    body: Json = {"system": system} if system else {}
    body["messages"] = [m for m in messages if m["content"]]
    return body, tuple(export.left_out)


def _message(group: tuple[Piece, ...], export: _Export, positions: dict[int, int]) -> Json:
    first = group[0][0]
    export.index = positions[id(first)]
    if not user_side(first):
        if isinstance(first, AssistantToolCalls):
            return {"role": "assistant", "content": export.blocks(assistant_blocks(first))}
        assert isinstance(first, Chat)
        return {"role": "assistant", "content": export.chat_blocks(first.message)}
    content: list[Json] = []
    for message, i in group:
        export.index = positions[id(message)]
        if isinstance(message, ToolResults):
            content.append(export.result(message.results[i]))
        else:
            assert isinstance(message, Chat)
            content += export.chat_blocks(message.message)
    return {"role": "user", "content": content}


def to_bedrock_json(history: Iterable[ChatMessage | ConversationMessage]) -> Json:
    """`to_bedrock_record` without what it left out."""
    return to_bedrock_record(history)[0]
