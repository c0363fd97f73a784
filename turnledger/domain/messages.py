"""Message values: the provider-facing `ChatMessage` and the structured `ConversationMessage`.

The vocabulary is docs/behaviour.md's. An assistant message that calls tools carries the JSON
envelope ``{"content": text, "tool_calls": [{"id", "name", "arguments"}]}`` as its content; a
tool message carries ``{"tool_call_id": id, "content": text}``. `to_chat_messages` turns the
structured history into the flat one, `from_chat_messages` parses it back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final, TypeAlias

import attrs

from turnledger.domain.blocks import (
    ContentBlock,
    ImageBlock,
    TextBlock,
    block_json_texts,
    block_text,
    canonical_text,
    check_finite_json,
    check_object_text,
)
from turnledger.domain.errors import InvalidMessage

__all__ = [
    "BREADCRUMB_TEXT",
    "TOOL_RESULTS_PREFIX",
    "AssistantToolCalls",
    "Chat",
    "ChatMessage",
    "ConversationMessage",
    "ToolCall",
    "ToolResult",
    "ToolResults",
    "as_conversation_message",
    "assistant_blocks",
    "assistant_envelope",
    "chat_tool_call_id",
    "chat_tool_calls",
    "check_appended",
    "classify_appended",
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
SUMMARY_PREFIX: Final = "[summary of earlier turns, omitted to fit the context window]\n"
"""How the synthetic message that shows a runtime's summary in place of the breadcrumb begins
(issue 24): it says what it is, as the breadcrumb does (R31)."""
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


def _to_blocks(value: Iterable[ContentBlock]) -> tuple[ContentBlock, ...]:
    return tuple(value)


def _to_assistant_blocks(
    value: Iterable[ContentBlock | ToolCall],
) -> tuple[ContentBlock | ToolCall, ...]:
    return tuple(value)


@attrs.frozen(cache_hash=True)
class ChatMessage:
    """One provider-facing message: a role and its text.

    ``attachments`` are image references a tool declared it produced (R22); only tool messages
    carry them. ``synthetic`` marks the breadcrumb turnledger inserts (R31), so that a real user
    message with the same text is still a real turn.

    What a provider sent beyond the text (issue 8), all keyword-only with defaults:

    - ``blocks``: the typed content blocks when the provider sent a list of blocks (empty when
      the content was a string); ``content`` is then derived from them (`block_text` of each,
      joined with line breaks), so every rule keeps reading ``content``;
    - ``extra``: the provider fields of the message turnledger does not interpret (``name``,
      ``refusal``, ``annotations``, ...), as canonical JSON text (`canonical_json`);
    - ``envelope``: the recorded structure. ``True``: the content is the envelope of its role
      (tool calls for an assistant, a tool result for a tool message); ``False``: plain text,
      never parsed, whatever it looks like; ``None``: a *bare* message, classified by the seed's
      rule where it is read (see `chat_tool_calls`) and once, when a session records it (see
      `classify_appended`);
    - ``item``: for the chat form of an `AssistantToolCalls` or a `ToolResult`, that item, so
      that nothing it carries is lost on the way to the provider.

    ``envelope`` and ``item`` say how to read the message, not what is sent: they take no part in
    equality.
    """

    role: str
    content: str
    attachments: tuple[str, ...] = attrs.field(default=(), converter=_to_str_tuple)
    synthetic: bool = attrs.field(default=False, kw_only=True)
    blocks: tuple[ContentBlock, ...] = attrs.field(
        default=(), kw_only=True, converter=_to_blocks
    )
    extra: str = attrs.field(default="", kw_only=True, converter=canonical_text)
    envelope: bool | None = attrs.field(default=None, kw_only=True, eq=False)
    item: AssistantToolCalls | ToolResult | None = attrs.field(
        default=None, kw_only=True, eq=False
    )

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
        if self.synthetic and (self.role != "user" or (
                self.content != BREADCRUMB_TEXT and not self.content.startswith(SUMMARY_PREFIX))):
            raise InvalidMessage("synthetic is reserved for the breadcrumb user message (or "
                                 "the summary shown in its place)")
        if self.blocks or self.extra or self.envelope is not None or self.item is not None:
            self._check_structure()

    def _check_structure(self) -> None:
        _require_str("extra", self.extra)
        check_object_text("extra", self.extra)
        if self.envelope is not None and not isinstance(self.envelope, bool):
            raise InvalidMessage("envelope must be a bool or None")
        if self.blocks:
            if self.item is not None or self.envelope:
                raise InvalidMessage("blocks belong to a plain message; envelopes carry an item")
            expected = joined_text(self.blocks)
            if self.content != expected:
                raise InvalidMessage("content must be the text of the blocks (block_text)")
        if self.item is not None:
            kind = AssistantToolCalls if self.role == "assistant" else ToolResult
            if self.role not in ("assistant", "tool") or not isinstance(self.item, kind):
                raise InvalidMessage(f"item of a {self.role} message cannot be a "
                                     f"{type(self.item).__name__}")
        elif self.envelope and (
            self.role not in ("assistant", "tool") or not self.content.startswith("{")
        ):
            # A cheap check (this runs on every decoded record): a recorded envelope that does
            # not parse reads as carrying no call, never as something else.
            raise InvalidMessage(f"envelope=True but the content is not a {self.role} envelope")

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
    def assistant_text(cls, text: str) -> ChatMessage:
        """An assistant answer that is text, even when it looks like a tool-call envelope."""
        return cls("assistant", text, envelope=False)

    @classmethod
    def tool_calls_envelope(
        cls, text: str | None, tool_calls: Iterable[ToolCall]
    ) -> ChatMessage:
        """The assistant message that calls ``tool_calls`` (the envelope form, R1)."""
        return cls.of_item(AssistantToolCalls(text, tuple(tool_calls)))

    @classmethod
    def tool_result_envelope(
        cls, tool_call_id: str, content: str, attachments: Iterable[str] = ()
    ) -> ChatMessage:
        """The tool message that answers ``tool_call_id`` (the envelope form, R1)."""
        return cls.of_item(ToolResult(tool_call_id, content, "", tuple(attachments)))

    @classmethod
    def from_blocks(
        cls, role: str, blocks: Iterable[ContentBlock], *, extra: str = ""
    ) -> ChatMessage:
        """A plain message whose content is the typed ``blocks`` (content derived from them)."""
        blocks = tuple(blocks)
        return cls(role, joined_text(blocks), blocks=blocks, extra=extra, envelope=False)

    @classmethod
    def of_item(cls, item: AssistantToolCalls | ToolResult) -> ChatMessage:
        """The provider-facing form of a tool-call item or of one tool result (R1's envelopes)."""
        if isinstance(item, AssistantToolCalls):
            return cls(
                "assistant",
                assistant_envelope(item.envelope_text, item.tool_calls),
                envelope=True,
                item=item,
            )
        if isinstance(item, ToolResult):
            return cls(
                "tool",
                tool_envelope(item.tool_call_id, item.content),
                item.attachments,
                envelope=True,
                item=item,
            )
        raise InvalidMessage(f"not a tool-call item or tool result: {type(item).__name__}")

    @classmethod
    def breadcrumb(cls) -> ChatMessage:
        """The synthetic user message that says earlier turns were omitted (R31)."""
        return cls("user", BREADCRUMB_TEXT, synthetic=True)


@attrs.frozen
class ToolCall:
    """One tool call requested by the assistant; ``arguments`` is its arguments as the model
    wrote them: JSON text as a rule, kept as it came when it is not (a model may write broken
    JSON, and the record keeps what it said; Anthropic gets such text under ``_raw``)."""

    id: str
    name: str
    arguments: str = "{}"
    extra: str = attrs.field(default="", kw_only=True, converter=canonical_text)
    """Provider fields of the call turnledger does not interpret (e.g. Anthropic ``caller``)."""

    def __attrs_post_init__(self) -> None:
        _require_str("tool_call.id", self.id)
        if not self.id:
            raise InvalidMessage("tool_call.id must not be empty")
        _require_str("tool_call.name", self.name)
        _require_str("tool_call.arguments", self.arguments)
        _require_str("tool_call.extra", self.extra)


@attrs.frozen
class ToolResult:
    """The result of one tool call, with the images the tool declared (R22).

    ``blocks``: the result's own content blocks when the provider sent a list (empty for a
    string); ``content`` is then the text of its non-image blocks and ``attachments`` the
    references of its image blocks (R22), both derived (`from_blocks`). ``is_error``: the
    provider's error flag (None when absent). ``extra``: uninterpreted provider fields.
    """

    tool_call_id: str
    content: str
    tool_name: str = ""
    attachments: tuple[str, ...] = attrs.field(default=(), converter=_to_str_tuple)
    blocks: tuple[ContentBlock, ...] = attrs.field(
        default=(), kw_only=True, converter=_to_blocks
    )
    is_error: bool | None = attrs.field(default=None, kw_only=True)
    extra: str = attrs.field(default="", kw_only=True, converter=canonical_text)

    def __attrs_post_init__(self) -> None:
        _require_str("tool_result.tool_call_id", self.tool_call_id)
        if not self.tool_call_id:
            raise InvalidMessage("tool_result.tool_call_id must not be empty")
        _require_str("tool_result.content", self.content)
        _require_str("tool_result.tool_name", self.tool_name)
        _check_attachments("tool_result.attachments", self.attachments)
        if self.is_error is not None and not isinstance(self.is_error, bool):
            raise InvalidMessage("tool_result.is_error must be a bool or None")
        _require_str("tool_result.extra", self.extra)
        if self.blocks and (self.content, self.attachments) != _result_parts(self.blocks):
            raise InvalidMessage(
                "tool_result.content and attachments must be derived from its blocks"
            )

    @classmethod
    def from_blocks(
        cls,
        tool_call_id: str,
        blocks: Iterable[ContentBlock],
        tool_name: str = "",
        *,
        is_error: bool | None = None,
        extra: str = "",
    ) -> ToolResult:
        """A result whose content is ``blocks``: text and attachments derived from them."""
        blocks = tuple(blocks)
        content, attachments = _result_parts(blocks)
        return cls(tool_call_id, content, tool_name, attachments, blocks=blocks,
                   is_error=is_error, extra=extra)


def joined_text(blocks: Iterable[ContentBlock]) -> str:
    """The text the rules see of a block sequence: each `block_text`, joined by line breaks."""
    return "\n".join(block_text(b) for b in blocks)


def _result_parts(blocks: Sequence[ContentBlock]) -> tuple[str, tuple[str, ...]]:
    """(content, attachments) of a tool result's blocks: images are attachments (R22)."""
    text = joined_text(b for b in blocks if not isinstance(b, ImageBlock))
    return text, tuple(b.ref for b in blocks if isinstance(b, ImageBlock))


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


AssistantBlock: TypeAlias = ContentBlock | ToolCall


@attrs.frozen
class AssistantToolCalls:
    """An assistant turn step that calls one or more tools.

    ``blocks``: the message's blocks in the provider's order, tool calls included, when it sent
    a list (empty for the plain form: text, then the calls); ``text`` is then the text of its
    `TextBlock` s (None when it has none) and ``tool_calls`` its `ToolCall` s (`from_blocks`).
    ``extra``: uninterpreted provider fields of the message.
    """

    text: str | None
    tool_calls: tuple[ToolCall, ...] = attrs.field(converter=_to_calls)
    reasoning_content: str | None = None
    blocks: tuple[AssistantBlock, ...] = attrs.field(
        default=(), kw_only=True, converter=_to_assistant_blocks
    )
    extra: str = attrs.field(default="", kw_only=True, converter=canonical_text)

    @classmethod
    def from_blocks(
        cls,
        blocks: Iterable[AssistantBlock],
        *,
        reasoning_content: str | None = None,
        extra: str = "",
    ) -> AssistantToolCalls:
        """The tool-call step whose content is ``blocks`` (text and calls derived)."""
        blocks = tuple(blocks)
        text, calls = _assistant_parts(blocks)
        return cls(text, calls, reasoning_content, blocks=blocks, extra=extra)

    @property
    def envelope_text(self) -> str | None:
        """The text of the chat envelope: every non-call block, thinking included (R23)."""
        if not self.blocks:
            return self.text
        others = [b for b in self.blocks if not isinstance(b, ToolCall)]
        return joined_text(others) if others else None

    def keeping(self, ids: frozenset[str]) -> AssistantToolCalls:
        """This step with only the calls whose id is in ``ids`` (the sweep, R36)."""
        calls = tuple(c for c in self.tool_calls if c.id in ids)
        if not self.blocks:
            return attrs.evolve(self, tool_calls=calls)
        return attrs.evolve(
            self,
            tool_calls=calls,
            blocks=tuple(b for b in self.blocks if not isinstance(b, ToolCall) or b.id in ids),
        )

    def remainder(self) -> ChatMessage | None:
        """The plain assistant message left when every call goes; None when it says nothing."""
        if not self.blocks:
            if self.text is None or not self.text.strip():
                return None
            return ChatMessage("assistant", self.text, envelope=False)
        others = [b for b in self.blocks if not isinstance(b, ToolCall)]
        if not joined_text(others).strip():
            return None
        return ChatMessage.from_blocks("assistant", others, extra=self.extra)

    def __attrs_post_init__(self) -> None:
        _require_str("extra", self.extra)
        if self.blocks and (self.text, self.tool_calls) != _assistant_parts(self.blocks):
            raise InvalidMessage("text and tool_calls must be derived from the blocks")
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


def _assistant_parts(
    blocks: Sequence[AssistantBlock],
) -> tuple[str | None, tuple[ToolCall, ...]]:
    texts = [b.text for b in blocks if isinstance(b, TextBlock)]
    calls = tuple(b for b in blocks if isinstance(b, ToolCall))
    return ("\n".join(texts) if texts else None), calls


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

_json_string: Final = json.encoder.encode_basestring
"""One JSON string as ``json.dumps(..., ensure_ascii=False)`` writes it."""


def compact_json(value: object) -> str:
    """``value`` as compact JSON text: key order as written, non-ASCII kept (no escapes).

    The envelopes use it because their byte count feeds the estimate (R20); the transcript
    exports use it so the same history always gives the same bytes.
    """
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def assistant_envelope(text: str | None, tool_calls: Sequence[ToolCall]) -> str:
    """The content of an assistant ChatMessage that calls tools.

    Written as `compact_json` of ``{"content": text, "tool_calls": [{"id", "name",
    "arguments"}]}`` writes it, byte for byte, from the strings alone: every field is a
    validated ``str`` (or a None text), and a `json.dumps` per message was a fifth of a
    replay's fold (`tests/unit/test_envelopes.py` holds the two to the same bytes).
    """
    calls = ",".join(
        f'{{"id":{_json_string(c.id)},"name":{_json_string(c.name)},'
        f'"arguments":{_json_string(c.arguments)}}}'
        for c in tool_calls
    )
    content = "null" if text is None else _json_string(text)
    return f'{{"content":{content},"tool_calls":[{calls}]}}'


def tool_envelope(tool_call_id: str, content: str) -> str:
    """The content of a tool ChatMessage (`compact_json`'s bytes, as `assistant_envelope`)."""
    return f'{{"tool_call_id":{_json_string(tool_call_id)},"content":{_json_string(content)}}}'


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
    """Structured history -> provider-facing messages, in the vocabulary of docs/behaviour.md.

    `AssistantToolCalls` becomes one assistant message with the tool-call envelope (the
    reasoning content is not in its text); each `ToolResult` becomes one tool message with the
    tool-result envelope and the tool's declared attachments. Each such message carries its
    item (`ChatMessage.of_item`), so `from_chat_messages` gives the very items back.
    """
    out: list[ChatMessage] = []
    for item in conversation:
        match item:
            case Chat(message=message):
                out.append(message)
            case AssistantToolCalls():
                out.append(ChatMessage.of_item(item))
            case ToolResults(results=results):
                out.extend(ChatMessage.of_item(r) for r in results)
            case _:
                raise InvalidMessage(f"not a ConversationMessage: {type(item).__name__}")
    return out


def from_chat_messages(history: Iterable[ChatMessage]) -> list[ConversationMessage]:
    """Provider-facing messages -> structured history (the inverse of `to_chat_messages`).

    Consecutive tool messages become one `ToolResults`. A message that carries its item gives
    that item back; a plain one (``envelope=False``) stays `Chat`; a bare one is read by the
    seed's rule (`chat_tool_calls`). Tool content that is not an envelope is tolerated as plain
    text with an unknown call id (``"unknown"``), so nothing is lost.
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
            pending.append(_tool_result_of(message, names))
            continue
        flush()
        if isinstance(message.item, AssistantToolCalls):
            names.update((c.id, c.name) for c in message.item.tool_calls)
            out.append(message.item)
            continue
        envelope = chat_tool_calls(message)
        if envelope is None:
            out.append(Chat(message))
        else:
            said, calls = envelope
            names.update((c.id, c.name) for c in calls)
            out.append(AssistantToolCalls(said, calls))
    flush()
    return out


def _tool_result_of(message: ChatMessage, names: dict[str, str]) -> ToolResult:
    if isinstance(message.item, ToolResult):
        return message.item
    parsed = parse_tool_envelope(message.content) if message.envelope is not False else None
    call_id, text = parsed if parsed else ("unknown", message.content)
    return ToolResult(call_id, text, names.get(call_id, ""), message.attachments)


# --- structure: recorded, or read by the seed's rule ------------------------------------------

def chat_tool_calls(message: ChatMessage) -> tuple[str | None, tuple[ToolCall, ...]] | None:
    """(text, calls) when ``message`` is an assistant message that calls tools, else None.

    The recorded structure decides: the message's item, or ``envelope`` (False: text, whatever
    it looks like). A bare message (``envelope=None``) is read by the seed's rule: any JSON
    object with a non-empty ``tool_calls`` list is a call (`parse_assistant_envelope`).
    """
    if message.role != "assistant" or message.envelope is False:
        return None
    if isinstance(message.item, AssistantToolCalls):
        return message.item.envelope_text, message.item.tool_calls
    return parse_assistant_envelope(message.content)


def chat_tool_call_id(message: ChatMessage) -> str | None:
    """The call id a tool message answers; None when it carries none (or is not a tool message).

    As `chat_tool_calls`: the recorded structure decides, a bare message is parsed.
    """
    if message.role != "tool" or message.envelope is False:
        return None
    if isinstance(message.item, ToolResult):
        return message.item.tool_call_id
    parsed = parse_tool_envelope(message.content)
    return parsed[0] if parsed else None


def check_appended(item: ConversationMessage) -> None:
    """What a message recorded from now on must satisfy beyond its type's own checks (those
    stay as they were, so that records written before these still decode): every ``extra`` of
    a call, a result or a batch of calls the JSON text of an object, or empty (a provider
    writer merges it into an object: ``"[1]"`` would fail every later request of the session),
    a batch of results answering each call once (a second result for the same call was
    dropped from requests without a word), no NaN or infinity in any JSON value (ADR-0099:
    extras, blocks, tool-call arguments) and no id twice among the calls of an envelope
    (ADR-0099; `AssistantToolCalls` refuses it when built). Raises `InvalidMessage` naming
    the field."""
    match item:
        case Chat(message=message):
            _check_finite_message(message)
        case AssistantToolCalls(tool_calls=calls, extra=extra, blocks=blocks):
            check_object_text("assistant_tool_calls.extra", extra)
            check_finite_json("assistant_tool_calls.extra", extra)
            for i, call in enumerate(calls):
                check_object_text(f"tool_calls[{i}].extra", call.extra)
            _check_finite_calls(calls)
            _check_finite_blocks("blocks", [b for b in blocks if not isinstance(b, ToolCall)])
        case ToolResults(results=results):
            answered: set[str] = set()
            for i, result in enumerate(results):
                check_object_text(f"results[{i}].extra", result.extra)
                check_finite_json(f"results[{i}].extra", result.extra)
                _check_finite_blocks(f"results[{i}].blocks", result.blocks)
                if result.tool_call_id in answered:
                    raise InvalidMessage(f"results[{i}] answers tool call "
                                         f"{result.tool_call_id!r} again: one result per call")
                answered.add(result.tool_call_id)


def _check_finite_message(message: ChatMessage) -> None:
    check_finite_json("extra", message.extra)
    _check_finite_blocks("blocks", message.blocks)
    if message.role == "assistant" and message.envelope is not False and message.item is None:
        _check_envelope_ids(message.content)
        parsed = chat_tool_calls(message)
        if parsed:
            _check_finite_calls(parsed[1])


def _check_finite_calls(calls: Sequence[ToolCall]) -> None:
    for i, call in enumerate(calls):
        check_finite_json(f"tool_calls[{i}].arguments", call.arguments, canonical=False)
        check_finite_json(f"tool_calls[{i}].extra", call.extra)


def _check_finite_blocks(owner: str, blocks: Sequence[ContentBlock]) -> None:
    for i, block in enumerate(blocks):
        for field, text in block_json_texts(f"{owner}[{i}]", block):
            check_finite_json(field, text)


def _check_envelope_ids(content: str) -> None:
    """An assistant envelope naming one call id twice read as text, its calls lost
    (`parse_assistant_envelope`); refused when appended (ADR-0099)."""
    obj = _loads_object(content) if "tool_calls" in content else None
    calls = obj.get("tool_calls") if obj is not None else None
    if not isinstance(calls, list):
        return
    seen: dict[str, int] = {}
    for i, call in enumerate(calls):
        call_id = call.get("id") if isinstance(call, dict) else None
        if isinstance(call_id, str) and call_id:
            if call_id in seen:
                raise InvalidMessage(f"tool_calls[{i}] has the id {call_id!r} of "
                                     f"tool_calls[{seen[call_id]}]: one id per call")
            seen[call_id] = i


def classify_appended(message: ConversationMessage | ChatMessage) -> ConversationMessage:
    """What a session records for an appended message: its structure, decided once (issue 8).

    A `ConversationMessage` is recorded as it is, except a `Chat` whose message carries its
    item (`ChatMessage.of_item`), recorded as that item. A bare `ChatMessage` (``envelope``
    None) is classified here, once, and the decision is recorded in the message:

    - a tool message is a tool result; it answers a call when its content is a tool envelope;
    - an assistant message calls tools only when its content is exactly the envelope
      turnledger writes (`assistant_envelope`: compact JSON, keys in that order); any other
      text, JSON or not, is the assistant's text and stays text for ever;
    - user and system messages are text.

    Use `ChatMessage.tool_calls_envelope`, `AssistantToolCalls` or the provider converters to
    say what a message is instead of relying on its shape.
    """
    item = as_conversation_message(message)
    if not isinstance(item, Chat):
        return item
    chat = item.message
    if isinstance(chat.item, AssistantToolCalls):
        return chat.item
    if isinstance(chat.item, ToolResult):
        return ToolResults((chat.item,))
    if chat.envelope is not None or chat.role not in ("assistant", "tool"):
        return item
    if chat.role == "tool":
        return Chat(attrs.evolve(chat, envelope=parse_tool_envelope(chat.content) is not None))
    parsed = parse_assistant_envelope(chat.content)
    canonical = parsed is not None and assistant_envelope(*parsed) == chat.content
    return Chat(attrs.evolve(chat, envelope=canonical))


def assistant_blocks(message: AssistantToolCalls) -> list[ContentBlock | ToolCall]:
    """A tool-call step's blocks in order; one recorded without blocks (by another runtime)
    is its text, then its calls: how every provider format writes the step."""
    if message.blocks:
        return list(message.blocks)
    return [*([TextBlock(message.text)] if message.text else []), *message.tool_calls]
