"""Only SQLite opens a live store file: nothing acknowledged is lost when a process opens more
store objects on a file it holds open (issue 19 point 1, ADR-0062).

SQLite's locks are POSIX advisory locks, held per process: closing *any* descriptor of the
database file drops every lock the process holds on it. Opening a store once created the file
with ``os.close(os.open(path, O_CREAT))`` even when it existed, so a process that held one store
and opened another (a web handler opening a store per request) lost its locks; another process
closing its own connection then took itself for the last one, checkpointed and deleted the
write-ahead log under the first, whose later commits went to a deleted file (acknowledged, then
gone) or failed with ``disk I/O error``. These tests use real files and real processes; the
store is counted from a fresh process and checked with ``PRAGMA integrity_check``.
"""

from __future__ import annotations

import ast
import errno
import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import turnledger as tl
from turnledger.store.backends.sqlite import create_owner_only

ROOT = Path(__file__).resolve().parents[2]

_LIST = "import sys, turnledger as tl\nwith tl.open_store(sys.argv[1]) as s: s.sessions()"
_COUNT = """\
import sys, turnledger as tl
with tl.open_store(sys.argv[1]) as store:
    events = store.restore(sys.argv[2]).events()
    print(sum(type(e).__name__ == "MessageAppended" for e in events))
"""
_LIST_LOOP = """\
import sys, turnledger as tl
while True:
    try:
        with tl.open_store(sys.argv[1]) as store:
            store.sessions()
        print("LISTED", flush=True)
    except tl.TurnledgerError as error:
        print("ERROR", str(error).splitlines()[0][:300], flush=True)
"""


def _python(code: str, *args: str) -> str:
    """Run ``code`` in a new Python process; its stdout (fails with its stderr)."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, timeout=120, check=False)
    assert 0 == done.returncode, done.stderr[-3000:]
    return done.stdout


def _recorded(url: str, session_id: str) -> int:
    """The messages of the session, counted by a process that never held the file."""
    return int(_python(_COUNT, url, session_id))


def _integrity(db: Path) -> list[str]:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [str(row[0]) for row in connection.execute("PRAGMA integrity_check")]
    finally:
        connection.close()


def test_i19_p1_opening_another_store_object_keeps_the_locks_of_the_open_one(
    tmp_path: Path,
) -> None:
    """A store object opened and closed beside an open one leaves its locks: another process
    closing its connection does not delete the log under it, and every append is kept."""
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    acknowledged = 0
    with tl.open_store(url) as store:
        session = store.start_session()
        for round_ in range(3):
            session.append(tl.ChatMessage.user(f"request {round_}"))
            acknowledged += 1
            tl.open_store(url).close()  # a request's own store object
            _python(_LIST, url)  # another process opens, lists and closes
            # Our connections still hold the file: the other process was not the last one.
            assert Path(f"{db}-wal").exists()
        session.append(tl.ChatMessage.user("after the requests"))
        acknowledged += 1
    assert acknowledged == _recorded(url, session.id)
    assert ["ok"] == _integrity(db)


def test_i19_p1_store_opened_per_request_beside_listing_processes_loses_nothing(
    tmp_path: Path,
) -> None:
    """The issue's scenario: one process appends and opens and closes another store object
    every fifth append; two processes open, list and close the store in a loop. Every
    acknowledged append is in the file, which passes ``PRAGMA integrity_check``."""
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    with tl.open_store(url) as store:
        session_id = store.start_session().id
    listers = [
        subprocess.Popen([sys.executable, "-c", _LIST_LOOP, url], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    acknowledged, failures, output = 0, [], []
    try:
        for lister in listers:  # both are listing before the first append
            assert lister.stdout is not None
            output.append(lister.stdout.readline())
        with tl.open_store(url) as store:
            session = store.restore(session_id)
            for i in range(150):
                try:
                    session.append(tl.ChatMessage.user(f"message {i}"))
                    acknowledged += 1
                except tl.TurnledgerError as error:
                    failures.append(str(error))
                if i % 5 == 4:
                    tl.open_store(url).close()
                    time.sleep(0.02)  # the listers open and close meanwhile
    finally:
        for lister in listers:
            lister.kill()
        output += [lister.communicate()[0] for lister in listers]
    assert [] == failures
    assert 150 == acknowledged == _recorded(url, session_id)
    assert ["ok"] == _integrity(db)
    lines = "".join(output).splitlines()
    assert [] == [line for line in lines if line.startswith("ERROR")]
    assert len([line for line in lines if line == "LISTED"]) > 10


def test_i19_p1_reopening_after_an_import_subprocess_wrote_the_file(tmp_path: Path) -> None:
    """While this process holds store objects it has not closed, a ``turnledger import``
    subprocess writes the file; opening the store again reads the healthy file, and the
    objects held all along still append."""
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    conversation = tmp_path / "c.jsonl"
    conversation.write_text(json.dumps([{"role": "user", "content": "imported"}]) + "\n")
    held = [tl.open_store(url) for _ in range(2)]
    try:
        session = held[0].start_session()
        session.append(tl.ChatMessage.user("before the import"))
        assert [session.id] == held[1].sessions()
        done = subprocess.run(
            [sys.executable, "-m", "turnledger", "--store", url, "import", str(conversation),
             "--format", "openai"],
            capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        )
        assert 0 == done.returncode, done.stderr
        # The objects held kept their locks: the import's close was not the last one.
        assert Path(f"{db}-wal").exists()
        with tl.open_store(url) as again:
            assert 2 == len(again.sessions())
        session.append(tl.ChatMessage.user("after the import"))
    finally:
        for store in held:
            store.close()
    assert 2 == _recorded(url, session.id)
    assert ["ok"] == _integrity(db)


def test_i19_p1_a_new_store_file_is_owner_only_and_an_existing_one_is_not_opened(
    tmp_path: Path,
) -> None:
    """``create_owner_only`` makes a 0600 file, and leaves an existing file (its mode, its
    content) alone."""
    new = tmp_path / "new.db"
    create_owner_only(str(new))
    assert 0o600 == stat.S_IMODE(new.stat().st_mode)
    existing = tmp_path / "old.db"
    existing.write_bytes(b"content")
    existing.chmod(0o640)
    create_owner_only(str(existing))
    assert (0o640, b"content") == (stat.S_IMODE(existing.stat().st_mode), existing.read_bytes())


def test_i19_p1_without_mknod_the_file_is_still_created_without_dropping_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``mknod`` is refused (macOS without root), the file is created with O_EXCL, 0600,
    and opening a store on an existing file still drops no lock of the process."""

    def refuse(*args: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "mknod", refuse)
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    with tl.open_store(url) as store:
        assert 0o600 == stat.S_IMODE(db.stat().st_mode)
        session = store.start_session()
        session.append(tl.ChatMessage.user("one"))
        tl.open_store(url).close()
        _python(_LIST, url)
        assert Path(f"{db}-wal").exists()
        session.append(tl.ChatMessage.user("two"))
    assert 2 == _recorded(url, session.id)


def test_i19_p1_threads_opening_stores_on_one_new_file_all_work(tmp_path: Path) -> None:
    """Eight threads open stores on one new file at once (one creates it): every one starts a
    session, none is refused, and all the sessions are listed."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    ids: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def open_and_start() -> None:
        try:
            barrier.wait()
            with tl.open_store(url) as store:
                ids.append(store.start_session().id)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_and_start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [] == errors
    with tl.open_store(url) as store:
        assert sorted(ids) == sorted(store.sessions())


def test_i19_p1_mode_ro_sees_the_commits_of_a_writer_that_is_open(tmp_path: Path) -> None:
    """A read-only store opened while a writer is connected (its log just checkpointed to
    empty) reads through SQLite's locks and log: it sees what the writer commits next (an
    ``immutable`` reader would read the bare file and miss it, or read torn pages)."""
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    with tl.open_store(url) as writer:
        first = writer.start_session().id
        checkpoint = sqlite3.connect(str(db))
        try:
            checkpoint.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            checkpoint.close()
        assert 0 == Path(f"{db}-wal").stat().st_size
        with tl.open_store(f"{url}?mode=ro") as reader:
            assert [first] == reader.sessions()
            second = writer.start_session().id
            assert [first, second] == reader.sessions()


# --- no other raw access to store files ---------------------------------------------------

_RAW_FILE_CALLS = frozenset({
    "open", "os.open", "io.open", "os.fdopen", "shutil.copyfile", "shutil.copy",
    "shutil.copy2", "shutil.move", "os.truncate", "os.replace", "os.rename", "os.remove",
    "os.unlink", "os.mknod",
})
_RAW_PATH_METHODS = frozenset({"read_bytes", "write_bytes", "read_text", "write_text",
                               "unlink", "rename", "touch"})
JUSTIFIED = {
    # Creates a file that does not exist yet: no connection can hold a lock on it (ADR-0062).
    ("turnledger/store/backends/sqlite.py", "create_owner_only", "os.open"),
    ("turnledger/store/backends/sqlite.py", "create_owner_only", "os.mknod"),
    # A key file the user names (--key-file), never a store file.
    ("turnledger/store/keys.py", "read_key_file", "Path(path).read_bytes"),
}
"""(module, function, call) of each raw file access allowed in the store, with its reason."""


def _raw_calls(path: Path) -> set[tuple[str, str, str]]:
    """(module, enclosing function, call) of every raw file call in a module."""
    found: set[tuple[str, str, str]] = set()
    module = str(path.relative_to(ROOT))

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = child.name
            if isinstance(child, ast.Call):
                call = ast.unparse(child.func)
                method = call.rpartition(".")[2]
                if call in _RAW_FILE_CALLS or (
                    "." in call and method in _RAW_PATH_METHODS
                    and not call.startswith(("self.", "cursor.", "connection."))
                ):
                    found.add((module, name, call))
            visit(child, name)

    visit(ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return found


def test_i19_p1_the_store_package_opens_no_file_outside_the_driver() -> None:
    """Every raw file call in ``turnledger/store`` (open, copy, rename, unlink, ...) is one
    of the justified ones: a store file is opened by SQLite alone."""
    calls: set[tuple[str, str, str]] = set()
    for path in sorted((ROOT / "turnledger" / "store").rglob("*.py")):
        calls |= _raw_calls(path)
    assert set() == calls - JUSTIFIED

