"""``memory://`` and ``memory://NAME``: the library's in-process (POPO) recorders.

``memory://`` is private to the backend object; ``memory://NAME`` is shared by every backend
opened with the same NAME in this process (until `drop_memory_store`). No option is accepted.
A memory store has no SQL database: its projections get a private in-memory SQLite database.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import sys
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Sequence
from typing import Self
from uuid import UUID

import attrs
from eventsourcing.persistence import AggregateRecorder, ApplicationRecorder, StoredEvent
from eventsourcing.popo import (
    POPOAggregateRecorder,
    POPOApplicationRecorder,
    POPOFactory,
    POPOTrackingRecorder,
)
from eventsourcing.utils import Environment

from turnledger.store.backends.port import (
    SETTINGS_TABLE,
    Database,
    Recorders,
    SqlConnection,
    SqlStatement,
    run_transaction,
    url_options,
)
from turnledger.store.backends.sqlite import SQLITE_DIALECT

__all__ = ["MemoryDatabase", "MemoryEventRecorder", "drop_memory_store"]

class MemoryEventRecorder(POPOApplicationRecorder):
    """The library's in-memory event recorder, plus raw row access for tamper tests.

    A memory store has no table that a test could edit behind the store's back (as the SQL
    backends' tests do with SQL), so the rows are reached here.
    """

    def _position(self, session_id: UUID, version: int) -> int:
        return self._stored_events_index[str(session_id)][version]

    def stored_record(self, session_id: UUID, version: int) -> StoredEvent:
        """The raw record of ``version`` of a session (``KeyError`` when absent)."""
        with self._database_lock:
            return self._stored_events[self._position(session_id, version)]

    def overwrite_record(self, session_id: UUID, version: int, topic: str, state: bytes) -> None:
        """Replace the topic and state of a stored record in place (tamper tests)."""
        with self._database_lock:
            position = self._position(session_id, version)
            self._stored_events[position] = dataclasses.replace(
                self._stored_events[position], topic=topic, state=state
            )

    def session_keys(self) -> list[object]:
        """The ``originator_id`` of every session with a record (`stored_session_ids`)."""
        with self._database_lock:
            return [key for key, index in self._stored_events_index.items() if index]

    def forget_record(self, session_id: UUID, version: int) -> None:
        """Make a stored record unreachable by its session (tamper tests: a deleted row)."""
        with self._database_lock:
            del self._stored_events_index[str(session_id)][version]


class MemorySnapshotRecorder(POPOAggregateRecorder):
    """The library's in-memory recorder of snapshots, plus the deletes it lacks (the
    library's recorders insert and select only; a SQL backend deletes with SQL)."""

    def delete_before(self, session_id: UUID, before_version: int) -> None:
        """Forget the session's snapshots taken before ``before_version``: the index lets go
        of their versions and the list of their bytes."""
        with self._database_lock:
            index = self._stored_events_index[str(session_id)]
            for version in [v for v in index if v < before_version]:
                self._stored_events[index.pop(version)] = None  # type: ignore[call-overload]

    def clear(self) -> None:
        """Forget every snapshot."""
        with self._database_lock:
            self._stored_events.clear()
            self._stored_events_index.clear()


def _keys_uri() -> str:
    return f"file:turnledger-keys-{uuid.uuid4().hex}?mode=memory&cache=shared"


@attrs.define
class _MemoryRecorders:
    events: MemoryEventRecorder = attrs.field(factory=MemoryEventRecorder)
    snapshots: MemorySnapshotRecorder = attrs.field(factory=MemorySnapshotRecorder)
    tracking: POPOTrackingRecorder = attrs.field(factory=POPOTrackingRecorder)
    keys_uri: str = attrs.field(factory=_keys_uri)
    """A shared in-memory SQLite database for the keys table (`Database.key_sql`); it lives
    as long as ``keys_keeper`` (this store) does."""
    keys_keeper: sqlite3.Connection = attrs.field(
        default=attrs.Factory(lambda self: _connect_keys(self.keys_uri), takes_self=True)
    )


def _connect_keys(uri: str) -> sqlite3.Connection:
    return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)


_named: dict[str, _MemoryRecorders] = {}
_named_lock = threading.Lock()


def drop_memory_store(name: str) -> None:
    """Forget the named in-memory store ``memory://NAME`` (open backends keep their data)."""
    with _named_lock:
        _named.pop(name, None)


class MemoryDatabase(Database):
    """The in-process store: private (``memory://``) or shared by name (``memory://NAME``)."""

    def __init__(self, url: str, name: str) -> None:
        super().__init__(url)
        self.name = name
        self._keys_uri = _keys_uri()

    @classmethod
    def from_url(cls, url: str, rest: str) -> Self:
        name, _, query = rest.partition("?")
        url_options(url, query, ())
        return cls(url, urllib.parse.unquote(name))

    def open(self, settings: dict[str, str]) -> Recorders:
        if self.name:
            with _named_lock:
                recorders = _named.get(self.name)
                if recorders is None:
                    recorders = _named[self.name] = _MemoryRecorders()
        else:
            recorders = _MemoryRecorders()
        tracking = recorders.tracking
        self._keys_uri = recorders.keys_uri
        return Recorders.of(
            POPOFactory(Environment("", settings)),
            recorders.events,
            recorders.snapshots,
            lambda: tracking,
        )

    def stored_session_ids(self, recorder: ApplicationRecorder) -> list[object] | None:
        return recorder.session_keys() if isinstance(recorder, MemoryEventRecorder) else None

    def delete_snapshots(
        self, recorder: AggregateRecorder, session_id: UUID, before_version: int
    ) -> None:
        _snapshots(recorder).delete_before(session_id, before_version)

    def rewrite_states(
        self,
        events: ApplicationRecorder,
        snapshots: AggregateRecorder,
        records: Sequence[StoredEvent],
        keys: Sequence[SqlStatement],
    ) -> None:
        """The records' states replaced in place and the snapshots dropped inside a
        transaction of the keys database, which runs ``keys``: the recorders have none."""
        assert isinstance(events, MemoryEventRecorder), "the recorder this database opened"
        table = _snapshots(snapshots)

        def rewrite() -> None:
            for record in records:
                events.overwrite_record(
                    _uuid(record.originator_id), record.originator_version, record.topic,
                    record.state,
                )
            table.clear()

        sql = self.key_sql()
        try:
            run_transaction(sql, keys, then=rewrite)
        finally:
            sql.connection.close()

    def rewrite_all(
        self,
        events: ApplicationRecorder,
        snapshots: AggregateRecorder,
        rewrite: Callable[[list[StoredEvent], dict[str, str]], list[StoredEvent]],
        keys: Sequence[SqlStatement],
    ) -> int:
        """Every record given to ``rewrite``, inside a transaction of the keys database
        (the recorders have none; a memory store has one process)."""
        assert isinstance(events, MemoryEventRecorder), "the recorder this database opened"
        records = [
            StoredEvent(_uuid(n.originator_id), n.originator_version, n.topic, n.state)
            for n in events.select_notifications(start=1, limit=sys.maxsize)
        ]
        sql = self.key_sql()
        try:
            cursor = sql.connection.cursor()
            cursor.execute(f"SELECT name, value FROM {SETTINGS_TABLE}")
            settings = {str(name): str(value) for name, value in cursor.fetchall()}
        finally:
            sql.connection.close()
        rewritten = rewrite(records, settings)
        self.rewrite_states(events, snapshots, rewritten, keys)
        return len(rewritten)

    def key_sql(self) -> SqlConnection:
        """The store's own in-memory keys database (shared by every backend of a name)."""
        return SqlConnection(_connect_keys(self._keys_uri), SQLITE_DIALECT)

    def connect_sql(self) -> SqlConnection:
        # No SQL database behind a memory store: the same tables in a private SQLite database.
        connection = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        return SqlConnection(connection, SQLITE_DIALECT)


def _snapshots(recorder: AggregateRecorder) -> MemorySnapshotRecorder:
    assert isinstance(recorder, MemorySnapshotRecorder), "the recorder this database opened"
    return recorder


def _uuid(value: UUID | str) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))
