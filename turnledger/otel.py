"""OpenTelemetry spans for every decision a store records (issue 38, docs/observability.md).

``pip install 'turnledger[otel]'``, then ``uninstrument = turnledger.otel.instrument(store)``:
each batch of events the store commits that holds a decision (a request prepared or refused, a
trim, a summary, a clearing, an overflow, a sweep, a route, a usage) becomes one span through
the OpenTelemetry API, a child of the caller's current span (ADR-0108). Appends that decide
nothing emit nothing.

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

    from turnledger.domain.budget import Route
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
) -> Callable[[], None]:
    """Make a span for every batch of decisions ``store`` commits from now on; returns the
    function that stops it.

    ``tracer_provider``: default the global one (`opentelemetry.trace.set_tracer_provider`);
    without an SDK installed and configured, the API's no-op provider makes nothing.
    ``record_content``: also emit the fields that may hold content (summary text, error and
    detail strings, tool call ids); off by default.
    """
    from turnledger import __version__

    if not isinstance(record_content, bool):
        raise TypeError(f"record_content must be a bool, got {type(record_content).__name__}")
    tracer = trace.get_tracer("turnledger", __version__, tracer_provider=tracer_provider)
    return store.observe(_Spans(tracer, record_content))


class _Spans:
    """The observer `instrument` registers: one span per batch that decided something."""

    def __init__(self, tracer: trace.Tracer, content: bool) -> None:
        self.tracer = tracer
        self.content = content

    def __call__(self, events: Sequence[DomainEvent]) -> None:
        if len(events) == 1 and events[0].__class__ is ev.MessageAppended:
            return  # the most frequent batch, and it decides nothing
        facts = [(f, e) for e in events if (f := FACTS.get(e.__class__)) is not None]
        if not facts:  # no decision (`IGNORED`), or a runtime's own registered events
            return
        # Named by what the batch is (its first headline), else by its first step.
        name = next((f.name for f, _ in facts if f.step is None), facts[0][0].name)
        last = events[-1]
        span = self.tracer.start_span(
            name,
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.conversation.id": str(last.originator_id),
                "gen_ai.conversation.compacted": any(f.compacts for f, _ in facts),
                "turnledger.session.version": last.originator_version,
            },
            start_time=_nanoseconds(events[0]),
        )
        if span.is_recording():  # not sampled, or no SDK: nothing more to build
            self._fill(span, facts)
        span.end()

    def _fill(self, span: trace.Span, facts: list[tuple[Fact, DomainEvent]]) -> None:
        attributes: Attributes = {}
        span_events: list[tuple[str, Attributes]] = []
        error: str | None = None
        for fact, event in facts:
            values = fact.describe(event, self.content)
            if fact.step is None:  # what the batch is: the span's attributes
                attributes.update(values)
            elif fact.joins and span_events:  # the breadcrumb and notice of the trim before
                span_events[-1][1].update(values)
            else:  # what happened inside it: a span event
                span_events.append((fact.step, values))
            if fact.error is not None:
                error = fact.error(event)
        span.set_attributes(attributes)
        for step, values in span_events:
            span.add_event(step, values)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))


@attrs.frozen
class Fact:
    """What one event class becomes in a span (the table `FACTS`)."""

    name: str
    """The span's name: of the batch this event says what it is (``step`` None), or of a batch
    of such steps alone."""
    describe: Callable[[Any, bool], Attributes]
    """``describe(event, record_content)``: its attributes, content-free unless asked."""
    step: str | None = None
    """The span event's name, for an event that happens inside a batch (it may repeat)."""
    compacts: bool = False
    """Something left the window: the span is ``gen_ai.conversation.compacted``."""
    error: Callable[[Any], str] | None = None
    """The span's error status, for an outcome the caller sees as a failure."""
    joins: bool = False
    """Its attributes join the span event before it (the trim a breadcrumb and a notice
    belong to: one span event per trim, a third of the cost)."""


def _request_prepared(event: ev.RequestPrepared, content: bool) -> Attributes:
    return {
        "turnledger.outcome": "prepared",
        **_fields(event, "purpose"),
        **_route(event.route),
        **_fields(event, "budget", "window", "estimated_tokens", "message_count", "digest"),
    }


def _request_rejected(event: ev.RequestRejected, content: bool) -> Attributes:
    return {
        "turnledger.outcome": "rejected",
        **_fields(event, "reason", "purpose"),
        **_route(event.route),
        **_fields(event, "window", "estimated_tokens", "message_count"),
        "turnledger.tool_calls": len(event.tool_call_ids),
        **_text(content, "turnledger.detail", event.detail),
        **_ids(content, event.tool_call_ids),
    }


def _usage_recorded(event: ev.UsageRecorded, content: bool) -> Attributes:
    return {
        "gen_ai.usage.input_tokens": event.input_tokens,
        "gen_ai.usage.output_tokens": event.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": event.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": event.cache_write_tokens,
        **_fields(event, "api", "digest", "estimated_tokens", "request_position"),
    }


def _route_selected(event: ev.RouteSelected, content: bool) -> Attributes:
    return {**_fields(event, "reason"), **_route(event.route),
            **_fields(event, "budget", "window")}


def _overflow_reported(event: ev.OverflowReported, content: bool) -> Attributes:
    return {
        "turnledger.outcome": "reported",
        **_fields(event, "estimated_tokens", "target_tokens"),
        **_text(content, "turnledger.error", event.error),
    }


def _overflow_recovered(event: ev.OverflowRecovered, content: bool) -> Attributes:
    return {"turnledger.outcome": "recovered", **_fields(event, "tokens_before", "tokens_after")}


def _overflow_unrecoverable(event: ev.OverflowUnrecoverable, content: bool) -> Attributes:
    return {
        "turnledger.outcome": "unrecoverable",
        **_text(content, "turnledger.detail", event.detail),
    }


def _trim_decided(event: ev.TrimDecided, content: bool) -> Attributes:
    return _fields(event, "view", "trigger", "reason", "dropped_messages", "dropped_turns",
                   "kept_turns", "tokens_before", "tokens_after", "limit", "budget",
                   "estimate_correction")


def _breadcrumb_inserted(event: ev.BreadcrumbInserted, content: bool) -> Attributes:
    return {"turnledger.breadcrumb_inserted": True}  # before the trim's first kept turn (R31)


def _history_trimmed(event: ev.HistoryTrimmed, content: bool) -> Attributes:
    return {"turnledger.history_trimmed": True}  # the client's notice (R33): the trim's counts


def _turns_summarized(event: ev.TurnsSummarized, content: bool) -> Attributes:
    return {
        **_fields(event, "view", "first_position", "last_position", "covers_from",
                  "summarizer", "tokens", "replaced_tokens", "digest"),
        **_text(content, "turnledger.summary", event.text),
    }


def _summary_refused(event: ev.SummaryRefused, content: bool) -> Attributes:
    return {
        **_fields(event, "first_position", "last_position", "summarizer", "reason"),
        **_text(content, "turnledger.detail", event.detail),
    }


def _tool_results_cleared(event: ev.ToolResultsCleared, content: bool) -> Attributes:
    return {
        "turnledger.tool_calls": len(event.tool_call_ids),
        **_fields(event, "kept_turns", "tokens_before", "tokens_after"),
        **_ids(content, event.tool_call_ids),
    }


def _orphans_swept(event: ev.OrphansSwept, content: bool) -> Attributes:
    return {
        **_fields(event, "removed", "rewritten"),
        "turnledger.tool_calls": len(event.orphan_tool_call_ids),
        **_fields(event, "restorable"),
        **_ids(content, event.orphan_tool_call_ids),
    }


def _tool_calls_restored(event: ev.ToolCallsRestored, content: bool) -> Attributes:
    return {
        **_fields(event, "result_position"),
        "turnledger.tool_calls": len(event.tool_call_ids),
        **_ids(content, event.tool_call_ids),
    }


FACTS: Final[dict[type[DomainEvent], Fact]] = {
    ev.RequestPrepared: Fact(REQUEST, _request_prepared),
    ev.RequestRejected: Fact(REQUEST, _request_rejected, error=lambda e: e.reason.value),
    ev.UsageRecorded: Fact(USAGE, _usage_recorded),
    ev.RouteSelected: Fact(ROUTE, _route_selected),
    ev.OverflowReported: Fact(OVERFLOW, _overflow_reported),
    ev.OverflowRecovered: Fact(OVERFLOW, _overflow_recovered),
    ev.OverflowUnrecoverable: Fact(OVERFLOW, _overflow_unrecoverable,
                                   error=lambda e: "unrecoverable"),
    ev.TrimDecided: Fact(COMPACTION, _trim_decided, "turnledger.trim_decided", compacts=True),
    ev.BreadcrumbInserted: Fact(
        COMPACTION, _breadcrumb_inserted, "turnledger.breadcrumb_inserted", joins=True
    ),
    ev.HistoryTrimmed: Fact(COMPACTION, _history_trimmed, "turnledger.history_trimmed", joins=True),
    ev.TurnsSummarized: Fact(
        COMPACTION, _turns_summarized, "turnledger.turns_summarized", compacts=True
    ),
    ev.SummaryRefused: Fact(COMPACTION, _summary_refused, "turnledger.summary_refused"),
    ev.ToolResultsCleared: Fact(
        COMPACTION, _tool_results_cleared, "turnledger.tool_results_cleared", compacts=True
    ),
    ev.OrphansSwept: Fact(SWEEP, _orphans_swept, "turnledger.orphans_swept"),
    ev.ToolCallsRestored: Fact(SWEEP, _tool_calls_restored, "turnledger.tool_calls_restored"),
}
"""What each decision becomes in a span: the one table (a test holds it and `IGNORED` to
`turnledger.events.Event`)."""

IGNORED: Final[frozenset[type[DomainEvent]]] = frozenset(
    {ev.MessageAppended, ev.MessagePopped, ev.HistoryCleared, ev.SessionStarted,
     ev.SessionForgotten}
)
"""Events that decide nothing about a window (the log's own changes; an erasure, an
administrative act): no span of their own."""


def _route(route: Route) -> Attributes:
    return {"turnledger.route.provider": route.provider, "turnledger.route.model": route.model}


def _fields(event: DomainEvent, *names: str) -> Attributes:
    """``turnledger.<name>``: each named field of the recorded event as is, an enum by its
    value, a tuple (of ids) by its count; a field that is None is left out."""
    out: Attributes = {}
    for name in names:
        value = getattr(event, name)
        if value is None:
            continue
        if isinstance(value, Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = len(value)
        out[f"turnledger.{name}"] = value
    return out


def _text(content: bool, key: str, text: str) -> Attributes:
    """A free-text field: it may hold content, so only when the caller opted in."""
    return {key: text} if content and text else {}


def _ids(content: bool, ids: tuple[str, ...]) -> Attributes:
    """Tool call ids: a runtime may put anything in them, so only when the caller opted in."""
    return {"turnledger.tool_call_ids": ids} if content and ids else {}


def _nanoseconds(event: DomainEvent) -> int:
    """The event's time in nanoseconds since the epoch (a span's clock)."""
    return (event.timestamp - _EPOCH) // _MICROSECOND * 1_000
