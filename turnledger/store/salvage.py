"""Salvage what can still be read from a damaged SQLite store, for the audit (ADR-0025, ADR-0063).

A SQLite file can be damaged below what the library's recorders tolerate: an ``originator_id``
that is not a UUID, a ``topic`` that is not UTF-8, a malformed page, an index that disagrees
with its table, a truncated file. The recorders then fail, or read through the damaged index
and silently miss rows, so `salvage_sqlite` reads the tables itself, in rowid order, a page of
rows at a time, skipping what it cannot read, and copies the usable rows into a private
temporary SQLite store (sealed bytes untouched, so the hash chain is still checked). Every row
or region it could not use is one `Damage`; a second row claiming a (session, version) already
copied is one too. Memory holds one page of rows whatever the size of the file or of its damage,
and a damaged tree that hands back rows already read cannot make the copy grow: rowids only go
up.

The damaged file is read only through SQLite (`open_damaged`), never with a descriptor of this
process: closing one would drop every POSIX lock the process holds on the file, SQLite's
included, and let another process checkpoint and delete the WAL under a live connection
(DESIGN, issue 19). Nothing is written to the damaged file.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import tempfile
import urllib.parse
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Final, Self
from uuid import UUID

import attrs
from eventsourcing.persistence import AggregateRecorder, DatabaseError, IntegrityError, StoredEvent

from turnledger.domain.errors import CorruptRecord, TurnledgerError, bounded
from turnledger.store.backend import EventStoreBackend, open_backend
from turnledger.store.backends.port import InvalidStoreURL, StoreUnavailable
from turnledger.store.backends.sqlite import SQLiteDatabase, integrity_check, open_damaged
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

PAGE: Final = 500
"""Rows read from the damaged file, and copied in one transaction, at a time."""
_MAX_PROBES: Final = 10_000  # unreadable rowids probed past damaged regions before giving up
_MAX_STALE: Final = 100_000  # rows handed back again by a damaged tree before giving up
_MAX_DAMAGE: Final = 1_000  # findings listed; the others are counted in one more
_INTEGRITY_LINES: Final = 5  # lines of SQLite's integrity check reported (the first say where)
_COLUMNS: Final = "originator_id, originator_version, topic, state"
_BEYOND_END = re.compile(r"invalid page number (\d+)")
_UNINDEXED = re.compile(r"^row (\d+) missing from index sqlite_autoindex_stored_events")


def _bounded_id(text: str) -> str:
    return bounded(text, 80)  # a damaged id column can hold anything


def _bounded_detail(text: str) -> str:
    return bounded(text)


@attrs.frozen
class Damage:
    """A row or region that could not be salvaged: session (text, or `STORE_WIDE`), version."""

    session_id: str = attrs.field(converter=_bounded_id)
    version: int
    detail: str = attrs.field(converter=_bounded_detail)


class Salvage:
    """The readable rows in a private temporary store, and what could not be read.

    `close` (or leaving a ``with`` block) closes the store and deletes its files.
    """

    def __init__(
        self,
        backend: EventStoreBackend,
        damage: Sequence[Damage],
        directory: tempfile.TemporaryDirectory[str],
    ) -> None:
        self.backend = backend
        self.damage = tuple(damage)
        self._directory = directory

    def close(self) -> None:
        try:
            self.backend.close()
        finally:
            self._directory.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.close()


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
    """The file of a ``sqlite:///`` URL when it exists and SQLite takes it for a database."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "sqlite":
        return None
    try:
        path = SQLiteDatabase.from_url(url, rest).path
    except InvalidStoreURL:
        return None
    return path if is_sqlite_file(path) else None


def is_sqlite_file(path: str) -> bool:
    """Whether ``path`` is a file SQLite takes for a database of at least one page (a store,
    maybe damaged). SQLite reads the header itself: no descriptor of ours on the file."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return False
    try:
        with contextlib.closing(open_damaged(_read_only(path))) as connection:
            connection.execute("PRAGMA page_count").fetchone()
    except sqlite3.Error as error:
        # A damaged database past its header is still one; "file is not a database" is not.
        return getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_CORRUPT
    return True


def _read_only(path: str) -> str:
    return f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"


def salvage_sqlite(
    path: str, *, key: bytes | None = None, audit_key: bytes | None = None
) -> Salvage:
    """Copy the readable events and snapshots of the SQLite file at ``path`` into a private
    temporary store (see the module docstring); close the `Salvage` when done.

    ``key`` and ``audit_key`` read an encrypted or keyed store: the data keys and settings are
    read from the file's own tables (issue 11). Raises `CorruptRecord` when the file cannot be
    opened read-only at all.
    """
    directory = tempfile.TemporaryDirectory(prefix="turnledger-salvage-")
    try:
        backend = open_backend(f"sqlite:///{directory.name}/salvage.db?synchronous=normal")
    except BaseException:
        directory.cleanup()
        raise
    damage = _Damages()
    try:
        with contextlib.closing(open_damaged(_read_only(path))) as source:
            source.text_factory = bytes
            _check_file(source, path, damage)
            _copy(_event_pages(source, damage), backend.recorder, "stored_events", damage)
            _copy(_snapshot_pages(source, damage), backend.snapshot_recorder,
                  "stored_snapshots", damage)
        if key is not None or audit_key is not None:
            _read_with_keys(backend, path, key, audit_key, damage)
    except sqlite3.Error as error:
        Salvage(backend, (), directory).close()
        raise CorruptRecord(
            f"{path} cannot be read even row by row: {describe_error(error)}"
        ) from None
    except BaseException:
        Salvage(backend, (), directory).close()
        raise
    return Salvage(backend, damage.listed(), directory)


@attrs.define
class _Damages:
    """The findings of one salvage: the first `_MAX_DAMAGE` listed, the others counted."""

    found: list[Damage] = attrs.field(factory=list)
    more: int = 0

    def add(self, session_id: str, version: int, detail: str) -> None:
        if len(self.found) < _MAX_DAMAGE:
            self.found.append(Damage(session_id, version, detail))
        else:
            self.more += 1

    def listed(self) -> list[Damage]:
        if not self.more:
            return self.found
        return [*self.found, Damage(STORE_WIDE, 0, f"and {self.more:,} more damaged rows or "
                                                   "regions, not listed")]


def _check_file(source: sqlite3.Connection, path: str, damage: _Damages) -> None:
    """SQLite's integrity check of the damaged file, and whether it was truncated."""
    page_size = int(source.execute("PRAGMA page_size").fetchone()[0])
    pages = int(source.execute("PRAGMA page_count").fetchone()[0])
    size = os.path.getsize(path)  # a stat: no descriptor
    try:
        problems = integrity_check(source, _INTEGRITY_LINES)
    except sqlite3.Error as error:
        problems = [f"the check itself fails: {describe_error(error)}"]
    referenced = [int(n) for p in problems for n in _BEYOND_END.findall(p)]
    if size % page_size or any(n > pages for n in referenced):
        beyond = max(referenced, default=0)
        needs = f"; its pages refer to page {beyond:,}" if beyond > pages else ""
        damage.add(STORE_WIDE, 0, f"the file is truncated: {size:,} bytes, {pages:,} pages of "
                                  f"{page_size:,} bytes{needs}")
    for problem in problems:
        found = _UNINDEXED.search(problem)
        located = _locate(source, int(found[1])) if found else None
        if located is None:
            damage.add(STORE_WIDE, 0, f"SQLite's integrity check: {problem}")
            continue
        session, version = located
        damage.add(session, version, f"SQLite's integrity check: {problem}: a read of this "
                                     "session through the index does not see this record (it "
                                     "reads shorter than stored, or this id or version column "
                                     "is damaged)")


def _locate(source: sqlite3.Connection, rowid: int) -> tuple[str, int] | None:
    """(session, version) of the events row ``rowid``, read by rowid (no index)."""
    try:
        row = source.execute("SELECT originator_id, originator_version FROM stored_events "
                             "WHERE rowid = ?", (rowid,)).fetchone()
    except sqlite3.Error:
        return None
    if row is None or not isinstance(row[1], int):
        return None
    session = _text(row[0])
    with contextlib.suppress(ValueError):
        session = str(UUID(session))  # named as every other finding names it
    return session, row[1]


def _event_pages(source: sqlite3.Connection, damage: _Damages) -> Iterator[list[StoredEvent]]:
    """Pages of the usable rows of ``stored_events``, in rowid order, each row once.

    A damaged tree may hand back rows already read (a page pointing into another part of the
    tree): only rowids above the last one read are taken, so nothing is copied twice and the
    copy cannot grow with the damage. An unreadable region is probed past, rowid by rowid,
    `_MAX_PROBES` times in all.
    """
    last, probes, stale = 0, 0, 0
    failing = False  # the last read failed: a failure now is the same damaged region
    page: list[StoredEvent] = []
    before: StoredEvent | None = None  # the last record read
    while probes < _MAX_PROBES and stale < _MAX_STALE:
        try:
            # Row by row, not fetchmany: a failing step must not lose the rows read before it.
            for row in source.execute(
                f"SELECT rowid, {_COLUMNS} FROM stored_events WHERE rowid > ? ORDER BY rowid",
                (last,),
            ):
                if row[0] <= last:
                    stale += 1
                    if stale >= _MAX_STALE:
                        break
                    continue
                last, failing = row[0], False
                if (record := _record(row[1:], "stored_events", damage)) is not None:
                    page.append(record)
                    before = record
                if len(page) >= PAGE:
                    yield page
                    page = []
            else:
                yield page
                return
        except sqlite3.Error as error:
            if not failing:
                _unreadable_after(before, last, describe_error(error), damage)
            last, probes, failing = last + 1, probes + 1, True
    yield page
    why = (f"{probes:,} rowids could not be read" if probes >= _MAX_PROBES
           else f"the damaged tree handed back {stale:,} rows already read")
    damage.add(STORE_WIDE, 0, f"stored_events: the scan stopped at row {last:,} ({why}); any "
                              "rows after it are not salvaged")


def _unreadable_after(
    before: StoredEvent | None, rowid: int, why: str, damage: _Damages
) -> None:
    """A damaged region begins after row ``rowid``: named at the version after the last
    record read, since its session is the one known to go on into the region."""
    if before is None:
        damage.add(STORE_WIDE, 0, f"stored_events: the rows after row {rowid:,} cannot be "
                                  f"read ({why}); the readable ones were salvaged")
        return
    version = before.originator_version
    damage.add(str(before.originator_id), version + 1, (
        f"stored_events: the rows after row {rowid:,} (this session's version {version:,}) "
        f"cannot be read ({why}): this session's later records, and any other session's in "
        "that region, may be lost; the readable rows were salvaged"))


def _snapshot_pages(
    source: sqlite3.Connection, damage: _Damages
) -> Iterator[list[StoredEvent]]:
    """Pages of the usable snapshots (a WITHOUT ROWID table: read up to its first unreadable
    page; snapshots are a cache, a restore replays without them)."""
    try:
        cursor = source.execute(f"SELECT {_COLUMNS} FROM stored_snapshots")
        while rows := cursor.fetchmany(PAGE):
            found = (_record(row, "stored_snapshots", damage) for row in rows)
            yield [record for record in found if record is not None]
    except sqlite3.Error as error:
        damage.add(STORE_WIDE, 0, f"stored_snapshots cannot all be read: "
                                  f"{describe_error(error)}")


def _copy(
    pages: Iterator[list[StoredEvent]], recorder: AggregateRecorder, table: str,
    damage: _Damages,
) -> None:
    """Insert each page in one transaction; a page that repeats a (session, version) is
    inserted row by row, and each repeated row is a finding (the first one is kept)."""
    for page in pages:
        if not page:
            continue
        try:
            recorder.insert_events(page)
        except IntegrityError:
            for record in page:
                try:
                    recorder.insert_events([record])
                except IntegrityError:
                    damage.add(str(record.originator_id), record.originator_version,
                               f"{table}: a second row claims this version; it is left out "
                               "(a damaged version or id column)")


def _record(row: tuple[object, ...], table: str, damage: _Damages) -> StoredEvent | None:
    raw_id, version, raw_topic, state = row
    session = _text(raw_id)
    if not isinstance(version, int) or not isinstance(state, bytes):
        damage.add(session, 0, f"{table}: a row with a damaged version or state")
        return None
    try:
        originator_id = UUID(session)
    except ValueError:
        damage.add(session, version, f"{table}: originator_id {session!r} is not a UUID; the "
                                     "row is skipped (its session, if any, misses this version)")
        return None
    try:
        topic = raw_topic.decode() if isinstance(raw_topic, bytes) else str(raw_topic)
    except UnicodeDecodeError:
        damage.add(str(originator_id), version, f"{table}: the topic {raw_topic!r} is not UTF-8")
        return None
    return StoredEvent(originator_id, version, topic, state)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        with contextlib.suppress(UnicodeDecodeError):
            return value.decode()
        return repr(value)
    return str(value)


def _read_with_keys(
    backend: EventStoreBackend,
    path: str,
    key: bytes | None,
    audit_key: bytes | None,
    damage: _Damages,
) -> None:
    """Give the salvage backend the mapper the damaged file's own keys and settings call for.

    The chain is checked under the audit key given unless the file's settings say the store
    is unkeyed (then `verify` reports the downgrade, as on a sound store); settings that cannot
    be read never make a keyed store's records pass with the unkeyed chain.
    """
    from turnledger.store.backends.port import SqlConnection
    from turnledger.store.backends.sqlite import SQLITE_DIALECT
    from turnledger.store.crypto import UNKEYED_CHAIN, Keyring, Protection, SealedMapper
    from turnledger.store.keys import KeyTable
    from turnledger.store.mapper import TurnledgerMapper

    def connect() -> SqlConnection:
        connection = open_damaged(_read_only(path))
        connection.isolation_level = None
        return SqlConnection(connection, SQLITE_DIALECT)

    table = KeyTable(connect, path)
    try:
        settings: dict[str, str] | None = table.settings()
    except StoreUnavailable as error:  # the keys table is damaged too: read what needs no key
        settings = None
        how = "under the audit key given" if audit_key is not None else "unkeyed"
        damage.add(STORE_WIDE, 0, f"the settings table cannot be read ({error}); the chain is "
                                  f"checked {how}")
    # As `protect` decides: no chain setting is the unkeyed chain.
    said_unkeyed = settings is not None and settings.get("chain", UNKEYED_CHAIN) == UNKEYED_CHAIN
    chain_key = None if said_unkeyed else audit_key
    settings = settings or {}
    codec = backend.mapper.codec
    keyring = Keyring(table, key) if key is not None and "encryption" in settings else None
    mapper = (
        SealedMapper(keyring, codec=codec, audit_key=chain_key) if keyring is not None
        else TurnledgerMapper(codec=codec, audit_key=chain_key)
    )
    backend.protection.close()
    backend.protection = Protection(
        keys=table, keyring=keyring, chain=settings.get("chain", UNKEYED_CHAIN),
        audit_key=audit_key, unkeyed_despite_audit_key=audit_key is not None and said_unkeyed,
    )
    backend.mapper = mapper
