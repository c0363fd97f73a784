"""Issue 8, point 1: the message model keeps provider content; SPEC's rules read derived views."""

from __future__ import annotations

import pytest

from turnledger.domain.blocks import (
    ImageBlock,
    OpaqueBlock,
    TextBlock,
    ThinkingBlock,
    canonical_json,
)
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.estimate import IMAGE_TOKEN_ESTIMATE, message_tokens
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ToolCall,
    ToolResult,
    assistant_envelope,
    classify_appended,
)
from turnledger.domain.truncate import truncate_conversation_message, truncate_text


def test_r21_an_image_block_costs_the_fixed_image_estimate() -> None:
    """A user image block is an [IMAGE:url] marker in content: 1,600 tokens, not its bytes."""
    message = ChatMessage.from_blocks("user", [ImageBlock("https://example.com/a.png")])
    assert "[IMAGE:https://example.com/a.png]" == message.content
    assert 4 + IMAGE_TOKEN_ESTIMATE == message_tokens(message, current_turn=True)


def test_r22_a_tool_results_image_blocks_are_its_attachments() -> None:
    """A tool result's image blocks are its declared attachments; its text the other blocks."""
    result = ToolResult.from_blocks(
        "c1", [TextBlock("saved"), ImageBlock(media_type="image/png", data="AAAA")]
    )
    assert ("saved", ("data:image/png;base64,AAAA",)) == (result.content, result.attachments)


def test_r23_thinking_counts_as_assistant_text_and_opaque_blocks_by_their_json() -> None:
    """Thinking text and an unknown block's JSON are in content, so the estimate counts them."""
    opaque = OpaqueBlock('{"type": "future", "x": 1}')
    message = ChatMessage.from_blocks("assistant", [ThinkingBlock("abcd" * 10, "sig"), opaque])
    assert "abcd" * 10 + "\n" + '{"type":"future","x":1}' == message.content
    assert 4 + (40 + 1 + 23 + 3) // 4 == message_tokens(message, current_turn=False)


def test_e11_content_must_be_derived_from_the_blocks() -> None:
    """A message whose content disagrees with its blocks is invalid, naming the rule."""
    with pytest.raises(InvalidMessage, match="content must be the text of the blocks"):
        ChatMessage("user", "other", blocks=(TextBlock("text"),))


def test_e12_provider_fields_are_canonical_json() -> None:
    """Equal provider fields give equal values, whatever their key order or spacing."""
    one = TextBlock("t", extra='{"b": 1, "a": {"y": 2, "x": 1}}')
    two = TextBlock("t", extra=canonical_json({"a": {"x": 1, "y": 2}, "b": 1}))
    assert one == two
    assert hash(one) == hash(two)


def test_r36_bare_messages_are_classified_once_by_the_canonical_envelope_rule() -> None:
    """Only turnledger's own envelope text is a call; other JSON is text; items stay items."""
    canonical = assistant_envelope(None, [ToolCall("c1", "ls")])
    spaced = '{"tool_calls": [{"id": "c1", "name": "ls", "arguments": "{}"}]}'
    assert classify_appended(ChatMessage.assistant(canonical)).message.envelope is True  # type: ignore[union-attr]
    assert classify_appended(ChatMessage.assistant(spaced)).message.envelope is False  # type: ignore[union-attr]
    item = AssistantToolCalls(None, (ToolCall("c1", "ls"),))
    assert item == classify_appended(ChatMessage.tool_calls_envelope(None, item.tool_calls))


def test_r38_a_tool_message_recorded_as_text_is_cut_as_text() -> None:
    """A tool output recorded as raw text is truncated as text even when it looks like an
    envelope (the structure is not re-guessed)."""
    raw = '{"tool_call_id": "c1", "content": "' + "x" * 100 + '"}'
    item = Chat(ChatMessage("tool", raw, envelope=False))
    bounded = truncate_conversation_message(item, 40)
    assert isinstance(bounded, Chat)
    assert truncate_text(raw, 40) == bounded.message.content
