"""The read-only commands work on a read-only copy of a SQLite store (issue 9.9).

``sessions``, ``replay``, ``export``, ``verify``, ``what-if``, ``report`` and ``stats`` on a
store whose file and directory cannot be written: each exits 0 with its usual output, and nothing
is written to the store (no table, no WAL, no analytics rows: ``stats`` computes from the
events and says so).

Root ignores file permissions, so when the tests run as root the commands run as ``nobody``
through ``setpriv`` (skipped with the reason when neither is possible). ``nobody`` must be able
to run this checkout's turnledger: when the checkout or its venv sits in a directory other users
cannot enter (a private home, a ``mktemp -d`` folder) the tests skip and say which directory
(issue 19, point 7); wherever it can, they run. Two copies: one with the writer's
``-wal``/``-shm`` files beside it (a WAL not yet checkpointed must be read), one with the
database file alone.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import turnledger
from tests.e2e.conftest import (
    CLI_TIMEOUT,
    SESSION_LINE,
    clean_env,
    describe,
    run_command,
    run_main,
)

NOBODY = 65534


OURS = Path(turnledger.__file__).resolve().parent
"""The turnledger under test: the reader's CLI must run this one."""
PROBE = ("import os, turnledger.cli; "
         "print(os.path.dirname(os.path.realpath(turnledger.__file__)))")


def _as_reader() -> list[str]:
    """The prefix that runs a command as a user the file permissions apply to; skips, saying
    why, when that user cannot run this checkout's turnledger."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root and setpriv is missing: permissions cannot be tested")
    prefix = (setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")
    problem = _reader_problem(prefix)
    if problem is not None:
        pytest.skip(problem)
    return list(prefix)


@functools.cache
def _reader_problem(prefix: tuple[str, ...]) -> str | None:
    """None when ``prefix`` runs this checkout's turnledger with this Python; else why not.

    Decided by running it (once per test process), not by reading permissions: only the
    message names the directory that is closed to other users."""
    probe = run_command([*prefix, sys.executable, "-c", PROBE], cwd=Path(tempfile.gettempdir()))
    found = probe.stdout.strip()
    if probe.returncode == 0 and found == str(OURS):
        return None
    what = f"it imports {found}" if probe.returncode == 0 and found else (
        (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1])
    closed = _closed_directory(OURS, Path(sys.executable).parent)
    where = "" if closed is None else (
        f"; {closed} is mode {stat.S_IMODE(closed.stat().st_mode):04o}, closed to other users")
    return (f"the read-only commands run as nobody (uid {NOBODY}), who cannot run this "
            f"checkout's turnledger ({OURS}) with {sys.executable}: {what}{where}; put the "
            "checkout and its venv where other users may read them to run these tests")


def _closed_directory(*paths: Path) -> Path | None:
    """The first directory on the way to ``paths`` that other users may not enter."""
    for path in paths:
        for directory in reversed([path, *path.parents]):
            if not directory.stat().st_mode & stat.S_IXOTH:
                return directory
    return None


def _digest(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())
    }


@pytest.fixture(params=["with-wal", "file-alone"])
def read_only_store(request: pytest.FixtureRequest) -> Iterator[tuple[Path, str]]:
    """A store with the demo session, in a directory nobody may write; (db path, session id)."""
    _as_reader()  # skips first, with the reason, when the reader cannot run the CLI
    directory = Path(tempfile.mkdtemp(prefix="tl-readonly-"))
    db = directory / "store.db"
    url = f"sqlite:///{db}"
    result = run_main(["--store", url, "demo"], cwd=directory)  # the writer: this process
    assert 0 == result.returncode, describe(result)
    session_id = SESSION_LINE.findall(result.stdout)[0]
    if request.param == "with-wal":
        # A WAL that was never checkpointed into the file: its events live in -wal only.
        connection = sqlite3.connect(db)
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.execute("PRAGMA wal_autocheckpoint=0")
        for name in ("tl_tracking", "tl_session_stats"):
            connection.execute(f"DELETE FROM {name}")  # stats must not come from these rows
        connection.commit()
        snapshot = directory / "copy"
        snapshot.mkdir()
        for path in directory.glob("store.db*"):
            shutil.copy(path, snapshot / path.name)
        connection.close()
        for path in directory.glob("store.db*"):
            path.unlink()
        for path in snapshot.iterdir():
            path.rename(directory / path.name)
        snapshot.rmdir()
        assert (directory / "store.db-wal").stat().st_size > 0
    else:
        for suffix in ("-wal", "-shm"):
            (directory / f"store.db{suffix}").unlink(missing_ok=True)
    for path in directory.iterdir():
        path.chmod(0o444)
    directory.chmod(0o555)
    try:
        yield db, session_id
    finally:
        directory.chmod(0o755)
        shutil.rmtree(directory)


def _run(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [*_as_reader(), sys.executable, "-m", "turnledger", "--store", f"sqlite:///{db}", *args]
    return subprocess.run(argv, cwd=db.parent, env=clean_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)


def test_e11_read_only_commands_work_on_a_read_only_store(
    read_only_store: tuple[Path, str],
) -> None:
    """Each read command exits 0 on the read-only copy and writes nothing."""
    db, session_id = read_only_store
    before = _digest(db.parent)
    out = Path(tempfile.mkdtemp(prefix="tl-report-"))  # where the reader may write its report
    out.chmod(0o777)
    commands = {
        "sessions": ["sessions"],
        "replay": ["replay", session_id],
        "view": ["replay", session_id, "--view", "conversation"],
        "export": ["export", session_id, "--format", "openai"],
        "verify": ["verify"],
        "what-if": ["what-if", session_id, "--max-context-tokens", "500"],
        "report": ["report", session_id, "-o", str(out / "r.html")],
        "stats": ["stats"],
    }
    try:
        results = {name: _run(db, *argv) for name, argv in commands.items()}
        report = (out / "r.html").read_text(encoding="utf-8")
    finally:
        shutil.rmtree(out)
    failed = {name: describe(r) for name, r in results.items() if r.returncode != 0}
    assert {} == failed
    assert session_id in results["sessions"].stdout
    assert "OK" in results["verify"].stdout
    assert session_id[:8] in results["stats"].stdout
    assert "read-only" in results["stats"].stderr
    assert session_id in report
    assert before == _digest(db.parent)


def test_e11_writing_to_a_read_only_store_is_a_clear_error(
    read_only_store: tuple[Path, str],
) -> None:
    """import into the read-only copy fails with exit 2 and a reason, never a traceback."""
    db, _ = read_only_store
    transcript = Path(tempfile.mkdtemp(prefix="tl-transcript-")) / "t.jsonl"
    transcript.write_text('[{"role": "user", "content": "hi"}]\n')
    transcript.parent.chmod(0o755)
    transcript.chmod(0o644)
    try:
        result = _run(db, "import", str(transcript), "--format", "openai")
    finally:
        shutil.rmtree(transcript.parent)
    assert (2, "") == (result.returncode, result.stdout), describe(result)
    assert "Traceback" not in result.stderr
