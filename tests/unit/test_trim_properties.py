"""Trimming invariants for every history (R3, R5, R6, R7-R10, R31, R32), with Hypothesis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.naive import naive_trim_to_recent_turns
from tests.strategies import chat_histories, conversation_histories
from turnledger.domain.estimate import estimate_history_tokens
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolResults,
    parse_assistant_envelope,
    parse_tool_envelope,
    to_chat_messages,
)
from turnledger.domain.sweep import sweep_conversation_orphans, sweep_orphans
from turnledger.domain.trimming import (
    TrimResult,
    trim_conversation_to_recent_turns,
    trim_to_recent_turn_count,
    trim_to_recent_turns,
)
from turnledger.domain.turns import segment, segment_conversation

T = TypeVar("T")

limits = st.integers(min_value=0, max_value=8)


# --- helpers -------------------------------------------------------------------------------------


def _chat_pairs(history: Sequence[ChatMessage]) -> tuple[set[str], set[str]]:
    """(ids of assistant tool calls, ids of tool results) of a provider-facing history."""
    calls: set[str] = set()
    results: set[str] = set()
    for message in history:
        if message.role == "assistant" and (envelope := parse_assistant_envelope(message.content)):
            calls.update(call.id for call in envelope[1])
        elif message.role == "tool" and (parsed := parse_tool_envelope(message.content)):
            results.add(parsed[0])
    return calls, results


def _conversation_pairs(history: Sequence[ConversationMessage]) -> tuple[set[str], set[str]]:
    calls: set[str] = set()
    results: set[str] = set()
    for item in history:
        if isinstance(item, AssistantToolCalls):
            calls.update(call.id for call in item.tool_calls)
        elif isinstance(item, ToolResults):
            results.update(r.tool_call_id for r in item.results)
    return calls, results


def _as_chat(item: object) -> ChatMessage | None:
    message = item.message if isinstance(item, Chat) else item
    return message if isinstance(message, ChatMessage) else None


def _is_crumb(item: object) -> bool:
    message = _as_chat(item)
    return message is not None and message.synthetic


def _is_system(item: object) -> bool:
    message = _as_chat(item)
    return message is not None and message.role == "system"


def _is_subsequence(small: Sequence[object], big: Sequence[object]) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def _check_common(
    history: Sequence[T],
    result: TrimResult[T],
    *,
    last_turn_start: int | None,
    turn_count: int,
    breadcrumb: bool,
) -> None:
    """Invariants shared by the three trimming functions."""
    out = result.history
    # R31: at most one breadcrumb (the generated inputs hold at most one).
    assert sum(map(_is_crumb, out)) <= 1
    # R10: the counters agree with each other.
    assert turn_count == result.kept_turns + result.dropped_turns
    assert result.trimmed == (result.dropped_turns > 0)
    if not result.trimmed:
        # R5: untouched means identical.
        assert (tuple(history), 0, result.tokens_before) == (
            out,
            result.dropped_messages,
            result.tokens_after,
        )
        return
    # R6: the newest turn is kept whole, at the end.
    assert last_turn_start is not None
    newest = tuple(history[last_turn_start:])
    assert newest == out[len(out) - len(newest) :]
    assert result.kept_turns >= 1
    # R32: nothing invented or reordered; dropped_messages counts real messages only.
    real_in = [m for m in history if not _is_crumb(m)]
    real_out = [m for m in out if not _is_crumb(m)]
    assert _is_subsequence(real_out, real_in)
    assert len(real_in) == len(real_out) + result.dropped_messages
    # R31: the breadcrumb (when asked for) sits right after the system messages of the result.
    crumbs = [i for i, m in enumerate(out) if _is_crumb(m)]
    if breadcrumb:
        assert len(crumbs) == 1
        assert all(map(_is_system, out[: crumbs[0]]))
    else:
        assert crumbs == []


# --- trim_to_recent_turns (R7) -------------------------------------------------------------------


@st.composite
def _history_and_budget(draw: st.DrawFn) -> tuple[list[ChatMessage], int]:
    history = draw(chat_histories())
    estimate = estimate_history_tokens(history)
    budget = draw(st.integers(min_value=0, max_value=estimate + 20))
    return history, budget


@given(_history_and_budget(), st.booleans())
def test_r7_budget_trim_invariants(case: tuple[list[ChatMessage], int], breadcrumb: bool) -> None:
    """Pairs intact, newest turn kept, fewest turns dropped, identical if untouched, idempotent."""
    history, budget = case
    seg = segment(history)
    result = trim_to_recent_turns(history, budget, breadcrumb=breadcrumb)
    _check_common(
        history,
        result,
        last_turn_start=seg.last_turn_start,
        turn_count=seg.turn_count,
        breadcrumb=breadcrumb,
    )
    # R3: no tool call separated from its result.
    calls, results = _chat_pairs(result.history)
    assert calls == results
    # R20: the reported numbers are the estimates of input and output.
    assert estimate_history_tokens(history) == result.tokens_before
    assert estimate_history_tokens(result.history) == result.tokens_after
    if result.trimmed:
        # R7: it fits, unless only the newest turn is left (R6) ...
        assert result.tokens_after <= budget or result.kept_turns == 1
        # ... and keeping one more old turn would not fit.
        if result.dropped_turns == 1:
            assert result.tokens_before > budget
        else:
            one_more = trim_to_recent_turn_count(
                history, result.kept_turns + 1, breadcrumb=breadcrumb
            )
            assert one_more.tokens_after > budget
    elif budget > 0 and seg.turn_count > 1:
        assert result.tokens_before <= budget
    # Idempotent: the result already satisfies the same budget.
    again = trim_to_recent_turns(result.history, budget, breadcrumb=breadcrumb)
    assert (result.history, False) == (again.history, again.trimmed)


@given(_history_and_budget(), st.booleans())
def test_r7_budget_trim_matches_the_naive_algorithm(
    case: tuple[list[ChatMessage], int], breadcrumb: bool
) -> None:
    """The prefix-sum trim gives exactly the naive re-estimating trim's result."""
    history, budget = case
    expected = naive_trim_to_recent_turns(history, budget, breadcrumb=breadcrumb)
    assert expected == trim_to_recent_turns(history, budget, breadcrumb=breadcrumb)


# --- trim_to_recent_turn_count (R8) --------------------------------------------------------------


@given(chat_histories(), limits, st.booleans())
def test_r8_turn_count_trim_invariants(
    history: list[ChatMessage], max_turns: int, breadcrumb: bool
) -> None:
    """Keeps exactly the newest max(max_turns, 1) turns, pairs intact, idempotent."""
    seg = segment(history)
    result = trim_to_recent_turn_count(history, max_turns, breadcrumb=breadcrumb)
    _check_common(
        history,
        result,
        last_turn_start=seg.last_turn_start,
        turn_count=seg.turn_count,
        breadcrumb=breadcrumb,
    )
    calls, results = _chat_pairs(result.history)
    assert calls == results
    assert min(seg.turn_count, max(max_turns, 1)) == result.kept_turns
    assert result.kept_turns == segment(result.history).turn_count
    assert estimate_history_tokens(result.history) == result.tokens_after
    again = trim_to_recent_turn_count(result.history, max_turns, breadcrumb=breadcrumb)
    assert (result.history, False) == (again.history, again.trimmed)


# --- trim_conversation_to_recent_turns (R9) ------------------------------------------------------


@given(conversation_histories(), limits, st.booleans())
def test_r9_conversation_trim_invariants(
    history: list[ConversationMessage], max_turns: int, breadcrumb: bool
) -> None:
    """Same invariants on the structured history, and the same cut as the chat rendering."""
    seg = segment_conversation(history)
    result = trim_conversation_to_recent_turns(history, max_turns, breadcrumb=breadcrumb)
    _check_common(
        history,
        result,
        last_turn_start=seg.last_turn_start,
        turn_count=seg.turn_count,
        breadcrumb=breadcrumb,
    )
    calls, results = _conversation_pairs(result.history)
    assert calls == results
    assert min(seg.turn_count, max(max_turns, 1)) == result.kept_turns
    assert estimate_history_tokens(to_chat_messages(result.history)) == result.tokens_after
    again = trim_conversation_to_recent_turns(result.history, max_turns, breadcrumb=breadcrumb)
    assert (result.history, False) == (again.history, again.trimmed)
    # R9 and R8 agree: trimming then rendering equals rendering then trimming.
    chat = trim_to_recent_turn_count(to_chat_messages(history), max_turns, breadcrumb=breadcrumb)
    assert chat.history == tuple(to_chat_messages(result.history))
    assert (chat.tokens_before, chat.tokens_after, chat.kept_turns) == (
        result.tokens_before,
        result.tokens_after,
        result.kept_turns,
    )


@given(_history_and_budget(), limits)
def test_r37_sweep_finds_nothing_after_whole_turn_trimming(
    case: tuple[list[ChatMessage], int], max_turns: int
) -> None:
    """On a consistent history trimmed by whole turns (budget, then count), the sweep is a no-op."""
    history, budget = case
    trimmed = trim_to_recent_turns(history, budget).history
    counted = trim_to_recent_turn_count(list(trimmed), max_turns).history
    for candidate in (trimmed, counted):
        swept = sweep_orphans(candidate)
        found = (swept.removed, swept.orphan_tool_call_ids, swept.history)
        assert (0, (), tuple(candidate)) == found


@given(conversation_histories(), limits)
def test_r37_conversation_sweep_finds_nothing_after_turn_limit(
    history: list[ConversationMessage], max_turns: int
) -> None:
    """The structured sweep finds nothing on a structured history trimmed to a turn limit."""
    trimmed = trim_conversation_to_recent_turns(history, max_turns).history
    swept = sweep_conversation_orphans(trimmed)
    assert (0, (), tuple(trimmed)) == (swept.removed, swept.orphan_tool_call_ids, swept.history)
