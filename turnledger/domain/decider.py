"""The session decider: ``decide(state, command) -> events`` and ``evolve(state, event)``.

The same code drives live sessions, restores and what-if replays (ADR-0005). The state
(`turnledger.domain.state.SessionState`) keeps a session's facts and the index of its log; every
trim is chosen by `turnledger.domain.trimming` and priced and counted by
`turnledger.domain.window`, the same functions the pure trims call.

``evolve`` applies an event to the state *in place* and returns it: a fold over a mutable
accumulator, so that appending costs O(1) instead of copying the window (ADR-0005). ``decide``
never mutates. `run` runs a command's steps (decide one step, evolve it, decide the next), which
is how one command (an append that crosses the turn limit) yields several events; its `Batch`
numbers the events as they are added and carries the request a `PrepareRequest` rendered.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial
from operator import is_
from typing import Any, Final, TypeVar, assert_never, cast
from uuid import UUID

import attrs

from turnledger.domain.bodies import (
    API_ANTHROPIC,
    API_OPENAI_CHAT,
    API_OPENAI_RESPONSES,
    LeftOut,
    fit_messages,
    prompt_cache_key,
    render_body,
)
from turnledger.domain.budget import (
    BILLED_KEPT,
    ProviderProfile,
    ResolvedRoute,
    Route,
    RuntimeProfile,
    corrected_limit,
    estimate_correction,
    find_provider,
    low_water_tokens,
    resolve_route,
)
from turnledger.domain.compaction import cleared_item
from turnledger.domain.errors import InvalidMessage, InvalidProfile, TurnledgerError
from turnledger.domain.estimate import (
    BREADCRUMB_TOKENS,
    FRAMING_TOKENS,
    estimate_history_tokens,
    text_tokens,
)
from turnledger.domain.events import (
    EVENT_TYPES,
    STAMP_FIELDS,
    BreadcrumbInserted,
    ChangesViews,
    Deciders,
    DomainEvent,
    Event,
    HistoryCleared,
    HistoryTrimmed,
    MessageAppended,
    MessagePopped,
    OrphansSwept,
    OverflowRecovered,
    OverflowReported,
    OverflowUnrecoverable,
    Purpose,
    RejectionReason,
    RequestPrepared,
    RequestRejected,
    RouteReason,
    RouteSelected,
    SessionStarted,
    SummaryRefusal,
    SummaryRefused,
    ToolCallsRestored,
    ToolResultsCleared,
    TrimDecided,
    TrimReason,
    TrimTrigger,
    TurnsSummarized,
    UsageRecorded,
    View,
    registered_events,
    unchecked_events,
)
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolResult,
    ToolResults,
    as_conversation_message,
    chat_tool_call_id,
    chat_tool_calls,
    check_appended,
    classify_appended,
    is_real_user_message,
    parse_tool_envelope,
)
from turnledger.domain.pricing import DEFAULT_PRICING, Pricing, openai_tool_tokens
from turnledger.domain.providers import block_json
from turnledger.domain.state import DigestPrefix, SessionState, Summary, summary_message
from turnledger.domain.sweep import (
    answered_ids,
    called_ids,
    pairs_among_themselves,
    sweep_conversation_orphans,
    unanswered_calls,
)
from turnledger.domain.trimming import (
    turns_to_drop_for_budget,
    window_for_budget,
    window_for_count,
)
from turnledger.domain.truncate import truncate_conversation_message
from turnledger.domain.turns import is_system_item, is_turn_start_item
from turnledger.domain.usage import Usage
from turnledger.domain.window import Cut, Window, chat_messages_of

__all__ = [
    "AppendMessage",
    "Batch",
    "ClearHistory",
    "Command",
    "Extend",
    "FitWindow",
    "ImportConversation",
    "PopMessage",
    "PrepareRequest",
    "PreparedRequest",
    "RecordEvent",
    "RecoverFromOverflow",
    "SelectRoute",
    "SessionState",
    "StartSession",
    "Summarize",
    "SummaryOutcome",
    "SummaryPlan",
    "SweepOrphans",
    "evolve",
    "execute",
    "request_digest",
    "run",
]

E = TypeVar("E", bound=DomainEvent)


# --- commands -------------------------------------------------------------------------------

@attrs.frozen
class StartSession:
    """Start a session. A profile whose pricing is not chosen records `Pricing()` (issue 21),
    unless ``recorded``: a replay of a recorded start takes its profile as it was."""

    session_id: UUID
    profile: RuntimeProfile
    providers: tuple[ProviderProfile, ...]
    route: Route
    legacy: bool
    now: datetime
    recorded: bool = attrs.field(default=False, kw_only=True)


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
class SummaryPlan:
    """What a summarizer is asked to summarise (issue 24, `plan_summary`): the chat messages
    of the whole turns at log positions ``first_position..last_position`` a token-budget trim
    keeping the turns from ``kept_start`` drops (their system messages stay in the view and
    are not among them), and the summary the view shows now (``previous``: summaries roll).

    ``covers_from``: where the new summary's coverage begins (the previous one's, else
    ``first_position``); ``digest``, the request digest of ``messages``; ``replaced_tokens``,
    what the summary would replace (the dropped turns and the breadcrumb or previous summary);
    ``paired``: False when a call of the range is not answered within it, which no summary
    may cover."""

    first_position: int
    last_position: int
    kept_start: int
    messages: tuple[ChatMessage, ...]
    previous: str | None
    covers_from: int
    digest: str
    replaced_tokens: int
    target: int
    paired: bool


@attrs.frozen
class SummaryOutcome:
    """What the runtime's summarizer made of a `SummaryPlan`: ``text``, or the ``refusal``
    (and its ``detail``) that makes the trim the plain one. Carried by `EnforceTokenBudget`
    into the decision (ADR-0086): the decider checks the plan still holds."""

    plan: SummaryPlan
    summarizer: str
    text: str | None = None
    refusal: SummaryRefusal | None = None
    detail: str = ""


Summarize = Callable[[SummaryPlan], SummaryOutcome | None]
"""The call `run` makes between two decisions of a budget trim (the store's, around the
runtime's summarizer, its time limit and its failures; a what-if's, reading the recorded
summaries): never inside `decide`. None: no summary for this plan, the plain trim stands
and nothing is recorded about a summary."""


@attrs.frozen
class EnforceTokenBudget:
    """Trim the chat view to ``target`` tokens (None: the route's budget, R24).

    ``summary``: the summarizer's outcome for this trim (issue 24), set by `run`; the trim
    then shows the summary in place of the breadcrumb, or records why not.
    ``after_clearing``: the step before it cleared tool results (set by `run`). With a
    low water (issue 35) that clearing was a forced trim's first part, so this one goes on
    down to the low water even when the clearing brought the view under the budget."""

    trigger: TrimTrigger
    target: int | None
    now: datetime
    summary: SummaryOutcome | None = attrs.field(default=None, kw_only=True)
    after_clearing: bool = attrs.field(default=False, kw_only=True)


_OPENAI_APIS: Final = (API_OPENAI_CHAT, API_OPENAI_RESPONSES)


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
        cls, tools: Sequence[str], hooks: Sequence[str], final_summary: bool, now: datetime,
        *, api: str | None = None, pricing: Pricing = DEFAULT_PRICING,
    ) -> PrepareRequest:
        """Count the texts: tool schemas as their JSON text (R18), or, when
        ``pricing`` opts in and ``api`` is OpenAI's, as OpenAI counts them (K6)."""
        tool_tokens, hook_tokens = request_overhead_tokens(tools, hooks)
        if pricing.by_kind and pricing.openai_tool_counting and api in _OPENAI_APIS:
            tool_tokens = openai_tool_tokens(tools)
        return cls(tool_tokens, hook_tokens, final_summary, now)


@attrs.frozen
class ImportConversation:
    """Start a session and record a whole conversation, as one batch (issue 8: import).

    The events are saved in one transaction, so a conversation is imported whole or not at all.
    By default the messages are recorded as given: no truncation (R38), no turn limit (R27a);
    the profile applies when a request is prepared. ``as_live=True`` records them as a live
    runtime would have: each append truncates and enforces the turn limit.
    """

    start: StartSession
    messages: tuple[ConversationMessage | ChatMessage, ...]
    as_live: bool = False

    @property
    def now(self) -> datetime:
        return self.start.now


@attrs.frozen
class Extend:
    """Record several messages as one command: each is appended as `AppendMessage` would,
    with every trim it triggers, and the events are saved in one transaction (E3)."""

    messages: tuple[ConversationMessage | ChatMessage, ...]
    now: datetime


@attrs.frozen
class FitWindow:
    """Apply the trims a request would (turn limit, token budget, orphan sweep: R24, R27a,
    R36) without preparing one: for a runtime that builds its request itself. ``messages``:
    recorded first, as `Extend` records them, in the same transaction (an agent step's new
    messages and the window for its next model call: one commit, not two)."""

    now: datetime
    messages: tuple[ConversationMessage | ChatMessage, ...] = ()


@attrs.frozen
class PopMessage:
    """Remove the newest message of the conversation view from the views (`MessagePopped`);
    leading system messages are never popped (R4). Records nothing when there is none.

    ``summarised``: the log's items (None: swept or popped) at the positions
    `SessionState.pop_needs` names, read by the caller (`collect_summarised`): the newest
    message is one of them once every held item of the view is gone. Needed then only;
    without them the pop raises `ValueError`. Not part of the command's identity (a retry
    reads them again, ADR-0064)."""

    now: datetime
    summarised: Mapping[int, ConversationMessage | None] | None = attrs.field(
        default=None, kw_only=True, eq=False
    )


@attrs.frozen
class ClearHistory:
    """Remove every message from the views (`HistoryCleared`); the log keeps them.
    Records nothing when the views are already empty. Needs no item of the log: the state's
    sums say how many messages the views show (`WindowIndex.shown`)."""

    now: datetime


@attrs.frozen
class ClearToolResults:
    """Replace older tool results' contents by placeholders (`ToolResultsCleared`), when the
    profile opts in (`Compaction.clear_tool_results`, issue 24): a step of a request, before
    its token-budget trim. Records nothing otherwise, or when nothing is left to clear.

    With a low water (`Compaction.low_water`, issue 35) it clears only when the chat view
    exceeds the budget, as the first part of that forced trim: the clearing boundary then
    moves once per forced trim, with the first kept turn, not once per turn."""

    now: datetime


@attrs.frozen
class RecoverFromOverflow:
    """Trim after a provider's overflow error (R25-R26) to two thirds of the estimate.

    ``summary``: the summarizer's outcome for the turns this trim drops (issue 24), set by
    `run` as for `EnforceTokenBudget`; the recovery then shows the summary in place of the
    breadcrumb, or records why not."""

    error: str
    now: datetime
    summary: SummaryOutcome | None = attrs.field(default=None, kw_only=True)


@attrs.frozen
class SelectRoute:
    route: Route
    reason: RouteReason
    now: datetime


@attrs.frozen
class SweepOrphans:
    """Sweep orphans (R36) from the conversation window (a restore), or from the chat window
    just before a request is rendered (``view=View.CHAT``, R36): what a trim or an
    append out of order would leave unpaired in the request."""

    now: datetime
    view: View = attrs.field(default=View.CONVERSATION, kw_only=True)


@attrs.frozen
class RestoreSweptCalls:
    """Bring back the calls a sweep took from the newest turn that the tool result just
    appended answers (E5): a step of an append of a tool result."""

    now: datetime


@attrs.frozen
class RecordEvent:
    """Record a runtime's own event (`register_event`): one ``kind`` built from ``fields``.
    It changes no view, counter or rule (a member of `Event` is recorded by its own command:
    `InvalidMessage` here)."""

    kind: type[DomainEvent]
    fields: Mapping[str, Any]
    now: datetime


@attrs.frozen
class RecordUsage:
    """Record what the provider billed for the request prepared at ``request_position``
    (`RequestPrepared` with ``digest`` and ``estimated_tokens``; None: a window `fit_window`
    handed out; issue 35). The session finds that request; the decision records it as is."""

    usage: Usage
    request_position: int | None
    digest: str
    estimated_tokens: int
    now: datetime


Command = (
    StartSession
    | ImportConversation
    | AppendMessage
    | EnforceTurnLimit
    | EnforceTokenBudget
    | PrepareRequest
    | RecoverFromOverflow
    | SelectRoute
    | SweepOrphans
    | Extend
    | FitWindow
    | PopMessage
    | ClearHistory
    | ClearToolResults
    | RestoreSweptCalls
    | RecordEvent
    | RecordUsage
)


@attrs.frozen
class PreparedRequest:
    """What the runtime sends to the provider (docs/api.md), after R18's capacity check.

    ``messages`` is the chat view the request was prepared from (its ``digest``); ``api`` the
    request API the route's provider names (None: not said), ``sent`` the messages as that API
    takes them and ``left_out`` what of ``messages`` they do not carry, and why (issue 21,
    `turnledger.domain.bodies`); ``estimated_tokens`` prices ``sent``. Without an API,
    ``sent`` is ``messages`` and nothing is left out.
    """

    messages: list[ChatMessage]
    route: Route
    capacity: int | None
    budget: int
    estimated_tokens: int
    model_context_window: int | None
    window: int = attrs.field(kw_only=True)
    purpose: Purpose = attrs.field(default=Purpose.TURN, kw_only=True)
    digest: str = attrs.field(default="", kw_only=True)
    api: str | None = attrs.field(default=None, kw_only=True)
    sent: list[ChatMessage] = attrs.field(kw_only=True)
    left_out: tuple[LeftOut, ...] = attrs.field(default=(), kw_only=True)
    cache_key: str | None = attrs.field(default=None, kw_only=True)
    """The session's OpenAI ``prompt_cache_key`` (`turnledger.domain.cache.prompt_cache_key`):
    send it beside an OpenAI body; None when the session has no id yet."""

    @sent.default
    def _sent_default(self) -> list[ChatMessage]:
        return self.messages

    def body(self, *, cache_breakpoints: bool = True) -> Any:
        """The body part of the route's API, as recorded: Chat ``messages``, Responses
        ``input`` items, or Anthropic ``{"system", "messages"}``; an Anthropic body carries
        cache breakpoints unless ``cache_breakpoints`` is False (ADR-0105).

        Raises `InvalidProfile` when the route's provider names no API (``api`` in its
        profile): call `to_openai_chat`, `to_openai_responses` or `to_anthropic` instead.
        """
        if self.api is None:
            raise InvalidProfile(
                f"provider {self.route.provider!r} names no api (openai_chat, "
                "openai_responses or anthropic): set it in its profile, or call "
                "to_openai_chat(), to_openai_responses() or to_anthropic()"
            )
        return render_body(self.sent, self.api, cache_breakpoints=cache_breakpoints)

    def left_out_for(self, api: str) -> tuple[LeftOut, ...]:
        """What a body for ``api`` leaves out of ``messages``: ``left_out`` for the route's
        API (recorded in `RequestPrepared`), else computed here and recorded nowhere."""
        return self.left_out if api == self.api else fit_messages(self.messages, api)[1]

    def _body_for(self, api: str, cache_breakpoints: bool = True) -> Any:
        sent = self.sent if api == self.api else fit_messages(self.messages, api)[0]
        return render_body(sent, api, cache_breakpoints=cache_breakpoints)

    def to_openai_chat(self) -> list[dict[str, Any]]:
        """The ``messages`` of an OpenAI Chat Completions request: what that API accepts
        (`left_out_for` says what it leaves out; `turnledger.domain.bodies`)."""
        return self._body_for(API_OPENAI_CHAT)  # type: ignore[no-any-return]

    def to_anthropic(self, *, cache_breakpoints: bool = True) -> dict[str, Any]:
        """The ``system`` and ``messages`` of an Anthropic Messages request (as accepted), with
        cache breakpoints unless ``cache_breakpoints`` is False (ADR-0105, docs/caching.md)."""
        return self._body_for(API_ANTHROPIC, cache_breakpoints)  # type: ignore[no-any-return]

    def to_openai_responses(self) -> list[dict[str, Any]]:
        """The ``input`` items of an OpenAI Responses request (as accepted)."""
        return self._body_for(API_OPENAI_RESPONSES)  # type: ignore[no-any-return]


# --- request accounting (one place) ---------------------------------------------------------

def request_digest(
    messages: Iterable[ChatMessage], prefix: DigestPrefix | None = None
) -> str:
    """SHA-256 of the exact messages of a request (E6), stable across versions and platforms:
    of the compact JSON list of ``[role, content, attachments, synthetic, *provider fields]``
    per message, which is the entries' own JSON texts joined by commas in brackets.

    ``prefix`` (a session's memo) makes it incremental: when the messages begin with the very
    objects last digested (a window that only grew), the hash of those is extended by the new
    entries alone (`hashlib`'s ``copy``); a window whose start moved is hashed again from
    ``[`` (SHA-256 cannot drop a prefix). The same bytes either way (ADR-0084).
    """
    messages = tuple(messages)
    if prefix is not None and prefix.messages and len(prefix.messages) <= len(messages) and all(
        map(is_, prefix.messages, messages)
    ):
        digest: hashlib._Hash = prefix.hasher.copy()
        grown = messages[len(prefix.messages):]
        if grown:
            digest.update(b",")
            digest.update(b",".join(map(_digest_entry, grown)))
    else:
        digest = hashlib.sha256(b"[")
        digest.update(b",".join(map(_digest_entry, messages)))
    if prefix is not None:
        prefix.messages, prefix.hasher = messages, digest.copy()
    digest.update(b"]")
    return digest.hexdigest()


_DIGEST_ENTRIES: dict[int, tuple[weakref.ref[ChatMessage], bytes]] = {}
"""A message's digest entry by the identity of the message, while it lives: a request
repeats the window's messages (the same objects, `chat_of`), so each is encoded once. Keyed
by identity, not equality: ``item``, which the entry reads, takes no part in equality."""


def _digest_entry(message: ChatMessage) -> bytes:
    key = id(message)
    known = _DIGEST_ENTRIES.get(key)
    if known is not None and known[0]() is message:
        return known[1]
    entry = json.dumps(
        [message.role, message.content, list(message.attachments), message.synthetic,
         *_provider_fields(message)],
        ensure_ascii=False, separators=(",", ":"),
    ).encode("utf-8")
    _DIGEST_ENTRIES[key] = (weakref.ref(message, partial(_forget_entry, key)), entry)
    return entry


def _forget_entry(key: int, _: object, forget: Callable[..., object] = _DIGEST_ENTRIES.pop
                  ) -> None:
    """Drop a dead message's digest entry. The memo's ``pop`` is bound here, not looked up
    when the message dies: one that dies while the interpreter shuts down (module globals
    already None; a memo elsewhere may hold messages until then) would raise, and print, in
    every such callback (as `window._forget_chat`)."""
    forget(key, None)


def _provider_fields(message: ChatMessage) -> list[Any]:
    """What a message sends beyond its text (blocks, provider fields), for the digest.

    Empty for a message without any, so a digest recorded before issue 8 still matches.
    """
    item = message.item
    fields: list[Any] = []
    if message.blocks or message.extra:
        fields.append([message.extra, [block_json(b) for b in message.blocks]])
    if isinstance(item, AssistantToolCalls) and (
        item.blocks or item.extra or item.reasoning_content is not None
        or any(c.extra for c in item.tool_calls)
    ):
        fields.append([item.extra, [block_json(b) for b in item.blocks], item.reasoning_content,
                       [c.extra for c in item.tool_calls]])
    elif isinstance(item, ToolResult) and (item.blocks or item.extra or item.is_error is not None):
        fields.append([item.extra, [block_json(b) for b in item.blocks], item.is_error])
    return fields


def unanswered_tool_calls(messages: Sequence[ChatMessage]) -> tuple[str, ...]:
    """Ids of the tool calls of the newest turn that no later result answers, in call order.

    The newest turn runs from the last real user message (the whole history when there is
    none); pairing is the orphan sweep's (R36), so these are exactly the calls it would remove
    for want of a result (`unanswered_calls`).
    """
    first = next(  # the newest real user message, found from the end: O(that turn)
        (i for i in range(len(messages) - 1, -1, -1) if is_real_user_message(messages[i])), 0
    )
    return unanswered_calls(messages[first:])


def _calls_of(message: ChatMessage) -> list[str]:
    # The recorded structure decides (issue 8); a bare message is read by the seed's rule.
    parsed = chat_tool_calls(message)
    return [call.id for call in parsed[1]] if parsed else []


def request_overhead_tokens(tools: Sequence[str], hooks: Sequence[str]) -> tuple[int, int]:
    """Estimated (tool schema tokens, hook tokens) of a request (R18).

    Tool schemas are counted as their JSON text; each hook text as a message of its own
    (text plus the 4 framing tokens of R20).
    """
    tool_tokens = sum(text_tokens(schema) for schema in tools)
    hook_tokens = sum(text_tokens(hook) + FRAMING_TOKENS for hook in hooks)
    return tool_tokens, hook_tokens


# --- evolve ---------------------------------------------------------------------------------

_CHANGES_VIEWS: Final = Deciders(ChangesViews)


def evolve(  # noqa: C901  # one flat case per event type
    state: SessionState,
    event: Event,
    older: Mapping[int, ConversationMessage | None] | None = None,
) -> SessionState:
    """Apply one recorded event to ``state`` (in place) and return it; O(1) amortised.

    Only the events that change the state or its views (`ChangesViews`) are matched, in
    order of frequency (restore folds every event); any other registered event sets only the
    version. ``TypeError`` for a class nobody registered (`Deciders`).

    ``older``: the log's items before ``event`` (`collect_summarised`), which the pop of a
    summarised message needs (`SessionState.pop_needs`, ``ValueError`` without them); no
    other event reads them.
    """
    if _CHANGES_VIEWS[event.__class__]:
        changes = cast("ChangesViews", event)
        match changes:
            case MessageAppended(message=item):
                state.record(item)
            case TrimDecided(view=view, first_kept_position=position):
                state.trim(view, position)
            case BreadcrumbInserted(view=view):
                state.mark_breadcrumb(view)
            case OrphansSwept(positions=positions, rewritten=rewritten):
                # A swept item stays in the log; in the index it becomes a gap (None).
                swept: dict[int, ConversationMessage | None] = dict.fromkeys(positions)
                swept.update(rewritten)
                state.sweep(swept, changes.restorable)
            case ToolCallsRestored(restored=restored):
                state.bring_back(restored)
            case MessagePopped(position=position):
                state.pop(position, older)
            case HistoryCleared(next_position=position):
                state.clear(position)
            case ToolResultsCleared(rewritten=rewritten):
                state.sweep(dict(rewritten))  # held items of the chat window: rewritten in place
            case TurnsSummarized():
                state.summary = Summary(changes.covers_from, changes.last_position,
                                        changes.text, changes.summarizer, changes.tokens)
            case RouteSelected():
                state.resolved = resolve_route(state.profile, state.providers, changes.route)
            case SessionStarted():
                state.session_id = changes.originator_id
                state.start(changes.profile)
                state.providers = tuple(changes.providers)
                state.legacy = changes.legacy
                state.resolved = resolve_route(changes.profile, changes.providers,
                                               changes.route)
            case UsageRecorded(input_tokens=billed, estimated_tokens=estimated):
                if estimated > 0:  # what an estimate learns from (issue 35)
                    state.billed = (*state.billed, (billed, estimated))[-BILLED_KEPT:]
            case _:
                assert_never(changes)
    state.version = event.originator_version
    return state


# --- the batch ------------------------------------------------------------------------------

@attrs.define
class Batch:
    """The events of one command, numbered as they are added (E3: they are saved together).

    `add` gives each event the session id, the version after the last one and the command's
    time. ``request`` is what a `PrepareRequest` prepared, rendered once (R27a).
    """

    session_id: UUID | None
    version: int
    now: datetime
    events: list[DomainEvent] = attrs.field(factory=list)
    request: PreparedRequest | None = None

    def add(self, kind: type[E], **fields: Any) -> E:
        """Record one event of ``kind``; raises `TurnledgerError` for a session not started."""
        if self.session_id is None:
            raise TurnledgerError("session has not been started")
        self.version += 1
        event = kind(
            originator_id=self.session_id,
            originator_version=self.version,
            timestamp=self.now,
            **fields,
        )
        self.events.append(event)
        return event


def _batch_for(state: SessionState, command: Command) -> Batch:
    if isinstance(command, ImportConversation):
        command = command.start
    session_id = command.session_id if isinstance(command, StartSession) else state.session_id
    return Batch(session_id, state.version, command.now)


# --- decide ---------------------------------------------------------------------------------

def _add_route(batch: Batch, resolved: ResolvedRoute, reason: RouteReason) -> None:
    batch.add(
        RouteSelected,
        route=resolved.route,
        capacity=resolved.capacity,
        budget=resolved.budget,
        window=resolved.window,
        reason=reason,
    )


def _decide_start(state: SessionState, command: StartSession, batch: Batch) -> None:
    if state.started:
        raise TurnledgerError(f"session {state.session_id} is already started")
    _check_route(command.providers, command.route)
    resolved = resolve_route(command.profile, command.providers, command.route)
    profile = command.profile
    if profile.pricing is None and not command.recorded:
        profile = attrs.evolve(profile, pricing=DEFAULT_PRICING)  # the record says how it prices
    batch.add(
        SessionStarted,
        profile=profile,
        providers=command.providers,
        route=command.route,
        legacy=command.legacy,
    )
    _add_route(batch, resolved, RouteReason.INITIAL)


def _decide_route(state: SessionState, command: SelectRoute, batch: Batch) -> None:
    _check_route(state.providers, command.route)
    _add_route(batch, resolve_route(state.profile, state.providers, command.route), command.reason)


def _decide_append(state: SessionState, command: AppendMessage, batch: Batch) -> None:
    # The structure (text, tool calls, tool results) is decided here, once, and recorded.
    item = classify_appended(command.message)
    check_appended(item)
    if isinstance(item, Chat) and item.message.synthetic:
        raise InvalidMessage("the breadcrumb is inserted by turnledger, not appended")
    _check_call_ids(state, item)
    limit = state.profile.max_tool_result_chars if command.truncate else 0
    bounded = truncate_conversation_message(item, limit) if limit else item
    batch.add(
        MessageAppended,
        position=state.next_position,
        message=bounded,
        original_chars=_longest_tool_text(item) if bounded != item else None,
    )


def _check_call_ids(state: SessionState, item: ConversationMessage) -> None:
    """ADR-0099: a call whose id is that of a call of the newest turn still unanswered is
    refused, naming the id. Both were kept while the session lived, and a restored one swept
    the older (a result answers the newest call of its id, R36), so a restarted worker sent
    another history than the model saw. O(the newest turn), for an append that calls tools."""
    match item:
        case AssistantToolCalls(tool_calls=calls):
            ids = [call.id for call in calls]
        case Chat(message=message) if message.role == "assistant" and message.envelope:
            ids = _calls_of(message)
        case _:
            return
    if not ids:
        return
    turn = state.newest_turn_chat()
    if not any(call in ids for message in turn for call in _calls_of(message)):
        return  # no id of the turn is called again: nothing to pair
    unanswered = set(unanswered_tool_calls(turn))
    for i, call_id in enumerate(ids):
        if call_id in unanswered:
            raise InvalidMessage(
                f"tool_calls[{i}].id {call_id!r} is the id of a call of this turn that no "
                "result answers yet: answer that call first, or give this one another id"
            )


def _trim(
    state: SessionState,
    batch: Batch,
    *,
    view: View,
    trigger: TrimTrigger,
    reason: TrimReason,
    kept: Window,
    limit: int,
    shown: int = BREADCRUMB_TOKENS,
    correction: float | None = None,
) -> Cut:
    """Record one trim of ``view`` down to ``kept`` and return its numbers (R31-R34).

    `TrimDecided`, then, when ``kept`` has a breadcrumb, `BreadcrumbInserted` and
    `HistoryTrimmed`. ``shown``: the estimate of what ``kept`` shows in the breadcrumb's
    place (a summary, issue 24), which its tokens after count.
    """
    # The conversation view counts history items, the chat view the messages sent (R32).
    cut = state.index.cut(state.window(view), kept, sent=view is View.CHAT)
    if state.summary is not None or shown != BREADCRUMB_TOKENS:  # issue 24: as shown
        chat = state.loop.window_of(view) is View.CHAT
        cut = attrs.evolve(
            cut,
            tokens_before=state.chat_tokens() if chat else cut.tokens_before,
            tokens_after=cut.tokens_after + shown - BREADCRUMB_TOKENS,
        )
    batch.add(
        TrimDecided,
        view=view,
        trigger=trigger,
        reason=reason,
        first_kept_position=kept.start,
        dropped_messages=cut.dropped_messages,
        dropped_turns=cut.dropped_turns,
        kept_turns=cut.kept_turns,
        tokens_before=cut.tokens_before,
        tokens_after=cut.tokens_after,
        limit=limit,
        budget=state.route.budget,
        estimate_correction=correction,
    )
    if kept.breadcrumb:
        batch.add(BreadcrumbInserted, view=view, before_position=kept.start)
        batch.add(
            HistoryTrimmed,
            dropped_messages=cut.dropped_messages,
            kept_turns=cut.kept_turns,
            reason=reason,
            tokens_before=cut.tokens_before,
            tokens_after=cut.tokens_after,
            budget=state.route.budget,
        )
    return cut


def _decide_turn_limit(state: SessionState, command: EnforceTurnLimit, batch: Batch) -> None:
    view = state.loop.turn_limit_view
    limit = state.profile.max_history_turns
    visible = state.loop.announces(TrimReason.TURN_LIMIT)  # R34
    kept = window_for_count(state.index, state.window(view), limit, breadcrumb=visible,
                            low_water=state.profile.compaction.low_water)
    if kept is not None:
        reason = TrimReason.TURN_LIMIT
        _trim(state, batch, view=view, trigger=command.trigger, reason=reason, kept=kept,
              limit=limit)


def _decide_token_budget(state: SessionState, command: EnforceTokenBudget, batch: Batch) -> None:
    bounds = _bounds(state, command.target, after_clearing=command.after_clearing)
    if bounds is None:
        return  # R12: an explicit zero disables proactive trimming
    if command.summary is not None:
        _decide_summarised_trim(state, command, command.summary, bounds.limit, batch)
        return
    if state.summary is None:  # every session without summaries: as before
        kept = window_for_budget(state.index, state.chat, bounds.limit, down_to=bounds.down_to,
                                 over=bounds.over)
    else:
        kept = _budget_window(state, bounds, BREADCRUMB_TOKENS)
    if kept is not None:
        reason = TrimReason.TOKEN_BUDGET
        _trim(state, batch, view=View.CHAT, trigger=command.trigger, reason=reason, kept=kept,
              limit=bounds.limit, correction=bounds.correction)


@attrs.frozen
class _Bounds:
    """The numbers of one budget trim: the ``limit`` it records (`TrimDecided.limit`), the
    estimate ``over`` which it trims, and the one its result must fit, ``down_to``."""

    limit: int
    over: int
    down_to: int
    correction: float | None = None


def _bounds(state: SessionState, target: int | None, *, after_clearing: bool = False
            ) -> _Bounds | None:
    """The bounds of a budget trim to ``target`` (None: the route's budget, R24); None when
    the target is 0 or less (R12: trimming off).

    The spec's trim: over the limit, down to the limit. With a low water (issue 35,
    `Compaction.low_water`) a trim to the route's budget goes down to `low_water_tokens` of
    it, and, right after a clearing (which a low water makes part of a forced trim: it
    happens only over the budget), over the low water already. An explicit target (an
    overflow recovery's two thirds, R25) keeps its own number."""
    limit = state.route.budget if target is None else target
    if limit <= 0:
        return None
    compaction = state.profile.compaction
    low_water = compaction.low_water
    if target is not None:  # an overflow's target was measured by the provider already
        return _Bounds(limit, limit, limit)
    correction = estimate_correction(state.billed, compaction.learn_estimate)
    budget = corrected_limit(limit, correction)  # issue 35: the estimate learned from the bill
    if low_water is None:
        return _Bounds(limit, budget, budget, correction)
    down_to = low_water_tokens(budget, low_water)
    return _Bounds(limit, down_to if after_clearing else budget, down_to, correction)


# --- summaries (issue 24, ADR-0086) ---------------------------------------------------------

def _budget_window(state: SessionState, bounds: _Bounds, shown: int) -> Window | None:
    """The window a budget trim within ``bounds`` keeps when the chat view's own estimate is
    `chat_tokens` (which prices a summary it shows) and a kept window shows something of
    ``shown`` tokens in place of its breadcrumb (a summary, or the breadcrumb itself); None:
    nothing drops. The newest turn is kept even over budget (R6)."""
    index, chat = state.index, state.chat
    starts = index.turns_from(chat.start)
    extra = shown - BREADCRUMB_TOKENS

    def tokens_after(dropped: int) -> int:
        if not dropped:
            return state.chat_tokens()
        return index.tokens(Window(starts[dropped], True)) + extra

    dropped = turns_to_drop_for_budget(len(starts), tokens_after, bounds.limit,
                                       down_to=bounds.down_to, over=bounds.over)
    return Window(starts[dropped], True) if dropped else None


def summary_tokens(state: SessionState, text: str) -> int:
    """The estimate of the summary message of ``text`` in this session's chat view."""
    return state.index.rows.base_tokens(Chat(summary_message(text)))


def plan_summary(
    state: SessionState, target: int | None = None, shown: int = BREADCRUMB_TOKENS,
    *, kept_start: int | None = None, after_clearing: bool = False,
) -> SummaryPlan | None:
    """What a budget trim to ``target`` (None: the route's budget) would drop, for a
    summarizer, when the kept turns show ``shown`` tokens in place of the breadcrumb; None
    when it drops nothing. ``kept_start``: the plan of the trim that keeps the turns from
    there instead (a turn start after the chat view's start; None when it is not one), for
    a replay of a recorded range. ``after_clearing``: as `EnforceTokenBudget`'s (with a low
    water, issue 35, the trim to the route's budget goes down to the low water, so the
    summary covers the same chunk the trim drops). Pure; O(the dropped turns)."""
    bounds = _bounds(state, target, after_clearing=after_clearing)
    if bounds is None:
        return None
    target = bounds.limit
    if kept_start is None:
        kept = _budget_window(state, bounds, shown)
    elif kept_start > state.chat.start and kept_start in state.index.turns_from(kept_start):
        kept = Window(kept_start, True)
    else:
        kept = None
    if kept is None:
        return None
    index, chat = state.index, state.chat
    items = [(p, item) for p, item in index.present_from(chat.start) if p < kept.start]
    dropped = [item for _, item in items if not is_system_item(item)]
    messages = tuple(chat_messages_of(dropped))
    previous = state.summary
    return SummaryPlan(
        first_position=chat.start,
        last_position=kept.start - 1,
        kept_start=kept.start,
        messages=messages,
        previous=None if previous is None else previous.text,
        covers_from=chat.start if previous is None else previous.covers_from,
        digest=request_digest(messages),
        replaced_tokens=state.chat_tokens() - index.tokens(kept) + BREADCRUMB_TOKENS,
        target=target,
        paired=pairs_among_themselves(dropped),
    )


def _with_summary(state: SessionState, step: EnforceTokenBudget, summarize: Summarize,
                  attempts: int = 3) -> EnforceTokenBudget:
    """``step`` with the summarizer's outcome, asked between two decisions (ADR-0086): the
    plan of the plain trim first; when the summary and the kept turns exceed the budget, the
    plan that drops more, summarised again (``attempts`` calls at most)."""
    plan = plan_summary(state, step.target, after_clearing=step.after_clearing)
    if plan is None:
        return step  # nothing drops: no summarizer is called
    if not plan.paired:
        return attrs.evolve(step, summary=SummaryOutcome(
            plan, "", refusal=SummaryRefusal.UNPAIRED,
            detail="a tool call of the dropped turns is not answered within them"))
    outcome = summarize(plan)
    for _ in range(attempts - 1):
        if outcome is None or outcome.text is None:
            break
        plan = outcome.plan
        wider = plan_summary(state, step.target, summary_tokens(state, outcome.text),
                             after_clearing=step.after_clearing)
        if wider is None or wider.kept_start <= plan.kept_start or not wider.paired:
            break
        again = summarize(wider)
        if again is None:
            break
        plan, outcome = wider, again
    return step if outcome is None else attrs.evolve(step, summary=outcome)


def _overflow_with_summary(
    state: SessionState, step: RecoverFromOverflow, summarize: Summarize
) -> RecoverFromOverflow:
    """``step`` with the summarizer's outcome for the turns its trim drops (issue 24): the
    plan of a budget trim to the recovery's target (R25), asked as a budget trim's is."""
    if len(state.index.turns_from(state.chat.start)) <= 1:
        return step  # nothing can drop: `OverflowUnrecoverable`, no summarizer is called
    trim = EnforceTokenBudget(TrimTrigger.OVERFLOW, overflow_target(state), step.now)
    summary = _with_summary(state, trim, summarize).summary
    return step if summary is None else attrs.evolve(step, summary=summary)


def _summary_refusal(
    state: SessionState, command: EnforceTokenBudget, outcome: SummaryOutcome, plain: Window,
    fits: int,
) -> tuple[SummaryRefusal | None, str, int]:
    """Why the summarizer's outcome cannot stand in for the turns it covers (None when it
    can), the detail said, and the summary's tokens: the plan must still hold beside the plain
    trim's window ``plain``, pair its tool calls, have text, be smaller than what it replaces
    and, with the kept turns, fit ``fits`` tokens. Pure."""
    plan, refusal, detail = outcome.plan, outcome.refusal, outcome.detail
    text = outcome.text
    fresh = plan_summary(state, command.target, BREADCRUMB_TOKENS,
                         after_clearing=command.after_clearing)
    if refusal is None and (fresh is None or fresh.first_position != plan.first_position
                            or plan.kept_start < plain.start
                            or plan.kept_start not in state.index.turns_from(plain.start)):
        refusal, detail = SummaryRefusal.INVALID, "the plan no longer matches the session"
    if refusal is None and not plan.paired:
        refusal = SummaryRefusal.UNPAIRED
        detail = "a tool call of the dropped turns is not answered within them"
    if refusal is None and (not isinstance(text, str) or not text.strip()):
        refusal, detail = SummaryRefusal.INVALID, "the summarizer returned no text"
    tokens = summary_tokens(state, text) if refusal is None and text else 0
    kept = Window(plan.kept_start, True)
    if refusal is None:
        replaced = state.chat_tokens() - state.index.tokens(kept) + BREADCRUMB_TOKENS
        if tokens > replaced:
            refusal = SummaryRefusal.OVERSIZE
            detail = f"the summary is {tokens:,} tokens, what it replaces {replaced:,}"
        elif state.index.tokens(kept) - BREADCRUMB_TOKENS + tokens > fits:
            refusal = SummaryRefusal.DOES_NOT_FIT
            detail = f"the kept turns and the summary exceed the budget of {fits:,} tokens"
    return refusal, detail, tokens


def _decide_summarised_trim(
    state: SessionState, command: EnforceTokenBudget, outcome: SummaryOutcome, target: int,
    batch: Batch,
) -> Cut | None:
    """The budget trim with the summarizer's outcome: `TurnsSummarized` after the trim to
    the planned turns when the summary is valid, fits and is smaller than what it replaces;
    otherwise the plain trim and `SummaryRefused` saying why (the request still goes out).
    Returns the trim's numbers; None when nothing drops."""
    bounds = _bounds(state, command.target, after_clearing=command.after_clearing)
    plain = None if bounds is None else _budget_window(state, bounds, BREADCRUMB_TOKENS)
    if plain is None:
        return None  # nothing drops (no plan is decided on another state than its own)
    assert bounds is not None
    correction = bounds.correction  # issue 35: what the estimate learned from the bill
    fits = corrected_limit(target, correction)
    refusal, detail, tokens = _summary_refusal(state, command, outcome, plain, fits)
    plan, text = outcome.plan, outcome.text
    kept = Window(plan.kept_start, True)
    reason = TrimReason.TOKEN_BUDGET
    if refusal is not None:
        cut = _trim(state, batch, view=View.CHAT, trigger=command.trigger, reason=reason,
                    kept=plain, limit=target, correction=correction)
        batch.add(SummaryRefused, first_position=plan.first_position,
                  last_position=plan.last_position, summarizer=outcome.summarizer,
                  reason=refusal, detail=detail[:2000])
        return cut
    assert text is not None
    cut = _trim(state, batch, view=View.CHAT, trigger=command.trigger, reason=reason, kept=kept,
                limit=target, shown=tokens, correction=correction)
    batch.add(
        TurnsSummarized,
        view=View.CHAT,
        first_position=plan.first_position,
        last_position=plan.last_position,
        covers_from=plan.covers_from,
        digest=plan.digest,
        text=text,
        summarizer=outcome.summarizer,
        tokens=tokens,
        replaced_tokens=state.chat_tokens() - state.index.tokens(kept) + BREADCRUMB_TOKENS,
    )
    return cut


def _decide_prepare(state: SessionState, command: PrepareRequest, batch: Batch) -> None:
    resolved = state.route
    messages = state.chat_view()  # rendered once: the digest's input is what is sent
    unanswered = unanswered_tool_calls(messages)
    tool_tokens, hook_tokens = command.tool_tokens, command.hook_tokens
    sent, left_out = _fit(messages, resolved.api)
    pricing = state.pricing
    priced = state.chat_tokens() if sent is messages else estimate_history_tokens(
        sent, pricing=pricing)
    estimated = priced + tool_tokens + hook_tokens + _api_overhead(
        resolved.api, tool_tokens, pricing)
    purpose = Purpose.FINAL_SUMMARY if command.final_summary else Purpose.TURN
    fields = {
        "purpose": purpose,
        "route": resolved.route,
        "capacity": resolved.capacity,
        "window": resolved.window,
        "estimated_tokens": estimated,
        "message_count": len(messages),
    }
    if unanswered:  # R18: the provider would reject a call without its result
        batch.add(
            RequestRejected,
            **fields,
            detail=_unanswered_text(unanswered),
            reason=RejectionReason.UNANSWERED_TOOL_CALLS,
            tool_call_ids=unanswered,
        )
        return
    if estimated > resolved.window:
        batch.add(RequestRejected, **fields, detail=_rejection_text(resolved, estimated))
        return
    digest = request_digest(messages, state.digest_prefix)
    batch.add(
        RequestPrepared,
        **fields,
        budget=resolved.budget,
        digest=digest,
        tool_tokens=tool_tokens,
        hook_tokens=hook_tokens,
        api=resolved.api,
        left_out=left_out,
    )
    batch.request = PreparedRequest(
        messages=messages,
        route=resolved.route,
        capacity=resolved.capacity,
        budget=resolved.budget,
        estimated_tokens=estimated,
        model_context_window=resolved.model_context_window,
        window=resolved.window,
        purpose=purpose,
        digest=digest,
        api=resolved.api,
        sent=sent,
        left_out=left_out,
        cache_key=None if state.session_id is None else prompt_cache_key(state.session_id),
    )


def _api_overhead(api: str | None, tool_tokens: int, pricing: Pricing) -> int:
    """What the API itself adds to a request (K6): Anthropic's tool-use system prompt when the
    request has tools (`Pricing.tool_use_system_tokens`), the tokens OpenAI Chat primes every
    reply with (`Pricing.openai_reply_tokens`)."""
    if not pricing.by_kind:
        return 0
    if api == API_ANTHROPIC and tool_tokens:
        return pricing.tool_use_system_tokens
    if api == API_OPENAI_CHAT:
        return pricing.openai_reply_tokens
    return 0


def _fit(
    messages: list[ChatMessage], api: str | None
) -> tuple[list[ChatMessage], tuple[LeftOut, ...]]:
    """The messages as the route's API takes them (issue 21); ``messages`` itself when no API
    is named or nothing changes, so such a request is priced by the window's sums."""
    if api is None:
        return messages, ()
    sent, left_out = fit_messages(messages, api)
    same = len(sent) == len(messages) and all(
        a == b and a.item == b.item for a, b in zip(sent, messages)  # item: not in `==`
    )
    return (messages, ()) if not left_out and same else (sent, left_out)


def _unanswered_text(ids: Sequence[str]) -> str:
    return (
        f"the newest turn has tool calls without their results ({', '.join(ids)}); append "
        "the results before preparing a request; it was not sent"
    )


def _rejection_text(resolved: ResolvedRoute, estimated: int) -> str:
    route = f"{resolved.route.provider}/{resolved.route.model}"
    source = "model context window" if resolved.capacity is not None else "fallback window"
    return (
        f"request needs about {estimated:,} tokens but the {source} of {route} is "
        f"{resolved.window:,} tokens; it was not sent (R18)"
    )


def overflow_target(state: SessionState) -> int:
    """The tokens an overflow recovery trims to (R25): two thirds of the current estimate,
    not the capacity."""
    return state.chat_tokens() * 2 // 3


def _decide_overflow(state: SessionState, command: RecoverFromOverflow, batch: Batch) -> None:
    estimate = state.chat_tokens()
    target = overflow_target(state)
    batch.add(
        OverflowReported,
        error=command.error[:2000],
        estimated_tokens=estimate,
        target_tokens=target,
    )
    starts = state.index.turns_from(state.chat.start)
    if len(starts) <= 1:
        floor = state.index.head_tokens
        detail = "only one turn is left: nothing can be trimmed"
        if floor > target:
            detail += f"; the system prompt alone is about {floor:,} tokens (target {target:,})"
        batch.add(OverflowUnrecoverable, detail=detail)
        return
    cut = None
    if command.summary is not None:  # issue 24: the summarised trim, as a budget trim's
        trim = EnforceTokenBudget(TrimTrigger.OVERFLOW, target, command.now)
        cut = _decide_summarised_trim(state, trim, command.summary, target, batch)
    if cut is None:
        kept = window_for_budget(state.index, state.chat, target)
        if kept is None:  # a zero target: keep the newest turn, as any budget would (R6)
            kept = Window(starts[-1], breadcrumb=True)
        cut = _trim(state, batch, view=View.CHAT, trigger=TrimTrigger.OVERFLOW,
                    reason=TrimReason.TOKEN_BUDGET, kept=kept, limit=target)
    batch.add(OverflowRecovered, tokens_before=estimate, tokens_after=cut.tokens_after)


def _decide_sweep(state: SessionState, command: SweepOrphans, batch: Batch) -> None:
    if command.view is View.CHAT and unanswered_tool_calls(state.newest_turn_chat()):
        return  # the request is refused next (R18): the calls wait for their results
    start = state.window(command.view).start
    if state.index.pairs_from(start):
        return  # every part of the window pairs among itself: the sweep finds nothing
    present = state.index.present_from(start)
    result = sweep_conversation_orphans([item for _, item in present])
    if not result.removed_indices and not result.rewritten:
        return
    positions = [p for p, _ in present]
    removed = tuple(positions[i] for i in result.removed_indices)
    rewritten = tuple((positions[i], item) for i, item in result.rewritten)
    newest = state.newest_turn_start()
    batch.add(
        OrphansSwept,
        positions=removed,
        orphan_tool_call_ids=tuple(result.orphan_tool_call_ids),
        removed=result.removed,
        rewritten=rewritten,
        # E5: what it takes from the newest turn, a result may bring back.
        restorable=tuple(sorted(p for p in {*removed, *(p for p, _ in rewritten)}
                                if p >= newest)),
    )


def _decide_restore(state: SessionState, batch: Batch) -> None:
    """E5: the tool result just appended brings back the calls a sweep took from
    the newest turn that it answers, with what must come back with them (a signed step comes
    back whole, with the results the sweep took along, R36). The newest turn is swept again
    with the log's items in place of the swept ones: what that sweep keeps of them is shown
    again. O(the newest turn); O(1) when no sweep took anything from it."""
    if not state.restorable:
        return  # the append of every result in a session no restore swept
    position = state.next_position - 1
    answers = set(answered_ids(state.index.held(position)))
    logged = dict(state.restorable)
    if not any(answers.intersection(called_ids(item)) for item in logged.values()):
        return
    turn = [
        (p, item)
        for p in range(state.newest_turn_start(), state.next_position)
        if (item := logged.get(p, state.index.held(p))) is not None
    ]
    swept = sweep_conversation_orphans([item for _, item in turn])
    forms: dict[int, ConversationMessage | None] = dict.fromkeys(
        turn[i][0] for i in swept.removed_indices)
    forms.update((turn[i][0], item) for i, item in swept.rewritten)
    if position in forms and forms[position] is None:
        return  # the result answers none of the calls a sweep took: it stays an orphan
    restored: list[tuple[int, ConversationMessage]] = []
    brought: list[str] = []
    for p, item in logged.items():
        form, shown = forms.get(p, item), state.index.held(p)
        if form is None or form == shown:
            continue
        before = {*called_ids(shown), *answered_ids(shown)}
        if not before <= {*called_ids(form), *answered_ids(form)}:
            continue  # a restoration only ever adds to what the views show
        restored.append((p, form))
        brought.extend(call for call in called_ids(form) if call not in before)
    if answers.intersection(brought):
        batch.add(ToolCallsRestored, result_position=position, tool_call_ids=tuple(brought),
                  restored=tuple(restored))


def _decide_clear_tool_results(state: SessionState, batch: Batch) -> None:
    compaction = state.profile.compaction
    if not compaction.clear_tool_results:
        return  # off by default (ADR-0086): one attribute read per request
    if compaction.low_water is not None and not 0 < state.route.budget < state.chat_tokens():
        return  # issue 35: in the chunks of the forced trims, not on every new turn
    keep = compaction.keep_tool_result_turns
    starts = state.index.turns_from(state.chat.start)
    if len(starts) <= keep:
        return
    boundary = starts[-keep]
    rewritten: list[tuple[int, ConversationMessage]] = []
    saved = 0
    price = state.index.rows.base_tokens  # outside the current turn (keep >= 1, R22)
    for position, item in state.index.present_from(state.chat.start):
        if position >= boundary:
            break
        cleared = cleared_item(item)
        if cleared is not None:
            rewritten.append((position, cleared))
            saved += price(item) - price(cleared)
    if not rewritten:
        return
    before = state.chat_tokens()
    after = before - saved
    ids = [_result_ids(item) for _, item in rewritten]
    batch.add(
        ToolResultsCleared,
        positions=tuple(p for p, _ in rewritten),
        tool_call_ids=tuple(i for group in ids for i in group),
        rewritten=tuple(rewritten),
        kept_turns=keep,
        tokens_before=before,
        tokens_after=after,
    )


def _result_ids(item: ConversationMessage) -> list[str]:
    match item:
        case ToolResults(results=results):
            return [r.tool_call_id for r in results]
        case Chat(message=message):
            call_id = chat_tool_call_id(message)
            return [call_id] if call_id else []
    return []


def _decide_pop(state: SessionState, command: PopMessage, batch: Batch) -> None:
    newest = state.newest_in_view(command.summarised)
    if newest is not None:
        batch.add(MessagePopped, position=newest[0], message=newest[1])


def _decide_clear(state: SessionState, batch: Batch) -> None:
    window = state.window(View.CONVERSATION)
    removed = state.index.shown(window) - (1 if window.breadcrumb else 0)
    if removed:
        batch.add(HistoryCleared, next_position=state.next_position, removed=removed)


def _decide_record(command: RecordEvent, batch: Batch) -> None:
    kind = command.kind
    if kind not in registered_events() or kind in EVENT_TYPES:
        said = "is recorded by its own command" if kind in EVENT_TYPES else (
            "is not registered (register_event)")
        raise InvalidMessage(f"record: {getattr(kind, '__name__', kind)!r} {said}")
    taken = STAMP_FIELDS.intersection(command.fields)
    if taken:
        raise InvalidMessage(f"record: {', '.join(sorted(taken))} are the session's to set")
    try:
        batch.add(kind, **command.fields)
    except TypeError as error:  # a field missing or unknown: attrs names it
        raise InvalidMessage(f"record: {kind.__name__}: {error}") from None


def _decide(state: SessionState, command: Command, batch: Batch) -> None:  # noqa: C901  # flat table
    """Add the events one step of ``command`` produces to ``batch``; never mutates ``state``."""
    match command:
        case StartSession():
            _decide_start(state, command, batch)
        case AppendMessage():
            _decide_append(state, command, batch)
        case EnforceTurnLimit():
            _decide_turn_limit(state, command, batch)
        case EnforceTokenBudget():
            _decide_token_budget(state, command, batch)
        case PrepareRequest():
            _decide_prepare(state, command, batch)
        case RecoverFromOverflow():
            # The caller classified the error (R26, `is_context_window_exceeded`), which can
            # look through an exception's causes; the command carries its text for the record.
            _decide_overflow(state, command, batch)
        case SelectRoute():
            _decide_route(state, command, batch)
        case SweepOrphans():
            _decide_sweep(state, command, batch)
        case PopMessage():
            _decide_pop(state, command, batch)
        case ClearHistory():
            _decide_clear(state, batch)
        case ClearToolResults():
            _decide_clear_tool_results(state, batch)
        case RestoreSweptCalls():
            _decide_restore(state, batch)
        case RecordEvent():
            _decide_record(command, batch)
        case RecordUsage():
            usage = command.usage
            batch.add(UsageRecorded, request_position=command.request_position,
                      digest=command.digest, estimated_tokens=command.estimated_tokens,
                      api=usage.api, input_tokens=usage.input_tokens,
                      cache_read_tokens=usage.cache_read_tokens,
                      cache_write_tokens=usage.cache_write_tokens,
                      output_tokens=usage.output_tokens)
        case ImportConversation() | Extend() | FitWindow():
            raise TypeError(f"{type(command).__name__} is run as its steps (`run`), not decided "
                            "alone")
        case _:
            raise TypeError(f"unknown command {type(command).__name__}")


def decide(state: SessionState, command: Command) -> list[DomainEvent]:
    """The events one step of ``command`` produces; never mutates ``state``.

    Raises `InvalidMessage` / `InvalidProfile` for bad input before anything is recorded.
    """
    batch = _batch_for(state, command)
    _decide(state, command, batch)
    return batch.events


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
            parsed = parse_tool_envelope(m.content) if chat_tool_call_id(m) else None
            return len(parsed[1]) if parsed else len(m.content)
    return None


# --- run ------------------------------------------------------------------------------------

def _steps(command: Command) -> list[Command]:
    """The steps of one command, each decided after the previous one was evolved."""
    match command:
        case ImportConversation(start=start, messages=messages, as_live=live):
            steps: list[Command] = [start]
            for message in messages:
                append = AppendMessage(message, start.now, truncate=live)
                steps.extend(_steps(append) if live else [append])
            return steps
        case Extend(messages=messages, now=now):
            return [step for m in messages for step in _steps(AppendMessage(m, now))]
        case FitWindow(now=now, messages=messages):
            return [
                *(_steps(Extend(messages, now)) if messages else ()),
                EnforceTurnLimit(TrimTrigger.PREPARE, now),
                ClearToolResults(now),  # opt-in (issue 24): before whole turns are dropped
                EnforceTokenBudget(TrimTrigger.PREPARE, None, now),
                SweepOrphans(now, view=View.CHAT),
            ]
        case AppendMessage():
            item = as_conversation_message(command.message)
            if is_turn_start_item(item):
                return [command, EnforceTurnLimit(TrimTrigger.APPEND, command.now)]  # R27a
            if _is_tool_result(item):  # E5: it may bring back a swept call
                return [command, RestoreSweptCalls(command.now)]
        case PrepareRequest():
            return [
                EnforceTurnLimit(TrimTrigger.PREPARE, command.now),  # R27a
                ClearToolResults(command.now),  # opt-in (issue 24): before turns are dropped
                EnforceTokenBudget(TrimTrigger.PREPARE, None, command.now),  # R24
                SweepOrphans(command.now, view=View.CHAT),  # R36: no orphan is sent
                command,
            ]
    return [command]


def _is_tool_result(item: ConversationMessage) -> bool:
    return isinstance(item, ToolResults) or (
        isinstance(item, Chat) and item.message.role == "tool"
    )


def run(state: SessionState, command: Command, summarize: Summarize | None = None) -> Batch:
    """Run one command to completion: decide a step, evolve it, decide the next (in place).

    Returns the batch of every event the command produced, in order, already applied to
    ``state``, with the prepared request of a `PrepareRequest`. On an exception ``state`` may
    hold part of the command: the caller rebuilds it from the store.

    ``summarize`` (issue 24): asked, between two decisions, for a summary of the turns each
    token-budget trim of the command drops (`SummaryPlan`); its outcome goes into the
    trim's command, decided like any other (ADR-0086). Never called when nothing drops.
    """
    batch = _batch_for(state, command)
    cleared = False  # the step before cleared tool results (issue 35: a forced trim's part)
    for step in _steps(command):
        if cleared and isinstance(step, EnforceTokenBudget):
            step = attrs.evolve(step, after_clearing=True)
        if summarize is not None and isinstance(step, EnforceTokenBudget):
            step = _with_summary(state, step, summarize)
        elif summarize is not None and isinstance(step, RecoverFromOverflow):
            step = _overflow_with_summary(state, step, summarize)
        done = len(batch.events)
        _decide(state, step, batch)
        cleared = isinstance(step, ClearToolResults) and len(batch.events) > done
        older = step.summarised if isinstance(step, PopMessage) else None
        for event in unchecked_events(batch.events[done:]):  # built by `Batch.add` alone
            evolve(state, event, older)
    return batch


def execute(state: SessionState, command: Command) -> list[DomainEvent]:
    """`run` a command and return its events."""
    return run(state, command).events
