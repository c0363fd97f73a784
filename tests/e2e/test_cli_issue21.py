"""Issue 21 points 3-5 at the command line: export gives the record, import a person can trust
with a big file, read commands that never create a store, unique id prefixes everywhere."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
from pathlib import Path

from tests.conversation_fixtures import public

from .conftest import Cli, clean_env, describe, imported_ids

PENDING = [
    {"role": "user", "content": "List the files"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
]
ANTHROPIC = {"system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = [{"role": "user", "content": "hi"},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "ok"}]


def _write(path: Path, *lines: object) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_i21_p3_export_gives_the_record_and_view_chat_what_the_model_sees(
    cli: Cli, tmp_path: Path
) -> None:
    """A conversation that ends on a tool call still waiting comes back whole from export;
    --view chat gives the model's view, where the unanswered call is swept (R36)."""
    (session,) = imported_ids(cli.ok("import", _write(tmp_path / "p.jsonl", PENDING)))
    assert PENDING == json.loads(cli.ok("export", session, "--format", "openai"))
    chat = json.loads(cli.ok("export", session, "--format", "openai", "--view", "chat"))
    assert PENDING[:1] == chat


def test_i21_p3_export_to_another_format_leaves_out_what_it_cannot_carry_and_says(
    sqlite_cli: Cli, tmp_path: Path
) -> None:
    """An Anthropic web-search session exported as OpenAI Chat: no thinking, server-tool
    block or signature in the line, each one left out named on stderr."""
    (raw,) = [r for name, _, r in public() if name == "anthropic_web_search"]
    (session,) = imported_ids(sqlite_cli.ok("import", _write(tmp_path / "a.jsonl", raw)))
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
    path = _write(tmp_path / "t.jsonl", PENDING, ANTHROPIC)
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
    path = _write(tmp_path / "mixed.jsonl", PENDING, ANTHROPIC, RESPONSES)
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
    path = _write(tmp_path / "a.jsonl", PENDING, ANTHROPIC)
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
    path = _write(tmp_path / "e.jsonl", [], {"messages": PENDING},
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


def test_i21_p5_read_commands_never_create_a_store(sqlite_cli: Cli, tmp_path: Path) -> None:
    """sessions, stats, export and replay on a mistyped path exit 2 naming it and create
    neither the file nor its directory."""
    missing = tmp_path / "typo" / "nope.db"
    url = f"sqlite:///{missing}"
    some_id = "00000000-0000-4000-8000-000000000001"
    for args in (["sessions"], ["stats"], ["export", some_id, "--format", "openai"],
                 ["replay", some_id]):
        result = sqlite_cli.run("--store", url, *args, store=False)
        assert 2 == result.returncode, describe(result)
        assert f"turnledger: error: no store at {missing}" in result.stderr
    assert not missing.parent.exists()


def test_i21_p5_a_unique_prefix_works_wherever_an_id_does(sqlite_cli: Cli, tmp_path: Path) -> None:
    """The 8 characters stats prints are accepted by export, replay, what-if, report and
    verify; a prefix that fits no session or several is a usage error saying so."""
    lines = [[{"role": "user", "content": f"question {n}"}] for n in range(17)]
    ids = imported_ids(sqlite_cli.ok("import", _write(tmp_path / "many.jsonl", *lines)))
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

