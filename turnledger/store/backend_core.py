"""The state and the boundary every part of the event store shares (`EventStoreBackend`).

`EventStoreBackend` is one object over the `eventsourcing` recorders of one database, built
from parts by responsibility: the session streams (`turnledger.store.event_stream`), the
snapshots (`turnledger.store.snapshot_table`) and the session index with the notification log
(`turnledger.store.session_index`). `BackendCore` is what they share: the database, its
recorders and the mapper, the lifecycle, and the one translation of library and driver
errors into the `TurnledgerError` family. Nothing here knows the backend: the
parts ask the port (`turnledger.store.backends.port.Database`) for what differs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Self
from uuid import UUID

from eventsourcing.persistence import IntegrityError, StoredEvent

from turnledger.domain.errors import ConcurrencyConflict, InvalidAppend, TurnledgerError
from turnledger.domain.events import SessionStarted
from turnledger.store.backends.port import (
    BeforeCommit,
    Database,
    Fence,
    Recorders,
    StoreUnavailable,
    database_errors,
)
from turnledger.store.crypto import Protection
from turnledger.store.mapper import TurnledgerMapper

__all__ = ["BackendCore", "to_uuid"]


class BackendCore:
    """What every part of `EventStoreBackend` shares: the database and its recorders, the
    mapper and the keys, ``close``, and the translation of errors at the boundary.

    Raises `StoreUnavailable` after `close` (`_check_open`) and for every database failure
    (`_translate`).
    """

    def __init__(
        self,
        database: Database,
        recorders: Recorders,
        mapper: TurnledgerMapper,
        protection: Protection | None = None,
    ) -> None:
        self.database = database
        """The backend this store runs on (`turnledger.store.backends`)."""
        self.url = database.url
        """The URL this backend was opened with, password removed (`redact_url`)."""
        self.factory = recorders.factory
        """The library's infrastructure factory (escape hatch for projections' own tables)."""
        self.recorder = recorders.events
        """The library's application recorder of events (raw access for audits and tests)."""
        self.snapshot_recorder = recorders.snapshots
        """The library's recorder of the ``stored_snapshots`` table."""
        self.mapper = mapper
        self.protection = protection if protection is not None else Protection()
        """Keys table, keyring and chain of the store (`turnledger.store.crypto`)."""
        self._tracking_recorder = recorders.tracking
        self.fence = Fence()
        """The store-wide settings every append checks in its own transaction (ADR-0098);
        `open_backend` sets them once the keys are known."""
        self._insert_records = recorders.insert or self._insert_apart
        """The insert of an append: the backend's (`Recorders.insert`), or where the keys
        live in a database of their own, `_insert_apart`. Chosen once, here."""
        self._closer = recorders.close
        self._closed = False
        self._lock = threading.Lock()
        try:
            self._start_topic = mapper.codec.topic_of(SessionStarted)
        except TypeError:
            raise ValueError("the codec of a backend must register SessionStarted") from None

    # -- lifecycle --

    def close(self) -> None:
        """Release the connections; later calls raise `StoreUnavailable`. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.protection.close()
        if self._closer is not None:
            with self._translate("close"):
                self._closer()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<EventStoreBackend {self.url}{' closed' if self._closed else ''}>"

    def _insert_apart(self, records: Sequence[StoredEvent], before: BeforeCommit) -> None:
        """The insert of a store whose keys live in a database of their own (memory, a
        read-only SQLite file): the library's insert, unfenced (one process), inside a
        transaction of the keys database that runs ``before.keys`` first, when there are
        any. Nobody is told before the commit."""
        if not before.keys:
            self.recorder.insert_events(records)
            return
        table = self.protection.keys
        if table is None:
            raise InvalidAppend(f"{self.url} has no keys table to write to")
        def insert() -> None:
            self.recorder.insert_events(records)

        table.write(before.keys, then=insert)

    # -- error translation --

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable(f"the store {self.url} is closed")

    @contextlib.contextmanager
    def _translate(
        self, action: str, session_id: UUID | None = None, version: int | None = None
    ) -> Iterator[None]:
        """Library and driver errors -> the TurnledgerError family."""
        try:
            yield
        except TurnledgerError:
            raise
        except IntegrityError as error:
            where = f"session {session_id}" if session_id is not None else "the store"
            at = f" version {version}" if version is not None else ""
            raise ConcurrencyConflict(
                f"{where}{at}: recorded by another writer first; reload and retry"
            ) from error
        except database_errors() as error:
            raise StoreUnavailable(
                f"cannot {action} in {self.url}: {self.database.describe_failure(error)}"
            ) from error


def to_uuid(value: UUID | str) -> UUID:
    """``value`` as a UUID (the library's records may carry the id as text)."""
    return value if isinstance(value, UUID) else UUID(value)
