"""The kept view of a history and its cost, in one place (R3-R6, R9, R20-R23, R31, R32).

Trimming only ever drops the oldest whole turns (R3), so every kept view has one shape::

    [head: the leading system messages, then system messages retained from forgotten items]
    [the system messages of the log before ``start``]    (rescued from dropped turns, R4, R9)
    [the breadcrumb, when the view has one]              (R31: at most one)
    [the log from ``start`` to its end, swept items skipped]

A `Window` is that choice: where the kept suffix starts and whether a breadcrumb precedes it.
A `WindowIndex` holds a log and the prefix sums that render a window in O(what is kept) and
price it in O(1). The pure trims (`turnledger.domain.trimming`) index the history they are
given; a session (`turnledger.domain.state`) keeps its index up to date event by event. Both
render, price and count a trim here, so each of those rules has one home (ADR-0006).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache, partial
from itertools import accumulate, compress, count
from operator import is_not, mul
from typing import Generic, TypeVar, cast

import attrs

from turnledger.domain.estimate import (
    BREADCRUMB_TOKENS,
    base_message_tokens,
    current_turn_surcharge,
)
from turnledger.domain.messages import (
    Chat,
    ChatMessage,
    ConversationMessage,
    is_breadcrumb,
    is_real_user_message,
    to_chat_messages,
)
from turnledger.domain.turns import (
    is_breadcrumb_item,
    is_system_item,
    is_system_message,
    is_turn_start_item,
)

__all__ = [
    "CHAT_ROWS",
    "CONVERSATION_ROWS",
    "ONCE_CONVERSATION_ROWS",
    "Cut",
    "Rows",
    "Window",
    "WindowIndex",
    "chat_of",
]

T = TypeVar("T")


@attrs.frozen
class Rows(Generic[T]):
    """How one representation of a history is read: `CHAT_ROWS` or `CONVERSATION_ROWS`.

    ``is_system`` says what the head keeps and a trim rescues (R4, R9); ``is_turn_start`` where
    turns begin (R1, R2); ``is_breadcrumb`` what a trim removes without counting it (R32);
    ``base_tokens`` an item's estimate outside the current turn and ``surcharge`` what it costs
    more inside it (R20-R23); ``sent`` how many provider-facing messages it becomes.
    """

    is_system: Callable[[T], bool]
    is_turn_start: Callable[[T], bool]
    is_breadcrumb: Callable[[T], bool]
    base_tokens: Callable[[T], int]
    surcharge: Callable[[T], int]
    sent: Callable[[T], int]
    breadcrumb: T


@lru_cache(maxsize=8192)
def chat_of(item: ConversationMessage) -> tuple[ChatMessage, ...]:
    """The provider-facing messages of one structured item, memoised.

    Items are immutable and a session renders its kept items again for every request.
    """
    return tuple(to_chat_messages((item,)))


def _one(_: ChatMessage) -> int:
    return 1


def _fresh_chat(item: ConversationMessage) -> tuple[ChatMessage, ...]:
    return tuple(to_chat_messages((item,)))


def _conversation_rows(
    chat: Callable[[ConversationMessage], tuple[ChatMessage, ...]],
) -> Rows[ConversationMessage]:
    """Structured rows whose provider-facing messages come from ``chat``."""

    def base_tokens(item: ConversationMessage) -> int:
        return sum(map(base_message_tokens, chat(item)))

    def surcharge(item: ConversationMessage) -> int:
        return sum(map(current_turn_surcharge, chat(item)))

    def sent(item: ConversationMessage) -> int:
        return len(chat(item))

    return Rows(
        is_system_item,
        is_turn_start_item,
        is_breadcrumb_item,
        base_tokens,
        surcharge,
        sent,
        Chat(ChatMessage.breadcrumb()),
    )


CHAT_ROWS: Rows[ChatMessage] = Rows(
    is_system_message,
    is_real_user_message,
    is_breadcrumb,
    base_message_tokens,
    current_turn_surcharge,
    _one,
    ChatMessage.breadcrumb(),
)
"""Provider-facing history: one `ChatMessage` is one row and one sent message."""

CONVERSATION_ROWS: Rows[ConversationMessage] = _conversation_rows(chat_of)
"""Structured history: a `ToolResults` of three results is one item but three sent messages.

Measured through `chat_of`'s cache, as a session renders its items again for every request."""

ONCE_CONVERSATION_ROWS: Rows[ConversationMessage] = _conversation_rows(_fresh_chat)
"""`CONVERSATION_ROWS` for a history measured once (the pure trims): no cache to churn."""


@attrs.frozen
class Window:
    """A kept view: the log from ``start`` on, behind the head, maybe after a breadcrumb (R31)."""

    start: int = 0
    breadcrumb: bool = False


@attrs.frozen
class Cut:
    """The numbers of one trim from a kept window to a smaller one (R10, R32).

    ``dropped_messages`` counts real messages only (not rescued systems, not a replaced
    breadcrumb), as items or as provider-facing messages (`WindowIndex.cut`).
    """

    dropped_messages: int
    dropped_turns: int
    kept_turns: int
    tokens_before: int
    tokens_after: int


@attrs.define
class WindowIndex(Generic[T]):
    """A log from position ``base`` on, with the sums every window question reads.

    Read-only by convention outside this class: ``rows``; ``leading``, the leading system
    messages (R4); ``retained``, system messages of log items already forgotten (R9);
    ``base``, the log position of ``items[0]``; ``items``, the log from ``base`` (``None``
    marks an item swept from the views, R36); ``head_tokens``, the estimate of ``leading`` and
    ``retained``. Change it only through `append`, `replace` and `forget_before`. A fresh
    index over a whole history is `WindowIndex.of`.
    """

    rows: Rows[T]
    leading: list[T] = attrs.field(factory=list)
    retained: list[T] = attrs.field(factory=list)
    base: int = 0
    items: list[T | None] = attrs.field(factory=list)
    head_tokens: int = attrs.field(init=False, default=0)
    # Prefix sums over `items` (index i: the sum over items[:i]) of the estimate outside the
    # current turn, and of that of the system messages; read as differences.
    _tokens: list[int] = attrs.field(init=False, factory=list)
    _system_tokens: list[int] = attrs.field(init=False, factory=list)
    _turn_starts: list[int] = attrs.field(init=False, factory=list)
    _system_positions: list[int] = attrs.field(init=False, factory=list)
    # The surcharges of the current turn: from the newest turn start (or `base`) to the end.
    _current_surcharge: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        head = (*self.leading, *self.retained)
        self.head_tokens = sum(self.rows.base_tokens(item) for item in head)
        self._reindex(self.items)

    @classmethod
    def of(cls, rows: Rows[T], history: Iterable[T]) -> WindowIndex[T]:
        """An index over a whole history (its leading systems stay in ``items``); O(n)."""
        return cls(rows, items=list(history))

    # -- positions --

    @property
    def next_position(self) -> int:
        """The log position the next appended item gets."""
        return self.base + len(self.items)

    def turns_from(self, start: int) -> list[int]:
        """Turn-start positions at or after ``start``, ascending (R1, R2)."""
        return self._turn_starts[bisect_left(self._turn_starts, start):]

    def present_from(self, start: int) -> list[tuple[int, T]]:
        """``(position, item)`` of every item still in the views from ``start``; O(window)."""
        first = max(start, self.base)
        return [
            (p, item)
            for p, item in enumerate(self.items[first - self.base :], first)
            if item is not None
        ]

    # -- a window: its items, its cost, a trim's numbers --

    def render(self, window: Window) -> list[T]:
        """The items of ``window``: head, rescued systems, breadcrumb, kept suffix (R4, R9, R31)."""
        start = max(window.start, self.base)
        late = self._system_positions[: bisect_left(self._system_positions, start)]
        items, base = self.items, self.base
        kept = [*self.leading, *self.retained]
        kept += [item for p in late if (item := items[p - base]) is not None]
        if window.breadcrumb:
            kept.append(self.rows.breadcrumb)
        kept += [item for item in items[start - base :] if item is not None]
        return kept

    def tokens(self, window: Window) -> int:
        """The estimate of `render(window)` (R20-R23); O(1) for any window a trim keeps.

        The current turn, whose tool attachments are charged (R22), starts at the newest turn
        start; with none, everything kept is the current turn.
        """
        start = max(window.start, self.base) - self.base
        end = len(self.items)
        return (
            self.head_tokens
            + self._system_tokens[start] - self._system_tokens[0]
            + (BREADCRUMB_TOKENS if window.breadcrumb else 0)
            + self._tokens[end] - self._tokens[start]
            + self._surcharge_from(start + self.base)
        )

    def _surcharge_from(self, start: int) -> int:
        newest = self._turn_starts[-1] if self._turn_starts else self.base
        if start <= newest:  # every window a trim keeps: the newest turn is kept (R6)
            return self._current_surcharge
        surcharge = self.rows.surcharge
        return sum(surcharge(i) for i in self.items[start - self.base :] if i is not None)

    def dropped(self, old: int, new: int, *, sent: bool = False) -> int:
        """Real messages between the starts ``old`` and ``new`` (R32); O(what is dropped).

        Counts items, or with ``sent`` the provider-facing messages they become (a
        `ToolResults` of two results is two). Systems (kept), breadcrumbs (replaced) and swept
        items (gone) are not counted.
        """
        rows = self.rows
        first, last = max(old, self.base), max(new, self.base)
        region = self.items[first - self.base : last - self.base]
        present = cast("list[T]", list(filter(_is_present, region)))
        if sent:
            real = [i for i in present if not rows.is_system(i) and not rows.is_breadcrumb(i)]
            return sum(map(rows.sent, real))
        systems = bisect_left(self._system_positions, last) - bisect_left(
            self._system_positions, first
        )
        return len(present) - systems - sum(map(rows.is_breadcrumb, present))

    def cut(self, before: Window, after: Window, *, sent: bool = False) -> Cut:
        """The numbers of trimming ``before`` down to ``after`` (R10, R32).

        ``sent``: count the dropped provider-facing messages rather than items (`dropped`).
        """
        turns = len(self._turn_starts)
        turns_before = turns - bisect_left(self._turn_starts, before.start)
        kept_turns = turns - bisect_left(self._turn_starts, after.start)
        return Cut(
            dropped_messages=self.dropped(before.start, after.start, sent=sent),
            dropped_turns=turns_before - kept_turns,
            kept_turns=kept_turns,
            tokens_before=self.tokens(before),
            tokens_after=self.tokens(after),
        )

    # -- changes --

    def append(self, item: T) -> bool:
        """Add ``item`` at `next_position`; True when it joined the leading systems (R4)."""
        position = self.next_position
        # Leading: nothing but system messages shown before it (after a clear too, R4).
        if not self.items and not self.retained and self.rows.is_system(item):
            self.leading.append(item)
            self.head_tokens += self.rows.base_tokens(item)
            self.base += 1
            return True
        tokens = self.rows.base_tokens(item)
        self.items.append(item)
        self._tokens.append(self._tokens[-1] + tokens)
        system = self.rows.is_system(item)
        self._system_tokens.append(self._system_tokens[-1] + (tokens if system else 0))
        if system:
            self._system_positions.append(position)
        if self.rows.is_turn_start(item):
            self._turn_starts.append(position)
            self._current_surcharge = 0
        self._current_surcharge += self.rows.surcharge(item)
        return False

    def replace(self, changes: Mapping[int, T | None]) -> None:
        """Replace items by position (``None`` removes one from the views); O(window)."""
        items = list(self.items)
        for position, item in changes.items():
            if position >= self.base:
                items[position - self.base] = item
        self._reindex(items)

    def forget_before(self, position: int) -> None:
        """Forget the log before ``position``, keeping its system messages in ``retained``.

        For positions no view can show again. Runs only once the forgettable part is at least
        half the items, so its O(window) copy is amortised O(1) per trim; until then windows
        skip those items by their start.
        """
        cut = position - self.base
        if cut <= 0 or 2 * cut < len(self.items):
            return
        for p in self._system_positions[: bisect_left(self._system_positions, position)]:
            item = self.items[p - self.base]
            if item is not None:
                self.retained.append(item)
                self.head_tokens += self._tokens[p - self.base + 1] - self._tokens[p - self.base]
        self.items = self.items[cut:]
        self.base = position
        self._turn_starts = self.turns_from(position)
        self._system_positions = self._system_positions[
            bisect_left(self._system_positions, position):
        ]
        # Sums are read as differences, so a suffix of each prefix list stays valid.
        self._tokens = self._tokens[cut:]
        self._system_tokens = self._system_tokens[cut:]

    def _reindex(self, items: list[T | None]) -> None:
        """Rebuild every sum from ``items`` (now owned by the index); O(window)."""
        base, rows, self.items = self.base, self.rows, items
        # Per-item work through map and itertools: the pure trims index every message here.
        gaps = not all(map(_is_present, items))
        tokens = _column(rows.base_tokens, items, 0, gaps)
        system = _column(rows.is_system, items, False, gaps)
        self._tokens = list(accumulate(tokens, initial=0))
        self._system_tokens = list(accumulate(map(mul, tokens, system), initial=0))
        self._system_positions = list(compress(count(base), system))
        turn_starts = _column(rows.is_turn_start, items, False, gaps)
        self._turn_starts = list(compress(count(base), turn_starts))
        current = self._turn_starts[-1] if self._turn_starts else base
        self._current_surcharge = sum(
            rows.surcharge(i) for i in items[current - base :] if i is not None
        )


_is_present = partial(is_not, None)
"""True for an item still in the views (a swept one is None)."""

V = TypeVar("V")


def _column(f: Callable[[T], V], items: list[T | None], gap: V, gaps: bool) -> list[V]:
    """``f`` of every item, ``gap`` for a swept one (``gaps``: there may be some)."""
    if gaps:
        return [gap if item is None else f(item) for item in items]
    return list(map(f, items))  # type: ignore[arg-type]  # no None among them
