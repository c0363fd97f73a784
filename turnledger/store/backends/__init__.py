"""The backends, one module each, and the registry that maps a URL scheme to its backend.

Adding a backend is one module with a `Database` subclass (see `port`) and one line in
`BACKENDS`; docs/adding-a-backend.md walks through it.
"""

from __future__ import annotations

from typing import Final

from turnledger.store.backends.memory import MemoryDatabase, drop_memory_store
from turnledger.store.backends.port import Database
from turnledger.store.backends.postgres import PostgresDatabase
from turnledger.store.backends.sqlite import SQLiteDatabase

__all__ = ["BACKENDS", "drop_memory_store"]

BACKENDS: Final[dict[str, type[Database]]] = {
    "memory": MemoryDatabase,
    "sqlite": SQLiteDatabase,
    "postgresql": PostgresDatabase,
    "postgres": PostgresDatabase,
}
"""URL scheme (lower case) -> the backend that opens it."""
