"""Every command documents itself, a session that does not exist is bad input (exit 2), and a
unique prefix of a session id works wherever an id does (issue 21 point 5).

The commands are discovered from the parser, so a new subcommand, option or positional without a
description or help fails here. The help texts are then checked in the real ``--help`` output of
the CLI's ``main`` (with a wide ``COLUMNS`` so argparse does not wrap them).
"""

from __future__ import annotations

import argparse
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnledger.cli import build_parser
from turnledger.store.session import open_store

from .conftest import Cli, describe, imported_ids, run_main, write_jsonl

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
    return run_main([*path, "--help"], cwd=tmp_path, env={"COLUMNS": "1000"})


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_e11_commands_are_discovered_from_the_parser() -> None:
    """The walk finds the top level, every subcommand, `projections run` and `keys`'s."""
    expected = [(), ("demo",), ("import",), ("export",), ("sessions",), ("replay",), ("verify",),
                ("what-if",), ("report",), ("stats",), ("projections",), ("projections", "run"),
                ("keygen",), ("forget",), ("purge",), ("rekey",), ("anchor",), ("rechain",),
                ("serve",), ("keys",), ("keys", "create"), ("keys", "revoke"), ("keys", "list")]
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


def test_i21_p5_a_unique_prefix_works_wherever_an_id_does(sqlite_cli: Cli, tmp_path: Path) -> None:
    """The 8 characters stats prints are accepted by export, replay, what-if, report and
    verify; a prefix that fits no session or several is a usage error saying so."""
    lines = [[{"role": "user", "content": f"question {n}"}] for n in range(17)]
    ids = imported_ids(sqlite_cli.ok("import", write_jsonl(tmp_path / "many.jsonl", *lines)))
    stats = sqlite_cli.ok("stats")
    short = ids[0][:8]
    assert short in stats
    exported = sqlite_cli.ok("export", short, "--format", "openai")
    assert exported == sqlite_cli.ok("export", ids[0], "--format", "openai")
    for args in (["replay", short], ["what-if", short, "--max-history-messages", "1"],
                 ["report", short, "-o", str(tmp_path / "r.html")], ["verify", short]):
        result = sqlite_cli.run(*args)
        assert 0 == result.returncode, describe(result)
    unknown = sqlite_cli.run("export", "fffffffffff0", "--format", "openai")
    assert (2, "turnledger: error: no session id starts with 'fffffffffff0' (see `turnledger "
            "sessions`)\n") == (unknown.returncode, unknown.stderr)
    first_chars = [i[0] for i in ids]  # 17 ids, 16 hex digits: two share their first one
    shared = next(c for c in first_chars if first_chars.count(c) > 1)
    ambiguous = sqlite_cli.run("replay", shared)
    assert 2 == ambiguous.returncode, describe(ambiguous)
    assert f"session {shared!r} is ambiguous" in ambiguous.stderr
