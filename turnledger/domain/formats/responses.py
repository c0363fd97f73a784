"""OpenAI Responses items as the OpenAI Agents SDK keeps them, each checked to come back exactly.

`turnledger.domain.providers` converts the Responses format (`from_openai_responses_item`,
`to_openai_responses`); a session of the SDK must also hand back every item exactly as it was
added, so `from_responses_items` refuses an item that would not come back (`InvalidMessage`)
instead of storing it changed. Pure: an SDK object is read through its ``model_dump()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from turnledger.domain.errors import InvalidMessage
from turnledger.domain.messages import ConversationMessage, check_appended
from turnledger.domain.providers import (
    exact_openai_responses_item,
    from_openai_responses_item,
    plain,
    to_openai_responses,
)

__all__ = ["from_responses_items"]


def from_responses_items(items: Iterable[object]) -> list[ConversationMessage]:
    """One turnledger message per Responses item, each checked to come back exactly.

    An item of a shape whose conversion is exact by construction needs no check
    (`exact_openai_responses_item`); any other is converted, exported again and compared.
    Raises `InvalidMessage` naming the item when one is not a Responses input item or would
    not be returned as it was given.
    """
    messages: list[ConversationMessage] = []
    for i, raw in enumerate(items):
        item = raw if type(raw) is dict else plain(raw)
        converted = exact_openai_responses_item(item)
        if converted is None:
            messages.append(_checked(i, item))
        else:
            _appendable(i, converted)  # e.g. arguments of NaN, which the exact path keeps
            messages.append(converted)
    return messages


def _appendable(index: int, message: ConversationMessage) -> None:
    """What the append will check (`check_appended`), said here with the item's index."""
    try:
        check_appended(message)
    except InvalidMessage as error:
        raise InvalidMessage(f"items[{index}]: {error}") from None


def _checked(index: int, item: Any) -> ConversationMessage:
    """``item`` converted, or `InvalidMessage` when it does not come back exactly or holds
    what no message may (a value that is no JSON, NaN, an infinity: issue 33, ADR-0099),
    named with the item's index."""
    try:
        converted = from_openai_responses_item(item)
    except InvalidMessage as error:
        raise InvalidMessage(f"items[{index}]: {error}") from None
    _appendable(index, converted)
    if to_openai_responses((converted,)) != [item]:
        raise InvalidMessage(
            f"items[{index}] (type {item.get('type', 'message')!r}) would not be returned "
            "exactly as it was added; it was not recorded"
        )
    return converted
