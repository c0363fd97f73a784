"""Compaction stages a profile opts into (issue 24, ADR-0086): pure, no model called.

Tool-result clearing replaces the content of older tool results (outside the newest turns a
profile keeps) by a short placeholder that names what was cleared; the calls, their ids and
the results' ids stay, so the structure a provider expects is kept (R35-R37). The log keeps
the original results: the session records the rewritten items (`ToolResultsCleared`).
"""

from __future__ import annotations

import attrs

from turnledger.domain.messages import (
    Chat,
    ConversationMessage,
    ToolResult,
    ToolResults,
    chat_tool_call_id,
    parse_tool_envelope,
    tool_envelope,
)

__all__ = ["cleared_item", "cleared_text"]

CLEARED_PREFIX = "[tool result cleared: "
"""How every placeholder begins: a cleared result is never cleared again."""


def cleared_text(tool_call_id: str, tool_name: str, chars: int) -> str:
    """The placeholder of one cleared result: the tool, its call id and the size cleared."""
    tool = f"{tool_name} " if tool_name else ""
    return f"{CLEARED_PREFIX}{tool}call {tool_call_id}, {chars} characters]"


def is_cleared(content: str) -> bool:
    """True when ``content`` is a placeholder already."""
    return content.startswith(CLEARED_PREFIX)


def _cleared_result(result: ToolResult) -> ToolResult:
    text = cleared_text(result.tool_call_id, result.tool_name, len(result.content))
    if is_cleared(result.content) or (len(text) >= len(result.content) and not result.blocks
                                      and not result.attachments):
        return result  # nothing to gain: a placeholder is never larger than what it replaces
    return attrs.evolve(result, content=text, attachments=(), blocks=())


def cleared_item(item: ConversationMessage) -> ConversationMessage | None:
    """``item`` with its tool results' contents replaced by placeholders; None when it holds
    no tool result worth clearing (not a tool result, already cleared, or shorter than the
    placeholder). Only a result that answers a call by id is cleared: the id is what the
    placeholder keeps."""
    match item:
        case ToolResults(results=results):
            new = tuple(map(_cleared_result, results))
            return None if new == results else ToolResults(new)
        case Chat(message=message) if message.role == "tool":
            call_id = chat_tool_call_id(message)
            parsed = parse_tool_envelope(message.content) if call_id else None
            if call_id is None or parsed is None or is_cleared(parsed[1]):
                return None
            text = cleared_text(call_id, "", len(parsed[1]))
            if len(text) >= len(parsed[1]) and not message.attachments and not message.blocks:
                return None
            return Chat(attrs.evolve(message, content=tool_envelope(call_id, text),
                                     attachments=(), blocks=()))
    return None
