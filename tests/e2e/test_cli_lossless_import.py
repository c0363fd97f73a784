"""Issue 8, point 5: ``import`` records what the file says and ``export`` gives it back.

The fixture conversations of ``tests/fixtures/conversations`` hold every block type of each
provider format; each is imported, exported and compared, JSON-equal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import REPO, Cli, describe, imported_ids

CONVERSATIONS = REPO / "tests" / "fixtures" / "conversations"


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "responses"])
def test_e11_import_then_export_gives_every_fixture_conversation_back(cli: Cli, fmt: str) -> None:
    """in -> import -> export -> equal, for every fixture conversation of the format."""
    path = CONVERSATIONS / f"{fmt}.jsonl"
    originals = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    result = cli.run("import", path, "--format", fmt)
    assert 0 == result.returncode, describe(result)
    assert "" == result.stderr  # nothing changed, so no warning
    ids = imported_ids(result.stdout)
    exported = [json.loads(cli.ok("export", i, "--format", fmt)) for i in ids]
    assert originals == exported


def test_e11_import_is_lossless_by_default_and_as_live_on_request(cli: Cli, tmp_path: Path) -> None:
    """A 60,000-character tool result and 60 turns are kept whole; --as-live truncates and trims,
    with a warning for each change."""
    messages: list[dict[str, object]] = []
    for turn in range(60):
        messages += [{"role": "user", "content": f"q{turn}"}, {"role": "assistant", "content": "a"}]
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "cat", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "x" * 60_000},
    ]
    transcript = tmp_path / "long.jsonl"
    transcript.write_text(json.dumps(messages) + "\n", encoding="utf-8")

    result = cli.run("import", transcript, "--format", "openai")
    assert 0 == result.returncode, describe(result)
    (session,) = imported_ids(result.stdout)
    assert f"{session}\tline 1: 122 messages, 60 turns\n" == result.stdout
    assert messages == json.loads(cli.ok("export", session, "--format", "openai"))

    live = cli.run("import", transcript, "--format", "openai", "--as-live")
    assert 0 == live.returncode, describe(live)
    warnings = live.stderr.splitlines()
    assert [
        "turnledger: warning: line 1: message 121: a tool result of 60,000 characters was "
        "truncated (R38)",
        "turnledger: warning: line 1: 10 turn_limit trims of the conversation view dropped 10 "
        "turns (20 messages)",
    ] == warnings


def test_e11_a_rejected_line_is_atomic_and_exit_2(cli: Cli, tmp_path: Path) -> None:
    """A lone surrogate rejects its line (number and reason), stores nothing of it, and the
    other lines are imported (a repeated line is the same conversation: skipped, issue 21);
    exit 2 (bad input, DECISIONS 10)."""
    good = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    bad = [{"role": "user", "content": "fine"}, {"role": "assistant", "content": "\ud800"}]
    transcript = tmp_path / "mixed.jsonl"
    lines = [json.dumps(good), json.dumps(bad), "{not json", json.dumps(good)]
    transcript.write_text("\n".join(lines) + "\n", encoding="utf-8")

    result = cli.run("import", transcript, "--format", "openai")

    assert 2 == result.returncode, describe(result)
    rejected = result.stderr.splitlines()
    prefix = f"turnledger: rejected {transcript}:line "
    assert [f"{prefix}2: ", f"{prefix}3: "] == [r[: len(prefix) + 3] for r in rejected]
    assert "not valid Unicode" in rejected[0]
    assert "invalid JSON" in rejected[1]
    ids = imported_ids(result.stdout)
    assert [ids[0], ids[0]] == ids
    assert "line 4: already imported, skipped" in result.stdout.splitlines()[1]
    assert ids[:1] == [row["session_id"] for row in cli.json("sessions", "--json")]


def test_e6_what_if_on_an_imported_session_says_it_simulated_the_calls(cli: Cli) -> None:
    """An imported session recorded no request: what-if simulates one per assistant message."""
    result = cli.run("import", CONVERSATIONS / "openai.jsonl", "--format", "openai")
    first = imported_ids(result.stdout)[0]  # one assistant step with calls, one answer
    report = cli.ok("what-if", first, "--max-history-messages", "1")
    assert (
        "no request was recorded in this session: a model call was simulated before each of "
        "its 2 assistant messages"
    ) in report
