"""The low-level event store: one class over the `eventsourcing` recorders (E2, E3, E8).

`open_backend(url)` picks the backend of the URL's scheme from the registry
(`turnledger.store.backends.BACKENDS`) and builds the same `EventStoreBackend` over whatever
recorders it opens — backends differ only in that configuration (STYLE 4):

- ``memory://`` and ``memory://NAME`` — `turnledger.store.backends.memory`;
- ``sqlite:///path/to/file.db`` — `turnledger.store.backends.sqlite`;
- ``postgresql://user[:password]@host[:port]/dbname`` — `turnledger.store.backends.postgres`.

Each backend module documents its URL forms and options.

Why a thin class that owns the recorders rather than an ``eventsourcing.application.Application``
subclass: the hash chain (ADR-0004) makes each record depend on its predecessor, so events
cannot go through ``Application.save`` (which maps events one by one); sessions are folded by
the session layer, never by ``Repository.get`` / ``project_aggregate``; snapshots are opaque
bytes, not library ``Snapshot`` aggregates; and ``Application`` reads ``os.environ``, so a stray
``PERSISTENCE_MODULE`` or ``POSTGRES_SCHEMA`` could silently redirect a store away from its URL.
Here the URL (plus the optional ``env`` for compressor/cipher topics) is the whole configuration.

Every library or driver error is translated at this boundary: a duplicate (session, version)
becomes `ConcurrencyConflict`, anything else that goes wrong in the database `StoreUnavailable`,
an unusable URL `InvalidStoreURL`, a record that cannot be decoded `CorruptRecord`. Nothing
happens at import time: the database drivers are imported when a store is opened.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Final, Self, TypeVar
from uuid import UUID

from eventsourcing.persistence import IntegrityError, StoredEvent, TrackingRecorder

from turnledger.domain.errors import (
    ConcurrencyConflict,
    CorruptRecord,
    SessionForgottenError,
    SessionNotFound,
    TurnledgerError,
    bounded,
)
from turnledger.domain.events import DomainEvent, SessionStarted
from turnledger.store.backends import BACKENDS
from turnledger.store.backends.memory import drop_memory_store
from turnledger.store.backends.port import (
    Database,
    InvalidStoreURL,
    Recorders,
    SqlConnection,
    SqlStatement,
    StoreUnavailable,
    database_errors,
    redact_url,
)
from turnledger.store.codec import EventCodec, default_codec, describe_error
from turnledger.store.crypto import Protection, protect
from turnledger.store.mapper import (
    ZERO_CHAIN,
    ChainProblem,
    Row,
    TurnledgerMapper,
    UndecodableRecord,
    verify_chain,
)

__all__ = [
    "RETRY_BASE_DELAY",
    "RETRY_BUDGET_SECONDS",
    "RETRY_MAX_DELAY",
    "SNAPSHOT_TOPIC",
    "AnchorMismatch",
    "AppendInDoubt",
    "EventStoreBackend",
    "InvalidAppend",
    "InvalidStoreURL",
    "StoreUnavailable",
    "drop_memory_store",
    "open_backend",
    "redact_url",
    "retry_on_conflict",
]

log = logging.getLogger("turnledger.store")

SNAPSHOT_TOPIC: Final = "turnledger:snapshot"
"""Topic column of every snapshot record (the payload is the session layer's bytes)."""

_SESSION_PAGE: Final = 1000
_ANSWER_DELAY: Final = (0.02, 0.5)
"""First and largest pause (seconds) between two attempts to learn an in-doubt outcome."""

T = TypeVar("T")


# --- errors -------------------------------------------------------------------------------

class InvalidAppend(TurnledgerError, ValueError):
    """The events of an append do not continue the session's stream (a caller bug: versions
    that skip or repeat, another session's event, a chain head that is not the stored one)."""


class AnchorMismatch(CorruptRecord):
    """The record a checked read starts from is absent or does not carry the expected chain
    (a snapshot ahead of the log or not taken from it); the caller reads from version 1."""


class AppendInDoubt(StoreUnavailable):
    """An append failed after its insert was sent and the database did not answer again in
    time to tell whether the batch was stored (ADR-0064): the one `StoreUnavailable` of an
    append that may have stored something.

    ``session_id``, ``first`` and ``last`` (its versions) and ``head`` (the chain value its
    last record has if it was stored) name the batch; `EventStoreBackend.resolve_in_doubt`
    tells later whether it was. A `Session` remembers it: retrying the same command finds
    the batch if it was stored and returns it instead of recording it twice.
    """

    def __init__(
        self, message: str, *, session_id: UUID, first: int, last: int, head: bytes
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.first = first
        self.last = last
        self.head = head


RETRY_BUDGET_SECONDS: Final = 30.0
"""`retry_on_conflict`'s default time budget: no new attempt starts after it."""
RETRY_BASE_DELAY: Final = 0.002
"""`retry_on_conflict`'s default first backoff cap (seconds); it doubles per lost attempt."""
RETRY_MAX_DELAY: Final = 0.25
"""`retry_on_conflict`'s default largest backoff cap (seconds)."""


def retry_on_conflict(
    fn: Callable[[], T],
    attempts: int | None = None,
    *,
    budget_seconds: float | None = RETRY_BUDGET_SECONDS,
    base_delay: float = RETRY_BASE_DELAY,
    max_delay: float = RETRY_MAX_DELAY,
) -> T:
    """Call ``fn()``; call it again after a `ConcurrencyConflict`, backing off (E3, ADR-0022).

    The loser of a race reloads and retries; racing again at once mostly loses again, so
    before attempt ``n + 1`` it sleeps a random time between 0 and
    ``min(max_delay, base_delay * 2 ** (n - 1))`` (exponential backoff with full jitter).
    It stops when ``attempts`` calls were made (None, the default: no count limit) or when
    the next attempt would start more than ``budget_seconds`` after the first (default 30 s;
    None: no time limit) — then the last `ConcurrencyConflict` propagates. Defaults: 2 ms
    first cap, 250 ms largest cap.

    ``fn`` must reload the session state itself on each call (a `Session` does so after a
    conflict). Raises ``ValueError`` for ``attempts`` < 1, a negative budget or delay, and
    for ``attempts`` and ``budget_seconds`` both None (no bound at all).
    """
    _check_retry_bounds(attempts, budget_seconds, base_delay, max_delay)
    started = time.monotonic()
    attempt = 1
    while True:
        try:
            return fn()
        except ConcurrencyConflict:
            if attempts is not None and attempt >= attempts:
                raise
            delay = random.uniform(0, min(max_delay, base_delay * 2 ** min(attempt - 1, 60)))
            if budget_seconds is not None and (
                time.monotonic() + delay - started > budget_seconds
            ):
                raise
            log.debug("conflict, retrying in %.3f s (attempt %d)", delay, attempt + 1)
            time.sleep(delay)
            attempt += 1


def _check_retry_bounds(
    attempts: int | None, budget_seconds: float | None, base_delay: float, max_delay: float
) -> None:
    if attempts is not None and attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    if budget_seconds is not None and not budget_seconds >= 0:
        raise ValueError(f"budget_seconds must be >= 0 or None, got {budget_seconds}")
    if attempts is None and budget_seconds is None:
        raise ValueError("retry_on_conflict needs a bound: attempts, budget_seconds or both")
    if not (base_delay >= 0 and max_delay >= 0):
        raise ValueError(
            f"base_delay and max_delay must be >= 0, got {base_delay} and {max_delay}"
        )


# --- the backend --------------------------------------------------------------------------

class EventStoreBackend:
    """One event store: append and read session streams, snapshots, the notification log.

    Built by `open_backend`; safe to share between threads. Every method raises
    `StoreUnavailable` when the database fails and after `close`.
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
        self._thin_insert = recorders.insert
        self._insert_with_keys = recorders.insert_with_keys
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

    # -- writing --

    def append(
        self,
        session_id: UUID,
        events: Sequence[DomainEvent],
        *,
        prev_chain: bytes,
        head_known: bool = False,
        keys: Sequence[SqlStatement] = (),
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
            self._check_head(session_id, first, prev_chain)
        try:
            with self._translate("append", session_id, first):
                self._insert(stored, keys)
        except (ConcurrencyConflict, StoreUnavailable) as failure:
            # In doubt: the commit may have landed although the insert failed (a connection
            # lost after COMMIT, a driver retry that then hit the primary key).
            return self._settle_in_doubt(session_id, first, last, head, failure)
        return head

    def _insert(self, stored: Sequence[StoredEvent], keys: Sequence[SqlStatement]) -> None:
        """Insert the records of one append, with ``keys`` in the same transaction."""
        if keys and self._insert_with_keys is not None:
            self._insert_with_keys(stored, keys)
        elif keys:  # the keys live in a database of their own: its transaction around it
            table = self.protection.keys
            if table is None:
                raise InvalidAppend(f"{self.url} has no keys table to write to")
            table.write(keys, then=lambda: self._insert(stored, ()))
        elif self._thin_insert is not None:  # the backend's own (ADR-0056)
            self._thin_insert(stored)
        else:
            self.recorder.insert_events(stored)

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
        if self.database.limits.exceeded(failure) is not None:
            # The server refused the statement (lock or statement timeout) or no connection
            # was had (connect timeout): the transaction cannot commit.
            raise StoreUnavailable(f"{failure}; nothing of this batch was stored") from failure
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
            return self.mapper.decode_rows(_to_uuid(session_id), rows, 1, ZERO_CHAIN)
        rows = self._rows(session_id, after_version - 1, upto_version)
        anchor_chain = self._anchor(session_id, after_version, rows, prev_chain)
        if anchor_chain is None:
            return []
        return self.mapper.decode_rows(
            _to_uuid(session_id), rows[1:], after_version + 1, anchor_chain
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
        uuid = _to_uuid(session_id)  # one object for every record, not one parse per row
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

    def unlisted_sessions(self, listed: Collection[UUID]) -> list[UUID | str]:
        """The sessions that have records but are not in ``listed`` (`session_ids`' answer):
        a session whose `SessionStarted` record was damaged or deleted is in no list, and an
        audit must still check it (issue 19). An id that is not a UUID is returned as text;
        ``[]`` where the backend cannot tell. Raises `StoreUnavailable`."""
        self._check_open()
        with self._translate("list the sessions of the records"):
            stored = self.database.stored_session_ids(self.recorder)
        found: list[UUID | str] = []
        known = set(listed)
        for raw in stored or ():
            try:
                session = raw if isinstance(raw, UUID) else UUID(str(raw))
            except ValueError:
                found.append(str(raw))
                continue
            if session not in known:
                found.append(session)
        return found

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

    def integrity_problems(self, limit: int = 20) -> list[str]:
        """What the database's own consistency check finds below the records, at most
        ``limit`` lines (`Database.integrity_problems`; ``[]`` for a sound store or a
        backend without such a check). Raises `StoreUnavailable` when it cannot run."""
        self._check_open()
        with self._translate("check the integrity of"):
            return self.database.integrity_problems(limit)

    def verify(
        self, session_id: UUID, *, expected_version: int | None = None
    ) -> list[ChainProblem]:
        """Recompute the session's hash chain (ADR-0004); `verify_chain` explains the findings.

        ``expected_version`` is an external anchor (e.g. the version of the latest snapshot)
        that makes deleted newest records visible.
        """
        return verify_chain(
            self.read_records(session_id), self.mapper, expected_version=expected_version
        )

    def session_ids(
        self, *, after: UUID | None = None, limit: int | None = None
    ) -> list[UUID]:
        """Session ids in creation order (the order of their `SessionStarted` records).

        ``after``: only the sessions created after that one (a page's last id: the next page
        starts there); ``limit``: at most that many. Reads only the version-1 records, through
        the notification log's topic filter, from the position of ``after``'s first record
        (one indexed read on SQL databases; elsewhere the list is walked up to it), and stops
        once ``limit`` ids are found (ADR-0039). Raises `SessionNotFound` when ``after`` is not
        a session of this store, ``ValueError`` for a ``limit`` < 1.
        """
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self._check_open()
        start = 1
        if after is not None:
            with self._translate("list sessions", after):
                position = self.database.session_start(after)
            if position == 0:
                raise SessionNotFound(f"no session {after} in this store")
            if position is None:
                return self._session_ids_after(after, limit)
            start = position + 1
        page = _SESSION_PAGE if limit is None else min(limit, _SESSION_PAGE)
        ids: list[UUID] = []
        for session_id in self._iter_session_ids(start, page):
            ids.append(session_id)
            if limit is not None and len(ids) == limit:
                break
        return ids

    def _session_ids_after(self, after: UUID, limit: int | None) -> list[UUID]:
        """`session_ids` after ``after`` found by walking the list (memory stores)."""
        ids: list[UUID] = []
        found = False
        for session_id in self._iter_session_ids(1, _SESSION_PAGE):
            if found:
                ids.append(session_id)
                if limit is not None and len(ids) == limit:
                    return ids
            elif session_id == after:
                found = True
        if not found:
            raise SessionNotFound(f"no session {after} in this store")
        return ids

    def _iter_session_ids(self, start: int, page_size: int) -> Iterator[UUID]:
        while True:
            with self._translate("list sessions"):
                page = self.recorder.select_notifications(
                    start, page_size, topics=[self._start_topic]
                )
            yield from (_to_uuid(n.originator_id) for n in page if n.originator_version == 1)
            if len(page) < page_size:
                return
            start = page[-1].id + 1

    # -- notification log --

    def max_notification_id(self) -> int:
        """The position of the newest record in the global log; 0 when the store is empty."""
        self._check_open()
        with self._translate("read the notification log"):
            return self.recorder.max_notification_id() or 0

    def read_notifications(
        self,
        start: int,
        limit: int,
        *,
        event_types: Sequence[type[DomainEvent]] = (),
    ) -> list[tuple[int, DomainEvent]]:
        """Up to ``limit`` (notification id, event) pairs with id >= ``start``, in global order.

        The order is the commit order across sessions, for projections that keep a tracking
        position (read from ``last id + 1`` next time). ``event_types`` restricts the topics;
        ids stay the global ones, so they may skip. Raises `CorruptRecord` for a record that
        cannot be decoded.
        """
        self._check_open()
        if limit < 1:
            return []
        topics = [self.mapper.codec.topic_of(cls) for cls in event_types]
        with self._translate("read the notification log"):
            page = self.recorder.select_notifications(max(start, 1), limit, topics=topics)
        decode = self.mapper.to_domain_event
        found: list[tuple[int, DomainEvent]] = []
        for notification in page:
            try:
                found.append((notification.id, decode(notification)))
            except SessionForgottenError:
                continue  # erased content: what was counted before stays counted
        return found

    def tracking_recorder(self) -> TrackingRecorder:
        """A library tracking recorder in the same database (``tracking`` table), for projections
        that record their position; in memory, one per named store."""
        self._check_open()
        with self._translate("open the tracking table"):
            return self._tracking_recorder()

    def connect_sql(self) -> SqlConnection:
        """A new connection to the SQL database of this store, for a projection's own tables.

        A store without a SQL database (memory) gives a private in-memory SQLite database.
        Works after `close` too (the connection is the caller's). Raises what the driver
        raises (`database_errors`).
        """
        return self.database.connect_sql()

    # -- snapshots --

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

    # -- error translation --

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable(f"the store {self.url} is closed")

    @contextlib.contextmanager
    def _translate(
        self, action: str, session_id: UUID | None = None, version: int | None = None
    ) -> Iterator[None]:
        """Library and driver errors -> the TurnledgerError family (STYLE 5)."""
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


def _to_uuid(value: UUID | str) -> UUID:
    return value if isinstance(value, UUID) else UUID(value)


# --- opening ---------------------------------------------------------------------------

def open_backend(
    url: str,
    *,
    codec: EventCodec | None = None,
    env: Mapping[str, str] | None = None,
    key: bytes | None = None,
    audit_key: bytes | None = None,
    allow_unkeyed: bool = False,
) -> EventStoreBackend:
    """Open the event store at ``url`` (see the module docstring for the URL forms).

    ``codec`` replaces the default event registry (tests register extra event classes);
    ``env`` passes library settings that are not part of the URL, such as
    ``COMPRESSOR_TOPIC`` (e.g. ``eventsourcing.compressor:ZlibCompressor``), ``CIPHER_TOPIC``
    and ``CIPHER_KEY``; the process environment is never read.

    ``key`` (32 bytes) encrypts the store at rest with one data key per session, ``audit_key``
    (32 bytes) keys its hash chain (`turnledger.store.crypto`, ADR-0045, ADR-0047).

    Raises `InvalidStoreURL` (one-line reason) for an unknown scheme, a bad option or a
    SQLite path that cannot be created, `StoreUnavailable` when the database cannot be reached,
    and the key errors of `turnledger.store.keys` (missing, wrong or needless key).
    """
    if not isinstance(url, str):
        raise InvalidStoreURL(f"a store URL must be a str, got {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise InvalidStoreURL(
            f"{redact_url(url)!r} is not a store URL: use memory://, sqlite:///PATH or "
            "postgresql://USER@HOST:PORT/DBNAME"
        )
    backend = BACKENDS.get(scheme.lower())
    if backend is None:
        raise InvalidStoreURL(
            f"unknown store URL scheme {scheme!r} in {redact_url(url)!r}: use memory://, "
            "sqlite:///PATH or postgresql://USER@HOST:PORT/DBNAME"
        )
    database = backend.from_url(url, rest)
    recorders = database.open(dict(env or {}))
    try:
        protection, mapper = protect(
            database, recorders, codec if codec is not None else default_codec(),
            key=key, audit_key=audit_key, allow_unkeyed=allow_unkeyed,
        )
    except BaseException:
        if recorders.close is not None:
            recorders.close()
        raise
    return EventStoreBackend(database, recorders, mapper, protection)
