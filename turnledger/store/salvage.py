"""Salvage what can still be read from a damaged SQLite store, for the audit (ADR-0025).

A SQLite file can be damaged below what the library's recorders tolerate: an ``originator_id``
that is not a UUID, a ``topic`` that is not UTF-8, a malformed page, a truncated file. The
recorders then fail for the whole store (a listing or a read dies), so `salvage_sqlite` reads
the tables itself, through a read-only connection, row by row, skipping what it cannot read;
the readable rows are copied into a private in-memory store (sealed bytes untouched, so the
hash chain is still checked), and every row or region it could not use is one `Damage`.
Nothing is written to the damaged file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import urllib.parse
from collections.abc import Iterator
from typing import Final
from uuid import UUID

import attrs
from eventsourcing.persistence import DatabaseError, StoredEvent

from turnledger.domain.errors import CorruptRecord, TurnledgerError
from turnledger.store.backend import EventStoreBackend, open_backend
from turnledger.store.backends.port import InvalidStoreURL, StoreUnavailable
from turnledger.store.backends.sqlite import SQLiteDatabase
from turnledger.store.codec import describe_error

__all__ = [
    "STORE_WIDE",
    "Damage",
    "Salvage",
    "damaged_sqlite_path",
    "is_damage",
    "is_sqlite_file",
    "salvage_sqlite",
]

STORE_WIDE: Final = "(store)"
"""The session of a finding that belongs to no readable session (a malformed page)."""

_HEADER: Final = b"SQLite format 3\x00"
_MAX_SKIPS: Final = 10_000  # unreadable rowids probed past a damaged region before giving up


@attrs.frozen
class Damage:
    """A row or region that could not be salvaged: session (text, or `STORE_WIDE`), version."""

    session_id: str
    version: int
    detail: str


@attrs.frozen
class Salvage:
    """The readable rows in a private in-memory store, and what could not be read."""

    backend: EventStoreBackend
    damage: tuple[Damage, ...]


def is_damage(error: BaseException) -> bool:
    """Whether ``error`` says the stored bytes are damaged (not that the database is busy or
    unreachable): a corrupt record, a row the library cannot convert, a malformed file."""
    if isinstance(error, CorruptRecord):
        return True
    if isinstance(error, ValueError) and not isinstance(error, TurnledgerError):
        return True  # the library converting a damaged column (e.g. originator_id)
    cause = error.__cause__ if isinstance(error, StoreUnavailable | InvalidStoreURL) else None
    if isinstance(error, InvalidStoreURL) and cause is None:
        return "is not a SQLite database" in str(error)
    if not isinstance(cause, sqlite3.DatabaseError | DatabaseError):
        return False
    text = str(cause).lower()
    return not any(word in text for word in ("locked", "busy", "unable to open", "readonly"))


def damaged_sqlite_path(url: str) -> str | None:
    """The file of a ``sqlite:///`` URL when it exists and starts with the SQLite header."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "sqlite":
        return None
    try:
        path = SQLiteDatabase.from_url(url, rest).path
    except InvalidStoreURL:
        return None
    return path if is_sqlite_file(path) else None


def is_sqlite_file(path: str) -> bool:
    """Whether ``path`` is a file that starts with the SQLite header (a store, maybe damaged)."""
    try:
        with open(path, "rb") as file:
            return file.read(len(_HEADER)) == _HEADER
    except OSError:
        return False


def salvage_sqlite(
    path: str, *, key: bytes | None = None, audit_key: bytes | None = None
) -> Salvage:
    """Copy the readable events and snapshots of the SQLite file at ``path`` into memory.

    ``key`` and ``audit_key`` read an encrypted or keyed store: the data keys and settings are
    read from the file's own tables (issue 11). Raises ``sqlite3.Error`` only when the file
    cannot be opened read-only at all.
    """
    damage: list[Damage] = []
    with tempfile.TemporaryDirectory(prefix="turnledger-salvage-") as tmp:
        readable = _padded_copy(path, tmp, damage)
        uri = f"file:{urllib.parse.quote(os.path.abspath(readable))}?mode=ro"
        connection = sqlite3.connect(uri, uri=True)
        connection.text_factory = bytes
        try:
            events = list(_rows(connection, "stored_events", damage))
            snapshots = list(_rows(connection, "stored_snapshots", damage, rowid=False))
        finally:
            connection.close()
    backend = open_backend("memory://")
    if key is not None or audit_key is not None:
        _read_with_keys(backend, path, key, audit_key)
    backend.recorder.insert_events(events)
    if snapshots:
        backend.snapshot_recorder.insert_events(snapshots)
    return Salvage(backend, tuple(damage))


def _read_with_keys(
    backend: EventStoreBackend, path: str, key: bytes | None, audit_key: bytes | None
) -> None:
    """Give the salvage backend the mapper the damaged file's own keys and settings call for."""
    from turnledger.store.backends.port import SqlConnection
    from turnledger.store.backends.sqlite import SQLITE_DIALECT
    from turnledger.store.crypto import UNKEYED_CHAIN, Keyring, Protection, SealedMapper
    from turnledger.store.keys import KeyTable
    from turnledger.store.mapper import TurnledgerMapper

    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"

    def connect() -> SqlConnection:
        connection = sqlite3.connect(uri, uri=True, isolation_level=None,
                                     check_same_thread=False)
        return SqlConnection(connection, SQLITE_DIALECT)

    table = KeyTable(connect, path)
    try:
        settings = table.settings()
    except StoreUnavailable:  # the keys table is damaged too: read what needs no key
        settings = {}
    chain = settings.get("chain", UNKEYED_CHAIN)
    chain_key = None if chain == UNKEYED_CHAIN else audit_key
    codec = backend.mapper.codec
    keyring = Keyring(table, key) if key is not None and "encryption" in settings else None
    mapper = (
        SealedMapper(keyring, codec=codec, audit_key=chain_key) if keyring is not None
        else TurnledgerMapper(codec=codec, audit_key=chain_key)
    )
    backend.protection.close()
    backend.protection = Protection(keys=table, keyring=keyring, chain=chain, audit_key=audit_key)
    backend.mapper = mapper


def _padded_copy(path: str, tmp: str, damage: list[Damage]) -> str:
    """``path`` itself, or when the file is shorter than its header says (truncated), a copy
    padded to that length: SQLite refuses to read even the schema of a truncated file, while
    the missing pages of a padded copy only cost the rows they held."""
    with open(path, "rb") as file:
        header = file.read(100)
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    expected = int.from_bytes(header[28:32], "big") * page_size
    size = os.path.getsize(path)
    if size >= expected:
        return path
    damage.append(Damage(
        STORE_WIDE, 0, f"the file is truncated: {size:,} of its {expected:,} bytes remain",
    ))
    copy = os.path.join(tmp, "salvage.db")
    shutil.copyfile(path, copy)
    if os.path.exists(path + "-wal"):
        shutil.copyfile(path + "-wal", copy + "-wal")
    with open(copy, "r+b") as file:
        file.truncate(expected)
    return copy


def _rows(
    connection: sqlite3.Connection, table: str, damage: list[Damage], *, rowid: bool = True
) -> Iterator[StoredEvent]:
    """The usable rows of ``table``; each unusable row or unreadable region becomes a `Damage`."""
    columns = "originator_id, originator_version, topic, state"
    if not rowid:  # WITHOUT ROWID: one pass, stop at the first unreadable page
        try:
            raw = connection.execute(f"SELECT {columns} FROM {table}").fetchall()
        except sqlite3.Error as error:
            why = describe_error(error)
            damage.append(Damage(STORE_WIDE, 0, f"{table} cannot be read: {why}"))
            return
        for row in raw:
            if (record := _record(row, table, damage)) is not None:
                yield record
        return
    last, skips = 0, 0
    while skips < _MAX_SKIPS:
        try:
            for row in connection.execute(
                f"SELECT rowid, {columns} FROM {table} WHERE rowid > ? ORDER BY rowid",
                (last,),
            ):
                last = row[0]
                if (record := _record(row[1:], table, damage)) is not None:
                    yield record
            return
        except sqlite3.Error as error:
            if skips == 0:
                damage.append(Damage(
                    STORE_WIDE, 0,
                    f"{table}: the rows after row {last} cannot all be read "
                    f"({describe_error(error)}); the readable ones were salvaged",
                ))
            last, skips = last + 1, skips + 1


def _record(row: tuple[object, ...], table: str, damage: list[Damage]) -> StoredEvent | None:
    raw_id, version, raw_topic, state = row
    session = _text(raw_id)
    if not isinstance(version, int) or not isinstance(state, bytes):
        damage.append(Damage(session, 0, f"{table}: a row with a damaged version or state"))
        return None
    try:
        originator_id = UUID(session)
    except ValueError:
        damage.append(Damage(
            session, version, f"{table}: originator_id {session!r} is not a UUID; the row is "
            "skipped (its session, if any, misses this version)",
        ))
        return None
    try:
        topic = raw_topic.decode() if isinstance(raw_topic, bytes) else str(raw_topic)
    except UnicodeDecodeError:
        damage.append(Damage(
            str(originator_id), version, f"{table}: the topic {raw_topic!r} is not UTF-8",
        ))
        return None
    return StoredEvent(originator_id, version, topic, state)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        with contextlib.suppress(UnicodeDecodeError):
            return value.decode()
        return repr(value)
    return str(value)
