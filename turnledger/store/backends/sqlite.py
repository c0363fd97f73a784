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

import errno
import os
import sqlite3
import stat
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Self, cast
from uuid import UUID

import attrs
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    StoredEvent,
)

from turnledger.store.backends.port import (
    BeforeCommit,
    Database,
    Erasure,
    InvalidStoreURL,
    Limits,
    Recorders,
    SqlConnection,
    SqlDialect,
    SqlStatement,
    StoreUnavailable,
    open_library_recorders,
    redact_url,
    rewrite_in_place,
    scratch_sql,
    url_options,
    url_seconds,
)

if TYPE_CHECKING:
    from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteCursor, SQLiteFactory
    from eventsourcing.utils import Environment

__all__ = ["SQLITE_DIALECT", "SQLiteDatabase", "integrity_check", "open_damaged"]

SQLITE_DIALECT: Final = SqlDialect(
    name="sqlite",
    placeholder="?",
    begin="BEGIN IMMEDIATE",
    blob="BLOB",
    # Per connection, and zeroes what the transaction frees; it stays on for that connection
    # (SQLite's default in many builds: an append frees next to nothing).
    secure_delete=("PRAGMA secure_delete = ON",),
    erase=Erasure(
        action="truncate the write-ahead log",
        statement="PRAGMA wal_checkpoint(TRUNCATE)",
        held=(
            "the write-ahead log could not be truncated (a reader was busy): old pages of "
            "destroyed data keys may stay in its -wal file until the next forget or purge"
        ),
    ),
)
"""SQLite's SQL for projections and the keys tables (``BEGIN IMMEDIATE`` takes the write
lock up front)."""

_DEFAULT_LOCK_TIMEOUT: Final = 5.0  # seconds, the library's default too
_SYNCHRONOUS: Final = ("full", "normal")
"""The ``synchronous`` values a store accepts (SQLite's PRAGMA of the same name), default first."""


class SQLiteDatabase(Database):
    """One SQLite file, named by an absolute path."""

    settings_table_required = False  # the fence reads a missing table as an empty one

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

        The events are read through SQLite's ``mode=ro`` when a write-ahead log or its
        shared-memory file exists (a connection may be open), else as ``immutable`` (no lock,
        no shared-memory file: works in a directory nobody may write). A projection gets a
        private in-memory database (`connect_sql`), so statistics are computed from the
        events instead of read from the file's tables.
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
            recorders = self._open_recorders(factory, settings)
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

        return attrs.evolve(recorders, insert=appender.insert, close=close)

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
            create_owner_only(self.path)
        except OSError as error:
            raise InvalidStoreURL(
                f"{self.url!r}: cannot create {self.path}: "
                f"{error.strerror or type(error).__name__}"
            ) from None
        if not os.access(self.path, os.W_OK):  # asked, not opened: a descriptor would drop locks
            raise InvalidStoreURL(
                f"{self.url!r}: cannot write {self.path}: permission denied (mode=ro reads it)"
            )

    def _check_readable(self) -> None:
        if not os.path.isfile(self.path):
            raise InvalidStoreURL(f"{self.url!r}: no store at {self.path} (mode=ro creates none)")

    def _read_only_uri(self) -> str:
        # SQLite's mode=ro whenever a -wal or -shm file is there: a connection may be open (a
        # writer) or a log may hold events, and mode=ro takes SQLite's locks and reads the
        # log. immutable=1 (no lock, no -shm created) only when neither exists: then no
        # connection is open, and nothing is created in a read-only directory. A writer that
        # starts during such a read is the one case left (ADR-0027, ADR-0062).
        live = any(os.path.exists(self.path + suffix) for suffix in ("-wal", "-shm"))
        return self.uri + ("?mode=ro" if live else "?immutable=1")

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

    def _open_recorders(
        self, factory: Callable[[Environment], SQLiteFactory], settings: dict[str, str]
    ) -> Recorders:
        """The library's recorders, their tables created when missing. Openers that set up
        one new file at once can meet SQLite's deadlock rule: a connection that read in a
        deferred transaction and then writes gets ``database is locked`` at once, without
        waiting, when another holds the write lock (its busy timeout does not apply). Such a
        refusal is tried again, backing off, until the store's lock timeout has passed."""
        deadline = time.monotonic() + self.limits.lock
        delay = 0.005
        while True:
            try:
                return open_library_recorders(self, factory, settings)
            except StoreUnavailable as error:
                locked = isinstance(error.__cause__, OperationalError | sqlite3.OperationalError
                                    ) and "locked" in str(error.__cause__)
                if not locked or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def stored_session_ids(self, recorder: ApplicationRecorder) -> list[object] | None:
        from eventsourcing.sqlite import SQLiteAggregateRecorder

        if not isinstance(recorder, SQLiteAggregateRecorder):
            return None
        with recorder.datastore.transaction(commit=False) as cursor:
            cursor.sqlite_cursor.row_factory = None
            # The (originator_id, originator_version) index: no record's state is read.
            cursor.execute(f"SELECT DISTINCT originator_id FROM {recorder.events_table_name}")
            return [row[0] for row in cursor.fetchall()]

    def stored_snapshot_keys(
        self, recorder: AggregateRecorder
    ) -> list[tuple[object, object, object]] | None:
        from eventsourcing.sqlite import SQLiteAggregateRecorder

        if not isinstance(recorder, SQLiteAggregateRecorder):
            return None
        with recorder.datastore.transaction(commit=False) as cursor:
            cursor.sqlite_cursor.row_factory = None
            # As bytes: a damaged id or topic that is no UTF-8 must not stop the listing.
            cursor.execute(
                "SELECT CAST(originator_id AS BLOB), originator_version, CAST(topic AS BLOB) "
                f"FROM {recorder.events_table_name}"
            )
            return [
                (_text(row[0]), row[1], _text(row[2])) for row in cursor.fetchall()
            ]

    @property
    def file_path(self) -> str:
        return self.path

    def delete_snapshots(
        self, recorder: AggregateRecorder, session_id: UUID, before_version: int
    ) -> None:
        library = _library(recorder)
        with library.datastore.transaction(commit=True) as cursor:
            _delete_snapshots(library, cursor, session_id, before_version)

    def replace_snapshot(self, recorder: AggregateRecorder, record: StoredEvent) -> None:
        library = _library(recorder)
        session_id = record.originator_id
        with library.datastore.transaction(commit=True) as cursor:
            # The library's own statement (its table, its columns, its form of an id).
            cursor.execute(library.insert_events_statement, (
                session_id.hex if isinstance(session_id, UUID) else session_id,
                record.originator_version, record.topic, record.state,
            ))
            _delete_snapshots(
                library, cursor, _uuid(record.originator_id), record.originator_version
            )

    def rewrite_states(
        self,
        events: ApplicationRecorder,
        snapshots: AggregateRecorder,
        records: Sequence[StoredEvent],
        keys: Sequence[SqlStatement],
    ) -> None:
        """On a connection of its own (`connect_sql`), in one ``BEGIN IMMEDIATE``."""
        rewrite_in_place(self, events, snapshots, records, keys, self.stored_id)

    def integrity_problems(self, limit: int) -> list[str]:
        uri = self._read_only_uri() if self.read_only else self.uri + "?mode=ro"
        connection = open_damaged(uri, timeout=self.limits.lock)
        try:
            return integrity_check(connection, limit)
        finally:
            connection.close()

    def stored_id(self, session_id: object) -> object:
        """32 hex digits, the library's form of a UUID in SQLite."""
        return _uuid(cast(UUID | str, session_id)).hex

    def side_sql(self) -> SqlConnection:
        """``PATH.server`` beside the store's file, in WAL mode: the store's file holds its
        records alone (ADR-0062); a read-only store gets a private in-memory database."""
        if self.read_only:
            return scratch_sql()
        side = self.path + ".server"
        if not os.path.exists(side):
            create_owner_only(side)  # it holds key hashes: as private as the store
        connection = sqlite3.connect(side, isolation_level=None,
                                     check_same_thread=False, timeout=self.limits.lock)
        connection.execute("PRAGMA journal_mode=WAL")
        return SqlConnection(connection, SQLITE_DIALECT)

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


def _library(recorder: AggregateRecorder) -> SQLiteAggregateRecorder:
    from eventsourcing.sqlite import SQLiteAggregateRecorder

    assert isinstance(recorder, SQLiteAggregateRecorder), "the recorder this database opened"
    return recorder


def _delete_snapshots(
    recorder: SQLiteAggregateRecorder, cursor: SQLiteCursor, session_id: UUID, before: int
) -> None:
    """Delete a session's snapshots before version ``before``, inside the caller's
    transaction (the library's recorder has no delete)."""
    cursor.execute(
        f"DELETE FROM {recorder.events_table_name} "
        "WHERE originator_id = ? AND originator_version < ?",
        (session_id.hex, before),
    )


def _uuid(value: UUID | str) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))


def open_damaged(uri: str, *, timeout: float = _DEFAULT_LOCK_TIMEOUT) -> sqlite3.Connection:
    """A read-only connection (``uri`` must say ``mode=ro`` or ``immutable=1``) that reads
    what it can of a damaged file.

    ``PRAGMA writable_schema=ON`` makes SQLite tolerate a schema it cannot fully parse and
    read a file shorter than its header says (checked on SQLite 3.40: the btree then counts
    the pages the file has), so a truncated file is read as it is — no copy, and no
    descriptor of this process on the file besides SQLite's own (issue 19). Nothing can be
    written through it. Raises ``sqlite3.Error`` when the file cannot be opened.
    """
    connection = sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=False)
    try:
        connection.execute("PRAGMA writable_schema=ON")
    except BaseException:
        connection.close()
        raise
    return connection


def integrity_check(connection: sqlite3.Connection, limit: int) -> list[str]:
    """The problems ``PRAGMA integrity_check`` reports (at most ``limit`` lines, each one
    line); ``[]`` for a sound file. Raises ``sqlite3.Error`` when the check cannot run."""
    found: list[str] = []
    for (text,) in connection.execute(f"PRAGMA integrity_check({max(1, int(limit))})"):
        if isinstance(text, bytes):  # a connection with text_factory=bytes
            text = text.decode(errors="replace")
        for line in str(text).splitlines():
            line = " ".join(line.split())
            if line and line != "ok" and not line.startswith("*** in database"):
                found.append(line)
    return found[:limit]


_CREATING: Final = threading.Lock()
"""Held while this process creates a store file through a descriptor (`create_owner_only`)."""


def create_owner_only(path: str) -> None:
    """Create an empty file at ``path``, readable by its owner only, unless one exists there.

    An existing file is never opened: closing *any* descriptor of a file drops every POSIX
    lock this process holds on it, SQLite's included, and another process could then take
    itself for the last connection, checkpoint and delete the write-ahead log under ours
    (lost commits; sqlite.org, "How To Corrupt An SQLite Database File", 2.2; ADR-0062).
    ``mknod`` makes the file without any descriptor. Where it may not (macOS without root,
    some file systems), ``O_EXCL`` makes a new inode, which no connection can hold a lock on
    yet; every store this process opens goes through `_CREATING` first, so none connects to
    the new file before that descriptor is closed. Raises ``OSError`` when the file cannot be
    created.
    """
    mknod = getattr(os, "mknod", None)  # not on Windows, whose locks close does not drop
    with _CREATING:
        try:
            if mknod is not None:
                mknod(path, stat.S_IFREG | 0o600)
                return
        except FileExistsError:
            return
        except OSError as error:
            if error.errno not in _NO_MKNOD:
                raise
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return
        os.close(descriptor)


_NO_MKNOD: Final = frozenset({errno.EPERM, errno.EACCES, errno.ENOSYS, errno.EOPNOTSUPP,
                               errno.EINVAL})
"""``mknod`` errors that mean "not this way here" (rather than "not in this directory")."""


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

    What the same transaction does besides (`BeforeCommit`): the fence's settings are
    checked first, under the write lock: an operator's rekey or rechain holds the same lock,
    so an append either commits before it or finds its change and raises `StoreChanged`
    (ADR-0098); the keys statements (the keys tables live in the same file) run after the
    insert (ADR-0066); the caller is told right before the ``COMMIT`` (ADR-0093).
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

    def insert(self, records: Sequence[StoredEvent], before: BeforeCommit) -> None:
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
                try:
                    before.fence.check(connection.cursor(), "?")
                except sqlite3.OperationalError as error:
                    if "no such table" not in str(error):
                        raise
                    before.fence.check_without_table()  # never keyed, never encrypted
                connection.executemany(self._statement, rows)
                for statement, parameters in before.keys:
                    connection.execute(statement, parameters)
                before.committing()
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


def _text(raw: object) -> object:
    """A column read as bytes, as text (undecodable bytes shown as U+FFFD); other values as
    they are (NULL, or a number where text was expected)."""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
