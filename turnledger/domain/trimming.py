"""Whole-turn trimming (R3-R10, R31, R32): drop the oldest turns, never part of one.

A trimmed history has one shape, whatever the limit and the representation::

    [leading system messages] [late system messages of the dropped region] [breadcrumb]
    [everything from the first kept turn start to the end]

- leading system messages are kept (R4); system messages found later in the dropped region are
  kept too, moved behind the leading ones, so no instruction is lost (R9; done for both
  representations);
- one fresh breadcrumb (R31) replaces any earlier synthetic breadcrumb of the dropped region:
  breadcrumbs never stack, and the replaced one is not a dropped message (R32);
- the preamble (messages between the leading systems and the first turn) is dropped with the
  first turn and counted;
- the newest turn is always kept, even over the limit (R6).

When nothing has to be dropped the input comes back identical (R5, R10).

The rules themselves, "how many turns to drop" and "what the result costs", are exposed as small
functions (`turns_to_drop_for_budget`, `turns_to_drop_for_count`, `tokens_after_dropping`,
`drop_oldest_turns`) so that the incremental session applies the very same rules with its own
prefix sums, in O(log turns) per decision.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Generic, TypeVar

import attrs

from turnledger.domain.estimate import (
    BREADCRUMB_TOKENS,
    estimate_history_tokens,
    message_costs,
)
from turnledger.domain.messages import (
    Chat,
    ChatMessage,
    ConversationMessage,
    is_breadcrumb,
    to_chat_messages,
)
from turnledger.domain.turns import (
    Segmentation,
    is_breadcrumb_item,
    is_system_item,
    is_system_message,
    segment,
    segment_conversation,
)

__all__ = [
    "TrimResult",
    "cost_prefix_sums",
    "drop_oldest_turns",
    "tokens_after_dropping",
    "trim_conversation_to_recent_turns",
    "trim_to_recent_turn_count",
    "trim_to_recent_turns",
    "turns_to_drop_for_budget",
    "turns_to_drop_for_count",
]

T = TypeVar("T")


@attrs.frozen
class TrimResult(Generic[T]):
    """The outcome of one trim (R10).

    ``history`` is the kept history (``ChatMessage`` or ``ConversationMessage`` items, matching
    the input). ``dropped_messages`` counts real dropped messages only: not the leading or late
    system messages that were kept, not a replaced breadcrumb (R32). ``trimmed`` is true only when
    at least one whole turn was dropped; ``tokens_before`` / ``tokens_after`` are
    `estimate_history_tokens` of the input and of ``history``.
    """

    history: tuple[T, ...]
    dropped_messages: int
    dropped_turns: int
    kept_turns: int
    tokens_before: int
    tokens_after: int
    trimmed: bool


def _check_limit(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


# --- the rules, reusable with prefix sums --------------------------------------------------------


def turns_to_drop_for_count(turn_count: int, max_turns: int) -> int:
    """How many of the oldest turns the turn limit drops (R6, R8, R9, R29).

    Keeps the newest ``max(max_turns, 1)`` turns: a limit of 0 still keeps the newest turn.
    Raises ValueError for a negative ``max_turns``.
    """
    _check_limit("max_turns", max_turns)
    return max(0, turn_count - max(max_turns, 1))


def turns_to_drop_for_budget(
    turn_count: int,
    tokens_after: Callable[[int], int],
    budget_tokens: int,
) -> int:
    """The fewest oldest turns to drop so the result fits ``budget_tokens`` (R6, R7).

    ``tokens_after(k)`` is the estimate of the history once its ``k`` oldest turns are dropped
    (``tokens_after(0)``: the untouched history); for ``k >= 1`` it must not increase with ``k``,
    which `tokens_after_dropping` guarantees. Returns 0 when the budget is 0 (trimming disabled),
    when there are fewer than two turns, or when the history already fits; otherwise the smallest
    ``k`` in ``1 .. turn_count - 1`` whose result fits, or ``turn_count - 1`` when none does (the
    newest turn is kept even over budget). Calls ``tokens_after`` O(log turn_count) times.
    Raises ValueError for a negative ``budget_tokens``.
    """
    _check_limit("budget_tokens", budget_tokens)
    if budget_tokens == 0 or turn_count <= 1 or tokens_after(0) <= budget_tokens:
        return 0
    lo, hi = 1, turn_count - 1
    while lo < hi:  # binary search for the first k that fits; hi when none does
        mid = (lo + hi) // 2
        if tokens_after(mid) <= budget_tokens:
            hi = mid
        else:
            lo = mid + 1
    return lo


def cost_prefix_sums(
    history: Sequence[ChatMessage], costs: Sequence[int]
) -> tuple[list[int], list[int]]:
    """Prefix sums of ``costs`` over all messages and over system messages only.

    Both lists have ``len(history) + 1`` items, starting at 0: ``prefix[i] = sum(costs[:i])``.
    They are the inputs of `tokens_after_dropping`.
    """
    prefix = list(accumulate(costs, initial=0))
    system_prefix = list(
        accumulate(
            (c if m.role == "system" else 0 for m, c in zip(history, costs)),
            initial=0,
        )
    )
    return prefix, system_prefix


def tokens_after_dropping(
    seg: Segmentation,
    prefix: Sequence[int],
    system_prefix: Sequence[int],
    dropped_turns: int,
    *,
    breadcrumb_tokens: int = BREADCRUMB_TOKENS,
) -> int:
    """The estimate of the history once its ``dropped_turns`` oldest turns are dropped; O(1).

    ``prefix`` / ``system_prefix`` come from `cost_prefix_sums` (or a session's running sums).
    The result keeps the leading systems, the late systems of the dropped region, one breadcrumb
    (``breadcrumb_tokens``; pass 0 when none is inserted) and the suffix from the first kept turn.
    Exact, because the newest turn is always kept: the current turn (R22) does not move, so no
    kept message changes cost.
    """
    total = prefix[-1]
    if dropped_turns == 0:
        return total
    first_kept = seg.turn_starts[dropped_turns]
    late_systems = system_prefix[first_kept] - system_prefix[seg.leading_end]
    return (
        prefix[seg.leading_end]
        + late_systems
        + breadcrumb_tokens
        + (total - prefix[first_kept])
    )


def drop_oldest_turns(
    items: Sequence[T],
    seg: Segmentation,
    dropped_turns: int,
    *,
    is_system: Callable[[T], bool],
    is_breadcrumb: Callable[[T], bool],
    breadcrumb: T | None,
) -> tuple[tuple[T, ...], int]:
    """Build the trimmed history and count its dropped messages (R4, R9, R31, R32).

    Returns ``(history, dropped_messages)``. ``dropped_turns`` must be in
    ``1 .. seg.turn_count - 1``. Late system messages of the dropped region are kept; an earlier
    breadcrumb there is removed and not counted; ``breadcrumb`` (None: insert none, as the legacy
    loop does, R34) goes right before the first kept turn.
    """
    first_kept = seg.turn_starts[dropped_turns]
    late_systems: list[T] = []
    dropped = 0
    for item in items[seg.leading_end : first_kept]:
        if is_system(item):
            late_systems.append(item)
        elif not is_breadcrumb(item):
            dropped += 1
    marker = () if breadcrumb is None else (breadcrumb,)
    kept = (*items[: seg.leading_end], *late_systems, *marker, *items[first_kept:])
    return kept, dropped


# --- the three trimming functions (R7-R9) ---------------------------------------------------------


def _untouched(history: Sequence[T], turn_count: int, tokens: int) -> TrimResult[T]:
    return TrimResult(tuple(history), 0, 0, turn_count, tokens, tokens, False)


def _trim_chat(
    history: Sequence[ChatMessage],
    seg: Segmentation,
    prefix: Sequence[int],
    system_prefix: Sequence[int],
    dropped_turns: int,
    breadcrumb: bool,
) -> TrimResult[ChatMessage]:
    if dropped_turns == 0:
        return _untouched(history, seg.turn_count, prefix[-1])
    kept, dropped = drop_oldest_turns(
        history,
        seg,
        dropped_turns,
        is_system=is_system_message,
        is_breadcrumb=is_breadcrumb,
        breadcrumb=ChatMessage.breadcrumb() if breadcrumb else None,
    )
    after = tokens_after_dropping(
        seg,
        prefix,
        system_prefix,
        dropped_turns,
        breadcrumb_tokens=BREADCRUMB_TOKENS if breadcrumb else 0,
    )
    return TrimResult(
        kept, dropped, dropped_turns, seg.turn_count - dropped_turns, prefix[-1], after, True
    )


def trim_to_recent_turns(
    history: Sequence[ChatMessage], budget_tokens: int, *, breadcrumb: bool = True
) -> TrimResult[ChatMessage]:
    """Enforce the token budget by dropping the oldest whole turns, as few as possible (R7).

    The estimate of the *result*, breadcrumb included, must fit ``budget_tokens``; the newest
    turn is kept even when it alone exceeds it (R6). ``budget_tokens == 0`` disables trimming.
    ``breadcrumb=False`` inserts no breadcrumb (R34). O(n + turns) for n messages.
    Raises ValueError for a negative ``budget_tokens``.
    """
    _check_limit("budget_tokens", budget_tokens)
    seg = segment(history)
    prefix, system_prefix = cost_prefix_sums(history, message_costs(history))
    crumb = BREADCRUMB_TOKENS if breadcrumb else 0
    dropped_turns = turns_to_drop_for_budget(
        seg.turn_count,
        lambda k: tokens_after_dropping(seg, prefix, system_prefix, k, breadcrumb_tokens=crumb),
        budget_tokens,
    )
    return _trim_chat(history, seg, prefix, system_prefix, dropped_turns, breadcrumb)


def trim_to_recent_turn_count(
    history: Sequence[ChatMessage], max_turns: int, *, breadcrumb: bool = True
) -> TrimResult[ChatMessage]:
    """Enforce the turn limit on a provider-facing history (R8, R28, R29).

    Keeps the newest ``max(max_turns, 1)`` turns (R6: 0 keeps the newest turn).
    ``breadcrumb=False`` inserts no breadcrumb (the legacy loop, R34).
    Raises ValueError for a negative ``max_turns``.
    """
    _check_limit("max_turns", max_turns)
    seg = segment(history)
    prefix, system_prefix = cost_prefix_sums(history, message_costs(history))
    dropped_turns = turns_to_drop_for_count(seg.turn_count, max_turns)
    return _trim_chat(history, seg, prefix, system_prefix, dropped_turns, breadcrumb)


def trim_conversation_to_recent_turns(
    history: Sequence[ConversationMessage], max_turns: int, *, breadcrumb: bool = True
) -> TrimResult[ConversationMessage]:
    """Enforce the turn limit on a structured history (R9, R28, R29).

    Keeps the newest ``max(max_turns, 1)`` turns. Late system messages of the dropped region are
    kept, moved behind the leading ones. ``dropped_messages`` counts ConversationMessage items;
    the token counts are those of `to_chat_messages` of the input and the result.
    Raises ValueError for a negative ``max_turns``.
    """
    _check_limit("max_turns", max_turns)
    seg = segment_conversation(history)
    before = estimate_history_tokens(to_chat_messages(history))
    dropped_turns = turns_to_drop_for_count(seg.turn_count, max_turns)
    if dropped_turns == 0:
        return _untouched(history, seg.turn_count, before)
    kept, dropped = drop_oldest_turns(
        history,
        seg,
        dropped_turns,
        is_system=is_system_item,
        is_breadcrumb=is_breadcrumb_item,
        breadcrumb=Chat(ChatMessage.breadcrumb()) if breadcrumb else None,
    )
    after = estimate_history_tokens(to_chat_messages(kept))
    return TrimResult(
        kept, dropped, dropped_turns, seg.turn_count - dropped_turns, before, after, True
    )
