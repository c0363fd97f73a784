"""Conversation items: Responses-format items in, turnledger messages recorded, the same out.

Each item is one message of the session's log (``from_openai_responses([item])``), so an item
is one position, ``Session.pop`` removes exactly one and an item's id is stable for as long as
the log holds it. What is stored is the item as the API answers with it, in OpenAI's shape: an
``id`` (given, or ``msg_``/``fc_``/``rs_``... and 32 random hex digits), a message's ``type``
and ``status``, a string content as one text part of its role's type. Before anything is
recorded the stored form must come back exactly from the record
(``to_openai_responses``); an item that would not, or whose tool output the profile would
truncate (R38), is refused with the reason and none of the request's items is recorded
(ADR-0042's rule, at the server's door).

The items of a conversation are a fold of its log: `MessageAppended` adds one,
`MessagePopped` takes the one at its position away, `HistoryCleared` all so far. A message
recorded without this API (the library, an integration, ``turnledger import`` writing to the
same session) is listed in the same shape, each of its Responses items with an id made of its
log position (`_recorded_id`). Trims do not remove items: the list is the record, the window
(``POST .../window``) is what a model sees.
"""

from __future__ import annotations

import contextlib
import copy
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import turnledger as tl
from turnledger.events import HistoryCleared, MessageAppended, MessagePopped
from turnledger.providers import from_openai_responses, to_openai_responses

__all__ = ["DUPLICATE_ID", "ItemError", "ItemFold", "StoredItem", "items_of", "prepare_items"]

Item = dict[str, Any]

_PREFIXES = {
    "message": "msg_",
    "function_call": "fc_",
    "function_call_output": "fco_",
    "reasoning": "rs_",
    "web_search_call": "ws_",
    "file_search_call": "fs_",
    "computer_call": "cu_",
    "computer_call_output": "cuo_",
    "image_generation_call": "ig_",
    "code_interpreter_call": "ci_",
    "local_shell_call": "lsh_",
    "local_shell_call_output": "lsho_",
    "mcp_call": "mcp_",
    "custom_tool_call": "ctc_",
    "custom_tool_call_output": "ctco_",
}
_TEXT_PART = {"assistant": "output_text"}


class ItemError(ValueError):
    """An item the server refuses; ``param`` names it as OpenAI's errors do (``items[2]``)."""

    def __init__(self, message: str, param: str, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.param = param
        self.code = code


DUPLICATE_ID: Final = "duplicate_item_id"
"""The error code of an item whose id the conversation (or the request) already holds: a
client that retries a request whose answer it lost reads it as "stored before"."""


def item_id_prefix(item_type: str) -> str:
    """The id prefix OpenAI gives an item of this type (``item_`` for one it has none for)."""
    return _PREFIXES.get(item_type, "item_")


def _type_of(item: Item) -> object:
    """An item's type: its own, or a message for one with a role and no type (the Responses
    API's short form)."""
    return item.get("type") or ("message" if "role" in item else "")


def _normalized(item: object, index: int) -> Item:
    """The item as the API answers with it (module doc); the given dict is not changed."""
    if not isinstance(item, dict):
        raise ItemError(f"items[{index}] must be an object, got {type(item).__name__}",
                        f"items[{index}]")
    out: Item = copy.deepcopy(item)
    if "type" not in out and "role" in out:
        out["type"] = _type_of(out)
    kind = out.get("type")
    if not isinstance(kind, str) or not kind:
        raise ItemError(f"items[{index}] has no 'type'", f"items[{index}].type")
    if kind == "message":
        role = out.get("role")
        if isinstance(out.get("content"), str) and isinstance(role, str):
            part: Item = {"type": _TEXT_PART.get(role, "input_text"), "text": out["content"]}
            if part["type"] == "output_text":
                part["annotations"] = []
            out["content"] = [part]
        out.setdefault("status", "completed")
    given = out.get("id")
    if given is None:
        out["id"] = item_id_prefix(kind) + secrets.token_hex(16)
    elif not isinstance(given, str) or not given:
        raise ItemError(f"items[{index}].id must be a non-empty string", f"items[{index}].id")
    return out


def _too_long(message: tl.ConversationMessage, max_chars: int) -> bool:
    if not isinstance(message, tl.ToolResults):
        return False
    return any(tl.truncate_tool_result(r.content, max_chars) != r.content
               for r in message.results)


def prepare_items(items: object, existing_ids: Iterable[str], max_tool_result_chars: int,
                  ) -> tuple[list[Item], list[tl.ConversationMessage]]:
    """The stored form of each item and its message, or `ItemError` naming the first refused.

    ``existing_ids``: the ids the conversation holds; an item id must be unique in it.
    """
    if not isinstance(items, list):
        raise ItemError("'items' must be an array of items", "items")
    seen = set(existing_ids)
    stored: list[Item] = []
    messages: list[tl.ConversationMessage] = []
    for index, given in enumerate(items):
        item = _normalized(given, index)
        if item["id"] in seen:
            raise ItemError(f"items[{index}]: an item with id {item['id']!r} is already in "
                            "this conversation", f"items[{index}].id", DUPLICATE_ID)
        seen.add(item["id"])
        try:
            converted = from_openai_responses([item])
            back = to_openai_responses(converted)
        except (tl.InvalidMessage, TypeError, ValueError) as error:
            raise ItemError(f"items[{index}] is not a Responses input item turnledger can "
                            f"record: {error}", f"items[{index}]") from None
        if len(converted) != 1 or back != [item]:
            raise ItemError(f"items[{index}] (type {item['type']!r}) would not come back "
                            "exactly as given from turnledger's record; nothing was stored",
                            f"items[{index}]")
        if _too_long(converted[0], max_tool_result_chars):
            raise ItemError(f"items[{index}]: the tool output is longer than the profile's "
                            f"max_tool_result_chars ({max_tool_result_chars}), which the record "
                            "would truncate (R38); nothing was stored", f"items[{index}]")
        stored.append(item)
        messages.append(converted[0])
    return stored, messages


class StoredItem:
    """An item of the conversation and its log position."""

    __slots__ = ("item", "position")

    def __init__(self, position: int, item: Item) -> None:
        self.position = position
        self.item = item


def _recorded_id(item: Item, position: int, index: int) -> str:
    """The id of an item recorded without one (by the library, an integration or an import,
    not through this API): its type's prefix and 32 hex digits of its log position and its
    place among the items of that message, so every replica gives the same id for as long
    as the log holds it."""
    return f"{item_id_prefix(str(_type_of(item)))}{position:024x}{index:08x}"


def _items_at(message: tl.ConversationMessage, position: int) -> tuple[StoredItem, ...]:
    """The items of the message at ``position``: one as this API recorded it, or, for a
    message recorded elsewhere, each of its Responses items in the API's shape with a
    `_recorded_id` (a tool step of two calls is two items)."""
    items = to_openai_responses([message])
    if len(items) == 1 and "id" in items[0]:
        return (StoredItem(position, items[0]),)
    shaped = []
    for index, item in enumerate(items):
        with_id = {**item, "id": item.get("id") or _recorded_id(item, position, index)}
        with contextlib.suppress(ItemError):  # a kind the API has no shape for: as recorded
            with_id = _normalized(with_id, index)
        shaped.append(StoredItem(position, with_id))
    return tuple(shaped)


def _fold(shown: dict[int, tuple[StoredItem, ...]], events: Sequence[tl.DomainEvent]) -> None:
    for event in events:
        if isinstance(event, MessageAppended):
            shown[event.position] = _items_at(event.message, event.position)
        elif isinstance(event, MessagePopped):
            shown.pop(event.position, None)
        elif isinstance(event, HistoryCleared):
            shown.clear()


def _in_order(shown: dict[int, tuple[StoredItem, ...]]) -> list[StoredItem]:
    return [item for position in sorted(shown) for item in shown[position]]


def items_of(events: Sequence[tl.DomainEvent]) -> list[StoredItem]:
    """The conversation's items, oldest first: the fold of the module doc."""
    shown: dict[int, tuple[StoredItem, ...]] = {}
    _fold(shown, events)
    return _in_order(shown)


class ItemFold:
    """The items of one conversation, kept folded by one process: each read asks the log
    only for what was recorded after the version it last saw (by this process or another
    replica), so a list or an id check costs the new events, not the whole log."""

    def __init__(self) -> None:
        self.version = 0
        self._shown: dict[int, tuple[StoredItem, ...]] = {}
        self._lock = threading.Lock()

    def current(self, read: Callable[[int], Sequence[tl.DomainEvent]]) -> list[StoredItem]:
        """The items as committed now; ``read(v)`` gives the events after version ``v``."""
        with self._lock:
            self._catch_up(read)
            return _in_order(self._shown)

    def ids(self, version: int, read: Callable[[int], Sequence[tl.DomainEvent]]) -> set[str]:
        """The ids of the items as of ``version`` or later, read from the log only when the
        fold stands before ``version``: the check of a write that is conditional on
        ``version`` (a newer item of another writer makes the write conflict, and the retry
        checks again from a newer version)."""
        with self._lock:
            if self.version < version:
                self._catch_up(read)
            return {s.item["id"] for at in self._shown.values() for s in at}

    def _catch_up(self, read: Callable[[int], Sequence[tl.DomainEvent]]) -> None:
        events = read(self.version)
        if events:
            _fold(self._shown, events)
            self.version = events[-1].originator_version

    def recorded(self, after: int, events: Sequence[tl.DomainEvent]) -> None:
        """Fold ``events``, which this process recorded right after version ``after`` (a
        write's own events): a fold that stood at ``after`` takes them without reading them
        back from the log; any other fold reads them on its next `current`."""
        with self._lock:
            if (events and self.version == after
                    and events[0].originator_version == after + 1):
                _fold(self._shown, events)
                self.version = events[-1].originator_version

    def passed(self, after: int, version: int) -> None:
        """Move a fold that stood at ``after`` to ``version``: the caller recorded the events
        between and knows none of them appends, pops or clears (a `RequestPrepared` alone)."""
        with self._lock:
            if self.version == after:
                self.version = version
