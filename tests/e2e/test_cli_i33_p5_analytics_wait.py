"""``stats`` and ``projections run`` behind a writer holding the store's lock (issue 33, point 5).

A child process holds the lock the analytics need to write — SQLite's write lock (``BEGIN
IMMEDIATE`` on a connection kept open), PostgreSQL's row lock on the tracking row (a follower
in the middle of a batch) — while the command runs as a subprocess with a small
``lock_timeout`` in its URL. A wait ends within about twice the limit (ADR-0021), its message
names the limit and how to raise it, a busy store exits 3 (not 2, "bad usage"), and ``stats``
answers from what is committed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.backends import PG_CONNINFO, Target

from .conftest import Cli, describe

LIMIT = 1.0
"""The URL's ``lock_timeout`` in seconds: small, and large enough beside the command's own
start-up (about a second on two shared cores) to tell one wait from three."""
EXIT_UNAVAILABLE = 3
HELD_TIMEOUT = 10.0
"""Seconds a command behind the held lock may take before the test gives up on it."""

HOLDER = """
import sys
kind, where = sys.argv[1], sys.argv[2]
if kind == "sqlite":
    import sqlite3
    connection = sqlite3.connect(where, isolation_level=None)
    connection.execute("BEGIN IMMEDIATE")
else:
    import psycopg
    connection = psycopg.connect(sys.argv[3])
    connection.execute(f'SET search_path TO "{where}"')
    connection.execute("UPDATE tl_tracking SET position = position WHERE name = 'analytics'")
print("locked", flush=True)
sys.stdin.readline()
connection.rollback() if kind != "sqlite" else connection.execute("ROLLBACK")
connection.close()
"""
"""A writer in another process: takes the lock, says so, holds it until stdin gets a line."""


@contextmanager
def _writer_holding_the_lock(target: Target) -> Iterator[None]:
    if target.sqlite_path is not None:
        argv = [sys.executable, "-c", HOLDER, "sqlite", str(target.sqlite_path)]
    else:
        assert target.pg_schema is not None
        argv = [sys.executable, "-c", HOLDER, "postgresql", target.pg_schema, PG_CONNINFO]
    holder = subprocess.Popen(argv, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        assert "locked" == holder.stdout.readline().strip()
        yield
    finally:
        holder.stdin.write("done\n")
        holder.stdin.close()
        holder.wait(timeout=30)


def _timed(cli: Cli, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = cli.run(*args, timeout=HELD_TIMEOUT)
    return result, time.monotonic() - started


def _store_with_unapplied_events(cli: Cli) -> tuple[dict[str, int], float]:
    """A store whose analytics tables exist but lack an import's events: the events each
    session recorded, and how long an unhindered ``stats --json`` takes on such a store (the
    command's start-up, which the bound is measured beyond)."""
    cli.demo()  # creates the tables and applies the demo's events
    cli.import_fixture("openai")
    _, baseline = _timed(cli, "sessions", "--json")  # same start-up; applies nothing
    return cli.event_counts(), baseline


def test_i33_p5_projections_run_behind_a_writer_waits_once_and_exits_unavailable(
    store: Target, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """projections run with events to apply, behind a writer holding the lock, gives up after
    one lock_timeout (within 2x), names the limit and how to raise it, and exits 3."""
    cli = _bounded_in(store, tmp_path)
    _, baseline = _store_with_unapplied_events(cli)
    with _writer_holding_the_lock(store):
        result, elapsed = _timed(cli, "projections", "run")
    message = result.stderr
    assert (EXIT_UNAVAILABLE, True, True) == (
        result.returncode, f"lock_timeout={LIMIT:g} s exceeded" in message,
        "raise lock_timeout= in the store URL" in message,
    ), describe(result)
    assert elapsed - baseline < 2 * LIMIT, (elapsed, baseline, describe(result))


def test_i33_p5_projections_run_on_current_tables_does_not_wait_for_a_writer(
    store: Target, tmp_path: Any
) -> None:
    """projections run on tables that exist and hold every event takes no write lock: behind
    a writer it applies nothing, at once, and exits 0."""
    cli = _bounded_in(store, tmp_path)
    cli.demo()
    _, baseline = _timed(cli, "sessions", "--json")
    with _writer_holding_the_lock(store):
        result, elapsed = _timed(cli, "projections", "run")
    assert (0, "applied 0 events\n") == (result.returncode, result.stdout), describe(result)
    assert elapsed - baseline < LIMIT, (elapsed, baseline)


def test_i33_p5_stats_behind_a_writer_answers_from_what_is_committed(
    store: Target, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """stats behind a writer holding the lock answers within 2x lock_timeout, exit 0, with
    every committed event counted, and says the tables were not updated (naming the limit)."""
    cli = _bounded_in(store, tmp_path)
    counts, baseline = _store_with_unapplied_events(cli)
    with _writer_holding_the_lock(store):
        result, elapsed = _timed(cli, "stats", "--json")
    assert 0 == result.returncode, describe(result)
    stats = json.loads(result.stdout)
    assert counts == {row["session_id"]: row["events"] for row in stats["sessions"]}
    assert sum(counts.values()) == stats["totals"]["events"]
    assert (True, True) == (
        "not updated" in result.stderr, f"lock_timeout={LIMIT:g} s" in result.stderr
    ), describe(result)
    assert elapsed - baseline < 2 * LIMIT, (elapsed, baseline, describe(result))
    # The tables were left as they were; a later stats brings them up to date.
    after = cli.json("stats", "--json")
    assert counts == {row["session_id"]: row["events"] for row in after["sessions"]}
    assert counts == dict(store.query("SELECT session_id, events FROM tl_session_stats"))


def _bounded_in(store: Target, directory: Any) -> Cli:
    joiner = "&" if "?" in store.url else "?"
    bounded = Target(store.kind, f"{store.url}{joiner}lock_timeout={LIMIT:g}",
                     store.sqlite_path, store.pg_schema)
    return Cli(bounded, directory)
