"""Benchmark: the HTML report (`turnledger.audit.report`) of a long agent session — time and size.

Records an agent session of N turns through the `Session` API on ``memory://``
(`record_agent_session`: tool loops, tool results of 0.3-6 KB, an image every 25 turns, a route
switch to a small model and back every 97 turns with the rejected request it causes (its tool
schemas alone overflow the small window), a provider overflow every 131 turns, one tool result
answering a call of the turn before), with a token budget and a 40-turn limit that trim on most
turns. Then it measures,
median of ``--repeat`` runs, the wall time of ``turnledger.audit.report(events)`` alone, of the same
report with a what-if profile (half the budget), and the size of each file.

Run from the project root::

    .venv/bin/python -m benchmarks.report                 # 10,000 turns, results/report.json
    .venv/bin/python -m benchmarks.report --turns 1000    # JSON to the temp dir

The machine is shared: read the times as orders of magnitude, not as exact figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

import turnledger as tl
from turnledger.audit import report
from turnledger.domain.events import DomainEvent

RESULTS = Path(__file__).resolve().parent / "results"
PROFILE = tl.RuntimeProfile(max_context_tokens=6_000, max_history_messages=40)
PROVIDERS = (
    tl.ProviderProfile("openai", "gpt-4o-mini", context_window=16_000),
    tl.ProviderProfile("local", "tiny", context_window=2_000),
)
MAIN, SMALL = tl.Route("openai", "gpt-4o-mini"), tl.Route("local", "tiny")
BIG_TOOL = json.dumps({"name": "search", "description": "Search the repository. " * 500})
OVERFLOW = "Error code: 400 - This model's maximum context length is 16000 tokens."


def _lines(turn: int, count: int) -> str:
    return "\n".join(f"src/m{turn}.py:{i}: def f_{i}(x): return g(x, {i})" for i in range(count))


def _tool_loop(session: tl.Session, turn: int, text: str) -> None:
    call = tl.ToolCall(f"call_{turn}", "read_file", json.dumps({"path": f"src/m{turn}.py"}))
    session.append(tl.AssistantToolCalls(f"Reading src/m{turn}.py.", (call,)))
    size = 120 if turn % 40 == 0 else 6 + (turn * 7919) % 40
    body = text + _lines(turn, size)
    attachments = (f"screens/t{turn}.png",) if turn % 25 == 12 else ()
    session.append(tl.ToolResults((tl.ToolResult(call.id, body, "read_file", attachments),)))


def _orphan_pair(session: tl.Session, turn: int) -> None:
    """A call answered only in the next turn: trimming its turn orphans the result (R36)."""
    call = tl.ToolCall(f"late_{turn}", "run_tests", "{}")
    session.append(tl.AssistantToolCalls("Running the tests.", (call,)))
    session.append(tl.ChatMessage.user(f"question {turn + 1}: meanwhile, what changed?"))
    session.append(tl.ToolResults((tl.ToolResult(call.id, "3 passed", "run_tests"),)))


def _request(session: tl.Session, turn: int) -> None:
    if turn % 97 == 50:  # a classifier picks a model too small for the context (R18), then back
        session.select_route(SMALL, reason="classifier_hint")
        with contextlib.suppress(tl.ContextWindowExceeded):  # its tool schemas alone overflow
            session.prepare_request(tools=[BIG_TOOL])
        session.select_route(MAIN, reason="explicit")
    session.prepare_request()
    if turn % 131 == 70:
        session.recover_from_overflow(RuntimeError(OVERFLOW))
        session.prepare_request()


def record_agent_session(
    store: tl.Store, turns: int, hostile: Sequence[str] = (), *, orphan_at: int = 5
) -> tl.Session:
    """Record an agent session of ``turns`` turns (see the module doc) and return it.

    ``hostile``: texts a report must escape; turn ``k`` starts its user message, its tool result
    and its answer with ``hostile[k]`` (while there are texts left).
    """
    session = store.start_session(profile=PROFILE, providers=PROVIDERS, route=MAIN)
    session.append(tl.ChatMessage.system("You are a coding agent. Read files before answering."))
    turn = 0
    while turn < turns:
        text = hostile[turn] + " " if turn < len(hostile) else ""
        image = f" [IMAGE:screens/u{turn}.png]" if turn % 25 == 0 else ""
        session.append(tl.ChatMessage.user(f"{text}question {turn}: why does m{turn} fail?{image}"))
        if turn == orphan_at:
            _orphan_pair(session, turn)
            turn += 1
        elif turn % 3:
            _tool_loop(session, turn, text)
        _request(session, turn)
        session.append(tl.ChatMessage.assistant(f"{text}Answer {turn}."))
        turn += 1
    return session


def _median_seconds(run: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(turns: int, repeat: int, out_dir: Path) -> dict[str, Any]:
    """Record one session of ``turns`` turns and time its reports; the JSON-ready results."""
    with tl.open_store("memory://") as store:
        start = time.perf_counter()
        session = record_agent_session(store, turns)
        record_seconds = time.perf_counter() - start
        events: list[DomainEvent] = store.events_of(session.id)
    smaller = attrs.evolve(PROFILE, max_context_tokens=3_000)
    plain, what_if = out_dir / f"report-{turns}.html", out_dir / f"report-{turns}-what-if.html"
    return {
        "turns": turns,
        "events": len(events),
        "requests": sum(isinstance(e, tl.RequestPrepared | tl.RequestRejected) for e in events),
        "trims": sum(isinstance(e, tl.TrimDecided) for e in events),
        "record_seconds": round(record_seconds, 2),
        "report_seconds": round(_median_seconds(lambda: report(events, plain), repeat), 3),
        "report_bytes": plain.stat().st_size,
        "what_if_seconds": round(
            _median_seconds(lambda: report(events, what_if, what_if=smaller), repeat), 3
        ),
        "what_if_bytes": what_if.stat().st_size,
        "files": [str(plain), str(what_if)],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    full = args.turns == 10_000
    out_dir = Path(tempfile.mkdtemp(prefix="turnledger-report-"))
    row = measure(args.turns, args.repeat, out_dir)
    print(f"{'turns':>7} {'events':>8} {'requests':>8} {'trims':>6} {'report s':>9} "
          f"{'size MB':>8} {'what-if s':>9} {'size MB':>8}")
    print(f"{row['turns']:>7,} {row['events']:>8,} {row['requests']:>8,} {row['trims']:>6,} "
          f"{row['report_seconds']:>9.2f} {row['report_bytes'] / 1e6:>8.2f} "
          f"{row['what_if_seconds']:>9.2f} {row['what_if_bytes'] / 1e6:>8.2f}")
    print(f"(median of {args.repeat} runs; files in {out_dir})")
    result = {
        "benchmark": "report",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "repeat": args.repeat,
        "rows": [row],
    }
    target = RESULTS / "report.json" if full else out_dir / "report.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
