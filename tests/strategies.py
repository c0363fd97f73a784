"""Hypothesis strategies shared by the test suite (STYLE 8, 11).

Histories are generated once, as structured `ConversationMessage` lists, and rendered with
`to_chat_messages` for the provider-facing form, so both representations describe the same
conversations. A generated history is *consistent*: every assistant tool call is followed by its
tool result, call ids are unique, and at most one (synthetic) breadcrumb sits right after the
leading system messages, where an earlier trim puts it.

Sections: text and images, messages, histories. Add new strategies under their own heading.
"""

from __future__ import annotations

from hypothesis import strategies as st

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
)
from turnledger.domain.messages import (
    BREADCRUMB_TEXT,
    TOOL_RESULTS_PREFIX,
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    compact_json,
    to_chat_messages,
)

__all__ = [
    "IMAGE_MARKERS",
    "chat_histories",
    "conversation_histories",
    "every_block_type_history",
    "message_texts",
    "provider_histories",
]

# --- text and images ------------------------------------------------------------------------------

# Loadable markers (R21) and placeholders that must stay text.
IMAGE_MARKERS = (
    "[IMAGE:/x.png]",
    "[IMAGE:https://example.com/cat.jpg]",
    "[IMAGE:C:\\pics\\a.png]",
    "[IMAGE:...]",
    "[IMAGE:photo.png]",
)

# codec="utf-8" leaves out lone surrogates, which no provider would accept.
_plain_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)


@st.composite
def message_texts(draw: st.DrawFn) -> str:
    """Short texts, non-ASCII included, sometimes carrying `[IMAGE:…]` markers."""
    text = draw(_plain_text)
    for marker in draw(st.lists(st.sampled_from(IMAGE_MARKERS), max_size=2)):
        text = f"{text} {marker}"
    return text


_attachments = st.lists(
    st.sampled_from(("/tmp/shot.png", "https://example.com/chart.png", "/img/diagram.svg")),
    max_size=2,
).map(tuple)

# --- messages -------------------------------------------------------------------------------------


def _system() -> st.SearchStrategy[ConversationMessage]:
    return _plain_text.map(lambda t: Chat(ChatMessage.system(f"sys {t}")))


def _real_user_text() -> st.SearchStrategy[str]:
    # A real user message may carry the breadcrumb's text; it is still a real turn (R31).
    return st.one_of(
        message_texts().filter(lambda t: not t.startswith(TOOL_RESULTS_PREFIX)),
        st.just(BREADCRUMB_TEXT),
    )


@st.composite
def _tool_exchange(draw: st.DrawFn, prefix: str) -> list[ConversationMessage]:
    """An assistant tool-call step immediately followed by the results of all its calls."""
    n_calls = draw(st.integers(min_value=1, max_value=3))
    calls = tuple(
        ToolCall(f"{prefix}_{j}", draw(st.sampled_from(("shell", "read", "browse"))), "{}")
        for j in range(n_calls)
    )
    text = draw(st.none() | _plain_text)
    results = tuple(
        ToolResult(call.id, draw(message_texts()), call.name, draw(_attachments)) for call in calls
    )
    return [AssistantToolCalls(text, calls), ToolResults(results)]


@st.composite
def _turn(draw: st.DrawFn, turn_index: int) -> list[ConversationMessage]:
    """One turn (R1): a real user message, then assistant text, tool loops, carriers, systems."""
    items: list[ConversationMessage] = [Chat(ChatMessage.user(draw(_real_user_text())))]
    n_steps = draw(st.integers(min_value=0, max_value=4))
    for step in range(n_steps):
        kind = draw(st.sampled_from(("assistant", "tools", "tools", "carrier", "late_system")))
        if kind == "assistant":
            items.append(Chat(ChatMessage.assistant(draw(message_texts()))))
        elif kind == "tools":
            items.extend(draw(_tool_exchange(f"call_{turn_index}_{step}")))
        elif kind == "carrier":
            # R2: a "[Tool results]" user message continues the turn.
            items.append(Chat(ChatMessage.user(f"{TOOL_RESULTS_PREFIX} {draw(message_texts())}")))
        else:
            items.append(draw(_system()))
    return items


# --- histories ------------------------------------------------------------------------------------


@st.composite
def conversation_histories(
    draw: st.DrawFn, *, min_turns: int = 0, max_turns: int = 6
) -> list[ConversationMessage]:
    """Consistent structured histories (R1-R4, R9).

    Leading system messages, an optional earlier breadcrumb, an optional preamble (assistant
    text, a late system message or a tool exchange before any user message), then turns with
    tool loops, ``[Tool results]`` carriers, late systems and images. ``min_turns=0`` includes
    histories without any real user message.
    """
    history: list[ConversationMessage] = list(draw(st.lists(_system(), max_size=2)))
    if draw(st.booleans()):
        history.append(Chat(ChatMessage.breadcrumb()))
    preamble = draw(st.sampled_from(("none", "none", "assistant", "late_system", "tools")))
    if preamble == "assistant":
        history.append(Chat(ChatMessage.assistant(draw(message_texts()))))
    elif preamble == "late_system":
        history.append(draw(_system()))
    elif preamble == "tools":
        history.extend(draw(_tool_exchange("call_pre")))
    n_turns = draw(st.integers(min_value=min_turns, max_value=max_turns))
    for t in range(n_turns):
        history.extend(draw(_turn(t)))
    return history


def chat_histories(
    *, min_turns: int = 0, max_turns: int = 6
) -> st.SearchStrategy[list[ChatMessage]]:
    """The provider-facing form of `conversation_histories` (assistant/tool JSON envelopes)."""
    return conversation_histories(min_turns=min_turns, max_turns=max_turns).map(to_chat_messages)


# --- provider content blocks (issue 8) ---------------------------------------------------------


EPHEMERAL = '{"cache_control":{"type":"ephemeral"}}'


def every_block_type_history() -> list[ConversationMessage]:
    """One structured history holding every block type and provider field turnledger keeps."""
    call = ToolCall("toolu_1", "read", '{"path":"/a"}', extra='{"caller":{"type":"direct"}}')
    server = ServerToolUse("srvtoolu_1", "web_search", '{"query":"x"}')
    return [
        Chat(ChatMessage.from_blocks("system", [TextBlock("sys", extra=EPHEMERAL)])),
        Chat(
            ChatMessage.from_blocks(
                "user",
                [
                    TextBlock("look"),
                    ImageBlock("https://example.com/a.png"),
                    ImageBlock(media_type="image/png", data="iVBORw0KGgo="),
                    DocumentBlock('{"data":"JVBERi0=","media_type":"application/pdf","type":"base64"}'),
                ],
            )
        ),
        AssistantToolCalls.from_blocks(
            [
                ThinkingBlock("let me think", "sig=="),
                RedactedThinkingBlock("ENCRYPTED"),
                server,
                ServerToolResult("web_search_tool_result", "srvtoolu_1", '[{"title":"t"}]'),
                TextBlock("reading", extra='{"citations":[]}'),
                call,
            ],
            extra='{"refusal":null}',
        ),
        ToolResults(
            (
                ToolResult.from_blocks(
                    "toolu_1",
                    [TextBlock("file"), ImageBlock("https://example.com/b.png"),
                     DocumentBlock('{"data":"doc","type":"text"}')],
                    "read",
                    is_error=False,
                    extra=EPHEMERAL,
                ),
            )
        ),
        Chat(
            ChatMessage.from_blocks(
                "assistant",
                [TextBlock("done"), OpaqueBlock('{"type":"future_block","x":1}')],
                extra='{"annotations":[]}',
            )
        ),
    ]


# --- provider histories (issue 8): what each provider format can express ------------------------

_words = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=12)
# Texts a model may answer with: plain, or JSON shaped like turnledger's envelopes.
_answers = st.one_of(
    _plain_text,
    st.just('{"tool_calls": [{"id": "call_abc", "name": "get_weather", "arguments": "{}"}]}'),
    st.just('{"content":null,"tool_calls":[{"id":"c","name":"n","arguments":"{}"}]}'),
    st.just('{"tool_call_id": "c", "content": "x"}'),
)
_extras = st.one_of(
    st.just(""),
    st.dictionaries(st.sampled_from(("cache_control", "citations", "x_meta")),
                    st.one_of(st.none(), _words, st.just({"type": "ephemeral"})),
                    min_size=1, max_size=2).map(canonical_json),
)
_images = st.one_of(
    st.sampled_from(("https://example.com/a.png", "https://example.com/b.jpg")).map(ImageBlock),
    st.just(ImageBlock(media_type="image/png", data="iVBORw0KGgo=")),
)
_opaque = st.sampled_from(('{"type":"future_block","x":1}', '{"type":"search_result","n":[1,2]}')
                          ).map(OpaqueBlock)


def _arguments() -> st.SearchStrategy[str]:
    return st.dictionaries(st.sampled_from("abc"), st.one_of(_words, st.integers()),
                           max_size=2).map(compact_json)


@st.composite
def provider_histories(draw: st.DrawFn, fmt: str) -> list[ConversationMessage]:
    """Histories that format ``fmt`` (``openai``, ``anthropic``, ``responses``) can express.

    Each tool-call step is followed by the results of its calls, results named after their
    calls, so ``from_X(to_X(h)) == h`` must hold.
    """
    history: list[ConversationMessage] = []
    if draw(st.booleans()):
        history.append(Chat(draw(_provider_message(fmt, "system"))))
    for turn in range(draw(st.integers(min_value=0, max_value=4))):
        history.append(Chat(draw(_provider_message(fmt, "user"))))
        for step in range(draw(st.integers(min_value=0, max_value=3))):
            if draw(st.booleans()):
                history.append(Chat(draw(_provider_message(fmt, "assistant"))))
                continue
            prefix = f"call_{turn}_{step}"
            calls, results = draw(_provider_tool_step(fmt, prefix))
            history.extend([calls, results])
            if fmt == "anthropic" and draw(st.booleans()):
                # A user message after tool results joins their message: always blocks.
                blocks = draw(st.lists(st.one_of(_text_blocks(), _images), min_size=1, max_size=2))
                history.append(Chat(ChatMessage.from_blocks("user", blocks)))
    return history


def _text_blocks() -> st.SearchStrategy[TextBlock]:
    return st.builds(lambda t, e: TextBlock(t, extra=e), _answers, _extras)


@st.composite
def _provider_message(draw: st.DrawFn, fmt: str, role: str) -> ChatMessage:
    if draw(st.booleans()):
        text = draw(_answers)
        if fmt == "openai" and role == "user" and draw(st.booleans()):
            return ChatMessage(role, text, extra=canonical_json({"name": "alice"}))
        return ChatMessage(role, text, envelope=False)
    kinds: list[st.SearchStrategy[ContentBlock]] = [_text_blocks()]
    if role == "user":
        kinds += [_images, _opaque]
        if fmt == "anthropic":
            kinds.append(st.just(DocumentBlock('{"data":"doc","type":"text"}')))
    if role == "assistant" and fmt == "anthropic":
        kinds += [
            st.builds(ThinkingBlock, _words, _words),
            st.builds(RedactedThinkingBlock, _words),
            st.just(ServerToolUse("srvtoolu_1", "web_search", '{"query":"q"}')),
            st.just(ServerToolResult("web_search_tool_result", "srvtoolu_1", "[]")),
            _opaque,
        ]
    if role == "assistant" and fmt == "responses":
        if draw(st.booleans()):
            block = ThinkingBlock(draw(_words), draw(_words), extra=canonical_json({"id": "rs_1"}))
            return ChatMessage.from_blocks("assistant", [block],
                                           extra=canonical_json({"type": "reasoning"}))
        kinds.append(_opaque)
    blocks = draw(st.lists(st.one_of(kinds), min_size=1, max_size=3))
    extra = canonical_json({"id": "msg_1", "type": "message"}) if fmt == "responses" and draw(
        st.booleans()) else ""
    return ChatMessage.from_blocks(role, blocks, extra=extra)


@st.composite
def _provider_tool_step(
    draw: st.DrawFn, fmt: str, prefix: str
) -> tuple[AssistantToolCalls, ToolResults]:
    n = draw(st.integers(min_value=1, max_value=3))
    call_extra = {
        "anthropic": st.sampled_from(("", canonical_json({"caller": {"type": "direct"}}))),
        "responses": st.sampled_from(("", canonical_json({"id": "fc_1", "status": "completed"}))),
        "openai": st.just(""),
    }[fmt]
    calls = [
        ToolCall(f"{prefix}_{j}", draw(st.sampled_from(("shell", "read"))), draw(_arguments()),
                 extra=draw(call_extra))
        for j in range(n)
    ]
    results = tuple(draw(_provider_result(fmt, call)) for call in calls)
    if fmt == "anthropic":
        before = draw(st.lists(st.one_of(_text_blocks(), st.builds(ThinkingBlock, _words, _words)),
                               max_size=2))
        return AssistantToolCalls.from_blocks([*before, *calls]), ToolResults(results)
    if fmt == "responses":
        return AssistantToolCalls(None, tuple(calls)), ToolResults(results)
    text = draw(st.none() | _answers)
    reasoning = draw(st.none() | _words)
    return AssistantToolCalls(text, tuple(calls), reasoning), ToolResults(results)


@st.composite
def _provider_result(draw: st.DrawFn, fmt: str, call: ToolCall) -> ToolResult:
    is_error = draw(st.sampled_from((None, True, False))) if fmt == "anthropic" else None
    if draw(st.booleans()):
        return ToolResult(call.id, draw(_answers), call.name, is_error=is_error)
    kinds: list[st.SearchStrategy[ContentBlock]] = [_text_blocks()]
    if fmt in ("anthropic", "responses"):
        kinds.append(_images)
    blocks = draw(st.lists(st.one_of(kinds), min_size=1, max_size=3))
    if fmt == "responses":
        blocks = [b if not isinstance(b, TextBlock) else TextBlock(b.text) for b in blocks]
        blocks = [b for b in blocks if not isinstance(b, ImageBlock) or b.url] or [TextBlock("x")]
    return ToolResult.from_blocks(call.id, blocks, call.name, is_error=is_error)
