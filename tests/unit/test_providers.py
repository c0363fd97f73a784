"""Issue 8, point 3: provider conversions are exact both ways, for every block type."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import every_block_type_history, provider_histories
from turnledger.domain.blocks import ThinkingBlock
from turnledger.domain.budget import Route
from turnledger.domain.decider import PreparedRequest, request_digest
from turnledger.domain.messages import ChatMessage, ConversationMessage, to_chat_messages
from turnledger.providers import (
    TranscriptError,
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "conversations"
Importer = Callable[[Any], list[ConversationMessage]]
Exporter = Callable[[Any], Any]
FORMATS: dict[str, tuple[Importer, Exporter]] = {
    "openai": (from_openai_chat, to_openai_chat),
    "anthropic": (from_anthropic, to_anthropic),
    "responses": (from_openai_responses, to_openai_responses),
}


def fixture_lines(fmt: str) -> list[Any]:
    return [json.loads(line) for line in (FIXTURES / f"{fmt}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("fmt", list(FORMATS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_e11_generated_histories_round_trip(fmt: str, data: st.DataObject) -> None:
    """from_X(to_X(h)) == h and to_X(from_X(raw)) == raw for generated conversations."""
    importer, exporter = FORMATS[fmt]
    history = data.draw(provider_histories(fmt))
    raw = json.loads(json.dumps(exporter(history)))  # what a JSON file or a wire would hold
    assert history == importer(raw)
    assert raw == exporter(importer(raw))
    assert raw == exporter(to_chat_messages(history))


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_e11_every_fixture_conversation_round_trips(fmt: str) -> None:
    """to_X(from_X(raw)) == raw, JSON-equal, and from_X(to_X(h)) == h, for every fixture."""
    importer, exporter = FORMATS[fmt]
    for raw in fixture_lines(fmt):
        history = importer(raw)
        assert raw == exporter(history)
        assert history == importer(exporter(history))
        assert raw == exporter(to_chat_messages(history))  # the chat view carries it all


class SdkObject:
    """A stand-in for a provider SDK model: read through ``model_dump()``."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def model_dump(self, *, mode: str = "python", exclude_unset: bool = False) -> dict[str, Any]:
        copied: dict[str, Any] = json.loads(json.dumps(self.data))
        return copied


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_e11_sdk_objects_import_like_their_dicts(fmt: str) -> None:
    """Messages given as SDK objects (``model_dump()``) import as their plain dicts do."""
    importer, _ = FORMATS[fmt]
    for raw in fixture_lines(fmt):
        if isinstance(raw, dict):
            wrapped: Any = {**raw, "messages": [SdkObject(m) for m in raw["messages"]]}
        else:
            wrapped = [SdkObject(m) for m in raw]
        assert importer(raw) == importer(wrapped)


def test_e11_every_block_type_survives_anthropic_and_the_chat_view() -> None:
    """The history of every block type comes back equal from Anthropic's form."""
    history = every_block_type_history()
    assert history == from_anthropic(to_anthropic(history))
    assert history == from_anthropic(to_anthropic(to_chat_messages(history)))


def test_e11_unknown_block_types_never_reject_a_conversation() -> None:
    """A block type nobody knows yet is kept whole (opaque) and written back as it came."""
    raw = {"messages": [{"role": "user", "content": [{"type": "hologram", "depth": [1, 2]}]}]}
    assert raw == to_anthropic(from_anthropic(raw))


@pytest.mark.parametrize(
    ("fmt", "raw", "expected"),
    [
        ("openai", [{"role": "tool", "content": "x"}], "message 0: tool_call_id missing"),
        ("openai", [{"content": "x"}], "message 0: role missing"),
        ("anthropic", {"messages": [{"role": "bot", "content": "x"}]},
         "message 0: role 'bot' is not supported (user or assistant)"),
        ("responses", [{"type": "function_call", "name": "f", "arguments": "{}"}],
         "message 0: call_id missing"),
    ],
)
def test_e11_bad_input_names_the_message_and_field(fmt: str, raw: Any, expected: str) -> None:
    """A malformed message is a TranscriptError naming its index and the field."""
    importer, _ = FORMATS[fmt]
    with pytest.raises(TranscriptError) as caught:
        importer(raw)
    assert expected == str(caught.value)


def test_e6_prepared_request_gives_each_provider_body() -> None:
    """PreparedRequest.to_openai_chat/.to_anthropic/.to_openai_responses convert its messages."""
    messages = to_chat_messages(every_block_type_history())
    request = PreparedRequest(messages, Route("p", "m"), None, 1000, 10, None, window=1000)
    assert to_openai_chat(messages) == request.to_openai_chat()
    assert to_anthropic(messages) == request.to_anthropic()
    assert to_openai_responses(messages) == request.to_openai_responses()


def test_e6_digest_covers_blocks_and_keeps_old_digests() -> None:
    """A plain message digests as before issue 8; a thinking signature changes the digest."""
    # SHA-256 of [["user","hi",[],false]], the digest the code before issue 8 recorded.
    before = "c4b28590e83fdcfb18b11182f5cfc73510d1e373e8208689c4057140db622204"
    assert before == request_digest([ChatMessage.user("hi")])
    assert before == request_digest([ChatMessage("user", "hi", envelope=False)])
    signed = [ChatMessage.from_blocks("assistant", [ThinkingBlock("t", "sig-1")])]
    resigned = [ChatMessage.from_blocks("assistant", [ThinkingBlock("t", "sig-2")])]
    assert request_digest(signed) != request_digest(resigned)


def test_r21_a_bare_user_messages_image_markers_are_sent_as_images() -> None:
    """A runtime's user text with a loadable [IMAGE:ref] marker sends an image part; an imported
    string is sent as it came, and a tool's declared images go with its result (R22)."""
    history = [
        ChatMessage.user("Why? [IMAGE:/tmp/log.png]"),
        ChatMessage("user", "[IMAGE:/tmp/log.png]", envelope=False),
        ChatMessage.tool_result_envelope("c1", "saved", ["https://x/b.png"]),
    ]
    assert [
        {"role": "user", "content": [{"type": "text", "text": "Why? "},
                                     {"type": "image_url", "image_url": {"url": "/tmp/log.png"}}]},
        {"role": "user", "content": "[IMAGE:/tmp/log.png]"},
        {"role": "tool", "tool_call_id": "c1", "content": [
            {"type": "text", "text": "saved"},
            {"type": "image_url", "image_url": {"url": "https://x/b.png"}}]},
    ] == to_openai_chat(history)
