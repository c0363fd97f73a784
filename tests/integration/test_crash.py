"""A session survives SIGKILL at random moments, on SQLite and PostgreSQL (E3, E5, E12).

A child process (crash_child.py) appends to one session in a loop — user turns, tool calls and
results, prepared requests, a turn limit of 2 and a 200-token budget, so trims are recorded all
the time — and prints the number of each message whose ``append`` returned. The parent kills it
with SIGKILL after a random delay (seeded; the seed is printed and named in every failure;
``TURNLEDGER_CRASH_SEED`` replays a sequence of delays), 24 times on SQLite and 12 on PostgreSQL
in the default suite (``benchmarks/crash.py`` runs the same loop 200 and 100 times, issue 9's
counts, and reports the figures), and after every kill
checks from a NEW store object that: the session restores; every message whose append returned
is recorded; versions and positions are contiguous; no trim decision is half written; the
restored views equal a fold of the events (the events new since the last kill are folded onto
the previous fold; every 20th kill and the last one read and fold the whole session anew). The
child then continues the same session.

The assertions hold whatever the timing; the delays only choose where the kills land (during
imports, restore, a batch of trim events, a snapshot, between a tool call and its result).
`crash_loop` is the loop itself, shared with the benchmark.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from tests.backends import SHARED_BACKENDS, fresh_target
from tests.integration.crash_child import message_seq
from turnledger.domain.errors import SessionNotFound
from turnledger.domain.events import (
    BreadcrumbInserted,
    DomainEvent,
    HistoryTrimmed,
    MessageAppended,
    TrimDecided,
    TrimReason,
)
from turnledger.domain.sweep import sweep_orphans
from turnledger.replay.timeline import FoldedState
from turnledger.store.session import Session, open_store

CHILD = Path(__file__).with_name("crash_child.py")
KILLS = {"sqlite": 24, "postgresql": 12}
"""Kills per test run by backend (the default suite; benchmarks/crash.py runs 200 and 100)."""
CHILD_LIFETIME = 30.0
"""Seconds after which a forgotten child exits on its own."""
WAIT_LIMIT = 20.0
"""Seconds a child may take to show progress before the test fails (never hangs)."""
LAST_RUN_APPENDS = 40
"""The last run appends this many messages before its kill: ten turns, both kinds of trim."""
_APPENDED = re.compile(r"APPENDED (\d+)\n")


class ChildRun:
    """One run of crash_child.py, its stdout read line by line on a thread."""

    def __init__(
        self, url: str, session_id: str, stderr_path: Path, *, per_request: bool = False
    ) -> None:
        extra = ["per-request"] if per_request else []
        with stderr_path.open("ab") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(CHILD), url, session_id, str(CHILD_LIFETIME), *extra],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.lines: list[str] = []
        self.ready = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        # Keep the newline: a line cut by the kill has none and proves nothing.
        for line in self.process.stdout:
            if line.startswith("READY "):
                self.ready = True
            self.lines.append(line)

    def returned(self) -> list[int]:
        """Sequence numbers of the messages whose append returned (complete lines only)."""
        return [int(m.group(1)) for m in map(_APPENDED.fullmatch, list(self.lines)) if m]

    def wait_until(self, condition: Callable[[ChildRun], bool]) -> None:
        """Wait until ``condition(self)``; fail when the child died or made no progress."""
        deadline = time.monotonic() + WAIT_LIMIT
        while not condition(self):
            if self.process.poll() is not None:
                return  # died on its own: kill_and_collect reports it with its stderr
            if time.monotonic() > deadline:
                raise AssertionError(f"the child made no progress within {WAIT_LIMIT} s")
            time.sleep(0.002)

    def kill_and_collect(self) -> int:
        """SIGKILL the child; return its exit status once its output is read to the end."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        status = self.process.wait(timeout=WAIT_LIMIT)
        self._reader.join(timeout=WAIT_LIMIT)
        assert not self._reader.is_alive(), "the child's stdout was not closed after the kill"
        return status


def _kill_moment(run: ChildRun, rng: random.Random, last: bool) -> None:
    """Sleep until a random moment of the child's life (chosen by ``rng``)."""
    if last:
        run.wait_until(lambda r: len(r.returned()) >= LAST_RUN_APPENDS)
        time.sleep(rng.uniform(0.0, 0.05))
    elif rng.random() < 0.25:
        # From the spawn: lands in imports, the restore (and its sweep) or the first appends.
        time.sleep(rng.uniform(0.0, 0.6))
    else:
        run.wait_until(lambda r: r.ready)
        time.sleep(rng.uniform(0.0, 0.15))


def _event_names(events: list[DomainEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


def assert_session_consistent(
    session: Session,
    events: list[DomainEvent],
    why: str,
    *,
    checked: int = 0,
    fold: FoldedState | None = None,
) -> FoldedState:
    """The invariants every recorded session keeps, whoever wrote it and however it stopped.

    ``events`` are the session's recorded events and ``session`` its restored object: versions
    and log positions are contiguous (E2), every trim decision was written whole with its
    breadcrumb and notice (E3, R31-R32; structured sessions), the restored views equal a fresh
    fold of the events (E4, E12) and hold no orphan after the restore's sweep (E5, R37).

    ``checked`` events at the head were checked before and ``fold`` is their fold: only the
    rest is checked and folded (the store is append-only; a full check passes neither).
    Returns the fold of every event.
    """
    assert list(range(1, len(events) + 1)) == [e.originator_version for e in events], why
    appended = [e for e in events if isinstance(e, MessageAppended)]
    assert list(range(len(appended))) == [e.position for e in appended], why

    for i in range(checked, len(events)):
        event = events[i]
        if isinstance(event, TrimDecided):
            following = events[i + 1 : i + 3]
            assert ["BreadcrumbInserted", "HistoryTrimmed"] == _event_names(following), (
                f"half-written trim decision at version {event.originator_version} {why}"
            )
            crumb, notice = following
            assert isinstance(crumb, BreadcrumbInserted)
            assert isinstance(notice, HistoryTrimmed)
            assert (event.view, event.first_kept_position) == (
                crumb.view, crumb.before_position
            ), why
            assert (event.dropped_messages, event.kept_turns, event.reason) == (
                notice.dropped_messages, notice.kept_turns, notice.reason
            ), why
        elif isinstance(event, BreadcrumbInserted | HistoryTrimmed):
            assert isinstance(events[i - 1], TrimDecided | BreadcrumbInserted), (
                f"{type(event).__name__} without its decision at version "
                f"{event.originator_version} {why}"
            )

    fresh = FoldedState() if fold is None else fold  # with the log: its full views read it
    for event in events[checked:]:
        fresh.fold(event)
    assert fresh.chat_view() == session.chat_view(), why
    assert fresh.conversation_view() == session.conversation_view(), why
    assert 0 == sweep_orphans(session.chat_view()).removed, why
    return fresh


@attrs.define
class _Checked:
    """What the kills so far proved: the events checked and their fold (E4)."""

    events: list[DomainEvent] = attrs.Factory(list)
    fold: FoldedState = attrs.Factory(FoldedState)


FULL_CHECK_EVERY = 20
"""Every this many kills (and after the last) the whole session is checked and folded anew."""


def _check_after_kill(
    url: str, session_id: str, returned: set[int], seed: int, checked: _Checked, full: bool
) -> None:
    """Every crash-safety invariant of one killed session, read through a new store object.

    Reads only the events after those already checked (``full``: all of them, folded anew).
    """
    why = f"(seed {seed})"
    with open_store(url) as store:
        try:
            session = store.restore(session_id)
        except SessionNotFound:
            # Only when the first run died before its SessionStarted committed.
            assert set() == returned, f"appends returned but the session is missing {why}"
            return
        known = 0 if full else len(checked.events)
        events = [*checked.events[:known], *session.events(after_version=known)]
        # With the store open: a session's full conversation view reads the log (ADR-0030).
        if full:
            checked.fold = assert_session_consistent(session, events, why)
        else:
            checked.fold = assert_session_consistent(
                session, events, why, checked=known, fold=checked.fold
            )
    checked.events = events
    # The child continues from the last recorded message: none lost, none written twice.
    recorded = [message_seq(e.message) for e in events if isinstance(e, MessageAppended)]
    assert list(range(len(recorded))) == recorded, why
    assert [] == sorted(returned - set(recorded)), f"returned appends missing {why}"


@attrs.frozen
class CrashFigures:
    """What one crash loop did: kills, appends acknowledged, and what was lost or duplicated."""

    kills: int
    silent: int
    """Kills that landed before any append of that run returned (imports, restore)."""
    acknowledged: int
    recorded: int
    lost: int
    """Acknowledged appends missing from the store at the end (must be 0)."""
    duplicated: int
    """Messages recorded more than once (must be 0)."""
    seconds: float
    events: tuple[DomainEvent, ...] = attrs.field(repr=False)
    integrity: str = "-"
    """SQLite's ``PRAGMA integrity_check`` of the file at the end ("-" on PostgreSQL)."""
    lister_errors: tuple[str, ...] = ()
    """What the listing processes of the per-request pattern could not do (each a line)."""


def crash_loop(
    url: str, kills: int, seed: int, workdir: Path, *, per_request: bool = False
) -> CrashFigures:
    """SIGKILL a writer of one session on ``url`` ``kills`` times, checking after every kill.

    ``per_request``: the writer also opens and closes another store object every fifth
    append and two processes open the store, list its sessions and close it, in a loop, the
    whole time (issue 19's "store opened per request"). Raises AssertionError (naming the
    seed) at the first broken invariant; the figures count what the final store holds.
    """
    rng = random.Random(seed)
    session_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    stderr_path = workdir / f"child-{seed}.err"
    returned: set[int] = set()
    done = silent = 0
    checked = _Checked()
    started = time.monotonic()
    with Listers(url, 2 if per_request else 0, workdir) as listers:
        for index in range(kills):
            run = ChildRun(url, session_id, stderr_path, per_request=per_request)
            try:
                _kill_moment(run, rng, last=index == kills - 1)
            finally:
                status = run.kill_and_collect()
            assert -signal.SIGKILL == status, (
                f"run {index} ended by itself (seed {seed}): {stderr_path.read_text()}"
            )
            done += 1
            this_run = run.returned()
            assert len(this_run) == len(set(this_run)), f"a number printed twice (seed {seed})"
            returned.update(this_run)
            silent += not this_run  # killed in imports, the restore or its first append
            full = index % FULL_CHECK_EVERY == FULL_CHECK_EVERY - 1 or index == kills - 1
            _check_after_kill(url, session_id, returned, seed, checked, full)
    events = checked.events
    recorded = [message_seq(e.message) for e in events if isinstance(e, MessageAppended)]
    return CrashFigures(
        kills=done,
        silent=silent,
        acknowledged=len(returned),
        recorded=len(recorded),
        lost=len(returned - set(recorded)),
        duplicated=len(recorded) - len(set(recorded)),
        seconds=time.monotonic() - started,
        events=tuple(events),
        integrity=sqlite_integrity(url),
        lister_errors=listers.errors,
    )


_LISTER = """\
import sys, time
import turnledger as tl
while True:
    try:
        with tl.open_store(sys.argv[1]) as store:
            store.sessions()
    except tl.TurnledgerError as error:
        print("ERROR", type(error).__name__, str(error).splitlines()[0][:300], flush=True)
    time.sleep(0.01)
"""


class Listers:
    """``count`` processes that open the store at ``url``, list its sessions and close it, in
    a loop, until the block ends; ``errors`` are the failures they printed."""

    def __init__(self, url: str, count: int, workdir: Path) -> None:
        self.url, self.count = url, count
        self.log = workdir / "listers.out"
        self.processes: list[subprocess.Popen[bytes]] = []
        self.errors: tuple[str, ...] = ()

    def __enter__(self) -> Listers:
        with self.log.open("ab") as out:
            self.processes = [
                subprocess.Popen([sys.executable, "-c", _LISTER, self.url], stdout=out,
                                 stderr=subprocess.STDOUT)
                for _ in range(self.count)
            ]
        return self

    def __exit__(self, *exc: object) -> None:
        died = [p.poll() for p in self.processes if p.poll() is not None]
        for process in self.processes:
            process.kill()
            process.wait(timeout=WAIT_LIMIT)
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        self.errors = tuple(line for line in text.splitlines() if line.startswith("ERROR"))
        if died and exc == (None, None, None):
            raise AssertionError(f"a listing process died (status {died}): {text[-2000:]}")


def sqlite_integrity(url: str) -> str:
    """``PRAGMA integrity_check`` of a ``sqlite:///`` store (through SQLite), else "-"."""
    if not url.startswith("sqlite:///"):
        return "-"
    import sqlite3

    path = url.removeprefix("sqlite:///").partition("?")[0]
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = connection.execute("PRAGMA integrity_check").fetchall()
    finally:
        connection.close()
    return "; ".join(str(row[0]) for row in rows)[:500]


def crash_seed() -> int:
    """``TURNLEDGER_CRASH_SEED`` when set (to replay a sequence of delays), else a random one."""
    return int(os.environ.get("TURNLEDGER_CRASH_SEED") or random.SystemRandom().getrandbits(32))


@pytest.mark.slow  # ~20 s; still part of the default run (nothing deselects `slow`)
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_e5_session_survives_sigkill_at_random_moments(kind: str, tmp_path: Path) -> None:
    """SIGKILL a writer 24 (SQLite) / 12 (PostgreSQL) times: nothing returned is lost or
    written twice, no decision half written."""
    seed = crash_seed()
    print(f"crash test seed: {seed} (TURNLEDGER_CRASH_SEED={seed} to replay the delays)")
    with fresh_target(kind, tmp_path) as target:
        figures = crash_loop(target.url, KILLS[kind], seed, tmp_path)
    kinds = Counter(type(e).__name__ for e in figures.events)
    reasons = {e.reason for e in figures.events if isinstance(e, TrimDecided)}
    print(f"{figures}; {dict(kinds)}")
    assert (KILLS[kind], 0, 0) == (figures.kills, figures.lost, figures.duplicated)
    assert figures.integrity in ("ok", "-")
    # The last run alone appended ten turns: both kinds of trim were recorded (R24, R27a).
    assert {TrimReason.TURN_LIMIT, TrimReason.TOKEN_BUDGET} <= reasons, f"seed {seed}"
    assert kinds["MessageAppended"] >= LAST_RUN_APPENDS


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_i19_p1_writer_killed_while_stores_are_opened_per_request(
    kind: str, tmp_path: Path
) -> None:
    """Issue 19 point 1 under kills: the writer opens and closes another store every fifth
    append and two processes open, list and close the store in a loop; nothing returned is
    lost or written twice and the file stays whole."""
    seed = crash_seed()
    print(f"crash test seed: {seed} (TURNLEDGER_CRASH_SEED={seed} to replay the delays)")
    kills = KILLS[kind] // 2
    with fresh_target(kind, tmp_path) as target:
        figures = crash_loop(target.url, kills, seed, tmp_path, per_request=True)
    print(figures)
    assert (kills, 0, 0) == (figures.kills, figures.lost, figures.duplicated)
    assert figures.integrity in ("ok", "-")
    assert [] == [e for e in figures.lister_errors if not _busy(e)]


def _busy(error: str) -> bool:
    """A listing that waited too long for a lock: not a fault of the file."""
    return "locked" in error or "busy" in error
