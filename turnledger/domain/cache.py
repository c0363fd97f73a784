"""Where a request body marks the prefix the provider may cache (issue 35, ADR-0105).

Providers cache the longest prefix a request repeats from an earlier one. Anthropic caches a
prefix only up to a block marked ``cache_control`` (at most `MAX_BREAKPOINTS` per request, in
the order tools, system, messages); OpenAI caches prefixes of 1,024 tokens and more on its own
and routes a request by a ``prompt_cache_key`` beside its first tokens. Nothing here changes
what the model reads: a breakpoint is a field of a block, the key a field of the request.

The Anthropic rule (`mark_anthropic`, docs/caching.md), for a body of ``system`` + ``messages``:

1. the recorded ``cache_control`` fields are removed (they marked another request; kept, they
   would pile up past the provider's limit and mark prefixes no later request repeats);
2. **system**: its last block (a string system becomes one text block to carry it);
3. **history**: the last block before the newest turn (the messages up to the newest real user
   message: every request of this turn and the next ones start with them, until a trim);
4. **newest**: the last block of the body when it ends with a user message (the user's text
   or the tool results: the next request of the session starts with the whole of this one,
   until a trim; an assistant's prefill at the end is not marked, its reply extends it).

Each mark goes on the nearest block at or before its place that can carry one: a block type
`CACHEABLE` names, a text block only when it has text (no thinking block, no empty text).
Two marks that land on one block are one. turnledger places at most three, so the caller
keeps one of the provider's four for its tools (the system's mark already caches them as
part of its prefix). A prefix shorter than the model's minimum is not cached and costs no
more: the marks are placed without counting tokens.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final
from uuid import UUID

__all__ = [
    "CACHEABLE",
    "TURNLEDGER_BREAKPOINTS",
    "mark_anthropic",
    "prompt_cache_key",
]

CACHE_CONTROL: Final = "cache_control"
MAX_BREAKPOINTS: Final = 4
"""Anthropic's limit of blocks marked ``cache_control`` in one request."""
TURNLEDGER_BREAKPOINTS: Final = 3
"""The marks turnledger places at most: one of the provider's four stays the caller's."""

CACHEABLE: Final = frozenset({
    "text", "image", "document", "search_result", "tool_use", "tool_result",
    "server_tool_use", "web_search_tool_result", "web_fetch_tool_result",
    "code_execution_tool_result", "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result", "tool_search_tool_result", "mcp_tool_use",
    "mcp_tool_result", "container_upload",
})
"""The Anthropic block types whose request type defines ``cache_control`` (the SDK's
``Beta*BlockParam``; a test checks each). A block of any other type (``thinking``,
``redacted_thinking``, one turnledger does not know) is never marked."""

_KEY_PREFIX: Final = "tl-"
_KEY_DOMAIN: Final = b"turnledger prompt_cache_key v1\x00"


def _control() -> dict[str, str]:
    """A fresh ``{"type": "ephemeral"}`` (the provider's default lifetime, five minutes)."""
    return {"type": "ephemeral"}


def prompt_cache_key(session_id: str | UUID) -> str:
    """The OpenAI ``prompt_cache_key`` of a session (Chat Completions and Responses).

    Derived from the session id alone, so every request of the session, in any process and
    in a replay, carries the same key, and no two sessions share one by chance; a digest, so
    the provider learns neither the id nor anything the session holds: ``tl-`` and 32
    hexadecimal digits (35 characters).
    """
    text = str(session_id).encode()
    return _KEY_PREFIX + hashlib.sha256(_KEY_DOMAIN + text).hexdigest()[:32]


def _cacheable(block: object) -> bool:
    if not isinstance(block, dict) or block.get("type") not in CACHEABLE:
        return False
    return block["type"] != "text" or bool(block.get("text"))


def _unmarked(block: Any) -> Any:
    """``block`` without a recorded ``cache_control``, here or in a tool result's content."""
    if not isinstance(block, dict):
        return block
    inner = block.get("content")
    if block.get("type") == "tool_result" and isinstance(inner, list) and any(
        isinstance(b, dict) and CACHE_CONTROL in b for b in inner
    ):
        block = {**block, "content": [_unmarked(b) for b in inner]}
    if CACHE_CONTROL in block:
        block = {k: v for k, v in block.items() if k != CACHE_CONTROL}
    return block


def _marked(block: Any) -> bool:
    """Whether a block carries a recorded ``cache_control`` (or a tool result's content does)."""
    if not isinstance(block, dict):
        return False
    inner = block.get("content") if block.get("type") == "tool_result" else None
    return CACHE_CONTROL in block or (isinstance(inner, list) and any(
        isinstance(b, dict) and CACHE_CONTROL in b for b in inner))


def _blocks(content: Any) -> list[Any]:
    """A content as a list of blocks (a string as one text block; an empty one as none)."""
    if isinstance(content, list):
        return [_unmarked(b) for b in content]
    return [{"type": "text", "text": content}] if isinstance(content, str) and content else []


def _count(content: Any) -> int:
    """The blocks of a content, a string counting as one (as `_blocks` makes it)."""
    return len(content) if isinstance(content, list) else 1 if content else 0


def _last_cacheable(blocks: list[Any], count: int) -> int | None:
    """The index of the last block among the first ``count`` that can carry a mark."""
    for position in range(min(count, len(blocks)) - 1, -1, -1):
        if _cacheable(blocks[position]):
            return position
    return None


def _place(messages: list[dict[str, Any]], at: tuple[int, int]) -> tuple[int, int] | None:
    """The nearest block at or before ``at`` (message index, blocks counted) that can carry
    a mark, or None."""
    index, count = at
    while index >= 0:
        content = messages[index].get("content")
        position = _last_cacheable(_blocks(content) if isinstance(content, str) else
                                   content if isinstance(content, list) else [], count)
        if position is not None:
            return index, position
        index -= 1
        count = _count(messages[index].get("content")) if index >= 0 else 0
    return None


def mark_anthropic(body: dict[str, Any], history_end: tuple[int, int] | None) -> dict[str, Any]:
    """An Anthropic ``{"system", "messages"}`` body with its cache breakpoints, by the rule
    of the module doc. ``history_end`` says where the messages before the newest turn end in
    ``messages`` (`turnledger.domain.providers.to_anthropic_marked`; None: no message before
    it). Returns a new body; ``body`` and its blocks are left as they are (a rendered body may
    share blocks with the record's JSON)."""
    out = dict(body)
    system = body.get("system")
    if system is not None:
        blocks = _blocks(system)
        position = _last_cacheable(blocks, len(blocks))
        if position is not None:
            blocks[position] = {**blocks[position], CACHE_CONTROL: _control()}
            out["system"] = blocks
        elif isinstance(system, list):
            out["system"] = blocks
    messages: list[dict[str, Any]] = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list) and any(_marked(b) for b in content):
            message = {**message, "content": _blocks(content)}
        messages.append(message)
    ends = [history_end] if history_end is not None else []
    if messages and messages[-1].get("role") == "user":
        ends.append((len(messages) - 1, _count(messages[-1].get("content"))))
    places: list[tuple[int, int]] = []
    for end in ends:
        place = _place(messages, end)
        if place is not None and place not in places:
            places.append(place)
    for index, position in places:
        content = messages[index].get("content")  # a list already unmarked, or a string
        blocks = list(content) if isinstance(content, list) else _blocks(content)
        blocks[position] = {**blocks[position], CACHE_CONTROL: _control()}
        messages[index] = {**messages[index], "content": blocks}
    out["messages"] = messages
    return out


def breakpoints(body: dict[str, Any]) -> list[str]:
    """Where an Anthropic body carries ``cache_control``, in request order (``system[0]``,
    ``messages[3].content[1]``, ``messages[3].content[0].content[2]``): what a test or a
    reader checks against the rule and the provider's limit."""
    found: list[str] = []

    def walk(blocks: Any, where: str) -> None:
        if not isinstance(blocks, list):
            return
        for position, block in enumerate(blocks):
            if not isinstance(block, dict):
                continue
            if CACHE_CONTROL in block:
                found.append(f"{where}[{position}]")
            if block.get("type") == "tool_result":
                walk(block.get("content"), f"{where}[{position}].content")

    walk(body.get("system"), "system")
    for index, message in enumerate(body.get("messages", [])):
        walk(message.get("content") if isinstance(message, dict) else None,
             f"messages[{index}].content")
    return found
