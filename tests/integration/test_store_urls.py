"""Opening stores by URL: each backend's URL forms, options and failures (E8, E11).

Not part of the contract suite (test_store_contract.py): these name one backend each.
"""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import pytest

from tests.backends import PG_CONNINFO, PG_URL, require_postgres
from tests.integration.test_store_contract import new_session
from turnledger.domain.errors import TurnledgerError
from turnledger.store.backend import InvalidStoreURL, StoreUnavailable, open_backend


def test_e8_private_and_named_memory_stores() -> None:
    """memory:// is private to its backend; memory://NAME is shared by name."""
    name = f"shared-{uuid4().hex}"
    with open_backend(f"memory://{name}") as a, open_backend(f"memory://{name}") as b:
        session_id, _ = new_session(a)
        assert [session_id] == b.session_ids()
    with open_backend("memory://") as c, open_backend("memory://") as d:
        new_session(c)
        assert [] == d.session_ids()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("mysql://localhost/db", "unknown store URL scheme 'mysql'"),
        ("turnledger.db", "is not a store URL"),
        ("sqlite:////proc/turnledger-test/store.db", "cannot create directory /proc/"),
        ("sqlite://relative.db", "sqlite:///relative/path.db"),
        ("sqlite:///:memory:", "use memory://"),
        ("sqlite:///x.db?journal=off", "unknown option 'journal'"),
        ("postgresql://u:hunter2@localhost/db?schema=a-b", "schema must be a plain identifier"),
        ("postgresql://localhost", "name one database"),
    ],
)
def test_e11_unusable_store_urls_are_invalid_store_url(url: str, reason: str) -> None:
    """A bad URL raises InvalidStoreURL (TurnledgerError, ValueError) with a one-line reason."""
    with pytest.raises(InvalidStoreURL) as caught:
        open_backend(url)
    text = str(caught.value)
    assert reason in text
    assert "\n" not in text
    assert "hunter2" not in text
    assert isinstance(caught.value, TurnledgerError)
    assert isinstance(caught.value, ValueError)


def test_e8_sqlite_relative_absolute_and_nested_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sqlite:///./x.db is relative to the working directory, sqlite:////abs absolute;
    missing parent directories are created."""
    monkeypatch.chdir(tmp_path)
    with open_backend("sqlite:///./relative.db") as relative:
        new_session(relative)
    nested = tmp_path / "a" / "b" / "absolute.db"
    with open_backend(f"sqlite:///{nested}") as absolute:
        new_session(absolute)
    assert (tmp_path / "relative.db").is_file()
    assert nested.is_file()


def test_e11_a_file_that_is_not_a_database_is_an_invalid_store_url(tmp_path: Path) -> None:
    """A SQLite URL naming a file that is not a database is InvalidStoreURL, file untouched."""
    path = tmp_path / "notes.txt"
    path.write_text("not a database, just notes " * 10)
    with pytest.raises(InvalidStoreURL, match="is not a SQLite database"):
        open_backend(f"sqlite:///{path}")
    assert "not a database, just notes " * 10 == path.read_text()


def test_e8_unreachable_postgresql_is_store_unavailable() -> None:
    """A PostgreSQL server that does not answer is StoreUnavailable, without the password."""
    url = "postgresql://postgres:hunter2@127.0.0.1:1/test?connect_timeout=1"
    with pytest.raises(StoreUnavailable) as caught:
        open_backend(url)
    assert "127.0.0.1:1" in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.postgres
def test_e8_postgres_schema_is_created_when_missing() -> None:
    """The backend creates the schema named in its URL, with its tables (the settings table
    every append checks among them, ADR-0098)."""
    require_postgres()
    import psycopg

    schema = f"tl_test_{uuid4().hex[:16]}"
    try:
        with open_backend(f"{PG_URL}?schema={schema}&pool_size=1") as backend:
            new_session(backend)
        with psycopg.connect(PG_CONNINFO) as connection:
            row = connection.execute(
                "SELECT array_agg(table_name::text ORDER BY table_name) "
                "FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchone()
    finally:
        with psycopg.connect(PG_CONNINFO, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    assert row is not None
    assert ["stored_events", "stored_snapshots", "tl_settings"] == row[0]
