"""Bad usage and bad input exit 2 with a one-line reason; ``--help`` works everywhere (E11).

Each command runs in the test's temporary directory, so a stray default store
(``./turnledger.db``) would land there, never in the repository. The commands run through the
CLI's ``main`` in this process; two run as ``python -m turnledger`` subprocesses, so the exit
codes of the real entry point are seen once: argparse's usage error (2) and an unavailable
store (3).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import TRANSCRIPTS, Cli, describe, run_command, run_main


def _turnledger(cwd: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_main(args, cwd=cwd)


def _spawned(cwd: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The real entry point, ``python -m turnledger``, as a subprocess: its exit code."""
    return run_command([sys.executable, "-m", "turnledger", *args], cwd=cwd)


def _assert_usage_error(
    result: subprocess.CompletedProcess[str], *, one_line: bool, code: int = 2
) -> None:
    assert code == result.returncode, describe(result)
    assert "" == result.stdout
    lines = result.stderr.splitlines()
    assert lines, "no reason on stderr"
    if one_line:
        assert 1 == len(lines), result.stderr


def test_cli_without_a_command_is_a_usage_error(tmp_path: Path) -> None:
    """`turnledger` alone exits 2 and says a command is required."""
    result = _spawned(tmp_path)

    _assert_usage_error(result, one_line=False)
    assert "COMMAND" in result.stderr.splitlines()[-1]
    assert not (tmp_path / "turnledger.db").exists()


def test_cli_unknown_command_is_a_usage_error(tmp_path: Path) -> None:
    """`turnledger frobnicate` exits 2 naming the bad choice."""
    result = _turnledger(tmp_path, "frobnicate")

    _assert_usage_error(result, one_line=False)
    assert "'frobnicate'" in result.stderr.splitlines()[-1]


def test_e11_unknown_store_scheme_is_a_one_line_usage_error(tmp_path: Path) -> None:
    """--store bogus://x exits 2 with one stderr line naming the URL."""
    result = _turnledger(tmp_path, "--store", "bogus://x", "sessions")

    _assert_usage_error(result, one_line=True)
    assert "bogus://x" in result.stderr


@pytest.mark.parametrize("where", ["proc", "under-a-file"])
def test_e11_sqlite_path_that_cannot_be_created_is_a_usage_error(
    tmp_path: Path, where: str
) -> None:
    """A SQLite store whose directory cannot be created exits 2 with one line naming it."""
    if where == "proc":
        path = Path("/proc/turnledger-e2e/x/y.db")
    else:
        blocker = tmp_path / "a-file"
        blocker.write_text("not a directory\n", encoding="utf-8")
        path = blocker / "sub" / "y.db"

    result = _turnledger(tmp_path, "--store", f"sqlite:///{path}", "sessions")

    _assert_usage_error(result, one_line=True)
    assert str(path.parent.parent) in result.stderr


def test_e11_unreachable_postgresql_is_a_one_line_unavailable_error(tmp_path: Path) -> None:
    """A PostgreSQL URL nobody answers on exits 3 (the store is unavailable: trying again
    later may succeed, ADR-0097) with one line, quickly (connect_timeout)."""
    url = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2"

    result = _spawned(tmp_path, "--store", url, "sessions")

    _assert_usage_error(result, one_line=True, code=3)
    assert "127.0.0.1" in result.stderr


COMMANDS = [
    [], ["demo"], ["import"], ["export"], ["sessions"], ["replay"], ["verify"], ["stats"],
    ["what-if"], ["report"], ["projections"], ["projections", "run"],
]


def test_cli_help_works_for_the_top_level_and_every_command(tmp_path: Path) -> None:
    """--help exits 0 with a usage line for turnledger and each of its commands."""
    for command in COMMANDS:
        result = _turnledger(tmp_path, *command, "--help")

        assert 0 == result.returncode, describe(result)
        assert result.stdout.startswith(f"usage: {' '.join(['turnledger', *command])}"), (
            result.stdout
        )
    assert not (tmp_path / "turnledger.db").exists()  # help opens no store


def test_e11_import_of_a_missing_file_is_a_one_line_usage_error(sqlite_cli: Cli) -> None:
    """import of a file that does not exist exits 2 naming it; no session is created."""
    missing = sqlite_cli.cwd / "nope.jsonl"

    result = sqlite_cli.run("import", missing, "--format", "openai")

    _assert_usage_error(result, one_line=True)
    assert str(missing) in result.stderr
    listed = sqlite_cli.run("sessions", "--json")  # nothing stored: no store was created
    assert (2, "turnledger: error: no store at") == (listed.returncode, listed.stderr[:30])


def test_cli_bad_format_is_a_usage_error(sqlite_cli: Cli) -> None:
    """--format outside openai|anthropic exits 2, for import and for export."""
    imported = sqlite_cli.run("import", TRANSCRIPTS / "openai.jsonl", "--format", "xml")
    exported = sqlite_cli.run("export", "00000000-0000-0000-0000-000000000001", "--format", "xml")

    for result in (imported, exported):
        _assert_usage_error(result, one_line=False)
        assert "--format" in result.stderr.splitlines()[-1]
    listed = sqlite_cli.run("sessions", "--json")  # nothing stored: no store was created
    assert (2, "turnledger: error: no store at") == (listed.returncode, listed.stderr[:30])


@pytest.mark.parametrize(
    "option", [("--max-context-tokens", "-1"), ("--context-compact-ratio", "half"),
               ("--max-history-messages", "many")],
)
def test_cli_what_if_bad_numbers_are_usage_errors(tmp_path: Path, option: tuple[str, str]) -> None:
    """what-if with a negative or non-numeric option exits 2 naming the option."""
    session_id = "00000000-0000-0000-0000-000000000001"
    result = _turnledger(tmp_path, "--store", f"sqlite:///{tmp_path / 's.db'}", "what-if",
                         session_id, *option)

    _assert_usage_error(result, one_line=False)
    assert option[0] in result.stderr.splitlines()[-1]
