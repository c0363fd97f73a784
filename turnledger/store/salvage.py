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

The SQLite backend reads the damaged file (`turnledger.store.backends.sqlite_scan`: through
SQLite only, never a descriptor of this process, and nothing is written to it); this module
copies what it reads into the temporary store and gives that store the file's own keys.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Self

from eventsourcing.persistence import AggregateRecorder, IntegrityError, StoredEvent

from turnledger.domain.errors import CorruptRecord, TurnledgerError
from turnledger.store.backend import EventStoreBackend, open_backend
from turnledger.store.backends.port import InvalidStoreURL, StoreUnavailable, damage_errors
from turnledger.store.backends.sqlite_scan import (
    STORE_WIDE,
    Damage,
    DamagedFile,
    Damages,
    damaged_key_sql,
    damaged_sqlite_path,
    reading,
)

__all__ = ["STORE_WIDE", "damaged_sqlite_path", "is_damage", "salvage_sqlite"]


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
    if not isinstance(cause, damage_errors()):
        return False
    text = str(cause).lower()
    return not any(word in text for word in ("locked", "busy", "unable to open", "readonly"))


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
    damage = Damages()
    try:
        with reading(path):
            with contextlib.closing(DamagedFile(path)) as source:
                source.check(damage)
                _copy(source.events(damage), backend.recorder, "stored_events", damage)
                _copy(source.snapshots(damage), backend.snapshot_recorder,
                      "stored_snapshots", damage)
            if key is not None or audit_key is not None:
                _read_with_keys(backend, path, key, audit_key, damage)
    except BaseException:
        Salvage(backend, (), directory).close()
        raise
    return Salvage(backend, damage.listed(), directory)


def _copy(
    pages: Iterator[list[StoredEvent]], recorder: AggregateRecorder, table: str,
    damage: Damages,
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


def _read_with_keys(
    backend: EventStoreBackend,
    path: str,
    key: bytes | None,
    audit_key: bytes | None,
    damage: Damages,
) -> None:
    """Give the salvage backend the mapper the damaged file's own keys and settings call for.

    The chain is checked under the audit key given unless the file's settings say the store
    is unkeyed (then `verify` reports the downgrade, as on a sound store); settings that cannot
    be read never make a keyed store's records pass with the unkeyed chain.
    """
    from turnledger.store.crypto import UNKEYED_CHAIN, Keyring, Protection, SealedMapper
    from turnledger.store.keys import KeyTable
    from turnledger.store.mapper import TurnledgerMapper

    table = KeyTable(lambda: damaged_key_sql(path), path)
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
