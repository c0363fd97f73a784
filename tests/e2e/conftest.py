"""End-to-end fixtures: the ``turnledger`` command run as a subprocess on a temporary store.

Every call goes through `Cli.run`: ``[sys.executable, "-m", "turnledger", "--store", URL, ...]``
with a timeout, in the test's own temporary directory, with ``TURNLEDGER_STORE`` removed from the
environment so a developer's setting cannot leak in (STYLE 12: ``tests/e2e`` is the CLI as a
subprocess).

``store`` is parametrized over a SQLite file under ``tmp_path`` and a fresh PostgreSQL schema on
127.0.0.1:5432 (user postgres, database test; dropped after the test). When PostgreSQL does not
answer, its tests skip with the reason — or FAIL when ``TURNLEDGER_REQUIRE_POSTGRES=1`` (CI), the
same rule as ``tests/integration/conftest.py`` (duplicated here on purpose: a conftest is not a
library, and the e2e layer must not depend on the integration layer's fixtures).
``StoreTarget.query`` reaches the rows behind the CLI's back (analytics tables, tampering).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PG_CONNINFO = "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=3"
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"

REPO = Path(__file__).resolve().parents[2]
TRANSCRIPTS = REPO / "tests" / "fixtures" / "transcripts"
CONSOLE_SCRIPT = Path(sys.executable).parent / "turnledger"

CLI_TIMEOUT = 60.0  # seconds for one command; the slowest (demo on PostgreSQL) takes about 1 s
SESSION_LINE = re.compile(r"^session ([0-9a-f-]{36})$", re.MULTILINE)  # the demo's session id


def clean_env() -> dict[str, str]:
    """The test process's environment without ``TURNLEDGER_STORE`` (the CLI's default store)."""
    env = dict(os.environ)
    env.pop("TURNLEDGER_STORE", None)
    return env


def run_command(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = CLI_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with a timeout, stdin closed, output captured as UTF-8 text."""
    return subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=clean_env() if env is None else env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        check=False,
    )


def describe(result: subprocess.CompletedProcess[str]) -> str:
    """A failure message showing the command, its exit code and both streams."""
    return (
        f"$ {' '.join(result.args)}\nexit {result.returncode}\n"
        f"--- stdout\n{result.stdout}--- stderr\n{result.stderr}"
    )


# --- PostgreSQL availability (same rule as tests/integration/conftest.py) ---------------------

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


# --- stores -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class StoreTarget:
    """One fresh, empty store for one test: its kind, its URL and how to reach its rows."""

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
        import psycopg

        with psycopg.connect(PG_CONNINFO, autocommit=True) as pg:
            pg.execute(f'SET search_path TO "{self.pg_schema}"')
            cursor = pg.execute(statement, params or None)
            return cursor.fetchall() if cursor.description else []

    def mark(self) -> str:
        """The driver's parameter mark."""
        return "?" if self.sqlite_path is not None else "%s"

    def stored_id(self, session_id: str) -> object:
        """``originator_id`` as stored: 32 hex digits in SQLite, a uuid in PostgreSQL."""
        value = uuid.UUID(session_id)
        return value.hex if self.sqlite_path is not None else value


@contextmanager
def _fresh_target(kind: str, tmp_path: Path, postgres_problem: str | None) -> Iterator[StoreTarget]:
    if kind == "sqlite":
        path = tmp_path / "stores" / "e2e.db"  # the CLI creates the missing directory
        yield StoreTarget(kind, f"sqlite:///{path}", sqlite_path=path)
        return
    require_postgres(postgres_problem)
    schema = f"tl_e2e_{uuid.uuid4().hex[:16]}"  # created by the backend on first use
    yield StoreTarget(
        kind, f"{PG_URL}?schema={schema}&pool_size=2&connect_timeout=5", pg_schema=schema
    )
    import psycopg

    with psycopg.connect(PG_CONNINFO, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_problem: str | None
) -> Iterator[StoreTarget]:
    """A fresh, empty store: a SQLite file, then a PostgreSQL schema."""
    with _fresh_target(request.param, tmp_path, postgres_problem) as target:
        yield target


@pytest.fixture
def sqlite_store(tmp_path: Path, postgres_problem: str | None) -> Iterator[StoreTarget]:
    """A fresh SQLite store only (tests that edit the file directly)."""
    with _fresh_target("sqlite", tmp_path, postgres_problem) as target:
        yield target


@pytest.fixture
def postgres_store(tmp_path: Path, postgres_problem: str | None) -> Iterator[StoreTarget]:
    """A fresh PostgreSQL schema only."""
    with _fresh_target("postgresql", tmp_path, postgres_problem) as target:
        yield target


# --- the command ------------------------------------------------------------------------------

class Cli:
    """``python -m turnledger --store URL ...`` on one store, in one working directory."""

    def __init__(self, target: StoreTarget, cwd: Path) -> None:
        self.target = target
        self.cwd = cwd

    def argv(self, *args: str | os.PathLike[str], store: bool = True) -> list[str]:
        """The full command line for ``args`` (with ``--store URL`` unless ``store=False``)."""
        prefix = ["--store", self.target.url] if store else []
        return [sys.executable, "-m", "turnledger", *prefix, *(str(a) for a in args)]

    def run(
        self, *args: str | os.PathLike[str], store: bool = True, timeout: float = CLI_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """Run one command; never raises for its exit code."""
        return run_command(self.argv(*args, store=store), cwd=self.cwd, timeout=timeout)

    def ok(self, *args: str | os.PathLike[str]) -> str:
        """Run one command that must exit 0; return its stdout."""
        result = self.run(*args)
        assert 0 == result.returncode, describe(result)
        return result.stdout

    def json(self, *args: str | os.PathLike[str]) -> Any:
        """Run one command that must exit 0 and print JSON; return the parsed value."""
        return json.loads(self.ok(*args))

    def demo(self) -> tuple[str, str]:
        """Run ``turnledger demo``; return (session id, its stdout)."""
        stdout = self.ok("demo")
        found = SESSION_LINE.findall(stdout)
        assert 1 == len(found), stdout
        return found[0], stdout

    def import_fixture(self, fmt: str) -> list[str]:
        """Import ``tests/fixtures/transcripts/FMT.jsonl`` (it holds one bad line: exit 1);
        return the new session ids, in file order."""
        result = self.run("import", TRANSCRIPTS / f"{fmt}.jsonl", "--format", fmt)
        assert 1 == result.returncode, describe(result)
        return result.stdout.split()

    def chat_view(self, session_id: str, *extra: str) -> list[dict[str, Any]]:
        """The messages of ``replay SESSION --view chat --json`` (plus ``extra`` options)."""
        payload = self.json("replay", session_id, "--view", "chat", "--json", *extra)
        messages: list[dict[str, Any]] = payload["messages"]
        return messages

    def event_counts(self) -> dict[str, int]:
        """``{session id: recorded events}`` from ``sessions --json``."""
        return {row["session_id"]: row["events"] for row in self.json("sessions", "--json")}


@pytest.fixture
def cli(store: StoreTarget, tmp_path: Path) -> Cli:
    """The command on a fresh store of each kind (SQLite, PostgreSQL)."""
    return Cli(store, tmp_path)


@pytest.fixture
def sqlite_cli(sqlite_store: StoreTarget, tmp_path: Path) -> Cli:
    """The command on a fresh SQLite store."""
    return Cli(sqlite_store, tmp_path)


@pytest.fixture
def postgres_cli(postgres_store: StoreTarget, tmp_path: Path) -> Cli:
    """The command on a fresh PostgreSQL schema."""
    return Cli(postgres_store, tmp_path)
