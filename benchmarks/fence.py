"""Benchmark: what the fence (ADR-0098) costs an append, as a ratio in one run.

Every append checks, in its own transaction, the store-wide settings it was opened under
(`Fence`): SQLite runs one ``SELECT`` after ``BEGIN IMMEDIATE``; PostgreSQL inserts through
``INSERT ... SELECT ... WHERE <settings hold>`` (the same single round trip). Measured per
backend on one store object, interleaved rounds of two variants:

- **fenced**: the store as `open_store` opened it (``store.backend.fence`` set from
  ``Protection.expected_settings()``);
- **unfenced**: the same store with ``store.backend.fence.expect(())``: no check, the
  statement from before the fence (on PostgreSQL the plain ``INSERT`` without the ``WHERE``).

Two shapes: ``append`` (one user message per call, one record per transaction) and
``extend x4`` (``session.extend`` of 4 messages: one transaction of 4 records). Each round
starts a new session per variant (turn limit 10^9: one event per message, no trims), times
``--calls`` calls, and takes the median; the rounds alternate which variant goes first.
Reported: the median over rounds of the per-round medians (µs per call) and the ratio
fenced/unfenced (median, and min-max over rounds, each round's ratio taken within it).

SQLite: a temporary file, ``synchronous=full`` (the default). PostgreSQL: 127.0.0.1:5432,
a fresh schema ``tl_bench_<hex>``, dropped afterwards; the server's default
``synchronous_commit``. Run from the project root::

    .venv/bin/python -m benchmarks.fence [--calls 300] [--rounds 7] [--backends sqlite,postgresql]

Prints a table and writes ``benchmarks/results/fence.json`` (``--output``). No timing is
asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import turnledger as tl
from turnledger.domain.events import MessageAppended

RESULTS = Path(__file__).parent / "results" / "fence.json"
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
BACKENDS = ("sqlite", "postgresql")
BATCH = 4
"""Messages per ``extend`` call."""
WARM_UP = 10
"""Untimed calls per variant and shape before the rounds (prepared statements, caches)."""
SHAPES = ("append", f"extend x{BATCH}")


def _text(i: int) -> str:
    """A realistic message body (100-900 characters)."""
    return f"message {i}: " + "the quick brown fox jumps over the lazy dog. " * (2 + i % 19)


def _caller(session: tl.Session, shape: str) -> Callable[[int], object]:
    """One call of ``shape`` on ``session``: an append, or an extend of `BATCH` messages."""
    if shape == "append":
        return lambda i: session.append(tl.ChatMessage.user(_text(i)))
    return lambda i: session.extend(
        [tl.ChatMessage.user(_text(i)) if k % 2 == 0 else tl.ChatMessage.assistant(_text(i))
         for k in range(BATCH)]
    )


def _timed(store: tl.Store, shape: str, calls: int) -> tuple[list[float], str]:
    """``calls`` calls of ``shape`` on a new session: the seconds of each, the session."""
    session = store.start_session(tl.RuntimeProfile(max_history_messages=10**9))
    call = _caller(session, shape)
    times: list[float] = []
    for i in range(calls):
        started = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - started)
    return times, session.id


def run(url: str, calls: int, rounds: int) -> list[dict[str, Any]]:
    """Both shapes on the store at ``url``: one row each."""
    with tl.open_store(url) as store:
        fence = store.backend.fence
        settings = fence.expected
        if not settings:
            raise SystemExit(f"{url}: the store opened without a fence: nothing to measure")
        variants: dict[str, tuple[tuple[str, str | None, bool], ...]] = {
            "fenced": settings, "unfenced": (),
        }
        for shape in SHAPES:  # warm up both statements of both shapes
            for expected in variants.values():
                fence.expect(expected)
                _timed(store, shape, WARM_UP)
        rows = []
        for shape in SHAPES:
            medians: dict[str, list[float]] = {v: [] for v in variants}
            order = list(variants)
            for r in range(rounds):
                for variant in order if r % 2 == 0 else order[::-1]:
                    fence.expect(variants[variant])
                    times, session_id = _timed(store, shape, calls)
                    medians[variant].append(statistics.median(times))
                    stored = sum(isinstance(e, MessageAppended)
                                 for e in store.events_of(session_id))
                    per_call = 1 if shape == "append" else BATCH
                    assert stored == calls * per_call, (shape, variant, stored)
            fence.expect(settings)
            ratios = [f / u for f, u in zip(medians["fenced"], medians["unfenced"],
                                            strict=True)]
            rows.append({
                "shape": shape,
                "fenced_us": round(statistics.median(medians["fenced"]) * 1e6, 1),
                "unfenced_us": round(statistics.median(medians["unfenced"]) * 1e6, 1),
                "ratio": round(statistics.median(ratios), 3),
                "ratio_min": round(min(ratios), 3),
                "ratio_max": round(max(ratios), 3),
                "rounds_fenced_us": [round(m * 1e6, 1) for m in medians["fenced"]],
                "rounds_unfenced_us": [round(m * 1e6, 1) for m in medians["unfenced"]],
            })
        fence_settings = [list(s) for s in settings]
    for row in rows:
        row["fence"] = fence_settings
    return rows


def _drop(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [[str(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + " |"
              for r in cells]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300, help="timed calls per round")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="comma-separated: sqlite, postgresql")
    parser.add_argument("--postgres", default=POSTGRES, help="PostgreSQL URL (no schema)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - set(BACKENDS)
    if unknown or not backends:
        parser.error(f"--backends: choose among {', '.join(BACKENDS)}")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fence-") as directory:
        for backend in backends:
            if backend == "sqlite":
                rows += [{"backend": backend, **row}
                         for row in run(f"sqlite:///{directory}/fence.db", args.calls,
                                        args.rounds)]
                continue
            schema = f"tl_bench_{uuid.uuid4().hex[:12]}"  # created by the backend
            try:
                rows += [{"backend": backend, **row}
                         for row in run(f"{args.postgres}?schema={schema}", args.calls,
                                        args.rounds)]
            finally:
                _drop(args.postgres, schema)
    print(f"\nThe fence's cost: median µs per call over {args.rounds} interleaved rounds of "
          f"{args.calls} calls; ratio fenced/unfenced per round (median, min-max)\n")
    print(_table([{**r, "ratio min-max": f"{r['ratio_min']:.3f}-{r['ratio_max']:.3f}"}
                  for r in rows],
                 ["backend", "shape", "fenced_us", "unfenced_us", "ratio", "ratio min-max"]))
    report = {
        "benchmark": "fence",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.fence " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "python": platform.python_version(), "platform": platform.platform(),
        "cpus": os.cpu_count(), "calls": args.calls, "rounds": args.rounds,
        "batch": BATCH, "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nresults: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
