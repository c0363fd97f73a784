"""Issue 20, point 3: what differs per backend is asked of the port, and the store imports no
projection (ADR-0072).

The contract suite, the snapshot, rechain, privacy and audit tests prove that behaviour stayed
the same; these prove the pieces the port gained and the hook that replaced an upward import.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from uuid import UUID

import pytest

import turnledger as tl
from tests.backends import Target, fresh_target
from tests.extras import need
from turnledger.projections.analytics import Analytics
from turnledger.store.backend import EventStoreBackend
from turnledger.store.keys import new_key_text

SQL_KINDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def test_i20_p3_only_a_sqlite_store_names_a_file_to_salvage(
    target: Target, backend: EventStoreBackend
) -> None:
    """`Database.file_path` is the SQLite file, None for memory and PostgreSQL (the audit's
    salvage asks it instead of testing the backend's type)."""
    expected = None if target.sqlite_path is None else str(target.sqlite_path.resolve())
    assert expected == backend.database.file_path


def test_i20_p3_every_backend_prunes_and_replaces_its_own_snapshots(
    backend: EventStoreBackend,
) -> None:
    """`replace_snapshot` leaves only the new snapshot, a repeated one keeps the first and
    still prunes, `prune_snapshots` deletes only older ones: each backend's own deletes."""
    session = UUID(int=7)
    backend.save_snapshot(session, 1, b"one")
    backend.save_snapshot(session, 2, b"two")
    backend.replace_snapshot(session, 3, b"three")
    after_replace = [backend.load_snapshot(session, upto_version=v) for v in (1, 2, 3)]
    backend.save_snapshot(session, 4, b"four")
    backend.save_snapshot(session, 5, b"five")
    backend.replace_snapshot(session, 5, b"again")  # a snapshot is there: it is kept
    after_repeat = [backend.load_snapshot(session, upto_version=v) for v in (4, 5)]
    assert ([None, None, (3, b"three")], [None, (5, b"five")]) == (after_replace, after_repeat)


_FORGET_ONE = """
import sys
from turnledger.domain.messages import ChatMessage
from turnledger.store.session import open_store

store = open_store(sys.argv[1], key=sys.argv[2])
gone, kept = store.start_session(), store.start_session()
for session in (gone, kept):
    for i in range(3):
        session.append(ChatMessage.user(f"question {i}"))
assert store.forget(gone.id) is True
store.close()
print(gone.id, kept.id)
"""


@pytest.mark.parametrize("kind", SQL_KINDS)
def test_i20_p3_forget_counts_the_session_through_the_erasure_hook(
    kind: str, tmp_path: Path
) -> None:
    """`Store.forget` brings the analytics tables up to date through the hook the package
    registered (`turnledger.store.before_erasure`), in a process that imported the store
    and nothing of the projections: a session never counted before its erasure is counted
    all the same, as a session that was not erased."""
    need("cryptography")
    key = new_key_text()
    with fresh_target(kind, tmp_path) as target:
        done = subprocess.run(
            [sys.executable, "-c", _FORGET_ONE, target.url, key], capture_output=True,
            text=True, timeout=120, check=False, cwd=Path(__file__).resolve().parents[2],
        )
        assert 0 == done.returncode, done.stderr
        gone, kept = done.stdout.split()
        store = tl.open_store(target.url, key=key)
        try:
            with Analytics(store.backend) as analytics:  # nothing new: reads the tables
                appends = {r["session_id"]: r["appends"] for r in analytics.session_stats()}
        finally:
            store.close()
    assert (3, 3) == (appends.get(gone), appends.get(kept))
