"""Google genai ``Content`` JSON ⇄ turnledger messages, losslessly (ADR-0081).

The JSON is google-genai's own (``content.model_dump(mode="json", exclude_none=True)``); the
integration (`turnledger.integrations.google_adk`) dumps and validates the objects. A
``model`` content is one assistant message (text and thought parts as blocks, each
``function_call`` a `ToolCall`, code parts opaque blocks); a ``user`` content is one message per
run of parts: its text and inline data as blocks (images as `ImageBlock`), its
``function_response`` parts as one `ToolResults`. Every field turnledger does not interpret is
kept beside it under ``"google_adk"``. ADK strips the client-side call ids before the model sees
the contents, so a call without an id gets a recorded one (``adk-…``, the same for the same
contents and seed, ADR-0099; given back as no id) and a response without an id answers the
oldest unanswered call of its name (`GenaiCalls`). A part kind or a role with no turnledger
form is refused by name (`InvalidMessage`), never dropped.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Final

from turnledger.domain.blocks import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    OpaqueBlock,
    TextBlock,
    ThinkingBlock,
    canonical_json,
    extra_fields,
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

__all__ = [
    "GenaiCalls",
    "from_genai_content",
    "from_genai_json",
    "genai_content_json",
    "genai_groups",
    "genai_opens",
    "snake_case_contents",
    "to_genai_json",
    "to_genai_record",
    "unanswered_calls",
]

_KEYED = Keyed("google_adk")
_ns, _fields = _KEYED.text, _KEYED.fields
_OPAQUE_PARTS = ("inline_data", "file_data", "executable_code", "code_execution_result")
_SYNTHETIC = "synthetic_id"  # a call id turnledger gave: the content had none
_ID_SPACE = uuid.UUID("5f0c6f4e-2f38-5b8e-9d3a-6a1d2f0c9b71")
"""The uuid5 namespace of the ids turnledger gives id-less calls and responses."""


def _standard_b64(urlsafe: str) -> str:
    return base64.b64encode(base64.urlsafe_b64decode(urlsafe)).decode("ascii")


def _urlsafe_b64(standard: str) -> str:
    return base64.urlsafe_b64encode(base64.b64decode(standard)).decode("ascii")


def _kind(part: Json, where: str) -> str:
    for kind in ("text", "function_call", "function_response", *_OPAQUE_PARTS):
        if kind in part:
            return kind
    raise InvalidMessage(f"{where}: a part with {sorted(part) or 'no fields'} has no "
                         "turnledger form; it was not recorded")


# --- genai -> turnledger ----------------------------------------------------------------------


class GenaiCalls:
    """The unanswered calls of a conversation, oldest first: what an id-less response answers.

    A call without an id gets one (``adk-`` and 32 hex digits, as ADK's own), made from
    ``seed``, the content's and the part's index, the call and the ids still unanswered: the
    same contents converted again get the same ids (ADR-0099), and an id-less call made
    again while the first is unanswered gets another id (turnledger refuses a call whose id a
    call of the turn still awaits, ADR-0099)."""

    def __init__(self, pending: Iterable[ToolCall] = (), seed: str = "") -> None:
        self.pending = list(pending)
        self.seed = seed
        self.where = ""  # the content and part being converted: part of a made id

    def _made_id(self, kind: str, value: Json) -> str:
        pending = [c.id for c in self.pending]
        name = canonical_json([self.seed, self.where, kind, value, pending])
        return f"adk-{uuid.uuid5(_ID_SPACE, name).hex}"

    def call(self, call: Json) -> ToolCall:
        rest = dict(call)
        call_id = rest.pop("id", None)
        fields: Json = {"call": rest}
        if call_id is None:
            call_id, fields[_SYNTHETIC] = self._made_id("call", rest), True
        name, args = rest.pop("name", ""), rest.pop("args", None)
        fields["args"] = args is not None
        made = ToolCall(call_id, name, "{}" if args is None else compact_json(args),
                        extra=_ns(fields))
        self.pending.append(made)
        return made

    def answer(self, response: Json) -> ToolResult:
        rest = dict(response)
        call_id, name = rest.pop("id", None), rest.pop("name", "")
        value = rest.pop("response", None)
        fields: Json = {"response": rest, "value": value is not None}
        if call_id is None:
            match = next((c for c in self.pending if c.name == name), None)
            call_id = match.id if match else self._made_id("response", response)
            fields[_SYNTHETIC] = True
        self.pending = [c for c in self.pending if c.id != call_id]
        content = "{}" if value is None else compact_json(value)
        return ToolResult(call_id, content, name, extra=_ns(fields))


def _block(part: Json, kind: str) -> ContentBlock:
    rest = dict(part)
    if kind == "text":
        text = rest.pop("text")
        if rest.get("thought") is True:
            return ThinkingBlock(text, extra=_ns(rest))
        return TextBlock(text, extra=_ns(rest))
    blob = rest.get("inline_data") or {}
    if kind == "inline_data" and str(blob.get("mime_type", "")).startswith("image/") and set(
        blob) == {"data", "mime_type"}:
        rest.pop("inline_data")
        return ImageBlock(data=_standard_b64(blob["data"]), media_type=blob["mime_type"],
                          extra=_ns(rest | {"image": True}))
    return OpaqueBlock(canonical_json({_KEYED.key: part}))


def _from_model(parts: list[Json], calls: GenaiCalls, where: str) -> ConversationMessage:
    blocks: list[ContentBlock | ToolCall] = []
    for i, part in enumerate(parts):
        kind = _kind(part, f"{where}.parts[{i}]")
        if kind == "function_response":
            raise InvalidMessage(f"{where}.parts[{i}]: a function_response in a model content")
        if kind == "function_call":
            calls.where = f"{where}.parts[{i}]"
            rest = dict(part)
            call = calls.call(rest.pop("function_call"))
            if rest:  # e.g. the thought_signature a Gemini model gives its call
                call = ToolCall(call.id, call.name, call.arguments,
                                extra=_ns(_fields(call.extra) | {"part": rest}))
            blocks.append(call)
        else:
            blocks.append(_block(part, kind))
    extra = _ns({"start": True})
    if any(isinstance(b, ToolCall) for b in blocks):
        return AssistantToolCalls.from_blocks(blocks, extra=extra)
    return Chat(ChatMessage.from_blocks(
        "assistant", [b for b in blocks if not isinstance(b, ToolCall)], extra=extra))


def _from_user(parts: list[Json], calls: GenaiCalls, where: str) -> list[ConversationMessage]:
    out: list[ConversationMessage] = []
    blocks: list[ContentBlock] = []
    results: list[ToolResult] = []

    def first() -> bool:
        return not out and not blocks and not results

    def flush_blocks() -> None:
        if blocks:
            start = {"start": True} if not out else {}
            out.append(Chat(ChatMessage.from_blocks("user", blocks, extra=_ns(start))))
            blocks.clear()

    def flush_results() -> None:
        if results:
            out.append(ToolResults(tuple(results)))
            results.clear()

    for i, part in enumerate(parts):
        kind = _kind(part, f"{where}.parts[{i}]")
        if kind == "function_call":
            raise InvalidMessage(f"{where}.parts[{i}]: a function_call in a user content")
        if kind == "function_response":
            flush_blocks()
            calls.where = f"{where}.parts[{i}]"
            rest = dict(part)
            result = calls.answer(rest.pop("function_response"))
            fields = _fields(result.extra) | ({"part": rest} if rest else {})
            if first():
                fields["start"] = True
            results.append(ToolResult(result.tool_call_id, result.content, result.tool_name,
                                      extra=_ns(fields)))
        else:
            flush_results()
            blocks.append(_block(part, kind))
    flush_blocks()
    flush_results()
    return out


def from_genai_content(
    raw: Json, calls: GenaiCalls, where: str = "content"
) -> list[ConversationMessage]:
    """The turnledger messages of one content's JSON; ``calls``: the conversation's unanswered
    calls so far (updated). `InvalidMessage` names ``where`` (and the part) when a field, part
    kind or role has no turnledger form."""
    role, parts = raw.get("role"), raw.get("parts") or []
    if set(raw) - {"role", "parts"}:
        raise InvalidMessage(f"{where}: content fields {sorted(set(raw) - {'role', 'parts'})} "
                             "have no turnledger form")
    if not parts:
        raise InvalidMessage(f"{where}: a content without parts has no turnledger form")
    if role == "model":
        return [_from_model(parts, calls, where)]
    if role == "user":
        return _from_user(parts, calls, where)
    raise InvalidMessage(f"{where}: a content of role {role!r} has no turnledger form "
                         "(use 'user' or 'model')")


def from_genai_json(
    contents: Iterable[Json], *, unanswered: Iterable[ToolCall] = (), seed: str = ""
) -> list[ConversationMessage]:
    """The turnledger messages of contents' JSON (module doc). ``unanswered``: the calls
    recorded before them that still await a response; ``seed``: what makes the ids of
    id-less calls differ from those of other conversions of the same contents."""
    calls = GenaiCalls(unanswered, seed)
    return [message for i, raw in enumerate(contents)
            for message in from_genai_content(raw, calls, f"contents[{i}]")]


def unanswered_calls(window: Sequence[ChatMessage]) -> list[ToolCall]:
    """The calls of ``window`` no later result answers, oldest first; a result answers the
    newest earlier call of its id still unanswered (R36): an id answered once may be called
    again."""
    pending: list[ToolCall] = []
    for m in window:
        if isinstance(m.item, AssistantToolCalls):
            pending.extend(m.item.tool_calls)
        elif isinstance(m.item, ToolResult):
            answered = m.item.tool_call_id
            for k in range(len(pending) - 1, -1, -1):
                if pending[k].id == answered:
                    del pending[k]
                    break
    return pending


# --- turnledger -> genai ----------------------------------------------------------------------


def _part_of_block(block: ContentBlock | ToolCall) -> Json:
    match block:
        case ToolCall():
            fields = _fields(block.extra)
            call = dict(fields.get("call", {})) | {"name": block.name}
            if not fields.get(_SYNTHETIC):
                call["id"] = block.id
            if fields.get("args", True):
                call["args"] = json.loads(block.arguments)
            return dict(fields.get("part", {})) | {"function_call": call}
        case TextBlock(text=text):
            return _fields(block.extra) | {"text": text}
        case ThinkingBlock(thinking=thinking):
            return {"thought": True} | _fields(block.extra) | {"text": thinking}
        case ImageBlock():
            fields = _fields(block.extra)
            fields.pop("image", None)
            data = _urlsafe_b64(block.data) if block.data else ""
            return fields | {"inline_data": {"data": data, "mime_type": block.media_type}}
        case OpaqueBlock():
            return _fields(block.json)
    raise InvalidMessage(f"a {type(block).__name__} has no genai part form")


def _part_of_result(result: ToolResult) -> Json:
    fields = _fields(result.extra)
    response = dict(fields.get("response", {})) | {"name": result.tool_name}
    if not fields.get(_SYNTHETIC):
        response["id"] = result.tool_call_id
    if not fields:  # recorded by another runtime: its text as ADK wraps a tool's str result
        response["response"] = {"result": result.content}
    elif fields.get("value"):
        response["response"] = json.loads(result.content)
    return dict(fields.get("part", {})) | {"function_response": response}


def _user_parts(chat: ChatMessage) -> list[Json]:
    if chat.blocks:
        return [_part_of_block(b) for b in chat.blocks]
    return [{"text": chat.content}]


def _model_parts(message: ConversationMessage) -> list[Json]:
    if isinstance(message, AssistantToolCalls):
        return [_part_of_block(b) for b in assistant_blocks(message)]
    assert isinstance(message, Chat)  # the other messages of a window are user-side
    chat = message.message
    return [_part_of_block(b) for b in chat.blocks] or [{"text": chat.content}]


@functools.lru_cache(maxsize=4096)
def genai_opens(extra: str) -> bool:
    """Whether a user-side piece with this ``extra`` opens a user content of its own (it was
    the first of one); memoised: a window is grouped again at every model call."""
    return bool(_fields(extra).get("start"))


def genai_groups(conversation: Sequence[ConversationMessage]) -> list[tuple[Piece, ...]]:
    """The pieces of each content ``conversation`` makes (`grouped`)."""
    return grouped(conversation, genai_opens)


def genai_content_json(pieces: tuple[Piece, ...]) -> Json:
    """google-genai's JSON of the content built from ``pieces`` (`genai_groups`)."""
    first = pieces[0][0]
    if not user_side(first):
        return {"role": "model", "parts": _model_parts(first)}
    parts: list[Json] = []
    for message, i in pieces:
        if isinstance(message, ToolResults):
            parts.append(_part_of_result(message.results[i]))
        else:
            assert isinstance(message, Chat)
            parts += _user_parts(message.message)
    return {"role": "user", "parts": parts}


def to_genai_json(history: Iterable[ChatMessage | ConversationMessage]) -> list[Json]:
    """The contents' JSON of a turnledger window or history (the inverse of
    `from_genai_json`); the breadcrumb is a text part of the user content it opens; a system
    message (recorded by another runtime) is a user text part, since contents have no system
    role."""
    return [genai_content_json(group) for group in genai_groups(conversation_of(list(history)))]


# --- field names ----------------------------------------------------------------------------

_CAMEL: Final = re.compile(r"(?<!^)(?=[A-Z])")


def _snake(key: str) -> str:
    return _CAMEL.sub("_", key).lower()


def snake_case_contents(contents: Any) -> Any:
    """Gemini contents as google-genai's JSON names their fields (``function_call``,
    ``inline_data``, ``mime_type``): the REST API's camelCase names (``functionCall``) are
    renamed, in each part and one level inside it (``inlineData.mimeType``); the values below
    that (a call's ``args``, a response's ``response``: the caller's JSON) are never touched."""
    if not isinstance(contents, list):
        return contents
    renamed = []
    for content in contents:
        if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
            renamed.append(content)
            continue
        parts = []
        for part in content["parts"]:
            if not isinstance(part, dict):
                parts.append(part)
                continue
            parts.append({_snake(k): ({_snake(f): w for f, w in v.items()}
                                      if isinstance(v, dict) else v)
                          for k, v in part.items()})
        renamed.append({**content, "parts": parts})
    return renamed


# --- an export of a record ------------------------------------------------------------------


def to_genai_record(
    history: Sequence[ConversationMessage],
) -> tuple[list[Json], tuple[LeftOut, ...]]:
    """The contents' JSON of a record (`to_genai_json`) and what they could not carry
    (issue 36): a block with no genai part form (a document, redacted thinking, another
    provider's server-tool block or typed part) is left out and said (``LeftOut.message``: its
    index in the history), a message left with nothing at all too; never a part genai's
    ``Part`` type refuses."""
    left: list[LeftOut] = []
    carried = [_carried(item, index, left) for index, item in enumerate(history)]
    kept = [item for item in carried if item is not None]
    return to_genai_json(kept), tuple(left)


_KINDS: Final = {"DocumentBlock": "document", "RedactedThinkingBlock": "redacted_thinking",
                 "ServerToolUse": "server_tool_use"}


def _part_block(block: Any, index: int, left: list[LeftOut]) -> Any:
    """``block`` as a block genai has a part for: itself, a document's text or inline data,
    or None (left out, and said)."""
    if isinstance(block, ToolCall) and is_custom_call(block):
        left.append(LeftOut(index, f"kind custom_tool_call of call {block.id} ({block.name})",
                            "Gemini has no custom tool calls: written as a function call with "
                            "its input as the argument input"))
        return ToolCall(block.id, block.name, canonical_json({"input": block.arguments}))
    if isinstance(block, ThinkingBlock) and _KEYED.key not in extra_fields(block.extra):
        left.append(LeftOut(index, "thinking block", "another provider's thinking goes back "
                            "to that provider only"))
        return None
    if isinstance(block, TextBlock | ThinkingBlock | ImageBlock | ToolCall) or (
            isinstance(block, OpaqueBlock) and _KEYED.key in extra_fields(block.json)):
        return block  # an opaque block of any other format is no genai part
    if isinstance(block, DocumentBlock):
        source = extra_fields(block.source)
        data, media = source.get("data"), source.get("media_type")
        if source.get("type") == "text" and isinstance(data, str):
            return TextBlock(data)
        if source.get("type") == "base64" and isinstance(data, str) and isinstance(media, str):
            return OpaqueBlock(canonical_json({_KEYED.key: {"inline_data": {
                "data": _urlsafe_b64(data), "mime_type": media}}}))
    kind = getattr(block, "type", "") or _KINDS.get(type(block).__name__, "untyped")
    left.append(LeftOut(index, f"{kind} block", "Gemini contents have no part of its kind"))
    return None


def _parts(blocks: Sequence[Any], index: int, left: list[LeftOut]) -> list[Any]:
    fitted = [_part_block(b, index, left) for b in blocks]
    return [b for b in fitted if b is not None]


def _carried(item: ConversationMessage, index: int,
             left: list[LeftOut]) -> ConversationMessage | None:
    match item:
        case Chat(message=chat) if chat.blocks:
            blocks = _parts(chat.blocks, index, left)
            if not blocks:
                left.append(LeftOut(index, "message", "nothing of it has a Gemini part"))
                return None
            if blocks == list(chat.blocks):
                return item
            return Chat(ChatMessage.from_blocks(chat.role, blocks, extra=chat.extra))
        case AssistantToolCalls() if item.blocks:
            kept = _parts(item.blocks, index, left)
            if kept == list(item.blocks):
                return item
            return AssistantToolCalls.from_blocks(
                kept, reasoning_content=item.reasoning_content, extra=item.extra)
        case AssistantToolCalls():
            calls = _parts(item.tool_calls, index, left)
            if calls == list(item.tool_calls):
                return item
            return AssistantToolCalls(item.text, tuple(calls), item.reasoning_content,
                                      extra=item.extra)
        case ToolResults():
            results = tuple(
                r if not r.blocks else ToolResult.from_blocks(
                    r.tool_call_id, _parts(r.blocks, index, left), r.tool_name,
                    is_error=r.is_error, extra=r.extra)
                for r in item.results)
            return item if results == item.results else ToolResults(results)
    return item
