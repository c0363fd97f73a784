"""Every command documents itself, and a session that does not exist is bad input (exit 2).

The commands are discovered from the parser, so a new subcommand, option or positional without a
description or help fails here. The help texts are then checked in the real ``--help`` output of
``python -m turnledger`` (with a wide ``COLUMNS`` so argparse does not wrap them).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnledger.cli import build_parser
from turnledger.store.session import open_store

from .conftest import Cli, clean_env, describe, run_command

Command = tuple[tuple[str, ...], argparse.ArgumentParser]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    # argparse has no public accessor for its subparsers; its actions list is the only way.
    actions = parser._actions  # noqa: SLF001
    found: dict[str, argparse.ArgumentParser] = {}
    for action in actions:
        if isinstance(action.choices, dict):
            found.update(action.choices)
    return found


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Command]:
    yield path, parser
    for name, child in _subcommands(parser).items():
        yield from _walk(child, (*path, name))


COMMANDS = list(_walk(build_parser()))


def _documented_actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The options and positionals a user types (not -h, not the subcommand selector)."""
    for action in parser._actions:  # noqa: SLF001  (see _subcommands)
        if "--help" in action.option_strings or isinstance(action.choices, dict):
            continue
        yield action


def _name(action: argparse.Action) -> str:
    return "/".join(action.option_strings) or action.dest


def _help(path: tuple[str, ...], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = clean_env() | {"COLUMNS": "1000"}
    return run_command([sys.executable, "-m", "turnledger", *path, "--help"], cwd=tmp_path,
                       env=env)


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_e11_commands_are_discovered_from_the_parser() -> None:
    """The walk finds the top level, every subcommand and `projections run`."""
    expected = [(), ("demo",), ("import",), ("export",), ("sessions",), ("replay",), ("verify",),
                ("what-if",), ("report",), ("stats",), ("projections",), ("projections", "run"),
                ("keygen",), ("forget",), ("purge",), ("rekey",), ("anchor",), ("rechain",)]
    assert sorted(expected) == sorted(path for path, _ in COMMANDS)


def test_e11_every_command_has_a_description_and_every_argument_a_help() -> None:
    """No command without a description, no option or positional without a help string."""
    missing = [" ".join(("turnledger", *path)) + ": description"
               for path, parser in COMMANDS if not (parser.description or "").strip()]
    missing += [
        f"{' '.join(('turnledger', *path))} {_name(action)}: help"
        for path, parser in COMMANDS for action in _documented_actions(parser)
        if not action.help or action.help == argparse.SUPPRESS
    ]
    assert [] == missing


@pytest.mark.parametrize(
    "command", COMMANDS, ids=[" ".join(p) or "turnledger" for p, _ in COMMANDS]
)
def test_e11_help_shows_the_description_and_each_argument_help(
    command: Command, tmp_path: Path
) -> None:
    """`--help` exits 0 and prints the description, every argument with its help, and each
    subcommand with its one-line help."""
    path, parser = command
    result = _help(path, tmp_path)

    assert 0 == result.returncode, describe(result)
    shown = _flat(result.stdout)
    assert _flat(parser.description or "") in shown
    for action in _documented_actions(parser):
        assert _flat(action.help or "") in shown, _name(action)
        assert (action.option_strings[-1] if action.option_strings else action.dest) in shown
    listed = [line.split() for line in result.stdout.splitlines()]
    for name in _subcommands(parser):
        assert any(len(words) > 1 and name == words[0] for words in listed), name


SESSION_COMMANDS = [
    (path, parser) for path, parser in COMMANDS
    if any(action.dest == "session" for action in _documented_actions(parser))
]


def _arguments_for(path: tuple[str, ...], parser: argparse.ArgumentParser,
                   session_id: str) -> list[str]:
    """``path SESSION`` plus every required option: its first choice (``--format openai``), or
    a file name in the test's directory (``--output out.txt``)."""
    args = [*path, session_id]
    for action in _documented_actions(parser):
        if action.required and action.option_strings:
            value = str(next(iter(action.choices))) if action.choices else "out.txt"
            args += [action.option_strings[-1], value]
    return args


@pytest.mark.parametrize(
    "command", SESSION_COMMANDS, ids=[" ".join(p) for p, _ in SESSION_COMMANDS]
)
def test_e11_a_session_the_store_does_not_hold_is_bad_input(
    command: Command, sqlite_cli: Cli
) -> None:
    """export, replay, verify, what-if, report and forget of an unknown session id exit 2 with
    one line naming it and print nothing on stdout."""
    path, parser = command
    missing = str(uuid.UUID(int=7))
    open_store(sqlite_cli.target.url).close()  # the store exists (no read command creates one)

    result = sqlite_cli.run(*_arguments_for(path, parser, missing))

    assert 2 == result.returncode, describe(result)
    assert "" == result.stdout
    assert 1 == len(result.stderr.splitlines()), result.stderr
    assert missing in result.stderr


def test_e11_session_commands_are_the_six_that_take_a_session() -> None:
    """The bad-input test above covers every command that takes a session id."""
    expected = [("export",), ("replay",), ("verify",), ("what-if",), ("report",), ("forget",)]
    assert expected == [p for p, _ in SESSION_COMMANDS]
