"""End-to-end fixtures: the ``turnledger`` command run as a subprocess on a temporary store.

Every call goes through `Cli.run`: ``[sys.executable, "-m", "turnledger", "--store", URL, ...]``
with a timeout, in the test's own temporary directory, with ``TURNLEDGER_STORE`` removed from the
environment so a developer's setting cannot leak in (STYLE 12: ``tests/e2e`` is the CLI as a
subprocess).

``store`` is parametrized over the backends several processes can open
(``tests.backends.SHARED_BACKENDS``: a SQLite file under ``tmp_path``, a fresh PostgreSQL schema),
made by `tests.backends.fresh_target` — the same databases, and the same PostgreSQL rule, as
the integration tests. ``Target.query`` reaches the rows behind the CLI's back (analytics tables,
tampering).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.backends import SHARED_BACKENDS, Target, fresh_target

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


# --- stores -----------------------------------------------------------------------------------

@pytest.fixture(params=SHARED_BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """A fresh, empty store: a SQLite file, then a PostgreSQL schema."""
    with fresh_target(request.param, tmp_path) as target:
        yield target


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Target]:
    """A fresh SQLite store only (tests that edit the file directly)."""
    with fresh_target("sqlite", tmp_path) as target:
        yield target


@pytest.fixture
def postgres_store(tmp_path: Path) -> Iterator[Target]:
    """A fresh PostgreSQL schema only."""
    with fresh_target("postgresql", tmp_path) as target:
        yield target


# --- the command ------------------------------------------------------------------------------

def imported_ids(stdout: str) -> list[str]:
    """The session ids `import` printed: the first field of each line (id, tab, summary)."""
    return [line.split("\t")[0] for line in stdout.splitlines()]


class Cli:
    """``python -m turnledger --store URL ...`` on one store, in one working directory."""

    def __init__(self, target: Target, cwd: Path) -> None:
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
        """Import ``tests/fixtures/transcripts/FMT.jsonl`` (it holds one bad line: exit 2,
        DECISIONS 10); return the new session ids, in file order."""
        result = self.run("import", TRANSCRIPTS / f"{fmt}.jsonl", "--format", fmt)
        assert 2 == result.returncode, describe(result)
        return imported_ids(result.stdout)

    def chat_view(self, session_id: str, *extra: str) -> list[dict[str, Any]]:
        """The messages of ``replay SESSION --view chat --json`` (plus ``extra`` options)."""
        payload = self.json("replay", session_id, "--view", "chat", "--json", *extra)
        messages: list[dict[str, Any]] = payload["messages"]
        return messages

    def event_counts(self) -> dict[str, int]:
        """``{session id: recorded events}`` from ``sessions --json``."""
        return {row["session_id"]: row["events"] for row in self.json("sessions", "--json")}


@pytest.fixture
def cli(store: Target, tmp_path: Path) -> Cli:
    """The command on a fresh store of each kind (SQLite, PostgreSQL)."""
    return Cli(store, tmp_path)


@pytest.fixture
def sqlite_cli(sqlite_store: Target, tmp_path: Path) -> Cli:
    """The command on a fresh SQLite store."""
    return Cli(sqlite_store, tmp_path)


@pytest.fixture
def postgres_cli(postgres_store: Target, tmp_path: Path) -> Cli:
    """The command on a fresh PostgreSQL schema."""
    return Cli(postgres_store, tmp_path)
