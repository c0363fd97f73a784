"""``turnledger stats`` and ``projections run [--follow]`` as subprocesses (E7).

The analytics counters are checked against the session's own audit timeline (``replay --json``),
an independent fold over the same events, and the tables are read with plain SQL.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from collections import Counter
from typing import Any

from .conftest import TRANSCRIPTS, Cli, clean_env

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
