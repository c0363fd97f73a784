"""Issue 24 point 4: what-if with a summarizer the user passes, the report drawing compacted
spans, and the counters of compactions and tokens saved (the fold, the analytics tables, and
tables made before those counters existed), on real SQLite and PostgreSQL stores.

The session is `tests.e2e.compaction_session.record`'s: a 600-token budget, tool results
cleared outside the newest turn, summaries on every request but one, whose summarizer raises.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
import pytest

import turnledger as tl
from tests.backends import SHARED_BACKENDS, Target, fresh_target
from tests.browser import chromium, dump_dom
from tests.e2e.compaction_session import PROFILE, record, summarize
from tests.integration.test_report import check_inert
from turnledger.domain.events import (
    DomainEvent,
    MessageAppended,
    SummaryRefusal,
    SummaryRefused,
    ToolResultsCleared,
    TurnsSummarized,
)
from turnledger.domain.messages import SUMMARY_PREFIX, ChatMessage
from turnledger.domain.turns import is_turn_start_item
from turnledger.projections.analytics import COMPACTION_COLUMNS, Analytics
from turnledger.projections.counters import fold_counters
from turnledger.replay.audit import verify
from turnledger.replay.report import report
from turnledger.replay.timeline import fold
from turnledger.replay.whatif import FROM_LOG, FROM_SUMMARIZER, replay_what_if, what_if

SMALLER = attrs.evolve(PROFILE, max_context_tokens=400)


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> tuple[DomainEvent, ...]:
    """The compacted session's events, recorded once on SQLite."""
    url = f"sqlite:///{tmp_path_factory.mktemp('i24') / 'compacted.db'}"
    session_id = record(url)
    with tl.open_store(url) as store:
        recorded = tuple(store.events_of(session_id))
    kinds = {type(e) for e in recorded}
    assert {TurnsSummarized, SummaryRefused, ToolResultsCleared} <= kinds
    return recorded


class Counting:
    """`summarize`, counting its calls; named ``name``."""

    def __init__(self, name: str = "counting-v2") -> None:
        self.calls: list[tuple[int, str | None]] = []
        self.summarizer_name = name

    def __call__(self, turns: Sequence[ChatMessage], previous: str | None) -> str:
        self.calls.append((len(turns), previous))
        return "passed: " + summarize(turns, previous)


# --- what-if with a passed summarizer ----------------------------------------------------------

def test_i24_what_if_under_the_recorded_profile_reuses_everything_and_calls_nothing(
    events: tuple[DomainEvent, ...],
) -> None:
    counting = Counting()
    report_ = what_if(events, PROFILE, summarizer=counting)
    assert [] == counting.calls
    assert report_.recorded == report_.what_if
    assert all(row.same_messages for row in report_.requests)
    notes = [n for row in report_.requests for n in row.compactions if n.kind != "cleared"]
    recorded = [e for e in events if isinstance(e, TurnsSummarized | SummaryRefused)]
    assert len(recorded) == len(notes)
    assert {FROM_LOG} == {n.source for n in notes}
    assert "counting-v2" == report_.summarizer
    assert "0 made by the passed summarizer 'counting-v2'" in report_.summary()


def test_i24_what_if_smaller_budget_reuses_matching_ranges_and_asks_the_passed_summarizer(
    events: tuple[DomainEvent, ...],
) -> None:
    """Where the what-if trim drops the recorded range: reused; elsewhere: the passed
    summarizer, whose summaries the what-if run shows; without one, the plain trim."""
    counting = Counting()
    run = replay_what_if(events, SMALLER, summarizer=counting)
    plain = replay_what_if(events, SMALLER)
    notes = [n for row in run.report.requests for n in row.compactions if n.kind != "cleared"]
    made = [n for n in notes if n.source == FROM_SUMMARIZER]
    reused = [n for n in notes if n.source == FROM_LOG]
    assert made
    assert reused
    assert len(counting.calls) == len(made)
    assert {"counting-v2"} == {n.summarizer for n in made}
    recorded = {(e.first_position, e.last_position): e for e in events
                if isinstance(e, TurnsSummarized | SummaryRefused)}
    assert all((n.first_position, n.last_position) in recorded for n in reused)
    assert not any((n.first_position, n.last_position) in recorded for n in made)
    # The what-if run's summaries: the passed summarizer's text, tokens as the notes say.
    summaries = {(e.first_position, e.last_position): e for e in run.what_if
                 if isinstance(e, TurnsSummarized)}
    for note in made:
        event = summaries[note.first_position, note.last_position]
        assert event.text.startswith("passed: ")
        assert (note.tokens, note.replaced_tokens) == (event.tokens, event.replaced_tokens)
        assert note.saved == event.replaced_tokens - event.tokens > 0
    # The last request sends the newest summary in the breadcrumb's place.
    view = fold(run.what_if).chat_view()
    assert view[1].content == SUMMARY_PREFIX + [
        e for e in run.what_if if isinstance(e, TurnsSummarized)][-1].text
    # Without a summarizer: the recorded ones only, so fewer summaries, none made.
    plain_notes = [n for row in plain.report.requests for n in row.compactions
                   if n.kind != "cleared"]
    assert {FROM_LOG} == {n.source for n in plain_notes}
    assert plain.report.what_if.summaries == run.report.what_if.summaries - len(
        [n for n in made if n.kind == "summary"])
    assert plain.report.summarizer is None
    # --json carries each note and the passed summarizer's name.
    data = run.report.to_jsonable()
    assert "counting-v2" == data["summarizer"]
    sources = [c["source"] for r in data["requests"] for c in r["compactions"]]
    assert sources.count(FROM_SUMMARIZER) == len(made)


def test_i24_what_if_passed_summarizer_failures_are_refusals_and_every_request_goes_out(
    events: tuple[DomainEvent, ...],
) -> None:
    release = threading.Event()

    def boom(turns: Sequence[ChatMessage], previous: str | None) -> str:
        raise RuntimeError("what-if model down")

    def stuck(turns: Sequence[ChatMessage], previous: str | None) -> str:
        release.wait(30)
        return "too late"

    try:
        for summarizer, reason in (
            (tl.Summarizer("boom", boom), SummaryRefusal.RAISED),
            (tl.Summarizer("stuck", stuck, timeout=0.05), SummaryRefusal.TIMED_OUT),
        ):
            run = replay_what_if(events, SMALLER, summarizer=summarizer)
            new = [n for row in run.report.requests for n in row.compactions
                   if n.source == FROM_SUMMARIZER]
            assert new
            assert {("refused", reason.value)} == {(n.kind, n.reason) for n in new}
            assert all(row.what_if.outcome == "sent" for row in run.report.requests)
            refusals = [e for e in run.what_if if isinstance(e, SummaryRefused)
                        and e.summarizer == summarizer.name]
            assert len(new) == len(refusals)
            assert tl.BREADCRUMB_TEXT in [m.content for m in fold(run.what_if).chat_view()]
    finally:
        release.set()


def test_i24_what_if_summarises_a_session_recorded_without_summaries(tmp_path: Path) -> None:
    """"What would a smaller budget with summaries have sent?" for a plain session."""
    with tl.open_store(f"sqlite:///{tmp_path / 'plain.db'}") as store:
        session = store.start_session(
            tl.RuntimeProfile(max_context_tokens=100_000), (tl.ProviderProfile(
                "openai", "gpt-4o", 128_000),), tl.Route("openai", "gpt-4o"))
        for n in range(8):
            session.extend([ChatMessage.user(f"question {n} " * 10),
                            ChatMessage.assistant(f"answer {n} " * 10)])
            session.prepare_request()
        events = session.events()
    assert not any(isinstance(e, TurnsSummarized) for e in events)
    counting = Counting()
    small = attrs.evolve(session.profile, max_context_tokens=300)
    compared = what_if(events, small, summarizer=counting)
    assert compared.what_if.summaries == len(counting.calls) > 0
    assert compared.what_if.compaction_tokens_saved > 0
    assert 0 == compared.recorded.summaries
    assert 0 == what_if(events, small).what_if.summaries


# --- the report --------------------------------------------------------------------------------

def test_i24_report_draws_summarised_turns_and_cleared_results(
    events: tuple[DomainEvent, ...],
) -> None:
    html = report(events)
    assert html == report(list(events))  # the same events, the same bytes (E12)
    check_inert(html)
    summaries = [e for e in events if isinstance(e, TurnsSummarized)]
    starts = [e.position for e in events
              if isinstance(e, MessageAppended) and is_turn_start_item(e.message)]
    covered = [p for p in starts if any(s.first_position <= p <= s.last_position
                                        for s in summaries)]
    drawn = re.findall(r'<rect class="turn summarised"[^>]*><title>([^<]*)</title>', html)
    assert len(covered) == len(drawn)
    for summary in summaries:
        named = (f"summarised by &#x27;cli-test-v1&#x27; (TurnsSummarized at event "
                 f"{summary.originator_version}, log positions {summary.first_position}-"
                 f"{summary.last_position})")
        assert any(named in title for title in drawn), named
    clearings = [e for e in events if isinstance(e, ToolResultsCleared)]
    flags = re.findall(r'<path class="flag results-cleared"[^>]*><title>([^<]*)</title>', html)
    assert len(clearings) == len(flags)  # one cleared result per turn, turns drawn one by one
    assert f"ToolResultsCleared at event {clearings[0].originator_version})" in flags[0]
    assert 'class="sw summarised"' in html
    assert 'class="sw results-cleared"' in html


def test_i24_report_what_if_side_draws_the_passed_summarizers_spans_escaped(
    events: tuple[DomainEvent, ...],
) -> None:
    hostile = Counting("<b>v2</b>")
    html = report(events, what_if=SMALLER, summarizer=hostile)
    assert hostile.calls
    check_inert(html)
    assert "<b>v2</b>" not in html
    assert "summarised by &#x27;&lt;b&gt;v2&lt;/b&gt;&#x27; (TurnsSummarized at event" in html
    assert "what-if summarizer: &#x27;&lt;b&gt;v2&lt;/b&gt;&#x27;" in html
    recorded, what_if_side = html.split('<section id="turns">')[1].split('<div class="side">')[1:3]
    assert "&lt;b&gt;v2" not in recorded
    assert "&lt;b&gt;v2" in what_if_side
    assert html == report(events, what_if=SMALLER, summarizer=Counting("<b>v2</b>"))


def test_i24_report_with_compacted_spans_renders_in_chromium(
    events: tuple[DomainEvent, ...], tmp_path: Path,
) -> None:
    """Chromium builds the strip's summarised turns and cleared-result flags, the hostile
    summarizer name as text."""
    program = chromium()
    page = tmp_path / "compacted.html"
    report(events, page, what_if=SMALLER, summarizer=Counting('<script>document.title="x"'))
    dom = dump_dom(program, page, tmp_path)
    found = check_inert(dom)
    assert sum("summarised" in e.classes for e in found if e.tag == "rect") > 0
    assert sum("results-cleared" in e.classes for e in found if e.tag == "path") > 0
    assert "&lt;script&gt;document.title=" in dom
    assert re.search(r"<title>turnledger report: session [0-9a-f-]{36}</title>", dom)


# --- counters and analytics --------------------------------------------------------------------

def _expected(events: Sequence[DomainEvent]) -> dict[str, int]:
    """The compaction counters, counted straight from the events (C7)."""
    summaries = [e for e in events if isinstance(e, TurnsSummarized)]
    refused = [e for e in events if isinstance(e, SummaryRefused)]
    cleared = [e for e in events if isinstance(e, ToolResultsCleared)]
    expected = {
        "summaries": len(summaries),
        "summary_tokens_saved": sum(e.replaced_tokens - e.tokens for e in summaries),
        "tool_result_clearings": len(cleared),
        "tool_results_cleared": sum(len(e.positions) for e in cleared),
        "tool_result_tokens_saved": sum(e.tokens_before - e.tokens_after for e in cleared),
    }
    for reason in SummaryRefusal:
        expected[f"summary_refusals_{reason.value}"] = sum(e.reason is reason for e in refused)
    return expected


def test_i24_counters_count_compactions_and_tokens_saved(
    events: tuple[DomainEvent, ...],
) -> None:
    counters = fold_counters(events)
    expected = _expected(events)
    assert expected == {name: getattr(counters, name) for name in expected}
    assert (3, 1, 9) == (counters.summaries, counters.summary_refusals_raised,
                         counters.tool_result_clearings)
    assert counters.summary_tokens_saved > 0
    assert counters.tool_result_tokens_saved > 0
    assert 1 == counters.summary_refusals
    assert {"raised": 1} == {k: n for k, n in counters.summary_refusals_by_reason().items() if n}
    assert counters.compaction_tokens_saved == (
        expected["summary_tokens_saved"] + expected["tool_result_tokens_saved"])


@pytest.fixture(params=SHARED_BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    with fresh_target(request.param, tmp_path) as fresh:
        yield fresh


def test_i24_analytics_count_compactions_and_old_tables_gain_the_columns(
    target: Target,
) -> None:
    """The tables count what the fold counts; tables made before the compaction counters get
    them on open, every row and count kept, and count the events applied from then on."""
    first = record(target.url)
    with tl.open_store(target.url) as store:
        events = store.events_of(first)
        with Analytics(store.backend) as analytics:
            analytics.catch_up()
            (row,) = analytics.session_stats()
            assert _expected(events) == {c: row[c] for c in COMPACTION_COLUMNS}
            totals = analytics.totals()
            assert all(totals[c] == row[c] for c in COMPACTION_COLUMNS)
            before = {k: v for k, v in row.items() if k not in COMPACTION_COLUMNS}
        # As a version without the compaction counters left its tables.
        for table in ("tl_session_stats", "tl_route_stats"):
            for column in COMPACTION_COLUMNS:
                target.query(f"ALTER TABLE {table} DROP COLUMN {column}")
        second = record(target.url)
        with Analytics(store.backend) as analytics:
            (old,) = [r for r in analytics.session_stats() if r["session_id"] == first]
            assert before == {k: v for k, v in old.items() if k not in COMPACTION_COLUMNS}
            assert all(0 == old[c] for c in COMPACTION_COLUMNS)  # applied before: not counted
            analytics.catch_up()
            rows = {r["session_id"]: r for r in analytics.session_stats()}
            assert before == {k: v for k, v in rows[first].items()
                              if k not in COMPACTION_COLUMNS}
            new = store.events_of(second)
            assert _expected(new) == {c: rows[second][c] for c in COMPACTION_COLUMNS}
            (route,) = analytics.route_stats()
            assert route["summaries"] == _expected(new)["summaries"]
        with Analytics(store.backend) as again:  # a second open changes nothing
            assert rows == {r["session_id"]: r for r in again.session_stats()}


def test_i24_what_if_run_with_a_passed_summarizer_passes_verify(
    events: tuple[DomainEvent, ...],
) -> None:
    """The what-if run's own events, stored as a session, are explained by their log (C6):
    the passed summarizer's ranges and digests are those of the turns its trims dropped."""
    run = replay_what_if(events, SMALLER, summarizer=Counting())
    assert any(isinstance(e, TurnsSummarized) and e.summarizer == "counting-v2"
               for e in run.what_if)
    with tl.open_store("memory://") as store:
        session_id = run.what_if[0].originator_id
        _, chain = store.backend.head(session_id)  # the chain before version 1
        store.backend.append(session_id, list(run.what_if), prev_chain=chain)
        assert () == verify(store.backend).violations


def test_i24_analytics_openers_racing_to_add_the_columns_all_succeed(target: Target) -> None:
    """Several openers of tables without the compaction counters, at once: each open
    succeeds (a loser of the race retries), and the rows keep their counts."""
    record(target.url)
    with tl.open_store(target.url) as store:
        with Analytics(store.backend) as analytics:
            analytics.catch_up()
            before = analytics.session_stats()
        for table in ("tl_session_stats", "tl_route_stats"):
            for column in COMPACTION_COLUMNS:
                target.query(f"ALTER TABLE {table} DROP COLUMN {column}")
        start = threading.Barrier(4)
        errors: list[BaseException] = []

        def open_analytics() -> None:
            with tl.open_store(target.url) as own:
                start.wait(10)
                try:
                    Analytics(own.backend).close()
                except BaseException as error:  # reported below
                    errors.append(error)

        threads = [threading.Thread(target=open_analytics) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert [] == errors
        with Analytics(store.backend) as analytics:
            analytics.catch_up()  # nothing new: the rows stay, their compaction counters at 0
            after = analytics.session_stats()
    assert [{k: v for k, v in row.items() if k not in COMPACTION_COLUMNS} for row in before] == [
        {k: v for k, v in row.items() if k not in COMPACTION_COLUMNS} for row in after]
    assert all(row[c] == 0 for row in after for c in COMPACTION_COLUMNS)
