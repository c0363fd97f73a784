"""Turn segmentation (R1, R2, R4, R31): where turns start, in both representations."""


from __future__ import annotations

from hypothesis import given

from tests.strategies import conversation_histories
from turnledger.domain.messages import (
    BREADCRUMB_TEXT,
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    assistant_envelope,
    to_chat_messages,
    tool_envelope,
)
from turnledger.domain.turns import (
    Segmentation,
    count_conversation_turns,
    count_turns,
    segment,
    segment_by,
    segment_conversation,
)

S = ChatMessage.system
U = ChatMessage.user
A = ChatMessage.assistant


def test_r1_turn_starts_at_each_real_user_message() -> None:
    """Each real user message opens a turn that runs to the next one."""
    history = [U("a"), A("b"), U("c"), A("d"), A("e")]
    assert Segmentation(0, (0, 2)) == segment(history)


def test_r1_tool_calls_and_results_belong_to_their_turn() -> None:
    """Assistant tool calls and tool results do not open turns."""
    call = ToolCall("c1", "shell")
    history = [
        U("run it"),
        A(assistant_envelope(None, [call])),
        ChatMessage.tool(tool_envelope("c1", "ok")),
        A("done"),
        U("next"),
    ]
    assert (0, 4) == segment(history).turn_starts


def test_r2_tool_results_carrier_continues_the_previous_turn() -> None:
    """A user message starting with "[Tool results]" is not a new turn."""
    history = [U("a"), A("b"), U("[Tool results] x"), A("c"), U("d")]
    assert (0, 4) == segment(history).turn_starts


def test_r2_carrier_prefix_must_be_at_the_start() -> None:
    """Only a text *starting* with "[Tool results]" is a carrier."""
    history = [U("a"), U(" [Tool results] x")]
    assert 2 == count_turns(history)


def test_r4_leading_system_messages_are_not_turns() -> None:
    """The maximal prefix of system messages is the leading region."""
    history = [S("s1"), S("s2"), U("a"), S("late"), A("b")]
    assert Segmentation(2, (2,)) == segment(history)


def test_r4_late_system_message_ends_no_leading_region() -> None:
    """A system message after a non-system message is not leading."""
    history = [S("s1"), A("hello"), S("late"), U("a")]
    assert Segmentation(1, (3,)) == segment(history)


def test_r31_breadcrumb_is_not_a_turn_but_a_real_user_with_its_text_is() -> None:
    """The synthetic breadcrumb opens no turn; a real user message with the same text does."""
    history = [S("s"), ChatMessage.breadcrumb(), U(BREADCRUMB_TEXT), A("b")]
    assert Segmentation(1, (2,)) == segment(history)


def test_r10_history_without_user_message_has_no_turn() -> None:
    """No real user message means zero turns (all of it is preamble)."""
    history = [S("s"), A("hello"), ChatMessage.tool("x")]
    assert Segmentation(1, ()) == segment(history)


def test_r4_empty_and_system_only_histories() -> None:
    """Edge cases: empty history, only system messages."""
    assert Segmentation(0, ()) == segment([])
    assert Segmentation(2, ()) == segment([S("a"), S("b")])


def test_r9_conversation_segmentation_matches_chat_roles() -> None:
    """Structured histories segment on `Chat` items wrapping system / real user messages."""
    history: list[ConversationMessage] = [
        Chat(S("s")),
        Chat(U("a")),
        AssistantToolCalls(None, (ToolCall("c1", "shell"),)),
        ToolResults((ToolResult("c1", "ok"),)),
        Chat(U("[Tool results] more")),
        Chat(U("b")),
    ]
    assert Segmentation(1, (1, 5)) == segment_conversation(history)
    assert 2 == count_conversation_turns(history)


def test_r1_segment_by_uses_the_given_predicates() -> None:
    """The generic helper needs only the two predicates."""
    items = ["s", "s", "x", "u", "x", "u"]
    assert Segmentation(2, (3, 5)) == segment_by(items, lambda i: i == "s", lambda i: i == "u")


@given(conversation_histories())
def test_r1_both_representations_count_the_same_turns(history: list[ConversationMessage]) -> None:
    """A structured history and its provider-facing rendering have the same turns."""
    assert count_conversation_turns(history) == count_turns(to_chat_messages(history))
