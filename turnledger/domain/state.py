"""The state of one session: the facts its events state, and the index they are kept in.

A session's history is an append-only *log* of `ConversationMessage` items (positions 0, 1,
2, ...). Its two views (E4) are windows on that log (`turnledger.domain.window`): the
conversation view after the turn limit, the chat view after the token budget too. The state
keeps the facts the events state (identity, version, profile, providers, loop, route, and
each view's `Window`: where it starts and whether a breadcrumb precedes it) and a
`WindowIndex` of the log from the earliest window on, which answers every question about a
view in O(window) or better (ADR-0002, ADR-0006). It is evolved in place (ADR-0005).
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Final, assert_never, cast
from uuid import UUID

import attrs

from turnledger.domain.budget import (
    ProviderProfile,
    ResolvedRoute,
    Route,
    RuntimeProfile,
    resolve_route,
    session_pricing,
)
from turnledger.domain.errors import TurnledgerError
from turnledger.domain.estimate import BREADCRUMB_TOKENS
from turnledger.domain.events import (
    ChangesLogItems,
    Deciders,
    DomainEvent,
    Event,
    MessageAppended,
    MessagePopped,
    OrphansSwept,
    ToolCallsRestored,
    ToolResultsCleared,
    TrimReason,
    View,
    unchecked_events,
)
from turnledger.domain.messages import SUMMARY_PREFIX, ChatMessage, ConversationMessage
from turnledger.domain.pricing import Pricing
from turnledger.domain.window import (
    CONVERSATION_ROWS,
    Region,
    Window,
    WindowIndex,
    chat_messages_of,
    conversation_rows,
)

__all__ = [
    "DigestPrefix", "Loop", "SessionState", "Summary", "collect_summarised", "note_item",
    "summary_message",
]

def summary_message(text: str) -> ChatMessage:
    """The synthetic message the chat view shows in place of the breadcrumb (issue 24)."""
    return ChatMessage("user", SUMMARY_PREFIX + text, synthetic=True)


@attrs.frozen
class Summary:
    """The summary the chat view shows in place of its breadcrumb (`TurnsSummarized`): it
    covers the log from ``covers_from`` to ``last_position``; ``tokens`` prices its message.
    A fact of the state (snapshots carry it); ``message`` is built from ``text`` once, so a
    request repeats the same object (the digest's memo, `request_digest`)."""

    covers_from: int
    last_position: int
    text: str
    summarizer: str
    tokens: int
    message: ChatMessage = attrs.field(eq=False, repr=False)

    @message.default
    def _message(self) -> ChatMessage:
        return summary_message(self.text)


class Loop(enum.Enum):
    """The agent loop a session serves; the one place that says how the two differ (R34).

    A structured agent keeps two windows (conversation and chat) and announces every trim. The
    legacy loop (``agent::run`` in the seed) works on the provider-facing history alone: one
    window, the chat one, and its turn-limit trims are reported in the logs only.
    """

    STRUCTURED = "structured"
    LEGACY = "legacy"

    def window_of(self, view: View) -> View:
        """The view whose window ``view`` reads: a legacy session has the chat window only."""
        return View.CHAT if self is Loop.LEGACY else view

    @property
    def turn_limit_view(self) -> View:
        """The view the turn limit trims (R8, R9, R28)."""
        return self.window_of(View.CONVERSATION)

    def announces(self, reason: TrimReason) -> bool:
        """True when a trim for ``reason`` gets a breadcrumb and `HistoryTrimmed` (R31-R34).

        False only for the legacy loop's turn limit, which is logged instead (R34).
        """
        return not (self is Loop.LEGACY and reason is TrimReason.TURN_LIMIT)


@attrs.define(eq=False)
class DigestPrefix:
    """The request digest's memo (`decider.request_digest`): the messages of the last request
    digested and the SHA-256 of ``[`` and their entries joined, not yet closed by ``]``.

    Not a fact of the session: no part of its equality; a new state starts empty."""

    messages: tuple[ChatMessage, ...] = ()
    hasher: Any = None


def _new_index() -> WindowIndex[ConversationMessage]:
    return WindowIndex(CONVERSATION_ROWS)


@attrs.define
class SessionState:
    """One session's facts and the index of its log; evolved in place by `evolve` (ADR-0005).

    ``conversation`` and ``chat`` are the windows of the two views (E4); a legacy session reads
    ``chat`` for both (`Loop`). ``index`` holds the log from the earliest window on, the
    leading system messages and the system messages retained from forgotten items.

    Every state has one form (ADR-0076): it holds items from the chat window on only and
    summarises the rest of the conversation window (`Region`, ADR-0030), so what a decision
    reads stays O(window) whatever the turn limit, and a live, a restored and a replayed state
    of the same events are equal by ``==``. What reads the summarised items says so and is
    given them, read from the log: `conversation_view` (``older``), a pop (`pop_needs`).
    """

    session_id: UUID | None = None
    version: int = 0
    profile: RuntimeProfile = attrs.field(factory=RuntimeProfile)
    providers: tuple[ProviderProfile, ...] = ()
    legacy: bool = False
    resolved: ResolvedRoute | None = None
    conversation: Window = attrs.field(factory=Window)
    chat: Window = attrs.field(factory=Window)
    index: WindowIndex[ConversationMessage] = attrs.field(factory=_new_index)
    summary: Summary | None = None
    """The summary the chat view shows in place of its breadcrumb (issue 24); None: the
    breadcrumb, if any. Reset by every trim that moves the chat window, set by
    `TurnsSummarized` right after the trim it explains."""
    restorable: tuple[tuple[int, ConversationMessage], ...] = ()
    """What sweeps took from the newest turn that a tool result may bring back (E5):
    ``(position, item)``, the item as the log holds it, for each position an
    `OrphansSwept` marked restorable and no `ToolCallsRestored` brought back whole; in
    position order. Emptied when a new turn starts or the history is cleared."""
    billed: tuple[tuple[int, int], ...] = ()
    """The newest `BILLED_KEPT` usages of the session (issue 35): ``(input tokens billed,
    estimated tokens)`` of each `UsageRecorded` with an estimate, oldest first; what an
    estimate that learns from the bill (`Compaction.learn_estimate`) is corrected by."""
    digest_prefix: DigestPrefix = attrs.field(
        factory=DigestPrefix, init=False, eq=False, repr=False
    )

    @classmethod
    def restored(
        cls,
        *,
        session_id: UUID,
        version: int,
        profile: RuntimeProfile,
        providers: tuple[ProviderProfile, ...],
        legacy: bool,
        route: Route,
        conversation: Window,
        chat: Window,
        leading: Iterable[ConversationMessage],
        retained: Iterable[ConversationMessage],
        base: int,
        items: Iterable[ConversationMessage | None],
        lo: int | None = None,
        region: Region[ConversationMessage] | None = None,
        summary: Summary | None = None,
        restorable: Iterable[tuple[int, ConversationMessage]] = (),
        billed: Iterable[tuple[int, int]] = (),
    ) -> SessionState:
        """A state rebuilt from a snapshot: its facts, and its index from the kept
        messages and the summary of the region ``[lo, base)`` (ADR-0030).

        ``items`` is the log from ``base`` (``None``: a swept item, R36); O(window).
        """
        index = WindowIndex(
            conversation_rows(session_pricing(profile)), list(leading), list(retained), base,
            list(items),
            lo=base if lo is None else lo, region=Region() if region is None else region,
        )
        resolved = resolve_route(profile, providers, route)
        return cls(
            session_id, version, profile, providers, legacy, resolved, conversation, chat, index,
            summary, tuple(restorable), tuple(billed),
        )

    def clone(self) -> SessionState:
        """A state equal to this one that shares nothing either may change: its index is
        cloned, every other fact is immutable. The digest memo is shared: it is checked by the
        identity of the messages it digested before it is used, so either state may use or
        replace it (`request_digest`). What a command is decided on, so that a decision that
        fails or loses a race leaves the stored state as it was (`Pipeline.save`, ADR-0094)."""
        copied = attrs.evolve(self, index=self.index.clone())
        copied.digest_prefix = self.digest_prefix
        return copied

    # -- facts --

    @property
    def started(self) -> bool:
        return self.session_id is not None

    @property
    def route(self) -> ResolvedRoute:
        if self.resolved is None:
            raise TurnledgerError("session has not been started")
        return self.resolved

    @property
    def loop(self) -> Loop:
        return Loop.LEGACY if self.legacy else Loop.STRUCTURED

    @property
    def next_position(self) -> int:
        """The log position of the next appended message."""
        return self.index.next_position

    def window(self, view: View) -> Window:
        """The window ``view`` reads (`Loop.window_of`)."""
        return self.chat if self.loop.window_of(view) is View.CHAT else self.conversation

    # -- views --

    def conversation_view(
        self, older: Mapping[int, ConversationMessage | None] | None = None
    ) -> list[ConversationMessage]:
        """The structured history after the turn limit, breadcrumb included (R28-R29, E4).

        It needs the items the state summarises (`summarised`) as ``older``: position -> item
        as the log holds it now (None: swept); ``ValueError`` without them.
        """
        return self.index.render(self.window(View.CONVERSATION), older)

    @property
    def summarised(self) -> range:
        """The log positions of the conversation view this state does not hold (ADR-0030)."""
        start = max(self.window(View.CONVERSATION).start, self.index.lo)
        return range(start, max(start, self.index.base))

    @property
    def region_span(self) -> range:
        """The log positions the state summarises (its region, ADR-0030), in view or not."""
        return range(self.index.lo, self.index.base)

    def chat_view(
        self, older: Mapping[int, ConversationMessage | None] | None = None
    ) -> list[ChatMessage]:
        """The provider-facing working history (R27a: equals the last prepared request).

        Held whole by every state its events could make; ``older`` (the log's items) serves
        a log whose trims no decider made (a forged one, read by the audit)."""
        view = chat_messages_of(self.index.render(self.chat, older))
        summary = self.summary
        if summary is not None:  # issue 24: the summary stands where the breadcrumb is
            view = [summary.message if m.synthetic else m for m in view]
        return view

    def newest_turn_chat(self) -> list[ChatMessage]:
        """The chat view's newest turn (its whole body when it has no turn); O(that turn).

        What `decider.unanswered_tool_calls` reads: the head (system messages, breadcrumb)
        carries no tool call, so the turn alone gives the same answer as the whole view.
        """
        starts = self.index.turns_from(self.chat.start)
        first = starts[-1] if starts else self.chat.start
        return chat_messages_of(item for _, item in self.index.present_from(first))

    @property
    def pricing(self) -> Pricing:
        """How this session's estimate prices content (issue 21, `session_pricing`)."""
        return session_pricing(self.profile)

    def start(self, profile: RuntimeProfile) -> None:
        """Take the recorded profile; the (empty) index prices by its pricing."""
        self.profile = profile
        self.index = WindowIndex(conversation_rows(session_pricing(profile)))

    def chat_tokens(self) -> int:
        """The estimate of `chat_view` (R20-R23); O(1)."""
        tokens = self.index.tokens(self.chat)
        summary = self.summary
        if summary is not None:
            tokens += summary.tokens - BREADCRUMB_TOKENS
        return tokens

    # -- changes, applied by `evolve` --

    def record(self, item: ConversationMessage) -> None:
        """Append ``item`` to the log; a leading system message moves both windows past it.
        A new turn leaves what a sweep took from the turn before swept for good (R36)."""
        if self.index.append(item):
            self.conversation = self.chat = Window(self.index.base)
        if self.restorable and self.index.rows.is_turn_start(item):
            self.restorable = ()

    def trim(self, view: View, first_kept: int) -> None:
        """Start ``view``'s window at ``first_kept``, without a breadcrumb yet (R3, R31).

        The chat view never shows more than the conversation view, so a conversation trim
        drags it along. A legacy session's single window moves both starts.
        """
        kept = Window(first_kept)
        chat = self.chat
        if self.loop.window_of(view) is View.CONVERSATION:
            self.conversation = kept
            if self.chat.start < first_kept:
                self.chat = kept
        else:
            self.chat = kept
            if self.loop is Loop.LEGACY:
                self.conversation = Window(first_kept, self.conversation.breadcrumb)
        if self.summary is not None and self.chat != chat:
            self.summary = None  # the summary explained the window it was recorded with
        # A legacy session's conversation start follows its chat start, so this is its window.
        self.index.forget_before(min(self.conversation.start, self.chat.start))
        self.index.compact_before(self.chat.start)

    def mark_breadcrumb(self, view: View) -> None:
        """A breadcrumb now precedes ``view``'s kept turns, and the chat view's too (R31)."""
        if self.loop.window_of(view) is View.CONVERSATION:
            self.conversation = Window(self.conversation.start, breadcrumb=True)
        self.chat = Window(self.chat.start, breadcrumb=True)

    def pop_needs(self) -> range:
        """The log positions a pop must be given (`PopMessage.summarised`): the summarised
        part of the conversation view when no held item of it is left, else none."""
        if self.index.newest_held(self.window(View.CONVERSATION).start) is not None:
            return range(0)
        return self.summarised

    def newest_in_view(
        self, older: Mapping[int, ConversationMessage | None] | None = None
    ) -> tuple[int, ConversationMessage] | None:
        """The position and item of the newest message the conversation view shows from the
        log: not a leading or retained system message (R4), not the breadcrumb; None when
        there is none. O(1) unless the newest items were removed from the views.

        A system message a trim kept from the dropped turns (R9) is retained from the trim
        on: never popped. When every held item of the view is gone, the newest is summarised:
        ``older`` must then hold the positions `pop_needs` names (`ValueError` otherwise)."""
        newest = self.index.newest_held(self.window(View.CONVERSATION).start)
        span = range(0) if newest is not None else self.summarised
        if not span:
            return newest
        if older is None or any(p not in older for p in span):
            raise ValueError(
                f"the newest message of the view is summarised: a pop needs the log's items "
                f"at {span.start}..{span.stop - 1} (`SessionState.pop_needs`)"
            )
        for position in reversed(span):
            item = older[position]
            if item is not None:
                return position, item
        return None

    def clear(self, next_position: int) -> None:
        """Remove every message from the views: the log goes on at ``next_position``."""
        self.index = WindowIndex(self.index.rows, base=next_position)
        self.conversation = self.chat = Window(next_position)
        self.summary = None
        self.restorable = ()

    def pop(
        self,
        position: int,
        older: Mapping[int, ConversationMessage | None] | None = None,
    ) -> None:
        """Remove the item popped at ``position`` from the views (the log keeps it).

        A summarised item needs ``older``, the log's items of the summarised part
        (`pop_needs`): its turn is held again, popped, and summarised again, so the state
        has the form a trim would give it (ADR-0076); ``ValueError`` without them.

        Popping the message a window starts at (pops go newest first: every kept turn is
        gone then) leaves a start that is no longer a turn start. The index forgets what
        lies before it, as a trim does (nothing there is shown again but its systems, which
        it retains), so the start stays a bound of the index: a later trim summarises the
        log around it without splitting a turn there.
        """
        index = self.index
        if self.restorable:  # a popped item stays out of the views (E5)
            self.restorable = tuple((p, i) for p, i in self.restorable if p != position)
        summarised = index.lo <= position < index.base
        if summarised:
            if older is None:
                raise ValueError(
                    f"position {position} is summarised: its pop needs the log's items "
                    f"(`SessionState.pop_needs`)"
                )
            index.remove_summarised(position, older)
        else:
            index.replace({position: None})
        if position == self.window(View.CONVERSATION).start:
            index.forget_before(position)
        if summarised:
            index.compact_before(self.chat.start)

    def sweep(
        self, changes: Mapping[int, ConversationMessage | None], restorable: Iterable[int] = ()
    ) -> None:
        """Replace swept items (``None``: removed from the views, still in the log, R36).

        ``restorable``: positions of the newest turn among them whose items, as they are
        before this sweep, a tool result may bring back (E5); an item already
        taken by an earlier sweep keeps the form that sweep found, the log's."""
        known = dict(self.restorable)
        for position in restorable:
            item = self.index.held(position)
            if position not in known and item is not None:
                known[position] = item
        if len(known) != len(self.restorable):
            self.restorable = tuple(sorted(known.items(), key=_first))
        self.index.replace(changes)

    def bring_back(self, restored: Iterable[tuple[int, ConversationMessage]]) -> None:
        """Show ``restored`` items again (`ToolCallsRestored`, E5); a position
        shown as the log holds it is no longer restorable."""
        changes = dict(restored)
        self.index.replace(changes)
        self.restorable = tuple(
            (p, item) for p, item in self.restorable if changes.get(p) != item
        )

    def newest_turn_start(self) -> int:
        """The log position the newest turn starts at (the chat view's start without a turn)."""
        starts = self.index.count_turns_from(self.chat.start)
        return self.index.turn_from(self.chat.start, starts - 1) if starts else self.chat.start


def _first(pair: tuple[int, ConversationMessage]) -> int:
    return pair[0]



EVERY_POSITION = range(sys.maxsize)
"""Every log position: `collect_summarised` then keeps the whole log (the replay tools)."""


def collect_summarised(
    older: dict[int, ConversationMessage | None],
    events: Iterable[DomainEvent],
    span: range = EVERY_POSITION,
) -> None:
    """Add to ``older`` the items at the positions ``span`` as ``events`` (a session's log, in
    order, page by page) leave them: appended, then popped or swept (None) or rewritten (R36).

    ``events`` are the store's or the decider's (`unchecked_events`); O(events)."""
    for event in unchecked_events(events):
        note_item(older, event, span)


_CHANGES_LOG_ITEMS: Final = Deciders(ChangesLogItems)


def note_item(
    older: dict[int, ConversationMessage | None], event: Event, span: range = EVERY_POSITION
) -> None:
    """`collect_summarised` of one event: what a fold that keeps the log calls per event.

    Only the events that change an item of the log (`ChangesLogItems`) do anything: a trim
    or a clear only moves the views, a request or a notice changes nothing."""
    if not _CHANGES_LOG_ITEMS[event.__class__]:
        return
    changes = cast("ChangesLogItems", event)
    match changes:
        case MessageAppended():
            if changes.position in span:
                older[changes.position] = changes.message
        case MessagePopped():
            if changes.position in span:
                older[changes.position] = None
        case OrphansSwept():
            older.update((p, None) for p in changes.positions if p in span)
            older.update((p, item) for p, item in changes.rewritten if p in span)
        case ToolResultsCleared():
            older.update((p, item) for p, item in changes.rewritten if p in span)
        case ToolCallsRestored():
            older.update((p, item) for p, item in changes.restored if p in span)
        case _:
            assert_never(changes)
