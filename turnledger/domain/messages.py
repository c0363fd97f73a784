"""Message values: the provider-facing `ChatMessage` and the structured `ConversationMessage`.

The vocabulary is SPEC.md's. An assistant message that calls tools carries the JSON envelope
``{"content": text, "tool_calls": [{"id", "name", "arguments"}]}`` as its content; a tool message
carries ``{"tool_call_id": id, "content": text}``. `to_chat_messages` turns the structured history
into the flat one, `from_chat_messages` parses it back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final, TypeAlias

import attrs

from turnledger.domain.errors import InvalidMessage

__all__ = [
    "BREADCRUMB_TEXT",
    "ROLES",
    "TOOL_RESULTS_PREFIX",
    "AssistantToolCalls",
    "Chat",
    "ChatMessage",
    "ConversationMessage",
    "ToolCall",
    "ToolResult",
    "ToolResults",
    "as_conversation_message",
    "assistant_envelope",
    "compact_json",
    "from_chat_messages",
    "is_breadcrumb",
    "is_real_user_message",
    "parse_assistant_envelope",
    "parse_tool_envelope",
    "to_chat_messages",
    "tool_envelope",
]

ROLES: Final = ("system", "user", "assistant", "tool")
BREADCRUMB_TEXT: Final = "[earlier turns omitted to fit the context window]"
TOOL_RESULTS_PREFIX: Final = "[Tool results]"


def _require_str(field: str, value: object) -> None:
    if not isinstance(value, str):
        raise InvalidMessage(f"{field} must be a str, got {type(value).__name__}")


def _to_str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        # A bare string would silently become a tuple of characters.
        raise InvalidMessage("attachments must be a sequence of str, got a single str")
    return tuple(value)


def _check_attachments(field: str, attachments: tuple[str, ...]) -> None:
    for i, ref in enumerate(attachments):
        if not isinstance(ref, str) or not ref:
            raise InvalidMessage(f"{field}[{i}] must be a non-empty str, got {ref!r}")


@attrs.frozen
class ChatMessage:
    """One provider-facing message: a role and its text.

    ``attachments`` are image references a tool declared it produced (R22); only tool messages
    carry them. ``synthetic`` marks the breadcrumb turnledger inserts (R31), so that a real user
    message with the same text is still a real turn.
    """

    role: str
    content: str
    attachments: tuple[str, ...] = attrs.field(default=(), converter=_to_str_tuple)
    synthetic: bool = attrs.field(default=False, kw_only=True)

    def __attrs_post_init__(self) -> None:
        _require_str("role", self.role)
        if self.role not in ROLES:
            raise InvalidMessage(f"role must be one of {', '.join(ROLES)}, got {self.role!r}")
        _require_str("content", self.content)
        _check_attachments("attachments", self.attachments)
        if self.attachments and self.role != "tool":
            raise InvalidMessage(f"attachments are only allowed on tool messages, not {self.role}")
        if not isinstance(self.synthetic, bool):
            raise InvalidMessage("synthetic must be a bool")
        if self.synthetic and (self.role != "user" or self.content != BREADCRUMB_TEXT):
            raise InvalidMessage("synthetic is reserved for the breadcrumb user message")

    @classmethod
    def system(cls, text: str) -> ChatMessage:
        return cls("system", text)

    @classmethod
    def user(cls, text: str) -> ChatMessage:
        return cls("user", text)

    @classmethod
    def assistant(cls, text: str) -> ChatMessage:
        return cls("assistant", text)

    @classmethod
    def tool(cls, text: str, attachments: Iterable[str] = ()) -> ChatMessage:
        return cls("tool", text, tuple(attachments))

    @classmethod
    def breadcrumb(cls) -> ChatMessage:
        """The synthetic user message that says earlier turns were omitted (R31)."""
        return cls("user", BREADCRUMB_TEXT, synthetic=True)


@attrs.frozen
class ToolCall:
    """One tool call requested by the assistant; ``arguments`` is JSON text."""

    id: str
    name: str
    arguments: str = "{}"

    def __attrs_post_init__(self) -> None:
        _require_str("tool_call.id", self.id)
        if not self.id:
            raise InvalidMessage("tool_call.id must not be empty")
        _require_str("tool_call.name", self.name)
        _require_str("tool_call.arguments", self.arguments)


@attrs.frozen
class ToolResult:
    """The result of one tool call, with the images the tool declared (R22)."""

    tool_call_id: str
    content: str
    tool_name: str = ""
    attachments: tuple[str, ...] = attrs.field(default=(), converter=_to_str_tuple)

    def __attrs_post_init__(self) -> None:
        _require_str("tool_result.tool_call_id", self.tool_call_id)
        if not self.tool_call_id:
            raise InvalidMessage("tool_result.tool_call_id must not be empty")
        _require_str("tool_result.content", self.content)
        _require_str("tool_result.tool_name", self.tool_name)
        _check_attachments("tool_result.attachments", self.attachments)


@attrs.frozen
class Chat:
    """A plain message of the structured history."""

    message: ChatMessage

    def __attrs_post_init__(self) -> None:
        message: object = self.message  # validated at run time, whatever the annotation says
        if not isinstance(message, ChatMessage):
            kind = type(message).__name__
            raise InvalidMessage(f"message must be a ChatMessage, got {kind}")


def _to_calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(value)


def _to_results(value: Iterable[ToolResult]) -> tuple[ToolResult, ...]:
    return tuple(value)


@attrs.frozen
class AssistantToolCalls:
    """An assistant turn step that calls one or more tools."""

    text: str | None
    tool_calls: tuple[ToolCall, ...] = attrs.field(converter=_to_calls)
    reasoning_content: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.text is not None:
            _require_str("text", self.text)
        if self.reasoning_content is not None:
            _require_str("reasoning_content", self.reasoning_content)
        if not self.tool_calls:
            raise InvalidMessage("tool_calls must not be empty")
        seen: set[str] = set()
        for i, call in enumerate(self.tool_calls):
            if not isinstance(call, ToolCall):
                raise InvalidMessage(f"tool_calls[{i}] must be a ToolCall")
            if call.id in seen:
                raise InvalidMessage(f"tool_calls has a duplicate id {call.id!r}")
            seen.add(call.id)


@attrs.frozen
class ToolResults:
    """The results of a batch of tool calls."""

    results: tuple[ToolResult, ...] = attrs.field(converter=_to_results)

    def __attrs_post_init__(self) -> None:
        if not self.results:
            raise InvalidMessage("results must not be empty")
        for i, result in enumerate(self.results):
            if not isinstance(result, ToolResult):
                raise InvalidMessage(f"results[{i}] must be a ToolResult")


ConversationMessage: TypeAlias = Chat | AssistantToolCalls | ToolResults


def is_breadcrumb(message: ChatMessage) -> bool:
    """True for the synthetic breadcrumb (never for a real user message with the same text)."""
    return message.synthetic


def is_real_user_message(message: ChatMessage) -> bool:
    """A turn starts here (R1, R2, R31): a user message that is not a carrier or a breadcrumb."""
    return (
        message.role == "user"
        and not message.synthetic
        and not message.content.startswith(TOOL_RESULTS_PREFIX)
    )


def as_conversation_message(message: object) -> ConversationMessage:
    """Accept a ConversationMessage, or wrap a ChatMessage as `Chat`; anything else is invalid."""
    if isinstance(message, Chat | AssistantToolCalls | ToolResults):
        return message
    if isinstance(message, ChatMessage):
        return Chat(message)
    raise InvalidMessage(
        f"message must be a ChatMessage or a ConversationMessage, got {type(message).__name__}"
    )


# --- JSON envelopes -------------------------------------------------------------------------

def compact_json(value: object) -> str:
    """``value`` as compact JSON text: key order as written, non-ASCII kept (no escapes).

    The envelopes use it because their byte count feeds the estimate (R20); the transcript
    exports use it so the same history always gives the same bytes.
    """
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def assistant_envelope(text: str | None, tool_calls: Sequence[ToolCall]) -> str:
    """The content of an assistant ChatMessage that calls tools."""
    return compact_json(
        {
            "content": text,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in tool_calls
            ],
        }
    )


def tool_envelope(tool_call_id: str, content: str) -> str:
    """The content of a tool ChatMessage."""
    return compact_json({"tool_call_id": tool_call_id, "content": content})


def _loads_object(text: str) -> dict[str, Any] | None:
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_assistant_envelope(content: str) -> tuple[str | None, tuple[ToolCall, ...]] | None:
    """Parse an assistant tool-call envelope; None when the content is plain text."""
    obj = _loads_object(content)
    if obj is None or not isinstance(obj.get("tool_calls"), list) or not obj["tool_calls"]:
        return None
    text = obj.get("content")
    if text is not None and not isinstance(text, str):
        return None
    calls: list[ToolCall] = []
    for raw in obj["tool_calls"]:
        if not isinstance(raw, dict):
            return None
        arguments = raw.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = compact_json(arguments)
        try:
            calls.append(ToolCall(raw.get("id"), raw.get("name", ""), arguments))  # type: ignore[arg-type]
        except InvalidMessage:
            return None
    if len({c.id for c in calls}) != len(calls):
        return None
    return text, tuple(calls)


def parse_tool_envelope(content: str) -> tuple[str, str] | None:
    """Parse a tool-result envelope into (tool_call_id, content); None for plain text."""
    obj = _loads_object(content)
    if obj is None:
        return None
    call_id, inner = obj.get("tool_call_id"), obj.get("content", "")
    if not isinstance(call_id, str) or not call_id:
        return None
    if not isinstance(inner, str):
        inner = compact_json(inner)
    return call_id, inner


# --- conversions ----------------------------------------------------------------------------

def to_chat_messages(conversation: Iterable[ConversationMessage]) -> list[ChatMessage]:
    """Structured history -> provider-facing messages, in SPEC vocabulary.

    `AssistantToolCalls` becomes one assistant message with the tool-call envelope (the
    reasoning content is not sent); each `ToolResult` becomes one tool message with the
    tool-result envelope and the tool's declared attachments.
    """
    out: list[ChatMessage] = []
    for item in conversation:
        match item:
            case Chat(message=message):
                out.append(message)
            case AssistantToolCalls(text=text, tool_calls=calls):
                out.append(ChatMessage("assistant", assistant_envelope(text, calls)))
            case ToolResults(results=results):
                out.extend(
                    ChatMessage("tool", tool_envelope(r.tool_call_id, r.content), r.attachments)
                    for r in results
                )
            case _:
                raise InvalidMessage(f"not a ConversationMessage: {type(item).__name__}")
    return out


def from_chat_messages(history: Iterable[ChatMessage]) -> list[ConversationMessage]:
    """Provider-facing messages -> structured history (the inverse of `to_chat_messages`).

    Consecutive tool messages become one `ToolResults`. Tool content that is not an envelope is
    tolerated as plain text with an unknown call id (``"unknown"``), so nothing is lost.
    """
    out: list[ConversationMessage] = []
    pending: list[ToolResult] = []
    names: dict[str, str] = {}

    def flush() -> None:
        if pending:
            out.append(ToolResults(tuple(pending)))
            pending.clear()

    for message in history:
        if message.role == "tool":
            parsed = parse_tool_envelope(message.content)
            call_id, text = parsed if parsed else ("unknown", message.content)
            pending.append(ToolResult(call_id, text, names.get(call_id, ""), message.attachments))
            continue
        flush()
        envelope = (
            parse_assistant_envelope(message.content) if message.role == "assistant" else None
        )
        if envelope is None:
            out.append(Chat(message))
        else:
            said, calls = envelope
            names.update((c.id, c.name) for c in calls)
            out.append(AssistantToolCalls(said, calls))
    flush()
    return out
