"""Damaged SQLite store files for the audit tests (issue 19): a store built through the public
API, then cut, flipped or edited byte by byte while nothing has it open.

The store is deterministic in content (seeded ids and texts) and so in layout: the same page
holds the same rows in every run, which is what lets a test name the offsets it damages.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from uuid import UUID

import msgpack

import turnledger as tl
from turnledger.store.packing import open_envelope

WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
         "lambda", "mu")


def build_store(path: Path, *, sessions: int = 30, messages: int = 60, seed: int = 19) -> list[str]:
    """A SQLite store of ``sessions`` sessions of ``messages`` messages each, checkpointed (the
    WAL moved into the file, so damaging the file damages records) and closed; its ids."""
    rng = random.Random(seed)
    ids = []
    with tl.open_store(f"sqlite:///{path}?synchronous=normal", snapshot_interval=25) as store:
        for _ in range(sessions):
            session = store.start_session(session_id=UUID(int=rng.getrandbits(128), version=4))
            for i in range(messages):
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 80)))
                message = tl.ChatMessage.user if i % 2 == 0 else tl.ChatMessage.assistant
                session.append(message(f"{text} {i}"))
            ids.append(session.id)
    checkpoint(path)
    return ids


def checkpoint(path: Path) -> None:
    """Move the WAL into the database file (no connection of the store is open)."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()


def flip_bit(path: Path, offset: int, bit: int) -> None:
    """Flip one bit of the closed file at ``path``."""
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([byte ^ (1 << bit)]))


def occurrences(path: Path, needle: bytes) -> list[tuple[int, bytes]]:
    """Each offset of ``needle`` in the file, with the 11 bytes that follow it."""
    data = path.read_bytes()
    found, at = [], data.find(needle)
    while at >= 0:
        end = at + len(needle)
        found.append((at, data[end:end + 11]))
        at = data.find(needle, at + 1)
    return found


def patch(path: Path, offset: int, value: int) -> None:
    """Write one byte of the closed file at ``path``."""
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(bytes([value]))


def logical_content(path: Path) -> object:
    """What SQLite's integrity check says, and what the records and snapshots tables hold as
    any reader reads them (or the error): two files are the same store when these are equal.

    A record's state is compared opened (`opened_state`): the last byte of a zlib'd payload
    ends with padding bits no inflater reads, so a flip there changes the file but no byte of
    any record (the hash chain covers the payload, ADR-0031).
    """
    connection = sqlite3.connect(path)
    try:
        return [
            connection.execute("PRAGMA integrity_check").fetchall(),
            [(*row[:-1], opened_state(row[-1])) for row in connection.execute(
                "SELECT rowid, * FROM stored_events ORDER BY rowid")],
            connection.execute("SELECT * FROM stored_snapshots ORDER BY 1, 2").fetchall(),
        ]
    except sqlite3.Error as error:
        return f"unreadable: {error}"
    finally:
        connection.close()


def opened_state(state: object) -> object:
    """A record's ``state`` as the store reads it: the envelope's chain and its payload
    inflated when it is zlib'd (`turnledger.store.packing`); anything unreadable as it is."""
    try:
        return open_envelope(msgpack.unpackb(state))
    except Exception:  # damaged: compared byte for byte
        return state
