"""What `turnledger.otel` costs on the per-call path (issue 38 point 1; goal: at most 5 %).

    nice .venv/bin/python -m benchmarks.otel [--rounds 8] [--calls 300] [--quick]

A *call* is what an agent loop does before each model request: ``session.append(message)``
(a user or an assistant message, in turn) then ``session.prepare_request()``. Two workloads:

- **trimming**: a 4,000-token budget, reached during the warm-up: in steady state nearly every
  request trims the chat view (a span event on its request span) and every user message
  trims the conversation view at the default turn limit (a ``turnledger.compaction`` span of
  its own): about 1.4 spans and 1.9 trims per call, the most a session makes;
- **plain**: a budget and turn limit no call reaches: one ``turnledger.request`` span per
  call and nothing else (the common case between trims, or with a low-water mark, ADR-0104).

Each lane times the same calls on a fresh store, the lanes taking turns within each round (in
another order each round) so that load on the machine weighs on all alike:

- **off**: the store not instrumented;
- **sdk**: ``instrument(store, tracer_provider=...)`` with the OpenTelemetry SDK's
  ``TracerProvider`` and a ``BatchSpanProcessor`` over an exporter that drops the spans (what
  a service would run, minus the network); the processor is flushed inside the timed part;
- **api_noop**: ``instrument(store)`` with no SDK configured: the API's no-op tracer (the cost
  of the observer and of reading the events alone);
- **off_step** and **sdk_step**: the same two with each call inside an agent framework's span
  (``agent step``, made by the same SDK), as an instrumented agent runs: a plain prepared
  request is then a span event on it (ADR-0111). Their ratios are sdk_step / off_step, so the
  framework's own span weighs on both; ``spans`` counts the framework's spans too.

Backends: ``sqlite`` (a file in a temporary directory: the real per-call path, a commit each)
and ``memory`` (no I/O: the worst case, where only CPU counts). Times are CPU time of the
whole process (``time.process_time_ns``, so the span processor's thread is counted) and wall
time, per call; ratios are lane / off within a round, their median over rounds (the machine's
load drifts between rounds). Prints the table; writes ``benchmarks/results/otel.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import turnledger as tl
from turnledger.domain.messages import ChatMessage
from turnledger.otel import instrument

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "otel.json"
LANES = ("off", "sdk", "api_noop", "off_step", "sdk_step")
BASELINE = {"sdk": "off", "api_noop": "off", "off": "off", "off_step": "off_step",
            "sdk_step": "off_step"}
"""The lane each lane's ratio is taken against."""
BACKENDS = ("sqlite", "memory")
WORKLOADS = {
    "trimming": tl.RuntimeProfile(max_context_tokens=4_000),
    "plain": tl.RuntimeProfile(max_context_tokens=1_000_000, max_history_messages=1_000_000),
}
"""The profile of each workload: the default turn limit, or none a call reaches."""
WARMUP = 60
"""Calls made before the timed ones: the session reaches its budget (trims in steady state)."""


def _sdk_provider() -> tuple[Any, Callable[[], int]]:
    """An SDK provider whose spans are dropped, and a function that flushes it and says how
    many spans it exported so far."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Drop(SpanExporter):
        """Counts the spans and drops them."""

        spans = 0

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            Drop.spans += len(spans)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))

    def flush() -> int:
        provider.force_flush()
        return Drop.spans

    return provider, flush


def _message(n: int) -> ChatMessage:
    if n % 2 == 0:
        return ChatMessage.user(f"question {n}: " + "why is the build failing " * 12)
    return ChatMessage.assistant(f"answer {n}: " + "because the cache key changed " * 10)


def _lane(
    lane: str, backend: str, profile: tl.RuntimeProfile, calls: int, directory: Path
) -> dict[str, float]:
    """Per-call CPU and wall microseconds of ``calls`` calls on a fresh store."""
    url = "memory://" if backend == "memory" else f"sqlite:///{directory / f'{lane}.db'}"
    flush: Callable[[], int] = lambda: 0  # noqa: E731 - nothing to flush without the SDK
    step: Callable[[], Any] = contextlib.nullcontext
    with tl.open_store(url) as store:
        if lane in ("sdk", "off_step", "sdk_step"):
            provider, flush = _sdk_provider()
            if lane != "off_step":
                instrument(store, tracer_provider=provider)
            if lane != "sdk":  # the framework's span around each model call
                tracer = provider.get_tracer("an agent framework")
                step = lambda: tracer.start_as_current_span("agent step")  # noqa: E731
        elif lane == "api_noop":
            instrument(store)  # no SDK configured: the API's no-op provider
        session = store.start_session(profile)
        session.append(ChatMessage.system("You are a careful build agent. " * 10))
        for n in range(WARMUP):
            with step():
                session.append(_message(n))
                session.prepare_request()
        exported = flush()
        version = session.version
        cpu, wall = time.process_time_ns(), time.perf_counter_ns()
        for n in range(WARMUP, WARMUP + calls):
            with step():
                session.append(_message(n))
                session.prepare_request()
        spans = flush() - exported
        cpu, wall = time.process_time_ns() - cpu, time.perf_counter_ns() - wall
        trims = sum(
            type(e).__name__ == "TrimDecided" for e in store.events_of(session.id)[version:]
        )
    return {
        "cpu_us": cpu / calls / 1000,
        "wall_us": wall / calls / 1000,
        "trims_per_call": trims / calls,
        "spans_per_call": spans / calls,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 60 calls")
    parser.add_argument("--output", type=Path, default=None, help="JSON results file")
    args = parser.parse_args(argv)
    rounds, calls = (2, 60) if args.quick else (args.rounds, args.calls)
    output = args.output or (Path(tempfile.gettempdir()) / "otel.json" if args.quick else RESULTS)
    cases = [(backend, workload) for backend in BACKENDS for workload in WORKLOADS]
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        f"{backend}/{workload}": {lane: [] for lane in LANES} for backend, workload in cases
    }
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(rounds):
            for backend, workload in cases:
                case = runs[f"{backend}/{workload}"]
                for lane in LANES[round_ % len(LANES) :] + LANES[: round_ % len(LANES)]:
                    directory = Path(tmp) / f"{backend}-{workload}-{lane}-{round_}"
                    directory.mkdir()
                    case[lane].append(_lane(lane, backend, WORKLOADS[workload], calls, directory))
            print(f"round {round_ + 1}/{rounds} done", flush=True)
    rows = [_row(name, lane, case) for name, case in runs.items() for lane in LANES]
    print(
        f"\n{'backend/workload':<18}{'lane':<10}{'cpu µs':>8}{'wall µs':>9}{'cpu ×':>8}"
        f"{'wall ×':>8}{'spans':>7}{'trims':>7}   (per call; × = lane / off)"
    )
    for row in rows:
        print(
            f"{row['case']:<18}{row['lane']:<10}{row['cpu_us_per_call']:>8}"
            f"{row['wall_us_per_call']:>9}{row['cpu_ratio']:>8}{row['wall_ratio']:>8}"
            f"{row['spans_per_call']:>7}{row['trims_per_call']:>7}"
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "command": " ".join(["python -m benchmarks.otel", *(argv or sys.argv[1:])]),
        "rounds": rounds,
        "calls": calls,
        "warmup_calls": WARMUP,
        "span_processor": "BatchSpanProcessor over an exporter that drops the spans",
        "rows": rows,
        "runs": runs,
    }
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"written to {output}")
    return 0


def _row(case: str, lane: str, runs: dict[str, list[dict[str, float]]]) -> dict[str, object]:
    """One lane of one case: medians per call, and the median of the per-round ratios."""
    mine, off = runs[lane], runs[BASELINE[lane]]

    def median(what: str, of: list[dict[str, float]]) -> float:
        return statistics.median(r[what] for r in of)

    def ratio(what: str) -> float:
        return statistics.median(a[what] / b[what] for a, b in zip(mine, off, strict=True))

    return {
        "case": case,
        "lane": lane,
        "cpu_us_per_call": round(median("cpu_us", mine), 1),
        "wall_us_per_call": round(median("wall_us", mine), 1),
        "cpu_ratio": round(ratio("cpu_us"), 3),
        "wall_ratio": round(ratio("wall_us"), 3),
        "spans_per_call": round(median("spans_per_call", mine), 2),
        "trims_per_call": round(median("trims_per_call", mine), 2),
    }


if __name__ == "__main__":
    sys.exit(main())
