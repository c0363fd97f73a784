"""The session decider: ``decide(state, command) -> events`` and ``evolve(state, event)``.

The same code drives live sessions, restores and what-if replays (STYLE 2). A session's
history is an append-only *log* of `ConversationMessage` items (positions 0, 1, 2, ...). Each view
is "leading system messages + system messages retained from the dropped region + an optional
breadcrumb + a suffix of the log (minus swept orphans)", because trimming only ever drops the
oldest whole turns (R3). The state therefore keeps only:

- the leading system messages and the system messages retained from dropped turns (R4, R9);
- the *window*: the log from the earliest view cursor to the end, with per-item estimates,
  prefix sums and turn starts, so that a token trim is a forward scan over dropped turns and
  preparing a request costs O(what is sent), not O(session length) (ADR-0002);
- the two cursors (conversation view, chat view) and breadcrumb flags, the route, the counters.

``evolve`` applies an event to the state *in place* and returns it: a fold over a mutable
accumulator, so that appending costs O(1) instead of copying the window (ADR-0005). ``decide``
never mutates. `execute` runs a command's steps (decide one step, evolve it, decide the next), which
is how one command (an append that crosses the turn limit) yields several events.
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any
from uuid import UUID

import attrs

from turnledger.domain.budget import (
    ProviderProfile,
    ResolvedRoute,
    Route,
    RuntimeProfile,
    find_provider,
    resolve_route,
)
from turnledger.domain.errors import InvalidMessage, InvalidProfile, TurnledgerError
from turnledger.domain.estimate import (
    BREADCRUMB_TOKENS,
    FRAMING_TOKENS,
    message_tokens,
    text_tokens,
)
from turnledger.domain.events import (
    BreadcrumbInserted,
    DomainEvent,
    HistoryTrimmed,
    MessageAppended,
    OrphansSwept,
    OverflowRecovered,
    OverflowReported,
    OverflowUnrecoverable,
    Purpose,
    RequestPrepared,
    RequestRejected,
    RouteReason,
    RouteSelected,
    SessionStarted,
    TrimDecided,
    TrimReason,
    TrimTrigger,
    View,
)
from turnledger.domain.messages import (
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolResults,
    as_conversation_message,
    parse_tool_envelope,
    to_chat_messages,
)
from turnledger.domain.sweep import sweep_conversation_orphans
from turnledger.domain.trimming import turns_to_drop_for_budget, turns_to_drop_for_count
from turnledger.domain.truncate import truncate_conversation_message
from turnledger.domain.turns import is_system_item, is_turn_start_item

__all__ = [
    "AppendMessage",
    "Command",
    "EnforceTokenBudget",
    "EnforceTurnLimit",
    "PrepareRequest",
    "PreparedRequest",
    "RecoverFromOverflow",
    "SelectRoute",
    "SessionState",
    "StartSession",
    "SweepOrphans",
    "decide",
    "evolve",
    "execute",
    "request_digest",
    "request_overhead_tokens",
]


# --- commands -------------------------------------------------------------------------------

@attrs.frozen
class StartSession:
    session_id: UUID
    profile: RuntimeProfile
    providers: tuple[ProviderProfile, ...]
    route: Route
    legacy: bool
    now: datetime


@attrs.frozen
class AppendMessage:
    """Record one message; a `ChatMessage` is taken as `Chat`, anything else is invalid.

    ``truncate=False`` records tool results as given: for replays of a message the recording
    already truncated (R38), since truncating a truncated text again only adds a marker.
    """

    message: ConversationMessage | ChatMessage
    now: datetime
    truncate: bool = attrs.field(default=True, kw_only=True)


@attrs.frozen
class EnforceTurnLimit:
    trigger: TrimTrigger
    now: datetime


@attrs.frozen
class EnforceTokenBudget:
    """Trim the chat view to ``target`` tokens (None: the route's budget, R24)."""

    trigger: TrimTrigger
    target: int | None
    now: datetime


@attrs.frozen
class PrepareRequest:
    """Prepare a request whose tool schemas and hook texts cost the given tokens (R18).

    Carries token counts, not texts, so a replay can re-run a request from what was recorded;
    `from_texts` counts real texts with `request_overhead_tokens`.
    """

    tool_tokens: int
    hook_tokens: int
    final_summary: bool
    now: datetime

    @classmethod
    def from_texts(
        cls, tools: Sequence[str], hooks: Sequence[str], final_summary: bool, now: datetime
    ) -> PrepareRequest:
        tool_tokens, hook_tokens = request_overhead_tokens(tools, hooks)
        return cls(tool_tokens, hook_tokens, final_summary, now)


@attrs.frozen
class RecoverFromOverflow:
    error: str
    now: datetime


@attrs.frozen
class SelectRoute:
    route: Route
    reason: RouteReason
    now: datetime


@attrs.frozen
class SweepOrphans:
    now: datetime


Command = (
    StartSession
    | AppendMessage
    | EnforceTurnLimit
    | EnforceTokenBudget
    | PrepareRequest
    | RecoverFromOverflow
    | SelectRoute
    | SweepOrphans
)


@attrs.frozen
class PreparedRequest:
    """What the runtime sends to the provider (API.md), after R18's capacity check."""

    messages: list[ChatMessage]
    route: Route
    capacity: int | None
    budget: int
    estimated_tokens: int
    model_context_window: int | None
    window: int = attrs.field(kw_only=True)
    purpose: Purpose = attrs.field(default=Purpose.TURN, kw_only=True)
    digest: str = attrs.field(default="", kw_only=True)


# --- request accounting (one place) ---------------------------------------------------------

def request_digest(messages: Iterable[ChatMessage]) -> str:
    """SHA-256 of the exact messages of a request (E6), stable across versions and platforms."""
    canonical = [
        [m.role, m.content, list(m.attachments), m.synthetic] for m in messages
    ]
    raw = json.dumps(canonical, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(raw).hexdigest()


def request_overhead_tokens(tools: Sequence[str], hooks: Sequence[str]) -> tuple[int, int]:
    """Estimated (tool schema tokens, hook tokens) of a request (R18).

    Tool schemas are counted as their JSON text; each hook text as a message of its own
    (text plus the 4 framing tokens of R20).
    """
    tool_tokens = sum(text_tokens(schema) for schema in tools)
    hook_tokens = sum(text_tokens(hook) + FRAMING_TOKENS for hook in hooks)
    return tool_tokens, hook_tokens


# --- state ----------------------------------------------------------------------------------

@lru_cache(maxsize=8192)
def _chat_of(item: ConversationMessage) -> tuple[ChatMessage, ...]:
    """The provider-facing messages of one item, memoised: items are immutable, and a
    window's items are rendered again for every request (the cache hits by identity)."""
    return tuple(to_chat_messages((item,)))


def _sent_count(item: ConversationMessage | None) -> int:
    """How many provider-facing messages an item becomes."""
    return len(item.results) if isinstance(item, ToolResults) else int(item is not None)


def _base_cost(item: ConversationMessage) -> int:
    """Estimate of an item outside the current turn (tool attachments cost nothing, R22)."""
    return sum(message_tokens(m, current_turn=False) for m in _chat_of(item))


def _current_extra(item: ConversationMessage) -> int:
    """What an item costs more inside the current turn (its tool attachments, R21-R22)."""
    return sum(
        message_tokens(m, current_turn=True) - message_tokens(m, current_turn=False)
        for m in _chat_of(item)
        if m.role == "tool" and m.attachments
    )


@attrs.define
class SessionState:
    """The compact state of one session: enough to build both views and decide (ADR-0002).

    Positions are log positions. ``base`` is the log position of ``items[0]``; ``cost_prefix[i]``
    is the summed base estimate of ``items[:i]``, ``sys_prefix[i]`` that of the system items
    among them, ``real_prefix[i]`` the number of real (non-system, non-swept) items among them
    and ``sent_prefix[i]`` the number of provider-facing messages those items become (a
    `ToolResults` of three results is three tool messages).
    """

    session_id: UUID | None = None
    version: int = 0
    profile: RuntimeProfile = attrs.field(factory=RuntimeProfile)
    providers: tuple[ProviderProfile, ...] = ()
    legacy: bool = False
    resolved: ResolvedRoute | None = None
    leading: list[ConversationMessage] = attrs.field(factory=list)
    retained: list[ConversationMessage] = attrs.field(factory=list)
    base: int = 0
    items: list[ConversationMessage | None] = attrs.field(factory=list)
    extras: list[int] = attrs.field(factory=list)
    cost_prefix: list[int] = attrs.field(factory=lambda: [0])
    sys_prefix: list[int] = attrs.field(factory=lambda: [0])
    real_prefix: list[int] = attrs.field(factory=lambda: [0])
    sent_prefix: list[int] = attrs.field(factory=lambda: [0])
    turn_starts: list[int] = attrs.field(factory=list)
    system_positions: list[int] = attrs.field(factory=list)
    conv_cursor: int = 0
    chat_cursor: int = 0
    conv_breadcrumb: bool = False
    chat_breadcrumb: bool = False
    leading_cost: int = 0
    retained_cost: int = 0

    # -- basic facts --

    @property
    def started(self) -> bool:
        return self.session_id is not None

    @property
    def next_position(self) -> int:
        return self.base + len(self.items)

    @property
    def route(self) -> ResolvedRoute:
        if self.resolved is None:
            raise TurnledgerError("session has not been started")
        return self.resolved

    def _idx(self, position: int) -> int:
        return position - self.base

    def _body_start(self, cursor: int) -> int:
        return max(cursor, self.base)

    def turns_from(self, cursor: int) -> list[int]:
        """Turn-start positions at or after ``cursor`` (ascending)."""
        return self.turn_starts[bisect_left(self.turn_starts, cursor):]

    def cursor_of(self, view: View) -> int:
        if view is View.CONVERSATION and not self.legacy:
            return self.conv_cursor
        return self.chat_cursor

    def breadcrumb_of(self, view: View) -> bool:
        if view is View.CONVERSATION and not self.legacy:
            return self.conv_breadcrumb
        return self.chat_breadcrumb

    # -- views --

    def _head_and_body(
        self, cursor: int
    ) -> tuple[list[ConversationMessage], list[ConversationMessage]]:
        """System messages kept ahead of the body, and the body from ``cursor``; O(window)."""
        start = self._body_start(cursor)
        late = self.system_positions[: bisect_left(self.system_positions, start)]
        head = [*self.leading, *self.retained]
        head.extend(i for p in late if (i := self.items[self._idx(p)]) is not None)
        body = [i for i in self.items[self._idx(start):] if i is not None]
        return head, body

    def view_items(self, view: View) -> list[ConversationMessage]:
        """The structured items of a view, breadcrumb included (E4)."""
        head, body = self._head_and_body(self.cursor_of(view))
        crumb = [Chat(ChatMessage.breadcrumb())] if self.breadcrumb_of(view) else []
        return [*head, *crumb, *body]

    def chat_view(self) -> list[ChatMessage]:
        """The provider-facing working history (R27a: equals the last prepared request)."""
        return [m for item in self.view_items(View.CHAT) for m in _chat_of(item)]

    def conversation_view(self) -> list[ConversationMessage]:
        return self.view_items(View.CONVERSATION)

    # -- accounting (O(1) per question, from prefix sums) --

    def _sum(self, prefix: list[int], start: int, end: int) -> int:
        return prefix[self._idx(end)] - prefix[self._idx(start)]

    def _last_turn_start(self) -> int | None:
        return self.turn_starts[-1] if self.turn_starts else None

    def _current_extra_from(self, start: int) -> int:
        """Attachment costs of the current turn within a body starting at ``start``."""
        current = self._last_turn_start()
        first = start if current is None or current < start else current
        return sum(self.extras[self._idx(first):])

    def chat_tokens(self, cursor: int | None = None, breadcrumb: bool | None = None) -> int:
        """Estimate of the chat view if its body started at ``cursor`` (R20-R23)."""
        cursor = self.chat_cursor if cursor is None else cursor
        crumb = self.chat_breadcrumb if breadcrumb is None else breadcrumb
        start = self._body_start(cursor)
        end = self.next_position
        return (
            self.leading_cost
            + self.retained_cost
            + self._sum(self.sys_prefix, self.base, start)
            + (BREADCRUMB_TOKENS if crumb else 0)
            + self._sum(self.cost_prefix, start, end)
            + self._current_extra_from(start)
        )

    def dropped_between(self, old: int, new: int, view: View) -> int:
        """Real messages dropped when a body start moves from ``old`` to ``new`` (R32).

        Counted in the units of ``view``: history items for the conversation view,
        provider-facing messages for the chat view.
        """
        prefix = self.real_prefix if view is View.CONVERSATION else self.sent_prefix
        return self._sum(prefix, self._body_start(old), self._body_start(new))

    # -- mutation helpers used by evolve --

    def _push(self, item: ConversationMessage | None) -> None:
        cost = 0 if item is None else _base_cost(item)
        system = item is not None and is_system_item(item)
        position = self.next_position
        self.items.append(item)
        self.extras.append(0 if item is None else _current_extra(item))
        self.cost_prefix.append(self.cost_prefix[-1] + cost)
        self.sys_prefix.append(self.sys_prefix[-1] + (cost if system else 0))
        real = not system and item is not None
        self.real_prefix.append(self.real_prefix[-1] + (1 if real else 0))
        self.sent_prefix.append(self.sent_prefix[-1] + (_sent_count(item) if real else 0))
        if item is not None and is_turn_start_item(item):
            self.turn_starts.append(position)
        if system:
            self.system_positions.append(position)

    def restore_window(self, route: Route, items: Iterable[ConversationMessage | None]) -> None:
        """Recompute everything derived from a snapshot's window; ``None`` marks a swept item.

        The caller has set ``base``, the leading/retained messages, profile and providers.
        """
        self.resolved = resolve_route(self.profile, self.providers, route)
        self.leading_cost = sum(_base_cost(i) for i in self.leading)
        self.retained_cost = sum(_base_cost(i) for i in self.retained)
        self._reindex(items)

    def _reindex(self, items: Iterable[ConversationMessage | None]) -> None:
        """Rebuild the window's estimates, prefix sums and positions from its items; O(window)."""
        self.items, self.extras = [], []
        self.cost_prefix, self.sys_prefix = [0], [0]
        self.real_prefix, self.sent_prefix = [0], [0]
        self.turn_starts, self.system_positions = [], []
        for item in items:
            self._push(item)

    def compact(self) -> None:
        """Forget log items no view can show again (before the earliest cursor).

        Runs only once the forgettable part is at least half the window, so its O(window) copy
        is amortised O(1) per trim; until then the views skip those items through their
        cursors.
        """
        earliest = min(self.conv_cursor, self.chat_cursor) if not self.legacy else self.chat_cursor
        cut = self._idx(earliest)
        if cut <= 0 or 2 * cut < len(self.items):
            return
        for p in self.system_positions[: bisect_left(self.system_positions, earliest)]:
            item = self.items[self._idx(p)]
            if p >= self.base and item is not None:
                self.retained.append(item)
                self.retained_cost += self._sum(self.cost_prefix, p, p + 1)
        self.items = self.items[cut:]
        self.extras = self.extras[cut:]
        self.base = earliest
        self.turn_starts = self.turn_starts[bisect_left(self.turn_starts, earliest):]
        self.system_positions = self.system_positions[
            bisect_left(self.system_positions, earliest):
        ]
        # Sums are read as differences of prefix values, so a suffix of each prefix list is
        # still valid after the cut: no need to recompute them.
        self.cost_prefix = self.cost_prefix[cut:]
        self.sys_prefix = self.sys_prefix[cut:]
        self.real_prefix = self.real_prefix[cut:]
        self.sent_prefix = self.sent_prefix[cut:]


# --- evolve ---------------------------------------------------------------------------------

def evolve(state: SessionState, event: DomainEvent) -> SessionState:
    """Apply one recorded event to ``state`` (in place) and return it; O(1) amortised."""
    match event:
        case SessionStarted():
            state.session_id = event.originator_id
            state.profile = event.profile
            state.providers = tuple(event.providers)
            state.legacy = event.legacy
            state.resolved = resolve_route(event.profile, event.providers, event.route)
        case MessageAppended(message=item):
            if state.next_position == len(state.leading) and is_system_item(item):
                state.leading.append(item)
                state.leading_cost += _base_cost(item)
                state.base += 1
                state.conv_cursor = state.chat_cursor = state.base
            else:
                state._push(item)
        case RouteSelected():
            state.resolved = resolve_route(state.profile, state.providers, event.route)
        case TrimDecided(view=view, first_kept_position=position):
            if view is View.CONVERSATION and not state.legacy:
                state.conv_cursor = position
                state.conv_breadcrumb = False
                if state.chat_cursor < position:
                    state.chat_cursor = position
                    state.chat_breadcrumb = False
            else:
                state.chat_cursor = position
                state.chat_breadcrumb = False
                if state.legacy:
                    state.conv_cursor = position
            state.compact()
        case BreadcrumbInserted(view=view):
            if view is View.CONVERSATION and not state.legacy:
                state.conv_breadcrumb = True
                state.chat_breadcrumb = True
            else:
                state.chat_breadcrumb = True
        case OrphansSwept(positions=positions, rewritten=rewritten):
            # A swept item stays in the log; in the window it becomes a gap (None).
            changes: dict[int, ConversationMessage | None] = dict.fromkeys(positions)
            changes.update(rewritten)
            window = list(state.items)
            for p, replacement in changes.items():
                if p >= state.base:
                    window[state._idx(p)] = replacement
            state._reindex(window)
        case _:
            pass  # requests, rejections, overflow reports and notices change no view
    state.version = event.originator_version
    return state


# --- decide ---------------------------------------------------------------------------------

def _stamp(state: SessionState, now: datetime, offset: int) -> dict[str, Any]:
    if state.session_id is None:
        raise TurnledgerError("session has not been started")
    return {
        "originator_id": state.session_id,
        "originator_version": state.version + offset,
        "timestamp": now,
    }


def _trim_events(
    state: SessionState,
    *,
    view: View,
    trigger: TrimTrigger,
    reason: TrimReason,
    new_cursor: int,
    limit: int,
    now: datetime,
    visible: bool,
    offset: int = 0,
) -> list[DomainEvent]:
    """The events of one trim decision: TrimDecided, then breadcrumb + HistoryTrimmed (R31-R34)."""
    old_cursor = state.cursor_of(view)
    turns_before = len(state.turns_from(old_cursor))
    kept_turns = len(state.turns_from(new_cursor))
    dropped = state.dropped_between(old_cursor, new_cursor, view)
    tokens_before = state.chat_tokens(old_cursor, state.breadcrumb_of(view))
    tokens_after = state.chat_tokens(new_cursor, visible)
    events: list[DomainEvent] = [
        TrimDecided(
            **_stamp(state, now, offset + 1),
            view=view,
            trigger=trigger,
            reason=reason,
            first_kept_position=new_cursor,
            dropped_messages=dropped,
            dropped_turns=turns_before - kept_turns,
            kept_turns=kept_turns,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            limit=limit,
        )
    ]
    if visible:
        events.append(BreadcrumbInserted(
                **_stamp(state, now, offset + 2), view=view, before_position=new_cursor
            ))
        events.append(
            HistoryTrimmed(
                **_stamp(state, now, offset + 3),
                dropped_messages=dropped,
                kept_turns=kept_turns,
                reason=reason,
            )
        )
    return events


def _cursor_for_budget(state: SessionState, target: int) -> int | None:
    """First kept turn start so the chat view fits ``target`` (R7), or None if no trim helps.

    The rule is trimming's (`turns_to_drop_for_budget`: fewest whole turns, the newest kept even
    if still over, R6); the session only supplies the estimates, O(1) each from prefix sums.
    """
    starts = state.turns_from(state.chat_cursor)

    def tokens_after(dropped: int) -> int:
        return state.chat_tokens() if dropped == 0 else state.chat_tokens(starts[dropped], True)

    dropped = turns_to_drop_for_budget(len(starts), tokens_after, target)
    return starts[dropped] if dropped else None


def _decide_turn_limit(state: SessionState, command: EnforceTurnLimit) -> list[DomainEvent]:
    view = View.CHAT if state.legacy else View.CONVERSATION
    limit = state.profile.max_history_turns
    starts = state.turns_from(state.cursor_of(view))
    dropped = turns_to_drop_for_count(len(starts), limit)  # R6, R29: 0 keeps the newest turn
    if not dropped:
        return []
    return _trim_events(
        state,
        view=view,
        trigger=command.trigger,
        reason=TrimReason.TURN_LIMIT,
        new_cursor=starts[dropped],
        limit=limit,
        now=command.now,
        visible=not state.legacy,  # R34: the legacy loop reports the turn limit in logs only
    )


def _decide_token_budget(state: SessionState, command: EnforceTokenBudget) -> list[DomainEvent]:
    target = state.route.budget if command.target is None else command.target
    if target <= 0:
        return []  # R12: an explicit zero disables proactive trimming
    cursor = _cursor_for_budget(state, target)
    if cursor is None:
        return []
    return _trim_events(
        state,
        view=View.CHAT,
        trigger=command.trigger,
        reason=TrimReason.TOKEN_BUDGET,
        new_cursor=cursor,
        limit=target,
        now=command.now,
        visible=True,
    )


def _decide_prepare(state: SessionState, command: PrepareRequest) -> list[DomainEvent]:
    resolved = state.route
    messages = state.chat_view()
    tool_tokens, hook_tokens = command.tool_tokens, command.hook_tokens
    estimated = state.chat_tokens() + tool_tokens + hook_tokens
    purpose = Purpose.FINAL_SUMMARY if command.final_summary else Purpose.TURN
    if estimated > resolved.window:
        return [
            RequestRejected(
                **_stamp(state, command.now, 1),
                purpose=purpose,
                route=resolved.route,
                capacity=resolved.capacity,
                window=resolved.window,
                estimated_tokens=estimated,
                message_count=len(messages),
                detail=_rejection_text(resolved, estimated),
            )
        ]
    return [
        RequestPrepared(
            **_stamp(state, command.now, 1),
            purpose=purpose,
            route=resolved.route,
            capacity=resolved.capacity,
            budget=resolved.budget,
            window=resolved.window,
            estimated_tokens=estimated,
            message_count=len(messages),
            digest=request_digest(messages),
            tool_tokens=tool_tokens,
            hook_tokens=hook_tokens,
        )
    ]


def _rejection_text(resolved: ResolvedRoute, estimated: int) -> str:
    route = f"{resolved.route.provider}/{resolved.route.model}"
    source = "model context window" if resolved.capacity is not None else "fallback window"
    return (
        f"request needs about {estimated:,} tokens but the {source} of {route} is "
        f"{resolved.window:,} tokens; it was not sent (R18)"
    )


def _decide_overflow(state: SessionState, command: RecoverFromOverflow) -> list[DomainEvent]:
    estimate = state.chat_tokens()
    target = estimate * 2 // 3  # R25: two thirds of the current estimate, not the capacity
    reported = OverflowReported(
        **_stamp(state, command.now, 1),
        error=command.error[:2000],
        estimated_tokens=estimate,
        target_tokens=target,
    )
    state_turns = state.turns_from(state.chat_cursor)
    if len(state_turns) <= 1:
        floor = state.leading_cost + state.retained_cost
        detail = "only one turn is left: nothing can be trimmed"
        if floor > target:
            detail += f"; the system prompt alone is about {floor:,} tokens (target {target:,})"
        return [reported, OverflowUnrecoverable(**_stamp(state, command.now, 2), detail=detail)]
    cursor = _cursor_for_budget(state, target)
    trim = _trim_events(
        state,
        view=View.CHAT,
        trigger=TrimTrigger.OVERFLOW,
        reason=TrimReason.TOKEN_BUDGET,
        new_cursor=state_turns[-1] if cursor is None else cursor,
        limit=target,
        now=command.now,
        visible=True,
        offset=1,  # after the report
    )
    decided = trim[0]
    assert isinstance(decided, TrimDecided)
    after = decided.tokens_after
    recovered = OverflowRecovered(
        **_stamp(state, command.now, len(trim) + 2), tokens_before=estimate, tokens_after=after
    )
    return [reported, *trim, recovered]


def _decide_sweep(state: SessionState, command: SweepOrphans) -> list[DomainEvent]:
    start = state._body_start(state.conv_cursor if not state.legacy else state.chat_cursor)
    positions: list[int] = []
    items_in_view: list[ConversationMessage] = []
    for p in range(start, state.next_position):
        item = state.items[state._idx(p)]
        if item is not None:
            positions.append(p)
            items_in_view.append(item)
    result = sweep_conversation_orphans(items_in_view)
    if not result.removed_indices and not result.rewritten:
        return []
    return [
        OrphansSwept(
            **_stamp(state, command.now, 1),
            positions=tuple(positions[i] for i in result.removed_indices),
            orphan_tool_call_ids=tuple(result.orphan_tool_call_ids),
            removed=result.removed,
            rewritten=tuple((positions[i], item) for i, item in result.rewritten),
        )
    ]


def decide(state: SessionState, command: Command) -> list[DomainEvent]:
    """The events one step of ``command`` produces; never mutates ``state``.

    Raises `InvalidMessage` / `InvalidProfile` for bad input before anything is recorded.
    """
    match command:
        case StartSession():
            if state.started:
                raise TurnledgerError(f"session {state.session_id} is already started")
            _check_route(command.providers, command.route)
            resolved = resolve_route(command.profile, command.providers, command.route)
            return [
                SessionStarted(
                    originator_id=command.session_id, originator_version=1,
                    timestamp=command.now, profile=command.profile,
                    providers=command.providers, route=command.route, legacy=command.legacy,
                ),
                RouteSelected(
                    originator_id=command.session_id, originator_version=2,
                    timestamp=command.now, route=command.route, capacity=resolved.capacity,
                    budget=resolved.budget, window=resolved.window, reason=RouteReason.INITIAL,
                ),
            ]
        case AppendMessage():
            item = as_conversation_message(command.message)
            if isinstance(item, Chat) and item.message.synthetic:
                raise InvalidMessage("the breadcrumb is inserted by turnledger, not appended")
            limit = state.profile.max_tool_result_chars if command.truncate else 0
            bounded = truncate_conversation_message(item, limit) if limit else item
            original = _longest_tool_text(item) if bounded != item else None
            return [
                MessageAppended(
                    **_stamp(state, command.now, 1),
                    position=state.next_position,
                    message=bounded,
                    original_chars=original,
                )
            ]
        case EnforceTurnLimit():
            return _decide_turn_limit(state, command)
        case EnforceTokenBudget():
            return _decide_token_budget(state, command)
        case PrepareRequest():
            return _decide_prepare(state, command)
        case RecoverFromOverflow():
            # The caller classified the error (R26, `is_context_window_exceeded`), which can
            # look through an exception's causes; the command carries its text for the record.
            return _decide_overflow(state, command)
        case SelectRoute():
            _check_route(state.providers, command.route)
            resolved = resolve_route(state.profile, state.providers, command.route)
            return [
                RouteSelected(
                    **_stamp(state, command.now, 1),
                    route=command.route,
                    capacity=resolved.capacity,
                    budget=resolved.budget,
                    window=resolved.window,
                    reason=command.reason,
                )
            ]
        case SweepOrphans():
            return _decide_sweep(state, command)
    raise TypeError(f"unknown command {type(command).__name__}")


def _check_route(providers: Sequence[ProviderProfile], route: Route) -> None:
    if not isinstance(route, Route):
        raise InvalidProfile(f"route must be a Route, got {type(route).__name__}")
    if providers and find_provider(providers, route.provider) is None:
        names = ", ".join(p.name for p in providers)
        raise InvalidProfile(
            f"route.provider {route.provider!r} is not a configured provider ({names})"
        )


def _longest_tool_text(item: ConversationMessage) -> int | None:
    match item:
        case ToolResults(results=results):
            return max(len(r.content) for r in results)
        case Chat(message=m) if m.role == "tool":
            parsed = parse_tool_envelope(m.content)
            return len(parsed[1]) if parsed else len(m.content)
    return None


def execute(state: SessionState, command: Command) -> list[DomainEvent]:
    """Run one command to completion: decide a step, evolve it, decide the next (in place).

    Returns every event the command produced, in order, already applied to ``state``. On an
    exception ``state`` may hold part of the command: the caller rebuilds it from the store.
    """
    steps: list[Command]
    match command:
        case AppendMessage():
            steps = [command]
            item = as_conversation_message(command.message)
            if is_turn_start_item(item):
                steps.append(EnforceTurnLimit(TrimTrigger.APPEND, command.now))  # R27a
        case PrepareRequest():
            steps = [
                EnforceTurnLimit(TrimTrigger.PREPARE, command.now),  # R27a
                EnforceTokenBudget(TrimTrigger.PREPARE, None, command.now),  # R24
                command,
            ]
        case _:
            steps = [command]
    produced: list[DomainEvent] = []
    for step in steps:
        for event in decide(state, step):
            evolve(state, event)
            produced.append(event)
    return produced
