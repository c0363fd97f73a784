"""Every event type through every consumer of events (issue 20, point 4; STYLE 19).

One session, recorded through the public API on an encrypted SQLite store, holds every member
of `Event`: tool turns that trim both views (breadcrumbs, notices), requests, a route switch,
an overflow recovered, an orphan swept on restore, a pop, a clear, a rejected request, an
overflow nothing could recover, and at last its erasure (`Store.forget`). Each consumer (the
views through `evolve`, the counters, the analytics tables, the timeline, what-if, verify, the
HTML report, the exported record and the summarised items) is then shown each event, and must
both survive it and show it where it should: a consumer that swallowed an event type, or a new
type no consumer was taught, fails here.

The other tests say why a fold cannot miss a type silently: the union is what the codec
registers, and a class outside it is refused, never ignored.
"""

from __future__ import annotations

import contextlib
import html
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, get_args

import attrs
import pytest

import turnledger as tl
from tests.extras import need
from turnledger.audit import views_at, what_if
from turnledger.domain import events as events_module
from turnledger.domain.budget import Compaction, ProviderProfile, Route, RuntimeProfile
from turnledger.domain.decider import SessionState, evolve
from turnledger.domain.estimate import BREADCRUMB_TOKENS
from turnledger.domain.events import (
    EVENT_TYPES,
    BreadcrumbInserted,
    DomainEvent,
    Event,
    HistoryCleared,
    HistoryTrimmed,
    MessageAppended,
    MessagePopped,
    OrphansSwept,
    OverflowRecovered,
    OverflowReported,
    OverflowUnrecoverable,
    RequestPrepared,
    RequestRejected,
    RouteSelected,
    SessionForgotten,
    SessionStarted,
    SummaryRefused,
    ToolCallsRestored,
    ToolResultsCleared,
    TrimDecided,
    TurnsSummarized,
    UsageRecorded,
    View,
    as_event,
)
from turnledger.domain.messages import (
    BREADCRUMB_TEXT,
    AssistantToolCalls,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    to_chat_messages,
)
from turnledger.domain.state import collect_summarised
from turnledger.projections.analytics import COUNTER_COLUMNS, Analytics
from turnledger.projections.counters import Counters, Tally, event_time, fold_counters
from turnledger.replay.audit import VerifyReport, verify
from turnledger.replay.report import report
from turnledger.replay.timeline import state_at, summarize, timeline
from turnledger.replay.transcripts import record_of
from turnledger.replay.whatif import replay_what_if
from turnledger.store.codec import default_codec, topic_for
from turnledger.store.keys import new_key_text

OPENAI = ProviderProfile("openai", "gpt-4o", 128_000)
OPAQUE = ProviderProfile("opaque", "mystery")  # capacity unknown: the window is the budget
PROFILE = RuntimeProfile(  # clearing opted in (issue 24): the recording holds it too
    max_context_tokens=700, max_history_messages=4,
    compaction=Compaction(clear_tool_results=True, keep_tool_result_turns=2),
)
TOOLS = ({"name": "search", "parameters": {"type": "object"}},)


# --- the recording ----------------------------------------------------------------------------

def _prepare(session: tl.Session) -> None:
    with contextlib.suppress(tl.ContextWindowExceeded):  # recorded as RequestRejected (R18)
        session.prepare_request(TOOLS, ("Be brief.",))


def _summarizer() -> tl.Summarizer:
    """Summarises the first trim it is asked, raises for the second (issue 24): the recording
    holds a `TurnsSummarized` and a `SummaryRefused`."""
    calls: list[int] = []

    def summarize(turns: Sequence[ChatMessage], previous: str | None) -> str:
        calls.append(len(turns))
        if len(calls) == 2:
            raise RuntimeError("the summary model is down")
        return f"{len(turns)} messages about why, answered by search"

    return tl.Summarizer("every-event", summarize)


def _record(store: tl.Store) -> tl.Session:
    """A session that records every member of `Event` but `SessionForgotten`."""
    session = store.start_session(PROFILE, (OPENAI, OPAQUE), Route("openai", "gpt-4o"))
    session.summarizer = _summarizer()
    session.append(ChatMessage.system("You are a careful agent."))
    for n in range(5):  # trims of both views, each with its breadcrumb and notice (R31-R33)
        session.append(ChatMessage.user(f"question {n}: " + "why " * 40))
        _prepare(session)
        session.append(AssistantToolCalls("Let me look.", (ToolCall(f"call_{n}", "search", "{}"),)))
        session.append(ToolResults((ToolResult(f"call_{n}", "result " * 80, "search"),)))
        _prepare(session)
        session.append(ChatMessage.assistant(f"answer {n}: " + "because " * 15))
    session.record_usage({"input_tokens": 90, "cache_read_input_tokens": 400,  # issue 35
                          "cache_creation_input_tokens": 30, "output_tokens": 25})
    session.select_route(Route("opaque", "mystery"), reason="classifier_hint")
    session.recover_from_overflow("maximum context length exceeded")  # R25: recovered
    session.append(AssistantToolCalls(None, (ToolCall("call_x", "search", "{}"),)))
    session = store.restore(session.id)  # the dangling call is swept (E5, R36) ...
    session.append(ToolResults((ToolResult("call_x", "late", "search"),)))  # ... and back (E5)
    session.append(ChatMessage.user("oops"))
    session.pop()
    session.clear()
    session.append(ChatMessage.user("long " * 900))  # one turn larger than the window
    _prepare(session)  # rejected (R18)
    session.recover_from_overflow("prompt is too long")  # nothing to trim: unrecoverable
    return session


@attrs.frozen
class Recorded:
    """The session's events and what the store-bound consumers made of them, step by step."""

    events: tuple[Event, ...]
    stats: tuple[dict[str, Any] | None, ...]
    """The session's ``tl_session_stats`` row after each notification (index 0: none yet)."""
    selections: tuple[dict[tuple[str, str], int], ...]
    """``tl_route_stats`` selections per route, likewise."""
    verified: VerifyReport
    """`verify` before the forget: it folds every readable event."""
    verified_forgotten: VerifyReport
    """`verify` after it: the chain alone, which must end with `SessionForgotten`."""
    outputs: dict[str, Any] = attrs.field(factory=dict, eq=False)
    """What a consumer made of the whole session, computed by the first test that needs it."""

    def once(self, name: str, make: Callable[[], Any]) -> Any:
        if name not in self.outputs:
            self.outputs[name] = make()
        return self.outputs[name]

    def of(self, kind: type[DomainEvent]) -> list[Event]:
        found = [event for event in self.events if type(event) is kind]
        assert found, f"the recording holds no {kind.__name__}"
        return found


def _step(analytics: Analytics) -> tuple[dict[str, Any] | None, dict[tuple[str, str], int]]:
    rows = analytics.session_stats()
    selections = {(r["provider"], r["model"]): r["selections"] for r in analytics.route_stats()}
    return (rows[0] if rows else None), selections


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    need("cryptography")  # `forget` erases by destroying the session's data key
    path = tmp_path_factory.mktemp("i20") / "every.db"
    with tl.open_store(f"sqlite:///{path}", key=new_key_text()) as store:
        session = _record(store)
        readable = [as_event(event) for event in store.events_of(session.id)]
        verified = verify(store.backend)
        with Analytics(store.backend) as analytics:
            steps = [_step(analytics)]
            while analytics.catch_up(stop_after=1):
                steps.append(_step(analytics))
            assert len(readable) + 1 == len(steps)
            store.forget(session.id, reason="erasure request")
            assert 1 == analytics.catch_up(stop_after=1)
            steps.append(_step(analytics))
        # The erasure record is stored unencrypted: the notification log still reads it.
        forgotten = [as_event(event) for _, event in store.backend.read_notifications(
            1, 1000, event_types=(SessionForgotten,)
        )]
        verified_forgotten = verify(store.backend)
    return Recorded(
        (*readable, *forgotten),
        tuple(step[0] for step in steps),
        tuple(step[1] for step in steps),
        verified,
        verified_forgotten,
    )


# --- what each consumer must show -------------------------------------------------------------

def _view(state: SessionState, view: View) -> list[ChatMessage]:
    if view is View.CHAT:
        return state.chat_view()
    return to_chat_messages(state.conversation_view())


def _breadcrumbs(messages: Sequence[ChatMessage]) -> int:
    return sum(BREADCRUMB_TEXT in (m.content or "") for m in messages)


def _check_views(recorded: Recorded, event: Event) -> None:  # noqa: C901  # a case per event
    """`evolve` (through `state_at`): each event changes the views as it says, or not at all."""
    v = event.originator_version
    before, after = state_at(recorded.events, v - 1), state_at(recorded.events, v)
    assert v == after.version
    chat, conversation = after.chat_view(), after.conversation_view()
    unchanged = (before.chat_view(), before.conversation_view()) == (chat, conversation)
    match event:
        case SessionStarted():
            assert (None, event.originator_id) == (before.session_id, after.session_id)
            assert (event.profile, event.route) == (after.profile, after.resolved.route)
        case MessageAppended():
            assert (event.position + 1, event.message) == (
                after.next_position, conversation[-1]
            )
        case RouteSelected():
            assert event.route == after.resolved.route
            assert unchanged
        case TrimDecided():
            assert len(_view(after, event.view)) < len(_view(before, event.view))
            assert 0 == _breadcrumbs(_view(after, event.view))
        case BreadcrumbInserted():
            assert len(_view(before, event.view)) + 1 == len(_view(after, event.view))
            assert (0, 1) == (_breadcrumbs(_view(before, event.view)),
                              _breadcrumbs(_view(after, event.view)))
        case OrphansSwept():
            assert len(before.conversation_view()) - event.removed == len(conversation)
        case ToolCallsRestored():  # the swept calls are shown again, before their result
            shown = before.conversation_view()
            assert [item for _, item in event.restored if item not in shown]
            assert all(item in conversation[:-1] for _, item in event.restored)
        case MessagePopped():
            assert before.conversation_view() == [*conversation, event.message]
        case HistoryCleared():
            assert ([], []) == (chat, conversation)
            assert before.conversation_view()
        case ToolResultsCleared():
            assert len(before.chat_view()) == len(chat)
            assert before.chat_tokens() - after.chat_tokens() == (
                event.tokens_before - event.tokens_after) > 0
            assert before.chat_view() != chat
        case TurnsSummarized():  # the summary stands where the breadcrumb stood
            assert (1, 0) == (_breadcrumbs(before.chat_view()), _breadcrumbs(chat))
            assert len(before.chat_view()) == len(chat)
            assert next(m for m in chat if m.synthetic).content.endswith(event.text)
            assert after.chat_tokens() - before.chat_tokens() == (
                event.tokens - BREADCRUMB_TOKENS)
        case (
            HistoryTrimmed()
            | RequestPrepared()
            | RequestRejected()
            | OverflowReported()
            | OverflowRecovered()
            | OverflowUnrecoverable()
            | SessionForgotten()
            | SummaryRefused()
            | UsageRecorded()
        ):
            assert unchanged


def _counted(event: Event) -> dict[str, int]:  # noqa: C901  # a case per event
    """What ``event`` adds to the counters besides ``events`` (the `Counters` doc, E7)."""
    match event:
        case MessageAppended():
            return {"appends": 1}
        case TrimDecided():
            return {f"trims_{event.reason.value}": 1, "messages_dropped": event.dropped_messages,
                    "tokens_dropped": event.tokens_before - event.tokens_after}
        case HistoryTrimmed():
            return {"notices": 1}
        case RequestPrepared():
            return {"requests_prepared": 1}
        case RequestRejected():
            return {"requests_rejected": 1}
        case OverflowRecovered():
            return {"overflow_recoveries": 1}
        case OverflowUnrecoverable():
            return {"overflows_unrecoverable": 1}
        case OrphansSwept():
            return {"orphan_sweeps": 1, "orphans_removed": event.removed}
        case TurnsSummarized():  # C7: what the summary replaces minus what it costs
            return {"summaries": 1, "summary_tokens_saved": event.replaced_tokens - event.tokens}
        case SummaryRefused():
            return {f"summary_refusals_{event.reason.value}": 1}
        case ToolResultsCleared():
            return {"tool_result_clearings": 1, "tool_results_cleared": len(event.tool_call_ids),
                    "tool_result_tokens_saved": event.tokens_before - event.tokens_after}
        case UsageRecorded():  # issue 35: what the provider billed, beside the estimate
            return {"usage_records": 1, "billed_input_tokens": event.input_tokens,
                    "cache_read_tokens": event.cache_read_tokens,
                    "cache_write_tokens": event.cache_write_tokens,
                    "billed_output_tokens": event.output_tokens,
                    "billed_estimated_tokens": event.estimated_tokens}
    return {}


_SUMS = tuple(f.name for f in attrs.fields(Counters) if f.type in ("int", int)
              and not f.name.startswith("peak"))


def _added(before: dict[str, Any], after: dict[str, Any], names: Sequence[str]) -> dict[str, int]:
    return {name: after[name] - before[name] for name in names if after[name] != before[name]}


def _check_counters(recorded: Recorded, event: Event) -> None:
    """`fold_counters` (the session list, what-if totals): each event counts as it should."""
    v = event.originator_version
    before = attrs.asdict(fold_counters(recorded.events[: v - 1]))
    after = attrs.asdict(fold_counters(recorded.events[:v]))
    assert {"events": 1, **_counted(event)} == _added(before, after, _SUMS)
    assert event_time(event.timestamp) == after["last_event_at"]


def _check_analytics(recorded: Recorded, event: Event) -> None:
    """The analytics tables, applied one notification at a time, count each event (E7)."""
    v = event.originator_version
    before, after = recorded.stats[v - 1], recorded.stats[v]
    assert after is not None
    assert str(event.originator_id) == after["session_id"]
    if isinstance(event, SessionStarted):
        assert before is None
        assert event.legacy == after["legacy"]
        return
    assert before is not None
    counted = {k: n for k, n in _counted(event).items() if k in COUNTER_COLUMNS}
    assert {"events": 1, **counted} == _added(before, after, COUNTER_COLUMNS)
    if isinstance(event, RequestPrepared | RequestRejected):
        assert (event.route.provider, event.route.model) == (after["provider"], after["model"])
    was, now = recorded.selections[v - 1], recorded.selections[v]
    selected = {route: n - was.get(route, 0) for route, n in now.items() if n != was.get(route)}
    if isinstance(event, RouteSelected):
        assert {(event.route.provider, event.route.model): 1} == selected
    else:
        assert {} == selected


def _check_timeline(recorded: Recorded, event: Event) -> None:
    """The timeline (E6) gives the event its own entry and a summary that is not its name."""
    entries = recorded.once("timeline", lambda: timeline(recorded.events))
    entry = entries[event.originator_version - 1]
    assert (event.originator_version, type(event).__name__) == (entry.position, entry.type)
    assert entry.summary == summarize(event)
    assert entry.summary not in ("", entry.type)
    assert "\n" not in entry.summary


_DECIDED: frozenset[type[DomainEvent]] = frozenset(EVENT_TYPES) - {SessionForgotten}
"""What the decider records: a what-if under the recorded profile records each again (a
usage as recorded: the provider's bill is what an estimate learns from, issue 35)."""


def _check_what_if(recorded: Recorded, event: Event) -> None:
    """What-if under the session's own profile records each decided event type again and
    compares every request; the store's erasure is no decision and is not replayed."""
    run = recorded.once("what_if", lambda: replay_what_if(recorded.events, PROFILE))
    again = {type(e) for e in run.what_if}
    assert (type(event) in _DECIDED) == (type(event) in again)
    requests = [e for e in recorded.events if isinstance(e, RequestPrepared | RequestRejected)]
    assert [e.originator_version for e in requests] == [r.position for r in run.report.requests]
    assert run.report.recorded == run.report.what_if


def _check_verify(recorded: Recorded, event: Event) -> None:
    """`verify` folds every event without a violation; after the forget, the chain must end
    with `SessionForgotten` (an erased session without it is a violation)."""
    forgotten = isinstance(event, SessionForgotten)
    found = recorded.verified_forgotten if forgotten else recorded.verified
    assert () == found.violations
    assert event.originator_version <= found.events_checked
    assert (1, len(recorded.events)) == (
        recorded.verified_forgotten.sessions_checked, recorded.verified_forgotten.events_checked
    )


_DRAWN: frozenset[type[DomainEvent]] = frozenset({
    RequestPrepared, RequestRejected, TrimDecided, OrphansSwept, OverflowUnrecoverable,
})
"""The events the report's chart draws (a point or a marker): their timeline row links to it.
A non-initial `RouteSelected` is drawn too (a switch)."""


def _check_report(recorded: Recorded, event: Event) -> None:
    """The HTML report gives each event its timeline row with its summary; the ones the chart
    draws link to their point or marker."""
    page = recorded.once("report", lambda: report(recorded.events))
    v = event.originator_version
    row = re.search(rf'<tr id="e{v}" [^>]*>(.*?)</tr>', page)
    assert row is not None
    cells = f"<td>{type(event).__name__}</td><td>{html.escape(summarize(event))}</td>"
    assert cells in row.group(1)
    switch = isinstance(event, RouteSelected) and event.reason.value != "initial"
    assert (type(event) in _DRAWN or switch) == ('<a href="#c' in row.group(1))


def _check_record(recorded: Recorded, event: Event) -> None:
    """The exported record (E13): an append adds its message, a pop takes it back, nothing
    else changes it."""
    v = event.originator_version
    before, after = record_of(recorded.events[: v - 1]), record_of(recorded.events[:v])
    match event:
        case MessageAppended():
            assert [*before, event.message] == after
        case MessagePopped():
            assert before == [*after, event.message]
        case _:
            assert before == after


def _check_summarised(recorded: Recorded, event: Event) -> None:
    """The items a compact state reads back from the log (ADR-0030): as each event leaves
    them (appended, popped or swept: None, rewritten)."""
    v = event.originator_version
    before: dict[int, ConversationMessage | None] = {}
    after: dict[int, ConversationMessage | None] = {}
    everything = range(sys.maxsize)
    collect_summarised(before, recorded.events[: v - 1], everything)
    collect_summarised(after, recorded.events[:v], everything)
    match event:
        case MessageAppended():
            assert {**before, event.position: event.message} == after
        case MessagePopped():
            assert {**before, event.position: None} == after
        case OrphansSwept():
            assert {**before, **dict.fromkeys(event.positions), **dict(event.rewritten)} == after
            assert before != after
        case ToolResultsCleared():
            assert {**before, **dict(event.rewritten)} == after
            assert before != after
        case ToolCallsRestored():
            assert {**before, **dict(event.restored)} == after
            assert before != after
        case _:
            assert before == after


CONSUMERS: dict[str, Callable[[Recorded, Event], None]] = {
    "views": _check_views,
    "counters": _check_counters,
    "analytics": _check_analytics,
    "timeline": _check_timeline,
    "what_if": _check_what_if,
    "verify": _check_verify,
    "report": _check_report,
    "record": _check_record,
    "summarised": _check_summarised,
}


@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize("kind", EVENT_TYPES, ids=lambda kind: kind.__name__)
def test_i20_p4_every_consumer_handles_every_event_type(
    recorded: Recorded, kind: type[DomainEvent], consumer: str
) -> None:
    """Each consumer takes each recorded event of ``kind`` and shows it where it should."""
    for event in recorded.of(kind):
        CONSUMERS[consumer](recorded, event)


# --- nothing outside the union, nothing the union leaves out ----------------------------------

def test_i20_p4_the_union_is_every_event_class_and_what_the_codec_registers() -> None:
    """`Event` holds every event class of the domain, and the codec registers exactly its
    members: a new event class left out of the union can be neither stored nor folded."""
    members = set(get_args(Event))
    defined = {
        value for value in vars(events_module).values()
        if isinstance(value, type) and issubclass(value, DomainEvent) and value is not DomainEvent
    }
    codec = default_codec()
    assert defined == members
    assert {topic_for(cls) for cls in members} == set(codec.topics)
    assert {cls: topic_for(cls) for cls in members} == {cls: codec.topic_of(cls) for cls in members}


@attrs.frozen
class Unknown(DomainEvent):
    """An event class outside `Event`, as a custom codec (`EventCodec`) could decode one."""

    note: str = ""


FOLDS: dict[str, Callable[[list[DomainEvent]], object]] = {
    "evolve": lambda events: [evolve(SessionState(), event) for event in events],
    "counters": lambda events: Tally().add(events[-1]),
    "fold_counters": fold_counters,
    "views_at": lambda events: views_at(events, len(events)),
    "timeline": timeline,
    "what_if": lambda events: what_if(events, PROFILE),
    "report": report,
    "record": record_of,
    "summarised": lambda events: collect_summarised({}, events, range(9)),
}


@pytest.mark.parametrize("fold", list(FOLDS))
def test_i20_p4_no_fold_swallows_an_event_class_it_does_not_know(
    recorded: Recorded, fold: str
) -> None:
    """An event outside `Event` is refused (``TypeError`` where a caller hands events in,
    ``AssertionError`` from `assert_never` in the library's own folds), never ignored."""
    start = recorded.events[0]
    unknown = Unknown(start.originator_id, 2, start.timestamp, "not a turnledger event")
    with pytest.raises((TypeError, AssertionError), match="Unknown"):
        FOLDS[fold]([start, unknown])


def test_i20_p4_as_event_passes_members_and_refuses_others(recorded: Recorded) -> None:
    """`as_event` is the checked cast at the boundary: a member passes as itself."""
    assert list(recorded.events) == [as_event(event) for event in recorded.events]
    with pytest.raises(TypeError, match=r"Unknown is not a turnledger event \(Event\)"):
        as_event(Unknown(recorded.events[0].originator_id, 2, recorded.events[0].timestamp))


def test_i20_p4_the_recording_holds_every_event_type(recorded: Recorded) -> None:
    """The consumers above saw every member: the session recorded each one."""
    assert set(EVENT_TYPES) == {type(event) for event in recorded.events}
    assert [*range(1, len(recorded.events) + 1)] == [e.originator_version for e in recorded.events]

