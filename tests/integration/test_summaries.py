"""Issue 24 points 1-2: summaries of the turns a trim drops, supplied by the runtime and
recorded, on SQLite through a real session: what the view shows, restore (from a snapshot
and from the events), verify (a forged summary is caught), the timeline, and a property test
over random histories and summarizers that succeed, raise or answer too much."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from uuid import UUID, uuid4

import attrs
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import turnledger as tl
from tests.docs_text import section as docs_section
from tests.integration.test_replay import append_raw, next_stamp
from tests.properties import examples
from tests.strategies import conversation_histories
from turnledger.audit import Rule, views_at
from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.decider import SessionState, evolve
from turnledger.domain.events import (
    RequestPrepared,
    SummaryRefusal,
    SummaryRefused,
    TrimDecided,
    TrimTrigger,
    TurnsSummarized,
    as_event,
)
from turnledger.domain.messages import (
    SUMMARY_PREFIX,
    AssistantToolCalls,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    to_chat_messages,
)
from turnledger.domain.sweep import sweep_orphans
from turnledger.domain.turns import is_breadcrumb_item, is_turn_start_item, segment
from turnledger.errors import UnansweredToolCalls
from turnledger.events import OverflowRecovered, OverflowReported, OverflowUnrecoverable
from turnledger.replay.audit import verify
from turnledger.replay.timeline import fold, timeline
from turnledger.replay.whatif import replay_what_if
from turnledger.store.snapshots import decode_snapshot

OPENAI = ProviderProfile("openai", "gpt-4o", 128_000)
ROUTE = Route("openai", "gpt-4o")


class Recorder:
    """A summarizer that says what it was given, and counts its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[ChatMessage], str | None]] = []

    def __call__(self, turns: Sequence[ChatMessage], previous: str | None) -> str:
        self.calls.append((list(turns), previous))
        return f"summary {len(self.calls)} of {len(turns)} messages"


def _turns(session: tl.Session, first: int, last: int, summarizer: object) -> None:
    for n in range(first, last):
        session.extend([
            ChatMessage.user(f"question {n} " * 8),
            AssistantToolCalls("Looking.", (ToolCall(f"c{n}", "search", "{}"),)),
            ToolResults((ToolResult(f"c{n}", f"result {n} " * 8, "search"),)),
            ChatMessage.assistant(f"answer {n} " * 8),
        ])
        session.prepare_request(summarizer=summarizer)  # type: ignore[arg-type]


def test_i24_summaries_on_sqlite_view_restore_verify_timeline(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'summaries.db'}"
    recorder = Recorder()
    summarizer = tl.Summarizer("recorder-v1", recorder)
    with tl.open_store(url, snapshot_interval=7) as store:
        session = store.start_session(RuntimeProfile(max_context_tokens=500), (OPENAI,), ROUTE)
        session.append(ChatMessage.system("You are a careful agent."))
        _turns(session, 0, 10, summarizer)
        events = session.events()
        summaries = [e for e in events if isinstance(e, TurnsSummarized)]
        assert len(summaries) >= 2
        assert len(recorder.calls) == len(summaries)  # each call is one recorded summary
        assert recorder.calls[0][1] is None
        assert summaries[0].text == recorder.calls[1][1]  # summaries roll
        assert {"recorder-v1"} == {e.summarizer for e in summaries}
        # Exactly the dropped turns, as the chat view showed them, no system message.
        appended = [e for e in events if isinstance(e, tl.MessageAppended)]
        first = summaries[0]
        given = recorder.calls[0][0]
        assert "question 0 " * 8 == given[0].content
        assert all(m.role != "system" for m in given)
        assert first.last_position + 1 == next(
            e.first_kept_position for e in events if isinstance(e, TrimDecided))
        assert appended[-1].position == session.next_position - 1
        # The view: system, the summary in place of the breadcrumb, the kept turns.
        view = session.chat_view()
        assert "You are a careful agent." == view[0].content
        assert SUMMARY_PREFIX + summaries[-1].text == view[1].content
        assert not any(tl.BREADCRUMB_TEXT == m.content for m in view)
        assert "answer 9 " * 8 == view[-1].content
        last = [e for e in events if isinstance(e, RequestPrepared)][-1]
        assert last.estimated_tokens <= 500
        # The log keeps the originals.
        assert "question 0 " * 8 == appended[1].message.message.content
        tokens = session.state.chat_tokens()
        assert () == verify(store.backend).violations
        lines = [e.summary for e in timeline(events) if e.type == "TurnsSummarized"]
        assert lines[0].startswith(f"turns at log positions {first.first_position}-"
                                   f"{first.last_position} summarised by 'recorder-v1'")
    calls = len(recorder.calls)
    with tl.open_store(url, snapshot_interval=7) as again:  # restore from the snapshot
        snapshot = again.backend.load_snapshot(UUID(session.id))
        assert snapshot is not None
        held = decode_snapshot(snapshot[1], session_id=UUID(session.id), version=snapshot[0])
        assert held is not None
        assert held[0].summary is not None  # the snapshot carries the summary
        live = SessionState()
        for e in events[: snapshot[0]]:
            evolve(live, as_event(e))
        assert live == held[0]  # the state's one form (ADR-0076), its summary included
        restored = again.restore(session.id)
        assert view == restored.chat_view()
        assert tokens == restored.state.chat_tokens()
        assert calls == len(recorder.calls)  # restore never calls a summarizer
        request = restored.prepare_request()  # nothing new to trim: the same request
        assert last.digest == request.digest
        assert calls == len(recorder.calls)
    assert view == views_at(events, len(events))[0]  # and from the events alone


def test_i24_restore_without_a_snapshot_equals_the_live_state(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    with tl.open_store(url, snapshot_interval=10_000) as store:
        session = store.start_session(RuntimeProfile(max_context_tokens=400), (OPENAI,), ROUTE)
        _turns(session, 0, 8, Recorder())
        view, tokens, events = session.chat_view(), session.state.chat_tokens(), session.events()
    with tl.open_store(url, snapshot_interval=10_000) as store:
        restored = store.restore(session.id)
        assert (view, tokens) == (restored.chat_view(), restored.state.chat_tokens())
        folded = fold(events)
        assert folded.summary is not None
        assert view == folded.chat_view()


def test_i24_refusals_are_recorded_and_the_request_still_goes_out(tmp_path: Path) -> None:
    def boom(turns: Sequence[ChatMessage], previous: str | None) -> str:
        raise RuntimeError("summary model unavailable")

    def huge(turns: Sequence[ChatMessage], previous: str | None) -> str:
        return "very long summary " * 500

    with tl.open_store(f"sqlite:///{tmp_path / 'refused.db'}") as store:
        for fn, reason in ((boom, SummaryRefusal.RAISED), (huge, SummaryRefusal.OVERSIZE)):
            session = store.start_session(
                RuntimeProfile(max_context_tokens=400), (OPENAI,), ROUTE)
            session.summarizer = tl.Summarizer(fn.__name__, fn)
            _turns(session, 0, 6, None)
            refused = [e for e in session.events() if isinstance(e, SummaryRefused)]
            assert refused
            assert {reason} == {e.reason for e in refused}
            assert not any(isinstance(e, TurnsSummarized) for e in session.events())
            assert tl.BREADCRUMB_TEXT in [m.content for m in session.chat_view()]
            assert isinstance(session.events()[-1], RequestPrepared)
        assert () == verify(store.backend).violations


def test_i24_verify_catches_a_forged_summary() -> None:
    with tl.open_store("memory://") as store:
        session = store.start_session(RuntimeProfile(max_context_tokens=400), (OPENAI,), ROUTE)
        _turns(session, 0, 6, Recorder())
        assert () == verify(store.backend).violations
        good = next(e for e in session.events() if isinstance(e, TurnsSummarized))
        # A summary claiming other turns than the trim dropped, and one with a wrong digest.
        append_raw(store, session.id, attrs.evolve(
            good, **next_stamp(store, session.id), first_position=good.first_position + 1))
        found = verify(store.backend).violations
        assert [Rule.REPLAY] == [v.rule for v in found]
        assert "TurnsSummarized names log positions" in found[0].detail
    with tl.open_store("memory://") as store:
        session = store.start_session(RuntimeProfile(max_context_tokens=400), (OPENAI,), ROUTE)
        _turns(session, 0, 6, Recorder())
        events = session.events()
        summary = next(e for e in events if isinstance(e, TurnsSummarized))
        # The same events as another session's, its summary's digest forged.
        other = uuid4()
        copied = [attrs.evolve(e, originator_id=other) for e in events[:summary.originator_version]]
        copied[-1] = attrs.evolve(copied[-1], digest="0" * 64)
        append_raw(store, str(other), *copied)
        rules = {v.rule for v in verify(store.backend).violations}
        assert Rule.DIGEST in rules


def test_i24_what_if_reuses_the_recorded_summaries() -> None:
    """Under the recorded profile a what-if sends the same requests, no summarizer called."""
    recorder = Recorder()
    with tl.open_store("memory://") as store:
        session = store.start_session(RuntimeProfile(max_context_tokens=400), (OPENAI,), ROUTE)
        _turns(session, 0, 6, recorder)
        calls = len(recorder.calls)
        run = replay_what_if(session.events(), session.profile)
        assert run.report.recorded == run.report.what_if
        assert all(row.same_messages for row in run.report.requests)
        assert calls == len(recorder.calls)


def _summarizer(kind: str) -> tl.Summarizer:
    def summarize(turns: Sequence[ChatMessage], previous: str | None) -> str:
        if kind == "raise":
            raise RuntimeError("down")
        if kind == "oversize":
            return "words " * 4000
        return f"{len(turns)} messages" + (" after the previous summary" if previous else "")

    return tl.Summarizer(kind, summarize)


def _assert_sendable(request: tl.PreparedRequest, sent: Sequence[ConversationMessage]) -> None:
    """``request`` carries no orphan, and the newest turn of ``sent``: its first message."""
    swept = sweep_orphans(request.messages)
    assert ((), ()) == (tuple(swept.removed_indices), tuple(swept.rewritten))
    starts = [item for item in sent if is_turn_start_item(item)]
    if starts:  # the newest turn is kept: its first message is sent
        newest = segment(request.messages).last_turn_start
        assert newest is not None
        assert to_chat_messages(starts[-1:]) == request.messages[newest:newest + 1]


def _label(events: Sequence[object]) -> None:
    event("summarised" if any(isinstance(e, TurnsSummarized) for e in events) else
          "refused" if any(isinstance(e, SummaryRefused) for e in events) else "plain")


@settings(max_examples=examples(40))
@given(
    history=conversation_histories(min_turns=1, max_turns=8),
    kinds=st.lists(st.sampled_from(["ok", "raise", "oversize"]), min_size=1, max_size=3),
    budget=st.sampled_from([150, 300, 800, 100_000]),
)
def test_i24_property_summaries_never_orphan_keep_the_newest_turn_and_replay(
    history: list[ConversationMessage], kinds: list[str], budget: int
) -> None:
    """For random histories and summarizers that succeed, raise or answer too much: no
    request carries an orphan, the newest turn is sent, verify explains every summary, and
    restore and what-if give the same request digests without calling a summarizer."""
    mine = [m for m in history if not is_breadcrumb_item(m)]
    with tl.open_store("memory://") as store:
        session = store.start_session(RuntimeProfile(max_context_tokens=budget), (OPENAI,),
                                      ROUTE)
        digests: list[str] = []
        half = max(1, len(mine) // 2)
        for k, part in enumerate((mine[:half], mine[half:])):
            if not part:
                continue
            session.extend(part)
            try:
                request = session.prepare_request(summarizer=_summarizer(kinds[k % len(kinds)]))
            except (UnansweredToolCalls, tl.ContextWindowExceeded):
                continue
            digests.append(request.digest)
            _assert_sendable(request, mine[: half if k == 0 else len(mine)])
        assert () == verify(store.backend).violations
        events = session.events()
        _label(events)
        recorded = [e.digest for e in events if isinstance(e, RequestPrepared)]
        assert digests == recorded
        restored = store.restore(session.id)
        assert session.chat_view() == restored.chat_view()
        if digests and not isinstance(events[-1], tl.RequestRejected):
            again = restored.prepare_request()  # no summarizer: nothing new is decided
            assert digests[-1] == again.digest
        run = replay_what_if(events, session.profile)
        assert run.report.recorded == run.report.what_if


def test_i24_readme_summaries_example_prints_what_it_says(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The README's summaries example runs as written and prints what the README says."""
    _, section = docs_section("## Summaries of trimmed turns")  # docs/guide/summaries.md
    found = re.search(r"```python\n(.*?)```\s*Prints:\s*```text\n(.*?)```", section, re.DOTALL)
    assert found is not None
    exec(compile(found.group(1), "README.md", "exec"), {"__name__": "__readme__"})
    assert found.group(2) == capsys.readouterr().out


def test_i24_fit_window_takes_a_summarizer_and_the_default_takes_none() -> None:
    """`fit_window(summarizer=...)` summarises as a request does; a session without one
    records no summary event (the default behaves as before, DECISIONS 21)."""
    with tl.open_store("memory://") as store:
        plain = store.start_session(RuntimeProfile(max_context_tokens=400), (OPENAI,), ROUTE)
        _turns(plain, 0, 6, None)
        assert not any(isinstance(e, TurnsSummarized | SummaryRefused) for e in plain.events())
        session = store.start_session(RuntimeProfile(max_context_tokens=150), (OPENAI,), ROUTE)
        for n in range(6):
            session.extend([ChatMessage.user(f"question {n} " * 8),
                            ChatMessage.assistant(f"answer {n} " * 8)])
            view = session.fit_window(summarizer=Recorder())
        assert view[0].content.startswith(SUMMARY_PREFIX)
        assert any(isinstance(e, TurnsSummarized) for e in session.events())
        assert () == verify(store.backend).violations


def test_i24_what_if_reuses_a_summary_whose_range_was_widened() -> None:
    """When the recorded summary did not fit and the trim dropped (and summarised) more, a
    what-if under the same profile reuses it for the wider range: the same requests."""
    calls: list[int] = []

    def summarize(turns: Sequence[ChatMessage], previous: str | None) -> str:
        calls.append(len(turns))
        return "a summary of some length " * 6

    with tl.open_store("memory://") as store:
        session = store.start_session(RuntimeProfile(max_context_tokens=260), (OPENAI,), ROUTE)
        session.append(ChatMessage.system("Be brief."))
        session.extend([m for n in range(8) for m in (
            ChatMessage.user(f"question {n} " * 6), ChatMessage.assistant(f"answer {n} " * 6))])
        session.prepare_request(summarizer=summarize)
        assert 2 == len(calls)  # asked again about the wider range
        assert calls[1] > calls[0]
        run = replay_what_if(session.events(), session.profile)
        assert run.report.recorded == run.report.what_if
        assert all(row.same_messages for row in run.report.requests)
        assert 2 == len(calls)


def _overflowed(store: tl.Store, summarizer: object, turns: int = 6) -> tl.Session:
    """A session without a budget whose provider then reports an overflow."""
    session = store.start_session(RuntimeProfile(max_context_tokens=0), (OPENAI,), ROUTE)
    session.append(ChatMessage.system("You are a careful agent."))
    _turns(session, 0, turns, None)
    assert not any(isinstance(e, TrimDecided) for e in session.events())
    assert session.recover_from_overflow("maximum context length exceeded",
                                          summarizer=summarizer)  # type: ignore[arg-type]
    return session


def test_i24_an_overflow_recovery_summarises_the_turns_it_drops(tmp_path: Path) -> None:
    """R25 with a summarizer: the reactive trim's dropped turns are given to it, recorded as
    `TurnsSummarized` after the overflow's trim, shown in the breadcrumb's place; verify,
    restore and what-if explain it without calling the summarizer again."""
    recorder = Recorder()
    with tl.open_store(f"sqlite:///{tmp_path / 'overflow.db'}") as store:
        session = _overflowed(store, tl.Summarizer("recorder-v1", recorder))
        events = session.events()
        kinds = [type(e).__name__ for e in events[-5:]]
        assert ["TrimDecided", "BreadcrumbInserted", "HistoryTrimmed", "TurnsSummarized",
                "OverflowRecovered"] == kinds
        trim = next(e for e in events if isinstance(e, TrimDecided))
        summary = next(e for e in events if isinstance(e, TurnsSummarized))
        assert TrimTrigger.OVERFLOW == trim.trigger
        assert (summary.last_position + 1) == trim.first_kept_position
        assert 1 == len(recorder.calls)
        given = recorder.calls[0][0]
        assert ("question 0 " * 8, None) == (given[0].content, recorder.calls[0][1])
        assert all(m.role != "system" for m in given)
        recovered = events[-1]
        assert isinstance(recovered, OverflowRecovered)
        reported = next(e for e in events if isinstance(e, OverflowReported))
        assert recovered.tokens_after <= reported.target_tokens
        assert recovered.tokens_after == session.state.chat_tokens()
        view = session.chat_view()
        assert SUMMARY_PREFIX + summary.text == view[1].content
        assert tl.BREADCRUMB_TEXT not in [m.content for m in view]
        assert () == verify(store.backend).violations
        restored = store.restore(session.id)
        assert view == restored.chat_view()
        run = replay_what_if(events, session.profile)
        assert run.report.recorded == run.report.what_if
        assert view == views_at(events, len(events))[0]
    assert 1 == len(recorder.calls)


def test_i24_an_overflow_recovery_with_a_failing_summarizer_still_recovers() -> None:
    """A summarizer that raises leaves the plain reactive trim and its breadcrumb, recorded
    as `SummaryRefused`; the recovery still succeeds. With one turn left, none is called."""
    calls: list[int] = []

    def boom(turns: Sequence[ChatMessage], previous: str | None) -> str:
        calls.append(len(turns))
        raise RuntimeError("summary model unavailable")

    with tl.open_store("memory://") as store:
        session = _overflowed(store, boom)
        events = session.events()
        refused = [e for e in events if isinstance(e, SummaryRefused)]
        assert [SummaryRefusal.RAISED] == [e.reason for e in refused]
        assert isinstance(events[-1], OverflowRecovered)
        assert tl.BREADCRUMB_TEXT in [m.content for m in session.chat_view()]
        assert () == verify(store.backend).violations
        assert 1 == len(calls)
        single = store.start_session(RuntimeProfile(max_context_tokens=0), (OPENAI,), ROUTE)
        _turns(single, 0, 1, None)
        assert not single.recover_from_overflow("maximum context length exceeded",
                                                summarizer=boom)
        assert isinstance(single.events()[-1], OverflowUnrecoverable)
        assert 1 == len(calls)


@settings(max_examples=examples(30))
@given(
    history=conversation_histories(min_turns=1, max_turns=8),
    kind=st.sampled_from(["ok", "raise", "oversize"]),
)
def test_i24_property_overflow_summaries_never_orphan_and_replay(
    history: list[ConversationMessage], kind: str
) -> None:
    """For random histories and summarizers, an overflow recovery with a summarizer: the next
    request carries no orphan and the newest turn, verify explains the log, restore and
    what-if give the same request without calling a summarizer."""
    mine = [m for m in history if not is_breadcrumb_item(m)]
    calls: list[int] = []
    chosen = _summarizer(kind)

    def counted(turns: Sequence[ChatMessage], previous: str | None) -> str:
        calls.append(len(turns))
        return chosen.summarize(turns, previous)  # type: ignore[return-value]

    with tl.open_store("memory://") as store:
        session = store.start_session(RuntimeProfile(max_context_tokens=0), (OPENAI,), ROUTE)
        session.extend(mine)
        session.recover_from_overflow("maximum context length exceeded",
                                      summarizer=tl.Summarizer(kind, counted))
        try:
            request = session.prepare_request()
        except (UnansweredToolCalls, tl.ContextWindowExceeded):
            request = None
        if request is not None:
            _assert_sendable(request, mine)
        assert () == verify(store.backend).violations
        events = session.events()
        _label(events)
        made = len(calls)
        restored = store.restore(session.id)
        assert session.chat_view() == restored.chat_view()
        run = replay_what_if(events, session.profile)
        assert run.report.recorded == run.report.what_if
        assert made == len(calls)
