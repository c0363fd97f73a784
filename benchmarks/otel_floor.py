"""What the OpenTelemetry SDK's span costs on the per-call path apart from turnledger's own
code (issue 38 point 1: is the 5 % goal reachable with an SDK?).

    nice .venv/bin/python -m benchmarks.otel_floor [--rounds 12] [--calls 200]

The *plain* workload of `benchmarks.otel` (one ``turnledger.request`` span a call), the same
calls, provider and ``BatchSpanProcessor`` over a dropping exporter, lanes interleaved:

- **off**: not instrumented;
- **sdk**: ``instrument(store, tracer_provider=...)``, as in `benchmarks.otel`;
- **floor**: an observer of the store's own that makes, for each request, one span with the
  same twelve attributes worked out once beforehand: the SDK's cost alone, none of
  turnledger's code (the floor `instrument` cannot go under with those attributes);
- **bare**: the same span with no attribute at all.

Prints CPU and wall microseconds per call and the median per-round ratio to **off**; writes
nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import turnledger as tl
from benchmarks.otel import WARMUP, WORKLOADS, _message, _sdk_provider
from turnledger.domain.events import DomainEvent, RequestPrepared
from turnledger.domain.messages import ChatMessage
from turnledger.otel import FACTS, REQUEST, instrument

LANES = ("off", "sdk", "floor", "bare")


def _floor(provider: Any, attributes: bool) -> Any:
    """An observer: one span per request, its attributes (if any) made once, on first use."""
    tracer = provider.get_tracer("floor")
    made: dict[str, Any] = {}

    def observe(events: Sequence[DomainEvent]) -> None:
        last = events[-1]
        if last.__class__ is not RequestPrepared:
            return
        if attributes and not made:
            made.update({"gen_ai.conversation.id": str(last.originator_id),
                         "gen_ai.conversation.compacted": False,
                         "turnledger.session.version": last.originator_version})
            FACTS[RequestPrepared].describe(last, False, made)
        tracer.start_span(REQUEST, attributes=made or None, start_time=time.time_ns()).end()

    return observe


def _lane(lane: str, backend: str, calls: int, directory: Path) -> tuple[float, float]:
    url = "memory://" if backend == "memory" else f"sqlite:///{directory / f'{lane}.db'}"
    provider, flush = _sdk_provider()
    with tl.open_store(url) as store:
        if lane == "sdk":
            instrument(store, tracer_provider=provider)
        elif lane != "off":
            store.observe(_floor(provider, attributes=lane == "floor"))
        session = store.start_session(WORKLOADS["plain"])
        session.append(ChatMessage.system("You are a careful build agent. " * 10))
        for n in range(WARMUP):
            session.append(_message(n))
            session.prepare_request()
        flush()
        cpu, wall = time.process_time_ns(), time.perf_counter_ns()
        for n in range(WARMUP, WARMUP + calls):
            session.append(_message(n))
            session.prepare_request()
        flush()
        cpu, wall = time.process_time_ns() - cpu, time.perf_counter_ns() - wall
    return cpu / calls / 1000, wall / calls / 1000


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    print(f"{'backend':<9}{'lane':<7}{'cpu µs':>8}{'wall µs':>9}{'cpu ×':>8}{'wall ×':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for backend in ("sqlite", "memory"):
            runs: dict[str, list[tuple[float, float]]] = {lane: [] for lane in LANES}
            for round_ in range(args.rounds):
                for lane in LANES[round_ % 4 :] + LANES[: round_ % 4]:
                    directory = Path(tmp) / f"{backend}-{lane}-{round_}"
                    directory.mkdir()
                    runs[lane].append(_lane(lane, backend, args.calls, directory))
            for lane, mine in runs.items():
                cpu, wall = (statistics.median(r[i] for r in mine) for i in (0, 1))
                ratio = [statistics.median(a[i] / b[i] for a, b in zip(mine, runs["off"]))
                         for i in (0, 1)]
                print(f"{backend:<9}{lane:<7}{cpu:>8.1f}{wall:>9.1f}{ratio[0]:>8.3f}"
                      f"{ratio[1]:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
