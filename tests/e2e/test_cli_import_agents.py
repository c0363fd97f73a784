"""Issue 36 point 2: the records coding agents keep come in with ``import`` — a Claude Code
session file and a Codex CLI rollout, each a whole file whose sessions (a Claude Code
sub-agent's run included) are one session each, with what was not recorded said.

Issue 36 point 4 (the section at the end): a Codex session's custom tool calls, exported.

Fixtures and their sources: tests/fixtures/agents/README.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.extras import need
from tests.provider_types import problems

from .conftest import REPO, Cli, describe, imported_ids

AGENTS = REPO / "tests" / "fixtures" / "agents"
NOT_RECORDED_CLAUDE = ("not recorded: each record's uuids, timestamps, usage and working "
                       "directory")
COMPACTION = ("1 compaction: the summary the agent gave its model is recorded as a user "
              "message; the turns before it stay in the record")


@pytest.mark.parametrize("named", [[], ["--format", "claude-code"]])
def test_i36_p2_a_claude_code_file_is_its_session_and_its_sub_agent_run(
    cli: Cli, named: list[str]
) -> None:
    """Two sessions (the main one, the Task sub-agent's sidechain); the assistant message
    Claude Code wrote as two records is one message; the synthetic API error and the agent's
    bookkeeping are not recorded, and the import says so."""
    path = AGENTS / "claude_code_rich.jsonl"
    result = cli.run("import", path, *named)

    assert 0 == result.returncode, describe(result)
    main, sub = imported_ids(result.stdout)
    read_as = " (read as claude-code)" if not named else ""
    assert [f"{main}\tline 1: 7 messages, 2 turns{read_as}",
            f"{sub}\tline 7: 2 messages, 1 turn{read_as}"] == result.stdout.splitlines()
    assert [
        "turnledger: warning: line 1: not recorded (the agent's own records): "
        "file-history-snapshot records (1), summary records (1), synthetic error messages (1), "
        "system records (1)",
        f"turnledger: warning: line 1: {COMPACTION}",
        f"turnledger: warning: line 1: {NOT_RECORDED_CLAUDE}",
        f"turnledger: warning: line 7: {NOT_RECORDED_CLAUDE}",
    ] == result.stderr.splitlines()
    exported = json.loads(cli.ok("export", main, "--format", "anthropic"))
    assert {"messages": [
        {"role": "user", "content": "Rename the helper and run the tests."},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Find the helper first.", "signature": "c2lnMQ=="},
            {"type": "tool_use", "id": "toolu_01", "name": "Grep",
             "input": {"pattern": "def helper"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01",
                                      "content": "app/util.py:3:def helper():"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_02", "name": "Task", "input": {
                "description": "run tests", "prompt": "Run pytest and report failures.",
                "subagent_type": "general-purpose"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_02",
                                      "content": [{"type": "text", "text": "2 passed."}]}]},
        {"role": "user", "content": "This session is being continued from a previous "
         "conversation. Summary: the helper was found; tests pass."},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Renamed helper to make_helper; 2 tests pass."}]},
    ]} == exported
    assert {"messages": [
        {"role": "user", "content": "Run pytest and report failures."},
        {"role": "assistant", "content": [{"type": "text", "text": "2 passed."}]},
    ]} == json.loads(cli.ok("export", sub, "--format", "anthropic"))
    assert 0 == cli.run("verify", main).returncode


def test_i36_p2_a_file_imported_again_is_skipped(cli: Cli) -> None:
    """The same file is the same sessions: a second import skips them."""
    path = AGENTS / "claude_code_rich.jsonl"
    first = imported_ids(cli.ok("import", path))
    again = cli.run("import", path)

    assert 0 == again.returncode, describe(again)
    assert [f"{first[0]}\tline 1: already imported, skipped (--again imports it anyway)",
            f"{first[1]}\tline 7: already imported, skipped (--again imports it anyway)"] == (
        again.stdout.splitlines())


def test_i36_p2_a_codex_rollout_is_its_response_items(cli: Cli) -> None:
    """The instructions first, the response items as Responses items, the compaction summary
    as a user message; the agent's UI events, turn settings and undo snapshots not recorded,
    and said."""
    result = cli.run("import", AGENTS / "codex_rich.jsonl")

    assert 0 == result.returncode, describe(result)
    [session] = imported_ids(result.stdout)
    assert f"{session}\tline 1: 9 messages, 2 turns (read as codex)\n" == result.stdout
    assert [
        "turnledger: warning: line 1: not recorded (the agent's own records): event_msg "
        "records (1), ghost_snapshot items (1), turn_context records (1)",
        "turnledger: warning: line 1: the session's instructions are recorded as a system "
        "message first",
        f"turnledger: warning: line 1: {COMPACTION}",
        "turnledger: warning: line 1: not recorded: each record's timestamp",
    ] == result.stderr.splitlines()
    exported = json.loads(cli.ok("export", session, "--format", "responses"))
    assert [
        {"role": "system", "content": "Prefer small diffs."},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Fix the typo in README."}]},
        {"type": "reasoning", "summary": [{"type": "summary_text",
                                           "text": "Look at README first."}],
         "content": None, "encrypted_content": "gAAAAB-opaque"},
        {"type": "function_call", "name": "shell",
         "arguments": "{\"command\":[\"sed\",\"-n\",\"1,5p\",\"README.md\"]}",
         "call_id": "call_01"},
        {"type": "function_call_output", "call_id": "call_01", "output": "# Teh app"},
        *_payloads("custom_tool_call", "custom_tool_call_output"),
        {"type": "message", "role": "user", "content": [
            {"type": "input_text",
             "text": "The user asked to fix a README typo; line 1 reads 'Teh'."}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Fixed: 'Teh' is now 'The'."}]},
    ] == exported


def _payloads(*kinds: str) -> list[dict[str, object]]:
    """The response items of codex_rich.jsonl of these types, as the file holds them."""
    records = [json.loads(line) for line in (AGENTS / "codex_rich.jsonl").read_text(
        encoding="utf-8").splitlines()]
    return [r["payload"] for r in records
            if r["type"] == "response_item" and r["payload"]["type"] in kinds]


def test_i36_p2_the_public_claude_code_sample_imports_and_verifies(cli: Cli) -> None:
    """A public sample (Apache-2.0): 7 messages in 2 turns, its summary record said."""
    result = cli.run("import", AGENTS / "claude_code_sample.jsonl")

    assert 0 == result.returncode, describe(result)
    [session] = imported_ids(result.stdout)
    assert f"{session}\tline 1: 7 messages, 2 turns (read as claude-code)\n" == result.stdout
    assert 0 == cli.run("verify", session).returncode


def test_i36_p2_the_public_codex_sample_is_refused_naming_the_part_it_cannot_give_back(
    cli: Cli,
) -> None:
    """The sanitized public rollout's assistant parts (``reasoning``, ``text``) are no
    Responses parts: the session is refused, naming the first, and nothing is stored."""
    path = AGENTS / "codex_sample.jsonl"
    result = cli.run("import", path)

    assert (2, "") == (result.returncode, result.stdout), describe(result)
    assert (f"turnledger: rejected {path}:line 1: test-session: message 2 of the record: the "
            "responses format could give nothing of it back (its reasoning block: OpenAI "
            "Responses takes no such block in an assistant message (it came from another "
            "provider, or the target cannot replay it)); nothing of this line was stored\n"
            ) == result.stderr


@pytest.mark.parametrize("named", [[], ["--format", "gemini-cli"]])
def test_i36_p2_a_gemini_cli_session_document_is_one_session(
    cli: Cli, named: list[str]
) -> None:
    """One pretty-printed JSON document (the 579 "invalid JSON" lines of the issue): read
    whole, each gemini message a model content and its calls' results; the CLI's info message
    and thought summaries not recorded; the cancelled call recorded unanswered and swept from
    what the model would see."""
    result = cli.run("import", AGENTS / "gemini_cli_session.json", *named)

    assert 0 == result.returncode, describe(result)
    [session] = imported_ids(result.stdout)
    read_as = " (read as gemini-cli)" if not named else ""
    assert f"{session}\tline 1: 5 messages, 2 turns{read_as}\n" == result.stdout
    assert [
        "turnledger: warning: line 1: not recorded (the CLI's own): info messages (1), thought "
        "summaries (1)",
        "turnledger: warning: line 1: 1 call with no result (cancelled) recorded unanswered: "
        "the chat view sweeps it (R36)",
        "turnledger: warning: line 1: not recorded: each message's id, timestamp, token counts "
        "and model",
    ] == result.stderr.splitlines()
    listing = {"name": "list_directory", "id": "list_directory-1", "args": {"path": "."}}
    answer = {"function_response": {"name": "list_directory", "id": "list_directory-1",
                                    "response": {"output": "README.md\nsrc"}}}
    cancelled = {"name": "read_file", "id": "read_file-2",
                 "args": {"absolute_path": "/w/README.md"}}
    tail = [{"role": "user", "parts": [answer]},
            {"role": "user", "parts": [{"text": "Just summarize."}]},
            {"role": "model", "parts": [{"text": "There is a README and a src folder."}]}]
    first = {"role": "user", "parts": [{"text": "List the files in the current directory"}]}
    assert [first, {"role": "model", "parts": [{"function_call": listing},
                                               {"function_call": cancelled}]}, *tail] == (
        json.loads(cli.ok("export", session, "--format", "gemini")))
    assert [first, {"role": "model", "parts": [{"function_call": listing}]}, *tail] == (
        json.loads(cli.ok("export", session, "--format", "gemini", "--view", "chat")))


def test_i36_p2_a_pretty_printed_conversation_is_read_as_one_line(
    cli: Cli, tmp_path: Path
) -> None:
    """A provider conversation written over several lines (json.dumps(indent=2)) is one
    conversation, not a refusal per line."""
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"},
                                {"role": "assistant", "content": "hello"}], indent=2))
    result = cli.run("import", path)

    assert (0, "") == (result.returncode, result.stderr), describe(result)
    [session] = imported_ids(result.stdout)
    assert f"{session}\tline 1: 2 messages, 1 turn (read as openai)\n" == result.stdout


# --- issue 36 point 4: Codex's apply_patch calls (``custom_tool_call``) are exported as tool
# calls in every format, never dropped; where the format has no custom kind the change is
# said. The rollout: tests/fixtures/agents/codex_rich.jsonl (README there).

ROLLOUT = REPO / "tests" / "fixtures" / "agents" / "codex_rich.jsonl"
PATCH = next(json.loads(line)["payload"] for line in ROLLOUT.read_text(
    encoding="utf-8").splitlines() if '"custom_tool_call"' in line)
KIND_CHANGED = ("turnledger: warning: message 5: kind custom_tool_call of call call_02 "
                "(apply_patch) left out: Anthropic Messages has no custom tool calls: written "
                "as a tool_use with its input as the argument input")


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_i36_p4_every_file_edit_of_a_codex_session_reaches_chat_and_anthropic(
    cli: Cli, fmt: str
) -> None:
    """The patch is a Chat ``custom`` tool call (the same kind) or an Anthropic ``tool_use``
    (its kind changed, said), answered by its result; the export passes the SDK's types."""
    need("openai")
    need("anthropic")
    [session] = imported_ids(cli.ok("import", ROLLOUT))
    result = cli.run("export", session, "--format", fmt)

    assert 0 == result.returncode, describe(result)
    body = json.loads(result.stdout)
    if fmt == "openai":
        calls = [c for m in body for c in m.get("tool_calls") or ()]
        assert {"id": "call_02", "type": "custom", "custom": {
            "name": "apply_patch", "input": PATCH["input"]}} in calls
        assert [] == problems("openai_chat", body)
        assert not any("kind" in line for line in result.stderr.splitlines())
    else:
        blocks = [b for m in body["messages"] if isinstance(m["content"], list)
                  for b in m["content"]]
        assert {"type": "tool_use", "id": "call_02", "name": "apply_patch",
                "input": {"input": PATCH["input"]}} in blocks
        assert [] == problems("anthropic", body)
        assert KIND_CHANGED in result.stderr.splitlines()
