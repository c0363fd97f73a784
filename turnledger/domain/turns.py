"""Turn segmentation: the one place that says where turns begin (R1, R2, R4, R31).

A history is read as three regions::

    [leading system messages] [preamble] [turn 1] [turn 2] ... [turn N]

- the *leading system messages* are the maximal prefix of system messages (R4): always kept,
  never counted as turns or as dropped messages;
- a *turn* starts at a real user message (`is_real_user_message`: not a ``[Tool results]``
  carrier (R2), not the synthetic breadcrumb (R31)) and runs up to the next one (R1);
- the *preamble* is whatever sits between the leading system messages and the first turn (an
  earlier breadcrumb, an assistant greeting, a late system message). It belongs to no turn.

Both representations, the provider-facing `ChatMessage` list and the structured
`ConversationMessage` list, are segmented by the same generic `segment_by`, so the turn rule
exists once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import attrs

from turnledger.domain.messages import (
    Chat,
    ChatMessage,
    ConversationMessage,
    is_breadcrumb,
    is_real_user_message,
)

__all__ = [
    "Segmentation",
    "count_conversation_turns",
    "count_turns",
    "is_breadcrumb_item",
    "is_system_item",
    "is_system_message",
    "is_turn_start_item",
    "segment",
    "segment_by",
    "segment_conversation",
]

T = TypeVar("T")


@attrs.frozen
class Segmentation:
    """Where the leading system messages end and where each turn starts.

    ``leading_end`` is the number of leading system messages (R4). ``turn_starts`` are the
    indices of the real user messages, ascending (R1, R2); turn ``i`` spans
    ``turn_starts[i]`` up to ``turn_starts[i + 1]`` (or the end of the history).
    """

    leading_end: int
    turn_starts: tuple[int, ...]

    @property
    def turn_count(self) -> int:
        """The number of turns (R28: the unit of the turn limit)."""
        return len(self.turn_starts)

    @property
    def last_turn_start(self) -> int | None:
        """Index of the newest real user message: the current turn starts here (R21, R22)."""
        return self.turn_starts[-1] if self.turn_starts else None


def segment_by(
    items: Sequence[T],
    is_system: Callable[[T], bool],
    is_turn_start: Callable[[T], bool],
) -> Segmentation:
    """Segment any history given its two predicates; O(n).

    ``is_system`` decides the leading run (R4); ``is_turn_start`` decides where turns begin
    (R1, R2). A system message is never a turn start, so turn starts lie at or after
    ``leading_end``.
    """
    leading_end = 0
    for item in items:
        if not is_system(item):
            break
        leading_end += 1
    starts = tuple(i for i in range(leading_end, len(items)) if is_turn_start(items[i]))
    return Segmentation(leading_end, starts)


def is_system_message(message: ChatMessage) -> bool:
    """True for a system message: the leading run is kept, late ones move behind it (R4, R9)."""
    return message.role == "system"


def is_system_item(item: ConversationMessage) -> bool:
    """True for a `Chat` wrapping a system message (R4, R9)."""
    return isinstance(item, Chat) and item.message.role == "system"


def is_turn_start_item(item: ConversationMessage) -> bool:
    """True for a `Chat` wrapping a real user message: a turn starts here (R1, R2, R31)."""
    return isinstance(item, Chat) and is_real_user_message(item.message)


def is_breadcrumb_item(item: ConversationMessage) -> bool:
    """True for a `Chat` wrapping the synthetic breadcrumb (R31)."""
    return isinstance(item, Chat) and is_breadcrumb(item.message)


def segment(history: Sequence[ChatMessage]) -> Segmentation:
    """Segment a provider-facing history into leading systems and turns (R1, R2, R4)."""
    return segment_by(history, is_system_message, is_real_user_message)


def segment_conversation(history: Sequence[ConversationMessage]) -> Segmentation:
    """Segment a structured history into leading systems and turns (R1, R2, R4, R9)."""
    return segment_by(history, is_system_item, is_turn_start_item)


def count_turns(history: Sequence[ChatMessage]) -> int:
    """The number of turns of a provider-facing history (R1, R2, R28)."""
    return segment(history).turn_count


def count_conversation_turns(history: Sequence[ConversationMessage]) -> int:
    """The number of turns of a structured history (R1, R2, R28)."""
    return segment_conversation(history).turn_count
