"""Benchmark: the cost of one compaction decision stays O(window) (issue 24, "Done means").

Sessions of 100 / 1,000 / 10,000 agent turns (a user question, a tool call, its ~1 KB result,
an answer) with a fixed token budget (``--budget``, default 8,000: a window of ~20 turns). Each
measured decision is the realistic one of an agent loop: one new turn is recorded (not timed),
then ``Session.prepare_request`` is timed; the new turn pushes the oldest kept turn out of the
budget, so every decision trims. Three sides, interleaved in the same run:

- **plain** (the baseline): the default profile, no summarizer: the breadcrumb trim;
- **summary**: the same, with an instant summarizer (``prepare_request(summarizer=...)``, no
  time limit so it runs inline, no thread): the dropped turn is summarised and
  ``TurnsSummarized`` recorded; the summarizer's own time (measured inside it) is taken off;
- **clearing**: the profile's tool-result clearing (``Compaction(clear_tool_results=True,
  keep_tool_result_turns=3)``, no summarizer): the turn leaving the newest three has its
  result cleared (``ToolResultsCleared``) and the budget trim drops what still does not fit.
  Cleared results are short, so the same budget keeps more turns: its window is larger
  (``window_messages``) and its ``vs_plain`` compares windows of different sizes.

Reported per side and session length: the median µs per decision, its ratio to the plain
trim's in the same run, the ratio 10,000 / 100 turns of each side (about 1: the decision costs
O(window), not O(session)), the messages handed to the summarizer per decision (the dropped
turn's, not the session's), and what the decisions recorded (to show each one compacted).
Backends: ``memory://`` and SQLite (``synchronous=normal``, a temporary file).

Run from the project root::

    .venv/bin/python -m benchmarks.compaction           # 100, 1,000, 10,000 turns
    .venv/bin/python -m benchmarks.compaction --quick   # 100 and 1,000 turns, 30 decisions

Prints the table; writes ``benchmarks/results/compaction.json``.
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import turnledger as tl
from turnledger.domain.budget import Compaction, RuntimeProfile
from turnledger.domain.events import (
    RequestPrepared,
    ToolResultsCleared,
    TrimDecided,
    TurnsSummarized,
    View,
)
from turnledger.domain.messages import (
    AssistantToolCalls,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)

RESULTS = Path(__file__).parent / "results" / "compaction.json"
SIDES = ("plain", "summary", "clearing")
BUILD_BATCH = 2_000  # messages per transaction while a session is built
WARM = 5  # untimed decisions per side before the timed ones


def turn(n: int) -> list[ConversationMessage | ChatMessage]:
    """Agent turn ``n``: a question, one tool call, its ~1 KB result, an answer."""
    return [
        ChatMessage.user(f"question {n}: " + "what does the next file say " * 6),
        AssistantToolCalls("Reading it.", (ToolCall(f"c{n}", "read_file", f'{{"n": {n}}}'),)),
        ToolResults((ToolResult(f"c{n}", f"contents {n} " + "line of code; " * 70,
                                "read_file"),)),
        ChatMessage.assistant(f"answer {n}: " + "the file defines a helper " * 5),
    ]


class InstantSummarizer:
    """Returns at once; counts the messages it is handed and the time spent inside it."""

    summarizer_name = "instant-v1"

    def __init__(self) -> None:
        self.handed: list[int] = []
        self.seconds = 0.0

    def __call__(self, turns: Sequence[ChatMessage], previous: str | None) -> str:
        started = time.perf_counter()
        self.handed.append(len(turns))
        text = f"{len(self.handed)} summaries so far; the last covered {len(turns)} messages"
        self.seconds += time.perf_counter() - started
        return text


class Side:
    """One session of ``turns`` turns in ``store``, ready to take one more turn per decision."""

    def __init__(self, store: tl.Store, kind: str, turns: int, budget: int) -> None:
        compaction = Compaction(clear_tool_results=True, keep_tool_result_turns=3) \
            if kind == "clearing" else Compaction()
        profile = RuntimeProfile(max_context_tokens=budget, compaction=compaction)
        self.kind = kind
        self.summarizer = tl.Summarizer("instant-v1", InstantSummarizer(), timeout=None) \
            if kind == "summary" else None
        self.session = store.start_session(profile)
        self.session.append(ChatMessage.system("You are a coding agent."))
        batch: list[ConversationMessage | ChatMessage] = []
        for n in range(turns):
            batch += turn(n)
            if len(batch) >= BUILD_BATCH:
                self.session.extend(batch)
                batch = []
        if batch:
            self.session.extend(batch)
        self.next = turns
        self.session.prepare_request(summarizer=self.summarizer)  # the first trim: setup
        self.times: list[float] = []
        self.start_counting()

    def start_counting(self) -> None:
        """What `recorded` reports begins here (after the set-up and warm-up decisions)."""
        self.times.clear()
        self.handed_from = len(self._instant.handed) if self._instant else 0
        self.from_version = self.session.version

    @property
    def _instant(self) -> InstantSummarizer | None:
        if self.summarizer is None:
            return None
        summarize = self.summarizer.summarize
        assert isinstance(summarize, InstantSummarizer)
        return summarize

    def decide(self) -> None:
        """One more turn (not timed), then one timed decision."""
        self.session.extend(turn(self.next))
        self.next += 1
        instant = self._instant
        inside = instant.seconds if instant else 0.0
        started = time.perf_counter()
        self.session.prepare_request(summarizer=self.summarizer)
        spent = time.perf_counter() - started
        self.times.append(spent - ((instant.seconds - inside) if instant else 0.0))

    def recorded(self) -> dict[str, Any]:
        """What the measured decisions recorded, and what the summarizer was handed."""
        events = self.session.events(after_version=self.from_version)
        decisions = sum(isinstance(e, RequestPrepared) for e in events)
        instant = self._instant
        handed = instant.handed[self.handed_from:] if instant else []
        return {
            "decisions": decisions,
            "chat_trims": sum(isinstance(e, TrimDecided) and e.view is View.CHAT
                              for e in events),
            "summaries": sum(isinstance(e, TurnsSummarized) for e in events),
            "clearings": sum(isinstance(e, ToolResultsCleared) for e in events),
            "summarizer_calls": len(handed) if instant else None,
            "summarizer_messages_per_decision": (
                round(sum(handed) / decisions, 2) if instant and decisions else None),
            "summarizer_messages_max": max(handed) if handed else None,
            "window_messages": len(self.session.chat_view()),
        }


def measure(backend: str, turns: int, decisions: int, budget: int, folder: Path) -> list[
        dict[str, Any]]:
    """Every side on a session of ``turns`` turns, ``decisions`` decisions each, interleaved."""
    url = "memory://" if backend == "memory" else (
        f"sqlite:///{folder / f'compaction-{turns}.db'}?synchronous=normal")
    built = time.perf_counter()
    with tl.open_store(url) as store:
        sides = [Side(store, kind, turns, budget) for kind in SIDES]
        print(f"  {backend}, {turns} turns: built in {time.perf_counter() - built:.1f} s",
              flush=True)
        for side in sides:
            for _ in range(WARM):
                side.decide()
            side.start_counting()
        for _ in range(decisions):
            for side in sides:
                side.decide()
        rows = [{"backend": backend, "turns": turns, "side": side.kind,
                 "us_per_decision": round(statistics.median(side.times) * 1e6, 1),
                 **side.recorded()} for side in sides]
    plain = next(r for r in rows if r["side"] == "plain")["us_per_decision"]
    for row in rows:
        row["vs_plain"] = round(row["us_per_decision"] / plain, 2)
    return rows


def add_growth(rows: list[dict[str, Any]]) -> None:
    """Each row's cost over the same side's at the shortest session (1 = flat)."""
    for row in rows:
        first = min((r for r in rows if r["backend"] == row["backend"]
                     and r["side"] == row["side"]), key=lambda r: r["turns"])
        row["vs_shortest"] = round(row["us_per_decision"] / first["us_per_decision"], 2)


COLUMNS = ["backend", "turns", "side", "us_per_decision", "vs_plain", "vs_shortest",
           "summarizer_messages_per_decision", "decisions", "chat_trims", "summaries", "clearings",
           "window_messages"]


def table(rows: Sequence[dict[str, Any]]) -> str:
    cells = [[("-" if row[c] is None else str(row[c])) for c in COLUMNS] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", default=None,
                        help="session lengths, comma-separated (default 100,1000,10000)")
    parser.add_argument("--decisions", type=int, default=None,
                        help="timed decisions per side and session (default 100; quick 30)")
    parser.add_argument("--budget", type=int, default=8_000, help="max_context_tokens")
    parser.add_argument("--backends", default="memory,sqlite",
                        help="memory and/or sqlite, comma-separated")
    parser.add_argument("--quick", action="store_true",
                        help="100 and 1,000 turns, 30 decisions: a short check")
    parser.add_argument("--output", type=Path, default=RESULTS, help="JSON results file")
    args = parser.parse_args(argv)
    turns = args.turns or ("100,1000" if args.quick else "100,1000,10000")
    decisions = args.decisions or (30 if args.quick else 100)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            for n in (int(t) for t in turns.split(",")):
                rows.extend(measure(backend, n, decisions, args.budget, Path(tmp)))
    add_growth(rows)
    print("\nPer decision (median µs; the summarizer's own time taken off; vs_plain: over the "
          "breadcrumb trim in the same run; vs_shortest: over the same side at the shortest "
          "session)")
    print(table(rows))
    report = {"benchmark": "compaction", "python": sys.version.split()[0],
              "platform": platform.platform(), "cpus": os.cpu_count(),
              "budget_tokens": args.budget, "decisions": decisions, "quick": args.quick,
              "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
