"""Issue 24 points 1-2: the decision of a summarised budget trim, on the pure state.

`run` asks its ``summarize`` callback between two decisions (ADR-0086); these tests give it
plain functions, so what they check is the decider's rule, not the store's."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.decider import (
    AppendMessage,
    PrepareRequest,
    SessionState,
    StartSession,
    SummaryOutcome,
    SummaryPlan,
    execute,
    plan_summary,
    run,
)
from turnledger.domain.events import (
    BreadcrumbInserted,
    DomainEvent,
    HistoryTrimmed,
    RequestPrepared,
    SummaryRefusal,
    SummaryRefused,
    TrimDecided,
    TurnsSummarized,
)
from turnledger.domain.messages import (
    BREADCRUMB_TEXT,
    SUMMARY_PREFIX,
    AssistantToolCalls,
    ChatMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.store.summaries import Summarizer, summary_outcome

NOW = datetime(2026, 12, 1, tzinfo=UTC)
OPENAI = ProviderProfile("openai", "gpt-4o", 128_000)


def _state(budget: int = 200, turns: int = 6, tools: bool = False) -> SessionState:
    state = SessionState()
    execute(state, StartSession(uuid.uuid4(), RuntimeProfile(max_context_tokens=budget),
                                (OPENAI,), Route("openai", "gpt-4o"), False, NOW))
    execute(state, AppendMessage(ChatMessage.system("Be brief."), NOW))
    for n in range(turns):
        execute(state, AppendMessage(ChatMessage.user(f"question {n} " * 6), NOW))
        if tools:
            execute(state, AppendMessage(
                AssistantToolCalls(None, (ToolCall(f"c{n}", "search", "{}"),)), NOW))
            execute(state, AppendMessage(
                ToolResults((ToolResult(f"c{n}", f"found {n}", "search"),)), NOW))
        execute(state, AppendMessage(ChatMessage.assistant(f"answer {n} " * 6), NOW))
    return state


def _prepare(state: SessionState, summarize: object = None) -> list[DomainEvent]:
    return run(state, PrepareRequest(0, 0, False, NOW), summarize).events  # type: ignore[arg-type]


def _answer(text: str, asked: list[SummaryPlan] | None = None) -> object:
    def summarize(plan: SummaryPlan) -> SummaryOutcome:
        if asked is not None:
            asked.append(plan)
        return SummaryOutcome(plan, "unit", text=text)
    return summarize


def test_i24_without_a_summarizer_the_trim_is_the_plain_one() -> None:
    """No summarizer: the same events as before issue 24 (DECISIONS 21)."""
    plain, other = _state(), _state()
    events = _prepare(plain)
    assert [TrimDecided, BreadcrumbInserted, HistoryTrimmed, RequestPrepared] == [
        type(e) for e in events]
    assert [type(e) for e in events] == [type(e) for e in _prepare(other, None)]
    assert BREADCRUMB_TEXT in [m.content for m in plain.chat_view()]


def test_i24_the_summarizer_gets_exactly_the_dropped_turns_and_the_summary_stands_in() -> None:
    state = _state()
    before = state.chat_view()
    asked: list[SummaryPlan] = []
    events = _prepare(state, _answer("they asked 0-2", asked))
    (plan,) = asked
    trim = next(e for e in events if isinstance(e, TrimDecided))
    summary = next(e for e in events if isinstance(e, TurnsSummarized))
    # The dropped turns: from the first turn to the one before the first kept, no system.
    cut = 1 + len(plan.messages)
    assert list(plan.messages) == before[1:cut]
    assert plan.previous is None
    assert (plan.first_position, plan.last_position) == (1, trim.first_kept_position - 1)
    assert (summary.first_position, summary.last_position, summary.covers_from) == (
        1, trim.first_kept_position - 1, 1)
    view = state.chat_view()
    assert "Be brief." == view[0].content
    assert SUMMARY_PREFIX + "they asked 0-2" == view[1].content
    assert view[1].synthetic
    assert BREADCRUMB_TEXT not in [m.content for m in view]
    assert state.chat_tokens() <= 200
    assert before[cut:] == view[2:]  # the kept turns, as they were
    assert "answer 5 " * 6 == view[-1].content  # the newest turn is kept


def test_i24_summaries_roll() -> None:
    """The next trim's summarizer is given the summary the view shows."""
    state = _state(turns=6)
    assert any(isinstance(e, TurnsSummarized) for e in _prepare(state, _answer("first")))
    for n in range(6, 10):
        execute(state, AppendMessage(ChatMessage.user(f"question {n} " * 6), NOW))
        execute(state, AppendMessage(ChatMessage.assistant(f"answer {n} " * 6), NOW))
    asked: list[SummaryPlan] = []
    events = _prepare(state, _answer("second", asked))
    assert "first" == asked[0].previous
    summary = next(e for e in events if isinstance(e, TurnsSummarized))
    assert summary.covers_from == 1 < summary.first_position
    assert SUMMARY_PREFIX + "second" == state.chat_view()[1].content


def _refused(events: list[DomainEvent]) -> SummaryRefused:
    assert not any(isinstance(e, TurnsSummarized) for e in events)
    assert any(isinstance(e, BreadcrumbInserted) for e in events)
    assert isinstance(events[-1], RequestPrepared)  # the request still goes out
    return next(e for e in events if isinstance(e, SummaryRefused))


def test_i24_an_oversize_summary_is_refused_and_the_breadcrumb_stands() -> None:
    state = _state()
    refused = _refused(_prepare(state, _answer("word " * 2000)))
    assert SummaryRefusal.OVERSIZE is refused.reason
    assert BREADCRUMB_TEXT in [m.content for m in state.chat_view()]


def test_i24_a_failed_summary_is_the_plain_trim_recorded_as_such() -> None:
    def failed(plan: SummaryPlan) -> SummaryOutcome:
        return SummaryOutcome(plan, "unit", refusal=SummaryRefusal.RAISED, detail="boom")

    plain, state = _state(), _state()
    plain_events = _prepare(plain)
    refused = _refused(_prepare(state, failed))
    assert (SummaryRefusal.RAISED, "boom", "unit") == (
        refused.reason, refused.detail, refused.summarizer)
    assert plain.chat_view() == state.chat_view()
    assert plain_events[0].first_kept_position == state.chat.start  # type: ignore[attr-defined]


def test_i24_a_summary_that_does_not_fit_drops_more_turns_and_is_asked_again() -> None:
    """The summary's tokens count: when kept turns + summary exceed the budget, the trim
    drops more and the summarizer is asked about the wider range."""
    state = _state(budget=260, turns=8)
    asked: list[SummaryPlan] = []
    text = "a summary of some length " * 6
    events = _prepare(state, _answer(text, asked))
    summary = next(e for e in events if isinstance(e, TurnsSummarized | SummaryRefused))
    assert 2 == len(asked)
    assert asked[1].kept_start > asked[0].kept_start
    assert isinstance(summary, TurnsSummarized)
    assert (summary.first_position, summary.last_position) == (
        asked[1].first_position, asked[1].last_position)
    assert state.chat_tokens() <= 260


def test_i24_a_range_with_an_unanswered_call_is_never_summarised() -> None:
    # A call of the oldest turn that no result answers: no summary may cover it.
    state2 = SessionState()
    execute(state2, StartSession(uuid.uuid4(), RuntimeProfile(max_context_tokens=150),
                                 (OPENAI,), Route("openai", "gpt-4o"), False, NOW))
    execute(state2, AppendMessage(ChatMessage.user("q " * 20), NOW))
    execute(state2, AppendMessage(AssistantToolCalls(None, (ToolCall("x", "search", "{}"),)),
                                  NOW))
    for n in range(4):
        execute(state2, AppendMessage(ChatMessage.user(f"more {n} " * 10), NOW))
        execute(state2, AppendMessage(ChatMessage.assistant(f"ok {n} " * 10), NOW))
    asked: list[SummaryPlan] = []
    events = _prepare(state2, _answer("never", asked))
    assert [] == asked
    assert SummaryRefusal.UNPAIRED is _refused(events).reason


def test_i24_nothing_to_drop_calls_no_summarizer() -> None:
    state = _state(budget=100_000)
    asked: list[SummaryPlan] = []
    events = _prepare(state, _answer("x", asked))
    assert ([], [RequestPrepared]) == (asked, [type(e) for e in events])
    assert plan_summary(state) is None


def test_i24_plans_with_tool_turns_pair_among_themselves() -> None:
    state = _state(budget=250, tools=True)
    plan = plan_summary(state)
    assert plan is not None
    assert plan.paired
    roles = [m.role for m in plan.messages]
    assert roles.count("tool") == roles.count("user") > 0  # each call with its result


def _plan() -> SummaryPlan:
    plan = plan_summary(_state())
    assert plan is not None
    return plan


def test_i24_the_store_side_call_turns_failures_into_refusals() -> None:
    plan = _plan()

    def boom(turns: Sequence[ChatMessage], previous: str | None) -> str:
        raise ValueError("no model")

    def slow(turns: Sequence[ChatMessage], previous: str | None) -> str:
        time.sleep(2)
        return "late"

    def empty(turns: Sequence[ChatMessage], previous: str | None) -> str:
        return "  "

    async def sleepy(turns: Sequence[ChatMessage], previous: str | None) -> str:
        await asyncio.sleep(0)
        return f"async {len(turns)}"

    raised = summary_outcome(Summarizer("boom", boom), plan)
    assert (SummaryRefusal.RAISED, "ValueError: no model") == (raised.refusal, raised.detail)
    started = time.monotonic()
    timed = summary_outcome(Summarizer("slow", slow, timeout=0.05), plan)
    assert SummaryRefusal.TIMED_OUT is timed.refusal
    assert time.monotonic() - started < 1.5  # the request is not held by the summarizer
    assert SummaryRefusal.INVALID is summary_outcome(Summarizer("e", empty), plan).refusal
    done = summary_outcome(Summarizer("async", sleepy, timeout=None), plan)
    assert f"async {len(plan.messages)}" == done.text
    assert "async" == done.summarizer


def test_i24_an_async_summarizer_runs_from_inside_an_event_loop() -> None:
    """A session used from a coroutine can be given a coroutine function, time limit or not."""
    plan = _plan()

    async def summarize(turns: Sequence[ChatMessage], previous: str | None) -> str:
        await asyncio.sleep(0)
        return "from a loop"

    async def main() -> list[str | None]:
        return [summary_outcome(Summarizer("a", summarize, timeout=t), plan).text
                for t in (None, 5.0)]

    assert ["from a loop", "from a loop"] == asyncio.run(main())
