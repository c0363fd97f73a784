"""Whole-turn trimming by examples (R3-R10, R31, R32, R34), and the row limit of R30."""


from __future__ import annotations

import pytest

from turnledger.domain.estimate import BREADCRUMB_TOKENS, estimate_history_tokens
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
from turnledger.domain.trimming import (
    DEFAULT_MAX_MESSAGE_ROWS,
    TrimResult,
    trim_conversation_to_recent_turns,
    trim_to_recent_message_rows,
    trim_to_recent_turn_count,
    trim_to_recent_turns,
    turns_to_drop_for_budget,
    turns_to_drop_for_count,
)
from turnledger.domain.window import CHAT_ROWS, Window, WindowIndex

S = ChatMessage.system
U = ChatMessage.user
A = ChatMessage.assistant
T = ChatMessage.tool
BC = ChatMessage.breadcrumb()

# Costs: S("sys") 5, each 40-byte message 14, U("e") 5, A("f") 5; total 71.
SYS = S("sys")
TURN1 = [U("a" * 40), A("b" * 40)]
TURN2 = [U("c" * 40), A("d" * 40)]
TURN3 = [U("e"), A("f")]
HISTORY = [SYS, *TURN1, *TURN2, *TURN3]


def _untouched(history: list[ChatMessage], turns: int) -> TrimResult[ChatMessage]:
    tokens = estimate_history_tokens(history)
    return TrimResult(tuple(history), 0, 0, turns, tokens, tokens, False)


# --- R7: token budget ----------------------------------------------------------------------------


def test_r7_history_within_budget_is_untouched() -> None:
    """71 tokens fit a budget of 71: nothing changes."""
    assert _untouched(HISTORY, 3) == trim_to_recent_turns(HISTORY, 71)


def test_r7_drops_the_fewest_oldest_turns_that_fit() -> None:
    """Budget 60: dropping turn 1 gives 5 + 17 + 28 + 10 = 60, which fits."""
    expected = TrimResult((SYS, BC, *TURN2, *TURN3), 2, 1, 2, 71, 60, True)
    assert expected == trim_to_recent_turns(HISTORY, 60)


def test_r7_the_breadcrumb_counts_against_the_budget() -> None:
    """Budget 59: one dropped turn + breadcrumb is 60 > 59, so two turns go."""
    expected = TrimResult((SYS, BC, *TURN3), 4, 2, 1, 71, 32, True)
    assert expected == trim_to_recent_turns(HISTORY, 59)


def test_r34_without_breadcrumb_the_result_is_cheaper() -> None:
    """Budget 59 with no breadcrumb: dropping turn 1 gives 43, which fits."""
    expected = TrimResult((SYS, *TURN2, *TURN3), 2, 1, 2, 71, 43, True)
    assert expected == trim_to_recent_turns(HISTORY, 59, breadcrumb=False)


def test_r6_newest_turn_kept_even_over_budget() -> None:
    """Budget 10 cannot be met: the newest turn is kept whole anyway."""
    expected = TrimResult((SYS, BC, *TURN3), 4, 2, 1, 71, 32, True)
    assert expected == trim_to_recent_turns(HISTORY, 10)


def test_r6_oversized_newest_turn_is_kept_whole() -> None:
    """A newest turn far above the budget is neither cut nor dropped."""
    big = [U("q"), A("x" * 4000), T("y" * 4000)]
    history = [SYS, *TURN1, *big]
    result = trim_to_recent_turns(history, 100)
    assert (SYS, BC, *big) == result.history
    assert 1 == result.kept_turns


def test_r7_zero_budget_disables_trimming() -> None:
    """budget_tokens == 0 returns the history untouched, however large."""
    history = [SYS, *TURN1, U("x" * 10_000), *TURN3]
    assert _untouched(history, 3) == trim_to_recent_turns(history, 0)


def test_r7_negative_budget_raises() -> None:
    """A negative budget is a caller error naming the argument."""
    with pytest.raises(ValueError, match="budget_tokens"):
        trim_to_recent_turns(HISTORY, -1)


def test_r7_tokens_after_is_the_estimate_of_the_result() -> None:
    """tokens_after equals estimate_history_tokens of the kept history."""
    result = trim_to_recent_turns(HISTORY, 60)
    assert estimate_history_tokens(result.history) == result.tokens_after


def test_r3_tool_exchange_dropped_or_kept_with_its_turn() -> None:
    """The turn with a tool call and its result goes as a whole."""
    call = ToolCall("c1", "shell")
    tool_turn = [
        U("run"),
        A(assistant_envelope(None, [call])),
        T(tool_envelope("c1", "z" * 400), ["/shot.png"]),
        A("done"),
    ]
    history = [SYS, *tool_turn, *TURN3]
    result = trim_to_recent_turns(history, 50)
    assert (SYS, BC, *TURN3) == result.history
    assert 4 == result.dropped_messages


def test_r22_old_tool_attachments_do_not_count_before_or_after() -> None:
    """An older turn's tool attachments are free: the estimate only sees their bytes."""
    history = [SYS, U("q"), T("out", ["/a.png"]), *TURN3]
    assert 5 + 5 + 5 + 10 == trim_to_recent_turns(history, 100).tokens_before


# --- R8 / R29: turn count on ChatMessage ---------------------------------------------------------


def test_r8_keeps_the_newest_turns() -> None:
    """max_turns=2 keeps turns 2 and 3."""
    expected = TrimResult((SYS, BC, *TURN2, *TURN3), 2, 1, 2, 71, 60, True)
    assert expected == trim_to_recent_turn_count(HISTORY, 2)


def test_r8_within_limit_is_untouched() -> None:
    """Three turns fit max_turns=3."""
    assert _untouched(HISTORY, 3) == trim_to_recent_turn_count(HISTORY, 3)


def test_r29_zero_keeps_the_last_complete_turn() -> None:
    """max_turns=0 still keeps the newest turn (R6)."""
    assert (SYS, BC, *TURN3) == trim_to_recent_turn_count(HISTORY, 0).history


def test_r8_negative_limit_raises() -> None:
    """A negative turn limit is a caller error naming the argument."""
    with pytest.raises(ValueError, match="max_turns"):
        trim_to_recent_turn_count(HISTORY, -1)


def test_r2_tool_results_carrier_is_dropped_with_its_turn() -> None:
    """A "[Tool results]" carrier continues the turn, so it goes with it."""
    history = [U("a"), A("x"), U("[Tool results] r"), A("y"), U("b"), A("z")]
    result = trim_to_recent_turn_count(history, 1)
    assert (BC, U("b"), A("z")) == result.history
    assert (4, 1, 1) == (result.dropped_messages, result.dropped_turns, result.kept_turns)


def test_r4_leading_systems_kept_and_never_counted() -> None:
    """Leading systems survive and are not dropped messages."""
    history = [S("s1"), S("s2"), U("a"), U("b")]
    result = trim_to_recent_turn_count(history, 1)
    assert (S("s1"), S("s2"), BC, U("b")) == result.history
    assert 1 == result.dropped_messages


def test_r9_late_system_in_dropped_region_moves_behind_leading_ones() -> None:
    """A late system message of a dropped turn is kept, after the leading systems."""
    history = [S("lead"), U("a"), S("late"), A("x"), U("b"), S("kept in place"), A("y")]
    result = trim_to_recent_turn_count(history, 1)
    assert (S("lead"), S("late"), BC, U("b"), S("kept in place"), A("y")) == result.history
    assert 2 == result.dropped_messages


def test_r7_late_system_cost_is_kept_in_the_budget() -> None:
    """A moved late system still counts: one dropped turn gives 67, two give 5 + 7 + 17 + 10."""
    history = [SYS, U("a" * 40), S("late text"), *TURN2, *TURN3]  # late system: 9 bytes -> 7
    result = trim_to_recent_turns(history, 39)
    assert (SYS, S("late text"), BC, *TURN3) == result.history
    assert 39 == result.tokens_after
    assert 3 == result.dropped_messages


def test_r10_preamble_is_dropped_with_the_first_turn() -> None:
    """Messages between the leading systems and the first turn are dropped and counted."""
    history = [SYS, A("hello"), U("a"), U("b")]
    result = trim_to_recent_turn_count(history, 1)
    assert (SYS, BC, U("b")) == result.history
    assert 2 == result.dropped_messages


# --- R5 / R10: no trim ---------------------------------------------------------------------------


def test_r10_no_user_message_is_never_trimmed() -> None:
    """Without a real user message there is no turn to drop."""
    history = [SYS, A("x" * 400), T("y" * 400, ["/a.png"])]
    assert _untouched(history, 0) == trim_to_recent_turns(history, 1)
    assert _untouched(history, 0) == trim_to_recent_turn_count(history, 0)


def test_r10_single_turn_is_never_trimmed() -> None:
    """One turn over the budget stays as it is (no breadcrumb either)."""
    history = [SYS, A("pre"), U("x" * 400), A("y")]
    assert _untouched(history, 1) == trim_to_recent_turns(history, 1)
    assert _untouched(history, 1) == trim_to_recent_turn_count(history, 0)


def test_r5_untrimmed_history_keeps_order_and_structure() -> None:
    """Late systems and an earlier breadcrumb stay exactly where they are."""
    history = [SYS, BC, U("a"), S("late"), A("x"), U("b")]
    assert _untouched(history, 2) == trim_to_recent_turn_count(history, 2)
    assert _untouched(history, 2) == trim_to_recent_turns(history, 1000)


def test_r10_empty_history() -> None:
    """An empty history is returned as it is."""
    assert TrimResult((), 0, 0, 0, 0, 0, False) == trim_to_recent_turns([], 5)


# --- R31 / R32: the breadcrumb -------------------------------------------------------------------


def test_r31_breadcrumbs_never_stack() -> None:
    """An earlier breadcrumb is replaced by the new one, not kept beside it."""
    history = [SYS, BC, U("a"), A("x"), U("b"), A("y")]
    result = trim_to_recent_turn_count(history, 1)
    assert (SYS, BC, U("b"), A("y")) == result.history
    assert 1 == sum(m.synthetic for m in result.history)


def test_r32_replaced_breadcrumb_is_not_a_dropped_message() -> None:
    """dropped_messages counts the two real messages only."""
    history = [SYS, BC, U("a"), A("x"), U("b"), A("y")]
    assert 2 == trim_to_recent_turn_count(history, 1).dropped_messages


def test_r31_real_user_message_with_breadcrumb_text_is_a_turn() -> None:
    """A real user message whose text equals the breadcrumb text is a turn, and is dropped."""
    real = U(BREADCRUMB_TEXT)
    history = [SYS, real, A("x"), U("b")]
    result = trim_to_recent_turn_count(history, 1)
    assert (SYS, BC, U("b")) == result.history
    assert (2, 1) == (result.dropped_messages, result.dropped_turns)
    assert _untouched(history, 2) == trim_to_recent_turn_count(history, 2)


def test_r31_retrimming_replaces_the_breadcrumb_in_the_same_place() -> None:
    """A second trim of a trimmed history still has one breadcrumb, after the systems."""
    first = trim_to_recent_turn_count([S("lead"), U("a"), S("late"), U("b"), U("c")], 2)
    second = trim_to_recent_turn_count(first.history, 1)
    assert (S("lead"), S("late"), BC, U("c")) == second.history
    assert 1 == second.dropped_messages


def test_r34_no_breadcrumb_when_disabled() -> None:
    """breadcrumb=False (legacy loop) inserts none and still removes an earlier one."""
    history = [SYS, BC, U("a"), U("b")]
    assert (SYS, U("b")) == trim_to_recent_turn_count(history, 1, breadcrumb=False).history


# --- R9: structured history ----------------------------------------------------------------------


def _conversation() -> list[ConversationMessage]:
    return [
        Chat(S("lead")),
        Chat(U("first")),
        AssistantToolCalls("checking", (ToolCall("c1", "shell"), ToolCall("c2", "read"))),
        ToolResults((ToolResult("c1", "ok", "shell"), ToolResult("c2", "x" * 100, "read"))),
        Chat(S("late")),
        Chat(U("[Tool results] more")),
        Chat(A("answer")),
        Chat(U("second")),
        Chat(A("reply")),
    ]


def test_r9_conversation_keeps_newest_turns_and_late_systems() -> None:
    """The first turn (6 items, one a late system) is dropped; the late system moves up."""
    history = _conversation()
    result = trim_conversation_to_recent_turns(history, 1)
    expected_history = (Chat(S("lead")), Chat(S("late")), Chat(BC), *history[7:])
    assert expected_history == result.history
    assert (5, 1, 1, True) == (
        result.dropped_messages,
        result.dropped_turns,
        result.kept_turns,
        result.trimmed,
    )


def test_r9_conversation_tokens_are_those_of_the_chat_rendering() -> None:
    """tokens_before/after are the estimates of to_chat_messages of input and result."""
    history = _conversation()
    result = trim_conversation_to_recent_turns(history, 0)
    assert estimate_history_tokens(to_chat_messages(history)) == result.tokens_before
    assert estimate_history_tokens(to_chat_messages(result.history)) == result.tokens_after
    assert 5 + 5 + BREADCRUMB_TOKENS + 6 + 6 == result.tokens_after


def test_r9_conversation_within_limit_is_identical() -> None:
    """Two turns fit max_turns=2: the structured history comes back identical."""
    history = _conversation()
    result = trim_conversation_to_recent_turns(history, 2)
    assert (tuple(history), False, 0, 2) == (
        result.history,
        result.trimmed,
        result.dropped_messages,
        result.kept_turns,
    )


def test_r9_conversation_breadcrumb_never_stacks() -> None:
    """An earlier `Chat(breadcrumb)` is replaced, not counted."""
    history: list[ConversationMessage] = [Chat(BC), Chat(U("a")), Chat(U("b"))]
    result = trim_conversation_to_recent_turns(history, 1)
    assert ((Chat(BC), Chat(U("b"))), 1) == (result.history, result.dropped_messages)


def test_r9_conversation_negative_limit_raises() -> None:
    """A negative turn limit is a caller error naming the argument."""
    with pytest.raises(ValueError, match="max_turns"):
        trim_conversation_to_recent_turns(_conversation(), -3)


# --- the reusable rules --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("turns", "max_turns", "expected"), [(0, 0, 0), (1, 0, 0), (5, 0, 4), (5, 2, 3), (5, 9, 0)]
)
def test_r29_turns_to_drop_for_count(turns: int, max_turns: int, expected: int) -> None:
    """Keep max(max_turns, 1) turns."""
    assert expected == turns_to_drop_for_count(turns, max_turns)


def test_r7_turns_to_drop_for_budget_finds_the_first_fit() -> None:
    """With costs 100, 80, 60, 40, 20 for k = 0..4, budget 50 gives k = 3."""
    costs = [100, 80, 60, 40, 20]
    assert 3 == turns_to_drop_for_budget(5, costs.__getitem__, 50)
    assert 4 == turns_to_drop_for_budget(5, costs.__getitem__, 10)  # none fits: keep one turn
    assert 0 == turns_to_drop_for_budget(5, costs.__getitem__, 100)
    assert 0 == turns_to_drop_for_budget(5, costs.__getitem__, 0)
    assert 0 == turns_to_drop_for_budget(1, costs.__getitem__, 1)


def test_r7_tokens_after_dropping_matches_the_built_history() -> None:
    """The O(1) prefix-sum formula agrees with estimating the trimmed history."""
    history = [SYS, BC, U("a" * 40), S("late"), *TURN2, *TURN3]
    index = WindowIndex.of(CHAT_ROWS, history)
    starts = index.turns_from(0)
    for k in (1, 2):
        built = trim_to_recent_turn_count(history, 3 - k).history
        assert estimate_history_tokens(built) == index.tokens(Window(starts[k], breadcrumb=True))


# --- R30: the channel sender cache counts message rows -------------------------------------------


def _chat_turns(count: int) -> list[ChatMessage]:
    return [m for i in range(count) for m in (U(f"q{i}"), A(f"a{i}"))]


def test_r30_zero_means_the_default_row_limit_not_the_newest_turn() -> None:
    """0 rows means the default, 50 rows; 0 turns keeps only the newest turn (R29)."""
    history = [SYS, *_chat_turns(40)]
    assert 50 == DEFAULT_MAX_MESSAGE_ROWS
    assert tuple(history[-50:]) == trim_to_recent_message_rows(history, 0)
    assert (SYS, BC, U("q39"), A("a39")) == trim_to_recent_turn_count(history, 0).history


def test_r30_tool_rows_each_take_a_slot() -> None:
    """A tool call and its result are two rows, and the cut may fall between them."""
    call = A(assistant_envelope(None, (ToolCall("c1", "shell"),)))
    result = T(tool_envelope("c1", "out"))
    history = [SYS, U("first"), A("ok"), U("second"), call, result, A("done")]
    assert (result, A("done")) == trim_to_recent_message_rows(history, 2)
    assert (SYS, BC, U("second"), call, result, A("done")) == trim_to_recent_turn_count(
        history, 1
    ).history


def test_r30_system_rows_count_and_are_not_kept_ahead() -> None:
    """System rows take slots and are dropped like any row; the turn limit keeps them (R4, R9)."""
    history = [SYS, U("first"), S("late"), A("ok"), U("second"), A("done")]
    assert (S("late"), A("ok"), U("second"), A("done")) == trim_to_recent_message_rows(history, 4)
    assert (SYS, S("late"), BC, U("second"), A("done")) == trim_to_recent_turn_count(
        history, 1
    ).history


def test_r30_a_history_within_the_limit_is_unchanged() -> None:
    """Fewer rows than the limit: the same rows, in order, breadcrumbs included."""
    history = [SYS, BC, *TURN3]
    assert tuple(history) == trim_to_recent_message_rows(history, 4)


def test_r30_a_negative_row_limit_is_an_error() -> None:
    """A negative limit is a ValueError, a non-int a TypeError, as for the turn limit."""
    with pytest.raises(ValueError, match="max_rows"):
        trim_to_recent_message_rows(HISTORY, -1)
    with pytest.raises(TypeError, match="max_rows"):
        trim_to_recent_message_rows(HISTORY, True)
