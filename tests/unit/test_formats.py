"""The grouped provider formats (`turnledger.domain.formats`): genai contents and pydantic-ai
messages as JSON, both ways, without their frameworks (issue 34: the conversions are provider
formats beside the others, proven like them by round trips)."""

from __future__ import annotations

from typing import Any

import pytest

from turnledger.domain.blocks import ImageBlock, OpaqueBlock, TextBlock, ThinkingBlock
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.formats import conversation_of, grouped, user_side
from turnledger.domain.formats.genai import (
    GenaiCalls,
    from_genai_json,
    to_genai_json,
    unanswered_calls,
)
from turnledger.domain.formats.pydantic_ai import from_pydantic_ai_json, to_pydantic_ai_json
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    to_chat_messages,
)
from turnledger.domain.providers import from_openai_chat

Json = dict[str, Any]
T = "2026-01-02T03:04:05Z"

GENAI: list[Json] = [
    {"role": "user", "parts": [{"text": "look"}, {"inline_data": {
        "data": "aGk_", "mime_type": "image/png"}}]},
    {"role": "model", "parts": [
        {"text": "thinking", "thought": True},
        {"text": "let me call"},
        {"function_call": {"id": "c1", "name": "lookup", "args": {"q": 1}},
         "thought_signature": "c2ln"},
        {"function_call": {"name": "fetch", "args": {"u": "x"}}},
    ]},
    {"role": "user", "parts": [
        {"function_response": {"id": "c1", "name": "lookup", "response": {"r": 2}}},
        {"function_response": {"name": "fetch", "response": {"r": 3}}},
        {"text": "and then?"},
    ]},
    {"role": "model", "parts": [{"executable_code": {"code": "1", "language": "PYTHON"}},
                                {"text": "done"}]},
]

PYDANTIC_AI: list[Json] = [
    {"kind": "request", "state": "complete", "parts": [
        {"part_kind": "system-prompt", "content": "be brief", "timestamp": T},
        {"part_kind": "user-prompt", "content": [
            "see", {"kind": "image-url", "url": "https://x/i.png"}], "timestamp": T},
    ]},
    {"kind": "response", "state": "complete", "timestamp": T, "parts": [
        {"part_kind": "thinking", "content": "hm", "signature": "sig"},
        {"part_kind": "text", "content": "calling"},
        {"part_kind": "tool-call", "tool_name": "f", "args": {"a": 1}, "tool_call_id": "c1"},
        {"part_kind": "tool-call", "tool_name": "g", "args": "{\"b\":2}", "tool_call_id": "c2"},
        {"part_kind": "builtin-tool-call", "tool_name": "web", "tool_call_id": "b1"},
    ]},
    {"kind": "request", "parts": [
        {"part_kind": "tool-return", "tool_name": "f", "content": {"r": 2},
         "tool_call_id": "c1", "timestamp": T},
        {"part_kind": "tool-return", "tool_name": "g", "content": "text",
         "tool_call_id": "c2", "timestamp": T},
        {"part_kind": "retry-feedback", "content": "try again", "timestamp": T},
    ]},
    {"kind": "response", "parts": [{"part_kind": "text", "content": "done"}]},
]


def test_r81_genai_json_round_trips_both_ways() -> None:
    """Contents' JSON comes back equal through turnledger messages, and the messages through
    the JSON: thoughts, signatures, id-less calls and responses, images and code parts."""
    messages = from_genai_json(GENAI, seed="s")
    assert GENAI == to_genai_json(messages)
    assert messages == from_genai_json(to_genai_json(messages), seed="s")


def test_r81_genai_json_reads_its_parts_as_typed_blocks() -> None:
    """A genai content's parts become turnledger's own blocks, calls and results (ADR-0081)."""
    user, model, results, question, code = from_genai_json(GENAI, seed="s")
    assert isinstance(user, Chat)
    assert isinstance(model, AssistantToolCalls)
    assert [TextBlock, ImageBlock] == [type(b) for b in user.message.blocks]
    assert [ThinkingBlock, TextBlock, ToolCall, ToolCall] == [type(b) for b in model.blocks]
    made = model.tool_calls[1].id
    assert made.startswith("adk-")
    assert len(made) == len("adk-") + 32
    assert isinstance(results, ToolResults)
    assert [("c1", '{"r":2}'), (made, '{"r":3}')] == [
        (r.tool_call_id, r.content) for r in results.results]
    assert isinstance(question, Chat)
    assert "and then?" == question.message.content
    assert isinstance(code, Chat)
    assert isinstance(code.message.blocks[0], OpaqueBlock)


def test_r81_genai_ids_are_the_same_for_the_same_seed_and_differ_for_another() -> None:
    """An id-less call's recorded id is a function of the seed and the contents (ADR-0099)."""
    call = [GENAI[1]]

    def ids(seed: str) -> list[str]:
        (step,) = from_genai_json(call, seed=seed)
        assert isinstance(step, AssistantToolCalls)
        return [c.id for c in step.tool_calls]

    assert ids("a") == ids("a")
    assert ids("a") != ids("b")


def test_r81_genai_response_without_id_answers_the_oldest_unanswered_call_of_its_name() -> None:
    """``unanswered`` (the window's open calls, `unanswered_calls`) is what an id-less
    response answers."""
    window = to_chat_messages([
        Chat(ChatMessage("user", "q")),
        AssistantToolCalls(None, (ToolCall("k1", "f", "{}"), ToolCall("k2", "f", "{}"))),
        ToolResults((ToolResult("k1", "r", "f"),)),
    ])
    pending = unanswered_calls(window)
    assert ["k2"] == [c.id for c in pending]
    (answer,) = from_genai_json(
        [{"role": "user", "parts": [{"function_response": {"name": "f", "response": {}}}]}],
        unanswered=pending)
    assert isinstance(answer, ToolResults)
    assert "k2" == answer.results[0].tool_call_id
    calls = GenaiCalls(pending)
    calls.answer({"name": "f", "response": {}})
    assert [] == calls.pending  # answered: no longer open


@pytest.mark.parametrize(("raw", "named"), [
    ({"role": "system", "parts": [{"text": "x"}]}, "role 'system'"),
    ({"role": "user", "parts": []}, "without parts"),
    ({"role": "user", "parts": [{"video_metadata": {}}]}, "contents[0].parts[0]"),
    ({"role": "model", "parts": [{"function_response": {"name": "f"}}]}, "function_response"),
    ({"role": "user", "parts": [{"text": "x"}], "extra": 1}, "content fields ['extra']"),
])
def test_e11_genai_json_without_a_turnledger_form_is_refused_by_name(
    raw: Json, named: str
) -> None:
    """A part kind, role or field with no turnledger form is refused, naming it, never
    dropped."""
    with pytest.raises(InvalidMessage, match=r"contents\[0\]") as refused:
        from_genai_json([raw])
    assert named in str(refused.value)


def test_r81_pydantic_ai_json_round_trips_both_ways() -> None:
    """pydantic-ai's JSON comes back equal through turnledger messages, and the messages
    through the JSON: system and multimodal prompts, thinking, text and JSON arguments,
    builtin parts, tool returns and a retry feedback."""
    messages = from_pydantic_ai_json(PYDANTIC_AI)
    assert PYDANTIC_AI == to_pydantic_ai_json(messages)
    assert messages == from_pydantic_ai_json(to_pydantic_ai_json(messages))


def test_r2_pydantic_ai_retry_feedback_is_a_carrier_of_the_same_turn() -> None:
    """A request's parts become a system message, a user message of blocks, one
    `ToolResults` and the retry feedback as a ``[Tool results]`` carrier (R2)."""
    system, user, step, results, carrier, reply = from_pydantic_ai_json(PYDANTIC_AI)
    assert isinstance(system, Chat)
    assert "system" == system.message.role
    assert isinstance(user, Chat)
    assert [TextBlock, ImageBlock] == [
        type(b) for b in user.message.blocks]
    assert isinstance(step, AssistantToolCalls)
    assert [("c1", '{"a":1}'), ("c2", '{"b":2}')] == [
        (c.id, c.arguments) for c in step.tool_calls]
    assert isinstance(results, ToolResults)
    assert 2 == len(results.results)
    assert isinstance(carrier, Chat)
    assert carrier.message.content.startswith("[Tool results]")
    assert isinstance(reply, Chat)
    assert "done" == reply.message.content


def test_e11_pydantic_ai_json_without_a_turnledger_form_is_refused_by_name() -> None:
    """A part kind with no turnledger form is refused, naming the message and the part."""
    bad = [{"kind": "request", "parts": [{"part_kind": "mystery", "content": "?"}]}]
    with pytest.raises(InvalidMessage, match=r"messages\[0\]\.parts\[0\].*'mystery'"):
        from_pydantic_ai_json(bad)
    with pytest.raises(InvalidMessage, match=r"messages\[0\]: not a pydantic-ai"):
        from_pydantic_ai_json([{"kind": "other"}])


def test_r81_a_history_another_runtime_recorded_exports_as_plain_parts() -> None:
    """Messages recorded through another format (no keyed fields) come back as the plain
    parts of their role in both grouped formats: the step's text, then its calls."""
    history = from_openai_chat([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "let me see", "tool_calls": [{
            "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "assistant", "content": "a"},
    ])
    assert [
        {"role": "user", "parts": [{"text": "q"}]},
        {"role": "model", "parts": [
            {"text": "let me see"}, {"function_call": {"id": "c1", "name": "f", "args": {}}}]},
        {"role": "user", "parts": [
            {"function_response": {"id": "c1", "name": "f", "response": {"result": "r"}}}]},
        {"role": "model", "parts": [{"text": "a"}]},
    ] == to_genai_json(history)
    assert [
        {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "q"}]},
        {"kind": "response", "parts": [
            {"part_kind": "text", "content": "let me see"},
            {"part_kind": "tool-call", "tool_call_id": "c1", "tool_name": "f", "args": "{}"}]},
        {"kind": "request", "parts": [{"part_kind": "tool-return", "tool_call_id": "c1",
                                       "tool_name": "f", "content": "r"}]},
        {"kind": "response", "parts": [{"part_kind": "text", "content": "a"}]},
    ] == to_pydantic_ai_json(history)


def test_adr91_grouped_puts_the_user_side_together_until_a_piece_opens_a_message() -> None:
    """`grouped`: an assistant message alone; system, user and result pieces together until
    one whose ``extra`` opens a message (never the breadcrumb); a window of provider
    messages is read as its structured messages (`conversation_of`)."""
    history: list[ConversationMessage] = [
        Chat(ChatMessage("system", "s")), Chat(ChatMessage("user", "a")),
               Chat(ChatMessage("user", "b", extra='{"open":1}')),
               AssistantToolCalls(None, (ToolCall("c", "f", "{}"),)),
               ToolResults((ToolResult("c", "r", "f"),)), Chat(ChatMessage("assistant", "z"))]
    groups = grouped(history, lambda extra: bool(extra))
    assert [[0, 1], [2], [3], [4], [5]] == [
        [history.index(m) for m, _ in group] for group in groups]
    assert [True, True, True, False, True, False] == [user_side(m) for m in history]
    assert history == conversation_of(to_chat_messages(history))
    with pytest.raises(InvalidMessage, match=r"history\[1\] is not a message: int"):
        conversation_of([history[0], 5])  # type: ignore[list-item]
