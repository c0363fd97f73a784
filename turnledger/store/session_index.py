"""The session index and the notification log of the event store.

A part of `turnledger.store.backend.EventStoreBackend`: the sessions in creation order, paged
by the last id (ADR-0039), the sessions an audit must see although no list names them (issue
19), the database's own integrity check, and the global notification log projections follow
(with its tracking recorder and SQL connection).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Final
from uuid import UUID

from eventsourcing.persistence import TrackingRecorder

from turnledger.domain.errors import SessionForgottenError, SessionNotFound
from turnledger.domain.events import DomainEvent
from turnledger.store.backend_core import BackendCore, to_uuid
from turnledger.store.backends.port import LogCursor, SqlConnection

__all__ = ["SessionIndex"]

_SESSION_PAGE: Final = 1000


class SessionIndex(BackendCore):
    """The part of `EventStoreBackend` that lists sessions and reads the notification log."""

    # -- sessions --

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
            yield from (to_uuid(n.originator_id) for n in page if n.originator_version == 1)
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

        The order of the ids, which is the commit order only where writers commit one at a
        time (SQLite, memory, PostgreSQL's ``log_order=lock``): a projection that resumes
        where it stopped follows `follow_notifications` instead (ADR-0083). ``event_types``
        restricts the topics; ids stay the global ones, so they may skip. Raises
        `CorruptRecord` for a record that cannot be decoded.
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

    def follow_notifications(
        self, after: LogCursor, limit: int
    ) -> tuple[list[tuple[LogCursor, DomainEvent]], LogCursor]:
        """What a projection applies next: up to ``limit`` events after the cursor ``after``
        (``(0, 0)`` at first), in an order in which no event can commit before one already
        returned, each with its cursor; and the cursor of the last record read (a projection
        stores it: the next call starts there). The events of erased sessions are left out
        but still move the cursor. An empty page with the same cursor: nothing to apply now.

        On PostgreSQL the order is (transaction id, notification id), read below the oldest
        transaction in progress (ADR-0083); elsewhere notification ids commit in order.
        Raises `CorruptRecord` for a record that cannot be decoded.
        """
        self._check_open()
        if limit < 1:
            return [], after
        with self._translate("read the notification log"):
            page = self.database.follow_page(self.recorder, after, limit)
        decode = self.mapper.to_domain_event
        found: list[tuple[LogCursor, DomainEvent]] = []
        for cursor, notification in page:
            try:
                found.append((cursor, decode(notification)))
            except SessionForgottenError:
                continue  # erased content: what was counted before stays counted
        return found, (page[-1][0] if page else after)

    def log_end(self) -> LogCursor:
        """The cursor of the last record committed now, in `follow_notifications` order
        (``(0, 0)``: none); a follower at or past it has read everything committed before."""
        self._check_open()
        with self._translate("read the notification log"):
            return self.database.log_end(self.recorder)

    def settle_horizon(self, after: LogCursor, timeout: float) -> bool:
        """Wait, up to ``timeout`` seconds, until every event committed now after the cursor
        ``after`` can be followed; True when it can (at once but on PostgreSQL, where a
        transaction still in progress may hold the horizon back, ADR-0083)."""
        self._check_open()
        with self._translate("read the notification log"):
            return self.database.settle_horizon(self.recorder, after, timeout)

    def follows_after(self, after: LogCursor) -> bool:
        """Whether a committed event follows the cursor ``after`` (`follow_notifications`)."""
        self._check_open()
        with self._translate("read the notification log"):
            return self.database.follows_after(self.recorder, after)

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

    def side_sql(self) -> SqlConnection:
        """A new connection to where a component keeps tables that are not this store's
        records (the server's conversations and API keys; `Database.side_sql`). Raises what
        the driver raises (`database_errors`)."""
        return self.database.side_sql()

    # -- audits of the whole store --

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

    def integrity_problems(self, limit: int = 20) -> list[str]:
        """What the database's own consistency check finds below the records, at most
        ``limit`` lines (`Database.integrity_problems`; ``[]`` for a sound store or a
        backend without such a check). Raises `StoreUnavailable` when it cannot run."""
        self._check_open()
        with self._translate("check the integrity of"):
            return self.database.integrity_problems(limit)
