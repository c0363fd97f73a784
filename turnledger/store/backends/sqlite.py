"""``sqlite:///path/to/file.db``: the library's SQLite recorders (WAL).

The part after ``sqlite:///`` is the path: ``sqlite:///./x.db`` and ``sqlite:///x.db`` are
relative to the working directory, ``sqlite:////abs/x.db`` is absolute. Missing parent
directories are created. Query options: ``lock_timeout`` (seconds to wait for the file's
lock, decimals allowed, default 5; 0: do not wait), ``mode=ro`` (read-only: nothing is created
or written, for a store on a read-only file or directory; see `SQLiteDatabase.read_only`),
``synchronous`` (``full``, the default: every commit is on disk when the call returns;
``normal``: in WAL mode a commit survives a crash of the process but may be lost in a power
cut or an OS crash, and a call saves an fsync — ADR-0037). Projections keep their tables in
the same file.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Self, cast
from uuid import UUID

import attrs
from eventsourcing.persistence import (
    ApplicationRecorder,
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    StoredEvent,
)

from turnledger.store.backends.port import (
    Database,
    InvalidStoreURL,
    Limits,
    Recorders,
    SqlConnection,
    SqlDialect,
    SqlStatement,
    StoreUnavailable,
    open_library_recorders,
    redact_url,
    url_options,
    url_seconds,
)

if TYPE_CHECKING:
    from eventsourcing.sqlite import SQLiteFactory
    from eventsourcing.utils import Environment

__all__ = ["SQLITE_DIALECT", "SQLiteDatabase"]

SQLITE_DIALECT: Final = SqlDialect(name="sqlite", placeholder="?", begin="BEGIN IMMEDIATE")
"""SQLite's SQL for projections (``BEGIN IMMEDIATE`` takes the write lock up front)."""

_DEFAULT_LOCK_TIMEOUT: Final = 5.0  # seconds, the library's default too
_SYNCHRONOUS: Final = ("full", "normal")
"""The ``synchronous`` values a store accepts (SQLite's PRAGMA of the same name), default first."""


class SQLiteDatabase(Database):
    """One SQLite file, named by an absolute path."""

    def __init__(
        self,
        url: str,
        path: str,
        lock_timeout: float | None,
        *,
        read_only: bool = False,
        synchronous: str = _SYNCHRONOUS[0],
    ) -> None:
        super().__init__(url)
        self.path = path
        self.synchronous = synchronous
        """``PRAGMA synchronous`` of every connection: ``full`` (default) or ``normal``."""
        self.lock_timeout = lock_timeout
        """Seconds to wait for a lock (``lock_timeout`` option), None for the default."""
        self.limits = Limits(
            lock=_DEFAULT_LOCK_TIMEOUT if lock_timeout is None else lock_timeout
        )
        self.read_only = read_only
        """``mode=ro``: the file must exist; no file, table, WAL or analytics row is written.

        The events are read through SQLite's ``mode=ro`` when a write-ahead log holds some of
        them, else as ``immutable`` (no lock, no shared-memory file: works in a directory
        nobody may write). A projection gets a private in-memory database (`connect_sql`),
        so statistics are computed from the events instead of read from the file's tables.
        """

    @classmethod
    def from_url(cls, url: str, rest: str) -> Self:
        if not rest.startswith("/"):
            raise InvalidStoreURL(
                f"{redact_url(url)!r}: a SQLite URL is sqlite:///relative/path.db or "
                "sqlite:////absolute/path.db"
            )
        raw, _, query = rest[1:].partition("?")
        options = url_options(url, query, ("lock_timeout", "mode", "synchronous"))
        path = urllib.parse.unquote(raw)
        if "\x00" in path:
            raise InvalidStoreURL(f"{redact_url(url)!r}: the SQLite path holds a NUL byte (%00)")
        if not path or path.endswith("/"):
            raise InvalidStoreURL(f"{redact_url(url)!r}: the SQLite URL names no file")
        if path == ":memory:" or path.startswith("file:"):
            raise InvalidStoreURL(
                f"{redact_url(url)!r}: use memory:// for an in-memory store, a file path otherwise"
            )
        timeout = options.get("lock_timeout")
        seconds = None if timeout is None else url_seconds(url, "lock_timeout", timeout)
        mode = options.get("mode", "rw")
        if mode not in ("ro", "rw"):
            raise InvalidStoreURL(
                f"{redact_url(url)!r}: option mode must be ro or rw, got {mode!r}"
            )
        synchronous = options.get("synchronous", _SYNCHRONOUS[0])
        if synchronous not in _SYNCHRONOUS:
            raise InvalidStoreURL(
                f"{redact_url(url)!r}: option synchronous must be full or normal, "
                f"got {synchronous!r}"
            )
        return cls(
            url, os.path.abspath(path), seconds, read_only=mode == "ro", synchronous=synchronous
        )

    @property
    def uri(self) -> str:
        # A file: URI, so that '?' or '#' in a path cannot be read as URI syntax (the library
        # opens with uri=True, and so does connect_sql).
        return "file:" + urllib.parse.quote(self.path)

    def open(self, settings: dict[str, str]) -> Recorders:
        from eventsourcing.sqlite import SQLiteFactory

        if self.read_only:
            self._check_readable()
            settings.update(SQLITE_DBNAME=self._read_only_uri(), CREATE_TABLE="n")
        else:
            self._prepare_file()
            settings.update(SQLITE_DBNAME=self.uri, CREATE_TABLE="y")
        lock = self.limits.lock
        pragma = f"PRAGMA synchronous={self.synchronous.upper()}"

        def factory(env: Environment) -> SQLiteFactory:
            built = SQLiteFactory(env)
            # The library reads the setting as an int and treats 0 as "5 s"; its pool passes
            # the value to sqlite3.connect(timeout=...), which takes any float: 0 must mean
            # "do not wait" (a busy timeout under a millisecond is none at all).
            built.datastore.pool.lock_timeout = cast(int, max(lock, 1e-9))
            _set_synchronous(built.datastore.pool, pragma)
            return built

        try:
            recorders = open_library_recorders(self, factory, settings)
        except StoreUnavailable as error:
            cause = error.__cause__
            if isinstance(cause, DatabaseError | sqlite3.DatabaseError) and not isinstance(
                cause, OperationalError | InterfaceError | sqlite3.OperationalError
            ):
                # "file is not a database": the URL names something that is not a store.
                raise InvalidStoreURL(
                    f"{self.url!r}: {self.path} is not a SQLite database ({cause})"
                ) from None
            raise
        if self.read_only:
            return recorders  # nothing is inserted: the library's insert reports the refusal
        appender = _Appender(
            self.uri, recorders.events.insert_events_statement,  # type: ignore[attr-defined]
            timeout=lock, pragma=pragma,
        )
        library_close = recorders.close

        def close() -> None:
            try:
                appender.close()
            finally:
                if library_close is not None:
                    library_close()

        return attrs.evolve(
            recorders, insert=appender.insert, insert_with_keys=appender.insert, close=close
        )

    def _prepare_file(self) -> None:
        """Create the parent directories and the file now, so a bad path fails with its reason."""
        parent = os.path.dirname(self.path)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as error:
            raise InvalidStoreURL(
                f"{self.url!r}: cannot create directory {parent}: "
                f"{error.strerror or type(error).__name__}"
            ) from None
        if os.path.isdir(self.path):
            raise InvalidStoreURL(f"{self.url!r}: {self.path} is a directory")
        try:
            # Owner-only: a new store holds conversations (issue 11). SQLite gives its -wal
            # and -shm files the mode of the database file. An existing file keeps its mode.
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        except OSError as error:
            raise InvalidStoreURL(
                f"{self.url!r}: cannot create {self.path}: "
                f"{error.strerror or type(error).__name__}"
            ) from None

    def _check_readable(self) -> None:
        if not os.path.isfile(self.path):
            raise InvalidStoreURL(f"{self.url!r}: no store at {self.path} (mode=ro creates none)")

    def _read_only_uri(self) -> str:
        wal = self.path + "-wal"
        logged = os.path.exists(wal) and os.path.getsize(wal) > 0
        # Immutable ignores a write-ahead log: only when there is none to read.
        return self.uri + ("?mode=ro" if logged else "?immutable=1")

    def key_sql(self) -> SqlConnection:
        """The file itself, read-only under ``mode=ro`` (the keys are needed to read)."""
        if not self.read_only:
            return self.connect_sql()
        connection = sqlite3.connect(
            self._read_only_uri(), uri=True, isolation_level=None, check_same_thread=False
        )
        return SqlConnection(connection, SQLITE_DIALECT)

    def session_start(self, session_id: UUID) -> int | None:
        uri = self._read_only_uri() if self.read_only else self.uri
        connection = sqlite3.connect(uri, uri=True, timeout=self.limits.lock)
        try:
            row = connection.execute(
                "SELECT rowid FROM stored_events WHERE originator_id = ? "
                "AND originator_version = 1",
                (session_id.hex,),
            ).fetchone()
        finally:
            connection.close()
        return 0 if row is None else int(row[0])

    def session_rows(
        self,
        recorder: ApplicationRecorder,
        session_id: UUID,
        after_version: int | None,
        upto_version: int | None,
    ) -> list[tuple[int, str, bytes]] | None:
        """The three columns a read decodes, selected on the library's own connection and
        transaction (its locking and error translation), as plain tuples."""
        from eventsourcing.sqlite import SQLiteAggregateRecorder

        if not isinstance(recorder, SQLiteAggregateRecorder):
            return None
        statement = (
            f"SELECT originator_version, topic, state FROM {recorder.events_table_name} "
            "WHERE originator_id = ?"
        )
        params: list[object] = [session_id.hex if isinstance(session_id, UUID) else session_id]
        if after_version is not None:
            statement += " AND originator_version > ?"
            params.append(after_version)
        if upto_version is not None:
            statement += " AND originator_version <= ?"
            params.append(upto_version)
        statement += " ORDER BY originator_version"
        with recorder.datastore.transaction(commit=False) as cursor:
            cursor.sqlite_cursor.row_factory = None  # tuples, not the library's sqlite3.Row
            cursor.execute(statement, params)
            rows: list[tuple[int, str, bytes]] = cursor.fetchall()
        return rows

    def connect_sql(self) -> SqlConnection:
        if self.read_only:  # projections compute in memory: nothing is written to the file
            memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            return SqlConnection(memory, SQLITE_DIALECT)
        connection = sqlite3.connect(
            self.uri,
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            timeout=self.limits.lock,
        )
        connection.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
        return SqlConnection(connection, SQLITE_DIALECT)


def _set_synchronous(pool: Any, pragma: str) -> None:
    """Make ``pool`` (the library's) run ``pragma`` on every connection it creates: SQLite's
    ``synchronous`` belongs to a connection, not to the file."""
    from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool

    class PragmaPool(SQLiteConnectionPool):
        def _create_connection(self) -> SQLiteConnection:
            connection = super()._create_connection()
            connection.cursor().execute(pragma)
            return connection

    pool.__class__ = PragmaPool


class _Appender:
    """The insert of an append on a connection of its own (ADR-0056).

    The library's insert costs a pool checkout, a cursor object per transaction and one
    ``execute`` per record (for the ids it returns, which an append does not use). This is
    the same statement on the same table, in one ``BEGIN IMMEDIATE`` ... ``COMMIT`` with one
    ``executemany``, on a connection with the store's ``synchronous`` and lock timeout: the
    same durability, the same (session, version) key. A taken key raises the library's
    ``IntegrityError`` (the store's `ConcurrencyConflict`), any other failure the driver's
    error (the store's `StoreUnavailable`, settled as in doubt: ADR-0020); the transaction
    is rolled back first, and a connection that cannot roll back is dropped (the next
    append opens a new one). Safe to share between threads: one append at a time.

    ``keys``: statements on the keys tables, which live in the same file, run in the same
    transaction after the insert (`Recorders.insert_with_keys`, ADR-0066).
    """

    def __init__(self, uri: str, statement: str, *, timeout: float, pragma: str) -> None:
        self._uri = uri
        self._statement = statement
        self._timeout = timeout
        self._pragma = pragma
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._closed = False

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(
            self._uri, uri=True, isolation_level=None, check_same_thread=False,
            timeout=self._timeout,
        )
        try:
            connection.execute(self._pragma)
        except BaseException:
            connection.close()
            raise
        return connection

    def insert(
        self, records: Sequence[StoredEvent], keys: Sequence[SqlStatement] = ()
    ) -> None:
        rows = [
            (r.originator_id.hex if isinstance(r.originator_id, UUID) else r.originator_id,
             r.originator_version, r.topic, r.state)
            for r in records
        ]
        with self._lock:
            if self._closed:
                raise InterfaceError("the store is closed")
            connection = self._connection
            if connection is None:
                connection = self._connection = self._connect()
            try:
                connection.execute("BEGIN IMMEDIATE")
                connection.executemany(self._statement, rows)
                for statement, parameters in keys:
                    connection.execute(statement, parameters)
                connection.execute("COMMIT")
            except BaseException as error:
                self._roll_back(connection)
                if isinstance(error, sqlite3.IntegrityError):
                    raise IntegrityError(error) from error
                raise

    def _roll_back(self, connection: sqlite3.Connection) -> None:
        try:
            if connection.in_transaction:
                connection.rollback()
        except BaseException:
            self._connection = None
            connection.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
