"""Fixtures that run the store contract on every backend: memory, SQLite, PostgreSQL (STYLE 10).

``target`` is parametrized over every backend (``tests.backends.ALL_BACKENDS``), each one a
fresh database per test (`tests.backends.fresh_target`); ``backend_url`` is its URL.
``open_backend_at`` opens backends that are closed at teardown; ``records`` edits stored rows
behind the store's back, per backend, for the corruption and tamper tests. ``pg_schema`` (a
fresh PostgreSQL schema name) and ``proxy`` (`tests.tcp_proxy`, which cuts connections) serve
the PostgreSQL write-path tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

import pytest

from tests.backends import ALL_BACKENDS, Target, fresh_target, pg_execute, require_postgres
from tests.tcp_proxy import CommitCuttingProxy, commit_cutting_proxy
from turnledger.store.backend import EventStoreBackend, open_backend
from turnledger.store.backends.memory import MemoryEventRecorder


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema name (created by the store on first open), dropped after."""
    require_postgres()
    schema = f"tl_test_{uuid.uuid4().hex[:16]}"
    yield schema
    pg_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def proxy() -> Iterator[CommitCuttingProxy]:
    """A loopback proxy to the test PostgreSQL server that can cut a connection after COMMIT."""
    require_postgres()
    with commit_cutting_proxy() as running:
        yield running


@pytest.fixture(params=ALL_BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """A fresh, empty database of each backend kind."""
    with fresh_target(request.param, tmp_path) as fresh:
        yield fresh


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
    """Edits the rows of a memory store through its recorder's raw-row methods."""

    def __init__(self, backend: EventStoreBackend) -> None:
        assert isinstance(backend.recorder, MemoryEventRecorder)
        self.recorder = backend.recorder

    def read(self, session_id: UUID, version: int) -> tuple[str, bytes]:
        stored = self.recorder.stored_record(session_id, version)
        return stored.topic, stored.state

    def write(self, session_id: UUID, version: int, topic: str, state: bytes) -> None:
        self.recorder.overwrite_record(session_id, version, topic, state)

    def delete(self, session_id: UUID, version: int) -> None:
        self.recorder.forget_record(session_id, version)


class SqlRecords:
    """Edits the stored_events table of a SQLite or PostgreSQL store with its driver."""

    def __init__(self, target: Target) -> None:
        self.target = target
        mark = target.mark()
        self.where = f"WHERE originator_id={mark} AND originator_version={mark}"

    def read(self, session_id: UUID, version: int) -> tuple[str, bytes]:
        ((topic, state),) = self.target.query(
            f"SELECT topic, state FROM stored_events {self.where}",
            self.target.stored_id(session_id), version,
        )
        return topic, bytes(state)

    def write(self, session_id: UUID, version: int, topic: str, state: bytes) -> None:
        mark = self.target.mark()
        self.target.query(
            f"UPDATE stored_events SET topic={mark}, state={mark} {self.where}",
            topic, state, self.target.stored_id(session_id), version,
        )

    def delete(self, session_id: UUID, version: int) -> None:
        self.target.query(
            f"DELETE FROM stored_events {self.where}", self.target.stored_id(session_id), version
        )


@pytest.fixture
def records(target: Target, backend: EventStoreBackend) -> RecordEditor:
    """Raw access to the stored rows of the test's database."""
    if target.kind == "memory":
        return MemoryRecords(backend)
    return SqlRecords(target)
