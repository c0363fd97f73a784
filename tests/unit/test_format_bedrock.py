"""Issue 36: Amazon Bedrock Converse conversations in and out, exactly
(`turnledger.domain.formats.bedrock`)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.properties import examples
from turnledger.domain.blocks import ImageBlock, OpaqueBlock, TextBlock, ThinkingBlock
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.formats.bedrock import (
    from_bedrock_json,
    to_bedrock_json,
    to_bedrock_record,
)
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ToolCall,
    ToolResults,
)
from turnledger.domain.turns import is_turn_start_item

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
       "rkJggg==")
RICH: dict[str, Any] = {
    "system": [{"text": "You are a coding agent."}, {"cachePoint": {"type": "default"}}],
    "messages": [
        {"role": "user", "content": [
            {"text": "Fix the failing test."},
            {"image": {"format": "png", "source": {"bytes": PNG}}},
            {"document": {"format": "txt", "name": "log", "source": {"bytes": "dGVzdA=="}}},
        ]},
        {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "Run it first.", "signature": "s1"}}},
            {"text": "Running the tests."},
            {"toolUse": {"toolUseId": "tu_1", "name": "bash", "input": {"cmd": "pytest -x"}}},
            {"toolUse": {"toolUseId": "tu_2", "name": "read", "input": {"path": "a.py"},
                         "type": "tool_use"}},
        ]},
        {"role": "user", "content": [
            {"toolResult": {"toolUseId": "tu_1", "content": [{"text": "1 failed"}],
                            "status": "error"}},
            {"toolResult": {"toolUseId": "tu_2", "content": [{"json": {"lines": 3}}],
                            "status": "success"}},
            {"text": "Also keep the docs in step."},
        ]},
        {"role": "assistant", "content": [{"text": "Fixed; the docs say so too."}]},
    ],
}


def test_i36_converse_round_trips_exactly() -> None:
    """Every block kind, a tool exchange, a result's status and JSON content, a user message
    mixing results and text: ``to(from(raw)) == raw``."""
    assert RICH == to_bedrock_json(from_bedrock_json(RICH))


def test_i36_converse_messages_are_what_the_rules_see() -> None:
    """The system, one user turn whose tool results and follow-up text are separate messages,
    each call a ToolCall named on its result, images as images, the rest kept whole."""
    history = from_bedrock_json(RICH)

    assert [Chat, Chat, AssistantToolCalls, ToolResults, Chat, Chat] == [
        type(m) for m in history]
    assert [False, True, False, False, True, False] == [
        is_turn_start_item(m) for m in history]
    system, user, calls, results = history[0], history[1], history[2], history[3]
    assert isinstance(system, Chat)
    assert isinstance(user, Chat)
    assert "system" == system.message.role
    assert TextBlock("Fix the failing test.") == user.message.blocks[0]
    assert ImageBlock(data=PNG, media_type="image/png") == user.message.blocks[1]
    assert isinstance(user.message.blocks[2], OpaqueBlock)
    assert isinstance(calls, AssistantToolCalls)
    assert [ToolCall("tu_1", "bash", '{"cmd":"pytest -x"}'),
            ToolCall("tu_2", "read", '{"path":"a.py"}', extra='{"bedrock":{"call":{"type":'
                     '"tool_use"}}}')] == list(calls.tool_calls)
    assert isinstance(results, ToolResults)
    assert [("tu_1", "bash", True, "1 failed"), ("tu_2", "read", False, '{"bedrock":{"json":'
            '{"lines":3}}}')] == [(r.tool_call_id, r.tool_name, r.is_error, r.content)
                                  for r in results.results]


@pytest.mark.parametrize(("raw", "error"), [
    ({"messages": [{"role": "user", "content": [{"text": "a", "image": {}}]}]},
     "messages[0].content[0]: a block must be an object of one member among audio, cachePoint,"
     " citationsContent, document, guardContent, image, reasoningContent, searchResult, text, "
     "toolResult, toolUse, video; got ['image', 'text']"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]},
     "messages[0].content[0]: a block must be an object of one member among audio, cachePoint,"
     " citationsContent, document, guardContent, image, reasoningContent, searchResult, text, "
     "toolResult, toolUse, video; got ['text', 'type']"),
    ({"messages": [{"role": "system", "content": [{"text": "a"}]}]},
     "messages[0]: a Converse role is user or assistant, got 'system'"),
    ({"messages": [{"role": "user", "content": [{"text": "a"}], "name": "x"}]},
     "messages[0]: a Converse message has exactly role and content, got ['content', 'name', "
     "'role']"),
    ({"messages": [{"role": "user", "content": [{"text": "a"}]},
                   {"role": "user", "content": [{"text": "b"}]}]},
     "messages[1]: two user messages in a row; Converse alternates user and assistant"),
    ({"messages": [{"role": "assistant", "content": [{"toolUse": {"name": "f", "input": {}}}]}]},
     "messages[0].content[0]: a toolUse needs a toolUseId, a name and an input"),
    ({"messages": [{"role": "user", "content": [
        {"toolResult": {"toolUseId": "t", "content": [], "status": "done"}}]}]},
     "messages[0].content[0]: a toolResult status must be error or success, got 'done'"),
    ({"system": [{"image": {}}], "messages": []},
     "system[0]: a block must be an object of one member among cachePoint, guardContent, text;"
     " got ['image']"),
])
def test_i36_converse_shapes_it_has_no_form_for_are_refused_by_name(
    raw: dict[str, Any], error: str
) -> None:
    """Never dropped: refused, naming the message and block."""
    with pytest.raises(InvalidMessage) as refused:
        from_bedrock_json(raw)
    assert error == str(refused.value)


def test_i36_content_of_another_provider_is_left_out_of_a_converse_export_and_said() -> None:
    """An Anthropic thinking block and a URL image have no Converse form: left out, each
    named with the index of its message; the rest is written."""
    history = [
        Chat(ChatMessage.from_blocks("user", [
            TextBlock("look"), ImageBlock("https://example.com/cat.png")])),
        Chat(ChatMessage.from_blocks("assistant", [
            ThinkingBlock("hm", signature="sig"), TextBlock("a cat")])),
    ]
    body, left_out = to_bedrock_record(history)

    assert {"messages": [{"role": "user", "content": [{"text": "look"}]},
                         {"role": "assistant", "content": [{"text": "a cat"}]}]} == body
    assert [(0, "image block"), (1, "thinking block")] == [
        (entry.message, entry.what) for entry in left_out]


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-9, 9) | _TEXT,
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=6)


@st.composite
def _conversations(draw: st.DrawFn) -> dict[str, Any]:
    """Alternating Converse messages; every call answered by the next user message, whose
    results may be followed by text."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": draw(_TEXT)}]}]
    for turn in range(draw(st.integers(0, 4))):
        ids = [f"t{turn}-{k}" for k in range(draw(st.integers(0, 2)))]
        said = [{"text": draw(_TEXT)}] if draw(st.booleans()) or not ids else []
        messages.append({"role": "assistant", "content": said + [
            {"toolUse": {"toolUseId": i, "name": draw(_TEXT), "input": draw(_JSON)}}
            for i in ids]})
        results = [{"toolResult": {"toolUseId": i, "content": draw(st.lists(
            st.sampled_from([{"text": "ok"}, {"json": {"n": 1}}]), max_size=2)),
            **draw(st.sampled_from([{}, {"status": "error"}, {"status": "success"}]))}}
            for i in ids]
        after = [{"text": draw(_TEXT)}] if draw(st.booleans()) or not results else []
        messages.append({"role": "user", "content": results + after})
    system = draw(st.sampled_from([{}, {"system": [{"text": "be brief"}]}]))
    return system | {"messages": messages}


@settings(max_examples=examples(150))
@given(_conversations())
def test_i36_property_every_converse_conversation_round_trips(raw: dict[str, Any]) -> None:
    """Issue 36: what comes in as Converse goes back out as the same JSON."""
    assert raw == to_bedrock_json(from_bedrock_json(raw))


