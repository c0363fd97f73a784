"""``turnledger import`` / ``export`` / ``sessions`` (E1, E11, R29, R31-R32).

The fixture transcripts hold one malformed line each: line 5 of ``openai.jsonl`` (a tool call
without a function name) and line 4 of ``anthropic.jsonl`` (truncated JSON). Message counts are
of conversation messages (one `MessageAppended` each): tool results answering one assistant
message are one `ToolResults`, and OpenAI's ``developer`` role is a system message.

Issue 21 points 3-4: export gives the record (``--view chat`` what the model sees), and import
is one a person can trust with a big file: a line already imported is skipped, each line is read
in its own format, and the import streams, saying each line as it commits (that test feeds a
pipe to a subprocess and interrupts it). Issue 36 point 3 (the section at the end): an export
in another format is what that provider's types accept.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conversation_fixtures import public
from tests.extras import need
from tests.provider_types import problems

from .conftest import REPO, TRANSCRIPTS, Cli, clean_env, describe, imported_ids, write_jsonl

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


# --- issue 21 points 3-4: export gives the record, import streams and skips what it has -----

PENDING = [
    {"role": "user", "content": "List the files"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
]
ANTHROPIC = {"system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = [{"role": "user", "content": "hi"},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "ok"}]


def test_i21_p3_export_gives_the_record_and_view_chat_what_the_model_sees(
    cli: Cli, tmp_path: Path
) -> None:
    """A conversation that ends on a tool call still waiting comes back whole from export;
    --view chat gives the model's view, where the unanswered call is swept (R36)."""
    (session,) = imported_ids(cli.ok("import", write_jsonl(tmp_path / "p.jsonl", PENDING)))
    assert PENDING == json.loads(cli.ok("export", session, "--format", "openai"))
    chat = json.loads(cli.ok("export", session, "--format", "openai", "--view", "chat"))
    assert PENDING[:1] == chat


def test_i21_p3_export_to_another_format_leaves_out_what_it_cannot_carry_and_says(
    sqlite_cli: Cli, tmp_path: Path
) -> None:
    """An Anthropic web-search session exported as OpenAI Chat: no thinking, server-tool
    block or signature in the line, each one left out named on stderr."""
    (raw,) = [r for name, _, r in public() if name == "anthropic_web_search"]
    (session,) = imported_ids(sqlite_cli.ok("import", write_jsonl(tmp_path / "a.jsonl", raw)))
    result = sqlite_cli.run("export", session, "--format", "openai")
    assert 0 == result.returncode, describe(result)
    assert "signature" not in result.stdout
    assert "server_tool_use" not in result.stdout
    warnings = result.stderr.splitlines()
    assert warnings
    assert all(w.startswith("turnledger: warning: message ") for w in warnings)
    assert any("thinking block left out" in w for w in warnings)


def test_i21_p4_a_line_already_imported_is_skipped_and_again_imports_it(
    cli: Cli, tmp_path: Path
) -> None:
    """Importing a file twice skips each line the second time, saying so (exit 0); --again
    imports it anyway as a new session."""
    path = write_jsonl(tmp_path / "t.jsonl", PENDING, ANTHROPIC)
    first = imported_ids(cli.ok("import", path))
    second = cli.run("import", path)
    assert 0 == second.returncode, describe(second)
    assert first == imported_ids(second.stdout)
    assert 2 == second.stdout.count("already imported, skipped (--again imports it anyway)")
    again = imported_ids(cli.ok("import", path, "--again"))
    assert set() == set(again) & set(first)
    assert 4 == len(cli.json("sessions", "--json"))


def test_i21_p4_auto_reads_each_line_in_its_own_format(cli: Cli, tmp_path: Path) -> None:
    """--format auto (the default) reads an OpenAI, an Anthropic and a Responses line each in
    its format, says which, and each exports back equal in it."""
    path = write_jsonl(tmp_path / "mixed.jsonl", PENDING, ANTHROPIC, RESPONSES)
    result = cli.run("import", path)
    assert 0 == result.returncode, describe(result)
    formats = ["openai", "anthropic", "responses"]
    assert [f"(read as {f})" for f in formats] == [
        line[line.index("(read as"):] for line in result.stdout.splitlines()]
    for session, fmt, line in zip(imported_ids(result.stdout), formats,
                                  [PENDING, ANTHROPIC, RESPONSES], strict=True):
        assert line == json.loads(cli.ok("export", session, "--format", fmt))


def test_i21_p4_a_line_in_another_format_than_named_is_refused_with_its_number(
    cli: Cli, tmp_path: Path
) -> None:
    """The issue's case: an Anthropic line with a system key under --format openai is refused
    (line number, what gave it away), not imported without its system prompt."""
    path = write_jsonl(tmp_path / "a.jsonl", PENDING, ANTHROPIC)
    result = cli.run("import", path, "--format", "openai")
    assert 2 == result.returncode, describe(result)
    assert [f"turnledger: rejected {path}:line 2: not the openai format: it has a top-level "
            "system key, which is the anthropic format (use --format anthropic, or --format "
            "auto)"] == result.stderr.splitlines()
    assert 1 == len(cli.json("sessions", "--json"))


def test_i21_p4_an_empty_conversation_and_a_bare_request_object(
    sqlite_cli: Cli, tmp_path: Path
) -> None:
    """An empty conversation is refused; a request object with nothing beside its messages
    gets no empty warning, one with a model gets a warning naming it."""
    path = write_jsonl(tmp_path / "e.jsonl", [], {"messages": PENDING},
                  {"model": "gpt-4o", "messages": PENDING[:1]})
    result = sqlite_cli.run("import", path, "--format", "openai")
    assert 2 == result.returncode, describe(result)
    assert [f"turnledger: rejected {path}:line 1: an empty conversation: there is no message "
            "to record",
            "turnledger: warning: line 3: not recorded (request fields, not messages): model",
            ] == sorted(result.stderr.splitlines(), key=lambda s: "warning" in s)
    assert 2 == len(imported_ids(result.stdout))


def test_i21_p4_import_streams_and_says_each_line_as_it_commits(
    sqlite_cli: Cli, tmp_path: Path
) -> None:
    """Read from a pipe: the first line's session id is printed, and stored, before the
    second line is written; interrupted then, the import has said what landed."""
    fifo = tmp_path / "lines.fifo"
    os.mkfifo(fifo)
    command = subprocess.Popen(
        sqlite_cli.argv("import", fifo, "--format", "openai"), cwd=sqlite_cli.cwd,
        env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        with fifo.open("w", encoding="utf-8") as writer:
            writer.write(json.dumps(PENDING) + "\n")
            writer.flush()
            ready, _, _ = select.select([command.stdout], [], [], 60)  # a guard, not a limit
            assert ready, "import printed nothing for a committed line"
            assert command.stdout is not None
            (printed,) = imported_ids(command.stdout.readline())
            listed = [row["session_id"] for row in sqlite_cli.json("sessions", "--json")]
            assert [printed] == listed
            command.send_signal(signal.SIGINT)
        command.wait(60)
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
    assert [printed] == [row["session_id"] for row in sqlite_cli.json("sessions", "--json")]


# --- issue 36 point 3: ``export`` in another format writes what that provider's types accept
# (the request bodies' writer), the record and ``--view chat`` alike; in the record's own
# format it gives the recording back.

RECORDING = REPO / "tests" / "fixtures" / "public" / "anthropic_mid_system.json"


@pytest.mark.parametrize("view", [[], ["--view", "chat"]])
def test_i36_p3_an_anthropic_recording_exported_as_responses_is_accepted(
    cli: Cli, tmp_path: Path, view: list[str]
) -> None:
    """Its assistant text was written as output_text parts with no item id, which every
    member of the SDK's input item union refuses; now as the Responses body writes it."""
    need("openai")
    recorded = json.loads(RECORDING.read_text(encoding="utf-8"))
    [session] = imported_ids(cli.ok("import", write_jsonl(tmp_path / "a.jsonl", recorded)))
    result = cli.run("export", session, "--format", "responses", *view)

    assert 0 == result.returncode, describe(result)
    assert [] == problems("openai_responses", json.loads(result.stdout))
    assert recorded == json.loads(cli.ok("export", session, "--format", "anthropic", *view))
