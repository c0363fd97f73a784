"""Domain events: what happened to a session, in the past tense (E1).

Every event is an immutable attrs class that carries the session id (``originator_id``), its
position in the session's stream (``originator_version``, from 1) and a UTC ``timestamp``.
``class_version`` versions the payload; an older payload is upcast on read by the
``upcast_vN_vN+1`` static methods (E10). The store encodes events (cattrs + msgpack); nothing
here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, ClassVar, Final, TypeAlias, TypeVar, cast, get_args
from uuid import UUID

import attrs

from turnledger.domain.bodies import LeftOut
from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.messages import (
    ConversationMessage,
    parse_assistant_envelope,
    parse_tool_envelope,
)

__all__ = [
    "EVENT_TYPES",
    "STAMP_FIELDS",
    "Audited",
    "BreadcrumbInserted",
    "ChangesLogItems",
    "ChangesRecord",
    "ChangesViews",
    "Counted",
    "Deciders",
    "DomainEvent",
    "Drawn",
    "Event",
    "HistoryCleared",
    "HistoryTrimmed",
    "MessageAppended",
    "MessagePopped",
    "MovesRoute",
    "OrphansSwept",
    "OverflowRecovered",
    "OverflowReported",
    "OverflowUnrecoverable",
    "Purpose",
    "RejectionReason",
    "Removes",
    "Replayed",
    "RequestPrepared",
    "RequestRejected",
    "RouteReason",
    "RouteSelected",
    "SessionForgotten",
    "SessionStarted",
    "SummaryRefusal",
    "SummaryRefused",
    "ToolCallsRestored",
    "ToolResultsCleared",
    "TrimDecided",
    "TrimReason",
    "TrimTrigger",
    "TurnsSummarized",
    "UsageRecorded",
    "View",
    "as_event",
    "on_registry_change",
    "register_event",
    "registered_events",
    "unchecked_events",
    "unregister_event",
]


class TrimReason(enum.StrEnum):
    """Why turns were dropped (R32)."""

    TOKEN_BUDGET = "token_budget"
    TURN_LIMIT = "turn_limit"


class TrimTrigger(enum.StrEnum):
    """Which session operation decided the trim (R24, R25, R27a)."""

    APPEND = "append"
    PREPARE = "prepare"
    OVERFLOW = "overflow"


class View(enum.StrEnum):
    """The two views of a session's history (E4)."""

    CONVERSATION = "conversation"
    CHAT = "chat"


class SummaryRefusal(enum.StrEnum):
    """Why a runtime's summary was not used, and the plain trim with its breadcrumb was
    recorded instead (issue 24, `SummaryRefused`)."""

    RAISED = "raised"
    """The summarizer raised."""
    TIMED_OUT = "timed_out"
    """The summarizer did not answer within its time limit."""
    OVERSIZE = "oversize"
    """The summary costs more tokens than the turns (and previous summary) it replaces."""
    DOES_NOT_FIT = "does_not_fit"
    """The newest turn and the summary together exceed the budget."""
    INVALID = "invalid"
    """The summarizer returned something that is not a non-empty text, or its plan no longer
    matches the session."""
    UNPAIRED = "unpaired"
    """A tool call of the dropped turns is not answered within them: no summary covers it."""


class RouteReason(enum.StrEnum):
    """Why a route was selected (R19)."""

    INITIAL = "initial"
    EXPLICIT = "explicit"
    CLASSIFIER_HINT = "classifier_hint"


class Purpose(enum.StrEnum):
    """What a prepared request is for (R18: the final summary is checked too)."""

    TURN = "turn"
    FINAL_SUMMARY = "final_summary"


class RejectionReason(enum.StrEnum):
    """Why a request was refused before it was sent."""

    CAPACITY = "capacity"
    """It does not fit the model context window (R18)."""
    UNANSWERED_TOOL_CALLS = "unanswered_tool_calls"
    """The newest turn has tool calls without their results (R18)."""


@attrs.frozen
class DomainEvent:
    """Base of every turnledger event: session id, position (from 1) and UTC time."""

    originator_id: UUID
    originator_version: int
    timestamp: datetime

    class_version: ClassVar[int] = 1
    timeline: ClassVar[str] = ""
    """The timeline's line (E6) for an event the timeline has no words of its own for
    (`register_event`): `str.format` over its fields, ``"note: {text}"``; empty: the class
    name and its fields."""


STAMP_FIELDS: Final = frozenset(field.name for field in attrs.fields(DomainEvent))
"""The fields every event has and the session sets (id, version, time): not its payload."""


@attrs.frozen
class SessionStarted(DomainEvent):
    """A session was created with its profile, providers and initial route.

    A session started since issue 21 records its profile's ``pricing``; one recorded before
    holds none (`RuntimeProfile.pricing` None), and priced every block by the bytes of its
    text (R20-R23 alone): it replays so (`session_pricing`).
    """

    profile: RuntimeProfile
    providers: tuple[ProviderProfile, ...]
    route: Route
    legacy: bool

    class_version: ClassVar[int] = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """v2 profiles hold ``pricing`` and providers ``api`` (issue 21). A v1 record has
        neither, which reads as it was meant: no pricing chosen (the session priced every
        block by its text) and no API named; nothing to change."""


@attrs.frozen
class MessageAppended(DomainEvent):
    """A message entered the session's log at ``position`` (0-based, dense).

    ``original_chars`` is set when tool-result truncation (R38) shortened the message: the
    number of characters the longest truncated result had before.
    """

    position: int
    message: ConversationMessage
    original_chars: int | None = None

    class_version: ClassVar[int] = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """v2 records the structure of a chat message (issue 8); v1 read it by the seed's rule."""
        _record_seed_structure(state.get("message"))


@attrs.frozen
class RouteSelected(DomainEvent):
    """The provider/model route and its resolved capacity/budget pair (R19)."""

    route: Route
    capacity: int | None
    budget: int
    window: int
    reason: RouteReason


@attrs.frozen
class TrimDecided(DomainEvent):
    """Old whole turns were dropped from one view (R3, R7-R9, R24-R25).

    ``first_kept_position`` is the log position of the first kept turn; ``limit`` is the
    token budget or turn count that applied (an overflow recovery's target, R25);
    ``tokens_before`` / ``tokens_after`` the view's estimate before and after. ``budget`` is
    the route's token budget when the trim was decided, whatever its reason (issue 35; None in
    a record made before it). ``estimate_correction``: what each estimated token counted as in
    this trim when the estimate learned from the bill (`Compaction.learn_estimate`), else None.
    Both are left out of the payload while None (the codec's ``NEW_EVENT_FIELDS``).
    """

    view: View
    trigger: TrimTrigger
    reason: TrimReason
    first_kept_position: int
    dropped_messages: int
    dropped_turns: int
    kept_turns: int
    tokens_before: int
    tokens_after: int
    limit: int
    budget: int | None = None
    estimate_correction: float | None = None


@attrs.frozen
class BreadcrumbInserted(DomainEvent):
    """The breadcrumb now precedes the first kept turn of ``view`` (R31)."""

    view: View
    before_position: int


@attrs.frozen
class HistoryTrimmed(DomainEvent):
    """The client-facing notice that older turns were dropped (R32-R33).

    Besides the counts R32 names, it tells a client what its trim did to the context (issue
    35): the estimated tokens of the trimmed view before and after, and the route's budget,
    as its `TrimDecided` recorded them; None in a record made before, which did not say them
    (left out of the payload while None, so such a record reads back as it was written).
    """

    dropped_messages: int
    kept_turns: int
    reason: TrimReason
    tokens_before: int | None = None
    tokens_after: int | None = None
    budget: int | None = None


@attrs.frozen
class RequestPrepared(DomainEvent):
    """A request passed the capacity check (R18); ``digest`` is SHA-256 of its messages.

    ``api`` is the request API its body was built for (the route's provider names it; None:
    not said) and ``left_out`` what of the messages that body does not carry, and why (issue
    21): an audit tells from them what the model saw. Version 2 added both; a version 1 record
    was a request whose API nobody named, nothing left out.
    """

    purpose: Purpose
    route: Route
    capacity: int | None
    budget: int
    window: int
    estimated_tokens: int
    message_count: int
    digest: str
    tool_tokens: int = 0
    hook_tokens: int = 0
    api: str | None = None
    left_out: tuple[LeftOut, ...] = ()

    class_version: ClassVar[int] = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """Version 1 built no body of its own: no API named, nothing left out."""
        state.setdefault("api", None)
        state.setdefault("left_out", [])


@attrs.frozen
class RequestRejected(DomainEvent):
    """A request was refused and not sent: ``reason`` says why (R18).

    ``tool_call_ids`` are the unanswered calls of an ``unanswered_tool_calls`` refusal.
    Version 2 added ``reason`` and ``tool_call_ids``; a version 1 record was a capacity refusal.
    """

    purpose: Purpose
    route: Route
    capacity: int | None
    window: int
    estimated_tokens: int
    message_count: int
    detail: str
    reason: RejectionReason = RejectionReason.CAPACITY
    tool_call_ids: tuple[str, ...] = ()

    class_version: ClassVar[int] = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, object]) -> dict[str, object]:
        """Version 1 refused only requests over the window (R18)."""
        state.setdefault("reason", RejectionReason.CAPACITY.value)
        state.setdefault("tool_call_ids", [])
        return state


@attrs.frozen
class UsageRecorded(DomainEvent):
    """What the provider billed for a request this session prepared (issue 35).

    ``request_position`` and ``digest`` name the `RequestPrepared` it answers and
    ``estimated_tokens`` is that request's estimate, so the estimate and the bill sit side by
    side; for a window `Session.fit_window` handed to an agent framework, which builds its
    request itself and records none, ``request_position`` is None and ``digest`` and
    ``estimated_tokens`` are the window's. ``input_tokens`` counts every input token billed,
    those read from the provider's cache (``cache_read_tokens``) and written to it
    (``cache_write_tokens``) included; ``output_tokens`` the output, reasoning included.
    ``api`` says which usage shape it was read from (`turnledger.domain.usage.Usage`). A
    request retried is billed twice: each answer records its own usage.
    """

    request_position: int | None
    digest: str
    estimated_tokens: int
    api: str
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int


@attrs.frozen
class OverflowReported(DomainEvent):
    """The provider said the context window overflowed (R25-R26)."""

    error: str
    estimated_tokens: int
    target_tokens: int


@attrs.frozen
class OverflowRecovered(DomainEvent):
    """The reactive trim of R25 made room; the caller retries."""

    tokens_before: int
    tokens_after: int


@attrs.frozen
class OverflowUnrecoverable(DomainEvent):
    """Nothing could be trimmed after an overflow (R25); ``detail`` says why."""

    detail: str


@attrs.frozen
class OrphansSwept(DomainEvent):
    """The orphan sweep (R36) removed messages from the views on restore (E5), or from the
    chat window before a request was rendered (R36).

    The removed messages stay in the log; ``positions`` are their log positions.

    ``restorable``: the log positions of the newest turn among them (removed or rewritten):
    while that turn is the newest, a tool result that answers a call the sweep took from
    them brings it back (`ToolCallsRestored`, E5). Version 3 added it; a sweep
    recorded before brought nothing back.
    """

    positions: tuple[int, ...]
    orphan_tool_call_ids: tuple[str, ...]
    removed: int
    rewritten: tuple[tuple[int, ConversationMessage], ...] = ()
    restorable: tuple[int, ...] = ()

    class_version: ClassVar[int] = 3

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """v2 records the structure of a chat message (issue 8); v1 read it by the seed's rule."""
        for pair in state.get("rewritten") or ():
            if isinstance(pair, list | tuple) and len(pair) == 2:
                _record_seed_structure(pair[1])

    @staticmethod
    def upcast_v2_v3(state: dict[str, Any]) -> None:
        """A sweep recorded before swept calls could be brought back (E5) marked nothing
        restorable."""
        state.setdefault("restorable", [])


@attrs.frozen
class ToolCallsRestored(DomainEvent):
    """A tool result brought back calls a sweep had taken from the newest turn (E5).

    Recorded right after the `MessageAppended` of the result at ``result_position``, while the
    turn the sweep (`OrphansSwept`, usually a restore's) took them from is still the newest:
    the views show again, at their log positions, the items of ``restored`` (as the views now
    show them: each the log's item, or the log's item with the calls still unanswered left
    out). ``tool_call_ids`` names the calls brought back. A signed step comes back whole, with
    the results the sweep took along with it (R36). The log kept everything all along.
    """

    result_position: int
    tool_call_ids: tuple[str, ...]
    restored: tuple[tuple[int, ConversationMessage], ...]


@attrs.frozen
class MessagePopped(DomainEvent):
    """The newest message of the conversation view was removed from the views (an OpenAI
    Agents SDK ``pop_item``); it stays in the log at ``position``, which ``message`` repeats.
    """

    position: int
    message: ConversationMessage


@attrs.frozen
class HistoryCleared(DomainEvent):
    """Every message recorded so far left the views (an SDK ``clear_session``); the log keeps
    them. ``next_position`` is the log position the next appended message gets; ``removed``
    counts the messages the conversation view showed before.
    """

    next_position: int
    removed: int


@attrs.frozen
class SessionForgotten(DomainEvent):
    """The session's content was erased: its data key was destroyed (issue 11, ADR-0046).

    Recorded by `Store.forget` (``reason`` says why: an erasure request, ``retention``). The
    records before it stay in the log as ciphertext nobody can read; their hash chain still
    verifies. Stored unencrypted: it holds no content.
    """

    reason: str = ""


@attrs.frozen
class ToolResultsCleared(DomainEvent):
    """Older tool results' contents left the views for placeholders (issue 24 point 3).

    Recorded before a request's token-budget trim when the profile opts in
    (`Compaction.clear_tool_results`): each tool result outside the newest ``kept_turns``
    turns of the chat view is replaced by `cleared_text` (calls and ids kept). ``rewritten``
    holds the items as the views now show them, at their log ``positions``; the log keeps
    the originals, which `verify` compares them with. ``tool_call_ids`` names what was
    cleared, ``tokens_before``/``tokens_after`` price the chat view around it.
    """

    positions: tuple[int, ...]
    tool_call_ids: tuple[str, ...]
    rewritten: tuple[tuple[int, ConversationMessage], ...]
    kept_turns: int
    tokens_before: int
    tokens_after: int


@attrs.frozen
class TurnsSummarized(DomainEvent):
    """The turns a token-budget trim just dropped are shown as a runtime's summary (issue 24).

    Follows the trim's `TrimDecided` (view ``chat``), `BreadcrumbInserted` and
    `HistoryTrimmed`: the chat view shows the summary where the breadcrumb would be. The
    summary covers the log positions ``first_position`` to ``last_position`` (the whole
    turns the trim dropped, every one of their tool calls answered within them) and, when it
    rolls an earlier one in, everything from ``covers_from`` on; ``digest`` is the request
    digest of the chat messages of ``first_position..last_position`` the summarizer was
    given, which `verify` recomputes from the log. ``text`` is the summary as the runtime's
    summarizer (declared ``summarizer``) returned it: replay and restore read it here and
    never call a summarizer. ``tokens`` prices the summary message, ``replaced_tokens`` what
    it replaces. The log keeps the original messages.
    """

    view: View
    first_position: int
    last_position: int
    covers_from: int
    digest: str
    text: str
    summarizer: str
    tokens: int
    replaced_tokens: int


@attrs.frozen
class SummaryRefused(DomainEvent):
    """A summary of the turns a trim dropped was not used (issue 24): the summarizer raised,
    timed out, returned too large a text, or a summary would not fit. The trim it follows is
    the plain one, with the breadcrumb; the request still goes out. Changes no view."""

    first_position: int
    last_position: int
    summarizer: str
    reason: SummaryRefusal
    detail: str = ""


_E = TypeVar("_E", bound=DomainEvent)


def _record_seed_structure(message: object) -> None:
    """Record in a v1 encoded `Chat` how the code that wrote it read it: the seed's rule.

    A v1 assistant message whose content parses as a tool-call envelope was a call, a v1 tool
    message whose content parses as a tool envelope answered one; an upcast record keeps that
    reading, so an old session behaves as it did.
    """
    if not isinstance(message, dict) or message.get("t") != "chat":
        return
    chat = message.get("message")
    if not isinstance(chat, dict) or "envelope" in chat:
        return
    role, content = chat.get("role"), chat.get("content")
    if not isinstance(content, str):
        return  # a corrupt record: structuring it reports what is wrong
    if role == "assistant":
        chat["envelope"] = parse_assistant_envelope(content) is not None
    elif role == "tool":
        chat["envelope"] = parse_tool_envelope(content) is not None


Event: TypeAlias = (
    SessionStarted
    | MessageAppended
    | RouteSelected
    | TrimDecided
    | BreadcrumbInserted
    | HistoryTrimmed
    | RequestPrepared
    | RequestRejected
    | OverflowReported
    | OverflowRecovered
    | OverflowUnrecoverable
    | OrphansSwept
    | ToolCallsRestored
    | MessagePopped
    | HistoryCleared
    | SessionForgotten
    | ToolResultsCleared
    | TurnsSummarized
    | SummaryRefused
    | UsageRecorded
)
"""Every event the library records: the one list of them (issue 20, ADR-0073).

`EVENT_TYPES`, which the codec registers, is read from it. What each event means to each fold
is the table below (ADR-0100): an event in none of its unions is view-neutral, and every fold
passes it through untouched.
"""

EVENT_TYPES: tuple[type[DomainEvent], ...] = get_args(Event)
"""The members of `Event`, in its order: the classes the codec registers (E9)."""


# --- what each event means to each fold: the one table (issue 34, ADR-0100) ------------------
#
# Each union below names the events one fold decides on; the fold matches on its union and
# ends in ``case _: assert_never(event)``, so mypy names the fold a new member does not handle.
# Any other registered event passes through that fold untouched (`Deciders`). A view-neutral
# event (no view, no counter of its own, no rule) is a member of none of them:
#
#                        views  log  record  counted  route  drawn  replayed  audited  removal
# SessionStarted           x                            x      x       x
# MessageAppended          x     x     x        x              x       x         x        x
# RouteSelected            x                            x      x       x
# TrimDecided              x                    x              x                 x        x
# BreadcrumbInserted       x
# HistoryTrimmed                                x
# RequestPrepared                               x       x      x                 x        x
# RequestRejected                               x       x      x
# OverflowReported                                                     x
# OverflowRecovered                             x                      x
# OverflowUnrecoverable                         x              x       x
# OrphansSwept             x     x              x              x       x
# ToolCallsRestored        x     x                                                        x
# MessagePopped            x     x     x                       x       x                  x
# HistoryCleared           x                                   x       x                  x
# SessionForgotten
# ToolResultsCleared       x     x              x              x                          x
# TurnsSummarized          x                    x              x                          x
# SummaryRefused                                x
# UsageRecorded            x                    x                      x         x
#
# The timeline says the events of its `Described` union in words of its own, any other by its
# class's `DomainEvent.timeline` line; `verify` checks the notices a trim calls for (R31-R34)
# by their order, whatever the classes between.

ChangesViews: TypeAlias = (
    MessageAppended
    | TrimDecided
    | BreadcrumbInserted
    | OrphansSwept
    | ToolCallsRestored
    | MessagePopped
    | HistoryCleared
    | ToolResultsCleared
    | TurnsSummarized
    | RouteSelected
    | SessionStarted
    | UsageRecorded
)
"""Changes the session state or its views (`evolve`; a usage: what an estimate learns)."""

ChangesLogItems: TypeAlias = (
    MessageAppended | MessagePopped | OrphansSwept | ToolResultsCleared | ToolCallsRestored
)
"""Changes what an item of the log reads as: appended, popped, swept, rewritten or brought
back (`collect_summarised`)."""

ChangesRecord: TypeAlias = MessageAppended | MessagePopped
"""Changes a session's exported record (E13, `record_of`)."""

Counted: TypeAlias = (
    MessageAppended
    | RequestPrepared
    | TrimDecided
    | HistoryTrimmed
    | RequestRejected
    | OverflowRecovered
    | OverflowUnrecoverable
    | OrphansSwept
    | TurnsSummarized
    | SummaryRefused
    | ToolResultsCleared
    | UsageRecorded
)
"""Has counters of its own (`Tally.add`); every event counts in ``events``."""

MovesRoute: TypeAlias = RequestPrepared | RequestRejected | RouteSelected | SessionStarted
"""Moves a session's route or its row of the session list (the analytics projection)."""

Drawn: TypeAlias = (
    MessageAppended
    | RequestPrepared
    | RequestRejected
    | TrimDecided
    | TurnsSummarized
    | ToolResultsCleared
    | OrphansSwept
    | RouteSelected
    | MessagePopped
    | HistoryCleared
    | OverflowUnrecoverable
    | SessionStarted
)
"""Drawn on the report's chart; another event is drawn as the trim it goes with, or as its
timeline row alone."""

Replayed: TypeAlias = (
    MessageAppended
    | OrphansSwept
    | RouteSelected
    | OverflowReported
    | OverflowRecovered
    | OverflowUnrecoverable
    | MessagePopped
    | HistoryCleared
    | SessionStarted
    | UsageRecorded
)
"""Replayed as a command by a what-if (requests are re-decided on their own); another event
is an outcome the what-if side decides anew, or changes nothing a request carries."""

Audited: TypeAlias = MessageAppended | RequestPrepared | TrimDecided | UsageRecorded
"""Read by a rule of `verify` on its own, after the fold (a request; a trim's notices; the
request a usage names)."""

Removes: TypeAlias = (
    MessageAppended
    | RequestPrepared
    | TrimDecided
    | MessagePopped
    | ToolResultsCleared
    | ToolCallsRestored
    | TurnsSummarized
    | HistoryCleared
)
"""Checked by `verify` before the fold: what it removes, rewrites or names must be what the
views showed (appends and requests, the most frequent, are matched first: they remove none)."""


_REGISTERED: dict[type[DomainEvent], None] = dict.fromkeys(EVENT_TYPES)  # an ordered set
_REGISTRY_LISTENERS: list[Callable[[], None]] = []


def register_event(cls: type[_E]) -> type[_E]:
    """Register an event class defined outside `Event` (a runtime's own, view-neutral one;
    usable as a class decorator): the store's default codec encodes it under
    ``turnledger:<class name>``, every fold passes it through, the timeline shows its
    `DomainEvent.timeline` line, `verify` checks its place in the chain like any record's.

    ``TypeError`` for what is no attrs class derived from `DomainEvent`; ``ValueError`` for a
    class name already registered, or one that starts another's (topics are stored in every
    record, prefix-free, and name one class forever). Registering a class twice is a no-op.
    """
    is_event = isinstance(cls, type) and issubclass(cls, DomainEvent)
    if not (is_event and bool(attrs.has(cls))):
        raise TypeError(f"{cls!r} is not an attrs class derived from DomainEvent")
    if cls in _REGISTERED:
        return cls
    for known in _REGISTERED:
        if known.__name__.startswith(cls.__name__) or cls.__name__.startswith(known.__name__):
            same = "named" if known.__name__ == cls.__name__ else "whose name starts as"
            raise ValueError(f"an event class {same} {cls.__name__} is already registered "
                             f"({known.__name__}): the store's topics must be prefix-free")
    _REGISTERED[cls] = None
    _registry_changed()
    return cls


def unregister_event(cls: type[DomainEvent]) -> None:
    """Take `register_event` back (a test that registers a class for its own run): records of
    the class can no longer be read. ``ValueError`` for a member of `Event`."""
    if cls in EVENT_TYPES:
        raise ValueError(f"{cls.__name__} is a member of Event: it stays registered")
    if _REGISTERED.pop(cls, 0) is None:
        _registry_changed()


def registered_events() -> tuple[type[DomainEvent], ...]:
    """`EVENT_TYPES`, then the classes `register_event` added, in order: what the default
    codec registers."""
    return tuple(_REGISTERED)


def on_registry_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` whenever `register_event` changes the registered classes (the store
    drops its default codec, which registers them when it is built)."""
    _REGISTRY_LISTENERS.append(listener)


def _registry_changed() -> None:
    for deciders in _ALL_DECIDERS:
        deciders.clear()
    for listener in _REGISTRY_LISTENERS:
        listener()


class Deciders(dict[type, bool]):
    """Whether a fold decides on an event class: ``deciders[type(event)]`` is True for a
    member of the fold's union (or a subclass of one), False for any other registered event,
    which the fold passes through untouched. Worked out once per class, then a dict hit.

    ``TypeError`` for a class nobody registered: no fold knows what it means.
    """

    def __init__(self, union: object) -> None:
        super().__init__()
        members = get_args(union)
        self.members: tuple[type, ...] = members if members else (cast("type", union),)
        _ALL_DECIDERS.append(self)

    def __missing__(self, cls: type) -> bool:
        if not (cls in _REGISTERED or issubclass(cls, tuple(_REGISTERED))):
            raise TypeError(f"{cls.__qualname__} is not a turnledger event (Event)")
        decides = self[cls] = issubclass(cls, self.members)
        return decides


_ALL_DECIDERS: list[Deciders] = []
_KNOWN: Final = Deciders(Event)


def as_event(event: DomainEvent) -> Event:
    """``event`` typed as `Event`, checked: for an event handed in by a caller.

    Raises ``TypeError`` for a class nobody registered (`register_event`): no fold knows what
    it means. Costs one dict lookup, which a fold over the library's own events skips
    (`unchecked_events`). A registered class outside `Event` passes as it is: each fold
    decides on its own union's members alone (`Deciders`).
    """
    _KNOWN[event.__class__]  # raises TypeError for an unregistered class
    return cast("Event", event)


def unchecked_events(events: Iterable[DomainEvent]) -> Iterable[Event]:
    """``events`` typed as `Event`s, unchecked: for the events of the library's hot folds.

    Only for what the decider built or the store's codec decoded: both make registered
    classes alone, so a check per event (restore folds every one) would buy nothing. Anything
    else still fails loudly: each fold looks the class up in its `Deciders`, which raises
    ``TypeError`` for a class nobody registered.
    """
    return cast("Iterable[Event]", events)
