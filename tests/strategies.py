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
    DocumentBlock,
    ImageBlock,
    OpaqueBlock,
    RedactedThinkingBlock,
    ServerToolResult,
    ServerToolUse,
    TextBlock,
    ThinkingBlock,
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
    to_chat_messages,
)

__all__ = [
    "IMAGE_MARKERS",
    "chat_histories",
    "conversation_histories",
    "every_block_type_history",
    "message_texts",
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
