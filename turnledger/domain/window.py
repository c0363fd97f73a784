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

import weakref
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
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
from turnledger.domain.pricing import DEFAULT_PRICING, Pricing
from turnledger.domain.sweep import pairs_among_themselves
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
    "Region",
    "Rows",
    "Window",
    "WindowIndex",
    "chat_messages_of",
    "conversation_rows",
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
    paired: Callable[[Sequence[T]], bool] = attrs.field(default=lambda _: True, kw_only=True)
    """True when the tool calls and results of these items (one turn) pair among themselves:
    an item of such a turn never matters to the orphan sweep of a longer window (R36)."""


_CHAT_OF: dict[int, tuple[weakref.ref[ConversationMessage], tuple[ChatMessage, ...]]] = {}
"""`chat_of`'s memo, by the identity of the item while it lives: a request renders the same
item objects again, and an identity lookup hashes nothing."""


def chat_of(item: ConversationMessage) -> tuple[ChatMessage, ...]:
    """The provider-facing messages of one structured item, memoised.

    Items are immutable and a session renders its kept items again for every request: by
    identity while the item lives; and a tool item (whose messages are built, envelopes and
    all) by equality too (`_tool_chat_of`), for a new object equal to one seen, as every item
    of a session restored again is. A `Chat` is its own message: nothing to build, and its
    equality leaves out how the message is read (``envelope``, ``item``).
    """
    key = id(item)
    known = _CHAT_OF.get(key)
    if known is not None and known[0]() is item:
        return known[1]
    chat = (item.message,) if isinstance(item, Chat) else _tool_chat_of(item)
    _CHAT_OF[key] = (weakref.ref(item, partial(_forget_chat, key)), chat)
    return chat


def chat_messages_of(items: Iterable[ConversationMessage]) -> list[ChatMessage]:
    """The provider-facing messages of ``items``, in order: `chat_of` each, a `Chat`'s own
    message read off it (no memo to look up: half the items of a typical window)."""
    out: list[ChatMessage] = []
    for item in items:
        if type(item) is Chat:
            out.append(item.message)
        else:
            out.extend(chat_of(item))
    return out


@lru_cache(maxsize=8192)
def _tool_chat_of(item: ConversationMessage) -> tuple[ChatMessage, ...]:
    return tuple(to_chat_messages((item,)))


def _forget_chat(key: int, _: object, forget: Callable[..., object] = _CHAT_OF.pop) -> None:
    """Drop a dead item's memo entry. The memo's ``pop`` is bound here, not looked up when
    the item dies: an item that dies while the interpreter shuts down (module globals already
    None) would raise, and print, in every such callback."""
    forget(key, None)


def _one(_: ChatMessage) -> int:
    return 1


def _fresh_chat(item: ConversationMessage) -> tuple[ChatMessage, ...]:
    return tuple(to_chat_messages((item,)))


def _conversation_rows(
    chat: Callable[[ConversationMessage], tuple[ChatMessage, ...]],
    pricing: Pricing = DEFAULT_PRICING,
) -> Rows[ConversationMessage]:
    """Structured rows whose provider-facing messages come from ``chat``, priced by
    ``pricing``."""
    base = partial(base_message_tokens, pricing=pricing)
    more = partial(current_turn_surcharge, pricing=pricing)

    def base_tokens(item: ConversationMessage) -> int:
        return sum(map(base, chat(item)))

    def surcharge(item: ConversationMessage) -> int:
        return sum(map(more, chat(item)))

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
        paired=pairs_among_themselves,
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


@lru_cache(maxsize=64)
def conversation_rows(pricing: Pricing) -> Rows[ConversationMessage]:
    """`CONVERSATION_ROWS` priced by ``pricing`` (a session's, issue 21): one per pricing."""
    return CONVERSATION_ROWS if pricing == DEFAULT_PRICING else _conversation_rows(
        chat_of, pricing
    )
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


_Own = TypeVar("_Own")


def _with_own_lists(value: _Own) -> _Own:
    """A copy of an attrs instance whose list fields are lists of its own (a `Region` field is
    copied likewise); every other field, and what the lists hold, is shared: immutable."""
    copied = object.__new__(type(value))
    for field in attrs.fields(type(value)):  # type: ignore[arg-type]
        own = getattr(value, field.name)
        if type(own) is list:
            own = own.copy()
        elif type(own) is Region:
            own = _with_own_lists(own)
        object.__setattr__(copied, field.name, own)
    return copied


@attrs.define
class Region(Generic[T]):
    """The part ``[lo, base)`` of a log a session summarises instead of holding (ADR-0030).

    What a decision still reads there: ``turns``, the turn starts; ``tokens`` and ``real``,
    for each segment (from ``lo`` or a turn start to the next one, the last one to ``base``)
    its estimate outside the current turn and its real messages (R32); ``systems``, its system
    items (kept by every view, R4, R9); ``suspects``, the items of its turns whose tool calls
    and results do not pair among themselves (the only ones the orphan sweep can touch, R36).
    The items themselves are read from the log when a full view is asked for.
    """

    turns: list[int] = attrs.field(factory=list)
    tokens: list[int] = attrs.field(factory=list)
    real: list[int] = attrs.field(factory=list)
    systems: list[tuple[int, T]] = attrs.field(factory=list)
    suspects: list[tuple[int, T]] = attrs.field(factory=list)

    def clone(self) -> Region[T]:
        """A region with lists of its own (their values are immutable, shared)."""
        return _with_own_lists(self)


@attrs.define(eq=False)
class WindowIndex(Generic[T]):
    """A log from position ``base`` on, with the sums every window question reads.

    Read-only by convention outside this class: ``rows``; ``leading``, the leading system
    messages (R4); ``retained``, system messages of log items already forgotten (R9);
    ``base``, the log position of ``items[0]``; ``items``, the log from ``base`` (``None``
    marks an item swept from the views, R36); ``head_tokens``, the estimate of ``leading`` and
    ``retained``; ``lo`` and ``region``, the summarised part ``[lo, base)`` (`compact_before`;
    empty when ``lo == base``). Change it only through `append`, `replace`, `forget_before`,
    `compact_before` and `remove_summarised`. A fresh index over a whole history is
    `WindowIndex.of`.

    Its form is a function of what was done to it, not of when (ADR-0076): a forget
    or a compaction applies at once, so two indexes of the same log and the same windows are
    equal by `==` (which compares that form), however they were built or restored. What it
    forgets stays in its lists as a dead prefix, shed once it outweighs the live part: a trim
    costs O(what it drops), amortised.
    """

    rows: Rows[T]
    leading: list[T] = attrs.field(factory=list)
    retained: list[T] = attrs.field(factory=list)
    base: int = 0
    _items: list[T | None] = attrs.field(factory=list, alias="items")
    lo: int = attrs.field(default=-1, kw_only=True)
    region: Region[T] = attrs.field(factory=Region, kw_only=True)
    head_tokens: int = attrs.field(init=False, default=0)
    # `_items[_dead:]` is the log from `base`; `_items[:_dead]` was forgotten or summarised
    # and is shed by `_shed` (the index of position p >= base is p - base + _dead).
    _dead: int = attrs.field(init=False, default=0)
    # Prefix sums over `_items` (index i: the sum over _items[:i]) of the estimate outside the
    # current turn, and of that of the system messages; read as differences.
    _tokens: list[int] = attrs.field(init=False, factory=list)
    _system_tokens: list[int] = attrs.field(init=False, factory=list)
    # Turn starts from `lo` on (the region's too); system positions of `_items`. Either may
    # begin with dead entries (before `lo`, before `base`): every reader bisects from a start.
    _turn_starts: list[int] = attrs.field(init=False, factory=list)
    _system_positions: list[int] = attrs.field(init=False, factory=list)
    # The surcharges of the current turn: from the newest turn start (or `base`) to the end.
    _current_surcharge: int = attrs.field(init=False, default=0)
    # The orphan sweep's memo (`pairs_from`): every complete held turn starting in
    # [_paired_lo, _paired_hi) was asked `rows.paired`; `_unpaired` lists those that said no.
    # A turn is complete once a later turn starts: appends never change it, only `_reindex`
    # (a sweep, a pop, a restore), which forgets the memo.
    _paired_lo: int = attrs.field(init=False, default=0)
    _paired_hi: int = attrs.field(init=False, default=0)
    _unpaired: list[int] = attrs.field(init=False, factory=list)
    # Cumulative sums of the region at each of its bounds (`lo`, then its turn starts).
    _bounds: list[int] = attrs.field(init=False, factory=list)
    _cum_tokens: list[int] = attrs.field(init=False, factory=list)
    _cum_real: list[int] = attrs.field(init=False, factory=list)

    def __attrs_post_init__(self) -> None:
        if self.lo < 0:
            self.lo = self.base
        head = (*self.leading, *self.retained)
        self.head_tokens = sum(self.rows.base_tokens(item) for item in head)
        self._region_sums()
        self._reindex(self._items)

    def __eq__(self, other: object) -> bool:
        """The same form: head, region, held items and where they start (not the dead
        prefix nor the sums, which follow from them)."""
        if not isinstance(other, WindowIndex):
            return NotImplemented
        return (
            self.rows == other.rows
            and (self.base, self.lo, self.head_tokens)
            == (other.base, other.lo, other.head_tokens)
            and self.leading == other.leading
            and self.retained == other.retained
            and self.region == other.region
            and self.items == other.items
        )

    __hash__ = None  # type: ignore[assignment]  # mutable: never a dict key

    def clone(self) -> WindowIndex[T]:
        """An index equal to this one that shares nothing either may change: its lists are
        copied (the items and sums in them are immutable values, shared), its region too. No
        item is rebuilt or estimated again: O(its lists), each copied in one C call. What a
        decision that may be thrown away works on (`SessionState.clone`)."""
        return _with_own_lists(self)

    @classmethod
    def of(cls, rows: Rows[T], history: Iterable[T]) -> WindowIndex[T]:
        """An index over a whole history (its leading systems stay in ``items``); O(n)."""
        return cls(rows, items=list(history))

    @property
    def items(self) -> list[T | None]:
        """The log from ``base`` (a copy; ``None``: swept or popped); O(window)."""
        return self._items[self._dead :]

    # -- positions --

    @property
    def next_position(self) -> int:
        """The log position the next appended item gets."""
        return self.base + len(self._items) - self._dead

    def _at(self, position: int) -> int:
        """The index in `_items` of the held ``position``."""
        return position - self.base + self._dead

    def _systems_before(self, position: int) -> list[int]:
        """The held system positions before ``position``."""
        found = self._system_positions
        return found[bisect_left(found, self.base) : bisect_left(found, position)]

    def turns_from(self, start: int) -> list[int]:
        """Turn-start positions at or after ``start``, ascending (R1, R2)."""
        return self._turn_starts[bisect_left(self._turn_starts, start):]

    def count_turns_from(self, start: int) -> int:
        """``len(turns_from(start))`` without copying them; O(log turns)."""
        return len(self._turn_starts) - bisect_left(self._turn_starts, start)

    def turn_from(self, start: int, k: int) -> int:
        """``turns_from(start)[k]`` without copying them; O(log turns)."""
        return self._turn_starts[bisect_left(self._turn_starts, start) + k]

    def held(self, position: int) -> T | None:
        """The item the views show at the held ``position``; None when it was swept or
        popped, or is not held (before `base`, or not yet appended). O(1)."""
        if not self.base <= position < self.next_position:
            return None
        return self._items[self._at(position)]

    def present_from(self, start: int) -> list[tuple[int, T]]:
        """``(position, item)`` of every item still in the views from ``start`` that the orphan
        sweep must see (of the region: its suspects only, ADR-0030); O(window)."""
        first = max(start, self.base)
        suspects = [(p, i) for p, i in self.region.suspects if p >= start]
        return suspects + [
            (p, item)
            for p, item in enumerate(self._items[self._at(first) :], first)
            if item is not None
        ]

    def pairs_from(self, start: int) -> bool:
        """True when the orphan sweep of `present_from` ``(start)`` can find nothing (R36).

        The sweep pairs in one pass whose only state is the calls not yet answered, so a
        history cut into parts that each pair among themselves pairs as a whole (each part
        leaves nothing unanswered for the next). The parts here are the held turns from
        ``start`` (a part before the first of them, if any) and nothing of the region (whose
        turns that do not pair are its suspects): the complete turns are asked once each
        (`rows.paired`, memoised until `_reindex`), the newest one and a leading part on
        every call; O(the newest turn) amortised, whatever the window's length. False only
        says the sweep must look.
        """
        suspects = self.region.suspects
        if suspects and suspects[-1][0] >= start:
            return False
        first = max(start, self.base)
        starts, end = self._turn_starts, self.next_position
        at = bisect_left(starts, first)
        if at == len(starts):  # no turn starts from ``first``: one part
            return self._part_pairs(first, end)
        lo, newest = starts[at], starts[-1]
        if not (self._part_pairs(first, lo) and self._part_pairs(newest, end)):
            return False
        if not self._paired_lo <= lo <= self._paired_hi:
            self._paired_lo = self._paired_hi = lo
            self._unpaired = []
        # Ask the complete turns not asked yet: from `_paired_hi` to the newest turn start.
        for k in range(bisect_left(starts, self._paired_hi), len(starts) - 1):
            if not self._part_pairs(starts[k], starts[k + 1]):
                self._unpaired.append(starts[k])
        self._paired_hi = max(self._paired_hi, newest)
        unpaired = self._unpaired
        return not unpaired or unpaired[-1] < lo

    def _part_pairs(self, first: int, last: int) -> bool:
        """`rows.paired` of the held items still in the views in ``[first, last)``."""
        part = self._items[self._at(first) : self._at(last)]
        return self.rows.paired([item for item in part if item is not None])

    def newest_held(self, start: int) -> tuple[int, T] | None:
        """The newest held item at or after ``start`` still in the views, with its position;
        None when there is none. O(1) unless the newest items were removed from the views."""
        items, first = self._items, self._at(max(start, self.base))
        for offset in range(len(items) - 1, first - 1, -1):
            item = items[offset]
            if item is not None:
                return self.base + offset - self._dead, item
        return None

    def holds(self, window: Window) -> bool:
        """True when every item of ``window`` is held (not summarised in the region)."""
        return max(window.start, self.lo) >= self.base

    # -- a window: its items, its cost, a trim's numbers --

    def render(self, window: Window, older: Mapping[int, T | None] | None = None) -> list[T]:
        """The items of ``window``: head, rescued systems, breadcrumb, kept suffix (R4, R9, R31).

        A window that starts in the region needs its items there: ``older`` (position ->
        item, None for a swept one), read from the log; ``ValueError`` without them.
        """
        start = max(window.start, self.lo)
        items, base, shift = self._items, self.base, self._dead - self.base
        kept = [*self.leading, *self.retained]
        kept += [item for p, item in self.region.systems if p < start]
        kept += [
            item for p in self._systems_before(start) if (item := items[p + shift]) is not None
        ]
        if window.breadcrumb:
            kept.append(self.rows.breadcrumb)
        if start < base:
            if older is None:
                raise ValueError(f"the window starts at {start}, before the held log ({base})")
            kept += [item for p in range(start, base) if (item := older.get(p)) is not None]
        kept += [item for item in items[max(start, base) + shift :] if item is not None]
        return kept

    def shown(self, window: Window) -> int:
        """``len(render(window))`` without the items of the region (its sums say how many
        of them the view shows); O(window)."""
        start = max(window.start, self.lo)
        count = len(self.leading) + len(self.retained) + len(self.region.systems)
        count += int(window.breadcrumb)
        if start < self.base:
            real = self._region_total(self._cum_real, self.region.real)
            count += real - self._cum_real[self._bound(start)]
        items, shift = self._items, self._dead - self.base
        count += sum(items[p + shift] is not None for p in self._systems_before(start))
        return count + sum(map(_is_present, items[self._at(max(start, self.base)) :]))

    def tokens(self, window: Window) -> int:
        """The estimate of `render(window)` (R20-R23); O(1) for any window a trim keeps.

        The current turn, whose tool attachments are charged (R22), starts at the newest turn
        start; with none, everything kept is the current turn.
        """
        start = max(window.start, self.lo)
        end, dead = len(self._items), self._dead
        breadcrumb = BREADCRUMB_TOKENS if window.breadcrumb else 0
        if start < self.base:
            systems, region = self._region_at(start)
            return (
                self.head_tokens + systems + breadcrumb
                + self._region_total(self._cum_tokens, self.region.tokens) - region
                + self._tokens[end] - self._tokens[dead]
                + self._current_surcharge
            )
        offset = self._at(start)
        return (
            self.head_tokens
            + self._region_systems_before(start)
            + self._system_tokens[offset] - self._system_tokens[dead]
            + breadcrumb
            + self._tokens[end] - self._tokens[offset]
            + self._surcharge_from(start)
        )

    def _surcharge_from(self, start: int) -> int:
        newest = self._turn_starts[-1] if self._turn_starts else self.lo
        if start <= newest:  # every window a trim keeps: the newest turn is kept (R6)
            return self._current_surcharge
        surcharge = self.rows.surcharge
        return sum(surcharge(i) for i in self._items[self._at(start) :] if i is not None)

    def dropped(self, old: int, new: int, *, sent: bool = False) -> int:
        """Real messages between the starts ``old`` and ``new`` (R32); O(what is dropped).

        Counts items, or with ``sent`` the provider-facing messages they become (a
        `ToolResults` of two results is two). Systems (kept), breadcrumbs (replaced) and swept
        items (gone) are not counted.
        """
        counted = 0
        if max(old, self.lo) < self.base and new > old:
            if sent:
                raise ValueError("the region counts items, not sent messages")
            upto = self._region_total(self._cum_real, self.region.real)
            last = upto if new >= self.base else self._cum_real[self._bound(new)]
            counted = last - self._cum_real[self._bound(max(old, self.lo))]
        rows = self.rows
        first, last_p = max(old, self.base), max(new, self.base)
        region = self._items[self._at(first) : self._at(last_p)]
        present = cast("list[T]", list(filter(_is_present, region)))
        if sent:
            real = [i for i in present if not rows.is_system(i) and not rows.is_breadcrumb(i)]
            return counted + sum(map(rows.sent, real))
        systems = bisect_left(self._system_positions, last_p) - bisect_left(
            self._system_positions, first
        )
        return counted + len(present) - systems - sum(map(rows.is_breadcrumb, present))

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

    # -- the region's sums --

    def _region_sums(self) -> None:
        """Rebuild the region's bounds and cumulative sums from ``region`` (O(region turns))."""
        turns = self.region.turns
        self._bounds = [self.lo, *turns] if not turns or turns[0] != self.lo else list(turns)
        self._cum_tokens = list(accumulate(self.region.tokens, initial=0))
        self._cum_real = list(accumulate(self.region.real, initial=0))

    def _sums_from(self, segment: int) -> None:
        """Bring the cumulative sums up to date from ``segment`` on (changed or new), so a
        compaction costs O(what it moves), not O(region)."""
        for cumulative, segments in (
            (self._cum_tokens, self.region.tokens),
            (self._cum_real, self.region.real),
        ):
            del cumulative[segment + 1 :]
            cumulative += accumulate(segments[segment:], initial=cumulative[segment])
            del cumulative[segment + 1]  # the initial value, already there

    def _bound(self, position: int) -> int:
        index = bisect_left(self._bounds, position)
        if index == len(self._bounds) or self._bounds[index] != position:
            raise ValueError(f"position {position} is not a turn start of the region")
        return index

    def _region_total(self, cumulative: list[int], segments: list[int]) -> int:
        return cumulative[len(segments)] if segments else 0

    def _region_systems_before(self, start: int) -> int:
        tokens = self.rows.base_tokens
        return sum(tokens(item) for p, item in self.region.systems if p < start)

    def _region_at(self, start: int) -> tuple[int, int]:
        """(system tokens before ``start``, segment tokens before ``start``) in the region."""
        return self._region_systems_before(start), self._cum_tokens[self._bound(start)]

    # -- changes --

    def append(self, item: T) -> bool:
        """Add ``item`` at `next_position`; True when it joined the leading systems (R4)."""
        position = self.next_position
        # Leading: nothing but system messages shown before it (after a clear too, R4).
        empty = len(self._items) == self._dead
        leading = empty and not self.retained and self.lo == self.base
        if leading and self.rows.is_system(item):
            self.leading.append(item)
            self.head_tokens += self.rows.base_tokens(item)
            self.base += 1
            self.lo = self.base
            self._bounds = [self.lo]
            return True
        tokens = self.rows.base_tokens(item)
        self._items.append(item)
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
        """Replace items by position (``None`` removes one from the views); O(window).

        A position in the region must be one of its suspects (`present_from`).
        """
        items = self.items
        for position, item in changes.items():
            if position >= self.base:
                items[position - self.base] = item
            elif position >= self.lo:
                self._replace_suspect(position, item)
        self._reindex(items)

    def _replace_suspect(self, position: int, item: T | None) -> None:
        suspects: dict[int, T | None] = dict(self.region.suspects)
        if position not in suspects:
            raise ValueError(f"position {position} is summarised, not held: it cannot change")
        old = suspects[position]
        suspects[position] = item
        segment = bisect_right(self._bounds, position) - 1
        self.region.tokens[segment] += self._item_tokens(item) - self._item_tokens(old)
        self.region.real[segment] += self._is_real(item) - self._is_real(old)
        self._region_sums()
        # Keep only the turns that still do not pair, as a compaction of the swept log would.
        by_segment: dict[int, list[tuple[int, T]]] = {}
        for p, i in suspects.items():
            if i is not None:
                by_segment.setdefault(bisect_right(self._bounds, p) - 1, []).append((p, i))
        self.region.suspects = [
            pair
            for group in by_segment.values()
            if not self.rows.paired([i for _, i in group])
            for pair in group
        ]

    def remove_summarised(self, position: int, older: Mapping[int, T | None]) -> None:
        """Remove the item summarised at ``position`` from the views (a pop, ADR-0076).

        Its turn and the region after it are held again, their items read from ``older``
        (position -> item as the log holds them, None: swept), and the item is removed there,
        as in a held log: a popped turn start is no turn start, a turn that paired may not any
        more (R36). The caller summarises them again (`compact_before`); O(those items).
        ``ValueError`` when ``older`` lacks one of them.
        """
        first = self._bounds[bisect_right(self._bounds, position) - 1]
        missing = [p for p in range(first, self.base) if p not in older]
        if missing:
            raise ValueError(
                f"a pop at {position} needs the log's items at {missing[0]}..{missing[-1]}"
            )
        region, segment = self.region, self._bound(first)
        region.turns = [p for p in region.turns if p < first]
        region.tokens = region.tokens[:segment]
        region.real = region.real[:segment]
        region.systems = [(p, i) for p, i in region.systems if p < first]
        region.suspects = [(p, i) for p, i in region.suspects if p < first]
        items = [older[p] for p in range(first, self.base)] + self.items
        items[position - first] = None
        self.base = first
        self._region_sums()
        self._reindex(items)

    def _item_tokens(self, item: T | None) -> int:
        return 0 if item is None else self.rows.base_tokens(item)

    def _is_real(self, item: T | None) -> int:
        rows = self.rows
        return int(item is not None and not rows.is_system(item) and not rows.is_breadcrumb(item))

    def forget_before(self, position: int) -> None:
        """Forget the log before ``position``, keeping its system messages in ``retained``.

        For positions no view can show again; at once, in O(what it forgets) amortised (the
        region's part in O(its turns)).
        """
        if position <= self.lo:
            return
        if position < self.base:
            self._forget_region_before(position)
            return
        self._retain(item for _, item in self.region.systems)
        self.region = Region()
        self.lo = self.base
        cut = position - self.base
        if cut > 0:
            items, shift = self._items, self._dead - self.base
            self._retain(items[p + shift] for p in self._systems_before(position))
            self._drop_items(cut)
            self.lo = self.base
        self._region_sums()

    def _retain(self, systems: Iterable[T | None]) -> None:
        for item in systems:
            if item is not None:
                self.retained.append(item)
                self.head_tokens += self.rows.base_tokens(item)

    def _forget_region_before(self, position: int) -> None:
        """Forget the region before its turn start ``position``, in place: each of its lists
        is sorted by position, and the cumulative sums are read as differences, so cutting
        their prefix keeps them valid (O(what it forgets) at C speed, no sum rebuilt)."""
        bound = self._bound(position)
        region = self.region
        systems = bisect_left(region.systems, position, key=_position)
        self._retain(item for _, item in region.systems[:systems])
        del region.systems[:systems]
        del region.suspects[: bisect_left(region.suspects, position, key=_position)]
        del region.turns[: bisect_left(region.turns, position)]
        for column in (region.tokens, region.real, self._bounds, self._cum_tokens, self._cum_real):
            del column[:bound]
        # `_turn_starts` may begin before `lo` (every reader bisects from a start): `_shed`
        # drops that prefix with the held items'.
        self.lo = position

    def _drop_items(self, cut: int) -> None:
        """Move ``base`` on by ``cut`` held items: they join the dead prefix, shed once it is
        longer than the live part (so each item is copied O(1) times in all)."""
        self._dead += cut
        self.base += cut
        starts = self._turn_starts
        if not starts or starts[-1] < self.base:
            # The current turn began before the new base: its surcharge is the held items'.
            surcharge = self.rows.surcharge
            self._current_surcharge = sum(
                surcharge(i) for i in self._items[self._dead :] if i is not None
            )
        if 2 * self._dead > len(self._items):
            self._shed()

    def _shed(self) -> None:
        """Drop the dead prefix from every list (sums are read as differences, so a suffix of
        each prefix list stays valid); the newest turn start stays, whatever its age."""
        dead = self._dead
        self._items = self._items[dead:]
        self._tokens = self._tokens[dead:]
        self._system_tokens = self._system_tokens[dead:]
        positions = self._system_positions
        self._system_positions = positions[bisect_left(positions, self.base) :]
        starts = self._turn_starts
        del starts[: min(bisect_left(starts, self.lo), len(starts) - 1)]
        self._dead = 0

    def compact_before(self, position: int) -> None:
        """Summarise the held items before ``position`` (a window start) into the region.

        What a decision reads of them stays (turn starts, sums, systems, suspects: `Region`);
        the items go, to be read from the log when asked for (ADR-0030). At once, in
        O(what it moves) amortised (ADR-0076).
        """
        # Only whole turns: a region that ended inside a turn would later summarise the rest
        # of it apart, and the pairing of two halves is not that of the turn (the suspects of
        # a turn straddling the region, issue 20), so the turn's items stay held (ADR-0071).
        position = self._turn_start_at_or_before(position)
        cut = position - self.base
        if cut <= 0:
            return
        region, base, dead = self.region, self.base, self._dead
        moved = self._items[dead : dead + cut]
        found = self._turn_starts
        starts = found[bisect_left(found, base) : bisect_left(found, position)]
        heads = list(starts)
        # The region's last segment runs on to the first turn start (never at a trim's start).
        extend = bool(region.tokens) and (not heads or heads[0] != base)
        if not heads or heads[0] != base:
            heads.insert(0, base)
        changed = len(region.tokens) - 1 if extend else len(region.tokens)
        sums, at = self._tokens, dead - base
        is_system, is_breadcrumb = self.rows.is_system, self.rows.is_breadcrumb
        for index, first in enumerate(heads):
            last = heads[index + 1] if index + 1 < len(heads) else position
            segment = moved[first - base : last - base]
            tokens = sums[last + at] - sums[first + at]  # priced once, when appended
            real = sum(
                1 for i in segment if i is not None and not is_system(i) and not is_breadcrumb(i)
            )
            if index == 0 and extend:
                region.tokens[-1] += tokens
                region.real[-1] += real
            else:
                region.tokens.append(tokens)
                region.real.append(real)
            present = [i for i in segment if i is not None]
            if not self.rows.paired(present):
                region.suspects += [(p, i) for p, i in enumerate(segment, first) if i is not None]
        region.turns += starts
        region.systems += [
            (p, item)
            for p in self._systems_before(position)
            if (item := moved[p - base]) is not None
        ]
        self._bounds += [p for p in starts if p > self._bounds[-1]]
        self._sums_from(changed)
        self._drop_items(cut)

    def _turn_start_at_or_before(self, position: int) -> int:
        """The newest turn start at or before ``position`` from ``base`` on, else ``base``."""
        starts = self._turn_starts
        found = bisect_right(starts, position) - 1
        return starts[found] if found >= 0 and starts[found] >= self.base else self.base

    def _reindex(self, items: list[T | None]) -> None:
        """Rebuild every sum from ``items`` (now owned by the index); O(window)."""
        base, rows, self._items, self._dead = self.base, self.rows, items, 0
        self._paired_lo = self._paired_hi = base
        self._unpaired = []
        # Per-item work through map and itertools: the pure trims index every message here.
        gaps = not all(map(_is_present, items))
        tokens = _column(rows.base_tokens, items, 0, gaps)
        system = _column(rows.is_system, items, False, gaps)
        self._tokens = list(accumulate(tokens, initial=0))
        self._system_tokens = list(accumulate(map(mul, tokens, system), initial=0))
        self._system_positions = list(compress(count(base), system))
        turn_starts = _column(rows.is_turn_start, items, False, gaps)
        self._turn_starts = [*self.region.turns, *compress(count(base), turn_starts)]
        current = self._turn_starts[-1] if self._turn_starts else base
        current = max(current, base)
        self._current_surcharge = sum(
            rows.surcharge(i) for i in items[current - base :] if i is not None
        )

def _position(entry: tuple[int, object]) -> int:
    return entry[0]


_is_present = partial(is_not, None)
"""True for an item still in the views (a swept one is None)."""

V = TypeVar("V")


def _column(f: Callable[[T], V], items: list[T | None], gap: V, gaps: bool) -> list[V]:
    """``f`` of every item, ``gap`` for a swept one (``gaps``: there may be some)."""
    if gaps:
        return [gap if item is None else f(item) for item in items]
    return list(map(f, items))  # type: ignore[arg-type]  # no None among them
