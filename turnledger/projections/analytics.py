"""Analytics read models: SQL tables in the store's own database, kept up to date (E7).

`Analytics` follows the store's global notification log and folds every event into a few
plain SQL tables that anyone can query (the CLI's ``turnledger stats`` reads them too). Each
batch of events and the new tracking position are written in ONE transaction, and the
position is claimed with a conditional update, so every event is applied exactly once even
when a follower is killed half-way or two followers race (the loser rolls back and re-reads).

Where the tables live: SQLite stores get them in the same database file; PostgreSQL stores in
the store's schema (the URL's ``schema`` option); a ``memory://`` store has no SQL database,
so each `Analytics` keeps the same tables in a private in-memory SQLite database. SQLite and
PostgreSQL differ only in the SQL text (placeholders, how a write transaction begins).

Tables
------

The counters are the `Counters` of `turnledger.projections.counters` (one fold, one meaning
per counter, shared with ``turnledger sessions`` and ``what-if``), all but ``notices``. They are
integers that start at 0. Timestamps are ISO-8601 UTC text with microseconds
(``2025-01-31T12:00:00.000000+00:00``), so they sort as text on both databases.

``tl_tracking`` — how far the projection has read the notification log.

- ``name`` (text, primary key): the projection's name, ``analytics``.
- ``position`` (integer): notification id of the last event applied; 0 before the first.
  The row ``analytics.horizon`` holds the rest of the follower's cursor: that event's
  transaction id on PostgreSQL, 0 elsewhere (ADR-0083); the two are written together.

``tl_session_route`` — the route each session is on now (so a restarted follower attributes
the next events to the right route).

- ``session_id`` (text, primary key): the session id (UUID text).
- ``provider``, ``model`` (text): the route of the session's latest `SessionStarted` or
  `RouteSelected` event.

``tl_session_stats`` — one row per session.

- ``session_id`` (text, primary key): the session id (UUID text).
- ``provider``, ``model`` (text, NULL until the first request): the route of the session's
  latest request, prepared or rejected.
- ``legacy`` (boolean): the session runs the legacy loop (R34).
- ``events``, ``appends``, ``trims_token_budget``, ``trims_turn_limit``, ``messages_dropped``,
  ``tokens_dropped``, ``requests_prepared``, ``requests_rejected``, ``overflow_recoveries``,
  ``overflows_unrecoverable``, ``orphan_sweeps``, ``orphans_removed``, the compaction
  counters (``summaries``, ``summary_tokens_saved``, ``summary_refusals_<reason>`` for each
  `SummaryRefusal`, ``tool_result_clearings``, ``tool_results_cleared``,
  ``tool_result_tokens_saved``; issue 24, rule C7), ``peak_estimated_tokens``,
  ``peak_window`` (NULL before the first request),
  ``last_event_at`` (text): the session's `Counters`, as `Counters` defines them (``events``
  equals the session's version).

``tl_session_list`` — what ``turnledger sessions`` lists besides the counters, one row per
session whose `SessionStarted` (version 1) this table saw being applied (ADR-0054); a session
started before the table existed has no row until `Analytics.rebuild`.

- ``session_id`` (text, primary key): the session id (UUID text).
- ``started_at`` (text): the time of its `SessionStarted`, as ``last_event_at``.
- ``legacy`` (boolean): that event's ``legacy``.
- ``provider``, ``model`` (text, NULL before the first): the route of its latest
  `RouteSelected`.

``tl_route_stats`` — one row per provider/model route; every event is counted against the
route its session was on when the event happened.

- ``provider``, ``model`` (text, primary key together): the route.
- ``selections``: times a session started on or switched to this route (`RouteSelected`).
- ``events``, ``appends``, ``trims_token_budget``, ``trims_turn_limit``, ``messages_dropped``,
  ``tokens_dropped``, ``requests_prepared``, ``requests_rejected``, ``overflow_recoveries``,
  ``overflows_unrecoverable``, ``orphan_sweeps``, ``orphans_removed``, the compaction
  counters, ``peak_estimated_tokens``, ``peak_window``, ``last_event_at``: as in
  ``tl_session_stats``, over the events attributed to the route.

Tables made by a version without the compaction counters get their columns on open
(``ALTER TABLE ... ADD COLUMN``, every row kept, the new counters at 0; ADR-0087).

Example: trims per reason and tokens dropped per route::

    SELECT provider, model, trims_token_budget, trims_turn_limit, tokens_dropped
    FROM tl_route_stats ORDER BY tokens_dropped DESC;
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from typing import Any, Final, Self, assert_never, cast
from uuid import UUID

import attrs

from turnledger.domain.budget import Route
from turnledger.domain.events import (
    Deciders,
    DomainEvent,
    Event,
    MovesRoute,
    RequestPrepared,
    RequestRejected,
    RouteSelected,
    SessionStarted,
)
from turnledger.projections.counters import Counters, Tally, event_time
from turnledger.store.backend import EventStoreBackend, StoreUnavailable, require_backend
from turnledger.store.backends.port import (
    LogCursor,
    SqlConnection,
    SqlDialect,
    database_errors,
    scratch_sql,
)
from turnledger.store.codec import describe_error

__all__ = [
    "ROUTE_STATS_COLUMNS",
    "SESSION_STATS_COLUMNS",
    "Analytics",
    "count_before_erasure",
    "listed_sessions",
    "statistics",
]

log = logging.getLogger("turnledger.analytics")

TRACKING_NAME: Final = "analytics"
"""The ``tl_tracking.name`` of this projection."""
HORIZON_NAME: Final = "analytics.horizon"
"""The ``tl_tracking.name`` of the horizon key of this projection's cursor (ADR-0083)."""
SETTLE_SECONDS: Final = 5.0
"""How long a one-shot `Analytics.catch_up` waits for older transactions still in progress
before it applies what it can (PostgreSQL, ADR-0083)."""

TABLES: Final = (
    "tl_tracking", "tl_session_route", "tl_session_stats", "tl_session_list", "tl_route_stats"
)
"""Every table this projection owns (`Analytics.rebuild` drops and recreates them)."""

COMPACTION_COLUMNS: Final = (
    "summaries",
    "summary_tokens_saved",
    "summary_refusals_raised",
    "summary_refusals_timed_out",
    "summary_refusals_oversize",
    "summary_refusals_does_not_fit",
    "summary_refusals_invalid",
    "summary_refusals_unpaired",
    "tool_result_clearings",
    "tool_results_cleared",
    "tool_result_tokens_saved",
)
"""The compaction counters (issue 24): `Analytics` adds them to tables made before them."""

USAGE_COLUMNS: Final = (
    "usage_records",
    "billed_input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "billed_output_tokens",
    "billed_estimated_tokens",
)
"""The provider usage counters (issue 35): added to tables made before them, like the
compaction counters (no store recorded a usage before they existed: 0 is exact)."""

COUNTER_COLUMNS: Final = (
    "events",
    "appends",
    "trims_token_budget",
    "trims_turn_limit",
    "messages_dropped",
    "tokens_dropped",
    "requests_prepared",
    "requests_rejected",
    "overflow_recoveries",
    "overflows_unrecoverable",
    "orphan_sweeps",
    "orphans_removed",
    *COMPACTION_COLUMNS,
    *USAGE_COLUMNS,
)
"""The summable counters shared by ``tl_session_stats`` and ``tl_route_stats``."""

_TAIL_COLUMNS: Final = ("peak_estimated_tokens", "peak_window", "last_event_at")

SESSION_STATS_COLUMNS: Final = (
    "session_id", "provider", "model", "legacy", *COUNTER_COLUMNS, *_TAIL_COLUMNS
)
"""Columns of ``tl_session_stats``, in table order (the keys of `Analytics.session_stats`)."""

SESSION_LIST_COLUMNS: Final = ("session_id", "started_at", "legacy", "provider", "model")
"""Columns of ``tl_session_list``, in table order."""

ROUTE_STATS_COLUMNS: Final = ("provider", "model", "selections", *COUNTER_COLUMNS, *_TAIL_COLUMNS)
"""Columns of ``tl_route_stats``, in table order (the keys of `Analytics.route_stats`)."""

Progress = Callable[[int, int], None]
"""``progress(position, head)``: called after each committed batch."""


# --- rows (pure: no I/O) --------------------------------------------------------------------

@attrs.define
class _SessionRow:
    session_id: str
    provider: str | None = None
    model: str | None = None
    legacy: bool = False
    tally: Tally = attrs.field(factory=Tally)

    def values(self) -> tuple[object, ...]:
        head = (self.session_id, self.provider, self.model, self.legacy)
        return (*head, *_counter_values(self.tally.counters()))


@attrs.define
class _ListRow:
    session_id: str
    started_at: str
    legacy: bool
    provider: str | None = None
    model: str | None = None

    def values(self) -> tuple[object, ...]:
        return (self.session_id, self.started_at, self.legacy, self.provider, self.model)


@attrs.frozen
class Listed:
    """What the read model knows of one session for ``turnledger sessions``: its start, its
    latest `RouteSelected` route (None before one), and its `Counters` over its first
    ``counters.events`` events (versions 1 to ``counters.events``; later ones are not applied
    yet; ``notices`` is not kept: 0)."""

    session_id: UUID
    started_at: str
    legacy: bool
    route: Route | None
    counters: Counters
    current: bool = False
    """True when the tables had applied the whole log when this was read (their tracking
    position, read before the rows, was still the newest notification id after them): the
    session has no later event, and its counts are complete."""


@attrs.define
class _RouteRow:
    provider: str
    model: str
    selections: int = 0
    tally: Tally = attrs.field(factory=Tally)

    def values(self) -> tuple[object, ...]:
        counters = _counter_values(self.tally.counters())
        return (self.provider, self.model, self.selections, *counters)


def _counter_values(counters: Counters) -> tuple[object, ...]:
    return tuple(getattr(counters, name) for name in (*COUNTER_COLUMNS, *_TAIL_COLUMNS))


def _counters_from(values: Sequence[Any]) -> Counters:
    return Counters(**dict(zip((*COUNTER_COLUMNS, *_TAIL_COLUMNS), values)))


# --- SQL ------------------------------------------------------------------------------------

_INT: Final = "BIGINT NOT NULL DEFAULT 0"
"""A counter column added to an older table (``ALTER TABLE`` needs the default)."""
_COUNTER: Final = "INT8 NOT NULL"
"""A counter column of a new table (``INT8`` is ``BIGINT``; every row is written whole). The
short form keeps a new SQLite store's schema (``sqlite_master``) on its first page: a schema
that spills onto a page allocated later is lost with it when a file is truncated, and then
nothing of the file can be salvaged (issue 35 added six counters)."""
_COUNTERS_DDL: Final = ", ".join(f"{name} {_COUNTER}" for name in COUNTER_COLUMNS)
_TAIL_DDL: Final = f"peak_estimated_tokens {_COUNTER}, peak_window BIGINT, last_event_at TEXT"

_CREATE: Final = (
    "CREATE TABLE IF NOT EXISTS tl_tracking "
    "(name TEXT PRIMARY KEY, position BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tl_session_route "
    "(session_id TEXT PRIMARY KEY, provider TEXT NOT NULL, model TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tl_session_stats (session_id TEXT PRIMARY KEY, provider TEXT, "
    f"model TEXT, legacy BOOLEAN NOT NULL, {_COUNTERS_DDL}, {_TAIL_DDL})",
    "CREATE TABLE IF NOT EXISTS tl_route_stats (provider TEXT NOT NULL, model TEXT NOT NULL, "
    f"selections {_COUNTER}, {_COUNTERS_DDL}, {_TAIL_DDL}, PRIMARY KEY (provider, model))",
    "CREATE TABLE IF NOT EXISTS tl_session_list (session_id TEXT PRIMARY KEY, "
    "started_at TEXT NOT NULL, legacy BOOLEAN NOT NULL, provider TEXT, model TEXT)",
)


def _upsert(table: str, columns: Sequence[str], key: Sequence[str], mark: str) -> str:
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key)
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(mark for _ in columns)}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    )


_TOTAL_COLUMNS: Final = (*COUNTER_COLUMNS, "peak_estimated_tokens")


@attrs.frozen
class _Statements:
    """Every statement `Analytics` runs, in one dialect."""

    dialect: SqlDialect
    create: tuple[str, ...]
    drop: tuple[str, ...]
    init_tracking: str
    position: str
    cursor: str
    claim: str
    set_horizon: str
    session_row: str
    route_row: str
    session_route: str
    list_row: str
    upsert_list: str
    upsert_session: str
    upsert_route: str
    upsert_session_route: str
    session_stats: str
    route_stats: str
    route_count: str
    totals: str

    @classmethod
    def of(cls, dialect: SqlDialect) -> _Statements:
        p = dialect.placeholder
        sums = ", ".join(
            f"CAST(COALESCE({'MAX' if c.startswith('peak') else 'SUM'}({c}), 0) AS BIGINT)"
            for c in _TOTAL_COLUMNS
        )
        legacy = "CAST(COALESCE(SUM(CASE WHEN legacy THEN 1 ELSE 0 END), 0) AS BIGINT)"
        return cls(
            dialect=dialect,
            create=_CREATE,
            drop=tuple(f"DROP TABLE IF EXISTS {t}" for t in TABLES),
            init_tracking=(
                f"INSERT INTO tl_tracking (name, position) VALUES ({p}, 0) "
                "ON CONFLICT (name) DO NOTHING"
            ),
            position=f"SELECT position FROM tl_tracking WHERE name = {p}",
            cursor=f"SELECT name, position FROM tl_tracking WHERE name IN ({p}, {p})",
            # The notification id alone is compared: each is the cursor of one record, and a
            # record is applied once, so a value never comes back (no ABA).
            claim=f"UPDATE tl_tracking SET position = {p} WHERE name = {p} AND position = {p}",
            set_horizon=f"UPDATE tl_tracking SET position = {p} WHERE name = {p}",
            session_row=(
                f"SELECT {', '.join(SESSION_STATS_COLUMNS)} FROM tl_session_stats "
                f"WHERE session_id = {p}"
            ),
            route_row=(
                f"SELECT {', '.join(ROUTE_STATS_COLUMNS)} FROM tl_route_stats "
                f"WHERE provider = {p} AND model = {p}"
            ),
            session_route=f"SELECT provider, model FROM tl_session_route WHERE session_id = {p}",
            list_row=(
                f"SELECT {', '.join(SESSION_LIST_COLUMNS)} FROM tl_session_list "
                f"WHERE session_id = {p}"
            ),
            upsert_list=_upsert("tl_session_list", SESSION_LIST_COLUMNS, ("session_id",), p),
            upsert_session=_upsert(
                "tl_session_stats", SESSION_STATS_COLUMNS, ("session_id",), p
            ),
            upsert_route=_upsert("tl_route_stats", ROUTE_STATS_COLUMNS, ("provider", "model"), p),
            upsert_session_route=_upsert(
                "tl_session_route", ("session_id", "provider", "model"), ("session_id",), p
            ),
            session_stats=(
                f"SELECT {', '.join(SESSION_STATS_COLUMNS)} FROM tl_session_stats "
                "ORDER BY last_event_at, session_id"
            ),
            route_stats=(
                f"SELECT {', '.join(ROUTE_STATS_COLUMNS)} FROM tl_route_stats "
                "ORDER BY provider, model"
            ),
            route_count="SELECT COUNT(*) FROM tl_route_stats",
            totals=f"SELECT COUNT(*), {legacy}, {sums} FROM tl_session_stats",
        )


# --- connections ----------------------------------------------------------------------------

class _Database:
    """One DB-API connection in autocommit mode, with explicit transactions."""

    def __init__(self, sql: SqlConnection) -> None:
        self.connection = sql.connection
        self.sql = _Statements.of(sql.dialect)
        self.errors = database_errors()

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self.connection.execute(sql, tuple(params)).fetchall()]

    def run(self, sql: str, params: Sequence[object] = ()) -> int:
        """Execute one statement; the number of rows it changed."""
        cursor = self.connection.execute(sql, tuple(params))
        return int(cursor.rowcount)

    def run_many(self, sql: str, params: Sequence[Sequence[object]]) -> None:
        if params:
            cursor = self.connection.cursor()
            try:
                cursor.executemany(sql, [tuple(p) for p in params])
            finally:
                cursor.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.connection.execute(self.sql.dialect.begin)
        try:
            yield
        except BaseException:
            try:
                self.connection.execute("ROLLBACK")
            except self.errors as error:  # a broken connection: the original error matters
                log.debug("rollback failed: %s", error)
            raise
        self.connection.execute("COMMIT")

    def close(self) -> None:
        self.connection.close()


# --- the projection -------------------------------------------------------------------------

class _Lost(Exception):
    """Another follower advanced the tracking position first: roll back and re-read."""


class Analytics:
    """The analytics read models of a store (E7): fold the notification log into SQL tables.

    Creating one creates the tables when they are missing (no event is read yet; tables that
    are all there are only read, so opening them waits for no writer); call `catch_up` or
    `follow` to apply events. Safe to share between threads; several followers (threads or
    processes) may run at once and each event is still applied once. Close it (or use it as
    a context manager); closing does not close the backend.

    Raises `StoreUnavailable` when the database fails; a wait for a lock (a writer holding
    it) ends once, after the store URL's ``lock_timeout``, with a message naming it.
    """

    def __init__(self, backend: EventStoreBackend) -> None:
        require_backend(backend, "Analytics")
        self.backend = backend
        self._lock = threading.RLock()
        self._db: _Database | None = None
        self._closed = False
        try:
            self._ensure_tables()
        except BaseException:
            self.close()
            raise

    # -- lifecycle --

    def close(self) -> None:
        """Close the connection; later calls raise `StoreUnavailable`. Idempotent."""
        with self._lock:
            self._closed = True
            self._drop_connection()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- applying events --

    def position(self) -> int:
        """The notification id of the last event applied (0: nothing applied yet)."""
        with self._database("read the tracking position") as db:
            return self._position(db)

    def catch_up(
        self,
        batch_size: int = 500,
        progress: Progress | None = None,
        stop_after: int | None = None,
        *,
        stop: threading.Event | None = None,
    ) -> int:
        """Apply every event recorded after the tracking position; return how many.

        Reads ``batch_size`` notifications at a time; each batch and its new position are
        committed together. ``stop_after`` bounds the number of events applied by this call;
        once ``stop`` is set, the call returns after the batch in progress.
        ``progress(position, head)`` is called after each batch, where ``head`` is the newest
        notification id known when the call began (or the position, when larger).

        Every event committed before the call began is applied: on PostgreSQL, where writers
        commit in parallel, the call first waits until no older transaction is still in
        progress (the horizon, ADR-0083), for at most `SETTLE_SECONDS`; a transaction open
        longer than that anywhere on the server leaves its followers' events to the next call.
        The call stops at the end of the log as it was when it began: what writers commit
        while it runs is left to the next call, so writers that never pause cannot keep it
        (or a `Store.forget` that waits on it) running.

        Raises ``ValueError`` for a ``batch_size`` < 1 or a negative ``stop_after``,
        `CorruptRecord` for an event that cannot be decoded (nothing of its batch is applied),
        `StoreUnavailable` when the database fails.
        """
        return self._catch_up(batch_size, progress, stop_after, stop, settle=True)

    def follow(
        self,
        poll_interval: float = 0.5,
        stop: threading.Event | None = None,
        batch_size: int = 500,
    ) -> int:
        """Keep the tables up to date until ``stop`` is set; return the events applied.

        Polls the notification log every ``poll_interval`` seconds when idle (SQLite has no
        LISTEN/NOTIFY; PostgreSQL is polled the same way, for one behaviour). A database error
        is logged and retried on a fresh connection after ``poll_interval``; a corrupt record
        or a closed backend stops the loop with its error.
        """
        if poll_interval < 0:
            raise ValueError(f"poll_interval must be >= 0, got {poll_interval}")
        stop = threading.Event() if stop is None else stop
        applied = 0
        while not stop.is_set():
            try:
                count = self._catch_up(batch_size, None, None, stop)
            except StoreUnavailable as error:
                if self._closed or self.backend.closed:
                    raise
                log.warning("analytics: %s; retrying in %.1f s", error, poll_interval)
                self._drop_connection()
                count = 0
            applied += count
            if count == 0:
                stop.wait(poll_interval)
        return applied

    def rebuild(self, batch_size: int = 500, progress: Progress | None = None) -> int:
        """Drop and recreate the tables, then apply every event from the start; return how
        many were applied."""
        with self._database("rebuild the analytics tables") as db, db.transaction():
            for statement in (*db.sql.drop, *db.sql.create):
                db.run(statement)
            for name in (TRACKING_NAME, HORIZON_NAME):
                db.run(db.sql.init_tracking, (name,))
        return self.catch_up(batch_size, progress)

    # -- queries --

    def session_stats(self) -> list[dict[str, Any]]:
        """Every ``tl_session_stats`` row as a dict (keys: `SESSION_STATS_COLUMNS`), oldest
        activity first."""
        with self._database("read tl_session_stats") as db:
            rows = db.rows(db.sql.session_stats)
        return [_normalise(dict(zip(SESSION_STATS_COLUMNS, row))) for row in rows]

    def route_stats(self) -> list[dict[str, Any]]:
        """Every ``tl_route_stats`` row as a dict (keys: `ROUTE_STATS_COLUMNS`), by route."""
        with self._database("read tl_route_stats") as db:
            rows = db.rows(db.sql.route_stats)
        return [_normalise(dict(zip(ROUTE_STATS_COLUMNS, row))) for row in rows]

    def totals(self) -> dict[str, int]:
        """Store-wide sums: ``position``, ``sessions``, ``legacy_sessions``, ``routes``, every
        counter of `COUNTER_COLUMNS`, and the largest ``peak_estimated_tokens``."""
        with self._database("read the analytics totals") as db:
            position = self._position(db)
            (row,) = db.rows(db.sql.totals)
            ((routes,),) = db.rows(db.sql.route_count)
        keys = ("sessions", "legacy_sessions", *_TOTAL_COLUMNS)
        counts = {key: int(value) for key, value in zip(keys, row)}
        return {"position": position, "routes": int(routes), **counts}

    # -- machinery --

    @contextmanager
    def _database(self, action: str) -> Iterator[_Database]:
        """The connection (opened on first use), with driver errors translated."""
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"the analytics of {self.backend.url} are closed")
            if self._db is None:
                try:
                    # The store's own SQL database, whichever backend it is (the backend
                    # knows how to reach it; this projection never sees its settings).
                    self._db = _Database(self._connect())
                except database_errors() as error:
                    raise StoreUnavailable(
                        f"analytics: cannot connect to {self.backend.url}: "
                        f"{_explain(self.backend, error)}"
                    ) from error
            db = self._db
            try:
                yield db
            except db.errors as error:
                raise StoreUnavailable(
                    f"analytics: cannot {action} in {self.backend.url}: "
                    f"{_explain(self.backend, error)}"
                ) from error

    def _connect(self) -> SqlConnection:
        """A new connection to the database the tables live in: the store's own."""
        return self.backend.connect_sql()

    def _drop_connection(self) -> None:
        with self._lock:
            if self._db is not None:
                db, self._db = self._db, None
                with suppress(*db.errors):  # a broken connection is thrown away anyway
                    db.close()

    def _ensure_tables(self) -> None:
        """Create the missing tables, and add the counter columns a table made by an older
        version lacks (their counts kept; the new counters start at 0).

        Tables that are all there are only read: no write transaction, so an open never
        waits for a writer (SQLite's write lock, issue 33). Another process adding the same
        columns at once may fail the creating transaction (a duplicate column, or a deadlock
        on PostgreSQL, where each holds the table its check read): it is tried again, and
        then sees the columns the winner added. A wait that ran into the URL's limit is not
        tried again: one wait, one limit (ADR-0021)."""
        if self._tables_ready():
            return
        for attempt in (1, 2, 3):
            try:
                with self._database("create the analytics tables") as db, db.transaction():
                    for statement in db.sql.create:
                        db.run(statement)
                    for name in (TRACKING_NAME, HORIZON_NAME):
                        db.run(db.sql.init_tracking, (name,))
                    _add_missing_columns(db)
                return
            except StoreUnavailable as error:
                if attempt == 3 or self._closed or _ran_into_a_limit(self.backend, error):
                    raise
                log.debug("analytics: the tables changed while they were checked; again")

    def _tables_ready(self) -> bool:
        """Whether every table, counter column and tracking row is there, read without a
        transaction (a reader waits for no writer: SQLite's WAL, PostgreSQL's MVCC)."""
        with self._database("read the analytics tables") as db:
            try:
                tracked = dict(db.rows(db.sql.cursor, (TRACKING_NAME, HORIZON_NAME)))
                have = {table: _columns(db, table) for table in TABLES}
            except db.errors as error:  # a missing table: create it
                log.debug("analytics: tables to create: %s", describe_error(error))
                return False
        return len(tracked) == 2 and all(
            column in have[table] for table in _COUNTED_TABLES for column in COUNTER_COLUMNS
        )

    @staticmethod
    def _position(db: _Database) -> int:
        found = db.rows(db.sql.position, (TRACKING_NAME,))
        return int(found[0][0]) if found else 0

    @staticmethod
    def _cursor(db: _Database) -> LogCursor:
        return _read_cursor(db)

    def _catch_up(
        self,
        batch_size: int,
        progress: Progress | None,
        stop_after: int | None,
        stop: threading.Event | None,
        *,
        settle: bool = False,
    ) -> int:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if stop_after is not None and stop_after < 0:
            raise ValueError(f"stop_after must be >= 0, got {stop_after}")
        head = self.backend.max_notification_id()
        # A catch-up ends at what was committed when it began: writers that go on would
        # otherwise keep it (and a `forget` waiting on it) running as long as they write.
        target = None
        if settle:
            target = self.backend.log_end()
            with self._database("apply events") as db:
                self.backend.settle_horizon(self._cursor(db), SETTLE_SECONDS)
        applied = 0
        while stop_after is None or applied < stop_after:
            if stop is not None and stop.is_set():
                break
            limit = batch_size if stop_after is None else min(batch_size, stop_after - applied)
            with self._database("apply events") as db:
                cursor = self._cursor(db)
                if target is not None and cursor >= target:
                    break
                page, end = self.backend.follow_notifications(cursor, limit)
                if end == cursor:
                    break
                try:
                    with db.transaction():
                        self._apply(db, cursor, page, end)
                except _Lost:
                    log.debug("analytics: another follower applied from %s first", cursor)
                    continue  # re-read the position and go on from there
            applied += len(page)
            if progress is not None:
                progress(end[1], max(head, end[1]))
        return applied

    def _apply(
        self,
        db: _Database,
        cursor: LogCursor,
        page: Sequence[tuple[LogCursor, DomainEvent]],
        end: LogCursor,
    ) -> None:
        """Fold one batch into the tables and claim its cursor, inside one transaction."""
        # Claim first: the row lock serialises racing followers, and a loser sees 0 rows.
        if db.run(db.sql.claim, (end[1], TRACKING_NAME, cursor[1])) != 1:
            raise _Lost
        if end[0] != cursor[0]:
            db.run(db.sql.set_horizon, (end[0], HORIZON_NAME))
        batch = _Batch(db)
        # Decoded by the store's codec: `Event`s alone, unchecked as in `unchecked_events`.
        for _, event in cast("Sequence[tuple[LogCursor, Event]]", page):
            batch.add(event)
        batch.write()


_MOVES_ROUTE: Final = Deciders(MovesRoute)


class _Batch:
    """The rows one batch of events changes: read once from the tables, folded, written once."""

    def __init__(self, db: _Database) -> None:
        self.db = db
        self.sessions: dict[str, _SessionRow] = {}
        self.routes: dict[tuple[str, str], _RouteRow] = {}
        self.current: dict[str, tuple[str, str] | None] = {}  # each session's route now
        self.moved: set[str] = set()  # sessions whose route changed in this batch
        self.listed: dict[str, _ListRow | None] = {}  # None: no row (started before the table)
        self.relisted: set[str] = set()  # sessions whose list row changed in this batch

    def add(self, event: Event) -> None:
        """Fold ``event`` into its session's row and the row of the route the session is on."""
        sid = str(event.originator_id)
        row = self.session_row(sid)
        if _MOVES_ROUTE[event.__class__]:  # the others only count (the tallies below)
            self.moved_by(sid, row, cast("MovesRoute", event))
        row.tally.add(event)
        route = self.route_of(sid)
        if route is not None:
            self.route_row(route).tally.add(event)

    def moved_by(self, sid: str, row: _SessionRow, event: MovesRoute) -> None:
        """A request names its session's route; a route selection or a start moves it."""
        match event:
            case RequestPrepared() | RequestRejected():
                row.provider, row.model = event.route.provider, event.route.model
            case RouteSelected():
                self.move(sid, event.route)
                self.route_row((event.route.provider, event.route.model)).selections += 1
                listed = self.list_row(sid)
                if listed is not None:
                    listed.provider, listed.model = event.route.provider, event.route.model
                    self.relisted.add(sid)
            case SessionStarted():
                row.legacy = event.legacy
                self.move(sid, event.route)
                if event.originator_version == 1:
                    self.listed[sid] = _ListRow(sid, event_time(event.timestamp), event.legacy)
                    self.relisted.add(sid)
            case _:
                assert_never(event)

    def move(self, sid: str, route: Route) -> None:
        self.current[sid] = (route.provider, route.model)
        self.moved.add(sid)

    def session_row(self, sid: str) -> _SessionRow:
        row = self.sessions.get(sid)
        if row is None:
            found = self.db.rows(self.db.sql.session_row, (sid,))
            if found:
                values = found[0]
                row = _SessionRow(
                    values[0], values[1], values[2], bool(values[3]),
                    Tally(_counters_from(values[4:])),
                )
            else:
                row = _SessionRow(sid)
            self.sessions[sid] = row
        return row

    def route_row(self, route: tuple[str, str]) -> _RouteRow:
        row = self.routes.get(route)
        if row is None:
            found = self.db.rows(self.db.sql.route_row, route)
            if found:
                values = found[0]
                counters = Tally(_counters_from(values[3:]))
                row = _RouteRow(values[0], values[1], int(values[2]), counters)
            else:
                row = _RouteRow(*route)
            self.routes[route] = row
        return row

    def list_row(self, sid: str) -> _ListRow | None:
        if sid not in self.listed:
            found = self.db.rows(self.db.sql.list_row, (sid,))
            self.listed[sid] = _list_row(found[0]) if found else None
        return self.listed[sid]

    def route_of(self, sid: str) -> tuple[str, str] | None:
        if sid not in self.current:
            found = self.db.rows(self.db.sql.session_route, (sid,))
            self.current[sid] = (str(found[0][0]), str(found[0][1])) if found else None
        return self.current[sid]

    def write(self) -> None:
        """Upsert every row the batch changed (in the caller's transaction)."""
        sql = self.db.sql
        self.db.run_many(sql.upsert_session, [r.values() for r in self.sessions.values()])
        self.db.run_many(sql.upsert_route, [r.values() for r in self.routes.values()])
        relisted = [self.listed[sid] for sid in sorted(self.relisted)]
        self.db.run_many(sql.upsert_list, [r.values() for r in relisted if r is not None])
        moved = [(sid, self.current[sid]) for sid in sorted(self.moved)]
        self.db.run_many(
            sql.upsert_session_route, [(sid, *route) for sid, route in moved if route is not None]
        )


_COUNTED_TABLES: Final = ("tl_session_stats", "tl_route_stats")


def _add_missing_columns(db: _Database) -> None:
    """Add to the counted tables the `COUNTER_COLUMNS` they lack (tables made before them,
    ADR-0087): ``ALTER TABLE ... ADD COLUMN`` keeps every row; the new counters start at 0,
    which is exact for a store written by a release (none recorded a compaction before the
    columns existed). Run in the caller's transaction."""
    for table in _COUNTED_TABLES:
        have = _columns(db, table)
        for column in COUNTER_COLUMNS:
            if column not in have:
                db.run(f"ALTER TABLE {table} ADD COLUMN {column} {_INT}")


def _columns(db: _Database, table: str) -> set[str]:
    """The column names of ``table`` (lower case); raises a database error when it is missing."""
    cursor = db.connection.execute(f"SELECT * FROM {table} WHERE 1 = 0")
    try:
        have = {str(column[0]).lower() for column in cursor.description or ()}
        cursor.fetchall()
    finally:
        cursor.close()
    return have


def _list_row(values: Sequence[Any]) -> _ListRow:
    provider, model = values[3], values[4]
    return _ListRow(str(values[0]), str(values[1]), bool(values[2]),
                    None if provider is None else str(provider),
                    None if model is None else str(model))


_LISTED_CHUNK: Final = 500  # session ids per query (SQLite allows 999 parameters by default)


def listed_sessions(
    backend: EventStoreBackend, session_ids: Sequence[UUID]
) -> Mapping[UUID, Listed]:
    """What the store's analytics tables hold of these sessions, read without writing.

    Only sessions with both a ``tl_session_stats`` and a ``tl_session_list`` row are in the
    result; the counts cover the events applied so far (`Listed`), so a caller folds the
    rest, unless `Listed.current` says there is none. Empty when the store has no analytics
    tables (never caught up, a ``memory://`` or read-only store, a salvaged copy) or they
    cannot be read: the caller then folds every session's events, which gives the same
    answer, only slower. Nothing is created.
    """
    if not session_ids:
        return {}
    columns = ", ".join(
        [*(f"s.{c}" for c in (*COUNTER_COLUMNS, *_TAIL_COLUMNS)),
         *(f"l.{c}" for c in SESSION_LIST_COLUMNS)]
    )
    found: dict[UUID, Listed] = {}
    try:
        with closing(_Database(backend.connect_sql())) as db:
            # read before the rows: they are at least this far
            cursor = _read_cursor(db)
            p = db.sql.dialect.placeholder
            for first in range(0, len(session_ids), _LISTED_CHUNK):
                chunk = [str(sid) for sid in session_ids[first:first + _LISTED_CHUNK]]
                query = (
                    f"SELECT {columns} FROM tl_session_list l JOIN tl_session_stats s "
                    f"ON s.session_id = l.session_id "
                    f"WHERE l.session_id IN ({', '.join(p for _ in chunk)})"
                )
                for values in db.rows(query, chunk):
                    counters = _counters_from(values[: len(COUNTER_COLUMNS) + 3])
                    listed = _list_row(values[len(COUNTER_COLUMNS) + 3 :])
                    route = (None if listed.provider is None or listed.model is None
                             else Route(listed.provider, listed.model))
                    sid = UUID(listed.session_id)
                    found[sid] = Listed(sid, listed.started_at, listed.legacy, route, counters)
    except database_errors() as error:  # no tables (or no database): fold instead
        log.debug("analytics: no session list in %s: %s", backend.url, describe_error(error))
        return {}
    # The cursor's order is one no record can commit before (ADR-0083): when no committed
    # record follows the cursor now, the rows read after it hold every event.
    if found and not backend.follows_after(cursor):
        found = {sid: attrs.evolve(listed, current=True) for sid, listed in found.items()}
    return found


def _read_cursor(db: _Database) -> LogCursor:
    """The tracking cursor (one statement: both rows as committed together)."""
    found = dict(db.rows(db.sql.cursor, (TRACKING_NAME, HORIZON_NAME)))
    return int(found.get(HORIZON_NAME, 0)), int(found.get(TRACKING_NAME, 0))


def _normalise(row: dict[str, Any]) -> dict[str, Any]:
    """Same Python types from both databases (SQLite keeps booleans as 0/1)."""
    if "legacy" in row:
        row["legacy"] = bool(row["legacy"])
    return row


def _explain(backend: EventStoreBackend, error: BaseException) -> str:
    """One line for a database error; one that ran into a limit of the store's URL names it
    and the URL option that raises it (ADR-0021)."""
    limit = backend.database.limits.exceeded(error)
    text = backend.database.describe_failure(error)
    if limit is None:
        return text
    option = limit.partition("=")[0]
    return f"{text} (the store is busy: raise {option}= in the store URL to wait longer)"


def _ran_into_a_limit(backend: EventStoreBackend, error: BaseException) -> bool:
    return backend.database.limits.exceeded(error) is not None


class _Committed(Analytics):
    """The store's analytics as committed, copied into a private in-memory database and
    brought up to date there: nothing is written to the store, and nothing waits for its
    writers (a read sees what is committed). What `statistics` answers when the store's own
    tables cannot be written now."""

    def __init__(self, backend: EventStoreBackend) -> None:
        super().__init__(backend)
        tables = _read_committed(backend)
        with self._database("copy the analytics tables") as db, db.transaction():
            for table, (columns, rows) in tables.items():
                marks = ", ".join(db.sql.dialect.placeholder for _ in columns)
                db.run(f"DELETE FROM {table}")
                db.run_many(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)

    def _connect(self) -> SqlConnection:
        return scratch_sql()


_COPIED: Final = {
    "tl_tracking": ("name", "position"),
    "tl_session_route": ("session_id", "provider", "model"),
    "tl_session_stats": SESSION_STATS_COLUMNS,
    "tl_session_list": SESSION_LIST_COLUMNS,
    "tl_route_stats": ROUTE_STATS_COLUMNS,
}


def _read_committed(
    backend: EventStoreBackend,
) -> dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]]]]:
    """Every row of the store's analytics tables as one batch committed them, read without a
    transaction: the tracking cursor is read before and after the rows, and a batch that
    committed in between (it moves the cursor with its rows) makes the read start again.
    Empty when the tables cannot be read (missing, made before a counter column, or
    changing all the time): the events are then all folded."""
    try:
        with closing(_Database(backend.connect_sql())) as db:
            for _ in range(3):
                before = _read_cursor(db)
                tables = {
                    table: (columns, db.rows(f"SELECT {', '.join(columns)} FROM {table}"))
                    for table, columns in _COPIED.items()
                }
                if _read_cursor(db) == before:
                    return tables
    except database_errors() as error:
        log.debug("analytics: no tables to copy from %s: %s", backend.url, describe_error(error))
    return {}


@attrs.frozen
class Statistics:
    """What ``turnledger stats`` prints: the rows of `Analytics.session_stats`,
    `Analytics.route_stats` and `Analytics.totals`."""

    sessions: list[dict[str, Any]]
    routes: list[dict[str, Any]]
    totals: dict[str, int]
    not_updated: str | None = None
    """Why the store's tables were not brought up to date (None: they were). The rows were
    then counted from what is committed, in memory, and the tables lag until a later
    catch-up succeeds."""


def statistics(backend: EventStoreBackend, progress: Progress | None = None) -> Statistics:
    """Bring the store's analytics tables up to date and read them.

    When a writer holds the lock the catch-up needs past the store URL's limit
    (``lock_timeout``), the statistics are counted from what is committed instead — the
    tables as they are, plus the events they lack, folded in memory — without waiting
    again: one wait, bounded by the URL (ADR-0021). Raises `StoreUnavailable` for any other
    database failure, `CorruptRecord` for an event that cannot be decoded.
    """
    try:
        with Analytics(backend) as analytics:
            analytics.catch_up(progress=progress)
            return Statistics(analytics.session_stats(), analytics.route_stats(),
                              analytics.totals())
    except StoreUnavailable as error:
        if not _ran_into_a_limit(backend, error):
            raise
        reason = str(error)
    with _Committed(backend) as committed:
        committed.catch_up(progress=progress)
        return Statistics(committed.session_stats(), committed.route_stats(),
                          committed.totals(), reason)


def count_before_erasure(backend: EventStoreBackend) -> None:
    """Bring the analytics tables up to date before a session's content is erased, so its
    counters stay (`Store.forget`, ADR-0046): the package registers it with the store, which
    imports no projection (`turnledger.store.before_erasure`, ADR-0072)."""
    with Analytics(backend) as analytics:
        analytics.catch_up()
