"""Issue 36: Bedrock Converse recordings come in with ``import`` (detected or named) and go
back out exactly with ``export --format bedrock``; exported to the other formats they are what
those providers' own request types accept.

The recording is public (tests/fixtures/bedrock/README.md: a pydantic-ai VCR cassette, MIT).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.provider_types import problems

from .conftest import REPO, Cli, describe, imported_ids

BEDROCK = REPO / "tests" / "fixtures" / "bedrock"
NATIVE_API = {"openai": "openai_chat", "anthropic": "anthropic", "responses": "openai_responses"}


def _line(tmp_path: Path, name: str) -> tuple[Path, dict[str, object]]:
    value = json.loads((BEDROCK / name).read_text(encoding="utf-8"))
    path = tmp_path / f"{Path(name).stem}.jsonl"
    path.write_text(json.dumps(value) + "\n", encoding="utf-8")
    return path, value


@pytest.mark.parametrize("named", [[], ["--format", "bedrock"]])
def test_i36_a_converse_recording_imports_and_exports_back_exactly(
    cli: Cli, tmp_path: Path, named: list[str]
) -> None:
    """Detected (``read as bedrock``) or named; export gives the line back, JSON-equal, with
    no warning; verify is clean; 4 messages, 1 turn (the tool result is no new turn)."""
    path, value = _line(tmp_path, "conversation_tool_with_thinking.json")
    result = cli.run("import", path, *named)

    assert (0, "") == (result.returncode, result.stderr), describe(result)
    [session] = imported_ids(result.stdout)
    detected = " (read as bedrock)" if not named else ""
    assert f"{session}\tline 1: 4 messages, 1 turn{detected}\n" == result.stdout
    assert value == json.loads(cli.ok("export", session, "--format", "bedrock"))
    verified = cli.run("verify", session)
    assert 0 == verified.returncode, describe(verified)


def test_i36_a_converse_request_says_what_of_it_is_not_messages(
    cli: Cli, tmp_path: Path
) -> None:
    """The request as sent: its messages are recorded, and the import says which request
    fields are not (they are not messages), once; its empty system list is no system."""
    path, _ = _line(tmp_path, "request_tool_with_thinking.json")
    result = cli.run("import", path)

    assert 0 == result.returncode, describe(result)
    assert [
        "turnledger: warning: line 1: not recorded (request fields, not messages): "
        "additionalModelRequestFields, inferenceConfig, toolConfig"
    ] == result.stderr.splitlines()
    [session] = imported_ids(result.stdout)
    exported = json.loads(cli.ok("export", session, "--format", "bedrock"))
    assert json.loads((BEDROCK / "request_tool_with_thinking.json").read_text())[
        "messages"] == exported["messages"]


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "responses"])
def test_i36_a_converse_recording_exported_to_another_format_is_accepted_by_its_types(
    cli: Cli, tmp_path: Path, fmt: str
) -> None:
    """Exported to each other format: what that provider's SDK request types accept, the
    signed reasoning (Bedrock's own) left out and said."""
    path, _ = _line(tmp_path, "conversation_tool_with_thinking.json")
    [session] = imported_ids(cli.ok("import", path))
    exported = cli.run("export", session, "--format", fmt)

    assert 0 == exported.returncode, describe(exported)
    assert [] == problems(NATIVE_API[fmt], json.loads(exported.stdout))
    assert ["turnledger: warning: message 1: untyped block left out"] == [
        line.split(":", 4)[0] + ":" + ":".join(line.split(":", 4)[1:4])
        for line in exported.stderr.splitlines()], exported.stderr
