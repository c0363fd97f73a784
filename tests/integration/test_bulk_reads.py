"""The bulk read path (issue 12, point 4; E2, E4, E11; ADR-0052, ADR-0053).

SQLite reads a session as plain ``(version, topic, state)`` rows instead of the library's
records; `verify` decodes every record once. What is read, and what a damaged record gives,
must stay exactly what it was.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tests.integration.test_replay import open_sqlite, record_agent
from turnledger.domain.errors import CorruptRecord
from turnledger.domain.events import DomainEvent
from turnledger.replay.audit import verify
from turnledger.store.backends.sqlite import SQLiteDatabase
from turnledger.store.codec import EventCodec


def recorded(path: Path) -> UUID:
    with open_sqlite(path) as store:
        return UUID(record_agent(store).session.id)


def _damage_version_4(path: Path, session_id: UUID) -> None:
    """Make the state column of the session's record at version 4 undecodable (the store is
    closed: no live connection holds the file)."""
    connection = sqlite3.connect(path)
    with connection:
        connection.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = 4",
            (b"\xc1 not msgpack", session_id.hex),
        )
    connection.close()


@pytest.mark.parametrize(("after", "upto"), [(None, None), (3, None), (None, 5), (2, 9)])
def test_e2_sqlite_rows_are_the_library_records_columns(
    tmp_path: Path, after: int | None, upto: int | None
) -> None:
    """The bulk select gives the very (version, topic, state) the library's records hold."""
    session_id = recorded(tmp_path / "s.db")
    with open_sqlite(tmp_path / "s.db") as store:
        backend = store.backend
        expected = [(r.originator_version, r.topic, r.state)
                    for r in backend.recorder.select_events(session_id, gt=after, lte=upto)]
        assert isinstance(backend.database, SQLiteDatabase)
        actual = backend.database.session_rows(backend.recorder, session_id, after, upto)
    assert expected == actual
    assert all(type(row) is tuple for row in actual or [])


def test_e4_sqlite_bulk_read_equals_the_record_by_record_decode(tmp_path: Path) -> None:
    """`read` on SQLite (rows, generated decoders) gives the events and chains that decoding
    each library record with the mapper gives."""
    session_id = recorded(tmp_path / "s.db")
    with open_sqlite(tmp_path / "s.db") as store:
        backend = store.backend
        records = backend.recorder.select_events(session_id)
        expected = [backend.mapper.decode_record(r) for r in records]
        actual = backend.read_with_chain(session_id)
        paged = [e for page in backend.read_pages(session_id, page_size=7) for e in page]
    assert expected == actual
    assert [event for event, _ in expected] == paged


def test_e11_sqlite_bulk_read_names_a_damaged_record(tmp_path: Path) -> None:
    """A damaged state column read through the bulk path is a `CorruptRecord` naming the
    session and the version."""
    path = tmp_path / "s.db"
    session_id = recorded(path)
    _damage_version_4(path, session_id)
    with open_sqlite(path) as store, pytest.raises(CorruptRecord) as caught:
        store.backend.read(session_id)
    assert (str(session_id), 4) == (caught.value.session_id, caught.value.version)
    assert f"session {session_id} version 4 " in str(caught.value)


def test_e2_verify_decodes_each_record_once(tmp_path: Path, monkeypatch: Any) -> None:
    """`verify` decodes every record one time: the chain pass keeps the events the fold uses."""
    session_id = recorded(tmp_path / "s.db")
    calls: list[int] = []
    original = EventCodec.decode_event

    def counting(self: EventCodec, topic: str, payload: bytes, originator_id: UUID,
                 originator_version: int) -> DomainEvent:
        calls.append(originator_version)
        return original(self, topic, payload, originator_id, originator_version)

    with open_sqlite(tmp_path / "s.db") as store:
        events = store.backend.read(session_id)
        monkeypatch.setattr(EventCodec, "decode_event", counting)
        report = verify(store.backend)
    assert report.ok, report.violations
    assert [e.originator_version for e in events] == sorted(calls)


def test_e5_a_load_runs_no_collection_and_leaves_the_collector_as_it_was(
    tmp_path: Path
) -> None:
    """A load (what restore, reload and `read_state` read) builds a state that stays alive:
    the cyclic collector is paused while it is built (no collection runs, even at a threshold
    that would trigger many), and is on again after a load that worked and after one that met
    a damaged record; a collector the caller turned off stays off."""
    import gc

    from turnledger.store.pipeline import Pipeline

    path = tmp_path / "s.db"
    session_id = recorded(path)
    collections: list[str] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(phase)

    threshold = gc.get_threshold()
    gc.callbacks.append(seen)
    gc.set_threshold(5)  # a collection every few allocations, were the collector on
    try:
        with open_sqlite(path) as store:
            pipeline = Pipeline(store.backend, publish=lambda notices: None)
            collections.clear()
            pipeline.load(session_id)
            during = len(collections)  # no list built: that allocation could collect
            assert gc.isenabled()
            gc.disable()
            pipeline.load(session_id)
            assert not gc.isenabled()
            gc.enable()
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(seen)
    # The pause's own entry and exit may each start one (the allocations before it and the
    # count it ends with); without the pause this load started 60 at this threshold.
    assert during <= 2
    _damage_version_4(path, session_id)
    with open_sqlite(path) as store, pytest.raises(CorruptRecord):
        Pipeline(store.backend, publish=lambda notices: None).load(session_id)
    assert gc.isenabled()
