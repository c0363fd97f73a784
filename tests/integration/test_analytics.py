"""The analytics read models (E7): counters, tracking, exactly-once under SIGKILL.

Every test runs on a fresh database of each backend kind (conftest.py's ``target``: memory,
SQLite, PostgreSQL — which skips when the server does not answer, or fails with
``TURNLEDGER_REQUIRE_POSTGRES=1``). A memory store's tables live in a private in-memory SQLite
database, so the tests that need a second process or connection run on SQLite and PostgreSQL
only (``SHARED``).

Token numbers come from the R20 estimate: a 36-byte message costs ceil(36 / 4) + 4 = 13, a
400-byte one 104, the breadcrumb 17.
"""

from __future__ import annotations

import contextlib
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import turnledger as tl
from tests.backends import SHARED_BACKENDS, Target
from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.errors import ContextWindowExceeded
from turnledger.domain.events import MessageAppended
from turnledger.domain.messages import (
    AssistantToolCalls,
    ChatMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.projections.analytics import (
    COMPACTION_COLUMNS,
    ROUTE_STATS_COLUMNS,
    SESSION_STATS_COLUMNS,
    USAGE_COLUMNS,
    Analytics,
)
from turnledger.store.backend import StoreUnavailable
from turnledger.store.session import Store, open_store

S = ChatMessage.system
U = ChatMessage.user
A = ChatMessage.assistant

WIDE = ProviderProfile("wide", "w-1", 10_000)
NARROW = ProviderProfile("narrow", "n-1", 60)
CHILD = Path(__file__).with_name("analytics_follower_child.py")


# --- stores (the `target` fixture of conftest.py: a fresh database per backend kind) ---------

SHARED = pytest.mark.parametrize("target", SHARED_BACKENDS, indirect=True)
"""Only the databases several processes can open (a memory store lives in one process)."""


@pytest.fixture
def store(target: Target) -> Iterator[Store]:
    with open_store(target.url) as opened:
        yield opened


# --- the scripted sessions ------------------------------------------------------------------

def _msg(kind: Any, char: str) -> ChatMessage:
    return kind(char * 36)  # 13 tokens


def _script(store: Store) -> tuple[str, str]:
    """Two sessions whose counters are computed by hand below; returns their ids.

    Session A (structured, turn limit 2) starts on wide (window 10,000, budget 10,000), then
    switches to narrow (window 60, budget 60). Session B is a legacy session, turn limit 1.
    The comment after each command lists the versions of the events it records.
    """
    a = store.start_session(
        profile=RuntimeProfile(max_history_messages=2),
        providers=[WIDE, NARROW],
        route=Route("wide", "w-1"),
    )  # 1 SessionStarted, 2 RouteSelected (wide)
    a.append(_msg(S, "s"))  # 3
    a.append(_msg(U, "a"))  # 4
    a.append(_msg(A, "b"))  # 5
    a.append(_msg(U, "c"))  # 6
    a.append(_msg(A, "d"))  # 7
    # 8, then turn limit: 3 turns > 2. 9 TrimDecided drops U1 A1 (2 messages) and costs
    # 13 + 5*13 = 78 -> 13 + 17 + 3*13 = 69 (9 tokens); 10 breadcrumb, 11 HistoryTrimmed.
    a.append(_msg(U, "e"))
    a.prepare_request()  # 12 RequestPrepared, 69 of 10,000
    a.select_route(Route("narrow", "n-1"))  # 13 RouteSelected (narrow)
    # Budget 60 < 69: 14 TrimDecided drops U2 A2: 69 -> 43 (26 tokens); 15, 16;
    # 17 RequestPrepared, 43 of 60.
    a.prepare_request()
    # One turn left: 18 OverflowReported, 19 OverflowUnrecoverable.
    assert not a.recover_from_overflow("maximum context length exceeded")
    a.append(_msg(A, "f"))  # 20
    # 21, then turn limit (conversation view: U2 U3 U4): 22 TrimDecided drops U2 A2:
    # 13 + 17 + 5*13 = 95 -> 69 (26 tokens); 23, 24.
    a.append(_msg(U, "g"))
    a.append(_msg(A, "h"))  # 25
    # Estimate 82, target 54: 26 OverflowReported; 27 TrimDecided drops U3 A3: 82 -> 56
    # (26 tokens; the newest turn alone is still over, R6); 28, 29; 30 OverflowRecovered.
    assert a.recover_from_overflow("maximum context length exceeded")
    # 31 (104 tokens), then turn limit: 32 TrimDecided drops U3 A3: 186 -> 160 (26 tokens);
    # 33, 34.
    a.append(U("x" * 400))
    # Budget: 35 TrimDecided drops U4 A4: 160 -> 134 (26 tokens); 36, 37; then 134 > 60:
    # 38 RequestRejected, 134 of 60.
    with pytest.raises(ContextWindowExceeded):
        a.prepare_request()
    a.append(AssistantToolCalls(None, (ToolCall("c1", "lookup", "{}"),)))  # 39
    store.restore(a.id)  # 40 OrphansSwept: the call has no result, 1 message removed

    b = store.start_session(
        profile=RuntimeProfile(max_history_messages=1),
        providers=[WIDE, NARROW],
        route=Route("wide", "w-1"),
        legacy=True,
    )  # 1, 2 RouteSelected (wide)
    b.append(_msg(U, "i"))  # 3
    b.append(_msg(A, "j"))  # 4
    # 5, then the legacy turn limit: 6 TrimDecided only (R34) drops U1 A1: 39 -> 13.
    b.append(_msg(U, "k"))
    b.prepare_request()  # 7 RequestPrepared, 13 of 10,000
    return a.id, b.id


def _zero(columns: tuple[str, ...]) -> dict[str, Any]:
    return dict.fromkeys(columns, 0)


def _expected_sessions(a: str, b: str, store: Store) -> list[dict[str, Any]]:
    def last_at(session_id: str) -> str:
        events = store.backend.read(uuid.UUID(session_id))
        return events[-1].timestamp.isoformat(timespec="microseconds")

    row_a = {
        **_zero(SESSION_STATS_COLUMNS),
        "session_id": a, "provider": "narrow", "model": "n-1", "legacy": False,
        "events": 40, "appends": 11, "trims_token_budget": 3, "trims_turn_limit": 3,
        "messages_dropped": 12, "tokens_dropped": 9 + 5 * 26, "requests_prepared": 2,
        "requests_rejected": 1, "overflow_recoveries": 1, "overflows_unrecoverable": 1,
        "orphan_sweeps": 1, "orphans_removed": 1, "peak_estimated_tokens": 134,
        "peak_window": 60, "last_event_at": last_at(a),
    }
    row_b = {
        **_zero(SESSION_STATS_COLUMNS),
        "session_id": b, "provider": "wide", "model": "w-1", "legacy": True,
        "events": 7, "appends": 3, "trims_turn_limit": 1, "messages_dropped": 2,
        "tokens_dropped": 26, "requests_prepared": 1, "peak_estimated_tokens": 13,
        "peak_window": 10_000, "last_event_at": last_at(b),
    }
    return [row_a, row_b]


def _expected_routes(sessions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    narrow = {
        **_zero(ROUTE_STATS_COLUMNS),
        "provider": "narrow", "model": "n-1", "selections": 1,
        "events": 28, "appends": 5, "trims_token_budget": 3, "trims_turn_limit": 2,
        "messages_dropped": 10, "tokens_dropped": 5 * 26, "requests_prepared": 1,
        "requests_rejected": 1, "overflow_recoveries": 1, "overflows_unrecoverable": 1,
        "orphan_sweeps": 1, "orphans_removed": 1, "peak_estimated_tokens": 134,
        "peak_window": 60, "last_event_at": sessions[0]["last_event_at"],
    }
    wide = {
        **_zero(ROUTE_STATS_COLUMNS),
        "provider": "wide", "model": "w-1", "selections": 2,
        "events": 12 + 7, "appends": 6 + 3, "trims_turn_limit": 1 + 1,
        "messages_dropped": 2 + 2, "tokens_dropped": 9 + 26, "requests_prepared": 1 + 1,
        "peak_estimated_tokens": 69, "peak_window": 10_000,
        "last_event_at": sessions[1]["last_event_at"],
    }
    return [narrow, wide]


# --- counters -------------------------------------------------------------------------------

def test_e7_counters_of_a_scripted_session_match_hand_computed_values(store: Store) -> None:
    """Trims per reason, tokens dropped, rejections, overflows, sweeps: per session and route."""
    a, b = _script(store)
    with Analytics(store.backend) as analytics:
        applied = analytics.catch_up(batch_size=4)
        sessions = _expected_sessions(a, b, store)
        assert 47 == applied
        assert sessions == analytics.session_stats()
        assert _expected_routes(sessions) == analytics.route_stats()


def test_e7_totals_sum_the_sessions(store: Store) -> None:
    """Store-wide totals add up every session; the peak is the largest request."""
    _script(store)
    with Analytics(store.backend) as analytics:
        analytics.catch_up()
        expected = {
            "position": store.backend.max_notification_id(), "sessions": 2,
            "legacy_sessions": 1, "routes": 2, "events": 47, "appends": 14,
            "trims_token_budget": 3, "trims_turn_limit": 4, "messages_dropped": 14,
            "tokens_dropped": 165, "requests_prepared": 3, "requests_rejected": 1,
            "overflow_recoveries": 1, "overflows_unrecoverable": 1, "orphan_sweeps": 1,
            "orphans_removed": 1, "peak_estimated_tokens": 134,
            **dict.fromkeys(COMPACTION_COLUMNS, 0),  # no compaction in this script
            **dict.fromkeys(USAGE_COLUMNS, 0),  # no usage recorded either (issue 35)
        }
        assert expected == analytics.totals()


def test_e7_empty_store_has_empty_tables(store: Store) -> None:
    """Before any event: no rows, zero totals, position 0."""
    with Analytics(store.backend) as analytics:
        assert 0 == analytics.catch_up()
        assert ([], [], 0) == (analytics.session_stats(), analytics.route_stats(),
                               analytics.position())
        assert {"position": 0, "sessions": 0, "routes": 0} == {
            k: analytics.totals()[k] for k in ("position", "sessions", "routes")
        }


# --- tracking -------------------------------------------------------------------------------

def test_e7_catch_up_applies_only_new_events_and_reports_progress(store: Store) -> None:
    """A second catch-up applies nothing; later events alone are applied; progress climbs."""
    session = store.start_session(providers=[WIDE])
    for i in range(5):
        session.append(U(f"question {i}"))
    seen: list[tuple[int, int]] = []
    with Analytics(store.backend) as analytics:
        head = store.backend.max_notification_id()
        assert 7 == analytics.catch_up(batch_size=3, progress=lambda p, h: seen.append((p, h)))
        assert [(3, head), (6, head), (7, head)] == seen
        assert 0 == analytics.catch_up()
        session.append(A("answer"))
        assert 1 == analytics.catch_up()
        assert 6 == analytics.session_stats()[0]["appends"]


def test_e7_stop_after_bounds_one_catch_up(store: Store) -> None:
    """``stop_after`` applies at most that many events; the next call goes on from there."""
    session = store.start_session(providers=[WIDE])
    for i in range(8):
        session.append(U(f"q{i}"))
    with Analytics(store.backend) as analytics:
        assert 5 == analytics.catch_up(batch_size=2, stop_after=5)
        assert 5 == analytics.session_stats()[0]["events"]
        assert 5 == analytics.catch_up(batch_size=2)
        assert 10 == analytics.session_stats()[0]["events"]


def test_e7_catch_up_ends_at_the_log_as_it_was_when_it_began(store: Store) -> None:
    """Issue 33 (`forget` under writers): a writer that never pauses cannot keep a catch-up
    running. Events committed while it runs (here, 2 per batch it applies) are left to the next
    call; before, the call chased them (a `forget` waited on it for a minute in CI)."""
    session = store.start_session(providers=[WIDE])
    for i in range(10):
        session.append(U(f"before {i}"))
    before = store.backend.max_notification_id()
    written: list[int] = []

    def keep_writing(position: int, head: int) -> None:
        if len(written) < 400:  # bounded, so the old behaviour fails instead of hanging
            session.append(U(f"during {len(written)}"))
            session.append(A(f"answer {len(written)}"))
            written.append(position)

    with Analytics(store.backend) as analytics:
        assert before == analytics.catch_up(batch_size=2, progress=keep_writing)
        assert before == analytics.position()
        assert 2 * len(written) == analytics.catch_up()
        assert 10 + 2 * len(written) == analytics.session_stats()[0]["appends"]


def test_e7_bad_arguments_are_refused(store: Store) -> None:
    """A batch size below 1 or a negative bound is a ValueError, not a silent no-op."""
    with Analytics(store.backend) as analytics:
        with pytest.raises(ValueError, match="batch_size"):
            analytics.catch_up(batch_size=0)
        with pytest.raises(ValueError, match="stop_after"):
            analytics.catch_up(stop_after=-1)


def test_e7_closed_analytics_raise_store_unavailable(store: Store) -> None:
    """After close(), queries raise StoreUnavailable (our error, not a driver's)."""
    analytics = Analytics(store.backend)
    analytics.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        analytics.session_stats()


def test_e7_follow_keeps_the_tables_up_to_date_until_stopped(store: Store) -> None:
    """follow() applies events recorded while it runs and returns once ``stop`` is set."""
    session = store.start_session(providers=[WIDE])
    stop = threading.Event()
    result: list[int] = []
    with Analytics(store.backend) as analytics:
        worker = threading.Thread(
            target=lambda: result.append(analytics.follow(poll_interval=0.02, stop=stop))
        )
        worker.start()
        try:
            for i in range(10):
                session.append(U(f"q{i}"))
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                rows = analytics.session_stats()
                if rows and rows[0]["appends"] == 10:
                    break
                time.sleep(0.02)
        finally:
            stop.set()
            worker.join(timeout=20)
        assert not worker.is_alive()
        assert [12] == result
        assert 10 == analytics.session_stats()[0]["appends"]


def test_e7_rebuild_recomputes_from_scratch(store: Store) -> None:
    """rebuild() drops tampered rows and recomputes every table from the log."""
    _script(store)
    with Analytics(store.backend) as analytics:
        analytics.catch_up()
        before = (analytics.session_stats(), analytics.route_stats(), analytics.totals())
        assert 47 == analytics.rebuild(batch_size=7)
        assert before == (analytics.session_stats(), analytics.route_stats(), analytics.totals())


def test_e7_tables_are_plain_sql_in_the_store_database(tmp_path: Path) -> None:
    """Anyone can query the SQLite file: trims per reason and tokens dropped per route."""
    path = tmp_path / "store.db"
    with open_store(f"sqlite:///{path}") as store:
        _script(store)
        with Analytics(store.backend) as analytics:
            analytics.catch_up()
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT provider, model, trims_token_budget, trims_turn_limit, tokens_dropped "
            "FROM tl_route_stats ORDER BY tokens_dropped DESC"
        ).fetchall()
    assert [("narrow", "n-1", 3, 2, 130), ("wide", "w-1", 0, 2, 35)] == rows


@SHARED
def test_e7_two_followers_apply_each_event_once(store: Store) -> None:
    """Two followers racing on one database: the loser of each batch rolls back and re-reads."""
    _populate(store, sessions=4, rounds=15)
    errors: list[BaseException] = []

    def follow_once() -> None:
        try:
            with Analytics(store.backend) as follower:
                follower.catch_up(batch_size=1)
        except BaseException as error:  # reported below, not lost in the thread
            errors.append(error)

    with Analytics(store.backend) as analytics:
        workers = [threading.Thread(target=follow_once) for _ in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
        assert [] == errors
        assert not any(worker.is_alive() for worker in workers)
        assert_same_as_rebuild(analytics, store)


# --- exactly once under SIGKILL ---------------------------------------------------------------

def _populate(store: Store, *, sessions: int, rounds: int) -> None:
    """Interleaved sessions with tool loops, trims, rejections, overflows and route switches."""
    rng = random.Random(7)
    live = [
        store.start_session(
            profile=RuntimeProfile(max_history_messages=3, max_context_tokens=400),
            providers=[WIDE, NARROW],
            route=Route("wide", "w-1"),
            legacy=(k % 3 == 2),
        )
        for k in range(sessions)
    ]
    for r in range(rounds):
        for k, session in enumerate(live):
            session.append(U(f"round {r} question " + "q" * rng.randrange(0, 300)))
            if not session.legacy and rng.random() < 0.5:
                call = ToolCall(f"c{r}-{k}", "search", "{}")
                session.append(AssistantToolCalls("looking", (call,)))
                session.append(ToolResults((ToolResult(call.id, "r" * rng.randrange(0, 200)),)))
            session.append(A("answer " + "a" * rng.randrange(0, 200)))
            if rng.random() < 0.15:
                other = NARROW if session.route.provider == "wide" else WIDE
                session.select_route(Route(other.name, other.model))
            with contextlib.suppress(ContextWindowExceeded):  # R18 rejections are data here
                session.prepare_request()
            if rng.random() < 0.1:
                session.recover_from_overflow("prompt is too long")
    for session in live[:2]:
        session.append(AssistantToolCalls(None, (ToolCall("dangling", "f", "{}"),)))
        store.restore(session.id)


def assert_same_as_rebuild(analytics: Analytics, store: Store) -> None:
    """The incrementally kept tables equal a from-scratch rebuild, and every event counts once."""
    every = store.backend.read_notifications(1, 1_000_000)
    appends = sum(isinstance(e, MessageAppended) for _, e in every)
    kept = (analytics.session_stats(), analytics.route_stats(), analytics.totals())
    assert (every[-1][0], len(every), appends) == (
        kept[2]["position"], kept[2]["events"], kept[2]["appends"]
    )
    analytics.rebuild()
    assert kept == (analytics.session_stats(), analytics.route_stats(), analytics.totals())


def _wait_for(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False


@pytest.mark.slow
@SHARED
def test_e7_follower_killed_at_random_moments_applies_each_event_exactly_once(
    target: Target, store: Store, tmp_path: Path
) -> None:
    """SIGKILL a catching-up child process >= 5 times: the tables still equal a rebuild."""
    _populate(store, sessions=10, rounds=60)
    head = store.backend.max_notification_id()
    assert head >= 2000
    rng = random.Random(20240)
    kills = 0
    with Analytics(store.backend) as analytics:
        last = analytics.position()
        for _ in range(20):  # bounded: at most 20 child runs
            if kills >= 6:
                break
            with (tmp_path / "child.err").open("ab") as err:
                child = subprocess.Popen(
                    [sys.executable, str(CHILD), target.url, "2"],
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
            try:
                moved = _wait_for(
                    lambda last=last, child=child: (
                        analytics.position() > last or child.poll() is not None
                    ),
                    60,
                )
                assert moved, "the child made no progress within 60 s"
                if child.poll() is None:
                    time.sleep(rng.uniform(0.0, 0.08))
                    child.send_signal(signal.SIGKILL)
                    kills += child.wait(timeout=30) == -signal.SIGKILL
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait(timeout=30)
            position = analytics.position()
            assert position >= last
            last = position
        assert kills >= 5, (tmp_path / "child.err").read_text()
        assert last < head, "the child finished before being killed often enough"
        final = subprocess.run(
            [sys.executable, str(CHILD), target.url, "50"],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert (0, head) == (final.returncode, analytics.position()), final.stderr
        assert_same_as_rebuild(analytics, store)



def test_e11_a_new_sqlite_stores_schema_stays_on_its_first_page(tmp_path: Path) -> None:
    """The analytics tables' DDL keeps ``sqlite_master`` on page 1 (a leaf): a schema that
    spills onto a page allocated later is lost when the file is truncated before it, and then
    nothing of the file can be salvaged (issue 35's six counters spilled it once)."""
    url = f"sqlite:///{tmp_path / 'schema.db'}"
    with tl.open_store(url) as store:
        session = store.start_session()
        session.append(tl.ChatMessage.user("hello"))
        with Analytics(store.backend) as analytics:
            analytics.catch_up()
    data = (tmp_path / "schema.db").read_bytes()
    assert 13 == data[100]  # page 1's b-tree header follows the 100-byte file header
