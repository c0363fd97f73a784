"""Issue 19 points 2 and 3: `turnledger verify` on forged and damaged SQLite files.

Point 3's goal: on any damage `verify` exits 1 with findings that name a session, a version
and what is wrong, with bounded memory and output, never a traceback. Each damaged file is a
real store (`tests.damage.build_store`) cut, flipped or edited while nothing has it open; the
command runs as a subprocess under a 2 GiB address-space limit, so a runaway dies of a
`MemoryError` (a traceback the test sees) instead of taking the machine.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

import turnledger as tl
from tests.damage import build_store, flip_bit, logical_content, occurrences, patch
from tests.extras import need
from turnledger import cli
from turnledger.store.keys import new_key_text

from .conftest import clean_env, describe

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
    """`turnledger verify --json` run by `cli.main` in this process: (exit, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(["--store", f"sqlite:///{path}", "verify", "--json"], out=out)
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
    from tests.integration.test_i19_verify_agrees_with_restore import forge

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
