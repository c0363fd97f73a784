"""The backend port: what one kind of database must provide to the event store (ADR-0007).

A backend is one `Database` subclass in one module of this package, registered by its URL
scheme in ``turnledger.store.backends.BACKENDS``. It owns its driver, its SQL and its types
(ADR-0072), and nothing else:

- its URL: `Database.from_url` parses the part after ``scheme://`` and its query options,
  raising `InvalidStoreURL` (one line, password removed) for anything unusable;
- the `eventsourcing` recorders: `Database.open` configures the library's infrastructure
  factory from the URL (plus the caller's compressor/cipher settings) and returns `Recorders`;
- what the library's recorders do not do: deleting snapshots (`Database.delete_snapshots`,
  `Database.replace_snapshot`) and rewriting the records' states for a rechain
  (`Database.rewrite_states`), each with its own SQL and its own form of an id;
- the SQL connection a projection keeps its tables in: `Database.connect_sql` returns a new
  DB-API connection in autocommit mode with its `SqlDialect` (placeholders, the column type
  of bytes, how to erase freed bytes), so shared code never looks at a URL scheme, a
  dialect's name or the library's raw settings (the password among them);
- which driver errors there are (`database_errors`, `damage_errors`) and what its file is,
  if any (`Database.file_path`);
- the insert of an append (`Recorders.insert`): the records and, as ONE parameter, what the
  same transaction must do before it commits (`BeforeCommit`: the fence, the keys
  statements, and whom to tell right before the commit so that the caller may work while the
  database commits, ADR-0093).

The event store itself (`turnledger.store.backend.EventStoreBackend`) is the same for every
backend; outside this package nothing names a driver or a backend's recorder
(``tests/unit/test_layering.py``, ADR-0072). Nothing here connects at import time.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import re
import sqlite3
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Final, Self
from uuid import UUID

import attrs
from eventsourcing.domain import EventSourcingError
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    Cipher,
    Compressor,
    DatabaseError,
    InfrastructureFactory,
    Notification,
    StoredEvent,
    TrackingRecorder,
)
from eventsourcing.utils import Environment

from turnledger.domain.errors import (
    InvalidStoreURL,
    StoreChanged,
    StoreUnavailable,
    TurnledgerError,
)
from turnledger.domain.overflow import exception_chain
from turnledger.store.codec import describe_error

__all__ = [
    "BeforeCommit",
    "Database",
    "Erasure",
    "Fence",
    "InvalidStoreURL",
    "Limits",
    "LogCursor",
    "Recorders",
    "SqlConnection",
    "SqlDialect",
    "SqlStatement",
    "StoreUnavailable",
    "damage_errors",
    "database_errors",
    "horizon_page",
    "open_library_recorders",
    "redact_text",
    "redact_url",
    "rewrite_in_place",
    "run_transaction",
    "url_number",
    "url_options",
    "url_seconds",
]


log = logging.getLogger(__name__)

def database_errors() -> tuple[type[BaseException], ...]:
    """Every library or driver error a database call may raise (translated at the boundary)."""
    errors: list[type[BaseException]] = [EventSourcingError, sqlite3.Error, OSError]
    psycopg = sys.modules.get("psycopg")  # only when PostgreSQL was used: no import here
    if psycopg is not None:
        errors.append(psycopg.Error)
    return tuple(errors)


def damage_errors() -> tuple[type[BaseException], ...]:
    """The library or driver errors that may say the stored bytes are damaged, not only that
    the database is busy or unreachable (`turnledger.store.salvage.is_damage` reads their
    text to tell): the library's ``DatabaseError`` and SQLite's (whose file can be
    salvaged)."""
    return (DatabaseError, sqlite3.DatabaseError)


@attrs.frozen
class Limits:
    """The waits a database bounds, in seconds (0: no limit), and how to name one that ran out.

    ``connect``: to open a connection or get one from the pool; ``lock``: to wait for a lock;
    ``statement``: for one statement (ADR-0021).
    """

    connect: float = 0.0
    lock: float = 0.0
    statement: float = 0.0

    @property
    def answer(self) -> float:
        """Seconds an append whose outcome is in doubt keeps asking the database (ADR-0064):
        as long as the store waits for a connection or a lock, whichever is longer."""
        return max(self.connect, self.lock)

    def exceeded(self, error: BaseException) -> str | None:
        """The limit (``"lock_timeout=1 s"``) that ``error`` or one of its causes reports."""
        for seen in exception_chain(error):  # each once: a chain may form a cycle
            state = getattr(seen, "sqlstate", None)
            text = str(seen).lower()
            if state == "55P03" or (isinstance(seen, sqlite3.OperationalError) and (
                "locked" in text or "busy" in text
            )):
                return _limit("lock_timeout", self.lock)
            if state == "57014":
                return _limit("statement_timeout", self.statement)
            if type(seen).__name__ == "PoolTimeout" or "timeout expired" in text:
                return _limit("connect_timeout", self.connect)
        return None

    def explain(self, error: BaseException) -> str:
        """One line: the error, led by the limit it ran into when it did."""
        text = describe_error(error)
        limit = self.exceeded(error)
        return f"{limit} exceeded: {text}" if limit else text


def _limit(name: str, seconds: float) -> str:
    return f"{name}={seconds:g} s"


@attrs.frozen
class Erasure:
    """How a database clears the old bytes of a table's updated or deleted rows from its
    files (`KeyTable.erase`: a destroyed data key must be in no file, ADR-0046)."""

    action: str
    """What it does, for a message (``cannot {action} in ...``)."""
    statement: str
    """The statement, naming the table as ``{table}``. When it answers a row, a first column
    that is true says it was held back (a reader was busy)."""
    held: str = ""
    """The log line's reason when it was held back."""


@attrs.frozen
class SqlDialect:
    """What differs between SQL databases for a projection and the keys tables: only SQL
    text, never control flow (shared code asks here instead of testing ``name``)."""

    name: str
    placeholder: str
    begin: str
    """Starts a write transaction (SQLite takes the write lock up front: ``IMMEDIATE``)."""
    blob: str
    """The column type of bytes (``BLOB``, ``BYTEA``)."""
    secure_delete: tuple[str, ...]
    """Statements that make a write transaction overwrite the bytes it frees, run first in
    one that destroys a data key (SQLite's ``secure_delete``; none where `erase` does it)."""
    erase: Erasure
    """How the old bytes of updated or deleted rows are cleared from the files."""
    exclusive: str = ""
    """Makes the transaction just begun the only writer of ``{table}`` until it ends, and
    waits for the writers under way (PostgreSQL's ``LOCK TABLE ... IN SHARE ROW EXCLUSIVE
    MODE``; nothing where `begin` already takes the database's write lock). A writer that
    waited for it sees, in its next statement, what that transaction committed: store-wide
    changes (`rekey`, `rechain`) run under it (ADR-0098)."""


SqlStatement = tuple[str, tuple[object, ...]]
"""One SQL statement and its parameters, written with its dialect's placeholder."""

SETTINGS_TABLE: Final = "tl_settings"
"""The store's settings table (`turnledger.store.keys`): which key and which chain."""


@attrs.define
class Fence:
    """The store-wide settings a writer opened under, checked by every append IN its own
    transaction (ADR-0098): an operator's `rekey` or `rechain` commits between two appends
    of a running writer, and that writer must never commit records under the settings it
    opened with once they changed. Set by the event store once its keys are known
    (`expect`); a backend's insert asks `condition` for SQL that is true while they hold.

    ``expected``: ``(name, value, or_unset)`` of ``tl_settings`` rows: the row must hold
    ``value`` (or be missing too, when ``or_unset``); a value of None means "no such row" (a
    store opened without a key must find no ``encryption`` row).
    """

    expected: tuple[tuple[str, str | None, bool], ...] = ()

    def expect(self, expected: Iterable[tuple[str, str | None, bool]]) -> None:
        self.expected = tuple(expected)

    def condition(self, mark: str, table: str = SETTINGS_TABLE) -> tuple[str, tuple[str, ...]]:
        """SQL that is true while every expected setting holds, and its parameters (``1=1``
        when nothing is expected). ``mark``: the dialect's placeholder; ``table``: the
        settings table as the statement must name it."""
        if not self.expected:
            return "1=1", ()
        parts: list[str] = []
        parameters: list[str] = []
        for name, value, or_unset in self.expected:
            if value is None:
                parts.append(f"NOT EXISTS (SELECT 1 FROM {table} WHERE name = {mark})")
                parameters.append(name)
            elif or_unset:
                parts.append(
                    f"NOT EXISTS (SELECT 1 FROM {table} WHERE name = {mark} AND value <> {mark})"
                )
                parameters += (name, value)
            else:
                parts.append(
                    f"EXISTS (SELECT 1 FROM {table} WHERE name = {mark} AND value = {mark})"
                )
                parameters += (name, value)
        return " AND ".join(parts), tuple(parameters)

    def check(self, cursor: Any, mark: str, table: str = SETTINGS_TABLE) -> None:
        """Run the check in the caller's transaction on ``cursor`` (a DB-API cursor);
        `StoreChanged` when a setting changed (the caller rolls back)."""
        if not self.expected:
            return
        condition, parameters = self.condition(mark, table)
        cursor.execute(f"SELECT {condition}", parameters)
        row = cursor.fetchone()
        if not (row and row[0]):
            raise StoreChanged(self.describe(cursor, table))

    def check_without_table(self) -> None:
        """The check where the settings table does not exist (a SQLite store never keyed
        nor encrypted): it holds as long as no setting needs a row; else `StoreChanged`."""
        if any(value is not None and not or_unset for _, value, or_unset in self.expected):
            raise StoreChanged(changed_settings(self.expected, {}))

    def describe(self, cursor: Any, table: str = SETTINGS_TABLE) -> str:
        """What changed, read on ``cursor`` (one line for `StoreChanged`)."""
        try:
            cursor.execute(f"SELECT name, value FROM {table}")
            now = {str(name): str(value) for name, value in cursor.fetchall()}
        except Exception:
            now = {}
        return changed_settings(self.expected, now)


def changed_settings(
    expected: Iterable[tuple[str, str | None, bool]], now: dict[str, str]
) -> str:
    """The message of a `StoreChanged`: which setting went from what to what."""
    changes = [
        f"{name} {value or 'unset'} -> {now.get(name) or 'unset'}"
        for name, value, or_unset in expected
        if now.get(name) != value and not (or_unset and name not in now)
    ]
    what = "; ".join(changes) or "its settings"
    return (
        f"the store changed since this process opened it ({what}): an operator re-keyed or "
        "re-chained it; nothing of this append was stored. Open the store again with its "
        "current key and audit key (ADR-0098)"
    )


@attrs.define
class BeforeCommit:
    """What the transaction of one append does besides inserting its records, in this order,
    before it commits: the ONE parameter of `Recorders.insert` (no state around the call).

    ``fence``: the settings checked in the transaction, under the write lock where the
    database has one (ADR-0098); ``keys``: statements on the store's keys tables, committed
    with the records or not at all (`Store.forget`, ADR-0066); ``tell``: called once, right
    before the statement that commits, where the backend sends one that commits on its own
    (SQLite's ``COMMIT``, PostgreSQL's autocommitting ``INSERT``), so that the caller may
    work while the database commits (ADR-0093).
    """

    fence: Fence = attrs.field(factory=Fence)
    keys: Sequence[SqlStatement] = ()
    tell: Callable[[], None] | None = None

    def committing(self) -> None:
        """A backend's call right before the statement that commits the append: the records
        are sent or ready, the rest is the database's. Tells ``tell``, once. What the caller
        does there is a head start, never part of the append: its error is logged, not
        raised."""
        tell, self.tell = self.tell, None
        if tell is None:
            return
        try:
            tell()
        except Exception:  # a head start that failed changes nothing of the append
            log.debug("the work started before a commit failed", exc_info=True)


@attrs.frozen
class SqlConnection:
    """A DB-API connection in autocommit mode (explicit transactions) and its dialect."""

    connection: Any
    dialect: SqlDialect


@attrs.frozen
class Recorders:
    """The library objects a backend opened: its factory, the recorders, and the compressor
    and cipher the library's settings ask for (the mapper applies them)."""

    factory: InfrastructureFactory[Any]
    events: ApplicationRecorder
    snapshots: AggregateRecorder
    tracking: Callable[[], TrackingRecorder]
    compressor: Compressor | None
    cipher: Cipher | None
    close: Callable[[], None] | None = None
    insert: Callable[[Sequence[StoredEvent], BeforeCommit], None] | None = None
    """Inserts the records of one append in ONE transaction that also does what its
    `BeforeCommit` says (the fence checked, the keys statements run, the caller told before
    the commit), raising what the library's ``events.insert_events`` raises (its
    ``IntegrityError`` for a taken (session, version)), and `StoreChanged` when the fence's
    settings no longer hold in that transaction (ADR-0098). A backend's own, thinner than
    the library's (ADR-0056, ADR-0089). None: the keys live in a database of their own and
    the library's insert is used, unfenced (memory: one process; a read-only SQLite file,
    which refuses it); the event store then runs the keys statements in a transaction of
    that database around it (`KeyTable.write`)."""
    settings: Callable[[], dict[str, str]] | None = None
    """The rows of the store's settings table (``{}`` without one), which opening the store
    checks the keys against, read by the backend on a connection it holds (ADR-0089); None:
    the keys table (`turnledger.store.keys.KeyTable.settings`) is asked."""

    @classmethod
    def of(
        cls,
        factory: InfrastructureFactory[Any],
        events: ApplicationRecorder,
        snapshots: AggregateRecorder,
        tracking: Callable[[], TrackingRecorder],
        close: Callable[[], None] | None = None,
    ) -> Recorders:
        """The recorders with the factory's compressor and cipher (COMPRESSOR_TOPIC,
        CIPHER_TOPIC / CIPHER_KEY settings)."""
        return cls(
            factory, events, snapshots, tracking, factory.compressor(), factory.cipher(), close
        )


class Database(abc.ABC):
    """One kind of database behind the event store (the port every backend implements)."""

    settings_table_required: bool = True
    """Whether an append's fence needs the settings table to exist (ADR-0098): a writable
    open of a store without a ``chain`` setting records it. False where the fence reads a
    missing table as an empty one (SQLite: a plain store's schema stays as it was)."""

    def __init__(self, url: str) -> None:
        self.url = redact_url(url)
        """The URL this database was opened with, password removed."""
        self.limits = Limits()
        """The waits this database bounds (a backend sets them from its URL)."""

    @classmethod
    @abc.abstractmethod
    def from_url(cls, url: str, rest: str) -> Self:
        """Parse ``url`` (``rest`` is the part after ``scheme://``); `InvalidStoreURL` if unusable.

        Reads no file and opens no connection.
        """

    @abc.abstractmethod
    def open(self, settings: dict[str, str]) -> Recorders:
        """The library's recorders on this database; ``settings`` are the caller's library
        settings (compressor, cipher), to be completed from the URL. Creates what is missing
        (file, schema, tables). Raises `StoreUnavailable` or `InvalidStoreURL`."""

    def describe_failure(self, error: BaseException) -> str:
        """One line for a database error, naming the timeout it ran into (if any)."""
        return self.limits.explain(error)

    def settled_rows(
        self, session_id: UUID, after_version: int, upto_version: int
    ) -> list[tuple[int, str, bytes]] | None:
        """The ``(version, topic, state)`` of ``session_id``'s events with ``after_version <
        version <= upto_version``, read once no write transaction is in flight.

        After a connection was lost during a commit, the server may still be finishing that
        transaction; the event store reads what the batch left through this (and again,
        within `Limits.answer`, while it raises). None: this database's commits are
        synchronous with the call (SQLite, memory), the event store reads the records as
        usual. Raises `StoreUnavailable` when the wait or the read fails or times out.
        """
        return None

    # -- the follower's cursor on the notification log (ADR-0083) --

    def follow_page(
        self,
        recorder: ApplicationRecorder,
        after: LogCursor,
        limit: int,
        topics: Sequence[str] = (),
    ) -> list[tuple[LogCursor, Notification]]:
        """Up to ``limit`` records that follow ``after`` in the order a follower applies
        them, each with its cursor, such that no record can ever commit before the last one
        returned: a follower that resumes from the last cursor skips and repeats nothing.

        This default is for a database whose notification ids commit in their order (one
        writer at a time: SQLite, memory): the cursor is ``(0, notification id)``. A
        database whose writers commit in parallel overrides it (PostgreSQL's transaction-id
        horizon). Raises what the library or the driver raises.
        """
        page = recorder.select_notifications(after[1] + 1, limit, topics=topics)
        return [((0, n.id), n) for n in page]

    def follows_after(self, recorder: ApplicationRecorder, after: LogCursor) -> bool:
        """Whether a committed record follows ``after`` (a follower at ``after`` has not
        applied everything committed now). Raises what the library or the driver raises."""
        return (recorder.max_notification_id() or 0) > after[1]

    def log_end(self, recorder: ApplicationRecorder) -> LogCursor:
        """The cursor of the last record committed now, in the order `follow_page` returns
        records (``(0, 0)``: none): a follower that reached it has read every record committed
        before this call, so a catch-up can stop there instead of chasing writers that go on.
        Raises what the library or the driver raises."""
        return (0, recorder.max_notification_id() or 0)

    def settle_horizon(
        self, recorder: ApplicationRecorder, after: LogCursor, timeout: float
    ) -> bool:
        """Wait, up to ``timeout`` seconds, until every record committed now after ``after``
        can be followed (`follow_page` would return it); True when it can. Here (ids commit
        in order) at once. Raises what the library or the driver raises."""
        return True

    def session_start(self, session_id: UUID) -> int | None:
        """The notification id of ``session_id``'s first record (0: no such session), read
        by the key, so a session list can start after it; None: this database cannot tell
        (the caller walks the list). Raises what the driver raises (`database_errors`)."""
        return None

    def session_rows(
        self,
        recorder: ApplicationRecorder,
        session_id: UUID,
        after_version: int | None,
        upto_version: int | None,
    ) -> list[tuple[int, str, bytes]] | None:
        """The ``(version, topic, state)`` of ``session_id``'s records in ``recorder`` with
        ``after_version < version <= upto_version`` (None: no bound), in version order — the
        bulk read (ADR-0053): no library record object and no UUID parsed per row.

        None: this database has nothing faster than the library's ``select_events``, which
        the event store then uses. Raises what the library or the driver raises.
        """
        return None

    def stored_session_ids(self, recorder: ApplicationRecorder) -> list[object] | None:
        """Every distinct ``originator_id`` of the records in ``recorder``, as the database
        holds it (UUID or text, maybe damaged); None: this database cannot tell.

        The session list reads only the `SessionStarted` records, so a session whose first
        record was damaged or deleted is in no list; `verify` asks here so that it still
        audits that session (issue 19). Raises what the library or the driver raises.
        """
        return None

    def stored_snapshot_keys(
        self, recorder: AggregateRecorder
    ) -> list[tuple[object, object, object]] | None:
        """The ``(originator_id, originator_version, topic)`` of every row of the snapshot
        table ``recorder`` keeps, as the database holds them (maybe damaged: an id that is no
        UUID, text that is no UTF-8); None: this database cannot tell.

        A snapshot is read by its session's id, so one whose key or topic was damaged is
        never read by a restore; `verify` asks here so that it names such a row (issue 19).
        Raises what the library or the driver raises.
        """
        return None

    def integrity_problems(self, limit: int) -> list[str]:
        """What the database's own consistency check finds below the records (a page that
        cannot be read, an index that disagrees with its table, a file shorter than its
        pages), at most ``limit`` lines; ``[]`` when it finds nothing or has no such check.

        `turnledger.replay.audit.verify` asks first: records read through a damaged index
        can be silently fewer than the table holds (issue 19). Raises what the driver raises.
        """
        return []

    @property
    def file_path(self) -> str | None:
        """The one file this database lives in, which the audit salvages row by row when it
        is damaged (`turnledger.store.salvage`, ADR-0025, ADR-0063); None: not a file (a
        server, memory). The salvage reads SQLite files: a backend whose file is of another
        kind returns None as well."""
        return None

    # -- snapshots: the library's recorders insert and select, but delete nothing --

    @abc.abstractmethod
    def delete_snapshots(
        self, recorder: AggregateRecorder, session_id: UUID, before_version: int
    ) -> None:
        """Delete ``session_id``'s snapshots taken before ``before_version`` from
        ``recorder`` (the `Recorders.snapshots` this database opened), in one transaction
        (`EventStoreBackend.prune_snapshots`, ADR-0030). Raises what the library or the
        driver raises."""

    def replace_snapshot(self, recorder: AggregateRecorder, record: StoredEvent) -> None:
        """Insert the snapshot ``record`` into ``recorder`` and delete the session's
        snapshots before its version, in ONE transaction where the database has them: one
        commit, one fsync on the append path (`EventStoreBackend.replace_snapshot`,
        ADR-0060).

        Raises the library's ``IntegrityError`` when a snapshot is at that version already
        (then nothing is changed: the event store prunes on its own), and what the driver
        raises. This default makes two steps, for a database without transactions (memory).
        """
        recorder.insert_events([record])
        self.delete_snapshots(recorder, _uuid(record.originator_id), record.originator_version)

    # -- re-chaining (ADR-0047) --

    @abc.abstractmethod
    def rewrite_states(
        self,
        events: ApplicationRecorder,
        snapshots: AggregateRecorder,
        records: Sequence[StoredEvent],
        keys: Sequence[SqlStatement],
    ) -> None:
        """Give each stored event of ``records`` (found by session and version in
        ``events``) the ``state`` of its record, delete every row of ``snapshots``, and run
        ``keys`` (statements on the keys tables, written for `key_sql`'s dialect), in ONE
        transaction: a rechain that is interrupted leaves the store whole under its old
        chain (`turnledger.store.rechain`). Topics, versions and the order stay. Raises what
        the library or the driver raises."""

    def write_times(
        self, recorder: ApplicationRecorder
    ) -> tuple[datetime, dict[UUID, datetime]] | None:
        """The database's own clock now, and for each session the time of its newest record
        by that clock, where the database keeps one (PostgreSQL: the server's time of the
        writing transaction, ADR-0098); sessions written before it kept it are missing.
        None: no clock but the writers' (SQLite: the writers share the machine's clock;
        memory). Retention judges idleness by it (`Store.idle_sessions`)."""
        return None

    def rewrite_all(
        self,
        events: ApplicationRecorder,
        snapshots: AggregateRecorder,
        rewrite: Callable[[list[StoredEvent], dict[str, str]], list[StoredEvent]],
        keys: Sequence[SqlStatement],
    ) -> int:
        """Rewrite every stored event while no writer can append (ADR-0098): in ONE
        transaction that holds the database's write lock (SQLite's ``BEGIN IMMEDIATE``,
        PostgreSQL's `SqlDialect.exclusive` on both tables, after the writers under way), read
        every record and the settings, give each record ``rewrite(records, settings)``
        returns its new ``state`` (found by session and version), delete every snapshot and
        run ``keys``; the number of records rewritten. A writer waits for it (up to its
        lock timeout) and then finds the new settings (`Fence`). `turnledger.store.rechain`
        uses it. Raises what the driver raises (or ``rewrite``)."""
        return rewrite_locked(self, events, snapshots, rewrite, keys, self.stored_id)

    def stored_id(self, session_id: object) -> object:
        """A session id in the form the events table's column holds it (the SQL the port
        writes itself: `rewrite_all`, `rewrite_in_place`); as given by default."""
        return session_id

    @abc.abstractmethod
    def connect_sql(self) -> SqlConnection:
        """A new connection to the SQL database the store lives in, for a projection's tables.

        Raises what the driver raises (one of `database_errors`); the caller translates.
        """

    def side_sql(self) -> SqlConnection:
        """A new connection to where a component keeps tables that are not the store's own
        records (the server's conversations and API keys): the store's SQL database unless a
        backend keeps its file to itself (SQLite: a file beside it)."""
        return self.connect_sql()

    def key_sql(self) -> SqlConnection:
        """A new connection to where the store keeps its keys and settings tables
        (`turnledger.store.keys`): its SQL database, unless a backend says otherwise."""
        return self.connect_sql()


def rewrite_in_place(
    database: Database,
    events: ApplicationRecorder,
    snapshots: AggregateRecorder,
    records: Sequence[StoredEvent],
    keys: Sequence[SqlStatement],
    stored_id: Callable[[object], object],
) -> None:
    """`Database.rewrite_states` for a SQL backend: each record's state updated by session and
    version, the snapshots dropped and ``keys`` run, in one transaction. ``stored_id`` gives a
    session id in the form the backend's column holds (hex text, a UUID)."""
    sql = database.connect_sql()
    mark = sql.dialect.placeholder
    table = getattr(events, "events_table_name", "stored_events")
    statements: list[SqlStatement] = [
        (f"UPDATE {table} SET state = {mark} WHERE originator_id = {mark} AND "
         f"originator_version = {mark}",
         (r.state, stored_id(r.originator_id), r.originator_version))
        for r in records
    ]
    statements.append(
        (f"DELETE FROM {getattr(snapshots, 'events_table_name', 'stored_snapshots')}", ())
    )
    try:
        run_transaction(sql, [*statements, *keys])
    finally:
        sql.connection.close()


def rewrite_locked(
    database: Database,
    events: ApplicationRecorder,
    snapshots: AggregateRecorder,
    rewrite: Callable[[list[StoredEvent], dict[str, str]], list[StoredEvent]],
    keys: Sequence[SqlStatement],
    stored_id: Callable[[object], object],
) -> int:
    """`Database.rewrite_all` for a SQL backend whose tables `connect_sql` reaches by name.
    ``stored_id`` gives a session id in the form the backend's column holds."""
    sql = database.connect_sql()
    dialect, mark = sql.dialect, sql.dialect.placeholder
    table = getattr(events, "events_table_name", "stored_events")
    snapshot_table = getattr(snapshots, "events_table_name", "stored_snapshots")
    cursor = sql.connection.cursor()
    try:
        cursor.execute(dialect.begin)
        try:
            if dialect.exclusive:
                for name in (table, snapshot_table, SETTINGS_TABLE):
                    cursor.execute(dialect.exclusive.format(table=name))
            cursor.execute(f"SELECT name, value FROM {SETTINGS_TABLE}")
            settings = {str(name): str(value) for name, value in cursor.fetchall()}
            cursor.execute(
                f"SELECT originator_id, originator_version, topic, state FROM {table} "
                "ORDER BY originator_id, originator_version"
            )
            records = [
                StoredEvent(_uuid(i), int(v), str(t), bytes(state))
                for i, v, t, state in cursor.fetchall()
            ]
            rewritten = rewrite(records, settings)
            cursor.executemany(
                f"UPDATE {table} SET state = {mark} WHERE originator_id = {mark} AND "
                f"originator_version = {mark}",
                [(r.state, stored_id(r.originator_id), r.originator_version)
                 for r in rewritten],
            )
            cursor.execute(f"DELETE FROM {snapshot_table}")
            for statement, parameters in keys:
                cursor.execute(statement, parameters)
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
        cursor.execute("COMMIT")
    finally:
        sql.connection.close()
    return len(rewritten)


def scratch_sql() -> SqlConnection:
    """A new private in-memory SQL database (SQLite's), for tables a reader builds without
    writing the store (`turnledger.projections.analytics`'s committed copy)."""
    from turnledger.store.backends.sqlite import SQLITE_DIALECT

    memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    return SqlConnection(memory, SQLITE_DIALECT)


def run_transaction(
    sql: SqlConnection,
    statements: Iterable[SqlStatement],
    then: Callable[[], None] = lambda: None,
) -> None:
    """Run ``statements`` on ``sql`` (a connection in autocommit mode) in one transaction of
    its dialect, then ``then()``, and commit; roll back when anything raises, and raise it.
    The connection stays open (the caller's)."""
    cursor = sql.connection.cursor()
    cursor.execute(sql.dialect.begin)
    try:
        for statement, parameters in statements:
            cursor.execute(statement, parameters)
        then()
    except BaseException:
        cursor.execute("ROLLBACK")
        raise
    cursor.execute("COMMIT")


LogCursor = tuple[int, int]
"""Where a follower of the notification log stands: ``(horizon key, notification id)`` of the
last record it applied, ``(0, 0)`` before the first; cursors compare as tuples. The horizon
key is the writing transaction's id on PostgreSQL (ADR-0083) and 0 where ids commit in order."""


def horizon_page(
    rows: Iterable[LogCursor], horizon: int, after: LogCursor, limit: int
) -> list[LogCursor]:
    """The follower's rule, as PostgreSQL's `follow_page` runs it in SQL (ADR-0083): of the
    committed ``rows`` (``(transaction id, notification id)``), those after ``after`` whose
    transaction id is below ``horizon`` (the reader's snapshot's oldest transaction still in
    progress: every transaction below it has ended, so no row below it can appear later),
    in cursor order, at most ``limit``."""
    return sorted(row for row in rows if row > after and row[0] < horizon)[:limit]


def _uuid(value: UUID | str) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))


def open_library_recorders(
    database: Database,
    factory_class: Callable[[Environment], InfrastructureFactory[Any]],
    settings: dict[str, str],
) -> Recorders:
    """The recorders of a library factory built from ``settings`` (the SQL backends' `open`).

    Raises `StoreUnavailable` naming the database when the library or the driver fails; a
    half-built factory is closed first.
    """
    factory: InfrastructureFactory[Any] | None = None
    try:
        factory = factory_class(Environment("", settings))
        recorders = Recorders.of(
            factory,
            factory.application_recorder(),
            factory.aggregate_recorder(purpose="snapshots"),
            factory.tracking_recorder,
            factory.close,
        )
    except TurnledgerError:
        raise
    except database_errors() as error:
        if factory is not None:
            with contextlib.suppress(Exception):
                factory.close()
        raise StoreUnavailable(
            f"cannot open {database.url}: {database.describe_failure(error)}"
        ) from error
    return recorders


# --- URLs ---------------------------------------------------------------------------------

_USERINFO_PASSWORD: Final = re.compile(r"(?P<user>[^:/?#@\s]*):(?P<password>[^/?#\s]*)@")
"""``user:password@`` wherever it stands, the password up to the last ``@`` before the host."""
_SECRET_OPTION: Final = re.compile(
    r"(?P<key>(?:password|passwd|pwd|secret|token|sslpassword)=)(?P<value>[^&#\s]*)",
    re.IGNORECASE,
)


def redact_url(url: str) -> str:
    """The URL without its password, for messages and logs.

    Works on text that does not parse as a URL too (a bad port, a broken IPv6 host, a missing
    ``//``): every ``user:password@`` loses its password, and so does every query option that
    names a secret (``password=``, ``token=`` ...).
    """
    text = _USERINFO_PASSWORD.sub(lambda m: f"{m['user']}:***@", url)
    return _SECRET_OPTION.sub(lambda m: f"{m['key']}***", text)


def url_secrets(url: str) -> list[str]:
    """The secrets `redact_url` removes from ``url``, longest first (to scrub other texts)."""
    found = [m["password"] for m in _USERINFO_PASSWORD.finditer(url)]
    found += [m["value"] for m in _SECRET_OPTION.finditer(url)]
    decoded = [urllib.parse.unquote(s) for s in found]
    return sorted({s for s in [*found, *decoded] if s}, key=len, reverse=True)


def redact_text(text: str, url: str) -> str:
    """``text`` (an error message, an output line) without any secret of ``url`` in it."""
    for secret in url_secrets(url):
        text = text.replace(secret, "***")
    return redact_url(text)


def url_options(url: str, query: str, allowed: Sequence[str]) -> dict[str, str]:
    """The query options of ``url``; `InvalidStoreURL` for a malformed, unknown or repeated one."""
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise InvalidStoreURL(f"{redact_url(url)}: malformed query string {query!r}") from None
    options: dict[str, str] = {}
    for key, value in pairs:
        if key not in allowed:
            raise InvalidStoreURL(
                f"{redact_url(url)}: unknown option {key!r} (allowed: {', '.join(allowed)})"
            )
        if key in options:
            raise InvalidStoreURL(f"{redact_url(url)}: option {key!r} given twice")
        options[key] = value
    return options


def url_number(url: str, key: str, value: str, *, minimum: int) -> str:
    """``value`` as the text of an integer >= ``minimum``; `InvalidStoreURL` otherwise."""
    try:
        number = int(value)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise InvalidStoreURL(
            f"{redact_url(url)}: option {key} must be an integer >= {minimum}, got {value!r}"
        )
    return str(number)


def url_seconds(url: str, key: str, value: str) -> float:
    """``value`` as a number of seconds >= 0 (decimals allowed); `InvalidStoreURL` otherwise."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < 10**6:  # also refuses nan and inf
        raise InvalidStoreURL(
            f"{redact_url(url)}: option {key} must be a number of seconds >= 0, got {value!r}"
        )
    return seconds
