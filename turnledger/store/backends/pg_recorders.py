"""The library's PostgreSQL recorders with bounded waits (ADR-0021); imported with psycopg.

The library decorates every recorder method with ``retry((InterfaceError, OperationalError),
max_attempts=10, wait=0.2)``: a lock or statement timeout was tried ten times (a 1 s lock
timeout failed after 11.8 s), and an insert whose COMMIT was answered by a lost connection was
run again and hit the primary key. Here the insert runs once (the event store settles an
in-doubt insert itself, ADR-0020); reads are retried only when the connection was found dead,
at most twice, on a new connection. Every connection of the pool carries the URL's lock and
statement timeouts (so reads obey them too) and libpq's connect timeout.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, ClassVar, Final, NamedTuple, Self, cast, get_origin
from uuid import UUID

import psycopg
import psycopg_pool
from eventsourcing.persistence import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
    Notification,
    NotSupportedError,
    OperationalError,
    PersistenceError,
    ProgrammingError,
    StoredEvent,
)
from eventsourcing.postgres import (
    ConnectionPool,
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresDatastore,
    PostgresFactory,
    PostgresTrackingRecorder,
)
from eventsourcing.utils import Environment
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Composable, Composed, Identifier, Literal
from psycopg.types.composite import CompositeInfo, register_composite
from psycopg.types.numeric import Int8

from turnledger.domain.errors import StoreChanged
from turnledger.store.backends.port import (
    SETTINGS_TABLE,
    BeforeCommit,
    Fence,
    Limits,
)

__all__ = [
    "ThinInsert",
    "adopt",
    "bounded_factory",
    "catalog",
    "connection_options",
    "delete_snapshots",
    "follow_page",
    "follows_after",
    "local_settings",
    "missing_objects",
    "pool_connection",
    "pooled_settings",
    "pooler_connection",
    "read_settings",
    "register_types",
    "register_types_later",
    "replace_snapshot",
    "set_log_order",
    "set_up_tables",
]

_RECONNECTS = 2
"""Extra attempts of a read whose connection was found dead (one per pooled connection lost)."""
_LOST_STATES = frozenset({"57P01", "57P02", "57P03"})  # admin/crash shutdown, cannot connect now


def connection_lost(error: BaseException) -> bool:
    """Whether ``error`` (a library error) says the connection died, not that a limit ran out."""
    cause = error.__cause__
    if isinstance(cause, psycopg_pool.PoolTimeout) or not isinstance(cause, psycopg.Error):
        return False
    state = cause.sqlstate
    if state is None:
        return isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError) and (
            "timeout" not in str(cause).lower()
        )
    return state.startswith("08") or state in _LOST_STATES


def _reconnecting(method: Any) -> Callable[..., Any]:
    """The library's ``method`` without its retry loop, retried only on a dead connection."""
    inner: Callable[..., Any] = method.__wrapped__

    @functools.wraps(inner)
    def call(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(_RECONNECTS + 1):
            try:
                return inner(*args, **kwargs)
            except (InterfaceError, OperationalError) as error:
                if attempt == _RECONNECTS or not connection_lost(error):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    return call


_INSERT_HEAD: Final = SQL("INSERT INTO {} (originator_id, originator_version, topic, state) ")
"""The head of every insert of records turnledger writes itself (events and snapshots)."""


class _ApplicationRecorder(PostgresApplicationRecorder):
    select_events = _reconnecting(PostgresAggregateRecorder.select_events)
    select_notifications = _reconnecting(PostgresApplicationRecorder.select_notifications)
    max_notification_id = _reconnecting(PostgresApplicationRecorder.max_notification_id)

    insert: ThinInsert | None = None
    """The store's insert (`ThinInsert`), set by the store once it is opened: every insert of
    events, the recorder's own ``insert_events`` included, is that one statement."""

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """The store's insert (`ThinInsert`, unfenced: raw access for audits and tests), run
        once (no retry loop); None (the notification ids are not read back)."""
        assert self.insert is not None, "the store sets its insert when it opens"
        self.insert(stored_events, BeforeCommit())
        return None


def set_log_order(recorder: PostgresApplicationRecorder, *, lock: bool) -> ThinInsert:
    """Give ``recorder`` the store's insert: one that takes the library's table lock and
    notifies (``lock``) or not (ADR-0083); that insert."""
    assert isinstance(recorder, _ApplicationRecorder), "the recorder bounded_factory builds"
    insert = ThinInsert(recorder, lock=lock)
    recorder.insert = insert
    return insert


class _AggregateRecorder(PostgresAggregateRecorder):
    insert_events = PostgresAggregateRecorder.insert_events.__wrapped__
    select_events = _reconnecting(PostgresAggregateRecorder.select_events)


class _TrackingRecorder(PostgresTrackingRecorder):
    insert_tracking = _reconnecting(PostgresTrackingRecorder.insert_tracking)
    max_tracking_id = _reconnecting(PostgresTrackingRecorder.max_tracking_id)
    has_tracking_id = _reconnecting(PostgresTrackingRecorder.has_tracking_id)


_COMPOSITES: dict[tuple[object, ...], CompositeInfo] = {}
"""The composite types this process has read, by server, database, schema, name and oid (a
type dropped and made again, as a schema dropped and made again, has another oid): psycopg's
catalog query of a type costs a new server connection milliseconds of cold reads (ADR-0089).
The library's DDL never alters its types in place."""
_COMPOSITES_KEPT = 256


class _Datastore(PostgresDatastore):
    """The library's datastore whose recorders, while the store is opened, register no
    composite type themselves (each would check a connection out of the pool and so start
    it): the opener registers them on the connection it checks the tables with
    (`register_types`, ADR-0089)."""

    types_deferred = True

    def register_type_adapters(self) -> None:
        if not self.types_deferred:
            super().register_type_adapters()

    def register_types(self, connection: psycopg.Connection[Any], found: dict[str, int]) -> None:
        """The library's ``register_type_adapters``, on ``connection``; a type found (by
        `catalog`) with the oid it had when this process last read it is not read again
        (`_COMPOSITES`)."""
        self.types_deferred = False
        where = connection.info
        for name in self.db_type_names:
            if name in self.psycopg_type_adapters:
                continue
            key = (where.host, where.port, where.dbname, self.schema, name, found.get(name))
            info = _COMPOSITES.get(key) if name in found else None
            if info is None:
                info = CompositeInfo.fetch(connection, f"{self.schema}.{name}")
                if info is None:
                    continue
                if name in found and info.oid == found[name]:
                    if len(_COMPOSITES) >= _COMPOSITES_KEPT:
                        _COMPOSITES.clear()
                    _COMPOSITES[key] = info
            register_composite(info, connection)
            self.psycopg_type_adapters[name] = info
            assert info.python_type is not None, info
            self.psycopg_python_types[name] = info.python_type


class _HandsOver(psycopg.Connection[Any]):
    """A connection class whose ``connect`` first hands over a connection made before the
    pool started (`_Pool.adopt`): the pool makes every connection through its
    ``connection_class.connect`` (psycopg_pool's public contract), so the one the store was
    opened on becomes the pool's first without touching the pool's state. Each pool has a
    class of its own (`_Pool`), with its own ``handed`` list."""

    handed: ClassVar[list[psycopg.Connection[Any]]] = []

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
        while cls.handed:
            connection = cls.handed.pop()
            if not connection.closed:
                return cast(Self, connection)
        return super().connect(conninfo, **kwargs)


class _Pool(ConnectionPool[Any]):
    """The library's pool class, built by `bounded_factory` through its public constructor
    (``configure`` sets autocommit and nothing else, ADR-0089), whose first connection may be
    the one the store was opened on (`adopt`). Its threads and its other connections start
    when a store first uses it, not when it is opened: the first ``open`` after an adoption
    waits until the workers have put that connection in (at once: nothing to connect), so the
    first client finds it there instead of growing the pool by a connection of its own."""

    def __init__(
        self, like: ConnectionPool[Any], connection_class: type[psycopg.Connection[Any]],
        kwargs: dict[str, Any],
    ) -> None:
        base = get_origin(connection_class) or connection_class  # the library's is generic
        handing: type[_HandsOver] = type(
            "HandedConnection", (_HandsOver, base), {"handed": []}
        )
        self.tl_handing = False
        """A connection waits in `_HandsOver.handed` for the pool's first ``open``."""
        self.tl_lock = threading.Lock()
        super().__init__(
            like.conninfo, connection_class=handing, kwargs=kwargs, min_size=like.min_size,
            max_size=like.max_size, open=False, configure=_autocommit, timeout=like.timeout,
            max_waiting=like.max_waiting, max_lifetime=like.max_lifetime,
        )

    def new_connection(self) -> psycopg.Connection[Any]:
        """A new connection made as the pool makes its own (its class, settings, timeouts,
        ``configure``), outside the pool; raises what the driver raises."""
        conninfo, kwargs = self.conninfo, self.kwargs
        assert isinstance(conninfo, str), "the library passes a conninfo string"
        assert isinstance(kwargs, dict), "bounded_factory passes its settings as a dict"
        connection: psycopg.Connection[Any] = self.connection_class.connect(conninfo, **kwargs)
        try:
            _autocommit(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def adopt(self, connection: psycopg.Connection[Any]) -> None:
        """Make ``connection`` (from `new_connection`) the first one the pool hands out."""
        handing = self.connection_class
        assert issubclass(handing, _HandsOver)
        handing.handed.append(connection)
        self.tl_handing = True

    def open(self, wait: bool = False, timeout: float = 30.0) -> None:
        if self.tl_handing:
            with self.tl_lock:
                if self.tl_handing:
                    self.tl_handing = False
                    handed = self.connection_class.handed
                    # Only a live one: else the pool starts as the library's does (a wait
                    # for a connection not made yet would close the pool when it times out).
                    if any(not connection.closed for connection in handed):
                        super().open(wait=True, timeout=timeout)
                        return
        super().open(wait, timeout)

    def close(self, timeout: float = 5.0) -> None:
        handing = self.connection_class
        assert issubclass(handing, _HandsOver)
        while handing.handed:
            handing.handed.pop().close()
        super().close(timeout)


def pool_connection(datastore: PostgresDatastore) -> psycopg.Connection[Any]:
    """A new connection made as the datastore's pool makes its own (settings, timeouts,
    ``configure``), outside the pool; raises what the driver raises."""
    pool = datastore.pool
    assert isinstance(pool, _Pool), "the pool of a bounded factory"
    return pool.new_connection()


def adopt(datastore: PostgresDatastore, connection: psycopg.Connection[Any]) -> None:
    """Make ``connection`` (from `pool_connection`) the first one the pool hands out."""
    pool = datastore.pool
    assert isinstance(pool, _Pool), "the pool of a bounded factory"
    pool.adopt(connection)


def register_types(
    datastore: PostgresDatastore, connection: psycopg.Connection[Any], found: dict[str, int]
) -> None:
    """Register the recorders' composite types (``found`` by `catalog`) on ``connection``."""
    assert isinstance(datastore, _Datastore), "the datastore of a bounded factory"
    datastore.register_types(connection, found)


def register_types_later(datastore: PostgresDatastore) -> None:
    """Let the recorders register their composite types themselves (after the DDL)."""
    if isinstance(datastore, _Datastore):
        datastore.types_deferred = False


def read_settings(connection: psycopg.Connection[Any], schema: str) -> dict[str, str]:
    """The rows of ``schema``'s ``tl_settings`` (`turnledger.store.keys`)."""
    rows = connection.cursor(row_factory=tuple_row).execute(
        SQL("SELECT name, value FROM {}").format(Identifier(schema, SETTINGS_TABLE))
    ).fetchall()
    return {str(name): str(value) for name, value in rows}


def pooled_settings(recorder: PostgresApplicationRecorder, schema: str) -> dict[str, str]:
    """`read_settings` on a connection of the recorder's pool; ``{}`` without the table."""
    with recorder.datastore.get_connection() as connection:
        found = connection.cursor(row_factory=tuple_row).execute(
            "SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}"."{SETTINGS_TABLE}"',)
        ).fetchone()
        return read_settings(connection, schema) if found and found[0] else {}


class _BoundedFactory(PostgresFactory):
    aggregate_recorder_class = _AggregateRecorder
    application_recorder_class = _ApplicationRecorder
    tracking_recorder_class = _TrackingRecorder
    create_tables = False
    """Whether a new recorder runs the library's DDL: off while the store is opened (the
    opener runs it only for what is missing, `set_up_tables`), on afterwards (the tracking
    table a projection asks for later)."""

    def env_create_table(self) -> bool:
        return self.create_tables and super().env_create_table()

    def application_recorder(self) -> Any:
        return self._from_template(
            ("application", self.env.get(self.APPLICATION_RECORDER_TOPIC)),
            super().application_recorder,
        )

    def aggregate_recorder(self, purpose: str = "events") -> Any:
        return self._from_template(
            ("aggregate", purpose), functools.partial(super().aggregate_recorder, purpose)
        )

    def _from_template(self, kind: tuple[object, ...], build: Callable[[], Any]) -> Any:
        """The library's recorder, copied from one this process built with the same names and
        settings (ADR-0089): a recorder composes some twenty SQL statements from its names,
        ~1 ms of an open's CPU. Its only link to a store is its ``datastore``; the statements
        are immutable. The tables are still checked (or made) for each store."""
        datastore = self.datastore
        key = (type(self), kind, self.env.name, datastore.schema, datastore.lock_timeout,
               datastore.originator_id_type, datastore.enable_db_functions)
        template = _TEMPLATES.get(key)
        if template is None:
            recorder = build()
            template = copy.copy(recorder)
            template.datastore = None  # keeps no store's pool alive
            if len(_TEMPLATES) >= _COMPOSITES_KEPT:
                _TEMPLATES.clear()
            _TEMPLATES[key] = template
            return recorder
        recorder = copy.copy(template)
        recorder.datastore = datastore
        datastore.db_type_names.add(recorder.stored_event_type_name)
        datastore.register_type_adapters()
        if self.env_create_table():
            recorder.create_table()
        return recorder


_TEMPLATES: dict[tuple[object, ...], Any] = {}
"""A recorder of each kind this process built, by its names and settings, without its
datastore (`_BoundedFactory._from_template`)."""


class Catalog(NamedTuple):
    """What `catalog` found of the library's objects in a schema."""

    missing: list[str]
    """The tables, indexes, composite types and function that are not there."""
    types: dict[str, int]
    """The oid of each composite type found: part of the key of `register_types`'s cache."""
    settings_table: bool
    """Whether the schema has the store's settings table (`turnledger.store.keys`)."""



def catalog(
    connection: psycopg.Connection[Any], schema: str, recorders: Sequence[Any]
) -> Catalog:
    """The tables, indexes, composite types and function the library's DDL makes for
    ``recorders`` and the horizon index (ADR-0083), and the settings table, looked up by name
    in ``schema`` in one query of ``to_regclass``, ``to_regtype`` and ``to_regproc``
    (ADR-0089): cache lookups, where a query of the catalog tables costs a new server
    connection milliseconds of cold reads and planning. The horizon column is not looked up:
    its index exists only with it (made in one transaction, dropped with it)."""
    checks: list[tuple[str, str, str]] = []  # (name, SQL function, its argument)

    def qualified(name: str) -> str:
        return f'"{schema}"."{name}"'

    for recorder in recorders:
        table = recorder.events_table_name
        checks.append((table, "to_regclass", qualified(table)))
        type_name = recorder.stored_event_type_name
        checks.append((type_name, "to_regtype", qualified(type_name)))
        if isinstance(recorder, PostgresApplicationRecorder):
            for index in (recorder.notification_id_index_name, horizon_index_name(recorder)):
                checks.append((index, "to_regclass", qualified(index)))
            function = recorder.pg_function_name_insert_events
            # By name: ``to_regprocedure`` raises when the argument's type or schema is
            # missing (PostgreSQL 15); the library makes one function of this name.
            checks.append((function, "to_regproc", qualified(function)))
    checks.append((SETTINGS_TABLE, "to_regclass", qualified(SETTINGS_TABLE)))
    unique = {name: (function, argument) for name, function, argument in checks}
    cursor = connection.cursor(row_factory=tuple_row)  # the pool's connections give dicts
    row = cursor.execute(
        "SELECT " + ", ".join(f"{function}(%s)::oid" for function, _ in unique.values()),
        [argument for _, argument in unique.values()],
    ).fetchone()
    assert row is not None
    found = dict(zip(unique, row, strict=True))
    settings_table = found.pop(SETTINGS_TABLE) is not None
    types = {name: int(oid) for name, oid in found.items()
             if oid is not None and unique[name][0] == "to_regtype"}
    return Catalog([name for name, oid in found.items() if oid is None], types, settings_table)


def missing_objects(
    connection: psycopg.Connection[Any], schema: str, recorders: Sequence[Any]
) -> list[str]:
    """The names of the tables, index, composite types and function the library's DDL makes
    for ``recorders`` that ``schema`` lacks (one query; ``[]``: nothing to create)."""
    return catalog(connection, schema, recorders).missing


HORIZON_COLUMN = "transaction_id"
"""The events table's column of the inserting transaction's id (``xid8``, ADR-0083)."""


def horizon_index_name(recorder: PostgresApplicationRecorder) -> str:
    return f"{recorder.events_table_name}_horizon_idx"


def add_horizon(cursor: Any, recorder: PostgresApplicationRecorder) -> None:
    """Give the events table its ``transaction_id`` column and index (ADR-0083), in the
    caller's transaction. Rows that exist get 0, which orders them before every new row
    (a transaction id is at least 3) and among themselves by notification id: the order they
    committed in under the library's table lock. Adding a column with a constant default
    rewrites no row; the index is built from the whole table once."""
    from psycopg.sql import SQL, Identifier

    names = {
        "table": Identifier(recorder.datastore.schema, recorder.events_table_name),
        "column": Identifier(HORIZON_COLUMN),
        "index": Identifier(horizon_index_name(recorder)),
    }
    for statement in (
        "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} xid8 NOT NULL DEFAULT '0'",
        "ALTER TABLE {table} ALTER COLUMN {column} SET DEFAULT pg_current_xact_id()",
        "CREATE INDEX IF NOT EXISTS {index} ON {table} ({column}, notification_id)",
    ):
        cursor.execute(SQL(statement).format(**names))
    add_recorded_at(cursor, recorder)


RECORDED_COLUMN = "recorded_at"
"""The events table's column of the server's time of the writing transaction (ADR-0098)."""


def add_recorded_at(cursor: Any, recorder: PostgresApplicationRecorder) -> None:
    """Give the events table its ``recorded_at`` column (``now()`` of the writing
    transaction, by the server's clock), in the caller's transaction. Rows that exist keep
    NULL: nobody knows when they were written. Adding a column without a default rewrites
    no row; the default applies to the rows inserted afterwards (no insert names it)."""
    names = {
        "table": Identifier(recorder.datastore.schema, recorder.events_table_name),
        "column": Identifier(RECORDED_COLUMN),
    }
    for statement in (
        "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} timestamptz",
        "ALTER TABLE {table} ALTER COLUMN {column} SET DEFAULT now()",
    ):
        cursor.execute(SQL(statement).format(**names))


def write_times(
    recorder: PostgresApplicationRecorder,
) -> tuple[datetime, dict[UUID, datetime]]:
    """`Database.write_times` on PostgreSQL: the server's clock now and each session's
    newest ``recorded_at``; the column is added first where it is missing (a store made
    before ADR-0098; a moment's table lock, no row rewritten)."""
    table = Identifier(recorder.datastore.schema, recorder.events_table_name)
    column = Identifier(RECORDED_COLUMN)
    with recorder.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
        found = curs.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) "
            "AND attname = %s AND NOT attisdropped)",
            (table.as_string(conn), RECORDED_COLUMN),
        ).fetchone()
        if not (found and found[0]):
            with conn.transaction():
                add_recorded_at(curs, recorder)
        curs.execute(SQL(
            "SELECT now(), originator_id, max({column}) FROM {table} "
            "WHERE {column} IS NOT NULL GROUP BY originator_id"
        ).format(column=column, table=table))
        rows = curs.fetchall()
        if not rows:
            now_row = curs.execute("SELECT now()").fetchone()
            assert now_row is not None
            return now_row[0], {}
    return rows[0][0], {
        (i if isinstance(i, UUID) else UUID(str(i))): when for _, i, when in rows
    }


def follow_page(
    recorder: PostgresApplicationRecorder,
    after: tuple[int, int],
    limit: int,
    topics: Sequence[str] = (),
) -> list[tuple[tuple[int, int], Notification]]:
    """`Database.follow_page` on PostgreSQL: the rows after ``after`` in (transaction id,
    notification id) order whose transaction id is below the oldest transaction in progress
    in this statement's snapshot (`turnledger.store.backends.port.horizon_page`, ADR-0083)."""
    from psycopg.sql import SQL, Identifier

    statement = SQL(
        "SELECT {column}::text AS horizon, notification_id, originator_id, originator_version,"
        " topic, state FROM {table}"
        " WHERE ({column}, notification_id) > (%s::text::xid8, %s)"
        " AND {column} < pg_snapshot_xmin(pg_current_snapshot()){topics}"
        " ORDER BY {column}, notification_id LIMIT %s"
    ).format(
        column=Identifier(HORIZON_COLUMN),
        table=Identifier(recorder.datastore.schema, recorder.events_table_name),
        topics=SQL(" AND topic = ANY(%s)" if topics else ""),
    )
    params: list[Any] = [str(after[0]), after[1]]
    if topics:
        params.append(list(topics))
    params.append(limit)
    with recorder.datastore.get_connection() as conn, conn.cursor() as curs:
        curs.execute(statement, params, prepare=True)
        return [
            ((int(row["horizon"]), int(row["notification_id"])), Notification(
                id=row["notification_id"],
                originator_id=row["originator_id"],
                originator_version=row["originator_version"],
                topic=row["topic"],
                state=bytes(row["state"]),
            ))
            for row in curs.fetchall()
        ]


def follows_after(recorder: PostgresApplicationRecorder, after: tuple[int, int]) -> bool:
    """`Database.follows_after` on PostgreSQL: a committed row beyond ``after`` (any horizon)."""
    from psycopg.sql import SQL, Identifier

    statement = SQL(
        "SELECT EXISTS (SELECT 1 FROM {table} WHERE ({column}, notification_id)"
        " > (%s::text::xid8, %s)) AS found"
    ).format(
        column=Identifier(HORIZON_COLUMN),
        table=Identifier(recorder.datastore.schema, recorder.events_table_name),
    )
    with recorder.datastore.get_connection() as conn, conn.cursor() as curs:
        curs.execute(statement, [str(after[0]), after[1]], prepare=True)
        row = curs.fetchone()
        return bool(row is not None and row["found"])


def log_end(recorder: PostgresApplicationRecorder) -> tuple[int, int]:
    """`Database.log_end` on PostgreSQL: the last committed row in (transaction id,
    notification id) order, read backwards along the horizon index; ``(0, 0)`` when empty."""
    from psycopg.sql import SQL, Identifier

    statement = SQL(
        "SELECT {column}::text AS horizon, notification_id FROM {table}"
        " ORDER BY {column} DESC, notification_id DESC LIMIT 1"
    ).format(
        column=Identifier(HORIZON_COLUMN),
        table=Identifier(recorder.datastore.schema, recorder.events_table_name),
    )
    with recorder.datastore.get_connection() as conn, conn.cursor() as curs:
        curs.execute(statement, prepare=True)
        row = curs.fetchone()
    return (0, 0) if row is None else (int(row["horizon"]), int(row["notification_id"]))


def settle_horizon(
    recorder: PostgresApplicationRecorder, after: tuple[int, int], timeout: float
) -> bool:
    """`Database.settle_horizon` on PostgreSQL: the newest transaction id of the rows
    committed after ``after`` now, then polled until the horizon passes it (every older
    transaction has ended) or ``timeout`` seconds have passed (a long transaction elsewhere
    holds it: the follower applies what it can, ADR-0083)."""
    from psycopg.sql import SQL, Identifier

    table = Identifier(recorder.datastore.schema, recorder.events_table_name)
    column = Identifier(HORIZON_COLUMN)
    newest = SQL(
        "SELECT max({column})::text AS newest FROM {table}"
        " WHERE ({column}, notification_id) > (%s::text::xid8, %s)"
    ).format(column=column, table=table)
    passed = SQL("SELECT %s::text::xid8 < pg_snapshot_xmin(pg_current_snapshot()) AS passed")
    deadline = time.monotonic() + timeout
    pause = 0.002
    with recorder.datastore.get_connection() as conn, conn.cursor() as curs:
        curs.execute(newest, [str(after[0]), after[1]])
        row = curs.fetchone()
        if row is None or row["newest"] is None:
            return True
        target = row["newest"]
        while True:
            curs.execute(passed, [target])
            row = curs.fetchone()
            if row is not None and row["passed"]:
                return True
            if time.monotonic() + pause > deadline:
                return False
            time.sleep(pause)
            pause = min(2 * pause, 0.05)


def set_up_tables(factory: Any, recorders: Sequence[Any], *, create: bool) -> None:
    """Run the library's DDL for ``recorders`` (``create``) and add the horizon column to the
    events table, or only register the composite types they insert with; then let later
    recorders (tracking) create their own table."""
    if create:
        for recorder in recorders:
            recorder.create_table()
            if isinstance(recorder, PostgresApplicationRecorder):
                with recorder.datastore.transaction(commit=True) as cursor:
                    add_horizon(cursor, recorder)
    else:
        factory.datastore.register_type_adapters()
    if isinstance(factory, _BoundedFactory):
        factory.create_tables = True


def bounded_factory(
    limits: Limits, *, pooler: bool = False
) -> Callable[[Environment], PostgresFactory]:
    """A factory builder whose pool's connections obey ``limits``: as libpq's startup
    ``options``, or (``pooler``, PgBouncer's transaction mode, ADR-0084) set in each
    transaction, with no prepared statement and no session ``SET``."""

    def build(env: Environment) -> PostgresFactory:
        factory = _BoundedFactory(env)
        datastore = factory.datastore
        datastore.__class__ = _Datastore
        library = datastore.pool  # never opened: replaced by one built the same way
        assert isinstance(library.kwargs, dict), "the library passes its settings as a dict"
        kwargs = dict(library.kwargs, connect_timeout=max(int(limits.connect), 1))
        idle = datastore.idle_in_transaction_session_timeout
        connection_class: type[psycopg.Connection[Any]] = library.connection_class
        if pooler:
            kwargs["prepare_threshold"] = None  # prepare=True too: psycopg prepares nothing
            # The library's configure runs a session SET idle_in_transaction_session_timeout,
            # which would stay on whichever server connection PgBouncer lent: each
            # transaction sets it locally instead.
            connection_class = pooler_connection(
                local_settings(limits, idle=idle), statements=bool(limits.lock or limits.statement)
            )
        else:
            # The library's configure runs that SET on every new connection (one round trip
            # each, ADR-0089): the same setting goes in the startup options instead, after
            # libpq's PGOPTIONS when the URL sets no timeout (they applied then, as before).
            options = connection_options(limits) or os.environ.get("PGOPTIONS", "")
            kwargs["options"] = " ".join(filter(None, (
                options, f"-c idle_in_transaction_session_timeout={int(idle * 1000)}ms"
            )))
        datastore.pool = _Pool(library, connection_class, kwargs)
        return factory

    return build


def _autocommit(connection: psycopg.Connection[Any]) -> None:
    connection.autocommit = True


def local_settings(
    limits: Limits, *, idle: float = 0.0, schema: str = ""
) -> tuple[tuple[str, str], ...]:
    """The settings a ``pooler`` connection gives each transaction (``set_config(name, value,
    true)``, i.e. ``SET LOCAL``): the URL's timeouts, the library's idle-in-transaction
    timeout, the schema as the search path."""
    settings = [
        (name, f"{int(seconds * 1000)}ms")
        for name, seconds in (("lock_timeout", limits.lock),
                              ("statement_timeout", limits.statement),
                              ("idle_in_transaction_session_timeout", idle))
        if seconds
    ]
    if schema:
        settings.append(("search_path", f'"{schema}"'))
    return tuple(settings)


_OWN_TRANSACTION = ("BEGIN", "START", "COMMIT", "END", "ROLLBACK", "VACUUM", "SAVEPOINT",
                    "RELEASE")
"""Statements that are a transaction command or cannot run inside a transaction block."""


class _PoolerCursor(psycopg.Cursor[Any]):
    """A cursor that runs each statement sent outside a transaction in one of its own that
    carries the connection's settings (PgBouncer may send two statements of one client
    connection to two server connections), and adds them after an explicit ``BEGIN``."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        connection = self.connection
        assert isinstance(connection, _PoolerConnection)
        head = _head(query, connection)
        if connection.outside_transaction() and connection.per_statement and (
            head not in _OWN_TRANSACTION
        ):
            with connection.transaction():
                return super().execute(query, params, **kwargs)
        result = super().execute(query, params, **kwargs)
        if head in ("BEGIN", "START") and connection.settings:
            super().execute(connection.settings_statement())
        return result

    def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
        connection = self.connection
        assert isinstance(connection, _PoolerConnection)
        if connection.outside_transaction() and connection.per_statement:
            with connection.transaction():
                super().executemany(query, params_seq, **kwargs)
            return
        super().executemany(query, params_seq, **kwargs)


def _head(query: Any, connection: psycopg.Connection[Any]) -> str:
    if isinstance(query, Composable):
        query = query.as_string(connection)
    if isinstance(query, bytes | bytearray | memoryview):
        query = bytes(query).decode()
    words = str(query).split(None, 1)
    return words[0].rstrip(";").upper() if words else ""


class _PoolerConnection(psycopg.Connection[Any]):
    """A connection for PgBouncer's transaction mode (``pooler=transaction``, ADR-0084):
    every transaction it begins sets `settings` locally first, and (`per_statement`) every
    statement outside a transaction runs in one. No session state: PgBouncer lends a server
    connection for one transaction only."""

    settings: tuple[tuple[str, str], ...] = ()
    per_statement = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cursor_factory = _PoolerCursor
        self._depth = 0

    def outside_transaction(self) -> bool:
        return (self.autocommit and not self._depth and self._pipeline is None
                and self.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE)

    def settings_statement(self) -> Composed:
        return SQL("SELECT {}").format(SQL(", ").join(
            SQL("set_config({}, {}, true)").format(Literal(name), Literal(value))
            for name, value in self.settings
        ))

    @contextlib.contextmanager
    def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> Iterator[psycopg.Transaction]:
        outer = self.outside_transaction() or (
            not self._depth and self.pgconn.transaction_status
            == psycopg.pq.TransactionStatus.IDLE
        )
        self._depth += 1
        try:
            with super().transaction(savepoint_name, force_rollback) as transaction:
                if outer and self.settings:
                    # One statement: queued with the BEGIN in the library's pipeline.
                    self.execute(self.settings_statement())
                yield transaction
        finally:
            self._depth -= 1


@functools.cache
def pooler_connection(
    settings: tuple[tuple[str, str], ...], *, statements: bool
) -> type[psycopg.Connection[Any]]:
    """The connection class that gives each transaction ``settings`` and, when
    ``statements``, runs each statement sent outside a transaction in one."""
    return type("PoolerConnection", (_PoolerConnection,),
                {"settings": settings, "per_statement": statements})


def connection_options(limits: Limits) -> str:
    """libpq's ``options`` that set the URL's lock and statement timeouts on a connection
    ("" when the URL sets neither: then libpq's ``PGOPTIONS`` applies)."""
    return " ".join(
        f"-c {name}={int(seconds * 1000)}ms"
        for name, seconds in (("lock_timeout", limits.lock),
                              ("statement_timeout", limits.statement))
        if seconds
    )


_VALUES_ROWS = 8
"""Batches up to this many records are inserted with a ``VALUES`` list (one prepared
statement per batch size); longer ones with ``unnest`` of one array per column."""


class ThinInsert:
    """THE insert of events on PostgreSQL (`Recorders.insert`, ADR-0089): one statement on a
    connection of the library's pool, whatever the log order and whatever else the append's
    transaction does (`BeforeCommit`).

    Alone (``log_order=horizon`` and no keys) the statement runs in autocommit: it is its own
    transaction, and the caller is told (`BeforeCommit.committing`) right before it is sent.
    With ``keys`` or under ``log_order=lock`` it runs in one transaction after the library's
    ``EXCLUSIVE`` table lock and ``NOTIFY`` (``lock``, ADR-0083) and before the keys
    statements (ADR-0066); there the caller is not told (it learns when the call returns).

    The library's ``insert_events`` ran a pipeline (BEGIN, the insert of an array of its
    composite type, a sync, RETURNING ids nobody reads, COMMIT): ~80 % of an append's client
    CPU. Here: the library's table and columns, the values bound in binary, the statement
    prepared on each connection (psycopg prepares nothing behind ``pooler=transaction``,
    whose connections set no ``prepare_threshold``; there the cursor wraps the statement in
    a transaction that carries the URL's timeouts). The ``transaction_id`` column takes its
    default, ``pg_current_xact_id()`` (ADR-0083). What fails raises what the library's
    ``get_connection`` makes of the driver's error: its ``IntegrityError`` for a taken
    (session, version) (-> ``ConcurrencyConflict``), ``OperationalError`` for a lost
    connection (-> settled as in doubt, ADR-0064); a fence that no longer holds raises
    `StoreChanged` (ADR-0098).
    """

    def __init__(self, recorder: PostgresApplicationRecorder, *, lock: bool = False) -> None:
        self._datastore = recorder.datastore
        schema = recorder.datastore.schema
        self._schema = Identifier(schema)
        self._table = Identifier(schema, recorder.events_table_name)
        self._settings = Identifier(schema, SETTINGS_TABLE)
        self.lock = lock
        """``log_order=lock``: the library's table lock and notification first (ADR-0083)."""
        self._locking = (
            SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(self._table),
            SQL("NOTIFY {}").format(Identifier(recorder.channel_name)),
        )
        self._statements: dict[tuple[int, tuple[tuple[str, str | None, bool], ...]], bytes] = {}

    def _statement(
        self, rows: int, connection: psycopg.Connection[Any], fence: Fence
    ) -> tuple[bytes, tuple[str, ...]]:
        """The statement for ``rows`` records and the fence's parameters. With a fence the
        rows are inserted only where its settings hold, read in the statement's snapshot,
        taken after the table lock an operator's change holds (ADR-0098)."""
        key = rows if rows <= _VALUES_ROWS else 0
        condition, parameters = fence.condition("%s", self._settings.as_string(connection))
        statement = self._statements.get((key, fence.expected))
        if statement is None:
            head = _INSERT_HEAD
            values: Composable = (
                SQL("VALUES ") + SQL(", ").join(
                    [SQL("(%b::uuid, %b::int8, %b::text, %b::bytea)")] * rows
                ) if key
                else SQL("SELECT * FROM unnest(%b::uuid[], %b::int8[], %b::text[],"
                         " %b::bytea[])")
            )
            if fence.expected:
                values = SQL("SELECT * FROM (") + values + SQL(") AS v WHERE ") + SQL(
                    condition  # built from constants and quoted names
                )
            statement = self._statements[(key, fence.expected)] = (
                head.format(self._table) + values
            ).as_bytes(connection)
        return statement, parameters

    @staticmethod
    def _parameters(records: Sequence[StoredEvent]) -> list[Any]:
        if len(records) <= _VALUES_ROWS:
            parameters: list[Any] = []
            for record in records:
                parameters += (record.originator_id, Int8(record.originator_version),
                               record.topic, record.state)
            return parameters
        return [[r.originator_id for r in records], [r.originator_version for r in records],
                [r.topic for r in records], [r.state for r in records]]

    def __call__(self, records: Sequence[StoredEvent], before: BeforeCommit) -> None:
        if not records:
            return
        pool = self._datastore.pool
        try:
            pool.open()  # started by the first use (ADR-0089); then a no-op
            with pool.connection() as connection:
                cursor = _cursors.get(connection)
                if cursor is None or cursor.closed:
                    # One cursor per connection, rows as tuples (the dict rows' names cost
                    # on every statement, and an INSERT returns none).
                    cursor = _cursors[connection] = connection.cursor(row_factory=tuple_row)
                if not (self.lock or before.keys):
                    before.committing()  # the statement commits on its own
                    self._run(cursor, records, before.fence)
                    return
                with connection.transaction():
                    if self.lock:  # the library's order: its table lock, then its NOTIFY
                        cursor.execute(self._locking[0], prepare=True)
                        cursor.execute(self._locking[1])
                    self._run(cursor, records, before.fence)
                    if before.keys:
                        # The keys statements name their tables as the store's SQL
                        # connection does.
                        cursor.execute(SQL("SET LOCAL search_path TO {}").format(self._schema))
                        for statement, parameters in before.keys:
                            cursor.execute(statement, parameters)
        except psycopg.Error as error:
            raise _library_error(error) from error

    def _run(self, cursor: psycopg.Cursor[Any], records: Sequence[StoredEvent],
             fence: Fence) -> None:
        statement, fenced = self._statement(len(records), cursor.connection, fence)
        cursor.execute(statement, [*self._parameters(records), *fenced], prepare=True)
        if fence.expected and cursor.rowcount < len(records):
            raise StoreChanged(fence.describe(
                cursor.connection.cursor(row_factory=tuple_row),
                self._settings.as_string(cursor.connection),
            ))


_cursors: weakref.WeakKeyDictionary[psycopg.Connection[Any], psycopg.Cursor[Any]] = (
    weakref.WeakKeyDictionary()
)
"""The cursor `ThinInsert` keeps on each connection of a pool."""


def _library_error(error: psycopg.Error) -> Exception:
    """The library's error for a driver's, as its ``get_connection`` makes it (the event
    store translates those: ``IntegrityError`` -> ``ConcurrencyConflict``, ...)."""
    for driver, library in (
        (psycopg.InterfaceError, InterfaceError), (psycopg.OperationalError, OperationalError),
        (psycopg.DataError, DataError), (psycopg.IntegrityError, IntegrityError),
        (psycopg.InternalError, InternalError), (psycopg.ProgrammingError, ProgrammingError),
        (psycopg.NotSupportedError, NotSupportedError), (psycopg.DatabaseError, DatabaseError),
    ):
        if isinstance(error, driver):
            return library(str(error))
    return PersistenceError(str(error))


def _snapshot_recorder(recorder: object) -> PostgresAggregateRecorder:
    assert isinstance(recorder, PostgresAggregateRecorder), "the recorder the store opened"
    return recorder


def _delete_snapshots(
    recorder: PostgresAggregateRecorder, cursor: Any, session_id: UUID, before: int
) -> None:
    """Delete a session's snapshots before version ``before``, inside the caller's
    transaction (the library's recorder has no delete)."""
    statement = SQL(
        "DELETE FROM {} WHERE originator_id = %s AND originator_version < %s"
    ).format(Identifier(recorder.datastore.schema, recorder.events_table_name))
    cursor.execute(statement, (session_id, before))


def delete_snapshots(recorder: object, session_id: UUID, before: int) -> None:
    """`Database.delete_snapshots` in one transaction of the library's pool."""
    snapshots = _snapshot_recorder(recorder)
    with snapshots.datastore.transaction(commit=True) as cursor:
        _delete_snapshots(snapshots, cursor, session_id, before)


def replace_snapshot(recorder: object, record: StoredEvent) -> None:
    """`Database.replace_snapshot`: the insert and the delete in one transaction of the
    library's pool. The insert is ours (the library's table and columns, as `ThinInsert`'s):
    a taken (session, version) raises the library's ``IntegrityError`` as its own would."""
    snapshots = _snapshot_recorder(recorder)
    session_id = _uuid(record.originator_id)
    insert = _INSERT_HEAD.format(
        Identifier(snapshots.datastore.schema, snapshots.events_table_name)
    ) + SQL("VALUES (%s, %s, %s, %s)")
    with snapshots.datastore.transaction(commit=True) as cursor:
        cursor.execute(insert, (session_id, record.originator_version, record.topic,
                                record.state))
        _delete_snapshots(snapshots, cursor, session_id, record.originator_version)


def _uuid(value: UUID | str) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))
