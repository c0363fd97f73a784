"""Read what can still be read of a damaged SQLite store, row by row (ADR-0025, ADR-0063).

The SQLite half of `turnledger.store.salvage`: a file damaged below what the library's
recorders tolerate (an ``originator_id`` that is not a UUID, a ``topic`` that is not UTF-8, a
malformed page, an index that disagrees with its table, a truncated file) is read here in
rowid order, a page of rows at a time, skipping what cannot be read; every row or region that
cannot be used is one `Damage`. A damaged tree that hands back rows already read cannot make
the scan grow: rowids only go up.

The damaged file is read only through SQLite (`open_damaged`), never with a descriptor of this
process: closing one would drop every POSIX lock the process holds on the file, SQLite's
included, and let another process checkpoint and delete the WAL under a live connection
(ADR-0025, issue 19). Nothing is written to the damaged file.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import urllib.parse
from collections.abc import Iterator
from typing import Final
from uuid import UUID

import attrs
from eventsourcing.persistence import StoredEvent

from turnledger.domain.errors import CorruptRecord, bounded
from turnledger.store.backends.port import InvalidStoreURL, SqlConnection
from turnledger.store.backends.sqlite import (
    SQLITE_DIALECT,
    SQLiteDatabase,
    integrity_check,
    open_damaged,
)
from turnledger.store.codec import describe_error

__all__ = [
    "STORE_WIDE",
    "Damage",
    "DamagedFile",
    "Damages",
    "damaged_key_sql",
    "damaged_sqlite_path",
    "reading",
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


@attrs.define
class Damages:
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


class DamagedFile:
    """A read-only SQLite connection on the damaged file at ``path`` (`open_damaged`), with
    text read as bytes (a damaged column may hold anything); `close` it when done. Raises
    ``sqlite3.Error`` where SQLite cannot read: inside `reading`, a `CorruptRecord`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._source = open_damaged(_read_only(path))
        self._source.text_factory = bytes

    def close(self) -> None:
        self._source.close()

    def check(self, damage: Damages) -> None:
        """SQLite's integrity check of the file, and whether it was truncated."""
        _check_file(self._source, self.path, damage)

    def events(self, damage: Damages) -> Iterator[list[StoredEvent]]:
        """Pages of the usable rows of ``stored_events`` (`_event_pages`)."""
        return _event_pages(self._source, damage)

    def snapshots(self, damage: Damages) -> Iterator[list[StoredEvent]]:
        """Pages of the usable rows of ``stored_snapshots`` (`_snapshot_pages`)."""
        return _snapshot_pages(self._source, damage)


@contextlib.contextmanager
def reading(path: str) -> Iterator[None]:
    """Raise what SQLite cannot read at all inside the block as `CorruptRecord`, naming
    ``path``."""
    try:
        yield
    except sqlite3.Error as error:
        raise CorruptRecord(
            f"{path} cannot be read even row by row: {describe_error(error)}"
        ) from None


def damaged_key_sql(path: str) -> SqlConnection:
    """A read-only connection on the damaged file's own keys and settings tables."""
    connection = open_damaged(_read_only(path))
    connection.isolation_level = None
    return SqlConnection(connection, SQLITE_DIALECT)


def _check_file(source: sqlite3.Connection, path: str, damage: Damages) -> None:
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


def _event_pages(source: sqlite3.Connection, damage: Damages) -> Iterator[list[StoredEvent]]:
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
    before: StoredEvent | None, rowid: int, why: str, damage: Damages
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
    source: sqlite3.Connection, damage: Damages
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


def _record(row: tuple[object, ...], table: str, damage: Damages) -> StoredEvent | None:
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
