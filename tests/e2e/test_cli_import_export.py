"""``turnledger import`` / ``export`` / ``sessions`` as a subprocess (E1, E11, R29, R31-R32).

The fixture transcripts hold one malformed line each: line 5 of ``openai.jsonl`` (a tool call
without a function name) and line 4 of ``anthropic.jsonl`` (truncated JSON). Message counts are
of conversation messages (one `MessageAppended` each): tool results answering one assistant
message are one `ToolResults`, and OpenAI's ``developer`` role is a system message.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from .conftest import TRANSCRIPTS, Cli, describe, imported_ids

# Conversation messages per good line, in file order (see the module docstring).
EXPECTED_MESSAGES = {"openai": [3, 7, 2, 5, 2], "anthropic": [3, 8, 2, 5]}
BAD_LINE = {"openai": 5, "anthropic": 4}


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_e11_import_prints_one_id_per_good_line_and_rejects_the_bad_line(
    cli: Cli, fmt: str
) -> None:
    """import prints one session id per good line, names the bad line on stderr, exits 2
    (a rejected line is bad input, DECISIONS 10)."""
    path = TRANSCRIPTS / f"{fmt}.jsonl"
    result = cli.run("import", path, "--format", fmt)

    assert 2 == result.returncode, describe(result)
    ids = imported_ids(result.stdout)
    assert len(EXPECTED_MESSAGES[fmt]) == len(ids)
    assert len(ids) == len({str(uuid.UUID(i)) for i in ids})  # distinct UUID texts
    errors = [e for e in result.stderr.splitlines() if "warning" not in e]
    assert 1 == len(errors), result.stderr
    assert errors[0].startswith(f"turnledger: rejected {path}:line {BAD_LINE[fmt]}: "), errors


def test_e11_import_json_lists_imported_ids_and_rejected_lines(cli: Cli) -> None:
    """import --json prints {"imported": [...], "skipped": [...], "rejected": [reasons]} and
    still exits 2."""
    result = cli.run("import", TRANSCRIPTS / "openai.jsonl", "--format", "openai", "--json")

    assert 2 == result.returncode, describe(result)
    payload = json.loads(result.stdout)
    assert ["imported", "rejected", "skipped"] == sorted(payload)
    assert 5 == len(payload["imported"])
    assert 1 == len(payload["rejected"])
    assert ":line 5: " in payload["rejected"][0]
    assert "function.name" in payload["rejected"][0]  # the offending field is named (E11)


def test_e1_imported_sessions_are_listed_with_their_message_counts(cli: Cli) -> None:
    """Every imported session appears in `sessions --json` with its conversation's messages."""
    expected: dict[str, int] = {}
    for fmt in ("openai", "anthropic"):
        expected.update(zip(cli.import_fixture(fmt), EXPECTED_MESSAGES[fmt], strict=True))

    rows = cli.json("sessions", "--json")

    assert expected == {row["session_id"]: row["messages"] for row in rows}
    assert all(row["trims"] == 0 and row["corrupt_at"] is None for row in rows)
    listed = cli.ok("sessions")
    assert all(session_id in listed for session_id in expected)


def _assert_round_trip(cli: Cli, fmt: str, folder: Path) -> None:
    originals = cli.import_fixture(fmt)
    lines = [cli.ok("export", session_id, "--format", fmt) for session_id in originals]
    for line in lines:
        assert 1 == len(line.splitlines()), line
        assert isinstance(json.loads(line), list if fmt == "openai" else dict)
    exported = folder / f"exported-{fmt}.jsonl"
    exported.write_text("".join(lines), encoding="utf-8")

    result = cli.run("import", exported, "--format", fmt)
    assert 0 == result.returncode, describe(result)
    copies = imported_ids(result.stdout)

    assert len(originals) == len(copies)
    # The richest conversation (tool calls, batched results) compared view to view...
    assert cli.chat_view(originals[1]) == cli.chat_view(copies[1])
    # ...and every copy exports to the very same line (same format: lossless, same bytes).
    assert lines == [cli.ok("export", copy, "--format", fmt) for copy in copies]


def test_export_openai_then_import_round_trips_the_chat_view(cli: Cli, tmp_path: Path) -> None:
    """`export SESSION --format openai` is one JSONL line that re-imports to the same view."""
    _assert_round_trip(cli, "openai", tmp_path)


def test_export_anthropic_then_import_round_trips_the_chat_view(
    sqlite_cli: Cli, tmp_path: Path
) -> None:
    """`export SESSION --format anthropic` is one JSONL line that re-imports to the same view."""
    _assert_round_trip(sqlite_cli, "anthropic", tmp_path)


PROFILE = """\
max_context_tokens = 0        # no proactive token trimming: only the turn limit acts
max_history_messages = 1      # one complete user turn kept (R28-R29)

[providers.openai]
model = "gpt-4o"
context_window = 128000

[route]
provider = "openai"
model = "gpt-4o"
"""

THREE_TURNS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "first question"},
    {"role": "assistant", "content": "first answer"},
    {"role": "user", "content": "second question"},
    {"role": "assistant", "content": "second answer"},
    {"role": "user", "content": "third question"},
    {"role": "assistant", "content": "third answer"},
]


def test_r29_import_profile_turn_limit_trims_visible_in_replay(cli: Cli, tmp_path: Path) -> None:
    """import --profile --as-live applies the profile as a live runtime would: a 1-turn limit
    trims on append, seen in replay (without --as-live the profile waits for a request)."""
    transcript = tmp_path / "three-turns.jsonl"
    transcript.write_text(json.dumps(THREE_TURNS) + "\n", encoding="utf-8")
    profile = tmp_path / "one-turn.toml"
    profile.write_text(PROFILE, encoding="utf-8")

    (plain,) = imported_ids(cli.ok("import", transcript, "--format", "openai"))
    (limited,) = imported_ids(
        cli.ok("import", transcript, "--format", "openai", "--profile", profile, "--as-live")
    )

    plain_timeline = cli.json("replay", plain, "--json")
    limited_timeline = cli.json("replay", limited, "--json")
    limited_types = [entry["type"] for entry in limited_timeline]

    assert "TrimDecided" not in [entry["type"] for entry in plain_timeline]
    # Turns 2 and 3 each push the oldest turn out: two trims, each announced (R31-R32).
    assert 2 == limited_types.count("TrimDecided")
    assert 2 == limited_types.count("BreadcrumbInserted")
    trimmed = [e["data"]["reason"] for e in limited_timeline if e["type"] == "HistoryTrimmed"]
    assert ["turn_limit", "turn_limit"] == trimmed
    expected_view = [
        ("system", "Be brief.", False),
        ("user", "[earlier turns omitted to fit the context window]", True),
        ("user", "third question", False),
        ("assistant", "third answer", False),
    ]
    actual_view = [(m["role"], m["content"], m["synthetic"]) for m in cli.chat_view(limited)]
    assert expected_view == actual_view
    rows = {row["session_id"]: row for row in cli.json("sessions", "--json")}
    assert "openai/gpt-4o" == rows[limited]["route"]  # the profile's [route] applies too
    assert "openai/gpt-4o" != rows[plain]["route"]


def test_e11_import_with_an_invalid_profile_is_a_usage_error(
    sqlite_cli: Cli, tmp_path: Path
) -> None:
    """A profile with an unknown key: exit 2, one stderr line naming the key, nothing imported."""
    profile = tmp_path / "bad.toml"
    profile.write_text("max_history_turns = 3\n", encoding="utf-8")

    result = sqlite_cli.run("import", TRANSCRIPTS / "openai.jsonl", "--format", "openai",
                     "--profile", profile)

    assert 2 == result.returncode, describe(result)
    assert 1 == len(result.stderr.splitlines()), result.stderr
    assert "max_history_turns" in result.stderr
    assert "" == result.stdout
    listed = sqlite_cli.run("sessions", "--json")  # nothing stored: no store was created
    assert (2, "turnledger: error: no store at") == (listed.returncode, listed.stderr[:30])
