"""The snapshots of the event store: save, replace, prune, load, and the rows no restore reads.

A part of `turnledger.store.backend.EventStoreBackend`. A snapshot is the session layer's
opaque bytes, sealed like an event (ADR-0023, ADR-0058); the library's recorders insert and
select them, and the backend deletes them (`Database.delete_snapshots`, `replace_snapshot`:
one transaction on the append path, ADR-0060).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Final
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from turnledger.domain.errors import ConcurrencyConflict, TurnledgerError, bounded
from turnledger.store.backend_core import BackendCore
from turnledger.store.codec import describe_error
from turnledger.store.mapper import UndecodableRecord

__all__ = ["SNAPSHOT_TOPIC", "SnapshotTable"]

log = logging.getLogger("turnledger.store")

SNAPSHOT_TOPIC: Final = "turnledger:snapshot"
"""Topic column of every snapshot record (the payload is the session layer's bytes)."""


class SnapshotTable(BackendCore):
    """The part of `EventStoreBackend` that keeps the sessions' snapshots."""

    def save_snapshot(self, session_id: UUID, version: int, payload: bytes) -> None:
        """Store the session layer's snapshot ``payload`` taken at ``version``.

        Sealed like events (compressed, encrypted when configured). A second snapshot at the
        same version keeps the first one (snapshots are caches). Raises ``ValueError`` for a
        version < 1 or a payload that is not bytes.
        """
        record = self._snapshot_record(session_id, version, payload)
        try:
            with self._translate("save a snapshot", session_id, version):
                self.snapshot_recorder.insert_events([record])
        except ConcurrencyConflict:
            log.debug("snapshot of %s at version %d already exists", session_id, version)

    def _snapshot_record(self, session_id: UUID, version: int, payload: bytes) -> StoredEvent:
        self._check_open()
        if type(version) is not int or version < 1:
            raise ValueError(f"snapshot version must be an int >= 1, got {version!r}")
        if not isinstance(payload, bytes):
            raise ValueError("snapshot payload must be bytes")
        return StoredEvent(
            originator_id=session_id,
            originator_version=version,
            topic=SNAPSHOT_TOPIC,
            state=self.mapper.seal_snapshot(session_id, version, payload),
        )

    def prune_snapshots(self, session_id: UUID, *, before_version: int) -> None:
        """Delete the session's snapshots taken before ``before_version`` (ADR-0030): a
        restore reads the newest one only, so the older ones are dead bytes. Raises
        `StoreUnavailable` on database failure."""
        self._check_open()
        with self._translate("prune snapshots", session_id):
            self.database.delete_snapshots(self.snapshot_recorder, session_id, before_version)

    def replace_snapshot(self, session_id: UUID, version: int, payload: bytes) -> None:
        """`save_snapshot` and `prune_snapshots` before ``version``, in ONE transaction: one
        commit (one fsync) instead of two on the append path (ADR-0030, ADR-0060).

        A snapshot already at ``version`` is kept, and the older ones are deleted all the
        same. Raises ``ValueError`` as `save_snapshot` does, `StoreUnavailable` on database
        failure (nothing changed then).
        """
        record = self._snapshot_record(session_id, version, payload)
        try:
            with self._translate("save a snapshot", session_id, version):
                self.database.replace_snapshot(self.snapshot_recorder, record)
        except ConcurrencyConflict:  # rolled back: keep the first one, prune on its own
            log.debug("snapshot of %s at version %d already exists", session_id, version)
            self.prune_snapshots(session_id, before_version=version)

    def load_snapshot(
        self, session_id: UUID, *, upto_version: int | None = None
    ) -> tuple[int, bytes] | None:
        """(version, payload) of the latest snapshot at or before ``upto_version``, or None.

        Raises `CorruptRecord` naming the session and the version when it cannot be unsealed.
        """
        self._check_open()
        with self._translate("load a snapshot", session_id):
            found = self.snapshot_recorder.select_events(
                session_id, lte=upto_version, desc=True, limit=1
            )
        if not found:
            return None
        record = found[0]
        if record.topic != SNAPSHOT_TOPIC:  # a damaged row: its bytes are not to be trusted
            raise UndecodableRecord(
                session_id, record.originator_version, str(record.topic),
                f"a snapshot's topic must be {SNAPSHOT_TOPIC!r}",
            )
        try:
            payload = self.mapper.unseal_snapshot(session_id, record.originator_version,
                                                  record.state)
        except TurnledgerError:
            raise
        except Exception as error:  # cipher or compressor failure: the bytes are damaged
            raise UndecodableRecord(
                session_id, record.originator_version, record.topic, describe_error(error)
            ) from error
        return record.originator_version, payload

    def stray_snapshots(self, listed: Collection[UUID]) -> list[tuple[str, int, str]]:
        """The snapshot rows a restore of the ``listed`` sessions never reads, as
        ``(session id as stored, version, what is wrong)``: an id that is not a UUID, a
        session with no records, a version that is not a positive int (a topic that is not
        `SNAPSHOT_TOPIC` is `load_snapshot`'s finding). A damaged key hides a snapshot from
        its session, so only a listing of the table shows it (issue 19); ``[]`` where the
        backend cannot tell. Raises `StoreUnavailable`."""
        self._check_open()
        with self._translate("list the snapshots"):
            stored = self.database.stored_snapshot_keys(self.snapshot_recorder)
        known = set(listed)
        found: list[tuple[str, int, str]] = []
        for raw_id, raw_version, _topic in stored or ():
            version = raw_version if type(raw_version) is int else 0
            try:
                session = raw_id if isinstance(raw_id, UUID) else UUID(str(raw_id))
            except ValueError:
                found.append((str(raw_id), version, (
                    f"a snapshot whose session id {str(raw_id)!r} is not a UUID: no restore "
                    "reads it (a damaged or edited originator_id)")))
                continue
            if session not in known:
                found.append((str(session), version, (
                    "a snapshot of a session that has no records (a damaged or edited "
                    "originator_id, or records deleted under it)")))
            elif version < 1:
                found.append((str(session), version, (
                    f"a snapshot whose version is {bounded(repr(raw_version))}, not an int "
                    ">= 1 (a damaged or edited row)")))
        return found
