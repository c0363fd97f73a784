"""The first transcript converters (lossy), kept for callers of this module.

`turnledger.providers` supersedes them: exact round trips, content blocks, provider fields,
OpenAI Responses items, SDK objects. The CLI's import/export use `turnledger.providers`.

Two vendor formats are supported, both as they appear in a request body:

- ``"openai"``: a Chat Completions ``messages`` list (roles ``system``/``developer``/``user``/
  ``assistant``/``tool``; assistant ``tool_calls``; content a string or a list of ``text`` and
  ``image_url`` parts);
- ``"anthropic"``: a Messages API conversation, either a bare ``messages`` list or an object
  ``{"system": ..., "messages": [...]}`` (content a string or ``text``, ``image``, ``tool_use``,
  ``tool_result`` and ``thinking`` blocks).

Import (``from_*``) builds the structured history (`ConversationMessage`); export (``to_*``)
takes the provider-facing chat view (`ChatMessage`), whose tool-call and tool-result envelopes it
unpacks. Images travel as ``[IMAGE:ref]`` markers in user text (R21) and as declared attachments of
tool results (R22). Nothing here reads a file or the network: image references are kept as text.

Bad input raises `TranscriptError` (an `InvalidMessage`, E11) naming the message index (0-based,
as in the JSON list) and the field, and, from `read_jsonl`, the 1-based line number.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, Literal, TypeVar

from turnledger.domain.errors import InvalidMessage
from turnledger.domain.estimate import (
    IMAGE_MARKER_PREFIX,
    image_markers,
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
    parse_assistant_envelope,
    parse_tool_envelope,
)
from turnledger.domain.providers import TranscriptError

__all__ = [
    "FORMATS",
    "TranscriptError",
    "from_anthropic",
    "from_openai",
    "read_jsonl",
    "to_anthropic",
    "to_openai",
    "write_jsonl_line",
]

FORMATS: Final = ("openai", "anthropic")

# Tool-result messages that carry no envelope keep the call id `from_chat_messages` gives them.
_UNKNOWN_CALL_ID: Final = "unknown"
# Anthropic tool inputs must be JSON objects; arguments that are not one are wrapped under this
# key on export and unwrapped on import, so nothing is lost either way.
_RAW_ARGUMENTS_KEY: Final = "_raw"

_DATA_URL_RE: Final = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)


# --- shared helpers -------------------------------------------------------------------------


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


class _Where:
    """Builds error texts that name the message index and the field path."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def error(self, text: str) -> TranscriptError:
        return TranscriptError(f"{self.prefix}: {text}" if self.prefix else text)

    def get(self, obj: dict[str, Any], path: str, key: str, kind: type, *, label: str) -> Any:
        """Return ``obj[key]``, which must exist and be of ``kind``."""
        full = f"{path}.{key}" if path else key
        if key not in obj:
            raise self.error(f"{full} missing")
        value = obj[key]
        if not isinstance(value, kind):
            raise self.error(f"{full} must be {label}, got {_type_name(value)}")
        return value

    def obj(self, value: object, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(f"{path} must be an object, got {_type_name(value)}")
        return value


def _marker(where: _Where, path: str, ref: str) -> str:
    # The ref must read back out of its marker unchanged: no "]", no line break (the estimate
    # collapses those) and no surrounding whitespace (it strips that).
    if not ref or "]" in ref or "\n" in ref or "\r" in ref or ref != ref.strip():
        raise where.error(f"{path} cannot be kept as an [IMAGE:...] marker: {ref!r}")
    return f"{IMAGE_MARKER_PREFIX}{ref}]"


def _image_markers(text: str) -> list[tuple[int, int, str]]:
    """(start, end, ref) of each loadable ``[IMAGE:ref]`` marker, found by the estimate's scan.

    Those are the markers whose images are transmitted (R21), so they are the ones exported as
    images.
    """
    return [(m.start, m.end, m.ref) for m in image_markers(text) if m.loadable]


def _split_user_content(text: str) -> list[tuple[str, str]]:
    """Split user text into ("text", t) and ("image", ref) pieces around loadable markers.

    Imports join pieces with a line break, so one line break next to a marker is the separator
    and not part of a text piece: the pieces joined with line breaks give the text back exactly
    when every loadable marker stands on a line of its own. A marker inside a line is still an
    image; its line is split around it.
    """
    markers = _image_markers(text)
    if not markers:
        return [("text", text)]
    bounds = [0, *(i for start, end, _ in markers for i in (start, end)), len(text)]
    pieces: list[tuple[str, str]] = []
    for k in range(len(markers) + 1):
        segment = text[bounds[2 * k] : bounds[2 * k + 1]]
        left, right = k > 0, k < len(markers)
        stripped = segment
        if left and stripped.startswith("\n"):
            stripped = stripped[1:]
        if right and stripped.endswith("\n"):
            stripped = stripped[:-1]
        # Between two markers a lone line break is just their separator; elsewhere an emptied
        # segment still held a line break that the separator alone would not give back.
        if stripped or (segment and not (left and right and segment == "\n")):
            pieces.append(("text", stripped))
        if right:
            pieces.append(("image", markers[k][2]))
    return pieces


def _require_chat_message(index: int, message: object) -> ChatMessage:
    if not isinstance(message, ChatMessage):
        raise InvalidMessage(
            f"history[{index}] must be a ChatMessage, got {type(message).__name__}"
        )
    return message


def _tool_parts(message: ChatMessage) -> tuple[str, str]:
    parsed = parse_tool_envelope(message.content)
    return parsed if parsed else (_UNKNOWN_CALL_ID, message.content)


class _ToolResultBatcher:
    """Collects consecutive tool results into one `ToolResults`, naming them from their calls."""

    def __init__(self, out: list[ConversationMessage]) -> None:
        self.out = out
        self.pending: list[ToolResult] = []
        self.names: dict[str, str] = {}

    def remember(self, calls: Sequence[ToolCall]) -> None:
        self.names.update((c.id, c.name) for c in calls)

    def add(self, call_id: str, content: str, attachments: Sequence[str]) -> None:
        self.pending.append(
            ToolResult(call_id, content, self.names.get(call_id, ""), tuple(attachments))
        )

    def flush(self) -> None:
        if self.pending:
            self.out.append(ToolResults(tuple(self.pending)))
            self.pending = []


# --- OpenAI ---------------------------------------------------------------------------------

_OPENAI_ROLES: Final = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}

# How image parts of one message are taken: as markers in the text (user, R21), as declared
# attachments (tool, R22), or not at all (system, assistant).
_ImageMode = Literal["marker", "attachment", "none"]


def _openai_image_url(where: _Where, part: dict[str, Any], path: str) -> str:
    if "image_url" not in part:
        raise where.error(f"{path}.image_url missing")
    image = part["image_url"]
    if isinstance(image, dict):
        image = where.get(image, f"{path}.image_url", "url", str, label="a string")
    elif not isinstance(image, str):
        raise where.error(
            f"{path}.image_url must be an object or a string, got {_type_name(image)}"
        )
    if not image:
        raise where.error(f"{path}.image_url.url must not be empty")
    return str(image)


def _openai_parts(where: _Where, content: object, images: _ImageMode) -> tuple[str, list[str]]:
    """(text, attachment urls) of an OpenAI content value: a string, null or a list of parts.

    Text parts (and, for user messages, image markers) are joined with line breaks.
    """
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise where.error(f"content must be a string or a list of parts, got {_type_name(content)}")
    texts: list[str] = []
    urls: list[str] = []
    for j, raw in enumerate(content):
        path = f"content[{j}]"
        part = where.obj(raw, path)
        kind = where.get(part, path, "type", str, label="a string")
        if kind == "text":
            texts.append(where.get(part, path, "text", str, label="a string"))
        elif kind == "image_url" and images == "marker":
            texts.append(_marker(where, path, _openai_image_url(where, part, path)))
        elif kind == "image_url" and images == "attachment":
            urls.append(_openai_image_url(where, part, path))
        else:
            raise where.error(f"{path}.type {kind!r} is not supported here")
    return "\n".join(texts), urls


def _openai_tool_calls(where: _Where, raw_calls: list[Any]) -> list[ToolCall]:
    calls: list[ToolCall] = []
    for k, raw in enumerate(raw_calls):
        path = f"tool_calls[{k}]"
        call = where.obj(raw, path)
        call_id = where.get(call, path, "id", str, label="a string")
        if not call_id:
            raise where.error(f"{path}.id must not be empty")
        kind = call.get("type", "function")
        if kind != "function":
            raise where.error(f"{path}.type must be 'function', got {kind!r}")
        function = where.obj(
            where.get(call, path, "function", object, label="an object"), f"{path}.function"
        )
        name = where.get(function, f"{path}.function", "name", str, label="a string")
        if not name:
            raise where.error(f"{path}.function.name must not be empty")
        arguments = where.get(function, f"{path}.function", "arguments", str, label="a string")
        calls.append(_build(where, path, ToolCall, call_id, name, arguments))
    return calls


_T = TypeVar("_T")


def _build(where: _Where, path: str, make: Callable[..., _T], *args: Any) -> _T:
    """Call a domain constructor; its InvalidMessage gains the message index (and path)."""
    try:
        return make(*args)
    except InvalidMessage as exc:
        raise where.error(f"{path}: {exc}" if path else str(exc)) from exc


def from_openai(messages: list[dict[str, Any]]) -> list[ConversationMessage]:
    """Import an OpenAI Chat Completions ``messages`` list as a structured history.

    ``developer`` becomes ``system``; assistant ``tool_calls`` become `AssistantToolCalls`
    (``arguments`` kept as JSON text, an empty or null content becomes None,
    ``reasoning_content`` kept); consecutive ``tool`` messages become one `ToolResults`, each
    result named after its call. User ``image_url`` parts become ``[IMAGE:url]`` markers joined
    to the text parts with line breaks (R21); a tool message's image parts become the result's
    attachments (R22). A user message with the breadcrumb text is imported as a real user
    message (R31): a transcript cannot prove turnledger inserted it. Other keys (``name``,
    ``refusal``...) are ignored.

    Raises:
        TranscriptError: a message or field is missing or ill-typed
            ("message 3: tool_calls[0].function.name missing"; indexes are 0-based).
    """
    if not isinstance(messages, list):
        raise TranscriptError(f"messages must be a list, got {_type_name(messages)}")
    out: list[ConversationMessage] = []
    batch = _ToolResultBatcher(out)
    for i, raw in enumerate(messages):
        where = _Where(f"message {i}")
        if not isinstance(raw, dict):
            raise where.error(f"must be an object, got {_type_name(raw)}")
        role_name = where.get(raw, "", "role", str, label="a string")
        role = _OPENAI_ROLES.get(role_name)
        if role is None:
            raise where.error(f"role {role_name!r} is not supported")
        if role == "tool":
            call_id = where.get(raw, "", "tool_call_id", str, label="a string")
            if not call_id:
                raise where.error("tool_call_id must not be empty")
            content = where.get(raw, "", "content", object, label="present")
            text, urls = _openai_parts(where, content, "attachment")
            _build(where, "", batch.add, call_id, text, urls)
            continue
        batch.flush()
        if role == "assistant":
            out.append(_openai_assistant(where, raw, batch))
            continue
        content = where.get(raw, "", "content", object, label="present")
        text, _ = _openai_parts(where, content, "marker" if role == "user" else "none")
        out.append(Chat(_build(where, "", ChatMessage, role, text)))
    batch.flush()
    return out


def _openai_assistant(
    where: _Where, raw: dict[str, Any], batch: _ToolResultBatcher
) -> ConversationMessage:
    if raw.get("function_call") is not None:
        raise where.error("function_call (the legacy form) is not supported; use tool_calls")
    text, _ = _openai_parts(where, raw.get("content"), "none")
    raw_calls = raw.get("tool_calls")
    if raw_calls is None or raw_calls == []:
        return Chat(ChatMessage("assistant", text))
    if not isinstance(raw_calls, list):
        raise where.error(f"tool_calls must be a list, got {_type_name(raw_calls)}")
    calls = _openai_tool_calls(where, raw_calls)
    reasoning = raw.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        raise where.error(f"reasoning_content must be a string, got {_type_name(reasoning)}")
    batch.remember(calls)
    return _build(where, "", AssistantToolCalls, text or None, tuple(calls), reasoning)


def _openai_user_content(text: str) -> str | list[dict[str, Any]]:
    pieces = _split_user_content(text)
    if pieces == [("text", text)]:
        return text
    return [
        {"type": "text", "text": value}
        if kind == "text"
        else {"type": "image_url", "image_url": {"url": value}}
        for kind, value in pieces
    ]


def to_openai(history: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Export a provider-facing history as an OpenAI Chat Completions ``messages`` list.

    Envelopes are unpacked into ``tool_calls`` and ``tool`` messages; loadable ``[IMAGE:ref]``
    markers in user text become ``image_url`` parts (R21); a tool's declared attachments become
    ``image_url`` parts of its message (R22; an extension, as OpenAI documents text parts only
    for tool messages). The breadcrumb is a plain user message. Raises InvalidMessage for an
    element that is not a ChatMessage.
    """
    out: list[dict[str, Any]] = []
    for index, item in enumerate(history):
        message = _require_chat_message(index, item)
        if message.role == "tool":
            call_id, text = _tool_parts(message)
            content: str | list[dict[str, Any]] = text
            if message.attachments:
                content = [{"type": "text", "text": text}] if text else []
                content += [
                    {"type": "image_url", "image_url": {"url": ref}} for ref in message.attachments
                ]
            out.append({"role": "tool", "tool_call_id": call_id, "content": content})
        elif message.role == "assistant":
            envelope = parse_assistant_envelope(message.content)
            if envelope is None:
                out.append({"role": "assistant", "content": message.content})
                continue
            text_or_none, calls = envelope
            out.append(
                {
                    "role": "assistant",
                    "content": text_or_none,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        }
                        for c in calls
                    ],
                }
            )
        elif message.role == "user":
            out.append({"role": "user", "content": _openai_user_content(message.content)})
        else:
            out.append({"role": "system", "content": message.content})
    return out


# --- Anthropic ------------------------------------------------------------------------------


def _anthropic_image_ref(where: _Where, block: dict[str, Any], path: str) -> str:
    source = where.obj(
        where.get(block, path, "source", object, label="an object"), f"{path}.source"
    )
    kind = where.get(source, f"{path}.source", "type", str, label="a string")
    if kind == "base64":
        media = where.get(source, f"{path}.source", "media_type", str, label="a string")
        data = where.get(source, f"{path}.source", "data", str, label="a string")
        return f"data:{media};base64,{data}"
    if kind == "url":
        url = where.get(source, f"{path}.source", "url", str, label="a string")
        if not url:
            raise where.error(f"{path}.source.url must not be empty")
        return str(url)
    raise where.error(f"{path}.source.type {kind!r} is not supported")


def _anthropic_blocks(
    where: _Where, content: object, path: str = "content"
) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise where.error(f"{path} must be a string or a list of blocks, got {_type_name(content)}")
    blocks = [where.obj(raw, f"{path}[{j}]") for j, raw in enumerate(content)]
    for j, block in enumerate(blocks):
        where.get(block, f"{path}[{j}]", "type", str, label="a string")
    return blocks


def _anthropic_tool_input(where: _Where, block: dict[str, Any], path: str) -> str:
    value = where.get(block, path, "input", dict, label="an object")
    if list(value) == [_RAW_ARGUMENTS_KEY] and isinstance(value[_RAW_ARGUMENTS_KEY], str):
        return str(value[_RAW_ARGUMENTS_KEY])
    return compact_json(value)


def _anthropic_tool_result(
    where: _Where, block: dict[str, Any], path: str
) -> tuple[str, str, list[str]]:
    call_id = where.get(block, path, "tool_use_id", str, label="a string")
    if not call_id:
        raise where.error(f"{path}.tool_use_id must not be empty")
    if "is_error" in block and not isinstance(block["is_error"], bool):
        raise where.error(f"{path}.is_error must be a bool, got {_type_name(block['is_error'])}")
    texts: list[str] = []
    refs: list[str] = []
    inner_path = f"{path}.content"
    for j, inner in enumerate(_anthropic_blocks(where, block.get("content", ""), inner_path)):
        kind = inner["type"]
        if kind == "text":
            texts.append(where.get(inner, f"{inner_path}[{j}]", "text", str, label="a string"))
        elif kind == "image":
            refs.append(_anthropic_image_ref(where, inner, f"{inner_path}[{j}]"))
        else:
            raise where.error(f"{inner_path}[{j}].type {kind!r} is not supported")
    return call_id, "\n".join(texts), refs


def _anthropic_system(value: object) -> str:
    where = _Where("")
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise where.error(
            f"system must be a string or a list of text blocks, got {_type_name(value)}"
        )
    texts: list[str] = []
    for j, raw in enumerate(value):
        path = f"system[{j}]"
        block = where.obj(raw, path)
        kind = where.get(block, path, "type", str, label="a string")
        if kind != "text":
            raise where.error(f"{path}.type {kind!r} is not supported (text blocks only)")
        texts.append(where.get(block, path, "text", str, label="a string"))
    return "\n".join(texts)


def from_anthropic(conversation: dict[str, Any] | list[Any]) -> list[ConversationMessage]:
    """Import an Anthropic Messages conversation as a structured history.

    Accepts a ``messages`` list or an object with ``messages`` and an optional ``system`` (a
    string or text blocks, which becomes a leading system message; other keys, such as
    ``model``, are ignored). User ``image`` blocks become ``[IMAGE:ref]`` lines (base64 sources
    as ``data:`` URLs); ``tool_result`` blocks become `ToolResults` (their image blocks the
    attachments, R22; ``is_error`` has no place in the history and is dropped), followed by a
    user message for any text or images beside them; results of consecutive messages share one
    `ToolResults`. Assistant ``tool_use`` blocks become `AssistantToolCalls` (``input`` as JSON
    text; ``thinking`` blocks as its reasoning; ``redacted_thinking`` is opaque and dropped).

    Raises:
        TranscriptError: a message, block or field is missing or ill-typed ("message 3: ...").
    """
    out: list[ConversationMessage] = []
    if isinstance(conversation, dict):
        if "messages" not in conversation:
            raise TranscriptError("messages missing")
        messages = conversation["messages"]
        system = conversation.get("system")
        if system is not None:
            text = _anthropic_system(system)
            if text:
                out.append(Chat(ChatMessage("system", text)))
    else:
        messages = conversation
    if not isinstance(messages, list):
        raise TranscriptError(f"messages must be a list, got {_type_name(messages)}")
    batch = _ToolResultBatcher(out)
    for i, raw in enumerate(messages):
        where = _Where(f"message {i}")
        if not isinstance(raw, dict):
            raise where.error(f"must be an object, got {_type_name(raw)}")
        role = where.get(raw, "", "role", str, label="a string")
        if role not in ("user", "assistant"):
            raise where.error(f"role {role!r} is not supported (user or assistant)")
        if "content" not in raw:
            raise where.error("content missing")
        blocks = _anthropic_blocks(where, raw["content"])
        if role == "user":
            _anthropic_user(where, blocks, batch)
        else:
            batch.flush()
            out.append(_anthropic_assistant(where, blocks, batch))
    batch.flush()
    return out


def _anthropic_user(where: _Where, blocks: list[dict[str, Any]], batch: _ToolResultBatcher) -> None:
    pieces: list[str] = []
    has_results = False
    for j, block in enumerate(blocks):
        path = f"content[{j}]"
        kind = block["type"]
        if kind == "text":
            pieces.append(where.get(block, path, "text", str, label="a string"))
        elif kind == "image":
            pieces.append(_marker(where, path, _anthropic_image_ref(where, block, path)))
        elif kind == "tool_result":
            call_id, text, refs = _anthropic_tool_result(where, block, path)
            _build(where, path, batch.add, call_id, text, refs)
            has_results = True
        else:
            raise where.error(f"{path}.type {kind!r} is not supported in a user message")
    if has_results and not pieces:
        return
    batch.flush()
    batch.out.append(Chat(ChatMessage("user", "\n".join(pieces))))


def _anthropic_assistant(
    where: _Where, blocks: list[dict[str, Any]], batch: _ToolResultBatcher
) -> ConversationMessage:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    for j, block in enumerate(blocks):
        path = f"content[{j}]"
        kind = block["type"]
        if kind == "text":
            texts.append(where.get(block, path, "text", str, label="a string"))
        elif kind == "thinking":
            thoughts.append(where.get(block, path, "thinking", str, label="a string"))
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use":
            call_id = where.get(block, path, "id", str, label="a string")
            if not call_id:
                raise where.error(f"{path}.id must not be empty")
            name = where.get(block, path, "name", str, label="a string")
            if not name:
                raise where.error(f"{path}.name must not be empty")
            arguments = _anthropic_tool_input(where, block, path)
            calls.append(_build(where, path, ToolCall, call_id, name, arguments))
        else:
            raise where.error(f"{path}.type {kind!r} is not supported in an assistant message")
    text = "\n".join(texts)
    if not calls:
        return Chat(ChatMessage("assistant", text))
    batch.remember(calls)
    reasoning = "\n".join(thoughts) if thoughts else None
    return _build(where, "", AssistantToolCalls, text or None, tuple(calls), reasoning)


def _anthropic_image_block(ref: str) -> dict[str, Any]:
    match = _DATA_URL_RE.fullmatch(ref)
    if match:
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": match.group(1), "data": match.group(2)},
        }
    # Local paths are exported as they are: turnledger does no I/O, and the ref stays lossless.
    return {"type": "image", "source": {"type": "url", "url": ref}}


def _anthropic_tool_input_value(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        value = None
    return value if isinstance(value, dict) else {_RAW_ARGUMENTS_KEY: arguments}


def to_anthropic(history: Sequence[ChatMessage]) -> dict[str, Any]:
    """Export a provider-facing history as an Anthropic ``{"system", "messages"}`` object.

    System messages, leading or late, are collected in order into ``system`` (joined with a
    blank line; the key is left out when there is none). Consecutive tool messages become one
    user message of ``tool_result`` blocks (attachments as image blocks, R22); tool-call
    envelopes become ``tool_use`` blocks whose ``input`` is the parsed arguments (arguments that
    are not a JSON object become ``{"_raw": text}``). Loadable user image markers become image
    blocks: ``data:...;base64,`` URLs as base64 sources, any other ref as a url source (R21).
    Empty text blocks are left out, as the API rejects them. Raises InvalidMessage for an
    element that is not a ChatMessage.
    """
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []

    def flush() -> None:
        if results:
            messages.append({"role": "user", "content": list(results)})
            results.clear()

    for index, item in enumerate(history):
        message = _require_chat_message(index, item)
        if message.role == "tool":
            call_id, text = _tool_parts(message)
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
            if message.attachments:
                inner = [{"type": "text", "text": text}] if text else []
                inner += [_anthropic_image_block(ref) for ref in message.attachments]
                block["content"] = inner
            elif text:
                block["content"] = text
            results.append(block)
            continue
        if message.role == "system":
            # Anthropic has no system role in messages; keep tool results batched across it.
            system.append(message.content)
            continue
        flush()
        if message.role == "assistant":
            messages.append({"role": "assistant", "content": _anthropic_assistant_content(message)})
        else:
            messages.append({"role": "user", "content": _anthropic_user_content(message.content)})
    flush()
    out: dict[str, Any] = {}
    if system:
        out["system"] = "\n\n".join(system)
    out["messages"] = messages
    return out


def _anthropic_assistant_content(message: ChatMessage) -> str | list[dict[str, Any]]:
    envelope = parse_assistant_envelope(message.content)
    if envelope is None:
        return message.content
    text, calls = envelope
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [
        {
            "type": "tool_use",
            "id": c.id,
            "name": c.name,
            "input": _anthropic_tool_input_value(c.arguments),
        }
        for c in calls
    ]
    return blocks


def _anthropic_user_content(text: str) -> str | list[dict[str, Any]]:
    pieces = _split_user_content(text)
    if pieces == [("text", text)]:
        return text
    return [
        _anthropic_image_block(value) if kind == "image" else {"type": "text", "text": value}
        for kind, value in pieces
        if kind == "image" or value
    ]


# --- JSONL ----------------------------------------------------------------------------------


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown transcript format {fmt!r}; expected one of {', '.join(FORMATS)}")


def _parse_line(line: str, fmt: str) -> list[ConversationMessage]:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise TranscriptError(f"invalid JSON: {exc}") from exc
    if fmt == "openai":
        # An object is a request body: only its "messages" matter here.
        if isinstance(value, dict) and isinstance(value.get("messages"), list):
            value = value["messages"]
        if not isinstance(value, list):
            raise TranscriptError(
                'expected a JSON list of messages or an object with a "messages" list, '
                f"got {_type_name(value)}"
            )
        return from_openai(value)
    if not isinstance(value, list | dict):
        raise TranscriptError(
            'expected a JSON list of messages or an object with "messages", '
            f"got {_type_name(value)}"
        )
    return from_anthropic(value)


def read_jsonl(
    text: str, fmt: str
) -> Iterator[tuple[int, list[ConversationMessage] | TranscriptError]]:
    """Read one conversation per JSONL line, yielding (1-based line number, history or error).

    Blank lines are skipped. A malformed line yields a `TranscriptError` naming its line and
    what was wrong; the other lines still yield their conversations (E11: nothing is lost).
    Lines are split on line feeds only, since JSON text may hold a raw U+2028. An empty list is an
    empty conversation, not an error.

    Raises:
        ValueError: ``fmt`` is not one of `FORMATS` (raised at the call, before any reading).
    """
    _check_format(fmt)
    return _read_lines(text, fmt)


def _read_lines(
    text: str, fmt: str
) -> Iterator[tuple[int, list[ConversationMessage] | TranscriptError]]:
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        result: list[ConversationMessage] | TranscriptError
        try:
            result = _parse_line(line, fmt)
        except TranscriptError as exc:
            result = TranscriptError(exc.reason, line=number)
        yield number, result


def write_jsonl_line(history: Sequence[ChatMessage], fmt: str) -> str:
    """One compact JSON line (no newline) of the history in ``fmt``; same input, same bytes.

    Raises:
        ValueError: ``fmt`` is not one of `FORMATS`.
    """
    _check_format(fmt)
    value: object = to_openai(history) if fmt == "openai" else to_anthropic(history)
    return compact_json(value)
