"""Whole-turn trimming (R3-R10, R28-R32): drop the oldest turns, never part of one.

A trimmed history has one shape, whatever the limit and the representation (`Window`)::

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

This module says *how many* turns a limit drops (`turns_to_drop_for_budget`,
`turns_to_drop_for_count`, and the windows they leave, `window_for_budget`, `window_for_count`);
`turnledger.domain.window` says what the kept view is and costs. The pure trims below and the
session both use the two, on an index of the history or on the session's own.

The channel sender cache's limit (R30) is not a turn limit: `trim_to_recent_message_rows`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, Generic, TypeVar

import attrs

from turnledger.domain.arguments import require_int
from turnledger.domain.budget import DEFAULT_MAX_HISTORY_TURNS, low_water_turns
from turnledger.domain.messages import ChatMessage, ConversationMessage
from turnledger.domain.window import (
    CHAT_ROWS,
    ONCE_CONVERSATION_ROWS,
    Rows,
    Window,
    WindowIndex,
)

__all__ = [
    "DEFAULT_MAX_MESSAGE_ROWS",
    "TrimResult",
    "trim_conversation_to_recent_turns",
    "trim_to_recent_message_rows",
    "trim_to_recent_turn_count",
    "trim_to_recent_turns",
    "turns_to_drop_for_budget",
    "turns_to_drop_for_count",
    "window_for_budget",
    "window_for_count",
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
    if require_int(name, value) < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


# --- the rules: how many turns a limit drops, and the window that leaves -----------------------


def turns_to_drop_for_count(
    turn_count: int, max_turns: int, *, low_water: float | None = None
) -> int:
    """How many of the oldest turns the turn limit drops (R6, R8, R9, R29).

    Nothing while at most ``max(max_turns, 1)`` turns are held: a limit of 0 still keeps the
    newest turn. Over it, the spec's trim keeps the newest ``max(max_turns, 1)``; with a
    ``low_water`` (issue 35, `Compaction.low_water`) it keeps the newest
    ``max(1, floor(low_water × max_turns))`` (`low_water_turns`), so the next trim waits for
    the turns between the two. Raises ValueError for a negative ``max_turns``.
    """
    _check_limit("max_turns", max_turns)
    if turn_count <= max(max_turns, 1):
        return 0
    return turn_count - low_water_turns(max_turns, low_water)


def turns_to_drop_for_budget(
    turn_count: int,
    tokens_after: Callable[[int], int],
    budget_tokens: int,
    *,
    down_to: int | None = None,
    over: int | None = None,
) -> int:
    """The fewest oldest turns to drop so the result fits ``budget_tokens`` (R6, R7).

    ``tokens_after(k)`` is the estimate of the history once its ``k`` oldest turns are dropped
    (``tokens_after(0)``: the untouched history); for ``k >= 1`` it must not increase with ``k``,
    which `WindowIndex.tokens` guarantees. Returns 0 when the budget is 0 (trimming disabled),
    when there are fewer than two turns, or when the history already fits; otherwise the smallest
    ``k`` in ``1 .. turn_count - 1`` whose result fits, or ``turn_count - 1`` when none does (the
    newest turn is kept even over budget). Calls ``tokens_after`` O(log turn_count) times.

    ``down_to`` (issue 35, a low-water target, 0 allowed): the trim still happens only when
    the history exceeds the budget, but then the result must fit ``down_to`` instead (the
    smallest such ``k``, else ``turn_count - 1``). ``over``: the estimate the history must
    exceed for a trim instead of the budget (a trim already forced, whose first part cleared
    tool results, goes on when the history exceeds ``down_to``); 0 is a number here, not a
    switch. Raises ValueError for a negative ``budget_tokens``, ``down_to`` or ``over``, or
    either over the budget.
    """
    _check_limit("budget_tokens", budget_tokens)
    target = _at_most("down_to", down_to, budget_tokens)
    trigger = _at_most("over", over, budget_tokens)
    if budget_tokens == 0 or turn_count <= 1 or tokens_after(0) <= trigger:
        return 0
    lo, hi = 1, turn_count - 1
    while lo < hi:  # binary search for the first k that fits; hi when none does
        mid = (lo + hi) // 2
        if tokens_after(mid) <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _at_most(name: str, value: int | None, budget_tokens: int) -> int:
    """``value`` (the budget when None) after checking it is a count at most the budget."""
    if value is None:
        return budget_tokens
    _check_limit(name, value)
    if value > budget_tokens:
        raise ValueError(f"{name} must be <= budget_tokens ({budget_tokens}), got {value}")
    return value


def window_for_count(
    index: WindowIndex[T], window: Window, max_turns: int, *, breadcrumb: bool = True,
    low_water: float | None = None,
) -> Window | None:
    """The window the turn limit leaves of ``window`` (R6, R8, R9, R29); None: nothing drops.

    ``breadcrumb=False``: the kept view gets no breadcrumb (the legacy loop, R34).
    ``low_water``: a forced trim keeps `low_water_turns` turns (issue 35).
    """
    # Counted, not copied: with the turn limit off the window may hold every turn.
    dropped = turns_to_drop_for_count(
        index.count_turns_from(window.start), max_turns, low_water=low_water
    )
    return Window(index.turn_from(window.start, dropped), breadcrumb) if dropped else None


def window_for_budget(
    index: WindowIndex[T], window: Window, budget_tokens: int, *, breadcrumb: bool = True,
    down_to: int | None = None, over: int | None = None,
) -> Window | None:
    """The window the token budget leaves of ``window`` (R6, R7, R12); None: nothing drops.

    The estimate of the result, breadcrumb included, is what must fit; O(log turns).
    ``down_to``, ``over``: what a forced trim's result must fit instead, and what forces it
    (issue 35, `turns_to_drop_for_budget`).
    """
    starts = index.turns_from(window.start)

    def tokens_after(dropped: int) -> int:
        return index.tokens(Window(starts[dropped], breadcrumb) if dropped else window)

    dropped = turns_to_drop_for_budget(len(starts), tokens_after, budget_tokens,
                                       down_to=down_to, over=over)
    return Window(starts[dropped], breadcrumb) if dropped else None


# --- the three trimming functions (R7-R9) ---------------------------------------------------------

def _trim(
    history: Sequence[T],
    rows: Rows[T],
    pick: Callable[[WindowIndex[T], Window], Window | None],
) -> TrimResult[T]:
    """Trim ``history`` to the window ``pick`` chooses; the input itself when it chooses none.

    Dropped messages are counted as items: a `ChatMessage` history's items are its messages,
    and a structured history counts `ConversationMessage` items (R10).
    """
    index = WindowIndex.of(rows, history)
    whole = Window()
    kept = pick(index, whole)
    if kept is None:
        tokens = index.tokens(whole)
        return TrimResult(tuple(history), 0, 0, len(index.turns_from(0)), tokens, tokens, False)
    cut = index.cut(whole, kept)
    return TrimResult(
        tuple(index.render(kept)),
        cut.dropped_messages,
        cut.dropped_turns,
        cut.kept_turns,
        cut.tokens_before,
        cut.tokens_after,
        True,
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
    return _trim(
        history,
        CHAT_ROWS,
        lambda index, whole: window_for_budget(
            index, whole, budget_tokens, breadcrumb=breadcrumb
        ),
    )


def trim_to_recent_turn_count(
    history: Sequence[ChatMessage], max_turns: int, *, breadcrumb: bool = True
) -> TrimResult[ChatMessage]:
    """Enforce the turn limit on a provider-facing history (R8, R28, R29).

    Keeps the newest ``max(max_turns, 1)`` turns (R6: 0 keeps the newest turn).
    ``breadcrumb=False`` inserts no breadcrumb (the legacy loop, R34).
    Raises ValueError for a negative ``max_turns``.
    """
    _check_limit("max_turns", max_turns)
    return _trim(
        history,
        CHAT_ROWS,
        lambda index, whole: window_for_count(index, whole, max_turns, breadcrumb=breadcrumb),
    )


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
    return _trim(
        history,
        ONCE_CONVERSATION_ROWS,
        lambda index, whole: window_for_count(index, whole, max_turns, breadcrumb=breadcrumb),
    )


# --- the channel sender cache (R30) ---------------------------------------------------------------

DEFAULT_MAX_MESSAGE_ROWS: Final = DEFAULT_MAX_HISTORY_TURNS
"""The row limit a channel sender cache uses when configured with 0 (R30): the setting's
default, 50, counted here in message rows."""


def trim_to_recent_message_rows(
    history: Sequence[ChatMessage], max_rows: int
) -> tuple[ChatMessage, ...]:
    """Keep the newest ``max_rows`` message rows: the channel sender cache's limit (R30).

    Not the turn limit (R28, R29): every row takes one slot whatever its role, so a user, an
    assistant, a tool and a system row count alike, a tool result may be kept without its call,
    and system rows are neither kept ahead (R4) nor rescued (R9). ``max_rows == 0`` means
    `DEFAULT_MAX_MESSAGE_ROWS`, not "only the newest turn" (R29); no breadcrumb is inserted.
    A history that fits comes back unchanged. Raises ValueError for a negative ``max_rows``.
    """
    _check_limit("max_rows", max_rows)
    limit = max_rows or DEFAULT_MAX_MESSAGE_ROWS
    return tuple(history[-limit:]) if len(history) > limit else tuple(history)
