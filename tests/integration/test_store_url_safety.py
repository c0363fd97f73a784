"""Store URLs that must fail clearly, and passwords that never leak (issue 9.9).

- ``schema=`` with upper-case letters is refused (the library looks its composite types up by
  the unquoted name, which PostgreSQL folds to lower case: such a store cannot be written);
- a NUL byte in a SQLite path is an `InvalidStoreURL`, not a ``ValueError`` traceback;
- `redact_url` removes the password from any text, also one that does not parse as a URL.
"""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import pytest

from tests.backends import PG_URL, require_postgres
from tests.integration.test_store_contract import new_session
from turnledger.store.backend import InvalidStoreURL, open_backend
from turnledger.store.backends.port import redact_text, redact_url

SECRET = "s3cr3t-pw"


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u:{SECRET}@localhost/db?schema=Upper",
        f"postgresql://u:{SECRET}@localhost/db?schema=mixedCase_1",
    ],
)
def test_e11_upper_case_schema_is_refused_naming_the_rule(url: str) -> None:
    """schema=Upper: InvalidStoreURL saying schemas are lower case, password removed."""
    with pytest.raises(InvalidStoreURL) as raised:
        open_backend(url)
    assert "lower case" in str(raised.value)
    assert SECRET not in str(raised.value)


@pytest.mark.postgres
def test_e8_lower_case_schema_with_digits_and_underscores_is_written() -> None:
    """A lower-case schema name the URL accepts is a store that can be written and read."""
    require_postgres()
    schema = f"tl_ok_{uuid4().hex[:8]}"
    with open_backend(f"{PG_URL}?schema={schema}") as backend:
        session_id, _ = new_session(backend)
        assert [session_id] == backend.session_ids()
    import psycopg

    from tests.backends import PG_CONNINFO

    with psycopg.connect(PG_CONNINFO, autocommit=True) as connection:
        connection.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.mark.parametrize("path", ["a%00b.db", "dir%00/x.db", "x.db%00"])
def test_e11_nul_byte_in_sqlite_path_is_invalid_store_url(tmp_path: Path, path: str) -> None:
    """sqlite:///...%00...: InvalidStoreURL naming the NUL byte, never a ValueError traceback."""
    with pytest.raises(InvalidStoreURL) as raised:
        open_backend(f"sqlite:///{tmp_path}/{path}")
    assert "NUL" in str(raised.value)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"postgresql://u:{SECRET}@h/db", "postgresql://u:***@h/db"),
        (f"postgresql://u:{SECRET}@[::1/db", "postgresql://u:***@[::1/db"),  # no parse
        (f"postgresql:/u:{SECRET}@h/db", "postgresql:/u:***@h/db"),  # not a URL
        (f"postgresql://u:{SECRET}@h:notaport/db", "postgresql://u:***@h:notaport/db"),
        (f"postgresql://u:p@{SECRET}@h/db", "postgresql://u:***@h/db"),  # '@' in the password
        (f"postgresql://u@h/db?password={SECRET}&schema=x", "postgresql://u@h/db?password=***&schema=x"),
        ("sqlite:///./x.db", "sqlite:///./x.db"),
        ("memory://name", "memory://name"),
    ],
)
def test_e11_redact_url_removes_the_password_from_any_text(url: str, expected: str) -> None:
    """The password goes, whether or not the text parses as a URL; the rest stays."""
    assert expected == redact_url(url)


def test_e11_redact_text_removes_the_decoded_password_too() -> None:
    """A driver message quoting the percent-decoded password loses it as well."""
    url = "postgresql://u:p%40ss%2Fword@h/db"
    assert "auth failed for ***" == redact_text("auth failed for p@ss/word", url)


def test_e8_sqlite_mode_ro_reads_and_refuses_writes(tmp_path: Path) -> None:
    """mode=ro reads a store, writes nothing (an append is StoreUnavailable), creates no file."""
    from turnledger.store.backend import StoreUnavailable
    from turnledger.store.session import open_store

    db = tmp_path / "s.db"
    with open_store(f"sqlite:///{db}") as store:
        session_id = store.start_session().id
    files = sorted(p.name for p in tmp_path.iterdir())
    with open_store(f"sqlite:///{db}?mode=ro") as store:
        assert [session_id] == store.sessions()
        with pytest.raises(StoreUnavailable, match="readonly"):
            store.start_session()
    assert files == sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(InvalidStoreURL, match="mode=ro creates none"):
        open_backend(f"sqlite:///{tmp_path / 'missing.db'}?mode=ro")
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(InvalidStoreURL, match="mode must be ro or rw"):
        open_backend(f"sqlite:///{db}?mode=wal")
