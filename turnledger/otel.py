"""OpenTelemetry spans for every decision a store records (issue 38, docs/observability.md).

``pip install 'turnledger[otel]'``, then ``uninstrument = turnledger.otel.instrument(store)``:
each batch of events the store commits that holds a decision (a request prepared or refused, a
trim, a summary, a clearing, an overflow, a sweep, a route, a usage) becomes one span through
the OpenTelemetry API, a child of the caller's current span (ADR-0108). Appends that decide
nothing emit nothing. A request prepared with nothing else decided (no trim, no clearing: the
common call) is a ``turnledger.request`` span event on the caller's span when one is
recording, with the attributes its span would have (ADR-0111; ``request_spans=True`` makes it
a span as well).

- The span is named by what the batch is (`SPAN_NAMES`): ``turnledger.request``,
  ``turnledger.overflow``, ``turnledger.usage``, ``turnledger.route``, or, for a trim an
  append decided, ``turnledger.compaction``, and ``turnledger.sweep``. It starts when the
  command was decided (its events' time) and ends when its transaction committed.
- What the batch is (a request, an overflow, a usage, a route: at most one of each per batch)
  is the span's attributes; what happened inside it (a trim of each view, summaries,
  clearings, sweeps, each of which may repeat) are its span events, named
  ``turnledger.<event>`` (``turnledger.trim_decided``, ...); a trim's breadcrumb and notice
  are said on its own span event (``turnledger.breadcrumb_inserted``,
  ``turnledger.history_trimmed``: true).
- Names: the GenAI semantic conventions' where they exist (``gen_ai.conversation.id``,
  ``gen_ai.conversation.compacted``, ``gen_ai.usage.*``); ``turnledger.<field>`` for the rest,
  each the recorded event's field of that name (a tuple of ids: its count).
- Content-free by default: no message text, tool argument, summary text, error or detail
  string is emitted; ``record_content=True`` adds the free-text fields (``turnledger.summary``,
  ``turnledger.detail``, ``turnledger.error``, ``turnledger.tool_call_ids``), which may hold
  content.

The hook is `turnledger.store.session.Store.observe`: spans are made in the writing thread,
after the commit, while the session's lock is held.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from enum import Enum
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final

import attrs

from turnledger.domain import events as ev
from turnledger.domain.events import DomainEvent

try:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as error:  # pragma: no cover - the extra is part of dev
    raise ImportError(
        "turnledger.otel needs the OpenTelemetry API: pip install 'turnledger[otel]'"
    ) from error

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

    from turnledger.store.session import Store

__all__ = ["FACTS", "IGNORED", "SPAN_NAMES", "instrument"]

Attributes = dict[str, "AttributeValue"]

REQUEST: Final = "turnledger.request"
OVERFLOW: Final = "turnledger.overflow"
USAGE: Final = "turnledger.usage"
ROUTE: Final = "turnledger.route"
COMPACTION: Final = "turnledger.compaction"
SWEEP: Final = "turnledger.sweep"
SPAN_NAMES: Final = (REQUEST, OVERFLOW, USAGE, ROUTE, COMPACTION, SWEEP)
"""The names of the spans `instrument` makes, one per batch that decided something."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


def instrument(
    store: Store,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    record_content: bool = False,
    request_spans: bool = False,
) -> Callable[[], None]:
    """Make a span for every batch of decisions ``store`` commits from now on; returns the
    function that stops it.

    ``tracer_provider``: default the global one (`opentelemetry.trace.set_tracer_provider`);
    without an SDK installed and configured, the API's no-op provider makes nothing.
    ``record_content``: also emit the fields that may hold content (summary text, error and
    detail strings, tool call ids); off by default.
    ``request_spans``: a request prepared with nothing else decided is a span of its own even
    inside a recording caller's span, where by default it is a ``turnledger.request`` span
    event on that span (ADR-0111: a span costs the per-call path more than 5 %).
    """
    from turnledger import __version__

    for name, value in (("record_content", record_content), ("request_spans", request_spans)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    tracer = trace.get_tracer("turnledger", __version__, tracer_provider=tracer_provider)
    return store.observe(_Spans(tracer, record_content, request_spans))


class _Spans:
    """The observer `instrument` registers: one span per batch that decided something."""

    def __init__(self, tracer: trace.Tracer, content: bool, request_spans: bool) -> None:
        self.tracer = tracer
        self.content = content
        self.request_spans = request_spans
        self.conversation: tuple[object, str] = (None, "")
        """The last session's id and its string: a session's batches come one after another."""

    def __call__(self, events: Sequence[DomainEvent]) -> None:
        if len(events) == 1 and events[0].__class__ is ev.MessageAppended:
            return  # the most frequent batch, and it decides nothing
        facts: list[tuple[Fact, DomainEvent]] = []
        name: str | None = None  # what the batch is (its first headline), else its first step
        compacted = False
        for event in events:  # one loop: most batches are a single decision
            fact = FACTS.get(event.__class__)
            if fact is None:  # no decision (`IGNORED`), or a runtime's own registered events
                continue
            facts.append((fact, event))
            if name is None and fact.step is None:
                name = fact.name
            compacted = compacted or fact.compacts
        if not facts:
            return
        last = events[-1]
        head: Attributes = {
            "gen_ai.conversation.id": self._conversation_id(last.originator_id),
            "gen_ai.conversation.compacted": compacted,
            "turnledger.session.version": last.originator_version,
        }
        if (len(facts) == 1 and facts[0][1].__class__ is ev.RequestPrepared
                and not self.request_spans):
            caller = trace.get_current_span()
            if caller.is_recording():  # the model call's own span: one event on it
                facts[0][0].describe(facts[0][1], self.content, head)
                caller.add_event(REQUEST, head, _nanoseconds(facts[0][1]))
                return
        span = self.tracer.start_span(
            name or facts[0][0].name, kind=SpanKind.INTERNAL, attributes=head,
            start_time=_nanoseconds(events[0]),
        )
        if span.is_recording():  # not sampled, or no SDK: nothing more to build
            self._fill(span, facts)
        span.end()

    def _conversation_id(self, session_id: object) -> str:
        known, text = self.conversation  # one read: another thread may replace the pair
        if known is not session_id:
            text = str(session_id)
            self.conversation = (session_id, text)
        return text

    def _fill(self, span: trace.Span, facts: list[tuple[Fact, DomainEvent]]) -> None:
        attributes: Attributes = {}
        span_events: list[tuple[str, Attributes]] = []
        error: str | None = None
        for fact, event in facts:
            if fact.step is None:  # what the batch is: the span's attributes
                fact.describe(event, self.content, attributes)
            elif fact.joins and span_events:  # the breadcrumb and notice of the trim before
                fact.describe(event, self.content, span_events[-1][1])
            else:  # what happened inside it: a span event
                span_events.append((fact.step, fact.describe(event, self.content, {})))
            if fact.error is not None:
                error = fact.error(event)
        span.set_attributes(attributes)  # one pass, after the SDK checked the three above
        for step, values in span_events:
            span.add_event(step, values)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))


Field = tuple[str, Callable[[Any], Any]]
"""An attribute's name and the getter of its value from the recorded event."""


@attrs.frozen
class Fact:
    """What one event class becomes in a span (the table `FACTS`)."""

    name: str
    """The span's name: of the batch this event says what it is (``step`` None), or of a batch
    of such steps alone."""
    fields: tuple[Field, ...]
    """Its attributes by the one rule (`_fields`), in order, after ``said``."""
    step: str | None = None
    """The span event's name, for an event that happens inside a batch (it may repeat)."""
    compacts: bool = False
    """Something left the window: the span is ``gen_ai.conversation.compacted``."""
    error: Callable[[Any], str] | None = None
    """The span's error status, for an outcome the caller sees as a failure."""
    joins: bool = False
    """Its attributes join the span event before it (the trim a breadcrumb and a notice
    belong to: one span event per trim, a third of the cost)."""
    said: tuple[tuple[str, AttributeValue], ...] = ()
    """Attributes the event's class alone says (``turnledger.outcome``), first."""
    content: tuple[Field, ...] = ()
    """Free-text fields and tool call ids, as they are: only when content is asked for (they
    may hold content), and not when empty; last."""

    def describe(self, event: Any, content: bool, into: Attributes) -> Attributes:
        """Put ``event``'s attributes into ``into`` (content-free unless asked); returns it.

        The rule of ``fields``: an enum by its value, a tuple (of ids) by its count, a field
        that is None left out.
        """
        into.update(self.said)
        for key, get in self.fields:
            value = get(event)
            if value is None:
                continue
            if isinstance(value, Enum):
                value = value.value
            elif isinstance(value, tuple):
                value = len(value)
            into[key] = value
        if content:
            for key, get in self.content:
                if value := get(event):
                    into[key] = value
        return into


def _fields(*names: str | tuple[str, str]) -> tuple[Field, ...]:
    """``turnledger.<name>``: the recorded event's field of that name (``route.model``: its
    route's model); a pair: an attribute of another name, and the field it is."""
    return tuple(
        (name[0], attrgetter(name[1])) if isinstance(name, tuple)
        else (f"turnledger.{name}", attrgetter(name))
        for name in names
    )


_ROUTE: Final = ("route.provider", "route.model")
_TOOL_CALLS: Final = ("turnledger.tool_calls", "tool_call_ids")
_TOOL_CALL_IDS: Final = _fields(("turnledger.tool_call_ids", "tool_call_ids"))
_DETAIL: Final = _fields("detail")

FACTS: Final[dict[type[DomainEvent], Fact]] = {
    ev.RequestPrepared: Fact(
        REQUEST,
        _fields("purpose", *_ROUTE, "budget", "window", "estimated_tokens",
                "message_count", "digest"),
        said=(("turnledger.outcome", "prepared"),),
    ),
    ev.RequestRejected: Fact(
        REQUEST,
        _fields("reason", "purpose", *_ROUTE, "window", "estimated_tokens",
                "message_count", _TOOL_CALLS),
        said=(("turnledger.outcome", "rejected"),),
        content=_DETAIL + _TOOL_CALL_IDS,
        error=lambda e: e.reason.value,
    ),
    ev.UsageRecorded: Fact(
        USAGE,
        _fields(
            ("gen_ai.usage.input_tokens", "input_tokens"),
            ("gen_ai.usage.output_tokens", "output_tokens"),
            ("gen_ai.usage.cache_read.input_tokens", "cache_read_tokens"),
            ("gen_ai.usage.cache_creation.input_tokens", "cache_write_tokens"),
            "api", "digest", "estimated_tokens", "request_position",
        ),
    ),
    ev.RouteSelected: Fact(ROUTE, _fields("reason", *_ROUTE, "budget", "window")),
    ev.OverflowReported: Fact(
        OVERFLOW,
        _fields("estimated_tokens", "target_tokens"),
        said=(("turnledger.outcome", "reported"),),
        content=_fields(("turnledger.error", "error")),
    ),
    ev.OverflowRecovered: Fact(
        OVERFLOW, _fields("tokens_before", "tokens_after"),
        said=(("turnledger.outcome", "recovered"),),
    ),
    ev.OverflowUnrecoverable: Fact(
        OVERFLOW, (), said=(("turnledger.outcome", "unrecoverable"),), content=_DETAIL,
        error=lambda e: "unrecoverable",
    ),
    ev.TrimDecided: Fact(
        COMPACTION,
        _fields("view", "trigger", "reason", "dropped_messages", "dropped_turns", "kept_turns",
                "tokens_before", "tokens_after", "limit", "budget", "estimate_correction"),
        "turnledger.trim_decided",
        compacts=True,
    ),
    ev.BreadcrumbInserted: Fact(  # before the trim's first kept turn (R31)
        COMPACTION, (), "turnledger.breadcrumb_inserted", joins=True,
        said=(("turnledger.breadcrumb_inserted", True),),
    ),
    ev.HistoryTrimmed: Fact(  # the client's notice (R33): the trim's counts
        COMPACTION, (), "turnledger.history_trimmed", joins=True,
        said=(("turnledger.history_trimmed", True),),
    ),
    ev.TurnsSummarized: Fact(
        COMPACTION,
        _fields("view", "first_position", "last_position", "covers_from", "summarizer",
                "tokens", "replaced_tokens", "digest"),
        "turnledger.turns_summarized",
        compacts=True,
        content=_fields(("turnledger.summary", "text")),
    ),
    ev.SummaryRefused: Fact(
        COMPACTION,
        _fields("first_position", "last_position", "summarizer", "reason"),
        "turnledger.summary_refused",
        content=_DETAIL,
    ),
    ev.ToolResultsCleared: Fact(
        COMPACTION,
        _fields(_TOOL_CALLS, "kept_turns", "tokens_before", "tokens_after"),
        "turnledger.tool_results_cleared",
        compacts=True,
        content=_TOOL_CALL_IDS,
    ),
    ev.OrphansSwept: Fact(
        SWEEP,
        _fields("removed", "rewritten", ("turnledger.tool_calls", "orphan_tool_call_ids"),
                "restorable"),
        "turnledger.orphans_swept",
        content=_fields(("turnledger.tool_call_ids", "orphan_tool_call_ids")),
    ),
    ev.ToolCallsRestored: Fact(
        SWEEP,
        _fields("result_position", _TOOL_CALLS),
        "turnledger.tool_calls_restored",
        content=_TOOL_CALL_IDS,
    ),
}
"""What each decision becomes in a span: the one table (a test holds it and `IGNORED` to
`turnledger.events.Event`)."""

IGNORED: Final[frozenset[type[DomainEvent]]] = frozenset(
    {ev.MessageAppended, ev.MessagePopped, ev.HistoryCleared, ev.SessionStarted,
     ev.SessionForgotten}
)
"""Events that decide nothing about a window (the log's own changes; an erasure, an
administrative act): no span of their own."""


def _nanoseconds(event: DomainEvent) -> int:
    """The event's time in nanoseconds since the epoch (a span's clock)."""
    return (event.timestamp - _EPOCH) // _MICROSECOND * 1_000
