"""The audit timeline, time travel and request replay of a recorded session (E4, E6, E12).

Everything here is a fold over a session's events, in order, with the decider's own `evolve`
(ADR-0005): nothing re-decides, so what is shown is exactly what was recorded.

- `timeline` gives one entry per event with a one-line human summary (why each trim happened,
  what each request held) and the event's data as JSON-ready values.
- `state_at` / `views_at` rebuild the session's state and both views as of any event position
  (E4); position ``N`` is the ``originator_version`` of the last event included, ``0`` is before
  the first event.
- `session_summaries` lists a store's sessions with their counts (``turnledger sessions``).
- `requests` re-derives, for every `RequestPrepared`, the exact provider messages of that request
  (R27a: after a prepare the chat view equals the request) and checks them against the recorded
  digest (E6).

JSON output is deterministic (E12): keys sorted, compact separators, datetimes as ISO 8601 in
UTC, UUIDs as text, enums as their values, non-finite floats as strings (a ratio may be NaN,
R14, and JSON has no NaN).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, Final, TypeAlias, assert_never, cast
from uuid import UUID

import attrs

from turnledger.domain.arguments import require_int
from turnledger.domain.decider import SessionState, evolve, request_digest
from turnledger.domain.errors import CorruptRecord, InvalidPosition, ReplayError
from turnledger.domain.estimate import message_tokens
from turnledger.domain.events import (
    STAMP_FIELDS,
    BreadcrumbInserted,
    Deciders,
    DomainEvent,
    HistoryCleared,
    HistoryTrimmed,
    MessageAppended,
    MessagePopped,
    OrphansSwept,
    OverflowRecovered,
    OverflowReported,
    OverflowUnrecoverable,
    Purpose,
    RequestPrepared,
    RequestRejected,
    RouteSelected,
    SessionForgotten,
    SessionStarted,
    SummaryRefused,
    ToolCallsRestored,
    ToolResultsCleared,
    TrimDecided,
    TrimReason,
    TrimTrigger,
    TurnsSummarized,
    UsageRecorded,
    as_event,
)
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolResults,
    to_chat_messages,
)
from turnledger.domain.state import note_item
from turnledger.projections.counters import Counters, fold_counters
from turnledger.store.codec import MESSAGE_TAGS

if TYPE_CHECKING:
    from eventsourcing.persistence import StoredEvent

    from turnledger.domain.budget import Route
    from turnledger.store.backend import EventStoreBackend

__all__ = [
    "FoldedState",
    "InvalidPosition",
    "ReplayError",
    "TimelineEntry",
    "audit_request",
    "dumps",
    "item_tokens",
    "printable",
    "requests",
    "session_summaries",
    "state_at",
    "summarize",
    "timeline",
    "timeline_jsonl",
    "to_jsonable",
    "views_at",
]

_PREVIEW_CHARS = 40


# --- JSON (E12) -------------------------------------------------------------------------------

def to_jsonable(value: object) -> Any:
    """``value`` as plain JSON types, deterministically (E12).

    attrs instances become objects of their fields (ConversationMessage variants also get a
    ``"kind"``: the codec's tag ``chat``, ``calls`` or ``results``), datetimes ISO 8601 in UTC,
    UUIDs text, enums their value, tuples lists, mappings objects, non-finite floats the strings
    ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``.
    """
    match value:
        case None | bool() | int() | str():
            return value
        case Enum():
            return to_jsonable(value.value)
        case float():
            return _float(value)
        case datetime():
            return _instant(value)
        case UUID():
            return str(value)
        case bytes():
            return value.hex()
        case Mapping():
            return {str(k): to_jsonable(v) for k, v in value.items()}
        case list() | tuple():
            return [to_jsonable(v) for v in value]
        case set() | frozenset():
            return sorted((to_jsonable(v) for v in value), key=dumps)
    if attrs.has(type(value)):
        return _attrs_jsonable(value)
    raise TypeError(f"cannot render {type(value).__name__} as JSON")


def _float(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _instant(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value.isoformat()} has no instant")
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _attrs_jsonable(value: Any) -> dict[str, Any]:
    fields = {f.name: to_jsonable(getattr(value, f.name)) for f in attrs.fields(type(value))}
    kind = MESSAGE_TAGS.get(type(value))
    if kind is not None:
        fields["kind"] = kind
    return fields


def dumps(value: object) -> str:
    """Canonical JSON text of ``value`` (sorted keys, compact, UTF-8 kept); the same input always
    gives the same text (E12)."""
    return json.dumps(
        to_jsonable(value),
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
        allow_nan=False,
    )


# --- human output -----------------------------------------------------------------------------

_CONTROLS: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
"""C0, DEL and C1 controls, line/paragraph separators and bidi controls: a terminal acts on
them (ESC sequences clear the screen, set the title, recolour; bidi overrides reorder text)."""
_NAMED_CONTROLS: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_control(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED_CONTROLS.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character escaped (``\\x1b``, ``\\n``, ``\\u202e``).

    For human-readable output only: stored content must not drive the reader's terminal. The
    JSON outputs keep the text as stored (JSON escapes C0 controls itself).
    """
    return _CONTROLS.sub(_escape_control, text)


# --- timeline ---------------------------------------------------------------------------------

@attrs.frozen
class TimelineEntry:
    """One recorded event, as the audit timeline shows it (E6).

    ``position`` is the event's ``originator_version``; ``type`` its class name; ``summary`` one
    human line; ``data`` the event's own fields (without the id, position and time) as JSON values.
    """

    position: int
    timestamp: datetime
    type: str
    summary: str
    data: dict[str, Any] = attrs.field(eq=False, hash=False)

    def to_jsonable(self) -> dict[str, Any]:
        """This entry as plain JSON values."""
        return {
            "position": self.position,
            "timestamp": to_jsonable(self.timestamp),
            "type": self.type,
            "summary": self.summary,
            "data": self.data,
        }

    def to_json(self) -> str:
        """Canonical JSON of this entry: the same event always gives the same bytes (E12)."""
        return dumps(self.to_jsonable())


def timeline(events: Iterable[DomainEvent]) -> list[TimelineEntry]:
    """One `TimelineEntry` per event, in order, with a one-line summary (E6)."""
    return [
        TimelineEntry(
            position=event.originator_version,
            timestamp=event.timestamp,
            type=type(event).__name__,
            summary=summarize(event),
            data=_event_data(event),
        )
        for event in events
    ]


def timeline_jsonl(events: Iterable[DomainEvent]) -> str:
    """The timeline as JSON Lines (one `TimelineEntry.to_json` per line), byte-stable (E12)."""
    return "".join(entry.to_json() + "\n" for entry in timeline(events))


def _event_data(event: DomainEvent) -> dict[str, Any]:
    return {
        f.name: to_jsonable(getattr(event, f.name))
        for f in attrs.fields(type(event))
        if f.name not in STAMP_FIELDS
    }


# --- summaries --------------------------------------------------------------------------------

def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def _preview(text: str | None) -> str:
    flat = " ".join((text or "").split())
    if len(flat) > _PREVIEW_CHARS:
        flat = flat[: _PREVIEW_CHARS - 1].rstrip() + "…"
    return "'" + flat.replace("'", "\\'") + "'"


def _route_text(provider: str, model: str) -> str:
    return f"{model} via {provider}"


def item_tokens(item: ConversationMessage) -> int:
    """What ``item`` costs as it enters the log: it is in the current turn then (R21-R22)."""
    return sum(message_tokens(m, current_turn=True) for m in to_chat_messages((item,)))


def _describe_item(item: ConversationMessage) -> str:
    match item:
        case Chat(message=m):
            return f"{m.role}: {_preview(m.content)}"
        case AssistantToolCalls(text=text, tool_calls=calls):
            names = ", ".join(c.name or c.id for c in calls)
            said = f" {_preview(text)}" if text else ""
            return f"assistant{said} calling {names}"
        case ToolResults(results=results):
            parts = [f"{r.tool_name or r.tool_call_id} {_preview(r.content)}" for r in results]
            images = sum(len(r.attachments) for r in results)
            extra = f", {_plural(images, 'image')}" if images else ""
            return f"{_plural(len(results), 'tool result')}{extra}: " + "; ".join(parts)


_TRIGGERS = {
    TrimTrigger.APPEND: "on append (R27a)",
    TrimTrigger.PREPARE: "before a request (R24, R27a)",
    TrimTrigger.OVERFLOW: "after a provider overflow (R25)",
}


def _trim_limit(event: TrimDecided) -> str:
    if event.reason is TrimReason.TOKEN_BUDGET:
        return f"token budget {event.limit:,}"
    return f"turn limit {_plural(event.limit, 'turn')}"


def _capacity(capacity: int | None, window: int) -> str:
    if capacity is None:
        return f"capacity unknown, window {window:,}"
    return f"capacity {capacity:,}"


Described: TypeAlias = (
    MessageAppended
    | RequestPrepared
    | TrimDecided
    | BreadcrumbInserted
    | HistoryTrimmed
    | RequestRejected
    | OrphansSwept
    | ToolCallsRestored
    | RouteSelected
    | OverflowReported
    | OverflowRecovered
    | OverflowUnrecoverable
    | MessagePopped
    | HistoryCleared
    | SessionStarted
    | SessionForgotten
    | ToolResultsCleared
    | TurnsSummarized
    | SummaryRefused
    | UsageRecorded
)
"""The events the timeline says in words of its own (`summarize`); any other registered event
is said by its class's `DomainEvent.timeline` line."""

_DESCRIBED: Final = Deciders(Described)


def _registered(event: DomainEvent) -> str:
    """The line of an event outside `Described`: its class's `DomainEvent.timeline` over its
    fields, or its class name and fields."""
    fields = {name: value for name, value in attrs.asdict(event, recurse=False).items()
              if name not in STAMP_FIELDS}
    line = type(event).timeline
    if not line:
        said = ", ".join(f"{name}={_preview(str(value))}" for name, value in fields.items())
        return f"{type(event).__name__}({said})"
    try:
        return line.format(**fields)
    except (KeyError, IndexError, ValueError, AttributeError) as error:
        return f"{type(event).__name__} (its timeline line {line!r} fails: {error!r})"


def summarize(event: DomainEvent) -> str:  # noqa: C901  # one flat case per event type
    """One human line saying what ``event`` records and, for a trim, why it happened (E6).

    An event outside `Described` (a new view-neutral one, a runtime's own) is said by its
    class's `DomainEvent.timeline` line. Raises ``TypeError`` for a class nobody registered:
    there is nothing to say about it.
    """
    if not _DESCRIBED[event.__class__]:
        return _registered(event)
    event = cast("Described", event)
    # Every member has its summary; the most frequent ones are matched first.
    match event:
        case MessageAppended():
            return _appended(event)
        case RequestPrepared():
            return _prepared(event)
        case TrimDecided():
            return _trim(event)
        case BreadcrumbInserted():
            return _breadcrumb(event)
        case HistoryTrimmed():
            return _notice(event)
        case RequestRejected():
            return _rejected(event)
        case OrphansSwept():
            return _swept(event)
        case ToolCallsRestored():
            return _restored(event)
        case RouteSelected():
            return _route_selected(event)
        case OverflowReported():
            return _overflow(event)
        case OverflowRecovered():
            return _recovered(event)
        case OverflowUnrecoverable():
            return _unrecoverable(event)
        case MessagePopped():
            return _popped(event)
        case HistoryCleared():
            return _cleared(event)
        case SessionStarted():
            return _started(event)
        case SessionForgotten():
            return _forgotten(event)
        case ToolResultsCleared():
            return _tool_results_cleared(event)
        case TurnsSummarized():
            return _summarized(event)
        case SummaryRefused():
            return _summary_refused(event)
        case UsageRecorded():
            return _usage(event)
        case _:
            assert_never(event)


def _started(event: SessionStarted) -> str:
    p, kind = event.profile, "legacy" if event.legacy else "structured"
    settings = [f"turn limit {p.max_history_turns:,}"]
    if p.max_context_tokens is not None:
        settings.append(f"max_context_tokens {p.max_context_tokens:,}")
    if p.context_compact_ratio is not None:
        settings.append(f"context_compact_ratio {p.context_compact_ratio}")
    if p.history_pruning.enabled:
        settings.append(f"history_pruning {p.history_pruning.max_tokens:,}")
    route = _route_text(event.route.provider, event.route.model)
    return f"session started ({kind}) on {route}: " + ", ".join(settings)


def _appended(event: MessageAppended) -> str:
    item = event.message
    text = f"appended {_describe_item(item)} ({_plural(item_tokens(item), 'token')})"
    if event.original_chars is not None:
        text += f"; tool result truncated from {event.original_chars:,} characters (R38)"
    return text


def _route_selected(event: RouteSelected) -> str:
    budget = "proactive trimming off" if event.budget == 0 else f"budget {event.budget:,}"
    capacity = _capacity(event.capacity, event.window)
    route = f"{event.route.provider}/{event.route.model}"
    return f"route → {route} ({capacity}, {budget}): {event.reason.value}"


def _trim(event: TrimDecided) -> str:
    view = f"{event.view.value} view"
    return (
        f"dropped {_plural(event.dropped_turns, 'turn')} "
        f"({_plural(event.dropped_messages, 'message')}, "
        f"{event.tokens_before:,} → {event.tokens_after:,} tokens): "
        f"{_trim_limit(event)}; {_plural(event.kept_turns, 'turn')} kept in the {view}, "
        f"{_TRIGGERS[event.trigger]}"
    )


def _breadcrumb(event: BreadcrumbInserted) -> str:
    return (
        f"breadcrumb inserted before log position {event.before_position:,} "
        f"({event.view.value} view, R31)"
    )


def _usage(event: UsageRecorded) -> str:
    answered = ("the window handed to the framework" if event.request_position is None
                else f"the request at position {event.request_position:,}")
    return (
        f"provider billed {answered}: {event.input_tokens:,} input tokens "
        f"({event.cache_read_tokens:,} read from its cache, {event.cache_write_tokens:,} "
        f"written to it), {event.output_tokens:,} output; estimated "
        f"{event.estimated_tokens:,} ({event.api}, issue 35)"
    )


def _notice(event: HistoryTrimmed) -> str:
    tokens = ""  # a version 1 notice did not say them (issue 35)
    if event.tokens_before is not None and event.tokens_after is not None:
        tokens = f", {event.tokens_before:,} → {event.tokens_after:,} tokens"
        if event.budget is not None:
            tokens += f", budget {event.budget:,}"
    return (
        f"HistoryTrimmed sent to clients: {_plural(event.dropped_messages, 'message')} dropped, "
        f"{_plural(event.kept_turns, 'turn')} kept{tokens} ({event.reason.value}, R32-R33)"
    )


def _request_kind(event: RequestPrepared | RequestRejected) -> str:
    return "final-summary request" if event.purpose is Purpose.FINAL_SUMMARY else "request"


def _prepared(event: RequestPrepared) -> str:
    overhead = []
    if event.tool_tokens:
        overhead.append(f"{event.tool_tokens:,} tool")
    if event.hook_tokens:
        overhead.append(f"{event.hook_tokens:,} hook")
    incl = f" incl. {' + '.join(overhead)} tokens" if overhead else ""
    body = f", {event.api} body" if event.api else ""
    if event.left_out:  # what the model did not see (issue 21, B1)
        whats = ", ".join(sorted({entry.what for entry in event.left_out}))
        body += f" leaving out {len(event.left_out)} ({whats})"
    return (
        f"{_request_kind(event)} prepared: {_plural(event.message_count, 'message')}, "
        f"~{event.estimated_tokens:,} tokens{incl} of {event.window:,} "
        f"({_route_text(event.route.provider, event.route.model)}){body}"
    )


def _rejected(event: RequestRejected) -> str:
    return f"{_request_kind(event)} rejected: {event.detail}"


def _overflow(event: OverflowReported) -> str:
    return (
        f"provider overflow at ~{event.estimated_tokens:,} tokens, trimming to "
        f"{event.target_tokens:,} (R25): {_preview(event.error)}"
    )


def _recovered(event: OverflowRecovered) -> str:
    return (
        f"overflow recovered: {event.tokens_before:,} → {event.tokens_after:,} tokens; "
        "the request is retried"
    )


def _unrecoverable(event: OverflowUnrecoverable) -> str:
    return f"overflow unrecoverable: {event.detail}"


def _swept(event: OrphansSwept) -> str:
    text = f"orphan sweep removed {_plural(event.removed, 'message')}"
    if event.rewritten:
        text += f", rewrote {_plural(len(event.rewritten), 'message')}"
    if event.orphan_tool_call_ids:
        text += f" (tool call ids {', '.join(event.orphan_tool_call_ids)})"
    return text + " (R36, E5)"


def _restored(event: ToolCallsRestored) -> str:
    positions = ", ".join(str(p) for p, _ in event.restored)
    return (
        f"the tool result at log position {event.result_position} brought back the swept "
        f"tool calls {', '.join(event.tool_call_ids)} (log positions {positions}; E5)"
    )


def _tool_results_cleared(event: ToolResultsCleared) -> str:
    positions = ", ".join(map(str, event.positions))
    calls = f" (calls {', '.join(event.tool_call_ids)})" if event.tool_call_ids else ""
    return (
        f"tool results cleared at log positions {positions}{calls}, outside the newest "
        f"{_plural(event.kept_turns, 'turn')}: {event.tokens_before:,} -> "
        f"{event.tokens_after:,} tokens (issue 24)"
    )


def _summarized(event: TurnsSummarized) -> str:
    rolled = (f", rolling in the summary from log position {event.covers_from}"
              if event.covers_from < event.first_position else "")
    return (
        f"turns at log positions {event.first_position}-{event.last_position} summarised by "
        f"{event.summarizer!r}{rolled}: {event.replaced_tokens:,} -> {event.tokens:,} tokens, "
        f"shown in place of the breadcrumb (issue 24)"
    )


def _summary_refused(event: SummaryRefused) -> str:
    detail = f": {event.detail}" if event.detail else ""
    name = f" by {event.summarizer!r}" if event.summarizer else ""
    return (
        f"summary{name} of log positions {event.first_position}-{event.last_position} refused "
        f"({event.reason.value}{detail}); the plain trim and its breadcrumb stand (issue 24)"
    )


def _forgotten(event: SessionForgotten) -> str:
    why = f" ({event.reason})" if event.reason else ""
    return f"session forgotten{why}: its data key was destroyed, its content erased"


def _popped(event: MessagePopped) -> str:
    return (f"popped {_describe_item(event.message)} at log position {event.position} "
            "(it stays in the log)")


def _cleared(event: HistoryCleared) -> str:
    return (f"history cleared: {_plural(event.removed, 'message')} left the views (the log "
            f"keeps them; the next message is at log position {event.next_position})")


# --- time travel (E4) -------------------------------------------------------------------------

@attrs.define
class FoldedState(SessionState):
    """A `SessionState` folded from a session's log, with that log's items (``log``: position
    -> item as the events leave it, None: swept or popped): the replay tools show whole
    conversation views from it, and what-if pops read it (ADR-0076). Its index has the one
    form of every state; ``log`` only supplies what that form summarises."""

    log: dict[int, ConversationMessage | None] = attrs.field(
        factory=dict, kw_only=True, eq=False, repr=False
    )

    def fold(self, event: DomainEvent) -> None:
        """`evolve` ``event`` and keep the log's items up to date; O(1) amortised."""
        checked = as_event(event)
        evolve(self, checked, self.log)
        if checked.__class__ is MessageAppended:  # most events: skip the match of `note_item`
            self.log[checked.position] = checked.message
        else:
            note_item(self.log, checked)

    def conversation_view(
        self, older: Mapping[int, ConversationMessage | None] | None = None
    ) -> list[ConversationMessage]:
        """The structured history after the turn limit (R28-R29), its summarised part read
        from ``log`` unless ``older`` is given."""
        return super().conversation_view(self.log if older is None else older)

    def chat_view(
        self, older: Mapping[int, ConversationMessage | None] | None = None
    ) -> list[ChatMessage]:
        """The provider-facing working history (R27a), from ``log`` when it is summarised."""
        return super().chat_view(self.log if older is None else older)


def fold(events: Iterable[DomainEvent], state: FoldedState | None = None) -> FoldedState:
    """Fold ``events`` into ``state`` (a fresh `FoldedState` by default) with `evolve`."""
    current = FoldedState() if state is None else state
    for event in events:
        current.fold(event)
    return current


def _upto(events: Sequence[DomainEvent], position: int) -> Iterator[DomainEvent]:
    require_int("position", position, InvalidPosition)
    last = events[-1].originator_version if events else 0
    if not 0 <= position <= last:
        raise InvalidPosition(f"position {position} is outside 0..{last} (the recorded events)")
    for event in events:
        if event.originator_version > position:
            return
        yield event


def state_at(events: Sequence[DomainEvent], position: int) -> FoldedState:
    """The session state after the event at ``position`` (0: before any event) (E4).

    Raises `InvalidPosition` outside ``0 .. last recorded version``.
    """
    return fold(_upto(events, position))


def views_at(
    events: Sequence[DomainEvent], position: int
) -> tuple[list[ChatMessage], list[ConversationMessage]]:
    """(chat view, conversation view) as of the event at ``position`` (E4).

    Raises `InvalidPosition` outside ``0 .. last recorded version``.
    """
    state = state_at(events, position)
    return state.chat_view(), state.conversation_view()


# --- requests (E6) ----------------------------------------------------------------------------

@attrs.frozen
class AuditedRequest:
    """One prepared request, re-derived from the log and checked against its digest (E6).

    ``messages`` are the provider messages rebuilt from the events before it (R27a);
    ``digest`` is their `request_digest`; ``matches`` says it equals ``recorded_digest``.
    """

    position: int
    messages: tuple[ChatMessage, ...]
    recorded_digest: str
    digest: str
    matches: bool
    event: RequestPrepared = attrs.field(eq=False, repr=False)

    def to_jsonable(self) -> dict[str, Any]:
        """This request as plain JSON values (the event's fields under ``"request"``)."""
        return {
            "position": self.position,
            "messages": to_jsonable(self.messages),
            "recorded_digest": self.recorded_digest,
            "digest": self.digest,
            "matches": self.matches,
            "request": _event_data(self.event),
        }

    def to_json(self) -> str:
        """Canonical JSON of this audited request (E12)."""
        return dumps(self.to_jsonable())


def audit_request(state: SessionState, event: RequestPrepared) -> AuditedRequest:
    """Re-derive the messages of ``event`` from ``state`` (folded up to it) and check its digest.

    A prepare changes no view, so the chat view right after the trims that precede it is the
    request (R27a); ``state`` may have evolved ``event`` itself or not.
    """
    messages = tuple(state.chat_view())
    digest = request_digest(messages)
    return AuditedRequest(
        position=event.originator_version,
        messages=messages,
        recorded_digest=event.digest,
        digest=digest,
        matches=digest == event.digest,
        event=event,
    )


def requests(events: Iterable[DomainEvent]) -> list[AuditedRequest]:
    """Every `RequestPrepared`, with the exact messages it sent and its digest check (E6).

    One fold over the events: O(events + size of the requests), not one fold per request.
    """
    state = FoldedState()
    audited: list[AuditedRequest] = []
    for event in events:
        state.fold(event)
        if isinstance(event, RequestPrepared):
            audited.append(audit_request(state, event))
    return audited


# --- the session list -------------------------------------------------------------------------

def summarize_session(events: Sequence[DomainEvent]) -> dict[str, Any]:
    """One session's counts as JSON values: id, start time, kind, events, messages (appends),
    trims (both reasons), requests (prepared only), rejections and the current route
    (``provider/model``); the counts are the session's `Counters`."""
    started = events[0] if events else None
    counters = fold_counters(events)
    return _summary(
        started.originator_id if started else None,
        to_jsonable(started.timestamp) if started else None,
        started.legacy if isinstance(started, SessionStarted) else None,
        counters,
        _last_route(events, None),
    )


def _last_route(events: Sequence[DomainEvent], before: Route | None) -> Route | None:
    """The route of the last `RouteSelected` of ``events``; ``before`` when there is none."""
    return next((e.route for e in reversed(events) if isinstance(e, RouteSelected)), before)


def _summary(
    session_id: UUID | None,
    started_at: str | None,
    legacy: bool | None,
    counters: Counters,
    route: Route | None,
) -> dict[str, Any]:
    return {
        "session_id": "" if session_id is None else str(session_id),
        "started_at": started_at,
        "legacy": legacy,
        "events": counters.events,
        "messages": counters.appends,
        "trims": counters.trims,
        "requests": counters.requests_prepared,
        "rejections": counters.requests_rejected,
        "route": "" if route is None else f"{route.provider}/{route.model}",
    }


def session_summaries(
    backend: EventStoreBackend, *, after: UUID | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """`summarize_session` for the sessions of the store, oldest first: every one, or the page
    ``after`` / ``limit`` select (`EventStoreBackend.session_ids`); only their events are read.

    The counts come from the analytics tables where they have the session
    (`listed_sessions`, ADR-0054): only the events recorded after what the tables applied
    are read and folded, so a page of a caught-up store decodes nothing (and reads no record
    when nothing was recorded after the tables' position). A session the tables do not have
    (never caught up, started before ``tl_session_list`` existed, a ``memory://``, read-only
    or salvaged store) has all its events folded. The answer is the same either way.

    A session with a record that cannot be decoded is summarised up to that record, with
    ``"corrupt_at"`` set to its version (else None), so one bad record does not hide the list.
    A forgotten session (``"forgotten"``: True) shows its id and its number of records only.
    """
    from turnledger.projections.analytics import listed_sessions

    session_ids = backend.session_ids(after=after, limit=limit)
    known = listed_sessions(backend, session_ids)
    rows: list[dict[str, Any]] = []
    for session_id in session_ids:
        forgotten = backend.mapper.is_forgotten(session_id)
        listed = None if forgotten else known.get(session_id)
        after_version = 0 if listed is None else listed.counters.events
        current = listed is not None and listed.current  # nothing after: no read at all
        records = [] if current else backend.read_records(session_id, after_version=after_version)
        events, corrupt_at = _decoded(backend, [] if forgotten else records)
        if listed is None:
            row = summarize_session(events)
        else:  # the tables' counts, and the events they have not applied yet
            row = _summary(
                session_id,
                to_jsonable(datetime.fromisoformat(listed.started_at)),
                listed.legacy,
                fold_counters(events, listed.counters),
                _last_route(events, listed.route),
            )
        row["session_id"] = str(session_id)
        row["corrupt_at"] = corrupt_at
        row["forgotten"] = forgotten
        if forgotten:  # erased content (ADR-0046): only its records can be counted
            row["events"] = len(records)
            row["route"] = "(forgotten)"
        rows.append(row)
    return rows


def _decoded(
    backend: EventStoreBackend, records: Sequence[StoredEvent]
) -> tuple[list[DomainEvent], int | None]:
    """The events of ``records`` up to the first that cannot be decoded, and its version."""
    events: list[DomainEvent] = []
    for record in records:
        try:
            events.append(backend.mapper.decode_record(record)[0])
        except CorruptRecord:
            return events, record.originator_version
    return events, None
