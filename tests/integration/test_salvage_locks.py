"""Issue 19: salvaging and verifying a SQLite file never drops this process's locks on it.

Closing any descriptor of a file drops every POSIX lock the process holds on it, SQLite's
included. If the salvage opened the live file itself (to check its header, to copy it), a
process holding a store open would lose its shared lock; another process closing the store
would then take itself for the last connection, checkpoint and delete the WAL under the first
one, and the first one's next writes would go to a deleted file. The salvage reads only
through SQLite, whose connections in one process share their locks (ADR-0063).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import turnledger as tl
from turnledger.domain.errors import CorruptRecord
from turnledger.replay.audit import verify_salvaged
from turnledger.store.salvage import damaged_sqlite_path

CHILD = """
import sys
import turnledger as tl
with tl.open_store(sys.argv[1]) as store:
    store.restore(sys.argv[2]).append(tl.ChatMessage.user("from the child"))
"""


def _messages(url: str, session_id: str) -> list[str]:
    """The session's messages as a fresh process reads them."""
    code = ("import sys, turnledger as tl\n"
            "with tl.open_store(sys.argv[1]) as store:\n"
            "    for m in store.restore(sys.argv[2]).chat_view(): print(m.content)\n")
    result = subprocess.run([sys.executable, "-c", code, url, session_id], check=True,
                            capture_output=True, text=True, timeout=60)
    return result.stdout.splitlines()


def test_i19_salvage_and_verify_keep_the_locks_of_a_live_connection(tmp_path: Path) -> None:
    """This process holds the store open and runs the salvage and verify path on its file; a
    child then writes and closes: the WAL is still there, and this process's later write is
    read by a fresh process, after the child's."""
    path = tmp_path / "live.db"
    url = f"sqlite:///{path}"
    with tl.open_store(url) as store:
        session = store.start_session()
        session.append(tl.ChatMessage.user("before"))

        found = damaged_sqlite_path(url)
        report = verify_salvaged(str(path), CorruptRecord("asked by the test"))
        subprocess.run([sys.executable, "-c", CHILD, url, session.id], check=True, timeout=60)
        wal_after_child = Path(f"{path}-wal").exists()
        store.restore(session.id).append(tl.ChatMessage.user("after"))

    assert (str(path), 1, True) == (found, report.sessions_checked, wal_after_child)
    assert ["before", "from the child", "after"] == _messages(url, session.id)
