"""Issue 36 point 4 on the command line: Codex's apply_patch calls (``custom_tool_call``)
are exported as tool calls in every format, never dropped; where the format has no custom
kind the change is said. The rollout: tests/fixtures/agents/codex_rich.jsonl (README there).
"""

from __future__ import annotations

import json

import pytest

from tests.extras import need
from tests.provider_types import problems

from .conftest import REPO, Cli, describe, imported_ids

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
