"""The backends every store-using test runs on, and PostgreSQL's availability — defined once.

``ALL_BACKENDS`` (memory, SQLite, PostgreSQL) parametrizes every test that needs a store;
``SHARED_BACKENDS`` only the databases several processes can open (a memory store lives in one
process: the CLI's subprocesses, multi-process followers). `fresh_target` makes one fresh, empty
database of a kind: a uniquely named ``memory://NAME`` (dropped after), a SQLite file under the
test's directory (in a directory the backend must create), or a unique PostgreSQL schema on
127.0.0.1:5432 (user postgres, database test, trust auth; created by the backend, dropped after).

When PostgreSQL does not answer, its tests skip with the reason — or FAIL when the environment
variable ``TURNLEDGER_REQUIRE_POSTGRES=1`` is set (CI). A new backend adds its kind here (one
branch of `fresh_target`) and to ``ALL_BACKENDS``; the contract suite then runs on it.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from turnledger.store.backend import drop_memory_store

__all__ = [
    "ALL_BACKENDS",
    "PG_CONNINFO",
    "PG_URL",
    "SHARED_BACKENDS",
    "Target",
    "fresh_target",
    "postgres_problem",
    "require_postgres",
]

PG_CONNINFO = "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=3"
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _params(kinds: Sequence[str]) -> list[Any]:
    return [
        pytest.param(kind, marks=pytest.mark.postgres) if kind == "postgresql" else kind
        for kind in kinds
    ]


ALL_BACKENDS = _params(("memory", "sqlite", "postgresql"))
"""Every backend: the parametrization of every test that needs a store."""

SHARED_BACKENDS = _params(("sqlite", "postgresql"))
"""The backends several processes can open (the CLI's subprocesses, concurrent followers)."""


@functools.cache
def postgres_problem() -> str | None:
    """None when PostgreSQL answers, else why not (checked once per test process)."""
    try:
        import psycopg
    except ImportError as error:
        return f"psycopg is not installed ({error})"
    try:
        with psycopg.connect(PG_CONNINFO) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error as error:
        return f"PostgreSQL at 127.0.0.1:5432 does not answer: {' '.join(str(error).split())}"
    return None


def require_postgres() -> None:
    """Skip (or fail, with TURNLEDGER_REQUIRE_POSTGRES=1) when PostgreSQL is unavailable."""
    problem = postgres_problem()
    if problem is None:
        return
    if os.environ.get("TURNLEDGER_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"TURNLEDGER_REQUIRE_POSTGRES=1 but {problem}")
    pytest.skip(problem)


def pg_execute(statement: str, *params: object) -> list[tuple[Any, ...]]:
    """Run one statement on the test database (autocommit); its rows, if any."""
    import psycopg

    with psycopg.connect(PG_CONNINFO, autocommit=True) as connection:
        cursor = connection.execute(statement, params or None)
        return cursor.fetchall() if cursor.description else []


@dataclass(frozen=True)
class Target:
    """One fresh database for one test: its kind, its URL and how to reach its rows."""

    kind: str
    url: str
    sqlite_path: Path | None = None
    pg_schema: str | None = None

    def query(self, statement: str, *params: object) -> list[tuple[Any, ...]]:
        """Run one SQL statement on the store's database (committed); return its rows.

        Parameters use the driver's own marks: ``?`` for SQLite, ``%s`` for PostgreSQL; the
        PostgreSQL connection's search_path is the test schema, so table names are unqualified.
        """
        if self.sqlite_path is not None:
            connection = sqlite3.connect(self.sqlite_path, timeout=10)
            try:
                with connection:
                    return connection.execute(statement, params).fetchall()
            finally:
                connection.close()
        assert self.pg_schema is not None, f"a {self.kind} store has no SQL database"
        import psycopg

        with psycopg.connect(PG_CONNINFO, autocommit=True) as pg:
            pg.execute(f'SET search_path TO "{self.pg_schema}"')
            cursor = pg.execute(statement, params or None)
            return cursor.fetchall() if cursor.description else []

    def mark(self) -> str:
        """The driver's parameter mark."""
        return "?" if self.sqlite_path is not None else "%s"

    def stored_id(self, session_id: str | uuid.UUID) -> object:
        """``originator_id`` as stored: 32 hex digits in SQLite, a uuid in PostgreSQL."""
        value = uuid.UUID(str(session_id))
        return value.hex if self.sqlite_path is not None else value


@contextmanager
def fresh_target(kind: str, directory: Path) -> Iterator[Target]:
    """A fresh, empty database of ``kind``, removed afterwards (SQLite files stay in
    ``directory``, the test's temporary directory)."""
    if kind == "memory":
        name = f"test-{uuid.uuid4().hex}"
        yield Target(kind, f"memory://{name}")
        drop_memory_store(name)
    elif kind == "sqlite":
        path = directory / "stores" / "store.db"  # the backend creates the missing directory
        yield Target(kind, f"sqlite:///{path}", sqlite_path=path)
    elif kind == "postgresql":
        require_postgres()
        schema = f"tl_test_{uuid.uuid4().hex[:16]}"  # created by the backend on first use
        yield Target(kind, f"{PG_URL}?schema={schema}&pool_size=2", pg_schema=schema)
        pg_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    else:
        raise ValueError(f"no test database recipe for backend kind {kind!r}")
