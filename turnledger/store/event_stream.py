"""The session streams of the event store: append, settle an in-doubt append, checked reads.

A part of `turnledger.store.backend.EventStoreBackend` (E2, E3, E11): one transaction per
append, a hash chain checked on every read (ADR-0004, ADR-0024), an append whose outcome is in
doubt settled by its chain value (ADR-0020, ADR-0064). What differs per backend (the thin
insert, the bulk read, the settled read) comes from the port.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Final
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from turnledger.domain.errors import (
    AnchorMismatch,
    AppendInDoubt,
    AppendRefused,
    ConcurrencyConflict,
    InvalidAppend,
    TurnledgerError,
)
from turnledger.domain.events import DomainEvent, SessionStarted
from turnledger.domain.findings import Finding
from turnledger.store.backend_core import BackendCore, to_uuid
from turnledger.store.backends.port import BeforeCommit, SqlStatement, StoreUnavailable
from turnledger.store.mapper import ZERO_CHAIN, Row, verify_chain

__all__ = ["AnchorMismatch", "AppendInDoubt", "EventStreams", "InvalidAppend"]

log = logging.getLogger("turnledger.store")

_ANSWER_DELAY: Final = (0.02, 0.5)
"""First and largest pause (seconds) between two attempts to learn an in-doubt outcome."""


class EventStreams(BackendCore):
    """The part of `EventStoreBackend` that writes and reads the session streams."""

    # -- writing --

    def append(
        self,
        session_id: UUID,
        events: Sequence[DomainEvent],
        *,
        prev_chain: bytes,
        head_known: bool = False,
        keys: Sequence[SqlStatement] = (),
        told: Callable[[], None] | None = None,
    ) -> bytes:
        """Record ``events`` of one session in ONE transaction; return the new chain head (E3).

        The events' ``originator_version`` carry the expected version: the first must be the
        session's current version + 1 (1 for a new session, whose first event must be
        `SessionStarted`), the others follow without gaps. ``prev_chain`` is the chain head the
        caller holds (the value returned by the previous append or `read_with_chain`;
        `ZERO_CHAIN` for a new session). An empty ``events`` records nothing and returns
        ``prev_chain``.

        By default the stored head is read first, so a batch that does not continue the stored
        stream is refused before anything is written. ``head_known=True`` skips that read (one
        round trip per append, ADR-0035): the caller vouches that the first version and
        ``prev_chain`` continue a head it got from this store (its own last append or a read);
        a record another writer made since then still fails the insert on the (session,
        version) key. A gap is then not refused here (the checked reads report it, ADR-0024).

        ``keys``: statements on the store's keys tables (`turnledger.store.keys`) committed in
        the same transaction as the events, or not at all: `Store.forget` destroys a data key
        with the record of it (ADR-0066).

        ``told``: called once right before the statement that commits the batch, where the
        backend sends one that commits on its own (`BeforeCommit`), so the caller may work
        while the database commits (ADR-0093); its error is logged, never raised.

        Raises `ConcurrencyConflict` naming the session and the versions when another writer
        recorded any of these versions first — then nothing of this batch is stored; the caller
        reloads and may retry (`retry_on_conflict`). Raises `InvalidAppend` when the batch does
        not continue the stream (gap, repeated version, another session's event, a
        ``prev_chain`` that is not the stored head) and `StoreUnavailable` on database failure.
        """
        self._check_open()
        if not events:
            return prev_chain
        first = self._check_batch(session_id, events)
        stored, head = self.mapper.to_stored_events(events, prev_chain)
        last = first + len(events) - 1
        if not head_known:
            try:
                self._check_head(session_id, first, prev_chain)
            except StoreUnavailable as failure:
                self._refuse_on_limit(failure)  # nothing was sent yet
                raise
        try:
            with self._translate("append", session_id, first):
                self._insert_records(stored, BeforeCommit(self.fence, keys, told))
        except (ConcurrencyConflict, StoreUnavailable) as failure:
            # In doubt: the commit may have landed although the insert failed (a connection
            # lost after COMMIT, a driver retry that then hit the primary key).
            return self._settle_in_doubt(session_id, first, last, head, failure)
        return head

    def _check_head(self, session_id: UUID, first: int, prev_chain: bytes) -> None:
        """Refuse a batch starting at ``first`` after ``prev_chain`` that does not continue
        the stored head (one read)."""
        current, current_chain = self.head(session_id)
        if first <= current:
            raise ConcurrencyConflict(
                f"session {session_id}: version {first} was already recorded by another "
                f"writer (the session is at version {current}); reload and retry"
            )
        if first > current + 1:
            raise InvalidAppend(
                f"session {session_id} is at version {current}: the next event must have "
                f"version {current + 1}, got {first}"
            )
        if prev_chain != current_chain:
            raise InvalidAppend(
                f"session {session_id}: prev_chain is not the chain head of version {current}; "
                "pass the value returned by the previous append or read_with_chain"
            )

    def _settle_in_doubt(
        self, session_id: UUID, first: int, last: int, head: bytes, failure: TurnledgerError
    ) -> bytes:
        """Find out whether THIS batch was stored after its insert failed (E3, ADR-0020,
        ADR-0064).

        The chain value of a record covers its bytes and every record before it, so a record
        at ``last`` whose chain is ``head`` is this very batch: success, ``head`` is returned.
        Another record at these versions is a real `ConcurrencyConflict`; nothing there means
        nothing of the batch was stored (the failure is raised). Every failure after the
        insert was sent is settled so, once the database answers again (`_stored`); only when
        it does not answer in time is the outcome unknown: `AppendInDoubt`.
        """
        # The server refused the statement (lock or statement timeout) or no connection was
        # had (connect timeout): the transaction cannot commit.
        self._refuse_on_limit(failure)
        # After a database error a dying transaction may still commit: wait for it first.
        stored = self._stored(
            session_id, first, last, head, wait=isinstance(failure, StoreUnavailable),
            failure=failure,
        )
        if stored:
            log.warning("session %s: versions %d to %d were recorded although the append "
                        "failed (%s)", session_id, first, last, failure)
            return head
        if stored is None and isinstance(failure, StoreUnavailable):
            raise StoreUnavailable(f"{failure}; nothing of this batch was stored") from failure
        raise ConcurrencyConflict(
            f"session {session_id}: versions {first} to {last} conflict with events "
            "another writer recorded first; nothing of this batch was stored; reload "
            "and retry"
        ) from failure.__cause__

    def _refuse_on_limit(self, failure: TurnledgerError) -> None:
        """Raise `AppendRefused` when ``failure`` is a limit that ran out (lock, statement or
        connect timeout) before anything of the batch could commit."""
        if self.database.limits.exceeded(failure) is not None:
            raise AppendRefused(f"{failure}; nothing of this batch was stored") from failure

    def resolve_in_doubt(self, doubt: AppendInDoubt) -> bool:
        """Whether the batch ``doubt`` was raised for is stored (ADR-0064).

        Waits for writers still in flight and for the database to answer, as the append did;
        False when nothing or another writer's record is at its last version. Raises
        `AppendInDoubt` again when the database still does not answer.
        """
        self._check_open()
        return bool(self._stored(
            doubt.session_id, doubt.first, doubt.last, doubt.head, wait=True, failure=None
        ))

    def _stored(
        self, session_id: UUID, first: int, last: int, head: bytes, *, wait: bool,
        failure: TurnledgerError | None,
    ) -> bool | None:
        """True: the record at version ``last`` carries ``head`` (the batch is stored);
        False: another record is at versions ``first`` to ``last``; None: none is.

        ``wait``: read once no write transaction is in flight (one of a lost connection may
        still be committing). Tried again, with growing pauses, until the database answers
        or ``limits.answer`` seconds have passed; then `AppendInDoubt`, naming ``failure``
        (what made the outcome doubtful) and the last error.
        """
        deadline = time.monotonic() + self.database.limits.answer
        pause = _ANSWER_DELAY[0]
        while True:
            try:
                rows = self._batch_rows(session_id, first, last, wait=wait)
                break
            except StoreUnavailable as error:
                if self._closed or time.monotonic() + pause > deadline:
                    why = str(error) if failure is None else f"{failure}; then: {error}"
                    raise AppendInDoubt(
                        f"session {session_id}: cannot tell whether versions {first} to "
                        f"{last} were recorded ({why}); retrying the same command on the "
                        "session is safe: it finds them if they were",
                        session_id=session_id, first=first, last=last, head=head,
                    ) from error
                time.sleep(pause)
                pause = min(2 * pause, _ANSWER_DELAY[1])
        if not rows:
            return None
        version, topic, state = rows[-1]
        chain, _ = self.mapper.open_row(session_id, version, topic, state)
        return version == last and chain == head

    def _batch_rows(self, session_id: UUID, first: int, last: int, *, wait: bool) -> list[Row]:
        """The stored records at versions ``first`` to ``last`` (settled when ``wait``)."""
        if wait:
            with self._translate("check the append", session_id, first):
                rows = self.database.settled_rows(session_id, first - 1, last)
            if rows is not None:
                return rows
        return self._rows(session_id, first - 1, last)

    def _check_batch(self, session_id: UUID, events: Sequence[DomainEvent]) -> int:
        first = events[0].originator_version
        if type(first) is not int or first < 1:
            raise InvalidAppend(f"session {session_id}: versions start at 1, got {first!r}")
        for offset, event in enumerate(events):
            if event.originator_id != session_id:
                raise InvalidAppend(
                    f"session {session_id}: event {offset} belongs to session "
                    f"{event.originator_id}"
                )
            if event.originator_version != first + offset:
                raise InvalidAppend(
                    f"session {session_id}: event {offset} has version "
                    f"{event.originator_version}, expected {first + offset} (no gaps)"
                )
        if first == 1 and not isinstance(events[0], SessionStarted):
            # session_ids() lists sessions by their SessionStarted record.
            raise InvalidAppend(
                f"session {session_id}: the first event must be SessionStarted, "
                f"got {type(events[0]).__name__}"
            )
        return first

    # -- reading --

    def head(self, session_id: UUID) -> tuple[int, bytes]:
        """(current version, chain head) of a session; ``(0, ZERO_CHAIN)`` when it is absent.

        Reads one record. Raises `CorruptRecord` when that record cannot be opened.
        """
        self._check_open()
        with self._translate("read", session_id):
            latest = self.recorder.select_events(session_id, desc=True, limit=1)
        if not latest:
            return 0, ZERO_CHAIN
        chain, _ = self.mapper.open_record(latest[0])
        return latest[0].originator_version, chain

    def read(
        self,
        session_id: UUID,
        *,
        after_version: int = 0,
        upto_version: int | None = None,
        prev_chain: bytes | None = None,
    ) -> list[DomainEvent]:
        """The session's events with ``after_version < version <= upto_version``, in order.

        Checked like `read_with_chain`. An unknown session gives ``[]``. Raises `CorruptRecord`
        naming the session and the version of the first record that is missing, edited or
        cannot be decoded (E11).
        """
        return [event for event, _ in self.read_with_chain(
            session_id, after_version=after_version, upto_version=upto_version,
            prev_chain=prev_chain,
        )]

    def read_with_chain(
        self,
        session_id: UUID,
        *,
        after_version: int = 0,
        upto_version: int | None = None,
        prev_chain: bytes | None = None,
    ) -> list[tuple[DomainEvent, bytes]]:
        """Like `read`, with each record's chain value (the last one is the head).

        What is read is checked (ADR-0024): versions follow each other from ``after_version
        + 1`` without a gap, and each record's chain is recomputed from its predecessor's. The
        chain starts from `ZERO_CHAIN` when ``after_version`` is 0; otherwise from the chain
        of the record at ``after_version``, which must equal ``prev_chain`` when one is given
        (a snapshot's chain) — else `AnchorMismatch`. Raises `CorruptRecord` naming the
        session and the version of the first record that is missing, edited or undecodable.
        """
        if after_version <= 0:
            if prev_chain not in (None, ZERO_CHAIN):
                raise AnchorMismatch(
                    f"session {session_id}: the chain before version 1 is all zeros",
                    session_id=str(session_id), version=0,
                )
            rows = self._rows(session_id, 0, upto_version)
            if not rows:
                return []
            return self.mapper.decode_rows(to_uuid(session_id), rows, 1, ZERO_CHAIN)
        rows = self._rows(session_id, after_version - 1, upto_version)
        anchor_chain = self._anchor(session_id, after_version, rows, prev_chain)
        if anchor_chain is None:
            return []
        return self.mapper.decode_rows(
            to_uuid(session_id), rows[1:], after_version + 1, anchor_chain
        )

    def read_pages(
        self, session_id: UUID, *, page_size: int = 1000, upto_version: int | None = None
    ) -> Iterator[list[DomainEvent]]:
        """The session's events in pages of at most ``page_size``, in order, checked like
        `read_with_chain` (each page continues the chain of the one before): O(page) memory
        for any session length. Raises `CorruptRecord` as `read` does."""
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        after, chain = 0, ZERO_CHAIN
        while upto_version is None or after < upto_version:
            last = after + page_size if upto_version is None else min(
                after + page_size, upto_version
            )
            page = self.read_with_chain(
                session_id, after_version=after, upto_version=last, prev_chain=chain
            )
            if not page:
                return
            yield [event for event, _ in page]
            ended = len(page) < last - after  # the session ends inside this page
            after, chain = page[-1][0].originator_version, page[-1][1]
            if ended:
                return

    def _anchor(
        self,
        session_id: UUID,
        version: int,
        records: Sequence[Row],
        expected: bytes | None,
    ) -> bytes | None:
        """The stored chain of the record at ``version`` (``records[0]``), checked against
        ``expected``; None when the session ends before ``version`` and nothing is expected."""
        if not records or records[0][0] != version:
            if expected is None and not records:
                return None
            raise AnchorMismatch(
                f"session {session_id}: there is no record at version {version} to continue "
                "from (deleted, or the session ends before it)",
                session_id=str(session_id), version=version,
            )
        chain, _ = self.mapper.open_row(session_id, *records[0])
        if expected is not None and chain != expected:
            raise AnchorMismatch(
                f"session {session_id}: the record at version {version} does not carry the "
                "expected chain value",
                session_id=str(session_id), version=version,
            )
        return chain

    def read_records(
        self, session_id: UUID, *, after_version: int = 0, upto_version: int | None = None
    ) -> list[StoredEvent]:
        """The session's raw records (topic, sealed state), in version order, for audits."""
        return self._select(session_id, after_version, upto_version)

    def _select(
        self, session_id: UUID, after_version: int, upto_version: int | None
    ) -> list[StoredEvent]:
        rows, records = self._bulk(session_id, after_version, upto_version)
        if records is not None:
            return records
        if not rows:
            return []
        uuid = to_uuid(session_id)  # one object for every record, not one parse per row
        return [StoredEvent(originator_id=uuid, originator_version=version, topic=topic,
                            state=state) for version, topic, state in rows]

    def _rows(self, session_id: UUID, after_version: int, upto_version: int | None) -> list[Row]:
        """The session's records as `Row` s: the backend's bulk read (ADR-0053), or the
        library's records where the backend has none."""
        rows, records = self._bulk(session_id, after_version, upto_version)
        if records is not None:
            rows = [(r.originator_version, r.topic, r.state) for r in records]
        return rows

    def _bulk(
        self, session_id: UUID, after_version: int, upto_version: int | None
    ) -> tuple[list[Row], list[StoredEvent] | None]:
        """The backend's bulk rows, or (where it has no bulk read) the library's records."""
        self._check_open()
        gt = after_version if after_version > 0 else None
        with self._translate("read", session_id):
            rows = self.database.session_rows(self.recorder, session_id, gt, upto_version)
            if rows is None:
                return [], list(self.recorder.select_events(session_id, gt=gt, lte=upto_version))
        return rows, None

    # -- auditing --

    def check_chain(
        self, session_id: UUID, *, expected_version: int | None = None
    ) -> list[Finding]:
        """Recompute the session's hash chain (ADR-0004); `verify_chain` explains the findings.
        The store's own check: the audit of a whole store is `turnledger.verify`, which runs
        this check and every rule besides (issue 20 point 5: one public verify).

        ``expected_version`` is an external anchor (e.g. the version of the latest snapshot)
        that makes deleted newest records visible.
        """
        return verify_chain(
            self.read_records(session_id), self.mapper, expected_version=expected_version
        )
