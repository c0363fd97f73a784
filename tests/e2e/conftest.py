"""End-to-end fixtures: the ``turnledger`` command on a temporary store, run through the CLI's
own ``main`` in this process, or as a subprocess where the process is what a test proves.

`Cli.run` calls `turnledger.cli.main` in this process (`run_main`): in the test's own temporary
directory, with ``TURNLEDGER_STORE`` removed from the environment so a developer's setting cannot
leak in, stdin empty, stdout and stderr captured, the exit code returned as a subprocess's would
be (a usage error's ``SystemExit``; an escaped exception's traceback on stderr and exit 1, as the
interpreter prints them). Nothing the command changes outlives the call: the working directory,
the environment, ``sys.stdin``/``stdout``/``stderr`` and the logging handler that stands in for
logging's last resort (a child prints its warnings to stderr) are put back.

`Cli.spawn` runs ``[sys.executable, "-m", "turnledger", "--store", URL, ...]`` as a subprocess
with a timeout (`run_command`). Tests use it where a process proves something more: the exit
code of the real entry point, signals and kills, file modes and users, stdout's encoding, the
environment the command reads, the README's demo as a person runs it, other processes holding
the store.

``store`` is parametrized over the backends several processes can open
(``tests.backends.SHARED_BACKENDS``: a SQLite file under ``tmp_path``, a fresh PostgreSQL schema),
made by `tests.backends.fresh_target` — the same databases, and the same PostgreSQL rule, as
the integration tests. ``Target.query`` reaches the rows behind the CLI's back (analytics tables,
tampering).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.backends import SHARED_BACKENDS, Target, fresh_target
from turnledger.cli import main

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


@contextlib.contextmanager
def _as_a_child(cwd: Path, env: Mapping[str, str], err: io.StringIO) -> Iterator[None]:
    """What a child process of `run_command` would have, for the length of one call: ``cwd``,
    the environment without TURNLEDGER_STORE (plus ``env``), an empty stdin, warnings logged
    to ``err``. Everything is put back after, whatever the command did; a module the command
    imported from ``cwd`` (``--summarizer``) is forgotten, as a child's would be."""
    environ, path, modules = dict(os.environ), list(sys.path), set(sys.modules)
    stdin = sys.stdin
    # A child has no logging handler: logging's last resort prints WARNING and above, bare, on
    # stderr. Here pytest's handlers sit on the root logger, so this one prints them instead.
    handler = logging.StreamHandler(err)
    handler.setLevel(logging.WARNING)
    root = logging.getLogger()
    os.environ.pop("TURNLEDGER_STORE", None)
    # A child writes to a pipe: argparse wraps its help at 80 columns, not at this terminal's.
    os.environ.setdefault("COLUMNS", "80")
    os.environ.update(env)
    sys.stdin = io.StringIO("")
    root.addHandler(handler)
    try:
        with contextlib.chdir(cwd):
            yield
    finally:
        root.removeHandler(handler)
        sys.stdin = stdin
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            found = getattr(sys.modules[name], "__file__", None)
            if found is not None and Path(found).resolve().is_relative_to(cwd.resolve()):
                del sys.modules[name]
        if dict(os.environ) != environ:
            os.environ.clear()
            os.environ.update(environ)


def run_main(
    args: Sequence[str | os.PathLike[str]], *, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``turnledger ARGS`` run by `turnledger.cli.main` in this process, as `run_command` would
    run it in a child (see the module's docstring), with ``env`` added to the environment;
    never raises for its exit code."""
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with (_as_a_child(cwd, env or {}, err), contextlib.redirect_stdout(out),
          contextlib.redirect_stderr(err)):
        try:
            code = main(argv, out=out)
        except SystemExit as done:  # argparse: --help, --version (0), bad usage (2)
            if done.code is None or isinstance(done.code, int):
                code = done.code or 0
            else:
                print(done.code, file=err)
                code = 1
        except Exception:  # what the interpreter does with it: a traceback, exit 1
            traceback.print_exc(file=err)
            code = 1
    return subprocess.CompletedProcess(["turnledger", *argv], code, out.getvalue(),
                                       err.getvalue())


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

def write_jsonl(path: Path, *lines: object) -> Path:
    """Write one JSON value per line to ``path``; return it."""
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def imported_ids(stdout: str) -> list[str]:
    """The session ids `import` printed: the first field of each line (id, tab, summary)."""
    return [line.split("\t")[0] for line in stdout.splitlines()]


class Cli:
    """``turnledger --store URL ...`` on one store, in one working directory: run in this
    process (`run`, and the helpers built on it) or as a subprocess (`spawn`)."""

    def __init__(self, target: Target, cwd: Path) -> None:
        self.target = target
        self.cwd = cwd

    def args(self, *args: str | os.PathLike[str], store: bool = True) -> list[str]:
        """The command's arguments (with ``--store URL`` first unless ``store=False``)."""
        prefix = ["--store", self.target.url] if store else []
        return [*prefix, *(str(a) for a in args)]

    def argv(self, *args: str | os.PathLike[str], store: bool = True) -> list[str]:
        """The full command line of a subprocess: ``python -m turnledger`` and `args`."""
        return [sys.executable, "-m", "turnledger", *self.args(*args, store=store)]

    def run(
        self, *args: str | os.PathLike[str], store: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run one command in this process (`run_main`); never raises for its exit code."""
        return run_main(self.args(*args, store=store), cwd=self.cwd)

    def spawn(
        self, *args: str | os.PathLike[str], store: bool = True, timeout: float = CLI_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """Run one command as a subprocess; never raises for its exit code."""
        return run_command(self.argv(*args, store=store), cwd=self.cwd, timeout=timeout)

    def ok(self, *args: str | os.PathLike[str], spawn: bool = False) -> str:
        """Run one command (as a subprocess if ``spawn``) that must exit 0; return its stdout."""
        result = self.spawn(*args) if spawn else self.run(*args)
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
