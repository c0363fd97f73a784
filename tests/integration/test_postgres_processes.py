"""Several processes write one PostgreSQL store at once (E3, E8: runtimes on several machines).

Each test gets a fresh schema. Writer processes (pg_writer_child.py) are started, wait until
all of them are ready and then append together: four writers on four different sessions, and
four writers on ONE session through `retry_on_conflict` (the loser of a race reloads and
retries). Afterwards every append that returned is recorded exactly once, versions and
positions are contiguous, no trim decision is split, and each session restores (from a new
store object) to views equal to a fresh fold of its events.

Outcomes do not depend on timing: the retry bound given to the shared-session writers is
larger than the number of batches the other writers can commit (each lost attempt means one
more of their batches was committed after the loser's reload), so every append must succeed.
When PostgreSQL does not answer these tests skip with the reason, or fail when
``TURNLEDGER_REQUIRE_POSTGRES=1`` (conftest.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends import PG_CONNINFO, PG_URL, require_postgres
from tests.integration.pg_writer_child import (
    SHARED_PROFILE,
    commands_per_writer,
    message_identity,
)
from tests.integration.test_crash import assert_session_consistent
from turnledger.domain.events import DomainEvent, MessageAppended, TrimDecided, TrimReason
from turnledger.store.session import Store, open_store

pytestmark = pytest.mark.postgres

CHILD = Path(__file__).with_name("pg_writer_child.py")
WRITERS = 4
OWN_COUNT = 60
"""Appends per writer on its own session: 15 turns, trims of both kinds."""
SHARED_COUNT = 30
"""Appends per writer on the shared session."""
START_TIMEOUT = 30.0
RUN_TIMEOUT = 120.0
"""Seconds for all writers together; a hung writer fails the test instead of hanging it."""
_APPENDED = re.compile(r"APPENDED (\w+) (\d+)")
_DONE = re.compile(r"DONE commands=(\d+) attempts=(\d+)")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema (created by the store on first open), dropped afterwards."""
    require_postgres()
    import psycopg

    schema = f"tl_test_{uuid.uuid4().hex[:16]}"
    # lock_timeout: a writer stuck on the table lock fails instead of hanging the test.
    yield f"{PG_URL}?schema={schema}&pool_size=1&max_overflow=2&lock_timeout=20"
    with psycopg.connect(PG_CONNINFO, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class WriterRun:
    """The parsed output of one writer process."""

    def __init__(self, writer: str, stdout: str) -> None:
        self.writer = writer
        self.returned: list[int] = []
        self.commands = self.attempts = -1
        for line in stdout.splitlines():
            if appended := _APPENDED.fullmatch(line):
                assert writer == appended.group(1)
                self.returned.append(int(appended.group(2)))
            elif done := _DONE.fullmatch(line):
                self.commands, self.attempts = int(done.group(1)), int(done.group(2))


def _run_writers(
    url: str, tmp_path: Path, jobs: list[tuple[str, str]], mode: str, count: int, attempts: int
) -> list[WriterRun]:
    """Start one process per (session id, writer) job, release them together, collect output.

    The writers are started one after the other, each once the previous one has opened the
    store: opening a PostgreSQL store runs the library's DDL (``CREATE OR REPLACE FUNCTION``),
    and two processes doing that at the same moment can fail with "tuple concurrently updated"
    (a known open race, reported separately). The appends themselves all run together.
    """
    go = tmp_path / "go"
    started: list[tuple[str, subprocess.Popen[str]]] = []
    errors: dict[str, Path] = {}
    try:
        for session_id, writer in jobs:
            ready, errors[writer] = tmp_path / f"ready-{writer}", tmp_path / f"{writer}.err"
            with errors[writer].open("wb") as stderr:
                process = subprocess.Popen(
                    [sys.executable, str(CHILD), url, session_id, writer, str(count), mode,
                     str(ready), str(go), str(attempts)],
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                )
            started.append((writer, process))
            deadline = time.monotonic() + START_TIMEOUT
            while not ready.exists():
                if process.poll() is not None:
                    pytest.fail(f"writer {writer} exited early: {errors[writer].read_text()}")
                if time.monotonic() > deadline:
                    pytest.fail(f"writer {writer} was not ready within {START_TIMEOUT} s")
                time.sleep(0.005)
        go.touch()
        runs: list[WriterRun] = []
        deadline = time.monotonic() + RUN_TIMEOUT
        for writer, process in started:
            # Each writer prints ~2 KB: sequential reads cannot fill a pipe and block the rest.
            stdout, _ = process.communicate(timeout=max(deadline - time.monotonic(), 1.0))
            assert 0 == process.returncode, f"writer {writer}: {errors[writer].read_text()}"
            runs.append(WriterRun(writer, stdout))
        return runs
    finally:
        for _, process in started:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)


def _restore_and_check(store: Store, session_id: str) -> list[DomainEvent]:
    """Restore the session from the given (new) store; check the common invariants."""
    session = store.restore(session_id)
    events = session.events()
    assert_session_consistent(session, events, f"(session {session_id})")
    return events


def _identities(events: list[DomainEvent]) -> list[tuple[str, int]]:
    return [message_identity(e.message) for e in events if isinstance(e, MessageAppended)]


def test_e8_writers_on_different_sessions_in_parallel_lose_nothing(
    pg_url: str, tmp_path: Path
) -> None:
    """Four processes on four sessions: each session holds exactly its writer's appends."""
    with open_store(pg_url):
        pass  # create the tables once, before the writers open the schema together
    jobs = [(str(uuid.uuid4()), f"w{i}") for i in range(WRITERS)]
    started = time.monotonic()
    runs = _run_writers(pg_url, tmp_path, jobs, "own", OWN_COUNT, attempts=1)
    elapsed = time.monotonic() - started

    for run in runs:
        assert list(range(OWN_COUNT)) == run.returned
        assert commands_per_writer(OWN_COUNT) == run.commands
    with open_store(pg_url) as store:
        assert {session_id for session_id, _ in jobs} == set(store.sessions())
        for session_id, writer in jobs:
            events = _restore_and_check(store, session_id)
            assert [(writer, seq) for seq in range(OWN_COUNT)] == _identities(events)
            reasons = {e.reason for e in events if isinstance(e, TrimDecided)}
            assert {TrimReason.TURN_LIMIT, TrimReason.TOKEN_BUDGET} == reasons
    print(f"{WRITERS} writers x {OWN_COUNT} appends on separate sessions in {elapsed:.1f} s")


def test_e3_writers_on_one_session_in_parallel_retry_until_each_append_lands_once(
    pg_url: str, tmp_path: Path
) -> None:
    """Four processes on ONE session with retry_on_conflict: every append is recorded once."""
    with open_store(pg_url) as store:
        session_id = store.start_session(profile=SHARED_PROFILE).id
    jobs = [(session_id, f"w{i}") for i in range(WRITERS)]
    # Bound: every lost attempt of a command means another writer committed a batch after the
    # loser reloaded, so (their batches + 1) attempts always suffice; timing cannot break it.
    attempts = (WRITERS - 1) * commands_per_writer(SHARED_COUNT) + 1
    started = time.monotonic()
    runs = _run_writers(pg_url, tmp_path, jobs, "shared", SHARED_COUNT, attempts)
    elapsed = time.monotonic() - started

    returned: Counter[tuple[str, int]] = Counter()
    for run in runs:
        assert list(range(SHARED_COUNT)) == run.returned
        returned.update((run.writer, seq) for seq in run.returned)
    with open_store(pg_url) as store:
        events = _restore_and_check(store, session_id)
    recorded = _identities(events)
    assert WRITERS * SHARED_COUNT == len(recorded)  # MessageAppended == successful appends
    assert returned == Counter(recorded)  # each exactly once, nothing else
    for run in runs:  # each writer's appends keep their order in the one stream
        assert run.returned == [seq for writer, seq in recorded if writer == run.writer]
    assert any(isinstance(e, TrimDecided) for e in events)
    conflicts = sum(run.attempts - run.commands for run in runs)
    print(
        f"{WRITERS} writers x {SHARED_COUNT} appends on one session in {elapsed:.1f} s; "
        f"{conflicts} conflicts retried"
    )


OPEN_SCRIPT = (
    "import sys; from turnledger.store.session import open_store; open_store(sys.argv[1]).close()"
)


def test_e8_processes_opening_one_store_at_once_all_succeed(pg_url: str) -> None:
    """Six processes opening the same PostgreSQL store at the same moment all get it (E8)."""
    open_store(pg_url).close()  # the tables exist: the race is in the library's setup DDL
    failures: list[str] = []
    for _round in range(3):
        children = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN_SCRIPT, pg_url],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for _ in range(6)
        ]
        for child in children:
            _, err = child.communicate(timeout=60)
            if child.returncode:
                failures.append(err.decode(errors="replace").strip().splitlines()[-1])
    assert [] == failures
