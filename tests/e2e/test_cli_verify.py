"""``turnledger verify`` as a subprocess: a healthy store passes, tampering is named (E2, E6, E11).

The tampering tests edit ``stored_events`` behind the CLI's back — with sqlite3 on the SQLite
file, and once with psycopg on the PostgreSQL schema — then expect exit 1 and a violation that
names the session and the event position. They work on the second line of ``openai.jsonl``:
events 1-2 start the session, 3-9 append its seven messages; version 6 is the `ToolResults`
holding ``4.2M`` (the ``du`` output).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import msgpack
import pytest

from tests.backends import Target
from turnledger.store.packing import open_envelope

from .conftest import Cli, describe

TOOL_RESULTS_VERSION = 6
MISSING_VERSION = 5


def _rewrite_state(
    target: Target, session_id: str, version: int, change: Callable[[bytes], bytes]
) -> None:
    """Replace the stored bytes of one record with ``change(bytes)`` (must differ)."""
    mark = target.mark()
    where = f"WHERE originator_id = {mark} AND originator_version = {mark}"
    key = (target.stored_id(session_id), version)
    ((state,),) = target.query(f"SELECT state FROM stored_events {where}", *key)
    edited = change(bytes(state))
    assert edited != bytes(state)
    target.query(f"UPDATE stored_events SET state = {mark} {where}", edited, *key)


def _violations(cli: Cli) -> list[dict[str, object]]:
    """The violations of `verify --json`, which must exit 1."""
    result = cli.run("verify", "--json")
    assert 1 == result.returncode, describe(result)
    report = json.loads(result.stdout)
    assert report["ok"] is False
    violations: list[dict[str, object]] = report["violations"]
    return violations


def test_e6_verify_exits_0_on_a_healthy_store_and_json_counts_everything(cli: Cli) -> None:
    """verify exits 0 after a demo and an import; --json counts every session and event."""
    demo_id, _ = cli.demo()
    cli.import_fixture("openai")
    counts = cli.event_counts()

    text = cli.ok("verify")
    report = cli.json("verify", "--json")
    one = cli.json("verify", demo_id, "--json")

    assert text.rstrip().endswith(": OK"), text
    assert (True, 6, sum(counts.values()), []) == (
        report["ok"], report["sessions_checked"], report["events_checked"], report["violations"]
    )
    assert (True, 1, counts[demo_id]) == (
        one["ok"], one["sessions_checked"], one["events_checked"]
    )


def _edit_payload(old: bytes, new: bytes) -> Callable[[bytes], bytes]:
    """Replace bytes in a record's payload, opened from its envelope (it may be zlib'd,
    ADR-0031) and written back as a plain pair: still a valid record, a broken chain."""

    def edit(state: bytes) -> bytes:
        chain, payload = open_envelope(msgpack.unpackb(state))
        assert isinstance(payload, bytes)
        assert old in payload
        packed: bytes = msgpack.packb([chain, payload.replace(old, new)])
        return packed

    return edit


def test_e2_verify_names_session_and_position_of_bytes_edited_in_the_sqlite_file(
    sqlite_cli: Cli,
) -> None:
    """Editing one record's state bytes in the SQLite file: verify exits 1 naming it."""
    ids = sqlite_cli.import_fixture("openai")
    victim = ids[1]
    # Same length, still valid msgpack: only the hash chain can tell (E2, ADR-0004).
    _rewrite_state(sqlite_cli.target, victim, TOOL_RESULTS_VERSION,
                   _edit_payload(b"4.2M", b"9.9M"))

    result = sqlite_cli.run("verify")

    assert 1 == result.returncode, describe(result)
    assert f"session {victim} position {TOOL_RESULTS_VERSION}:" in result.stdout
    [violation] = _violations(sqlite_cli)
    assert (victim, TOOL_RESULTS_VERSION) == (violation["session_id"], violation["position"])
    assert str(violation["rule"]).startswith("E2-"), violation
    # The other sessions still verify: the finding is local to the edited session.
    assert 0 == sqlite_cli.run("verify", ids[0]).returncode


def test_e2_verify_names_session_and_position_of_a_deleted_middle_record(
    sqlite_cli: Cli,
) -> None:
    """Deleting a middle record from the SQLite file: verify exits 1 naming the gap."""
    victim = sqlite_cli.import_fixture("openai")[1]
    target = sqlite_cli.target
    target.query("DELETE FROM stored_events WHERE originator_id = ? AND originator_version = ?",
                 target.stored_id(victim), MISSING_VERSION)

    result = sqlite_cli.run("verify")

    assert 1 == result.returncode, describe(result)
    assert f"session {victim} position {MISSING_VERSION}:" in result.stdout
    [violation] = _violations(sqlite_cli)
    assert (victim, MISSING_VERSION) == (violation["session_id"], violation["position"])


def test_e11_undecodable_record_is_a_violation_and_replay_exits_1_naming_it(
    sqlite_cli: Cli,
) -> None:
    """Garbage in one record: verify and replay exit 1 naming session and position."""
    ids = sqlite_cli.import_fixture("openai")
    victim = ids[1]
    _rewrite_state(sqlite_cli.target, victim, MISSING_VERSION, lambda _: b"\xc1garbage")

    [violation] = _violations(sqlite_cli)
    replay = sqlite_cli.run("replay", victim, "--json")
    listed = {row["session_id"]: row for row in sqlite_cli.json("sessions", "--json")}

    assert (victim, MISSING_VERSION) == (violation["session_id"], violation["position"])
    assert 1 == replay.returncode, describe(replay)
    assert 1 == len(replay.stderr.splitlines()), replay.stderr
    assert victim in replay.stderr
    assert f"version {MISSING_VERSION}" in replay.stderr
    # One bad record does not hide the list: every session is listed, the victim flagged.
    assert set(ids) == set(listed)
    assert MISSING_VERSION == listed[victim]["corrupt_at"]


@pytest.mark.postgres
def test_e2_verify_names_session_and_position_of_a_row_edited_in_postgresql(
    postgres_cli: Cli,
) -> None:
    """Editing one record's state with psycopg in the PostgreSQL schema: verify exits 1."""
    victim = postgres_cli.import_fixture("openai")[1]
    _rewrite_state(postgres_cli.target, victim, TOOL_RESULTS_VERSION,
                   _edit_payload(b"4.2M", b"9.9M"))

    result = postgres_cli.run("verify")

    assert 1 == result.returncode, describe(result)
    assert f"session {victim} position {TOOL_RESULTS_VERSION}:" in result.stdout
    [violation] = _violations(postgres_cli)
    assert (victim, TOOL_RESULTS_VERSION) == (violation["session_id"], violation["position"])


# --- issue 9 point 6: a damaged SQLite file is audited, never a traceback (ADR-0025) -----------


def _damaged_report(cli: Cli, *commands: str) -> dict[str, subprocess.CompletedProcess[str]]:
    """``verify --json``, ``sessions`` and ``stats`` on the damaged store, by command."""
    return {name: cli.run(*name.split()) for name in commands}


def _no_traceback_exit_1(results: dict[str, subprocess.CompletedProcess[str]]) -> list[str]:
    """The commands that did not exit 1, or printed a traceback."""
    return [
        name for name, r in results.items()
        if r.returncode != 1 or "Traceback" in r.stderr + r.stdout
    ]


def _verify_findings(result: subprocess.CompletedProcess[str]) -> set[tuple[str, int]]:
    report = json.loads(result.stdout)
    return {(v["session_id"], v["position"]) for v in report["violations"]}


def test_e11_a_bad_originator_id_is_reported_by_verify_sessions_and_stats(
    sqlite_cli: Cli,
) -> None:
    """One bad character in a SessionStarted originator_id: exit 1 and findings, no traceback."""
    ids = sqlite_cli.import_fixture("openai")
    victim = UUID(ids[1]).hex
    damaged = victim[:-1] + "X"
    sqlite_cli.target.query(
        "UPDATE stored_events SET originator_id = ? WHERE originator_id = ? "
        "AND originator_version = 1", damaged, victim,
    )

    results = _damaged_report(sqlite_cli, "verify --json", "sessions", "stats")

    assert [] == _no_traceback_exit_1(results), [describe(r) for r in results.values()]
    assert (damaged, 1) in _verify_findings(results["verify --json"])
    assert damaged in results["sessions"].stderr
    assert ids[0] in results["sessions"].stdout  # the other sessions are still listed


def test_e11_an_undecodable_topic_is_reported_per_session(sqlite_cli: Cli) -> None:
    """A topic that is not UTF-8: verify names its session and version, the others are audited."""
    ids = sqlite_cli.import_fixture("openai")
    victim = ids[1]
    sqlite_cli.target.query(
        "UPDATE stored_events SET topic = CAST(X'ff00' AS TEXT) WHERE originator_id = ? "
        "AND originator_version = 3", UUID(victim).hex,
    )

    results = _damaged_report(sqlite_cli, "verify --json", "sessions", "stats")
    report = json.loads(results["verify --json"].stdout)

    assert [] == _no_traceback_exit_1(results), [describe(r) for r in results.values()]
    assert (victim, 3) in _verify_findings(results["verify --json"])
    assert len(ids) == report["sessions_checked"]


def _checkpoint(path: Path) -> None:
    """Move the WAL into the database file, so damaging the file damages the records."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()


def _big_store(cli: Cli) -> tuple[Path, list[str]]:
    """A store spanning many pages: the demo plus the imported fixture, checkpointed."""
    cli.demo()
    ids = cli.import_fixture("openai")
    path = cli.target.sqlite_path
    assert path is not None
    _checkpoint(path)
    return path, ids


def _first_leaf(path: Path, table: str) -> int:
    """The number of the first leaf page of ``table``'s b-tree (SQLite's file format: an
    interior table page, type 5, names its first child in its first cell's first 4 bytes)."""
    connection = sqlite3.connect(path)
    try:
        page = int(connection.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0])
        page_size = int(connection.execute("PRAGMA page_size").fetchone()[0])
    finally:
        connection.close()
    data = path.read_bytes()
    while True:
        start = (page - 1) * page_size
        header = start + (100 if page == 1 else 0)
        if data[header] != 5:  # a leaf (13) or not a table page: this one
            return page
        cell = start + int.from_bytes(data[header + 12:header + 14], "big")
        page = int.from_bytes(data[cell:cell + 4], "big")


def test_e11_a_corrupted_page_is_reported_and_the_rest_is_audited(sqlite_cli: Cli) -> None:
    """A page of stored_events overwritten with zeros: exit 1, a finding, the rest audited.

    (``stats`` is not run: it was brought up to date by the demo and reads no damaged row.)
    """
    path, ids = _big_store(sqlite_cli)
    page_size = 4096
    leaf = _first_leaf(path, "stored_events")
    with path.open("r+b") as file:
        file.seek(page_size * (leaf - 1))
        file.write(bytes(64))

    results = _damaged_report(sqlite_cli, "verify --json", "sessions")
    report = json.loads(results["verify --json"].stdout)

    assert [] == _no_traceback_exit_1(results), [describe(r) for r in results.values()]
    assert ("(store)", 0) in _verify_findings(results["verify --json"])
    assert report["sessions_checked"] >= len(ids) - 1


def test_e11_a_truncated_file_is_corrupt_not_a_bad_url_and_is_salvaged(sqlite_cli: Cli) -> None:
    """A file cut to two thirds: exit 1 (not 2), the truncation named, the readable part audited."""
    path, _ = _big_store(sqlite_cli)
    size = path.stat().st_size
    os.truncate(path, size * 2 // 3)

    results = _damaged_report(sqlite_cli, "verify --json", "verify", "sessions", "stats")
    report = json.loads(results["verify --json"].stdout)

    assert [] == _no_traceback_exit_1(results), [describe(r) for r in results.values()]
    assert any("truncated" in v["detail"] for v in report["violations"])
    assert (report["sessions_checked"] > 0, report["events_checked"] > 0) == (True, True)


def test_i20_p2_an_old_format_snapshot_is_a_note_and_verify_exits_0(cli: Cli) -> None:
    """A session whose snapshot is of format 3 (written before ADR-0074): ``verify`` exits 0,
    prints a NOTE naming the session, the snapshot's version and "old format, not compared",
    and ``--json`` carries it under ``notes`` beside the keys it always had."""
    import turnledger as tl
    from tests.old_snapshots import in_old_format

    with tl.open_store(cli.target.url, snapshot_interval=5) as store:
        session = store.start_session()
        for index in range(4):
            session.append(tl.ChatMessage.user(f"question {index}"))
            session.append(tl.ChatMessage.assistant(f"answer {index}"))
        uuid = UUID(session.id)
        found = store.backend.load_snapshot(uuid)
        assert found is not None
        version, payload = found
        store.backend.prune_snapshots(uuid, before_version=version + 1)
        store.backend.save_snapshot(uuid, version, in_old_format(payload, 3))

    result = cli.run("verify")
    report = cli.json("verify", "--json")

    assert 0 == result.returncode, describe(result)
    notes = [line for line in result.stdout.splitlines() if line.startswith("NOTE ")]
    assert 1 == len(notes), describe(result)
    assert f"session {session.id} position {version}: [E5-snapshot]" in notes[0]
    assert "old format, not compared" in notes[0]
    assert result.stdout.rstrip().endswith(": OK"), result.stdout
    assert {"ok", "sessions_checked", "events_checked", "seconds", "violations"} < set(report)
    assert (True, [], [(session.id, version, "E5-snapshot", True)]) == (
        report["ok"], report["violations"],
        [(n["session_id"], n["position"], n["rule"], "old format, not compared" in n["detail"])
         for n in report["notes"]],
    )
