"""`turnledger.replay.transcripts` over every fixture (issue 36 point 3): every recorded
conversation of the fixtures, read as ``import`` reads its file, exported to every format
``export`` writes, is what that provider's own types accept.

Every file of ``tests/fixtures/{conversations,public,transcripts,agents,gemini,bedrock}`` is
read with ``--format auto``'s reader (`read_conversations`); each conversation it holds is
exported (`write_record`, what ``turnledger export`` prints) as OpenAI Chat, OpenAI Responses,
Anthropic and Gemini. An export in another format than the record's own is written by the one
writer of that format's requests and is checked against the ``openai`` / ``anthropic`` SDKs'
request types (`tests/provider_types.py`) or google-genai's ``Content`` model: nothing refused.
An export in the record's own format is its copy, exactly what the format recorded (a recorded
reply keeps its reply-only fields, as ``annotations``). Bedrock exports are not checked here: no
Converse request type is installed (the Bedrock tests check its round trip).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conversation_fixtures import FIXTURES
from tests.extras import need
from tests.provider_types import problems
from turnledger.domain.providers import TranscriptError
from turnledger.replay.transcripts import (
    Conversation,
    read_conversations,
    write_conversation,
    write_record,
)

FOLDERS = ("conversations", "public", "transcripts", "agents", "gemini", "bedrock")
FORMATS = ("openai", "anthropic", "responses", "gemini")
API = {"openai": "openai_chat", "anthropic": "anthropic", "responses": "openai_responses"}
OWN = {"claude-code": "anthropic", "codex": "responses", "gemini-cli": "gemini"}
REFUSED_ON_PURPOSE = {
    "transcripts/anthropic.jsonl:4",  # a broken line, for the import's refusal tests
    "transcripts/openai.jsonl:5",  # a tool call with no name, likewise
    "agents/codex_sample.jsonl:1",  # sanitized assistant parts no format carries (README)
}


def _read() -> tuple[list[tuple[str, Conversation]], set[str]]:
    read: list[tuple[str, Conversation]] = []
    refused: set[str] = set()
    for folder in FOLDERS:
        for path in sorted((FIXTURES / folder).iterdir()):
            if path.suffix not in (".json", ".jsonl"):
                continue
            name = f"{folder}/{path.name}"
            for found in read_conversations(path.read_text(encoding="utf-8"), "auto"):
                if isinstance(found, TranscriptError):
                    refused.add(f"{name}:{found.line}")
                else:
                    read.append((f"{name}:{found.line}", found))
    return read, refused


READ, REFUSED = _read()
CASES = [(name, conversation, fmt) for name, conversation in READ for fmt in FORMATS]
IDS = [f"{name}->{fmt}" for name, _, fmt in CASES]


def _own(conversation: Conversation) -> str:
    return OWN.get(conversation.format, conversation.format)


def test_i36_every_fixture_file_is_read_but_the_lines_made_to_be_refused() -> None:
    """Each folder gives conversations, and import refuses only the lines written to be."""
    assert set(FOLDERS) == {name.split("/")[0] for name, _ in READ}
    assert REFUSED_ON_PURPOSE == REFUSED


def _genai_problems(contents: Any) -> list[str]:
    types = need("google.genai.types")
    from pydantic import ValidationError

    found: list[str] = []
    for index, content in enumerate(contents):
        try:
            types.Content.model_validate(content)
        except ValidationError as error:
            found.append(f"contents[{index}]: {error.errors()[0]['msg']}")
    return found


@pytest.mark.parametrize(("name", "conversation", "fmt"),
                         [c for c in CASES if _own(c[1]) != c[2]],
                         ids=[i for i, c in zip(IDS, CASES, strict=True) if _own(c[1]) != c[2]])
def test_i36_p3_every_fixture_exported_to_another_format_is_accepted_by_its_types(
    name: str, conversation: Conversation, fmt: str
) -> None:
    """The export in another format passes that provider's own request types (or genai's
    ``Content``): what the format cannot carry is left out, never written invalid."""
    line, _ = write_record(conversation.history, fmt)
    assert [] == _problems(fmt, json.loads(line))


def _problems(fmt: str, body: Any) -> list[str]:
    if fmt == "gemini":
        return _genai_problems(body)
    need("openai")
    need("anthropic")
    return problems(API[fmt], body)


@pytest.mark.parametrize(("name", "conversation", "fmt"),
                         [c for c in CASES if _own(c[1]) == c[2]],
                         ids=[i for i, c in zip(IDS, CASES, strict=True) if _own(c[1]) == c[2]])
def test_i36_p3_a_fixture_exported_in_its_own_format_is_its_copy(
    name: str, conversation: Conversation, fmt: str
) -> None:
    """In its own format the export is the record as the format wrote it; a record of blocks
    the format's requests cannot carry (an image in an OpenAI Chat tool message) is written
    as the other formats are: what is left out said, the rest accepted by the types."""
    line, left_out = write_record(conversation.history, fmt)
    if left_out:
        assert [] == _problems(fmt, json.loads(line))
    else:
        assert write_conversation(conversation.history, fmt) == line


def test_i36_p3_the_fixtures_make_both_kinds_of_case() -> None:
    """Every format is written from another one, and each provider format copies a record."""
    crossing = {fmt for _, c, fmt in CASES if _own(c) != fmt}
    copying = {fmt for _, c, fmt in CASES if _own(c) == fmt}
    assert (set(FORMATS), set(FORMATS)) == (crossing, copying)

