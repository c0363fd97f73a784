"""``turnledger verify``: a healthy store passes, tampering is named (E2, E6, E11).

The tampering tests edit ``stored_events`` behind the CLI's back — with sqlite3 on the SQLite
file, and once with psycopg on the PostgreSQL schema — then expect exit 1 and a violation that
names the session and the event position. They work on the second line of ``openai.jsonl``:
events 1-2 start the session, 3-9 append its seven messages; version 6 is the `ToolResults`
holding ``4.2M`` (the ``du`` output). These commands run through the CLI's ``main`` in this
process.

Issue 19 points 2 and 3: `turnledger verify` on forged and damaged SQLite files. Point 3's goal:
on any damage `verify` exits 1 with findings that name a session, a version and what is wrong,
with bounded memory and output, never a traceback. Each damaged file is a real store
(`tests.damage.build_store`) cut, flipped or edited while nothing has it open; the command runs
as a subprocess under a 2 GiB address-space limit, so a runaway dies of a `MemoryError` (a
traceback the test sees) instead of taking the machine (the 60 bit flips run `main` in this
process, each one's exit and output checked, and any exception it raises reported).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import msgpack
import pytest

import turnledger as tl
from tests.backends import Target
from tests.damage import build_store, flip_bit, logical_content, occurrences, patch
from tests.extras import need
from turnledger.cli import main
from turnledger.store.keys import new_key_text
from turnledger.store.packing import open_envelope

from .conftest import Cli, clean_env, describe

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


# --- issue 19 points 2 and 3: forged and damaged SQLite files, under a memory limit --------

MEMORY_LIMIT = 2 << 30  # bytes of address space for one command
MAX_STDERR = 20_000  # characters: a message never lists records
MAX_DETAIL = 700  # characters of one finding (DETAIL_LIMIT plus the cut's note)
PAGE_SIZE = 4096


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """One store of 30 sessions x 60 messages (about 900 KB), built once per module."""
    path = tmp_path_factory.mktemp("pristine") / "store.db"
    return path, build_store(path)


@pytest.fixture
def damaged(pristine: tuple[Path, list[str]], tmp_path: Path) -> tuple[Path, list[str]]:
    """A private copy of the pristine store, to damage."""
    copy = tmp_path / "store.db"
    shutil.copyfile(pristine[0], copy)
    return copy, pristine[1]


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_verify(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``turnledger --store sqlite:///PATH verify --json EXTRA`` under the memory limit."""
    return subprocess.run(
        [sys.executable, "-m", "turnledger", "--store", f"sqlite:///{path}", "verify",
         "--json", *extra],
        cwd=path.parent, env=clean_env(), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, encoding="utf-8", timeout=300, check=False, preexec_fn=_limit_memory,
    )


def findings(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The violations of a verify that exited 1 with a JSON report, no traceback and short
    output, each naming a session, a position and what is wrong in a bounded detail."""
    assert (1, False) == (result.returncode, "Traceback" in result.stderr), describe(result)
    assert len(result.stderr) < MAX_STDERR, result.stderr[:2000]
    violations: list[dict[str, Any]] = json.loads(result.stdout)["violations"]
    assert violations
    assert [] == [v for v in violations
                  if not (v["session_id"] and v["detail"] and len(v["detail"]) <= MAX_DETAIL)]
    return violations


def named(violations: list[dict[str, Any]]) -> set[tuple[str, int]]:
    return {(v["session_id"], v["position"]) for v in violations}


# --- point 3: truncation -----------------------------------------------------------------------

@pytest.mark.parametrize("where", ["early, in a page", "at a page boundary", "late, in a page"])
def test_i19_p3_a_truncated_file_is_findings_naming_the_cut_session(
    damaged: tuple[Path, list[str]], where: str
) -> None:
    """A file cut early or late inside a page, or at a page boundary: exit 1, the truncation
    named, and a finding at the session and version where the readable rows end."""
    path, ids = damaged
    size = path.stat().st_size
    cut = {"early, in a page": size * 3 // 10 + 1234,
           "at a page boundary": size // PAGE_SIZE * 6 // 10 * PAGE_SIZE,
           "late, in a page": size * 8784 // 10000}[where]
    with path.open("r+b") as file:
        file.truncate(cut)

    violations = findings(run_verify(path))

    assert any("the file is truncated" in v["detail"] for v in violations)
    cut_at = [(v["session_id"], v["position"]) for v in violations if "rows after row" in v[
        "detail"]]
    assert (True, True) == (bool(cut_at), all(s in ids and p > 1 for s, p in cut_at)), cut_at


def test_i19_p3_a_wal_cut_inside_a_frame_is_shown_by_the_anchor(
    damaged: tuple[Path, list[str]],
) -> None:
    """A writer killed with its last appends in the WAL, then the WAL cut inside a frame:
    SQLite reads the store as of an earlier commit (nothing else can tell), and `verify
    --anchor` taken before the cut names the session whose newest records are gone."""
    path, ids = damaged
    anchor = path.parent / "anchor.json"
    child = (
        "import json, os, sys\n"
        "import turnledger as tl\n"
        "from turnledger.replay.anchor import take_anchor\n"
        "store = tl.open_store(sys.argv[1])\n"
        "session = store.restore(sys.argv[2])\n"
        "for i in range(40):\n"
        "    session.append(tl.ChatMessage.user('late message %d ' % i * 20))\n"
        "open(sys.argv[3], 'w').write(json.dumps(take_anchor(store.backend, None)))\n"
        "os._exit(0)  # killed: no close, no checkpoint, the WAL stays\n"
    )
    subprocess.run([sys.executable, "-c", child, f"sqlite:///{path}", ids[-1], str(anchor)],
                   check=True, env=clean_env(), timeout=120)
    wal = Path(f"{path}-wal")
    with wal.open("r+b") as file:
        file.truncate(wal.stat().st_size * 6 // 10 + 77)

    violations = findings(run_verify(path, "--anchor", str(anchor)))

    assert ids[-1] in {v["session_id"] for v in violations if v["rule"] == "E2-anchor"}


# --- point 3: flips and edits -------------------------------------------------------------------

def _verify_in_process(path: Path) -> tuple[int, str, str]:
    """`turnledger verify --json` run by `turnledger.cli.main` in this process: (exit, stdout,
    stderr); an exception it raises is raised here."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["--store", f"sqlite:///{path}", "verify", "--json"], out=out)
    return code, out.getvalue(), err.getvalue()


def test_i19_p3_random_bit_flips_are_findings_whenever_the_store_changed(
    pristine: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """60 seeded single-bit flips over the whole file: verify never raises and never prints
    more than a bounded report; it exits 1 whenever the flip changed what a reader reads
    (records, snapshots, or the file's own consistency), and 0 only when it changed nothing:
    then every session restores to the same messages as before the flip."""
    source, ids = pristine
    expected = logical_content(source)
    before = _restored(source, ids)
    rng = random.Random(19)
    wrong: list[tuple[int, int, str]] = []
    for _ in range(60):
        offset, bit = rng.randrange(100, source.stat().st_size), rng.randrange(8)
        path = tmp_path / "flipped.db"
        shutil.copyfile(source, path)
        flip_bit(path, offset, bit)
        changed = logical_content(path) != expected
        try:
            code, _, stderr = _verify_in_process(path)
        except Exception as error:  # the test reports every flip, not only the first
            wrong.append((offset, bit, f"raised {type(error).__name__}"))
            continue
        if code not in (0, 1) or (changed and code != 1) or len(stderr) > MAX_STDERR:
            wrong.append((offset, bit, f"exit {code}, changed {changed}"))
        elif code == 0 and _restored(path, ids) != before:
            wrong.append((offset, bit, "exit 0, but a session restores otherwise"))
    assert [] == wrong


def _restored(path: Path, ids: list[str]) -> list[object]:
    """Every session as a restore from ``path`` gives it (its views, route and profile)."""
    with tl.open_store(f"sqlite:///{path}") as store:
        return [store.restore(s).state for s in ids]


def _session_cells(path: Path, session_id: str, version: int) -> tuple[int, list[int]]:
    """Offsets of the (id, version) key of one record in the file: in its table row (followed
    by the topic), and in the primary-key index (its leaf entry, and a divider of an interior
    page when the key happens to be one; both are followed by the rowid)."""
    found = occurrences(path, UUID(session_id).hex.encode() + bytes([version]))
    table = [at for at, after in found if after.startswith(b"turnledger:")]
    index = [at for at, after in found if not after.startswith(b"turnledger:")]
    assert (1, True) == (len(table), 1 <= len(index) <= 2), found
    return table[0], index


def test_i19_p3_a_session_that_reads_shorter_than_stored_is_named(
    damaged: tuple[Path, list[str]],
) -> None:
    """The index entry of a session's last record damaged: every read of the session is one
    record short, with an intact chain and no error; verify names that session and version."""
    path, ids = damaged
    victim, last = ids[3], 61
    # The index key's id becomes the next hex number: it sorts right after the session's.
    successor = f"{UUID(victim).int + 1:032x}".encode()
    for key in _session_cells(path, victim, last)[1]:
        for offset, value in enumerate(successor):
            patch(path, key + offset, value)
    with tl.open_store(f"sqlite:///{path}?mode=ro") as store:
        read = len(store.events_of(victim))

    violations = findings(run_verify(path))

    assert (last - 1, True) == (read, (victim, last) in named(violations))


def test_i19_p3_a_flipped_version_that_duplicates_another_is_named(
    damaged: tuple[Path, list[str]],
) -> None:
    """A record's version column flipped to its predecessor's: two rows claim one version.
    verify names the session at that version (the second row is left out, the version it
    held is missing); it neither passes the file nor dies of a duplicate-key error."""
    path, ids = damaged
    victim = ids[5]
    patch(path, _session_cells(path, victim, 5)[0] + 32, 4)

    violations = findings(run_verify(path))

    assert {(victim, 4), (victim, 5)} <= named(violations)


def _root_page(path: Path, table: str) -> int:
    connection = sqlite3.connect(path)
    try:
        ((root,),) = connection.execute(
            "SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,)).fetchall()
    finally:
        connection.close()
    return int(root)


def test_i19_p3_a_tree_that_hands_back_rows_twice_is_not_copied_twice(
    damaged: tuple[Path, list[str]],
) -> None:
    """The root of the records' tree points twice to its first leaf (a damaged child pointer):
    a scan reads those rows twice. verify copies each row once: findings naming the sessions
    whose rows are out of reach, not the raw duplicate-key error that listed every event."""
    path, ids = damaged
    root = (_root_page(path, "stored_events") - 1) * PAGE_SIZE
    data = path.read_bytes()
    assert 0x05 == data[root]  # an interior table page: 12-byte header, then cell pointers
    cells = [int.from_bytes(data[root + 12 + 2 * i:root + 14 + 2 * i], "big") for i in range(2)]
    first_child = data[root + cells[0]:root + cells[0] + 4]
    for offset, value in enumerate(first_child):
        patch(path, root + cells[1] + offset, value)

    violations = findings(run_verify(path))

    assert {v["session_id"] for v in violations} & set(ids)


def test_i19_p3_a_negative_version_is_a_finding_not_an_overflow(
    damaged: tuple[Path, list[str]],
) -> None:
    """A version column turned negative (the raw `OverflowError` of the chain's 8-byte
    version): a finding at that session and version."""
    path, ids = damaged
    connection = sqlite3.connect(path)
    with contextlib.closing(connection), connection:
        connection.execute("UPDATE stored_events SET originator_version = -3 WHERE "
                           "originator_id = ? AND originator_version = 7", (UUID(ids[2]).hex,))

    assert (ids[2], -3) in named(findings(run_verify(path)))


@pytest.mark.parametrize("column", ["topic", "originator_version"])
def test_i19_p3_a_column_of_another_type_is_a_finding(
    damaged: tuple[Path, list[str]], column: str
) -> None:
    """A record's column stored with another type than its own (a flipped serial type in the
    record's header: a topic read back as a blob, a version as a float): a finding at that
    session, never a crash (the bit flip at offset 688437 of stop 30's CI run raised
    AttributeError), and a restore that reads it (the newest record, after any snapshot)
    raises `CorruptRecord`."""
    path, ids = damaged
    value = {"topic": "CAST(topic AS BLOB)", "originator_version": "originator_version + 0.5"}
    key = UUID(ids[2]).hex
    connection = sqlite3.connect(path)
    with contextlib.closing(connection), connection:
        (newest,) = connection.execute("SELECT max(originator_version) FROM stored_events "
                                       "WHERE originator_id = ?", (key,)).fetchone()
        connection.execute(f"UPDATE stored_events SET {column} = {value[column]} WHERE "
                           "originator_id = ? AND originator_version = ?", (key, newest))

    result = run_verify(path)
    assert 1 == result.returncode, result.stderr
    named_here = [f for f in findings(result) if f["session_id"] == ids[2]]
    assert "E11-corrupt-record" in {f["rule"] for f in named_here}
    assert all(type(f["position"]) is int for f in named_here)  # a version, not 7.5
    with tl.open_store(f"sqlite:///{path}") as store, pytest.raises(tl.CorruptRecord):
        store.restore(ids[2])


@pytest.mark.parametrize("edit", ["id no UUID", "id of no session", "topic", "version"])
def test_i19_p3_a_snapshot_row_no_restore_reads_is_a_finding(
    damaged: tuple[Path, list[str]], edit: str
) -> None:
    """A snapshot row whose key or topic was damaged is never read by its session's restore
    (which replays instead), so only a listing of the snapshot table shows it: a finding all
    the same (the flips of the CI run of stop 25 that verify passed)."""
    path, ids = damaged
    key = UUID(ids[3]).hex
    change = {
        "id no UUID": ("originator_id = ?", key[:10] + "\ufffd" + key[11:]),
        "id of no session": ("originator_id = ?", UUID(int=7, version=4).hex),
        "topic": ("topic = ?", "turndedger:snapshot"),
        "version": ("originator_version = ?", 0),
    }[edit]
    connection = sqlite3.connect(path)
    with contextlib.closing(connection), connection:
        assert 1 == connection.execute(
            f"UPDATE stored_snapshots SET {change[0]} WHERE originator_id = ?", (change[1], key)
        ).rowcount

    snapshot_findings = [v for v in findings(run_verify(path)) if v["rule"] == "E5-snapshot"]

    assert snapshot_findings, edit
    if edit == "topic":
        assert {(ids[3], 50)} == named(snapshot_findings)


def test_i19_p3_a_record_whose_msgpack_declares_a_huge_length_is_a_finding(
    damaged: tuple[Path, list[str]],
) -> None:
    """A record's state that declares an array of 4 G elements: a finding at its session and
    version, decided at once (no allocation of what it declares)."""
    path, ids = damaged
    connection = sqlite3.connect(path)
    with contextlib.closing(connection), connection:
        connection.execute("UPDATE stored_events SET state = ? WHERE originator_id = ? AND "
                           "originator_version = 9", (b"\xdd\xff\xff\xff\xff" + bytes(40),
                                                       UUID(ids[4]).hex))

    assert (ids[4], 9) in named(findings(run_verify(path)))


# --- point 2 on the command line ----------------------------------------------------------------

@pytest.fixture
def keyed_store(tmp_path: Path) -> tuple[Path, Path, str]:
    """A SQLite store keyed at creation (audit key file), one session forged as issue 19's
    attacker did: a message changed, every record re-chained unkeyed, snapshots deleted."""
    need("cryptography")
    from tests.integration.test_verify_agrees_with_restore import forge

    key_file = tmp_path / "audit.key"
    key_file.write_text(new_key_text())
    path = tmp_path / "keyed.db"
    url = f"sqlite:///{path}"
    with tl.open_store(url, audit_key=key_file.read_text().strip(), snapshot_interval=4) as store:
        session = store.start_session()
        for i in range(6):
            session.append(tl.ChatMessage.user(f"message {i}"))
        forge(store, _SqliteRows(path), session.id)
    return path, key_file, session.id


class _SqliteRows:
    """`tests.integration.conftest.RecordEditor` on a SQLite file, through sqlite3."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, session_id: UUID, version: int, topic: str, state: bytes) -> None:
        connection = sqlite3.connect(self.path)
        with contextlib.closing(connection), connection:
            connection.execute(
                "UPDATE stored_events SET topic = ?, state = ? WHERE originator_id = ? AND "
                "originator_version = ?", (topic, state, session_id.hex, version))


def test_i19_p2_cli_verify_with_the_audit_key_names_the_forged_session(
    keyed_store: tuple[Path, Path, str],
) -> None:
    """`turnledger verify --audit-key-file K` on the forged keyed store: exit 1, one
    `E2-keyed-chain` finding at the session's version 1."""
    path, key_file, session_id = keyed_store

    violations = findings(run_verify(path, "--audit-key-file", str(key_file)))

    assert [(session_id, 1, "E2-keyed-chain")] == [
        (v["session_id"], v["position"], v["rule"]) for v in violations]


def test_i19_p2_cli_verify_of_a_keyed_store_without_its_audit_key_is_refused(
    keyed_store: tuple[Path, Path, str],
) -> None:
    """Without the audit key a keyed store cannot be audited: exit 2 (bad usage), the error
    says which key is missing, and no report claims anything (ADR-0063)."""
    path, _, _ = keyed_store

    result = run_verify(path)

    assert (2, "", True) == (result.returncode, result.stdout, "audit key" in result.stderr)
