"""``turnledger stats`` and ``projections run [--follow]`` (E7).

The analytics counters are checked against the session's own audit timeline (``replay --json``),
an independent fold over the same events, and the tables are read with plain SQL. A follower
(``--follow``) runs as a subprocess, stopped by a signal; the other commands run through the
CLI's ``main`` in this process.

Behind a writer holding the store's lock (issue 33, point 5): a child process holds the lock the
analytics need to write — SQLite's write lock (``BEGIN IMMEDIATE`` on a connection kept open),
PostgreSQL's row lock on the tracking row (a follower in the middle of a batch) — while the
command runs as a subprocess (with a timeout, beside an unhindered run that measures its
start-up) with a small ``lock_timeout`` in its URL. A wait ends within about twice the limit
(ADR-0021), its message names the limit and how to raise it, a busy store exits 3 (not 2, "bad
usage"), and ``stats`` answers from what is committed.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.backends import PG_CONNINFO, Target

from .conftest import TRANSCRIPTS, Cli, clean_env, describe

FOLLOW_TIMEOUT = 30.0  # seconds for the follower to start, apply, and stop


def _expected_counters(timeline: list[dict[str, Any]]) -> dict[str, int]:
    """The analytics counters of one session, counted from its replay timeline."""
    types = Counter(entry["type"] for entry in timeline)
    trims = [entry["data"] for entry in timeline if entry["type"] == "TrimDecided"]
    return {
        "events": len(timeline),
        "appends": types["MessageAppended"],
        "requests_prepared": types["RequestPrepared"],
        "requests_rejected": types["RequestRejected"],
        "overflow_recoveries": types["OverflowRecovered"],
        "trims_token_budget": sum(t["reason"] == "token_budget" for t in trims),
        "trims_turn_limit": sum(t["reason"] == "turn_limit" for t in trims),
        "messages_dropped": sum(t["dropped_messages"] for t in trims),
        "tokens_dropped": sum(t["tokens_before"] - t["tokens_after"] for t in trims),
    }


def test_e7_stats_counters_match_the_recorded_events(cli: Cli) -> None:
    """stats --json counts, per session and in total, what the demo and an import recorded."""
    demo_id, _ = cli.demo()
    imported = cli.import_fixture("openai")

    stats = cli.json("stats", "--json")

    rows = {row["session_id"]: row for row in stats["sessions"]}
    assert {demo_id, *imported} == set(rows)
    expected = _expected_counters(cli.json("replay", demo_id, "--json"))
    assert expected == {key: rows[demo_id][key] for key in expected}
    assert expected["trims_token_budget"] > 0
    assert expected["trims_turn_limit"] > 0
    assert [3, 7, 2, 5, 2] == [rows[i]["appends"] for i in imported]
    assert all(rows[i]["trims_token_budget"] + rows[i]["trims_turn_limit"] == 0 for i in imported)
    totals = stats["totals"]
    assert (6, expected["trims_token_budget"], expected["appends"] + 19) == (
        totals["sessions"], totals["trims_token_budget"], totals["appends"]
    )
    assert sum(cli.event_counts().values()) == totals["events"]
    text = cli.ok("stats")
    assert ["per session", "per route"] == [
        line for line in text.splitlines() if line.startswith("per ")
    ]
    assert "totals: appends " in text


def test_e7_projections_run_applies_new_events_exactly_once(cli: Cli) -> None:
    """projections run applies the events the tables lack, then nothing the second time."""
    demo_id, _ = cli.demo()  # the demo brings the tables up to date itself
    imported = cli.import_fixture("openai")
    counts = cli.event_counts()
    new_events = sum(counts[i] for i in imported)

    assert [(demo_id,)] == cli.target.query("SELECT session_id FROM tl_session_stats")
    assert f"applied {new_events:,} events\n" == cli.ok("projections", "run")
    assert "applied 0 events\n" == cli.ok("projections", "run")
    assert counts == dict(cli.target.query("SELECT session_id, events FROM tl_session_stats"))


class _Pump:
    """Collects a stream's lines on a daemon thread, so waiting for one never blocks forever."""

    def __init__(self, stream: Any) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self.thread.start()

    def _run(self, stream: Any) -> None:
        for line in stream:
            self.lines.put(line)

    def wait_for(self, prefix: str, deadline: float) -> None:
        """Block until a line starting with ``prefix`` arrives (queue.Empty at the deadline)."""
        while True:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            self.seen.append(line)
            if line.startswith(prefix):
                return

    def rest(self, timeout: float) -> list[str]:
        """Every line seen, once the stream has ended."""
        self.thread.join(timeout)
        while not self.lines.empty():
            self.seen.append(self.lines.get_nowait())
        return self.seen


def test_e7_projections_follow_keeps_tables_updated_until_sigterm(cli: Cli) -> None:
    """projections run --follow applies events written while it runs; SIGTERM stops it, exit 0."""
    _follow_import_then_stop(cli, signal.SIGTERM)


def test_e7_projections_follow_stops_on_sigint_like_ctrl_c(sqlite_cli: Cli) -> None:
    """projections run --follow applies events written while it runs; SIGINT stops it, exit 0."""
    _follow_import_then_stop(sqlite_cli, signal.SIGINT)


def _follow_import_then_stop(cli: Cli, stop_signal: signal.Signals) -> None:
    """Start a follower, import while it runs, wait for its tables, signal it, check its exit."""
    cli.demo()
    follower = subprocess.Popen(
        cli.argv("projections", "run", "--follow", "--interval", "0.1"),
        cwd=cli.cwd, env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, encoding="utf-8",
    )
    try:
        deadline = time.monotonic() + FOLLOW_TIMEOUT
        stdout = _Pump(follower.stdout)
        stdout.wait_for("following new events", deadline)

        result = cli.run("import", TRANSCRIPTS / "anthropic.jsonl", "--format", "anthropic")
        assert 2 == result.returncode  # its line 4 is malformed (bad input, DECISIONS 10)
        expected = cli.event_counts()
        applied: dict[str, int] = {}
        while expected != applied and time.monotonic() < deadline:
            time.sleep(0.1)
            applied = dict(cli.target.query("SELECT session_id, events FROM tl_session_stats"))
        assert expected == applied  # the follower, not `stats`, brought the tables up to date

        follower.send_signal(stop_signal)
        returncode = follower.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.stderr is not None
    assert (0, "") == (returncode, follower.stderr.read())
    assert "stopped\n" == stdout.rest(timeout=5.0)[-1]


LONG_LOG = (20, 250)
"""Conversations and messages each: about ten batches of 500 events to catch up on."""


def _long_log(cli: Cli) -> int:
    """Import a log that takes several batches to catch up on; its number of events."""
    path = cli.cwd / "long.jsonl"
    conversations, messages = LONG_LOG
    with path.open("w", encoding="utf-8") as out:
        for c in range(conversations):
            turn = [{"role": ("user", "assistant")[m % 2], "content": f"c{c} m{m}"}
                    for m in range(messages)]
            out.write(json.dumps(turn) + "\n")
    cli.ok("import", path, "--format", "openai")
    ((events,),) = cli.target.query("SELECT count(*) FROM stored_events")
    return int(events)


def _tracked(cli: Cli) -> int:
    """The analytics' tracking position (0 until the follower has created its tables)."""
    try:
        found = cli.target.query("SELECT position FROM tl_tracking")
    except Exception as error:  # sqlite3 or psycopg: the table does not exist yet
        if "tl_tracking" not in str(error):
            raise
        return 0
    return int(found[0][0]) if found else 0


def test_i19_p7_projections_follow_ends_its_batch_on_sigterm_during_the_catch_up(
    cli: Cli,
) -> None:
    """SIGTERM while --follow still catches up: the batch in progress is applied, exit 0."""
    events = _long_log(cli)
    follower = subprocess.Popen(
        cli.argv("projections", "run", "--follow", "--interval", "0.1"),
        cwd=cli.cwd, env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, encoding="utf-8",
    )
    try:
        deadline = time.monotonic() + FOLLOW_TIMEOUT
        while _tracked(cli) == 0 and follower.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)  # until its first batch is committed
        follower.send_signal(signal.SIGTERM)
        stdout, stderr = follower.communicate(timeout=FOLLOW_TIMEOUT)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    position = _tracked(cli)
    ((counted,),) = cli.target.query("SELECT coalesce(sum(events), 0) FROM tl_session_stats")
    log_id = "rowid" if cli.target.kind == "sqlite" else "notification_id"  # its log order
    ((logged,),) = cli.target.query(
        f"SELECT count(*) FROM stored_events WHERE {log_id} <= {cli.target.mark()}", position
    )
    assert (0, "", ["stopped"]) == (follower.returncode, stderr, stdout.splitlines()[-1:])
    assert (True, logged) == (0 < position <= events, counted)


# --- behind a writer holding the store's lock (issue 33, point 5) --------------------------

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
    result = cli.spawn(*args, timeout=HELD_TIMEOUT)
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
