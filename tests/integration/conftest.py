"""Fixtures that run the store contract on every backend: memory, SQLite, PostgreSQL (STYLE 10).

``backend_url`` is parametrized over the three backends, each one fresh per test: a uniquely
named ``memory://NAME`` (dropped after), a SQLite file under ``tmp_path``, and a unique
PostgreSQL schema on 127.0.0.1:5432 (user postgres, database test, trust auth; dropped after).
When PostgreSQL does not answer, its tests skip with the reason — or FAIL when the environment
variable ``TURNLEDGER_REQUIRE_POSTGRES=1`` is set (CI). ``open_backend_at`` opens backends that
are closed at teardown; ``records`` edits stored rows behind the store's back, per backend, for
the corruption and tamper tests.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

import pytest

from turnledger.store.backend import EventStoreBackend, drop_memory_store, open_backend

PG_CONNINFO = "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=3"
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def postgres_problem() -> str | None:
    """None when PostgreSQL answers, else why not (checked once per test session)."""
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


def require_postgres(problem: str | None) -> None:
    """Skip (or fail, with TURNLEDGER_REQUIRE_POSTGRES=1) when PostgreSQL is unavailable."""
    if problem is None:
        return
    if os.environ.get("TURNLEDGER_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"TURNLEDGER_REQUIRE_POSTGRES=1 but {problem}")
    pytest.skip(problem)


def _pg_execute(statement: str, *params: object) -> None:
    import psycopg

    with psycopg.connect(PG_CONNINFO, autocommit=True) as connection:
        connection.execute(statement, params or None)


@dataclasses.dataclass
class Target:
    """One fresh database for one test: its kind, its URL and how to reach its rows."""

    kind: str
    url: str
    sqlite_path: Path | None = None
    pg_schema: str | None = None


@pytest.fixture(
    params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def target(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_problem: str | None
) -> Iterator[Target]:
    """A fresh, empty database of each backend kind."""
    kind: str = request.param
    if kind == "memory":
        name = f"contract-{uuid.uuid4().hex}"
        yield Target(kind, f"memory://{name}")
        drop_memory_store(name)
    elif kind == "sqlite":
        path = tmp_path / "nested" / "store.db"  # the backend creates the missing directory
        yield Target(kind, f"sqlite:///{path}", sqlite_path=path)
    else:
        require_postgres(postgres_problem)
        schema = f"tl_test_{uuid.uuid4().hex[:16]}"  # created by the backend itself
        yield Target(kind, f"{PG_URL}?schema={schema}&pool_size=2", pg_schema=schema)
        _pg_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def backend_url(target: Target) -> str:
    """The URL of a fresh database, once per backend kind."""
    return target.url


@pytest.fixture
def open_backend_at(target: Target) -> Iterator[Callable[..., EventStoreBackend]]:
    """Open (more) backends on the test's database; all are closed at teardown."""
    opened: list[EventStoreBackend] = []

    def opener(url: str | None = None, **options: Any) -> EventStoreBackend:
        backend = open_backend(url or target.url, **options)
        opened.append(backend)
        return backend

    yield opener
    for backend in opened:
        backend.close()


@pytest.fixture
def backend(open_backend_at: Callable[..., EventStoreBackend]) -> EventStoreBackend:
    """A backend on the test's fresh database."""
    return open_backend_at()


class RecordEditor(Protocol):
    """Edits stored event rows directly, bypassing turnledger (corruption and tampering)."""

    def read(self, session_id: UUID, version: int) -> tuple[str, bytes]: ...

    def write(self, session_id: UUID, version: int, topic: str, state: bytes) -> None: ...

    def delete(self, session_id: UUID, version: int) -> None: ...


class MemoryRecords:
    """Reaches into the shared POPO recorder of a named memory store."""

    def __init__(self, backend: EventStoreBackend) -> None:
        self.recorder: Any = backend.recorder

    def _position(self, session_id: UUID, version: int) -> int:
        position: int = self.recorder._stored_events_index[str(session_id)][version]
        return position

    def read(self, session_id: UUID, version: int) -> tuple[str, bytes]:
        stored = self.recorder._stored_events[self._position(session_id, version)]
        return stored.topic, stored.state

    def write(self, session_id: UUID, version: int, topic: str, state: bytes) -> None:
        position = self._position(session_id, version)
        stored = self.recorder._stored_events[position]
        self.recorder._stored_events[position] = dataclasses.replace(
            stored, topic=topic, state=state
        )

    def delete(self, session_id: UUID, version: int) -> None:
        del self.recorder._stored_events_index[str(session_id)][version]


class SQLiteRecords:
    """Edits the stored_events table of the SQLite file with the sqlite3 module."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _run(self, statement: str, *params: object) -> list[Any]:
        connection = sqlite3.connect(self.path)
        try:
            with connection:
                return connection.execute(statement, params).fetchall()
        finally:
            connection.close()

    def read(self, session_id: UUID, version: int) -> tuple[str, bytes]:
        ((topic, state),) = self._run(
            "SELECT topic, state FROM stored_events WHERE originator_id=? AND originator_version=?",
            session_id.hex, version,
        )
        return topic, state

    def write(self, session_id: UUID, version: int, topic: str, state: bytes) -> None:
        self._run(
            "UPDATE stored_events SET topic=?, state=? "
            "WHERE originator_id=? AND originator_version=?",
            topic, state, session_id.hex, version,
        )

    def delete(self, session_id: UUID, version: int) -> None:
        self._run(
            "DELETE FROM stored_events WHERE originator_id=? AND originator_version=?",
            session_id.hex, version,
        )


class PostgresRecords:
    """Edits the stored_events table of the test schema with psycopg."""

    def __init__(self, schema: str) -> None:
        self.table = f'"{schema}".stored_events'

    def _run(self, statement: str, *params: object) -> list[Any]:
        import psycopg

        with psycopg.connect(PG_CONNINFO, autocommit=True) as connection:
            cursor = connection.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def read(self, session_id: UUID, version: int) -> tuple[str, bytes]:
        ((topic, state),) = self._run(
            f"SELECT topic, state FROM {self.table} "
            "WHERE originator_id=%s AND originator_version=%s",
            session_id, version,
        )
        return topic, bytes(state)

    def write(self, session_id: UUID, version: int, topic: str, state: bytes) -> None:
        self._run(
            f"UPDATE {self.table} SET topic=%s, state=%s "
            "WHERE originator_id=%s AND originator_version=%s",
            topic, state, session_id, version,
        )

    def delete(self, session_id: UUID, version: int) -> None:
        self._run(
            f"DELETE FROM {self.table} WHERE originator_id=%s AND originator_version=%s",
            session_id, version,
        )


@pytest.fixture
def records(target: Target, backend: EventStoreBackend) -> RecordEditor:
    """Raw access to the stored rows of the test's database."""
    if target.kind == "memory":
        return MemoryRecords(backend)
    if target.kind == "sqlite":
        assert target.sqlite_path is not None
        return SQLiteRecords(target.sqlite_path)
    assert target.pg_schema is not None
    return PostgresRecords(target.pg_schema)
