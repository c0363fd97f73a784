"""Issue 36 point 2: what the agent transcript readers refuse, by name
(`turnledger.replay.agent_transcripts` through `read_conversations`)."""

from __future__ import annotations

import json

import pytest

from turnledger.domain.providers import TranscriptError
from turnledger.replay.transcripts import Conversation, read_conversations

USER = {"type": "user", "sessionId": "s", "uuid": "u1",
        "message": {"role": "user", "content": "hi"}}


def _read(*records: object, fmt: str = "auto") -> list[Conversation | TranscriptError]:
    text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records)
    return list(read_conversations(text, fmt))


def test_i36_p2_detection_reads_a_whole_file_as_one_session() -> None:
    """The first record says Claude Code: the whole text is one session, its notes kept."""
    [found] = _read(USER, {**USER, "uuid": "u2", "type": "assistant",
                           "message": {"role": "assistant", "content": "hello"}})
    assert isinstance(found, Conversation)
    assert ("claude-code", 1, 2) == (found.format, found.line, len(found.history))
    assert ("not recorded: each record's uuids, timestamps, usage and working directory",) == (
        found.notes)


@pytest.mark.parametrize(("records", "error"), [
    ((USER, "[1, 2]"), "line 2: a claude-code record is a JSON object, got list"),
    ((USER, "{"), "line 2: invalid JSON: Expecting property name enclosed in double quotes: "
     "line 1 column 2 (char 1)"),
    (({**USER, "message": {"role": "assistant", "content": "x"}},),
     "line 1: a user record whose message has no user role and content"),
    (({"type": "summary", "summary": "t", "leafUuid": "x"},),
     "line 1: main: no message the agent sent its model"),
])
def test_i36_p2_claude_code_records_it_cannot_read_are_refused_by_line(
    records: tuple[object, ...], error: str
) -> None:
    """A bad record names its line; a session with no message is refused, not stored empty."""
    found = _read(*records, fmt="claude-code")
    assert [error] == [str(f) for f in found if isinstance(f, TranscriptError)]


def test_i36_p2_a_codex_record_without_a_payload_is_refused() -> None:
    found = _read({"type": "session_meta", "payload": {"id": "x"}},
                  {"type": "response_item", "payload": "oops"}, fmt="codex")
    assert ["line 2: a codex record needs a payload object (type 'response_item')"] == [
        str(f) for f in found]
