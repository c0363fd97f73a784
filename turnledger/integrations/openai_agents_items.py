"""The Responses items of an OpenAI Agents SDK session (issue 10; ADR-0077).

Used by `turnledger.integrations.openai_agents`; needs nothing of the SDK itself (its items
are JSON dicts, its usage is read by attribute). Each turnledger message is one or more
Responses items (`turnledger.domain.formats.responses`); this module tells which items of a
model input are new since the record (`new_items`), keeps the SDK's ``limit`` over a window's
items (`newest_items`), converts each window message once (`ItemsOnce`) and reads the SDK's
usage of a model response (`usage_of`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnledger.domain.errors import TurnledgerError
from turnledger.domain.messages import (
    BREADCRUMB_TEXT,
    SUMMARY_PREFIX,
    ChatMessage,
    ConversationMessage,
    is_breadcrumb,
)
from turnledger.domain.providers import to_openai_responses
from turnledger.domain.usage import OPENAI_RESPONSES, Usage
from turnledger.integrations import after_recorded

__all__ = ["Item", "ItemsOnce", "new_items", "newest_items", "same_items", "to_item", "usage_of"]

Item = dict[str, Any]


def _opens_window(item: Item) -> bool:
    """The breadcrumb's item, or that of the summary shown in its place (issue 24)."""
    content = item.get("content")
    return (item.keys() == {"role", "content"} and item["role"] == "user"
            and isinstance(content, str)
            and (content == BREADCRUMB_TEXT or content.startswith(SUMMARY_PREFIX)))


def to_item(message: ConversationMessage) -> Item:
    """The one Responses item of ``message``."""
    (item,) = to_openai_responses([message])
    return item


def newest_items(items: list[list[Item]], limit: int | None) -> list[Item]:
    """The SDK's ``limit`` over the items of a window (given per message): the newest
    ``limit`` items; 0 none; None or negative all."""
    if limit is None or limit < 0:
        return [item for chunk in items for item in chunk]
    chunks: list[list[Item]] = []
    count = 0
    for chunk in reversed(items):
        if count >= limit:
            break
        chunks.append(chunk)
        count += len(chunk)
    newest = [item for chunk in reversed(chunks) for item in chunk]
    # ``newest[-limit:]``, not ``newest[len(newest) - limit:]``: with fewer items than
    # ``limit`` the latter starts at a negative index and drops the oldest ones (issue 22).
    return newest[-limit:] if limit else []


class ItemsOnce:
    """The items of each window message, converted once per session object (turnledger
    messages are immutable values: each is its own key). The lists are shared: copy what
    leaves the object."""

    def __init__(self) -> None:
        self._converted: dict[ChatMessage, list[Item]] = {}

    def __call__(self, messages: Sequence[ChatMessage]) -> list[list[Item]]:
        """The items of each of ``messages``."""
        cache = self._converted
        if len(cache) > 2 * len(messages) + 256:
            cache.clear()  # what trims and pops removed from the window
        out = []
        for message in messages:
            items = cache.get(message)
            if items is None:
                items = cache[message] = to_openai_responses([message])
            out.append(items)
        return out


def same_items(sent: Sequence[object], items: Sequence[object]) -> bool:
    """Whether ``sent`` are the very ``items`` (the SDK passes the filter's items on)."""
    return len(sent) == len(items) and all(a is b for a, b in zip(sent, items, strict=True))


def usage_of(usage: Any) -> Usage | None:
    """The SDK's ``Usage`` of one model response (the Responses API's fields: the input with
    its cached tokens, ``input_tokens_details.cached_tokens``) as a `Usage`; None when it
    counts no token (a model that returned no usage)."""
    if usage is None or not (usage.input_tokens or usage.output_tokens):
        return None
    details = usage.input_tokens_details
    return Usage(OPENAI_RESPONSES, usage.input_tokens, usage.output_tokens,
                 getattr(details, "cached_tokens", 0) or 0,
                 getattr(details, "cache_write_tokens", 0) or 0)


def new_items(
    given: list[Item], view: Sequence[ChatMessage], items: list[list[Item]], name: str
) -> list[Item]:
    """The items of ``given`` after the newest recorded ones (ADR-0077).

    The recorded items are the view's after its breadcrumb (or summary). ``given`` holds them
    at its end (before what is new) in one of two forms: whole, after older items the view has
    trimmed since the SDK read them; or, when the SDK read the newest ``limit`` items only, as
    a suffix of them that is all of ``given`` before what is new (after a leading breadcrumb
    or summary).
    The shortest unrecorded tail wins, so with the SDK's session saves (nothing new) one
    comparison decides. An empty view: everything is new. ``items``: those of each message of
    ``view``."""
    start = next((i + 1 for i, m in enumerate(view) if is_breadcrumb(m)), 0)
    recorded = [item for chunk in items[start:] for item in chunk]
    if not recorded:
        return given
    body = given[1:] if given and _opens_window(given[0]) else given
    end = after_recorded(body, recorded, whole=True)
    if end is not None:
        return body[end:]
    if not body:
        return []
    raise TurnledgerError(
        f"call_model_input_filter of session {name!r}: the model input ({len(given)} items) "
        "does not continue this conversation's newest recorded items, so what is new in it "
        "cannot be told; nothing was recorded. Run with session= this TurnledgerSession, or "
        "give the items its get_items returned followed by the new ones"
    )
