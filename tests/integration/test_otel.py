"""OpenTelemetry spans for every decision the store records (issue 38 point 1, ADR-0108).

One session on a SQLite store, recorded through the public API inside an "agent step" span of
the caller's, makes every decision the store records: requests prepared and one refused, tool
results cleared, token-budget and turn-limit trims with breadcrumbs and notices, a summary and
a refused one, a usage, a route switch, an overflow recovered and one not, an orphan swept on
restore and its call brought back. Every message, tool argument, tool schema, hook, tool call
id, summary, summarizer error and provider error carries one marker string. The spans, read
with the OpenTelemetry SDK's in-memory exporter, must say each decision with the recorded
values, name no marker anywhere unless content is asked for, and sit inside the caller's span.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

import turnledger as tl
from tests.extras import need
from turnledger.domain.budget import Compaction, ProviderProfile, Route, RuntimeProfile
from turnledger.domain.events import (
    EVENT_TYPES,
    BreadcrumbInserted,
    DomainEvent,
    HistoryTrimmed,
    MessageAppended,
    OrphansSwept,
    OverflowRecovered,
    OverflowReported,
    OverflowUnrecoverable,
    RequestPrepared,
    RequestRejected,
    ToolCallsRestored,
    ToolResultsCleared,
    UsageRecorded,
)
from turnledger.domain.messages import (
    AssistantToolCalls,
    ChatMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)

MARK = "QX7-MARKER-9ZK"
"""In every text a runtime gives the session: it must reach no span unless content is asked."""

OPENAI = ProviderProfile("openai", "gpt-4o", 128_000)
OPAQUE = ProviderProfile("opaque", "mystery")  # capacity unknown: the window is the budget
PROFILE = RuntimeProfile(
    max_context_tokens=700,
    max_history_messages=4,
    compaction=Compaction(clear_tool_results=True, keep_tool_result_turns=2),
)
TOOLS = ({"name": "search", "description": MARK, "parameters": {"type": "object"}},)
HOOKS = (f"Brief. {MARK}",)


@pytest.fixture(scope="module")
def otel() -> Any:
    """The OpenTelemetry SDK's trace module (dev installs it; CI fails without it)."""
    need("opentelemetry.trace")
    return need("opentelemetry.sdk.trace")


@attrs.frozen
class Traced:
    """The spans a recording made, the batches the store committed, and the caller's span."""

    spans: tuple[Any, ...]
    batches: tuple[tuple[DomainEvent, ...], ...]
    events: tuple[DomainEvent, ...]
    parent: Any


def _summarizer() -> tl.Summarizer:
    """Summarises the first trim it is asked, raises for the second: a `TurnsSummarized` and
    a `SummaryRefused`, each carrying the marker (the summary, the error)."""
    calls: list[int] = []

    def summarize(turns: Sequence[ChatMessage], previous: str | None) -> str:
        calls.append(len(turns))
        if len(calls) == 2:
            raise RuntimeError(f"the summary model is down {MARK}")
        return f"{len(turns)} messages about {MARK}"

    return tl.Summarizer("every-event", summarize)


def _prepare(session: tl.Session) -> None:
    with contextlib.suppress(tl.ContextWindowExceeded):
        session.prepare_request(TOOLS, HOOKS)


def _record(store: tl.Store) -> str:
    """Every decision the store records, every text marked; the session's id."""
    session = store.start_session(PROFILE, (OPENAI, OPAQUE), Route("openai", "gpt-4o"))
    session.summarizer = _summarizer()
    session.append(ChatMessage.system(f"You are a careful agent. {MARK}"))
    for n in range(5):
        session.append(ChatMessage.user(f"question {n} {MARK}: " + "why " * 36))
        _prepare(session)
        call = ToolCall(f"call_{n}_{MARK}", "search", f'{{"q": "{MARK}"}}')
        session.append(AssistantToolCalls(f"Let me look. {MARK}", (call,)))
        session.append(ToolResults((ToolResult(call.id, f"{MARK} " + "result " * 78, "search"),)))
        _prepare(session)
        session.append(ChatMessage.assistant(f"answer {n} {MARK}: " + "because " * 13))
    session.record_usage(
        {
            "input_tokens": 90,
            "cache_read_input_tokens": 400,
            "cache_creation_input_tokens": 30,
            "output_tokens": 25,
        }
    )
    session.select_route(Route("opaque", "mystery"), reason="classifier_hint")
    session.recover_from_overflow(f"maximum context length exceeded {MARK}")
    session.append(AssistantToolCalls(None, (ToolCall(f"call_x_{MARK}", "search", "{}"),)))
    session = store.restore(session.id)  # the dangling call is swept ...
    session.append(ToolResults((ToolResult(f"call_x_{MARK}", f"late {MARK}", "search"),)))
    session.append(ChatMessage.user(f"oops {MARK}"))
    session.pop()
    session.clear()
    session.append(ChatMessage.user(f"long {MARK} " * 600))  # larger than the window
    _prepare(session)  # refused (R18)
    session.recover_from_overflow(f"prompt is too long {MARK}")  # nothing left to trim
    return session.id


def _trace(otel: Any, path: Path, *, record_content: bool = False,
           request_spans: bool = True) -> Traced:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from turnledger.otel import instrument

    exporter = InMemorySpanExporter()
    provider = otel.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    batches: list[tuple[DomainEvent, ...]] = []
    with tl.open_store(f"sqlite:///{path}") as store:
        store.observe(lambda batch: batches.append(tuple(batch)))
        uninstrument = instrument(store, tracer_provider=provider, record_content=record_content,
                                  request_spans=request_spans)
        with provider.get_tracer("an agent framework").start_as_current_span("agent step"):
            session_id = _record(store)
        uninstrument()
        events = tuple(store.events_of(session_id))
    spans = exporter.get_finished_spans()
    parent = next(span for span in spans if span.name == "agent step")
    return Traced(tuple(s for s in spans if s is not parent), tuple(batches), events, parent)


@pytest.fixture(scope="module")
def traced(otel: Any, tmp_path_factory: pytest.TempPathFactory) -> Traced:
    """A span for every deciding batch, a plain prepared request's included
    (``request_spans=True``): the tests of what each span carries read these."""
    return _trace(otel, tmp_path_factory.mktemp("i38") / "otel.db")


@pytest.fixture(scope="module")
def traced_by_default(otel: Any, tmp_path_factory: pytest.TempPathFactory) -> Traced:
    """The same recording under `instrument`'s defaults (ADR-0111)."""
    return _trace(otel, tmp_path_factory.mktemp("i38") / "otel.db", request_spans=False)


# --- what each span and span event must carry: written out here, apart from the code ---------

ROUTE = ("turnledger.route.provider", "turnledger.route.model")
SPAN_KEYS: dict[type[DomainEvent], set[str]] = {
    RequestPrepared: {
        "turnledger.outcome",
        "turnledger.purpose",
        *ROUTE,
        "turnledger.budget",
        "turnledger.window",
        "turnledger.estimated_tokens",
        "turnledger.message_count",
        "turnledger.digest",
    },
    RequestRejected: {
        "turnledger.outcome",
        "turnledger.reason",
        "turnledger.purpose",
        *ROUTE,
        "turnledger.window",
        "turnledger.estimated_tokens",
        "turnledger.message_count",
        "turnledger.tool_calls",
    },
    UsageRecorded: {
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_creation.input_tokens",
        "turnledger.api",
        "turnledger.digest",
        "turnledger.estimated_tokens",
        "turnledger.request_position",
    },
    tl.RouteSelected: {
        "turnledger.reason",
        *ROUTE,
        "turnledger.budget",
        "turnledger.window",
    },
    OverflowReported: {
        "turnledger.outcome",
        "turnledger.estimated_tokens",
        "turnledger.target_tokens",
    },
    OverflowRecovered: {
        "turnledger.outcome",
        "turnledger.tokens_before",
        "turnledger.tokens_after",
    },
    OverflowUnrecoverable: {"turnledger.outcome"},
}
"""The span attributes of what a batch is (besides the three every span has)."""

STEP_KEYS: dict[str, set[str]] = {
    "turnledger.trim_decided": {
        "turnledger.view",
        "turnledger.trigger",
        "turnledger.reason",
        "turnledger.dropped_messages",
        "turnledger.dropped_turns",
        "turnledger.kept_turns",
        "turnledger.tokens_before",
        "turnledger.tokens_after",
        "turnledger.limit",
        "turnledger.budget",
    },
    "turnledger.turns_summarized": {
        "turnledger.view",
        "turnledger.first_position",
        "turnledger.last_position",
        "turnledger.covers_from",
        "turnledger.summarizer",
        "turnledger.tokens",
        "turnledger.replaced_tokens",
        "turnledger.digest",
    },
    "turnledger.summary_refused": {
        "turnledger.first_position",
        "turnledger.last_position",
        "turnledger.summarizer",
        "turnledger.reason",
    },
    "turnledger.tool_results_cleared": {
        "turnledger.tool_calls",
        "turnledger.kept_turns",
        "turnledger.tokens_before",
        "turnledger.tokens_after",
    },
    "turnledger.orphans_swept": {
        "turnledger.removed",
        "turnledger.rewritten",
        "turnledger.tool_calls",
        "turnledger.restorable",
    },
    "turnledger.tool_calls_restored": {"turnledger.result_position", "turnledger.tool_calls"},
}
"""The attributes of each span event (a step inside a batch)."""

JOINED = {BreadcrumbInserted, HistoryTrimmed}
"""Recorded after their trim, said by it: ``turnledger.<event>`` true on its span event."""

OUTCOMES = {
    RequestPrepared: "prepared",
    RequestRejected: "rejected",
    OverflowReported: "reported",
    OverflowRecovered: "recovered",
    OverflowUnrecoverable: "unrecoverable",
}
USAGE_FIELDS = {
    "gen_ai.usage.input_tokens": "input_tokens",
    "gen_ai.usage.output_tokens": "output_tokens",
    "gen_ai.usage.cache_read.input_tokens": "cache_read_tokens",
    "gen_ai.usage.cache_creation.input_tokens": "cache_write_tokens",
}
COUNTED = {
    "tool_calls": ("tool_call_ids", "orphan_tool_call_ids"),
    "rewritten": ("rewritten",),
    "restorable": ("restorable",),
}


def _snake(cls: type) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in cls.__name__).lstrip("_")


def _expected(event: DomainEvent, key: str) -> object:
    """What the recorded ``event`` says the attribute ``key`` is (the documented rule: the
    event's field of that name; an enum's value; a tuple's count)."""
    if key in USAGE_FIELDS:
        return getattr(event, USAGE_FIELDS[key])
    name = key.removeprefix("turnledger.")
    if name == "outcome":
        return OUTCOMES[type(event)]
    if name.startswith("route."):
        return getattr(event.route, name.removeprefix("route."))  # type: ignore[attr-defined]
    for field in COUNTED.get(name, ()):
        if hasattr(event, field):
            return len(getattr(event, field))
    value = getattr(event, name)
    return getattr(value, "value", value)


def _decisions(batch: Sequence[DomainEvent]) -> list[DomainEvent]:
    return [
        e
        for e in batch
        if type(e).__name__
        not in {"MessageAppended", "MessagePopped", "HistoryCleared", "SessionStarted"}
    ]


# --- the tests --------------------------------------------------------------------------------


def test_i38_p1_every_decision_batch_becomes_one_span_named_for_what_it_is(
    traced: Traced,
) -> None:
    """One span per committed batch that decided something, in order, named for it, with its
    steps as span events; an append that decides nothing makes none."""
    expected = [
        ("turnledger.route", []),  # the session's start selects its route
        *[("turnledger.request", [])] * 4,
        ("turnledger.request", ["turnledger.tool_results_cleared"]),
        (
            "turnledger.request",
            [
                "turnledger.trim_decided",
                "turnledger.turns_summarized",
            ],
        ),
        ("turnledger.request", ["turnledger.tool_results_cleared"]),
        (
            "turnledger.request",
            [
                "turnledger.trim_decided",
                "turnledger.summary_refused",
            ],
        ),
        (
            "turnledger.compaction",
            [
                "turnledger.trim_decided",
            ],
        ),
        ("turnledger.request", ["turnledger.tool_results_cleared"]),
        (
            "turnledger.request",
            [
                "turnledger.trim_decided",
                "turnledger.turns_summarized",
            ],
        ),
        ("turnledger.usage", []),
        ("turnledger.route", []),
        (
            "turnledger.overflow",
            [
                "turnledger.trim_decided",
                "turnledger.turns_summarized",
            ],
        ),
        ("turnledger.sweep", ["turnledger.orphans_swept"]),
        ("turnledger.sweep", ["turnledger.tool_calls_restored"]),
        (
            "turnledger.compaction",
            [
                "turnledger.trim_decided",
            ],
        ),
        ("turnledger.request", []),  # refused
        ("turnledger.overflow", []),  # unrecoverable
    ]
    actual = [(s.name, [e.name for e in s.events]) for s in traced.spans]
    assert expected == actual
    deciding = [b for b in traced.batches if _decisions(b)]
    assert len(deciding) == len(traced.spans)
    assert [MessageAppended] == [type(e) for e in traced.batches[1]]  # no span for it


def test_i38_p1_every_kind_of_decision_is_covered(traced: Traced) -> None:
    """Every event class that is a decision reached a span (the recording holds them all)."""
    from turnledger.otel import FACTS

    seen = {type(e) for batch in traced.batches for e in _decisions(batch)}
    assert set(FACTS) == seen


def test_i38_p1_each_span_and_span_event_carries_the_recorded_values(traced: Traced) -> None:
    """Each span's attributes and each span event's are exactly the recorded events' values,
    under the documented names, and no others."""
    deciding = [b for b in traced.batches if _decisions(b)]
    for span, batch in zip(traced.spans, deciding, strict=True):
        decisions = _decisions(batch)
        compacted = any(
            type(e).__name__ in {"TrimDecided", "TurnsSummarized", "ToolResultsCleared"}
            for e in decisions
        )
        expected: dict[str, object] = {
            "gen_ai.conversation.id": str(batch[-1].originator_id),
            "gen_ai.conversation.compacted": compacted,
            "turnledger.session.version": batch[-1].originator_version,
        }
        steps: list[tuple[str, dict[str, object]]] = []
        for event in decisions:
            if type(event) in SPAN_KEYS:
                expected.update({key: _expected(event, key) for key in SPAN_KEYS[type(event)]})
            elif type(event) in JOINED:  # the breadcrumb and notice of the trim before them
                steps[-1][1][f"turnledger.{_snake(type(event))}"] = True
            else:
                name = f"turnledger.{_snake(type(event))}"
                steps.append((name, {k: _expected(event, k) for k in STEP_KEYS[name]}))
        assert expected == dict(span.attributes), span.name
        assert steps == [(e.name, dict(e.attributes)) for e in span.events], span.name


def test_i38_p1_values_a_reader_checks_first(traced: Traced) -> None:
    """The figures a person reads on a dashboard, as literals: the usage's, a trim's, the
    refusal's and the overflows' outcomes (with an error status for what failed)."""
    from opentelemetry.trace import StatusCode

    usage = next(s for s in traced.spans if s.name == "turnledger.usage")
    assert (520, 25, 400, 30) == tuple(usage.attributes[k] for k in USAGE_FIELDS)
    trim = next(s for s in traced.spans if s.name == "turnledger.compaction").events[0]
    assert ("conversation", "append", "turn_limit", 1, 4, 4) == tuple(
        trim.attributes[k]
        for k in (
            "turnledger.view",
            "turnledger.trigger",
            "turnledger.reason",
            "turnledger.dropped_turns",
            "turnledger.dropped_messages",
            "turnledger.limit",
        )
    )
    refused, unrecoverable = traced.spans[-2:]
    assert ("rejected", "capacity", StatusCode.ERROR, "capacity") == (
        refused.attributes["turnledger.outcome"],
        refused.attributes["turnledger.reason"],
        refused.status.status_code,
        refused.status.description,
    )
    assert ("unrecoverable", StatusCode.ERROR) == (
        unrecoverable.attributes["turnledger.outcome"],
        unrecoverable.status.status_code,
    )
    assert all(s.status.status_code is StatusCode.UNSET for s in traced.spans[:-2])


def _texts(spans: Sequence[Any]) -> Iterator[str]:
    """Every name, key and value a span exporter would send, as text."""
    for span in spans:
        yield span.name
        yield str(span.status.description)
        for attributes in (span.attributes, *(e.attributes for e in span.events)):
            for key, value in attributes.items():
                yield key
                yield repr(value)
        yield from (e.name for e in span.events)
        yield from (repr(dict(link.attributes or {})) for link in span.links)


def test_i38_p1_no_content_reaches_a_span_by_default(traced: Traced) -> None:
    """The marker in every message, tool argument, schema, hook, call id, summary and error
    reaches no span name, attribute or event."""
    assert [] == [text for text in _texts(traced.spans) if MARK in text]


def test_i38_p1_record_content_adds_the_free_text_fields(otel: Any, tmp_path: Path) -> None:
    """``record_content=True`` emits the summary, the error and detail strings and the call
    ids, which carry the marker (so the test above can fail)."""
    spans = _trace(otel, tmp_path / "content.db", record_content=True).spans
    keys = {
        key
        for span in spans
        for attributes in (span.attributes, *(e.attributes for e in span.events))
        for key, value in attributes.items()
        if MARK in repr(value)
    }
    assert {
        "turnledger.summary",
        "turnledger.detail",
        "turnledger.error",
        "turnledger.tool_call_ids",
    } == keys


def test_i38_p1_spans_are_children_of_the_callers_current_span(traced: Traced) -> None:
    """Each span is a child of the span current in the writing thread: the caller's trace."""
    parent = traced.parent.context
    assert {(parent.trace_id, parent.span_id)} == {
        (s.context.trace_id, s.parent.span_id) for s in traced.spans
    }
    first = traced.spans[1]  # a span starts when its command was decided, ends at the commit
    request = next(e for e in traced.events if isinstance(e, RequestPrepared))
    since_epoch = request.timestamp - datetime(1970, 1, 1, tzinfo=UTC)
    assert since_epoch // timedelta(microseconds=1) * 1000 == first.start_time
    assert first.start_time <= first.end_time


def test_i38_p1_without_a_current_span_each_batch_is_a_root_span(
    otel: Any,
    tmp_path: Path,
) -> None:
    """No span current: each decision's span starts a trace of its own; uninstrumenting
    stops them."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from turnledger.otel import instrument

    exporter = InMemorySpanExporter()
    provider = otel.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with tl.open_store(f"sqlite:///{tmp_path / 'root.db'}") as store:
        stop = instrument(store, tracer_provider=provider)
        session = store.start_session(PROFILE, (OPENAI,))
        session.append(ChatMessage.user("hello"))
        session.prepare_request()
        stop()
        session.prepare_request()
    assert [("turnledger.route", None), ("turnledger.request", None)] == [
        (s.name, s.parent) for s in exporter.get_finished_spans()
    ]


def test_i38_p1_the_table_names_every_event_a_decision_or_ignored() -> None:
    """Every member of `Event` is either in `FACTS` or `IGNORED`, never both: a new event
    class is a choice made here."""
    from turnledger.otel import FACTS, IGNORED, SPAN_NAMES

    assert set(EVENT_TYPES) == set(FACTS) | IGNORED
    assert set() == set(FACTS) & IGNORED
    assert {fact.name for fact in FACTS.values()} == set(SPAN_NAMES)


def test_i38_p1_observe_gets_every_committed_batch_whole_and_in_order(
    traced: Traced,
) -> None:
    """`Store.observe` saw the session's whole log, batch by batch, as it was committed."""
    seen = [e for batch in traced.batches for e in batch]
    assert list(traced.events) == seen
    assert [OrphansSwept] == [type(e) for e in traced.batches[-8]]
    assert [MessageAppended, ToolCallsRestored] == [type(e) for e in traced.batches[-7]]
    assert [ToolResultsCleared, RequestPrepared] == [type(e) for e in traced.batches[15]]


def test_i38_p1_an_observer_that_raises_is_logged_and_the_write_stands(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failing observer never undoes a write nor stops the next observer; a callable is
    required; the function returned stops the calls."""

    def fails(batch: Sequence[DomainEvent]) -> None:
        raise RuntimeError("observer down")

    seen: list[int] = []
    with tl.open_store(f"sqlite:///{tmp_path / 'raise.db'}") as store:
        with pytest.raises(TypeError, match="callback must be callable"):
            store.observe("not a function")  # type: ignore[arg-type]
        store.observe(fails)
        stop = store.observe(lambda batch: seen.append(len(batch)))
        with caplog.at_level(logging.ERROR, logger="turnledger"):
            session = store.start_session()
            session.append(ChatMessage.user("hello"))
            stop()
            session.append(ChatMessage.user("again"))
        assert 4 == len(store.events_of(session.id))  # started, its route, two appends
    assert [2, 1] == seen
    assert [f"event observer {fails!r} failed"] * 3 == [r.getMessage() for r in caplog.records]


def test_i38_p1_an_empty_free_text_is_left_out_even_with_content() -> None:
    """``record_content=True`` adds a free-text field only when it holds something: an empty
    error string is no attribute (and the content-free fields are there either way)."""
    from uuid import uuid4

    from turnledger.otel import FACTS

    event = OverflowReported(uuid4(), 3, datetime.now(UTC), "", 900, 700)
    fact = FACTS[OverflowReported]
    without = {
        "turnledger.outcome": "reported",
        "turnledger.estimated_tokens": 900,
        "turnledger.target_tokens": 700,
    }
    assert without == fact.describe(event, True, {})
    said = attrs.evolve(event, error="prompt is too long")
    assert {**without, "turnledger.error": "prompt is too long"} == fact.describe(said, True, {})
    assert without == fact.describe(said, False, {})


def _plain_request(span: Any) -> bool:
    return span.name == "turnledger.request" and not span.events and span.status.is_ok


def _same_session(attributes: Any) -> dict[str, object]:
    """The attributes, the two recordings' session ids aside (each recorded its own)."""
    return {k: v for k, v in dict(attributes).items() if k != "gen_ai.conversation.id"}


def test_i38_p1_a_plain_request_is_an_event_on_the_callers_span_by_default(
    traced: Traced, traced_by_default: Traced,
) -> None:
    """ADR-0111: by default a request prepared with nothing else decided is a
    ``turnledger.request`` span event on the caller's recording span, at the request's time,
    with exactly the attributes its span carries with ``request_spans=True``; every other
    decision is the same span either way."""
    plain = [s for s in traced.spans if _plain_request(s)]
    assert len(plain) == 4
    assert [(s.name, _same_session(s.attributes), [(e.name, dict(e.attributes)) for e in s.events])
            for s in traced.spans if not _plain_request(s)] == [
        (s.name, _same_session(s.attributes), [(e.name, dict(e.attributes)) for e in s.events])
        for s in traced_by_default.spans]
    on_caller = traced_by_default.parent.events
    assert [("turnledger.request", _same_session(s.attributes)) for s in plain] == [
        (e.name, _same_session(e.attributes)) for e in on_caller]
    default_requests = [e for e in traced_by_default.events if isinstance(e, RequestPrepared)]
    assert {str(default_requests[0].originator_id)} == {
        e.attributes["gen_ai.conversation.id"] for e in on_caller}
    since_epoch = default_requests[0].timestamp - datetime(1970, 1, 1, tzinfo=UTC)
    assert since_epoch // timedelta(microseconds=1) * 1000 == on_caller[0].timestamp
    assert [] == list(traced.parent.events)


def test_i38_p1_a_plain_request_is_a_span_without_a_recording_caller(
    otel: Any, tmp_path: Path,
) -> None:
    """ADR-0111: with no span current, or one that does not record (a sampler dropped it),
    a plain request is still a span of its own: nothing is lost."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from turnledger.otel import instrument

    exporter = InMemorySpanExporter()
    provider = otel.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with tl.open_store(f"sqlite:///{tmp_path / 'plain.db'}") as store:
        instrument(store, tracer_provider=provider)
        session = store.start_session(PROFILE, (OPENAI,))
        session.append(ChatMessage.user("hello"))
        session.prepare_request()
        with trace.use_span(trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)):
            session.prepare_request()
    assert ["turnledger.route", "turnledger.request", "turnledger.request"] == [
        s.name for s in exporter.get_finished_spans()]


def test_i38_p1_request_spans_must_be_a_bool(tmp_path: Path) -> None:
    """A bad option is refused by name, nothing instrumented."""
    need("opentelemetry.trace")
    from turnledger.otel import instrument

    with tl.open_store("memory://") as store, pytest.raises(TypeError, match="request_spans"):
        instrument(store, request_spans="yes")  # type: ignore[arg-type]
