"""Provider formats that group a turn's user side into one message (pure, no framework import).

`turnledger.domain.providers` converts the formats whose messages map one to one onto
turnledger's (OpenAI Chat Completions, Anthropic, OpenAI Responses). The formats here group
consecutive system, user and tool result pieces into one message, as their frameworks do:

- `turnledger.domain.formats.genai`: Google genai ``Content`` JSON (what Google ADK sends);
- `turnledger.domain.formats.pydantic_ai`: pydantic-ai's ``ModelRequest`` / ``ModelResponse``
  JSON (``ModelMessagesTypeAdapter``'s form).

Each works on the framework's own JSON form, both ways (``from_*_json``, ``to_*_json``), so
the framework is needed only where its objects are dumped or validated: in the integration
(`turnledger.integrations.google_adk`, `turnledger.integrations.pydantic_ai`). Every field
turnledger does not interpret is kept under the format's key in the ``extra`` of the block,
call, result or message it belongs to (`Keyed`), so ``to_X_json(from_X_json(raw)) == raw``
for every value the format has a form for; anything else is refused by name
(`InvalidMessage`), never dropped.

This module holds what the formats share: how a conversation is grouped into the format's
messages (`grouped`, ADR-0091), the keyed extras, and an assistant step's blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

from turnledger.domain.blocks import canonical_json, extra_fields
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolResults,
    assistant_blocks,
    from_chat_messages,
)

__all__ = [
    "Json",
    "Keyed",
    "Piece",
    "assistant_blocks",
    "conversation_of",
    "grouped",
    "split_groups",
    "user_side",
]

Json = dict[str, Any]
T = TypeVar("T")

Piece = tuple[ConversationMessage, int]
"""What one part of a grouped message is built from: a turnledger message and, for a
`ToolResults`, the index of its result (-1 for any other message)."""


class Keyed:
    """The fields a format keeps beside what turnledger interprets, under the format's key
    in an ``extra`` text (``{"google_adk": {...}}``), so formats never read each other's."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key

    def text(self, fields: Json) -> str:
        """The ``extra`` text holding ``fields`` under the key (``""`` for none)."""
        return canonical_json({self.key: fields}) if fields else ""

    def fields(self, extra: str) -> Json:
        """The fields ``extra`` holds under the key, as a new dict (empty for none)."""
        value = extra_fields(extra).get(self.key)
        return value if isinstance(value, dict) else {}


def conversation_of(
    history: Sequence[ChatMessage | ConversationMessage],
) -> list[ConversationMessage]:
    """The structured messages of a window (provider messages) or of a history (one kind or
    the other: `InvalidMessage` naming the first item that is not of it)."""
    chats = [m for m in history if isinstance(m, ChatMessage)]
    if len(chats) == len(history):
        return from_chat_messages(chats)
    for i, item in enumerate(history):
        if not isinstance(item, Chat | AssistantToolCalls | ToolResults):
            kind = ("a ChatMessage among ConversationMessages: give one kind" if isinstance(
                item, ChatMessage) else f"not a message: {type(item).__name__}")
            raise InvalidMessage(f"history[{i}] is {kind}")
    return list(cast("Sequence[ConversationMessage]", history))


def user_side(message: ConversationMessage) -> bool:
    """Whether ``message`` goes on the user side of a format that groups it (`grouped`)."""
    return isinstance(message, ToolResults) or (
        isinstance(message, Chat) and message.message.role in ("system", "user"))


def grouped(
    conversation: Sequence[ConversationMessage], opens: Callable[[str], bool]
) -> list[tuple[Piece, ...]]:
    """The format messages ``conversation`` makes where the user side is grouped (a
    pydantic-ai request, a genai ``user`` content), each as the pieces it is built from: an
    assistant message alone; consecutive system, user and tool result pieces together until one
    whose ``extra`` ``opens`` a message of its own (never the breadcrumb). A format message
    is then a function of its pieces alone, so it can be built once and kept."""

    def opening(piece: Piece) -> bool | None:
        message, index = piece
        if isinstance(message, ToolResults):
            return opens(message.results[index].extra)
        if not user_side(message):
            return None
        assert isinstance(message, Chat)
        return not message.message.synthetic and opens(message.message.extra)

    pieces = [(message, i) for message in conversation
              for i in (range(len(message.results)) if isinstance(message, ToolResults)
                        else (-1,))]
    return [tuple(group) for group in split_groups(pieces, opening)]


def split_groups(items: Iterable[T], opening: Callable[[T], bool | None]) -> list[list[T]]:
    """`grouped`'s rule over any items: one whose ``opening`` is None (the assistant side) is a
    group of its own; the others join the group before them unless they open one or follow the
    assistant side. Shared by `grouped` (structured messages) and the integrations' cache of
    built messages (a window's provider messages)."""
    groups: list[list[T]] = []
    in_user_side = False
    for item in items:
        opens_group = opening(item)
        if opens_group is None:
            groups.append([item])
            in_user_side = False
            continue
        if opens_group or not in_user_side:
            groups.append([])
        groups[-1].append(item)
        in_user_side = True
    return groups
