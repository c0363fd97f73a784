"""No CLI output and no error message shows the store's password (issue 9.9).

``turnledger demo`` names its store twice (the header and the ``next:`` hint); a URL the parser
rejects, a database that cannot be reached and an unknown option are echoed in the error. Each
path runs with a password in the URL (PostgreSQL's trust auth ignores it) and must not print it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.backends import Target, require_postgres
from tests.e2e.conftest import Cli, describe, run_main

SECRET = "hunter2-s3cret"


def _turnledger(tmp_path: Path, url: str, *args: str) -> tuple[int, str]:
    result = run_main(["--store", url, *args], cwd=tmp_path)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.postgres
def test_e11_demo_never_prints_the_store_password(postgres_store: Target, tmp_path: Path) -> None:
    """The demo's header and its `next:` hint show the URL with ``***`` for the password."""
    require_postgres()
    url = postgres_store.url.replace("postgres@", f"postgres:{SECRET}@", 1)
    cli = Cli(Target("postgresql", url, pg_schema=postgres_store.pg_schema), tmp_path)
    result = cli.run("demo")
    assert 0 == result.returncode, describe(result)
    assert SECRET not in result.stdout + result.stderr
    assert f"store: {url.replace(SECRET, '***')}" in result.stdout


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (f"postgresql://u:{SECRET}@[::1/db", "Invalid IPv6 URL"),
        (f"postgresql:/u:{SECRET}@h/db", "is not a store URL"),
        (f"postgresql://u:{SECRET}@h:notaport/db", "Port could not be cast"),
        (f"postgresql://u:{SECRET}@h/db?bogus=1", "unknown option 'bogus'"),
        (f"postgresql://u@h/db?password={SECRET}", "unknown option 'password'"),
        (f"postgresql://u:{SECRET}@h/db?schema=Upper", "lower case"),
        (f"pg://u:{SECRET}@h/db", "unknown store URL scheme"),
        (f"postgresql://u:{SECRET}@127.0.0.1:1/db?connect_timeout=1", "cannot open"),
    ],
)
def test_e11_rejected_urls_are_echoed_without_the_password(
    tmp_path: Path, url: str, reason: str
) -> None:
    """Every URL error (exit 2; 3 for a server nobody answers on: unavailable, ADR-0097)
    names its reason and shows ``***`` instead of the password."""
    status, output = _turnledger(tmp_path, url, "sessions")
    expected = 3 if reason == "cannot open" else 2
    assert (expected, True, False) == (status, reason in output, SECRET in output), output
    assert "***" in output


@pytest.mark.postgres
@pytest.mark.parametrize("command", [["sessions"], ["verify"], ["stats"]])
def test_e11_commands_on_a_password_url_print_no_password(
    postgres_store: Target, tmp_path: Path, command: list[str]
) -> None:
    """The read commands work with a password in the URL and never print it."""
    require_postgres()
    url = postgres_store.url.replace("postgres@", f"postgres:{SECRET}@", 1)
    status, output = _turnledger(tmp_path, url, *command)
    assert (0, False) == (status, SECRET in output), output
