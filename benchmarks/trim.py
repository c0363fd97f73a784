"""Benchmark: `trim_to_recent_turns` (prefix sums) against the naive quadratic baseline.

Builds realistic agent histories (a system prompt, then turns with tool loops: assistant tool-call
envelopes, tool results of a few KB, some images, ``[Tool results]`` carriers, rare late system
messages) of about 1k, 10k and 100k messages, sets the budget to 5 % of the estimate so that most
turns are dropped, and measures the median wall time of both algorithms (`time.perf_counter`).

The naive algorithm re-estimates one whole candidate per dropped turn. When it cannot finish
within ``--naive-budget`` seconds it is stopped and its time is *extrapolated* from its measured
cost per estimated message times the number of messages the full run would estimate (known in
closed form from the turn boundaries); the table says so. Both results are compared whenever the
naive run finishes; otherwise the naive rule is checked on the two decisive candidates (the
result fits, or one turn is left; keeping one more turn would not fit).

Run from the project root: ``.venv/bin/python -m benchmarks.trim``. Writes
``benchmarks/results/trim.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.naive import NaiveTimeout, naive_candidate, naive_trim_to_recent_turns
from turnledger.domain.estimate import estimate_history_tokens
from turnledger.domain.messages import (
    TOOL_RESULTS_PREFIX,
    ChatMessage,
    ToolCall,
    assistant_envelope,
    tool_envelope,
)
from turnledger.domain.trimming import TrimResult, trim_to_recent_turns
from turnledger.domain.turns import segment

RESULTS = Path(__file__).parent / "results" / "trim.json"
BUDGET_FRACTION = 0.05

# Mostly ASCII with some multi-byte words, so both byte-count paths of the estimate are used.
_WORDS = (
    "the", "agent", "reads", "the", "file", "and", "runs", "tests", "then", "fixes", "a",
    "failing", "case", "résumé", "café", "naïve", "déjà", "vu", "—", "ok", "✓", "def",
    "main():", "return", "0", "#", "TODO:", "handle", "error", "path", "retry", "backoff",
)  # fmt: skip


def _text_pool(rng: random.Random, size: int = 200_000) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def build_history(n_messages: int, seed: int = 20_240_601) -> list[ChatMessage]:
    """A realistic history of at least ``n_messages`` messages, ending on a whole turn."""
    rng = random.Random(seed)
    pool = _text_pool(rng)

    def text(lo: int, hi: int) -> str:
        size = rng.randint(lo, hi)
        start = rng.randrange(0, len(pool) - size)
        return pool[start : start + size]

    history = [ChatMessage.system("You are a coding agent. " + text(1500, 2500))]
    call_no = 0
    while len(history) < n_messages:
        prompt = text(80, 600)
        if rng.random() < 0.05:
            prompt += f" [IMAGE:/uploads/screenshot_{len(history)}.png]"
        history.append(ChatMessage.user(prompt))
        for _ in range(rng.choice((0, 1, 1, 2, 2, 3))):
            calls = []
            for _ in range(rng.choice((1, 1, 2))):
                call_no += 1
                args = json.dumps({"path": f"src/mod_{call_no}.py", "query": text(10, 120)})
                calls.append(ToolCall(f"call_{call_no}", rng.choice(("read", "shell")), args))
            history.append(ChatMessage.assistant(assistant_envelope(text(0, 200) or None, calls)))
            for call in calls:
                attachments = (f"/tmp/plot_{call.id}.png",) if rng.random() < 0.03 else ()
                content = tool_envelope(call.id, text(200, 4000))
                history.append(ChatMessage.tool(content, attachments))
            if rng.random() < 0.05:
                history.append(ChatMessage.user(f"{TOOL_RESULTS_PREFIX} {text(50, 300)}"))
        if rng.random() < 0.01:
            history.append(ChatMessage.system("Reminder: " + text(50, 200)))
        history.append(ChatMessage.assistant(text(100, 1500)))
    return history


def _median_ms(run: Callable[[], object], repeats: int, time_budget: float) -> tuple[float, int]:
    """Median of up to ``repeats`` timed runs, stopping early once ``time_budget`` is spent."""
    times: list[float] = []
    spent = 0.0
    while len(times) < repeats and (not times or spent < time_budget):
        start = time.perf_counter()
        run()
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        spent += elapsed
    return statistics.median(times) * 1000, len(times)


def _naive_messages_estimated(history: Sequence[ChatMessage], dropped_turns: int) -> int:
    """Messages the naive run estimates on its way to ``dropped_turns`` (excluding the input)."""
    seg = segment(history)
    n = len(history)
    total = 0
    late = 0  # late systems of the dropped region are kept in every candidate
    region_start = seg.leading_end
    for k in range(1, dropped_turns + 1):
        first_kept = seg.turn_starts[k]
        late += sum(1 for m in history[region_start:first_kept] if m.role == "system")
        region_start = first_kept
        total += seg.leading_end + late + 1 + (n - first_kept)
    return total


def _check_naive_rule(
    history: Sequence[ChatMessage], budget: int, ours: TrimResult[ChatMessage]
) -> None:
    """The naive rule on its two decisive candidates (used when the naive run is stopped)."""
    seg = segment(history)
    k = ours.dropped_turns
    candidate, dropped = naive_candidate(history, k, seg=seg)
    tokens = estimate_history_tokens(candidate)
    assert (tuple(candidate), dropped, tokens) == (
        ours.history,
        ours.dropped_messages,
        ours.tokens_after,
    ), "ours differs from the naive candidate"
    assert tokens <= budget or k == seg.turn_count - 1, "ours does not fit the budget"
    if k > 1:
        fewer, _ = naive_candidate(history, k - 1, seg=seg)
        assert estimate_history_tokens(fewer) > budget, "ours dropped more turns than needed"


def bench_size(n_messages: int, naive_budget: float) -> dict[str, Any]:
    """Time both algorithms on one history size and check they agree."""
    history = build_history(n_messages)
    estimate = estimate_history_tokens(history)
    budget = int(estimate * BUDGET_FRACTION)
    ours = trim_to_recent_turns(history, budget)
    repeats = 7 if len(history) <= 20_000 else 5
    ours_ms, ours_runs = _median_ms(lambda: trim_to_recent_turns(history, budget), repeats, 30.0)

    naive_measured = True
    deadline = time.perf_counter() + naive_budget
    try:
        naive = naive_trim_to_recent_turns(history, budget, deadline=deadline)
    except NaiveTimeout as stopped:
        naive_measured = False
        per_message = stopped.elapsed / stopped.messages_estimated
        full = len(history) + _naive_messages_estimated(history, ours.dropped_turns)
        naive_ms = per_message * full * 1000
        naive_runs = 0
        _check_naive_rule(history, budget, ours)
        agreement = "naive rule checked on the decisive candidates (naive run stopped)"
    else:
        assert naive == ours, "ours and naive disagree"
        agreement = "identical TrimResult"
        naive_ms, naive_runs = _median_ms(
            lambda: naive_trim_to_recent_turns(history, budget), 5, naive_budget
        )
    return {
        "messages": len(history),
        "turns": ours.kept_turns + ours.dropped_turns,
        "estimate_tokens": estimate,
        "budget_tokens": budget,
        "dropped_turns": ours.dropped_turns,
        "tokens_after": ours.tokens_after,
        "ours_ms": round(ours_ms, 3),
        "ours_runs": ours_runs,
        "naive_ms": round(naive_ms, 3),
        "naive_runs": naive_runs,
        "naive_measured": naive_measured,
        "ratio": round(naive_ms / ours_ms, 1),
        "agreement": agreement,
    }


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| messages | turns | dropped turns | ours ms | naive ms | ratio |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        naive = f"{row['naive_ms']:,.1f}" + ("" if row["naive_measured"] else " (extrapolated)")
        lines.append(
            f"| {row['messages']:,} | {row['turns']:,} | {row['dropped_turns']:,} "
            f"| {row['ours_ms']:,.1f} | {naive} | {row['ratio']:,.0f}x |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument(
        "--naive-budget",
        type=float,
        default=60.0,
        help="seconds the naive run may take per size before it is stopped and extrapolated",
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    rows = []
    for size in args.sizes:
        row = bench_size(size, args.naive_budget)
        rows.append(row)
        ours, naive = row["ours_ms"], row["naive_ms"]
        print(f"{size:>7,}: ours {ours:.1f} ms, naive {naive:.1f} ms", flush=True)
    print()
    print(_table(rows))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "trim_to_recent_turns vs naive re-estimation",
        "budget_fraction": BUDGET_FRACTION,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "rows": rows,
    }
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nwritten to {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
