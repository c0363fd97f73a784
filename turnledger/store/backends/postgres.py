"""``postgresql://user[:password]@host[:port]/dbname``: the library's PostgreSQL recorders.

Query options: ``schema`` (a lower-case identifier, created when missing; default
``public``), ``pool_size``,
``max_overflow``, ``connect_timeout`` (whole seconds to connect or to get a connection from the
pool, default 5), ``lock_timeout`` and ``statement_timeout`` (seconds, decimals allowed; 0 or
absent: no limit), ``log_order`` (``horizon``, the default: writers of different sessions
commit in parallel and followers read below the transaction-id horizon; ``lock``: every insert
takes the library's EXCLUSIVE table lock, ADR-0083), ``pool`` (``own``, the default: a pool
per store, closed with it; ``shared``: one pool per process for every store of the same URL
and settings, kept open until the process exits or `close_shared_pools`, so that an
``open_store`` after the first costs no new pool, ADR-0084), ``pooler`` (``none``, the
default; ``transaction``: the server is reached through a pooler in transaction mode such as
PgBouncer's ``pool_mode = transaction``, which lends a server connection for one transaction
only: no prepared statement, no startup ``options``, no session ``SET`` or session advisory
lock; the timeouts and the search path are set with ``SET LOCAL`` in each transaction and a
statement outside one runs in one of its own, ADR-0084). ``postgres://`` is accepted too.
Projections keep their tables in the store's schema. Needs psycopg (``pip install
'turnledger[postgres]'``), imported only when such a store is opened.

Bounded waits (ADR-0021): the timeouts are set on every connection of the pool (so they bind
reads as well as the insert), and the library's recorders are used without their retry loop
(ten attempts 0.2 s apart, which multiplied every timeout): a timeout fails at once with
`StoreUnavailable` naming the limit; only a connection found dead is retried, on a new one.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, Final, Self
from uuid import UUID

import attrs
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    Notification,
    StoredEvent,
)

from turnledger.store.backends.port import (
    Database,
    Erasure,
    InvalidStoreURL,
    Limits,
    Recorders,
    SqlConnection,
    SqlDialect,
    SqlStatement,
    StoreUnavailable,
    database_errors,
    open_library_recorders,
    redact_url,
    rewrite_in_place,
    url_number,
    url_options,
    url_seconds,
)

__all__ = ["PostgresDatabase", "close_shared_pools"]

POSTGRES_DIALECT: Final = SqlDialect(
    name="postgresql",
    placeholder="%s",
    begin="BEGIN",
    blob="BYTEA",
    secure_delete=(),  # the dead row versions go with the VACUUM of erase
    erase=Erasure(action="vacuum the keys table", statement="VACUUM {table}"),
    exclusive="LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE",
)

_OPTIONS: Final = (
    "schema", "pool_size", "max_overflow", "connect_timeout", "lock_timeout", "statement_timeout",
    "log_order", "pool", "pooler",
)
_POOLERS: Final = ("none", "transaction")
_LOG_ORDERS: Final = ("horizon", "lock")
_SHARED: dict[tuple[object, ...], Recorders] = {}
"""The recorders (the library's pool, its registered types, the checked tables) of every
``pool=shared`` store opened in this process, by what they were opened with (ADR-0084)."""
_SHARED_LOCK = threading.Lock()


def close_shared_pools() -> None:
    """Close the connections of every ``pool=shared`` PostgreSQL store of this process (also
    run at exit). A store still open on one of them fails with `StoreUnavailable`; the next
    ``open_store`` opens a new pool."""
    with _SHARED_LOCK:
        shared = list(_SHARED.values())
        _SHARED.clear()
    for recorders in shared:
        if recorders.close is not None:
            with contextlib.suppress(Exception):
                recorders.close()


atexit.register(close_shared_pools)
_SCHEMA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# URL option -> the library's setting, and the smallest value allowed.
_POOL_OPTIONS: Final = (
    ("pool_size", "POSTGRES_POOL_SIZE", 1),
    ("max_overflow", "POSTGRES_MAX_OVERFLOW", 0),
)


@attrs.frozen
class _Login:
    """Where and as whom to connect (the password stays here, never in a message)."""

    dbname: str
    host: str
    port: str
    user: str
    password: str = attrs.field(repr=False)
    connect_timeout: str

    def conninfo(self, options: str = "") -> str:
        """libpq's connection string; ``options``: libpq's (``-c name=value`` settings)."""
        import psycopg.conninfo

        params = {
            name: value
            for name, value in (
                ("dbname", self.dbname), ("host", self.host), ("port", self.port),
                ("user", self.user), ("password", self.password), ("options", options),
            )
            if value
        }
        return psycopg.conninfo.make_conninfo(
            "", connect_timeout=self.connect_timeout, **params
        )


def _schema(url: str, options: dict[str, str]) -> str:
    """The URL's ``schema``: a plain identifier, in lower case as PostgreSQL names it."""
    schema = options.get("schema", "public")
    if not _SCHEMA_NAME.fullmatch(schema.lower()):
        raise InvalidStoreURL(
            f"{redact_url(url)!r}: schema must be a plain identifier (letters, digits, _), "
            f"got {schema!r}"
        )
    if schema != schema.lower():
        # The library finds its composite types by the unquoted "schema.type" name, which
        # PostgreSQL folds to lower case: a store in "Upper" could be created, not written.
        raise InvalidStoreURL(
            f"{redact_url(url)!r}: schema must be lower case (PostgreSQL folds unquoted "
            f"names to lower case), got {schema!r}; use {schema.lower()!r}"
        )
    return schema


def _modes(url: str, options: dict[str, str]) -> tuple[str, str, str]:
    """The URL's ``log_order``, ``pool`` and ``pooler`` options, each one of its choices."""
    log_order = options.get("log_order", "horizon")
    if log_order not in _LOG_ORDERS:
        raise InvalidStoreURL(
            f"{redact_url(url)!r}: option log_order must be one of "
            f"{', '.join(_LOG_ORDERS)}, got {log_order!r}"
        )
    sharing = options.get("pool", "own")
    if sharing not in ("own", "shared"):
        raise InvalidStoreURL(
            f"{redact_url(url)!r}: pool must be own or shared, got {sharing!r}"
        )
    pooler = options.get("pooler", "none")
    if pooler not in _POOLERS:
        raise InvalidStoreURL(
            f"{redact_url(url)!r}: option pooler must be one of {', '.join(_POOLERS)},"
            f" got {pooler!r}"
        )
    return log_order, sharing, pooler


class PostgresDatabase(Database):
    """One schema of one PostgreSQL database."""

    def __init__(
        self,
        url: str,
        login: _Login,
        schema: str,
        pool: dict[str, str],
        limits: Limits | None = None,
        log_order: str = "horizon",
        *,
        shared: bool = False,
        pooler: bool = False,
    ) -> None:
        super().__init__(url)
        self.pooler = pooler
        """``pooler=transaction``: no session state on any connection (ADR-0084)."""
        self.log_order = log_order
        """``horizon`` or ``lock`` (ADR-0083): whether inserts take the library's table lock."""
        self.shared = shared
        """``pool=shared``: the process's pool for these settings (`close_shared_pools`)."""
        self.login = login
        self.schema = schema
        self.pool = pool
        """The library's pool settings given in the URL (``POSTGRES_POOL_SIZE`` ...)."""
        self.limits = limits or Limits(connect=float(login.connect_timeout))
        # The timeouts every connection obeys (seconds; 0: no limit).
        self._events_table = "stored_events"
        self._server_limits: Limits | None = None

    @classmethod
    def from_url(cls, url: str, rest: str) -> Self:
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except ValueError as error:
            raise InvalidStoreURL(f"{redact_url(url)!r}: {error}") from None
        dbname = urllib.parse.unquote(parts.path.lstrip("/"))
        if not dbname or "/" in dbname:
            raise InvalidStoreURL(
                f"{redact_url(url)!r}: name one database: postgresql://.../DBNAME"
            )
        options = url_options(url, parts.query, _OPTIONS)
        schema = _schema(url, options)
        login = _Login(
            dbname=dbname,
            host=parts.hostname or "localhost",
            port=str(port or 5432),
            user=urllib.parse.unquote(parts.username or ""),
            password=urllib.parse.unquote(parts.password or ""),
            connect_timeout=url_number(
                url, "connect_timeout", options.get("connect_timeout", "5"), minimum=1
            ),
        )
        pool = {
            setting: url_number(url, key, options[key], minimum=minimum)
            for key, setting, minimum in _POOL_OPTIONS
            if key in options
        }
        limits = Limits(
            connect=float(login.connect_timeout),
            lock=url_seconds(url, "lock_timeout", options.get("lock_timeout", "0")),
            statement=url_seconds(
                url, "statement_timeout", options.get("statement_timeout", "0")
            ),
        )
        log_order, sharing, pooler = _modes(url, options)
        return cls(url, login, schema, pool, limits, log_order, shared=sharing == "shared",
                   pooler=pooler == "transaction")

    def _shared_key(self, settings: dict[str, str]) -> tuple[object, ...]:
        return (self.login, self.schema, tuple(sorted(self.pool.items())), self.limits,
                self.log_order, self.pooler, tuple(sorted(settings.items())))

    def open(self, settings: dict[str, str]) -> Recorders:
        if not self.shared:
            return self._open(settings)
        key = self._shared_key(settings)
        with _SHARED_LOCK:  # one pool per key, even when threads open at once
            recorders = _SHARED.get(key)
            if recorders is None:
                recorders = _SHARED[key] = self._open(settings)
        self._events_table = getattr(recorders.events, "events_table_name", "stored_events")
        return attrs.evolve(recorders, close=None)  # the process's: closing a store keeps it

    def _open(self, settings: dict[str, str]) -> Recorders:
        try:
            from turnledger.store.backends import pg_recorders
        except ImportError as error:
            raise InvalidStoreURL(
                f"{self.url!r}: PostgreSQL needs psycopg: pip install 'turnledger[postgres]'"
                f" ({error})"
            ) from None
        settings.update(
            POSTGRES_DBNAME=self.login.dbname,
            POSTGRES_HOST=self.login.host,
            POSTGRES_PORT=self.login.port,
            POSTGRES_USER=self.login.user,
            POSTGRES_PASSWORD=self.login.password,
            POSTGRES_SCHEMA=self.schema,
            POSTGRES_CONNECT_TIMEOUT=self.login.connect_timeout,
            POSTGRES_LOCK_TIMEOUT=str(math.ceil(self.limits.lock)),  # the DDL's; see below
            CREATE_TABLE="y",
            **self._pool_settings(),
        )
        # No connection and no DDL yet: the recorders only name their tables.
        recorders = open_library_recorders(
            self, pg_recorders.bounded_factory(self.limits, pooler=self.pooler), settings
        )
        try:
            settings_read = self._check_tables(recorders)
        except BaseException:
            if recorders.close is not None:
                with contextlib.suppress(Exception):
                    recorders.close()
            raise
        self._events_table = getattr(recorders.events, "events_table_name", "stored_events")
        from eventsourcing.postgres import PostgresApplicationRecorder

        events = recorders.events
        assert isinstance(events, PostgresApplicationRecorder), "the library's recorder"
        insert = pg_recorders.set_log_order(events, lock=self.log_order == "lock")
        return attrs.evolve(
            recorders, insert=insert, settings=self._settings(events, settings_read)
        )

    def _check_tables(self, recorders: Recorders) -> dict[str, str] | None:
        """Check the tables on ONE connection made as the pool makes its own, register the
        composite types and read the settings the keys are checked against on it, then leave it to
        the pool as its first connection (ADR-0089): an existing store is opened on one
        server connection and a few queries, and the pool starts (threads, more
        connections) when the store is first used. Something missing: the library's DDL
        under the setup lock (`_set_up_tables`) and None (the settings are read later)."""
        from turnledger.store.backends import pg_recorders

        datastore = recorders.factory.datastore  # type: ignore[attr-defined]
        tables = [recorders.events, recorders.snapshots]
        connection = self._opening_connection(datastore)
        adopted = False
        try:
            found = pg_recorders.catalog(connection, self.schema, tables)
            if not found.missing:
                pg_recorders.register_types(datastore, connection, found.types)
                settings = (pg_recorders.read_settings(connection, self.schema)
                            if found.settings_table else {})
                pg_recorders.adopt(datastore, connection)
                adopted = True
                pg_recorders.set_up_tables(recorders.factory, tables, create=False)
                return settings
        except database_errors() as error:
            raise StoreUnavailable(
                f"cannot open {self.url}: {self.describe_failure(error)}"
            ) from error
        finally:
            if not adopted:
                connection.close()
        pg_recorders.register_types_later(datastore)
        with self._setup_connection() as setup:
            self._set_up_tables(setup, recorders)
        return None

    def _opening_connection(self, datastore: Any) -> Any:
        """`pg_recorders.pool_connection`, its failure as `StoreUnavailable` naming why (the
        pool would only say "couldn't get a connection" where the driver says why: no such
        database, authentication failed)."""
        import psycopg

        from turnledger.store.backends import pg_recorders

        try:
            return pg_recorders.pool_connection(datastore)
        except psycopg.Error as error:
            raise StoreUnavailable(
                f"cannot open {self.url}: {self.describe_failure(error)}"
            ) from error

    def _settings(
        self, events: Any, opened: dict[str, str] | None
    ) -> Callable[[], dict[str, str]]:
        """`Recorders.settings`: those read while the store was opened, once; then (the next
        store of a shared pool) read again on a connection of the pool."""
        from turnledger.store.backends import pg_recorders

        first = [opened] if opened is not None else []

        def settings() -> dict[str, str]:
            if first:
                return first.pop()
            try:
                return pg_recorders.pooled_settings(events, self.schema)
            except database_errors() as error:
                raise StoreUnavailable(
                    f"cannot open {self.url}: {self.describe_failure(error)}"
                ) from error

        return settings

    def _pool_settings(self) -> dict[str, str]:
        """The library's pool settings: one connection opened with the store, the others on
        demand up to ``pool_size + max_overflow`` (the library opens ``pool_size`` at once)."""
        size = int(self.pool.get("POSTGRES_POOL_SIZE", "5"))
        overflow = int(self.pool.get("POSTGRES_MAX_OVERFLOW", "0"))
        return {"POSTGRES_POOL_SIZE": "1", "POSTGRES_MAX_OVERFLOW": str(size - 1 + overflow)}

    def _set_up_tables(self, connection: Any, recorders: Recorders) -> None:
        """Run the library's DDL only when something is missing, under the setup lock; else
        only register the composite types (ADR-0036: the DDL was most of an open's cost)."""

        from turnledger.store.backends import pg_recorders

        tables = [recorders.events, recorders.snapshots]
        try:
            missing = pg_recorders.missing_objects(connection, self.schema, tables)
            if not missing:
                pg_recorders.set_up_tables(recorders.factory, tables, create=False)
                return
            with self._setup_lock(connection):
                pg_recorders.set_up_tables(recorders.factory, tables, create=True)
        except database_errors() as error:
            raise StoreUnavailable(
                f"cannot open {self.url}: {self.describe_failure(error)}"
            ) from error

    def describe_failure(self, error: BaseException) -> str:
        """One line for a database error, naming the timeout it ran into as the server
        applies it: one the URL leaves unset may come from ``PGOPTIONS``, the role or the
        server's configuration."""
        limits = self.limits
        if limits.exceeded(error) is not None and not (limits.lock and limits.statement):
            limits = self._effective_limits()
        return limits.explain(error)

    def _effective_limits(self) -> Limits:
        """The limits with the lock and statement timeouts the URL leaves unset as the
        server sets them on a connection like the pool's (read once; the URL's limits when
        the server cannot be asked)."""
        import psycopg

        from turnledger.store.backends import pg_recorders

        if self._server_limits is not None:
            return self._server_limits
        try:
            with self._connect(
                "" if self.pooler else pg_recorders.connection_options(self.limits),
                autocommit=False,
            ) as connection:
                rows = connection.execute(
                    "SELECT name, setting::float / 1000 FROM pg_settings"
                    " WHERE name IN ('lock_timeout', 'statement_timeout')"
                ).fetchall()
        except psycopg.Error:
            return self.limits
        found: dict[str, float] = {str(name): float(seconds) for name, seconds in rows}
        self._server_limits = attrs.evolve(
            self.limits,
            lock=self.limits.lock or found.get("lock_timeout", 0.0),
            statement=self.limits.statement or found.get("statement_timeout", 0.0),
        )
        return self._server_limits

    def settled_rows(
        self, session_id: UUID, after_version: int, upto_version: int
    ) -> list[tuple[int, str, bytes]]:
        """The records, read under a SHARE lock on the events table (waited for up to the
        lock or connect timeout) on a connection of its own (ADR-0020, ADR-0064).

        The lock conflicts with the ROW EXCLUSIVE lock every insert transaction holds (and
        the EXCLUSIVE one of ``log_order=lock``), so it is granted once a transaction whose
        connection was lost has committed or rolled back;
        a new connection, not the pool's, which may hold dead ones and wait before
        reconnecting after an outage.
        """
        import psycopg
        from psycopg import sql

        wait = self.limits.lock or self.limits.connect
        table = sql.SQL("{}.{}").format(
            sql.Identifier(self.schema), sql.Identifier(self._events_table)
        )
        try:
            with (
                self._connect() as connection,
                connection.transaction(),
            ):
                connection.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(
                    sql.Literal(f"{int(wait * 1000)}ms")
                ))
                connection.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(table))
                rows = connection.execute(
                    sql.SQL(
                        "SELECT originator_version, topic, state FROM {} WHERE originator_id"
                        " = %s AND originator_version > %s AND originator_version <= %s"
                        " ORDER BY originator_version"
                    ).format(table),
                    (session_id, after_version, upto_version),
                ).fetchall()
        except psycopg.Error as error:
            raise StoreUnavailable(
                f"cannot wait for writers in {self.url}: {self.describe_failure(error)}"
            ) from error
        return [(int(version), str(topic), bytes(state)) for version, topic, state in rows]

    def _connect(self, options: str = "", *, autocommit: bool = True) -> Any:
        """A direct connection; behind a pooler, one that prepares no statement (PgBouncer's
        transaction mode does not keep them)."""
        import psycopg

        if self.pooler:
            return psycopg.connect(
                self.login.conninfo(options), autocommit=autocommit, prepare_threshold=None
            )
        return psycopg.connect(self.login.conninfo(options), autocommit=autocommit)

    @contextlib.contextmanager
    def _setup_connection(self) -> Iterator[Any]:
        """One direct connection while the store is opened: the library's pool would only say
        "couldn't get a connection" where the driver says why (no such database,
        authentication failed)."""
        import psycopg

        try:
            connection = self._connect()
        except psycopg.Error as error:
            raise StoreUnavailable(
                f"cannot open {self.url}: {self.describe_failure(error)}"
            ) from error
        with connection:
            yield connection

    @contextlib.contextmanager
    def _setup_lock(self, connection: Any) -> Iterator[None]:
        """Create the schema and hold an advisory lock on it while the tables are set up.

        The lock serialises the library's table setup (which replaces a function every time)
        across processes opening the same new store at once: without it PostgreSQL may answer
        "tuple concurrently updated" to one of them.
        """
        import psycopg
        from psycopg import sql

        lock_key = "turnledger:setup:" + self.schema
        if self.pooler:
            # A session lock could be taken and released on two different server
            # connections: the schema first (visible to the pool's DDL connections once
            # created), then a transaction holding the transaction-level lock while the
            # pool's connections run the DDL; its end releases it. A waiter tries and ends
            # its transaction between tries: waiting inside one would hold a server
            # connection of the pooler's, which the holder's DDL may need.
            self._create_schema(connection)
            while True:
                with connection.transaction():
                    taken = connection.execute(
                        "SELECT pg_try_advisory_xact_lock(hashtext(%s))", (lock_key,)
                    ).fetchone()
                    if taken is not None and taken[0]:
                        yield
                        return
                time.sleep(0.05)
        connection.execute("SELECT pg_advisory_lock(hashtext(%s))", (lock_key,))
        try:
            found = connection.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
            ).fetchone()
            if found is None:
                with contextlib.suppress(psycopg.errors.UniqueViolation):  # a racing opener
                    connection.execute(
                        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                            sql.Identifier(self.schema)
                        )
                    )
            yield
        finally:
            with contextlib.suppress(psycopg.Error):
                connection.execute("SELECT pg_advisory_unlock(hashtext(%s))", (lock_key,))

    def _create_schema(self, connection: Any) -> None:
        import psycopg
        from psycopg import sql

        found = connection.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
        ).fetchone()
        if found is None:
            with contextlib.suppress(psycopg.errors.UniqueViolation):  # a racing opener
                connection.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )

    def follow_page(
        self,
        recorder: ApplicationRecorder,
        after: tuple[int, int],
        limit: int,
        topics: Sequence[str] = (),
    ) -> list[tuple[tuple[int, int], Notification]]:
        """Below the transaction-id horizon, in (transaction id, notification id) order, in
        both log orders: a follower is right whichever option each writer runs (ADR-0083)."""
        from turnledger.store.backends import pg_recorders

        return pg_recorders.follow_page(_application(recorder), after, limit, topics)

    def follows_after(self, recorder: ApplicationRecorder, after: tuple[int, int]) -> bool:
        from turnledger.store.backends import pg_recorders

        return pg_recorders.follows_after(_application(recorder), after)

    def write_times(
        self, recorder: ApplicationRecorder
    ) -> tuple[datetime, dict[UUID, datetime]] | None:
        """The server's ``now()`` and each session's newest ``recorded_at`` (the server's
        time of the writing transaction, a column default: no writer's clock). A store made
        before ADR-0098 gets the column here, once (rows written before have none)."""
        from turnledger.store.backends import pg_recorders

        return pg_recorders.write_times(_application(recorder))

    def log_end(self, recorder: ApplicationRecorder) -> tuple[int, int]:
        from turnledger.store.backends import pg_recorders

        return pg_recorders.log_end(_application(recorder))

    def settle_horizon(
        self, recorder: ApplicationRecorder, after: tuple[int, int], timeout: float
    ) -> bool:
        from turnledger.store.backends import pg_recorders

        return pg_recorders.settle_horizon(_application(recorder), after, timeout)

    def session_start(self, session_id: UUID) -> int | None:
        from psycopg import sql

        query = sql.SQL(
            "SELECT notification_id FROM {}.{} WHERE originator_id = %s AND originator_version = 1"
        ).format(sql.Identifier(self.schema), sql.Identifier(self._events_table))
        connection = self.connect_sql().connection
        try:
            row = connection.execute(query, (session_id,)).fetchone()
        finally:
            connection.close()
        return 0 if row is None else int(row[0])

    def stored_session_ids(self, recorder: ApplicationRecorder) -> list[object] | None:
        from psycopg import sql

        query = sql.SQL("SELECT DISTINCT originator_id FROM {}.{}").format(
            sql.Identifier(self.schema), sql.Identifier(self._events_table)
        )
        connection = self.connect_sql().connection
        try:
            return [row[0] for row in connection.execute(query).fetchall()]
        finally:
            connection.close()

    def stored_snapshot_keys(
        self, recorder: AggregateRecorder
    ) -> list[tuple[object, object, object]] | None:
        from eventsourcing.postgres import PostgresAggregateRecorder
        from psycopg import sql

        if not isinstance(recorder, PostgresAggregateRecorder):
            return None
        query = sql.SQL("SELECT originator_id, originator_version, topic FROM {}.{}").format(
            sql.Identifier(self.schema), sql.Identifier(recorder.events_table_name)
        )
        connection = self.connect_sql().connection
        try:
            return [tuple(row) for row in connection.execute(query).fetchall()]
        finally:
            connection.close()

    def delete_snapshots(
        self, recorder: AggregateRecorder, session_id: UUID, before_version: int
    ) -> None:
        from turnledger.store.backends import pg_recorders

        pg_recorders.delete_snapshots(recorder, session_id, before_version)

    def replace_snapshot(self, recorder: AggregateRecorder, record: StoredEvent) -> None:
        from turnledger.store.backends import pg_recorders

        pg_recorders.replace_snapshot(recorder, record)

    def rewrite_states(
        self,
        events: ApplicationRecorder,
        snapshots: AggregateRecorder,
        records: Sequence[StoredEvent],
        keys: Sequence[SqlStatement],
    ) -> None:
        """On a connection of its own (`connect_sql`: the store's schema first in the
        search path), in one transaction."""
        rewrite_in_place(self, events, snapshots, records, keys, self.stored_id)

    def stored_id(self, session_id: object) -> object:
        """A uuid column."""
        return session_id if isinstance(session_id, UUID) else UUID(str(session_id))

    def connect_sql(self) -> SqlConnection:
        import psycopg
        from psycopg.sql import SQL, Identifier

        from turnledger.store.backends import pg_recorders

        if self.pooler:
            return self._pooler_sql()
        # The URL's lock and statement timeouts bound every wait on it too (ADR-0021): the
        # analytics' catch-up behind a writer, a rechain's table lock.
        connection: Any = psycopg.connect(
            self.login.conninfo(pg_recorders.connection_options(self.limits)), autocommit=True
        )
        try:
            connection.execute(SQL("SET search_path TO {}").format(Identifier(self.schema)))
        except BaseException:
            connection.close()
            raise
        return SqlConnection(connection, POSTGRES_DIALECT)

    def _pooler_sql(self) -> SqlConnection:
        """`connect_sql` behind a pooler in transaction mode: the search path set locally in
        every transaction (each statement outside one runs in one), and the erasure's VACUUM,
        which cannot run in a transaction, names its table with the schema."""
        from turnledger.store.backends import pg_recorders

        connection_class = pg_recorders.pooler_connection(
            pg_recorders.local_settings(Limits(), schema=self.schema), statements=True
        )
        connection = connection_class.connect(
            self.login.conninfo(), autocommit=True, prepare_threshold=None
        )
        erase = attrs.evolve(
            POSTGRES_DIALECT.erase, statement=f'VACUUM "{self.schema}".{{table}}'
        )
        return SqlConnection(connection, attrs.evolve(POSTGRES_DIALECT, erase=erase))


def _application(recorder: ApplicationRecorder) -> Any:
    from eventsourcing.postgres import PostgresApplicationRecorder

    assert isinstance(recorder, PostgresApplicationRecorder), "the recorder the store opened"
    return recorder
