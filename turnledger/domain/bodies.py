"""A request body per provider API: what crosses, what is translated, what is left out (issue 21).

The record keeps every block and field a provider sent (`turnledger.domain.providers`); a
request goes to one API, which takes only its own shapes. `fit_messages` turns the messages of
a request into the messages that API accepts:

- **kept**: what the target takes as it is (text, images where it takes images, tool calls and
  results, its own blocks and fields);
- **translated**: what has an equivalent there (a PDF or text document becomes an OpenAI
  ``file`` / ``input_file`` part or an Anthropic ``document``; an image an ``image_url`` or
  ``input_image``; an assistant's text blocks a plain text for Responses);
- **left out**, and said (`LeftOut`): another provider's signed or encrypted reasoning (a
  signature or ciphertext only ever goes back to the provider that made it: an Anthropic
  ``thinking``/``redacted_thinking`` block to Anthropic, a Responses ``reasoning`` item to
  Responses), server-tool blocks and hosted-tool items the target cannot replay, content a role
  cannot carry there (an image in an OpenAI Chat tool message), and fields the target does not
  define (a Responses item's ``id`` and ``status`` in an OpenAI Chat message).

Tool calls and their results always cross, so no exchange is split. Which provider made a
thinking block is read from its shape: a Responses ``reasoning`` item is recorded as an assistant
message of one `ThinkingBlock` whose fields say ``type: reasoning``; every other thinking block
came from Anthropic. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

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
    canonical_json,
    extra_fields,
    extra_text,
)
from turnledger.domain.cache import mark_anthropic, prompt_cache_key
from turnledger.domain.errors import InvalidProfile
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.domain.providers import (
    CUSTOM_CALL,
    CUSTOM_OUTPUT,
    declared_images,
    is_custom_call,
    marker_blocks,
    structured_item,
    to_anthropic,
    to_anthropic_marked,
    to_openai_chat,
    to_openai_responses,
)
from turnledger.domain.turns import segment

__all__ = [
    "APIS",
    "API_ANTHROPIC",
    "API_OPENAI_CHAT",
    "API_OPENAI_RESPONSES",
    "LeftOut",
    "check_api",
    "fit_messages",
    "is_its_own",
    "prompt_cache_key",
    "render_body",
]

API_OPENAI_CHAT: Final = "openai_chat"
API_OPENAI_RESPONSES: Final = "openai_responses"
API_ANTHROPIC: Final = "anthropic"
APIS: Final = (API_OPENAI_CHAT, API_OPENAI_RESPONSES, API_ANTHROPIC)
_NAMES: Final = {
    API_OPENAI_CHAT: "OpenAI Chat Completions",
    API_OPENAI_RESPONSES: "OpenAI Responses",
    API_ANTHROPIC: "Anthropic Messages",
}


def check_api(key: str, api: object) -> None:
    """Raise `InvalidProfile` naming ``key`` unless ``api`` is None or one of `APIS`."""
    if api is not None and api not in APIS:
        raise InvalidProfile(f"{key}: must be one of {', '.join(APIS)}, got {api!r}")


@attrs.frozen
class LeftOut:
    """Something of a request's messages its body does not carry, and why (issue 21).

    ``message`` is the index of the message in `PreparedRequest.messages`; ``what`` names the
    block, item or fields (``"thinking block"``, ``"fields id, status"``); ``reason`` says why.
    """

    message: int
    what: str
    reason: str


# --- what each API takes (the providers' SDK request types; tests validate against them) ---

_BLOCK_FIELDS: Final[dict[str, dict[type, frozenset[str]]]] = {
    API_ANTHROPIC: {
        TextBlock: frozenset({"cache_control", "citations"}),
        ImageBlock: frozenset({"cache_control"}),
        DocumentBlock: frozenset({"cache_control", "citations", "context", "title"}),
        ThinkingBlock: frozenset(),
        RedactedThinkingBlock: frozenset(),
        ServerToolUse: frozenset({"cache_control", "caller"}),
        ServerToolResult: frozenset({"cache_control", "caller"}),
        ToolCall: frozenset({"cache_control", "caller", "toolset_name"}),
    },
    API_OPENAI_CHAT: {
        TextBlock: frozenset(),
        ImageBlock: frozenset({"image_url"}),
        ToolCall: frozenset(),
    },
    API_OPENAI_RESPONSES: {
        TextBlock: frozenset({"type", "annotations", "logprobs"}),
        ImageBlock: frozenset({"detail", "file_id"}),
        ToolCall: frozenset({"id", "status", "type", "namespace"}),
    },
}
"""The block fields each API defines; any other kept field is left out when crossing."""

_CUSTOM_FIELDS: Final = frozenset({"type", "id", "caller", "namespace"})
"""The fields of a Responses custom tool call (no ``status``, unlike a function call)."""

_MESSAGE_FIELDS: Final[dict[str, dict[str, frozenset[str]]]] = {
    API_ANTHROPIC: {"system": frozenset({"role"}), "user": frozenset(),
                    "assistant": frozenset(), "tool": frozenset({"is_error"})},
    API_OPENAI_CHAT: {"system": frozenset({"name", "role"}), "user": frozenset({"name"}),
                      "assistant": frozenset({"name", "refusal", "audio", "function_call"}),
                      "tool": frozenset()},
    API_OPENAI_RESPONSES: {"system": frozenset({"role", "type", "status"}),
                           "user": frozenset({"type", "status"}),
                           "assistant": frozenset({"type", "status", "id", "phase"}),
                           "tool": frozenset({"type", "id", "status"})},
}
"""The message fields each API defines, per role (``tool``: a tool result's own fields)."""

_RECORDED_ONLY: Final[dict[str, frozenset[str]]] = {
    API_OPENAI_CHAT: frozenset({"annotations"}),
    API_OPENAI_RESPONSES: frozenset(),
    API_ANTHROPIC: frozenset(),
}
"""Fields a format's own recordings carry that its request types do not define (a Chat
completion's ``annotations``): an export of the record in that format keeps them."""

_KEYED: Final = frozenset({"google_adk", "pydantic_ai", "bedrock"})
"""The keys under which the grouped formats (`turnledger.domain.formats`) keep their own
fields in an ``extra``: never a field of another format's message."""


def _defined(api: str) -> frozenset[str]:
    fields = [f for kinds in (_BLOCK_FIELDS[api], _MESSAGE_FIELDS[api]) for f in kinds.values()]
    return frozenset().union(*fields, _RECORDED_ONLY[api])


_FOREIGN: Final[dict[str, frozenset[str]]] = {
    api: _KEYED | frozenset().union(*(_defined(o) for o in APIS if o != api)) - _defined(api)
    for api in APIS
}
"""Per API, the fields another format defines and it does not: what an export of the record
in that API's format leaves out (`fit_messages` with ``fields=False``); a field no format
defines is the record's own and is kept."""

_OPAQUE_TYPES: Final[dict[str, frozenset[str]]] = {
    API_ANTHROPIC: frozenset({
        "search_result", "container_upload", "mcp_tool_use", "mcp_tool_result",
        "web_fetch_tool_result", "code_execution_tool_result", "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result", "tool_search_tool_result", "tool_reference",
    }),
    API_OPENAI_CHAT: frozenset({"input_audio", "file", "refusal"}),
    API_OPENAI_RESPONSES: frozenset({"input_file", "refusal"}),
}
"""Block types turnledger keeps whole (`OpaqueBlock`) that each API takes."""

_OPAQUE_IMAGES: Final[dict[str, str]] = {API_ANTHROPIC: "image",
                                         API_OPENAI_RESPONSES: "input_image"}
"""An image turnledger keeps whole because its source is not inline or a URL (an Anthropic
``file`` source, a Responses ``file_id``): its own API takes it in a user message or a tool
result, as it takes any other image there."""

_CHAT_ROLE_PARTS: Final = {"user": frozenset({"text", "image", "input_audio", "file"}),
                           "assistant": frozenset({"text", "refusal"}),
                           "system": frozenset({"text"}), "tool": frozenset({"text"})}
"""OpenAI Chat: which parts a message of each role may hold."""


class _Notes:
    """Collects what the body of one message leaves out; ``fields`` False keeps every field
    but another format's (an export of the record keeps the fields its format recorded,
    `fit_messages`)."""

    def __init__(self, index: int, api: str, out: list[LeftOut], fields: bool = True,
                 custom: set[str] | None = None) -> None:
        self.index, self.api, self.out, self.fields = index, api, out, fields
        # the ids of the custom tool calls so far: a Responses result says its call's kind
        self.custom = set() if custom is None else custom

    def add(self, what: str, why: str) -> None:
        self.out.append(LeftOut(self.index, what, why))

    def foreign(self, what: str) -> None:
        self.add(what, f"{_NAMES[self.api]} does not take it")


_EMPTY: Final[tuple[object, ...]] = (None, [], {}, "")


def _keep_fields(extra: str, allowed: frozenset[str], notes: _Notes, owner: str) -> str:
    """``extra`` with only the ``allowed`` fields (in an export: without another format's
    fields, `_FOREIGN`); the others are noted."""
    if not extra:
        return extra
    fields = extra_fields(extra)
    foreign = _FOREIGN[notes.api]
    kept = {k: v for k, v in fields.items()
            if k in allowed or (not notes.fields and k not in foreign)}
    if len(kept) == len(fields):
        return extra
    dropped = sorted(k for k, v in fields.items() if k not in kept and v not in _EMPTY
                     and (k, v) != ("type", "message"))  # a message says that by itself
    if dropped:  # a null or empty field carries nothing: leaving it out is worth no note
        notes.add(f"{owner} fields {', '.join(dropped)}",
                  f"{_NAMES[notes.api]} does not define them")
    return extra_text(kept)


def _a(role: str) -> str:
    """The role with its article: ``a user``, ``an assistant``."""
    return f"{'an' if role[:1] in 'aeio' else 'a'} {role}"


def _data_url(media_type: str, data: str) -> str:
    return f"data:{media_type};base64,{data}"


# --- one block -------------------------------------------------------------------------------


def _fit_document(block: DocumentBlock, api: str, role: str, notes: _Notes) -> Any:
    """A document for ``api``: kept, translated to the file part it takes, or left out."""
    source = extra_fields(block.source)
    kind, media = source.get("type"), source.get("media_type", "application/pdf")
    if api == API_ANTHROPIC:
        return _with_fields(block, api, notes)
    title = extra_fields(block.extra).get("title")
    name = title if isinstance(title, str) and title else "document.pdf"
    if kind == "text" and isinstance(source.get("data"), str):
        return TextBlock(source["data"])
    if api == API_OPENAI_CHAT and role == "user" and kind == "base64":
        return OpaqueBlock(canonical_json({"type": "file", "file": {
            "file_data": _data_url(media, source.get("data", "")), "filename": name}}))
    if api == API_OPENAI_RESPONSES and role in ("user", "tool") and kind == "base64":
        return OpaqueBlock(canonical_json({"type": "input_file", "filename": name,
                                           "file_data": _data_url(media, source.get("data", ""))}))
    if api == API_OPENAI_RESPONSES and role in ("user", "tool") and kind == "url":
        return OpaqueBlock(canonical_json({"type": "input_file", "file_url": source["url"]}))
    notes.add(f"document block ({kind} source)",
              f"{_NAMES[api]} takes no document of this kind in {_a(role)} message")
    return None


def _fit_opaque(block: OpaqueBlock, api: str, role: str, notes: _Notes) -> Any:
    """A block turnledger keeps whole: kept where the target takes its type, a file part
    translated to the target's own, else left out."""
    kind = block.type
    fields = extra_fields(block.json)
    translated = _translate_file(fields, api, role)
    if translated is not None:
        return translated
    allowed = kind in _OPAQUE_TYPES[api] or (
        kind == _OPAQUE_IMAGES.get(api) and role in ("user", "tool"))
    if api == API_OPENAI_CHAT:
        allowed = allowed and kind in _CHAT_ROLE_PARTS.get(role, frozenset())
    if allowed:
        return block
    notes.add(f"{kind or 'untyped'} block", f"{_NAMES[api]} takes no such block in {_a(role)} "
              "message (it came from another provider, or the target cannot replay it)")
    return None


def _translate_file(fields: dict[str, Any], api: str, role: str) -> ContentBlock | None:
    """An OpenAI ``file`` / ``input_file`` part as the target's own file block, or None."""
    kind = fields.get("type")
    inner = fields.get("file") if kind == "file" else fields if kind == "input_file" else None
    if not isinstance(inner, dict) or (api == API_OPENAI_CHAT and kind == "file") or (
        api == API_OPENAI_RESPONSES and kind == "input_file"
    ):
        return None
    data = inner.get("file_data")
    name = inner.get("filename")
    head, sep, payload = data.partition(";base64,") if isinstance(data, str) else ("", "", "")
    if sep and head.startswith("data:"):
        media = head[len("data:"):]
        if api == API_ANTHROPIC and media == "application/pdf":
            extra = extra_text({"title": name}) if isinstance(name, str) and name else ""
            return DocumentBlock(canonical_json({"type": "base64", "media_type": media,
                                                 "data": payload}), extra=extra)
        if api == API_OPENAI_CHAT and role == "user":
            return OpaqueBlock(canonical_json({"type": "file", "file": {
                "file_data": data, "filename": name or "document.pdf"}}))
        if api == API_OPENAI_RESPONSES and role in ("user", "tool"):
            return OpaqueBlock(canonical_json({"type": "input_file", "file_data": data,
                                               "filename": name or "document.pdf"}))
    url = inner.get("file_url")
    if api == API_ANTHROPIC and isinstance(url, str) and url:
        return DocumentBlock(canonical_json({"type": "url", "url": url}))
    return None


def _with_fields(block: Any, api: str, notes: _Notes) -> Any:
    """``block`` with only the fields ``api`` defines for its kind."""
    allowed = _BLOCK_FIELDS[api].get(type(block), frozenset())
    extra = _keep_fields(block.extra, allowed, notes, _block_name(block))
    return block if extra == block.extra else attrs.evolve(block, extra=extra)


def _image_for(block: ImageBlock, api: str, notes: _Notes) -> ImageBlock:
    """An image with the fields ``api`` defines; its detail level crosses between the OpenAI
    APIs (Chat's ``image_url.detail``, Responses' ``detail``, which Responses requires)."""
    fields = extra_fields(block.extra)
    nested = fields.get("image_url")
    detail = fields.get("detail", nested.get("detail") if isinstance(nested, dict) else None)
    if api == API_OPENAI_RESPONSES:
        fields.pop("image_url", None)
        fields["detail"] = detail if isinstance(detail, str) else "auto"
    elif api == API_OPENAI_CHAT and isinstance(detail, str) and "detail" in fields:
        fields.pop("detail")
        fields["image_url"] = {**(nested if isinstance(nested, dict) else {}), "detail": detail}
    moved = attrs.evolve(block, extra=extra_text(fields))
    fitted: ImageBlock = _with_fields(moved, api, notes)
    return fitted


def _block_name(block: object) -> str:
    names = {TextBlock: "text block", ImageBlock: "image block", DocumentBlock: "document block",
             ThinkingBlock: "thinking block", RedactedThinkingBlock: "redacted_thinking block",
             ServerToolUse: "server_tool_use block", ToolCall: "tool call"}
    if isinstance(block, ServerToolResult):
        return f"{block.type} block"
    return names.get(type(block), type(block).__name__)


def _fit_block(block: Any, api: str, role: str, notes: _Notes) -> Any:
    """One block for a ``role`` message to ``api``: kept, translated, or None (noted)."""
    if api == API_ANTHROPIC and role == "system" and not isinstance(block, TextBlock):
        notes.add(_block_name(block), "an Anthropic system prompt holds text blocks only")
        return None
    match block:
        case ToolCall():
            return _fit_call(block, api, notes)
        case TextBlock():
            return _with_fields(block, api, notes)
        case ImageBlock():
            if api == API_OPENAI_CHAT and role != "user":
                notes.add("image block", f"OpenAI Chat Completions takes images in user "
                          f"messages only, not in {_a(role)} message")
                return None
            return _image_for(block, api, notes)
        case DocumentBlock():
            return _fit_document(block, api, role, notes)
        case ThinkingBlock() | RedactedThinkingBlock() if api == API_ANTHROPIC:
            return _with_fields(block, api, notes)
        case ThinkingBlock() | RedactedThinkingBlock():
            notes.add(_block_name(block), "Anthropic's signed or encrypted thinking goes back "
                      "to Anthropic only")
            return None
        case ServerToolUse() | ServerToolResult() if api == API_ANTHROPIC:
            return block  # Anthropic's own blocks, whatever fields each kind has
        case ServerToolUse() | ServerToolResult():
            notes.add(_block_name(block), "a tool Anthropic ran itself: only Anthropic can "
                      "replay it")
            return None
        case OpaqueBlock():
            return _fit_opaque(block, api, role, notes)
    raise TypeError(f"not a content block: {type(block).__name__}")


def _fit_call(call: ToolCall, api: str, notes: _Notes) -> ToolCall:
    """A tool call with the fields ``api`` defines, of the kind it has there: a custom tool
    call stays one in OpenAI's APIs and is a ``tool_use`` for Anthropic (said)."""
    if is_custom_call(call):
        notes.custom.add(call.id)
        if api == API_OPENAI_RESPONSES:
            extra = _keep_fields(call.extra, _CUSTOM_FIELDS, notes, "custom tool call")
            return call if extra == call.extra else attrs.evolve(call, extra=extra)
    custom = is_custom_call(call) and api != API_OPENAI_RESPONSES
    if custom and api == API_ANTHROPIC:
        call = _as_function_call(call, api, notes)
    elif custom:
        call = _kind_apart(call)
    fitted: ToolCall = _with_fields(call, api, notes)
    return _custom_call(fitted) if custom and api == API_OPENAI_CHAT else fitted


def _kind_apart(call: ToolCall) -> ToolCall:
    """A custom tool call without the ``type`` that says its kind (to fit its other fields)."""
    fields = {k: v for k, v in extra_fields(call.extra).items() if k != "type"}
    return attrs.evolve(call, extra=extra_text(fields))


def _custom_call(call: ToolCall) -> ToolCall:
    """A call fitted apart from its kind, a custom tool call again (Chat's ``custom``)."""
    return attrs.evolve(call, extra=extra_text(extra_fields(call.extra) | {"type": CUSTOM_CALL}))


def _as_function_call(call: ToolCall, api: str, notes: _Notes) -> ToolCall:
    """A custom tool call (free-form input, as Codex's ``apply_patch``) as the function call
    ``api`` has instead, its input the argument ``input``; its kind changed, and said."""
    notes.add(f"kind custom_tool_call of call {call.id} ({call.name})",
              f"{_NAMES[api]} has no custom tool calls: written as a tool_use with its input "
              "as the argument input")
    return attrs.evolve(_kind_apart(call), arguments=canonical_json({"input": call.arguments}))


def _fit_blocks(blocks: Sequence[Any], api: str, role: str, notes: _Notes) -> list[Any]:
    fitted = [_fit_block(b, api, role, notes) for b in blocks]
    return [b for b in fitted if b is not None]


# --- one message -----------------------------------------------------------------------------


def _responses_item_type(message: ChatMessage) -> str | None:
    """The item type of a message recorded from a Responses item that is not a message
    (``reasoning``, ``web_search_call``, ...), else None."""
    if len(message.blocks) != 1 or not message.extra:
        return None
    kind = extra_fields(message.extra).get("type")
    only = message.blocks[0]
    if not isinstance(kind, str):
        return None
    if kind == "reasoning" and isinstance(only, ThinkingBlock):
        return kind
    if isinstance(only, OpaqueBlock) and kind == only.type and kind != "message":
        return kind
    return None


def _fit_chat(message: ChatMessage, api: str, notes: _Notes) -> ChatMessage | None:
    item_type = _responses_item_type(message)
    if item_type is not None:
        if api == API_OPENAI_RESPONSES:
            return _input_item(message, item_type, notes)
        reason = ("OpenAI's encrypted reasoning goes back to OpenAI Responses only"
                  if item_type == "reasoning" else "a tool OpenAI ran itself: only OpenAI "
                  "Responses can replay it")
        notes.add(f"{item_type} item", reason)
        return None
    role = message.role
    extra = _keep_fields(message.extra, _MESSAGE_FIELDS[api][role], notes, "message")
    blocks = message.blocks or marker_blocks(message)
    if not blocks:
        return message if extra == message.extra else attrs.evolve(message, extra=extra)
    fitted = _fit_blocks(blocks, api, role, notes)
    if not fitted:
        notes.add("message", "nothing of it can be sent")
        return None
    if api == API_OPENAI_RESPONSES and role == "assistant" and "id" not in extra_fields(extra):
        return _plain_text(role, fitted, extra) or ChatMessage.from_blocks(role, fitted,
                                                                          extra=extra)
    if fitted == list(message.blocks) and extra == message.extra:
        return message
    return ChatMessage.from_blocks(role, fitted, extra=extra)


_OUTPUT_ONLY: Final = {"file_search_call": ("results", "vector_store_id")}
"""Fields a Responses output item carries that its input form does not define: (the list
field, the field of its entries)."""


def _input_item(message: ChatMessage, item_type: str, notes: _Notes) -> ChatMessage:
    """A recorded Responses output item as an input item: its output-only fields left out."""
    if item_type not in _OUTPUT_ONLY or not notes.fields:
        return message
    (block,) = message.blocks
    assert isinstance(block, OpaqueBlock)
    fields = extra_fields(block.json)
    listed, field = _OUTPUT_ONLY[item_type]
    entries = fields.get(listed)
    if not isinstance(entries, list) or not any(
        isinstance(e, dict) and field in e for e in entries
    ):
        return message
    fields[listed] = [{k: v for k, v in e.items() if k != field} if isinstance(e, dict) else e
                      for e in entries]
    notes.add(f"{item_type} {listed} fields {field}", "the input form of the item does not "
              "define them (the API returns them in its output only)")
    return ChatMessage.from_blocks(message.role, [OpaqueBlock(canonical_json(fields))],
                                   extra=message.extra)


def _plain_text(role: str, blocks: Sequence[Any], extra: str) -> ChatMessage | None:
    """Text blocks as one text (what Responses takes from an assistant without an item id)."""
    if not all(isinstance(b, TextBlock) for b in blocks):
        return None
    text = "\n".join(b.text for b in blocks)
    return ChatMessage(role, text, extra=_keep_only(extra, {"type"}), envelope=False)


def _keep_only(extra: str, keys: set[str]) -> str:
    return extra_text({k: v for k, v in extra_fields(extra).items() if k in keys})


def _fit_calls(item: AssistantToolCalls, api: str, notes: _Notes) -> ChatMessage:
    extra = _keep_fields(item.extra, _MESSAGE_FIELDS[api]["assistant"], notes, "message")
    reasoning = item.reasoning_content
    if reasoning is not None and (notes.fields or api != API_OPENAI_CHAT):
        notes.add("reasoning_content", f"{_NAMES[api]} does not define it")
        reasoning = None
    if item.blocks:
        fitted = _fit_blocks(item.blocks, api, "assistant", notes)
        new = AssistantToolCalls.from_blocks(fitted, reasoning_content=reasoning, extra=extra)
    else:
        calls = _fit_blocks(item.tool_calls, api, "assistant", notes)
        new = AssistantToolCalls(item.text, tuple(calls), reasoning, extra=extra)
    return ChatMessage.of_item(item if new == item else new)


def _fit_result(result: ToolResult, api: str, notes: _Notes) -> ChatMessage:
    extra = result.extra
    if api != API_OPENAI_RESPONSES and extra_fields(extra).get("type") == CUSTOM_OUTPUT:
        # the output of a custom call: its call's note says the kind changed
        extra = extra_text({k: v for k, v in extra_fields(extra).items() if k != "type"})
    elif api == API_OPENAI_RESPONSES and result.tool_call_id in notes.custom:
        extra = extra_text(extra_fields(extra) | {"type": CUSTOM_OUTPUT})  # its call's kind
    extra = _keep_fields(extra, _MESSAGE_FIELDS[api]["tool"], notes, "tool result")
    is_error = result.is_error
    if is_error is not None and api != API_ANTHROPIC and notes.fields:
        if is_error:  # a false flag says what a result without one says: no note
            notes.add("is_error flag", f"{_NAMES[api]} does not define it")
        is_error = None
    blocks = result.blocks or declared_images(result)
    if blocks:
        fitted = _fit_blocks(blocks, api, "tool", notes)
        new = ToolResult.from_blocks(result.tool_call_id, fitted, result.tool_name,
                                     is_error=is_error, extra=extra)
    else:
        new = attrs.evolve(result, is_error=is_error, extra=extra)
    return ChatMessage.of_item(result if new == result else new)


def _fit_message(message: ChatMessage, api: str, notes: _Notes) -> ChatMessage | None:
    item = structured_item(message)
    match item:
        case AssistantToolCalls():
            return _fit_calls(item, api, notes)
        case ToolResults(results=(result,)):
            return _fit_result(result, api, notes)
        case Chat(message=chat):
            return _fit_chat(chat, api, notes)
    return message


def fit_messages(
    messages: Sequence[ChatMessage], api: str, *, fields: bool = True
) -> tuple[list[ChatMessage], tuple[LeftOut, ...]]:
    """The messages of a request as ``api`` accepts them, and what was left out (issue 21).

    Messages nothing is left out of come back as they are (the same objects), so a request to
    the API its conversation came from is sent exactly as it was recorded. ``fields=False``
    fits the content only and keeps every recorded field but another format's (``export``: the
    record in a format; a block the format cannot carry, and a field only another format or a
    framework integration defines, `_FOREIGN`, left out and said). Raises `InvalidProfile` for
    an unknown ``api``.
    """
    check_api("api", api)
    left: list[LeftOut] = []
    out: list[ChatMessage] = []
    custom: set[str] = set()
    for index, message in enumerate(messages):
        fitted = _fit_message(message, api, _Notes(index, api, left, fields, custom))
        if fitted is not None:
            out.append(fitted)
    return out, tuple(left)


_OWN: Final[dict[str, frozenset[str]]] = {
    api: _defined(api) - frozenset().union(*(_defined(o) for o in APIS if o != api))
    for api in APIS
}
"""Per API, the fields only its format defines (a Responses item's ``type``, ``status``)."""


def is_its_own(messages: Sequence[ChatMessage], api: str) -> bool:
    """Whether ``messages`` are a record of ``api``'s format as it recorded them (issue 36),
    so that an export in that format copies them: fitting them to ``api`` with every recorded
    field (``fields=False``) leaves nothing out, and each message it would write otherwise
    carries a field only that format defines (a Responses item recorded with its ``type``,
    as Codex records an assistant message with no ``id``). The caller also checks that the
    format's writer gives the record back; any other record is written by `fit_messages` and
    `render_body`, the one writer of ``api``'s requests."""
    sent, left_out = fit_messages(messages, api, fields=False)
    if left_out or len(sent) != len(messages):
        return False
    return all(before == after or not _OWN[api].isdisjoint(extra_fields(before.extra))
               for before, after in zip(messages, sent, strict=True))


_RENDER: Final[dict[str, Callable[[Sequence[ChatMessage]], Any]]] = {
    API_OPENAI_CHAT: to_openai_chat,
    API_OPENAI_RESPONSES: to_openai_responses,
    API_ANTHROPIC: to_anthropic,
}


def render_body(
    messages: Sequence[ChatMessage], api: str, *, cache_breakpoints: bool = False
) -> Any:
    """The request body part of ``api`` for messages already fitted to it (`fit_messages`):
    Chat ``messages``, Responses ``input`` items, or Anthropic ``{"system", "messages"}``.

    ``cache_breakpoints`` (issue 35, ADR-0105): an Anthropic body carries ``cache_control``
    where its prefix is stable, by the rule of `turnledger.domain.cache` (system, the last
    block before the newest turn, the last block), in place of any recorded one. A pure
    function of ``messages``, so a replayed request renders the same body. The OpenAI bodies
    are lists with no request field: their ``prompt_cache_key`` is `prompt_cache_key` of the
    session, sent beside them. False (the default, what an export of the record uses) renders
    the messages as recorded.
    """
    check_api("api", api)
    if cache_breakpoints and api == API_ANTHROPIC:
        body, history_end = to_anthropic_marked(messages, _newest_turn_start(messages))
        return mark_anthropic(body, history_end)
    return _RENDER[api](messages)


def _newest_turn_start(messages: Sequence[ChatMessage]) -> int:
    """Where the newest turn starts (its real user message, R1); the end when there is none,
    so every message before it belongs to the stable history."""
    start = segment(messages).last_turn_start
    return len(messages) if start is None else start
