"""Bound the length of one tool result when it is recorded (R38-R40).

`truncate_tool_result` keeps the first two thirds and the last third of the allowance and puts
the marker ``\\n[... N characters truncated ...]\\n`` between them, where N is the exact number of
characters removed. Lengths are Python characters (code points), not bytes or grapheme clusters.

Two rules keep the result usable (R39):

* An ``[IMAGE:…]`` marker is never split. When the head cut falls inside one, the cut moves back
  to the marker's start; when the tail cut falls inside one, the tail starts after the marker's
  end. The partial marker is removed whole and counted in N, so the result never grows past the
  allowance to make room for it.
* A JSON tool envelope (``{"tool_call_id": …, "content": …}``) stays a valid envelope with the
  same ``tool_call_id``: only its inner content is truncated, the allowance applies to that inner
  content, and the envelope is encoded again.

The marker's own length does not count against the allowance: the allowance is what is kept of
the tool's output, so a result is at most ``max_chars + len(marker)`` characters long (plus the
envelope's JSON framing for an envelope). This bound applies to one result as it is recorded; it
never trims the conversation history (R40).
"""

from __future__ import annotations

from typing import Final

import attrs

from turnledger.domain.arguments import require_int
from turnledger.domain.blocks import ImageBlock, TextBlock
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.estimate import image_markers
from turnledger.domain.messages import (
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolResult,
    ToolResults,
    parse_tool_envelope,
    tool_envelope,
)

__all__ = [
    "DEFAULT_MAX_TOOL_RESULT_CHARS",
    "truncate_conversation_message",
    "truncate_text",
    "truncate_tool_message",
    "truncate_tool_result",
    "truncate_tool_results",
    "truncation_marker",
]

DEFAULT_MAX_TOOL_RESULT_CHARS: Final = 50_000
"""The default ``max_tool_result_chars`` (R38); 0 means no bound."""


def truncation_marker(removed: int) -> str:
    """The text put in place of ``removed`` characters (R38)."""
    return f"\n[... {removed} characters truncated ...]\n"


def _check_max_chars(max_chars: object) -> int:
    max_chars = require_int("max_chars", max_chars)  # True is a bug, not a bound of 1
    if max_chars < 0:
        raise ValueError(f"max_chars must be >= 0 (0 means no bound), got {max_chars}")
    return max_chars


def truncate_text(text: str, max_chars: int) -> str:
    """Bound plain text to ``max_chars`` kept characters, head and tail (R38, R39 markers).

    This is the rule without envelope handling, for text that is already a tool's output (such
    as `ToolResult.content`). ``max_chars == 0`` means no bound.

    Raises:
        TypeError: ``max_chars`` is not an int.
        ValueError: ``max_chars`` is negative.
    """
    max_chars = _check_max_chars(max_chars)
    if max_chars == 0 or len(text) <= max_chars:
        return text
    head_end = max_chars * 2 // 3
    # Since len(text) > max_chars, head_end < tail_start: the two parts never overlap.
    tail_start = len(text) - (max_chars - head_end)
    # Every marker counts, loadable or not: a placeholder must not be split either (R39).
    for marker in image_markers(text):
        start, end = marker.start, marker.end
        if start >= tail_start:
            break
        if start < head_end < end:
            head_end = start
        if start < tail_start < end:
            tail_start = end
    removed = tail_start - head_end
    return text[:head_end] + truncation_marker(removed) + text[tail_start:]


def truncate_tool_result(text: str, max_chars: int) -> str:
    """Bound one tool result's text as it is recorded (R38, R39).

    Text of at most ``max_chars`` characters, and any text when ``max_chars == 0``, is returned
    unchanged. A tool envelope (`parse_tool_envelope` finds a ``tool_call_id``) has its inner
    content truncated and is encoded again with `tool_envelope`, keeping the same id; inner
    content that is not a string is truncated as its compact JSON text.

    Raises:
        TypeError: ``max_chars`` is not an int.
        ValueError: ``max_chars`` is negative.
    """
    max_chars = _check_max_chars(max_chars)
    if max_chars == 0 or len(text) <= max_chars:
        return text
    envelope = parse_tool_envelope(text)
    if envelope is None:
        return truncate_text(text, max_chars)
    tool_call_id, inner = envelope
    if len(inner) <= max_chars:
        # The tool's output fits; only the JSON framing made the text long. Re-encoding would
        # change nothing that matters and could alter the bytes of a stored envelope.
        return text
    return tool_envelope(tool_call_id, truncate_text(inner, max_chars))


def truncate_tool_message(message: ChatMessage, max_chars: int) -> ChatMessage:
    """A tool ChatMessage with its content bounded by `truncate_tool_result`.

    Attachments are kept. The same object is returned when nothing was cut.

    Raises:
        InvalidMessage: ``message`` is not a tool message (R38 bounds tool results only).
        TypeError, ValueError: as `truncate_tool_result`.
    """
    if message.role != "tool":
        raise InvalidMessage(f"role must be tool to bound a tool result, got {message.role!r}")
    if message.envelope is False:  # recorded as raw output: never read as an envelope
        max_chars = _check_max_chars(max_chars)
        too_long = max_chars and len(message.content) > max_chars
        content = truncate_text(message.content, max_chars) if too_long else message.content
    else:
        content = truncate_tool_result(message.content, max_chars)
    return message if content == message.content else attrs.evolve(message, content=content)


def truncate_tool_results(item: ToolResults, max_chars: int) -> ToolResults:
    """`ToolResults` whose every result content is bounded by `truncate_text`.

    A `ToolResult.content` is the tool's output itself (the envelope is only added by
    `to_chat_messages`), so the plain rule applies even if that output happens to look like an
    envelope. ``tool_call_id``, ``tool_name`` and ``attachments`` are kept. The same object is
    returned when nothing was cut.

    Raises:
        TypeError, ValueError: as `truncate_text`.
    """
    max_chars = _check_max_chars(max_chars)
    results = tuple(
        _bounded_result(result, max_chars)
        if max_chars and len(result.content) > max_chars
        else result
        for result in item.results
    )
    if all(new is old for new, old in zip(results, item.results)):
        return item
    return ToolResults(results)


def _bounded_result(result: ToolResult, max_chars: int) -> ToolResult:
    """``result`` with its text cut (R38); a result of blocks keeps its images as blocks."""
    text = truncate_text(result.content, max_chars)
    if not result.blocks:
        return attrs.evolve(result, content=text)
    images = [b for b in result.blocks if isinstance(b, ImageBlock)]
    return ToolResult.from_blocks(
        result.tool_call_id,
        [TextBlock(text), *images],
        result.tool_name,
        is_error=result.is_error,
        extra=result.extra,
    )


def truncate_conversation_message(item: ConversationMessage, max_chars: int) -> ConversationMessage:
    """Bound the tool results in one history item as it is recorded; other items are returned.

    `ToolResults` go through `truncate_tool_results`, a `Chat` holding a tool message through
    `truncate_tool_message`; everything else (user, system, assistant, tool calls) is untouched.

    Raises:
        TypeError, ValueError: as `truncate_text`.
    """
    max_chars = _check_max_chars(max_chars)
    match item:
        case ToolResults():
            return truncate_tool_results(item, max_chars)
        case Chat(message=message) if message.role == "tool":
            bounded = truncate_tool_message(message, max_chars)
            return item if bounded is message else Chat(bounded)
        case _:
            return item
