"""Snapshots on the write path and on restore after ADR-0060, on every backend.

A snapshot replaces the older ones in one transaction (`EventStoreBackend.replace_snapshot`);
the store writes format 4; a store holding a format 3 snapshot (written before) misses it: the
restore replays, verify notes it as not compared, and the next command past a due point
replaces it (ADR-0074); a format 4 snapshot rewritten with a matching digest is named by
verify, by field.
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from uuid import UUID, uuid4

import msgpack
import pytest

from tests.backends import Target
from tests.integration.test_scale_state import LIMIT_OFF, run_turns, snapshot_versions
from tests.old_snapshots import in_old_format
from turnledger.domain.state import SessionState
from turnledger.replay.audit import verify
from turnledger.replay.timeline import fold
from turnledger.store.backend import EventStoreBackend
from turnledger.store.session import open_store
from turnledger.store.snapshots import (
    SNAPSHOT_FORMAT,
    _pack_ints,
    _unpack_ints,
    encode_snapshot,
    snapshot_format,
)


def test_replace_snapshot_keeps_the_new_snapshot_only(target: Target) -> None:
    """After `replace_snapshot` at v the session holds that one snapshot; other sessions
    keep theirs; replacing at a version already saved keeps the first and still prunes."""
    with open_store(target.url) as store:
        backend = store.backend
        session, other = uuid4(), uuid4()
        for version in (3, 5):
            backend.save_snapshot(session, version, b"old %d" % version)
        backend.save_snapshot(other, 4, b"other")
        backend.replace_snapshot(session, 8, b"new")
        assert (8, b"new") == backend.load_snapshot(session)
        assert [8] == [r.originator_version
                       for r in backend.snapshot_recorder.select_events(session)]
        assert (4, b"other") == backend.load_snapshot(other)
        backend.save_snapshot(session, 9, b"first")
        backend.save_snapshot(session, 10, b"kept")
        backend.replace_snapshot(session, 10, b"second")
        assert (10, b"kept") == backend.load_snapshot(session)
        assert [10] == [r.originator_version
                        for r in backend.snapshot_recorder.select_events(session)]
        with pytest.raises(ValueError, match="version"):
            backend.replace_snapshot(session, 0, b"x")


def test_the_store_writes_format_4_and_keeps_one_snapshot(target: Target) -> None:
    """Appends take their snapshots in format 4, one kept per session, and verify passes."""
    with open_store(target.url, snapshot_interval=10) as store:
        session = store.start_session(profile=LIMIT_OFF)
        run_turns(session, 0, 12)
        uuid = UUID(session.id)
        found = store.backend.load_snapshot(uuid)
        assert found is not None
        assert SNAPSHOT_FORMAT == 4 == msgpack.unpackb(found[1])[0]
        assert 1 == len(snapshot_versions(store, session.id))
        assert [] == store.backend.check_chain(uuid)
        assert folded(store.backend, session.id).chat_view() == store.restore(
            session.id
        ).chat_view()


def folded(backend: EventStoreBackend, session_id: str) -> SessionState:
    """The session folded from every event, as `verify` folds it (one form, ADR-0076)."""
    return fold(backend.read(UUID(session_id)))


def test_i20_p2_a_format_3_snapshot_is_a_miss_replayed_then_replaced(
    target: Target, caplog: pytest.LogCaptureFixture
) -> None:
    """A store holding a format 3 snapshot of the session (written before ADR-0074): the
    restore replays every event without a warning and shows what the live session shows;
    verify passes with a note; the next append (past the due point) writes a format 4
    snapshot in its place, which the next restore starts from and verify compares."""
    with open_store(target.url, snapshot_interval=50, snapshot_messages=10**6) as store:
        session = store.start_session(profile=LIMIT_OFF)
        run_turns(session, 0, 30)
        uuid = UUID(session.id)
        whole = folded(store.backend, session.id)
        head = store.backend.read_with_chain(uuid)[-1][1]
        old = in_old_format(encode_snapshot(whole, head), 3)
        store.backend.prune_snapshots(uuid, before_version=session.version + 1)
        store.backend.save_snapshot(uuid, session.version, old)
        with caplog.at_level(logging.INFO, "turnledger"):
            restored = store.restore(session.id)
        assert [("INFO", True)] == [
            (r.levelname, "a miss" in r.getMessage())
            for r in caplog.records if "snapshot" in r.getMessage()
        ]
        assert (session.conversation_view(), session.chat_view()) == (
            restored.conversation_view(), restored.chat_view()
        )
        report = verify(store.backend)
        assert ((), ["old format, not compared"]) == (
            report.violations,
            [n.detail.split(": ")[1].split(" (")[0] for n in report.notes],
        )
        run_turns(restored, 30, 1)
        found = store.backend.load_snapshot(uuid)
        assert found is not None
        assert (session.version + 1, SNAPSHOT_FORMAT) == (found[0], snapshot_format(found[1]))
        assert [found[0]] == snapshot_versions(store, session.id)
        caplog.clear()
        with caplog.at_level(logging.INFO, "turnledger"):
            again = store.restore(session.id)
        assert [] == [r.getMessage() for r in caplog.records if "snapshot" in r.getMessage()]
        assert restored.chat_view() == again.chat_view()
        assert ((), ()) == (verify(store.backend).violations, verify(store.backend).notes)


def test_a_rewritten_format_4_snapshot_is_named_by_verify(target: Target) -> None:
    """A region column of the stored snapshot changed and its digest recomputed (what the
    digest cannot catch, ADR-0023): verify reports the snapshot and names that field."""
    with open_store(target.url, snapshot_interval=10**6, snapshot_messages=10**6) as store:
        session = store.start_session(profile=LIMIT_OFF)
        run_turns(session, 0, 30)
        uuid = UUID(session.id)
        whole = folded(store.backend, session.id)
        head = store.backend.read_with_chain(uuid)[-1][1]
        _, _, z = msgpack.unpackb(encode_snapshot(whole, head))
        body = msgpack.unpackb(zlib.decompress(z), timestamp=3)
        real = _unpack_ints(body["segment_real"])
        real[0] += 5
        body["segment_real"] = _pack_ints(real)
        z = zlib.compress(msgpack.packb(body, datetime=True))
        forged = msgpack.packb([SNAPSHOT_FORMAT, hashlib.sha256(z).digest(), z])
        store.backend.save_snapshot(uuid, session.version, forged)
        report = verify(store.backend)
        assert [("E5-snapshot", True)] == [
            (v.rule, "segment_real" in v.detail) for v in report.violations
        ]
