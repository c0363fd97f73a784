"""Issue 36: Gemini ``contents`` come in with ``import`` (they round-tripped through the
Python API, `from_genai`/`to_genai`, but the command line refused them) and go back out with
``export --format gemini``."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import REPO, Cli, describe, imported_ids, write_jsonl

SNAKE = [
    {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
    {"role": "model", "parts": [
        {"function_call": {"id": "c1", "name": "weather", "args": {"city": "Paris"}}}]},
    {"role": "user", "parts": [
        {"function_response": {"id": "c1", "name": "weather", "response": {"temp_c": 12}}}]},
    {"role": "model", "parts": [{"text": "12 C."}]},
]
CAMEL = {"contents": [
    {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
    {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"cityName": "Paris"}},
                                 "thoughtSignature": "c2ln"}]},
    {"role": "user", "parts": [{"functionResponse": {"name": "weather",
                                                     "response": {"tempC": 12}}}]},
    {"role": "model", "parts": [{"text": "12 C."}]},
]}


def test_i36_gemini_contents_import_detected_and_export_back_exactly(
    cli: Cli, tmp_path: Path
) -> None:
    """google-genai's JSON form: read as gemini, 4 messages in 1 turn, given back equal."""
    path = write_jsonl(tmp_path / "gemini.jsonl", SNAKE)
    result = cli.run("import", path)

    assert (0, "") == (result.returncode, result.stderr), describe(result)
    [session] = imported_ids(result.stdout)
    assert f"{session}\tline 1: 4 messages, 1 turn (read as gemini)\n" == result.stdout
    assert SNAKE == json.loads(cli.ok("export", session, "--format", "gemini"))


def test_i36_gemini_rest_field_names_are_read_and_the_renaming_said(
    cli: Cli, tmp_path: Path
) -> None:
    """The REST API's camelCase (a recording's form) is read; the export is google-genai's
    snake_case, and the import says so; the caller's JSON (args, response) is not renamed."""
    path = write_jsonl(tmp_path / "rest.jsonl", CAMEL)
    result = cli.run("import", path, "--format", "gemini")

    assert 0 == result.returncode, describe(result)
    assert ["turnledger: warning: line 1: the REST API's camelCase field names are exported as "
            "google-genai's snake_case (functionCall as function_call)"] == (
        result.stderr.splitlines())
    [session] = imported_ids(result.stdout)
    exported = json.loads(cli.ok("export", session, "--format", "gemini"))
    assert [
        {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
        {"role": "model", "parts": [{"thought_signature": "c2ln", "function_call": {
            "name": "weather", "args": {"cityName": "Paris"}}}]},
        {"role": "user", "parts": [{"function_response": {
            "name": "weather", "response": {"tempC": 12}}}]},
        {"role": "model", "parts": [{"text": "12 C."}]},
    ] == exported


def test_i36_what_gemini_cannot_carry_is_left_out_and_said_on_export(
    cli: Cli, tmp_path: Path
) -> None:
    """Anthropic documents become the Gemini parts they have (a text document its text, a
    base64 one inline data); Anthropic's (redacted) thinking goes back to Anthropic only: left
    out and said, exit 0."""
    line = {"messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                        "data": "hi"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                        "data": "JVBERi0+"}}]},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "opaque"},
                                          {"type": "thinking", "thinking": "hm",
                                           "signature": "c2ln"},
                                          {"type": "text", "text": "ok"}]}]}
    [session] = imported_ids(cli.ok("import", write_jsonl(tmp_path / "doc.jsonl", line)))
    result = cli.run("export", session, "--format", "gemini")

    assert 0 == result.returncode, describe(result)
    assert [{"role": "user", "parts": [
        {"text": "hi"}, {"inline_data": {"data": "JVBERi0-", "mime_type": "application/pdf"}}]},
        {"role": "model", "parts": [{"text": "ok"}]}] == json.loads(result.stdout)
    assert ["turnledger: warning: message 1: redacted_thinking block left out: Gemini "
            "contents have no part of its kind",
            "turnledger: warning: message 1: thinking block left out: another provider's "
            "thinking goes back to that provider only"] == result.stderr.splitlines()


def test_i36_a_public_gemini_recording_imports_with_its_signature_kept(cli: Cli) -> None:
    """The recorded REST request (tests/fixtures/gemini/README.md): read as gemini, its
    request fields said, and its contents given back in google-genai's names with the call's
    id, args and thought signature unchanged."""
    path = REPO / "tests" / "fixtures" / "gemini" / "request_tool_call_thought_signature.json"
    recorded = json.loads(path.read_text(encoding="utf-8"))
    result = cli.run("import", path)

    assert 0 == result.returncode, describe(result)
    [session] = imported_ids(result.stdout)
    assert f"{session}\tline 1: 4 messages, 1 turn (read as gemini)\n" == result.stdout
    assert ["turnledger: warning: line 1: not recorded (request fields, not messages): "
            "generationConfig, tools",
            "turnledger: warning: line 1: the REST API's camelCase field names are exported as "
            "google-genai's snake_case (functionCall as function_call)"] == (
        result.stderr.splitlines())
    exported = json.loads(cli.ok("export", session, "--format", "gemini"))
    call = recorded["contents"][1]["parts"][0]
    assert {"thought_signature": call["thoughtSignature"], "function_call": {
        "name": "get_country", "id": call["functionCall"]["id"], "args": {}}} == (
        exported[1]["parts"][0])
    assert [c["role"] for c in recorded["contents"]] == [c["role"] for c in exported]
