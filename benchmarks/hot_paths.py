"""The per-call paths of a live session, before and after a change, interleaved (issue 34).

    .venv/bin/python -m benchmarks.hot_paths [--before PATH] [--rounds 4] [--calls 300]

Each round runs one child process per tree (``--before`` names a checkout of an older commit,
e.g. ``git worktree add /tmp/base <commit>``; its own package is imported through PYTHONPATH),
the trees alternating so that load on the machine weighs on both alike. A child builds a
100-turn tool-using session on ``memory://`` under an 8,000-token budget, then times with the
thread's CPU clock: ``prepare_request`` after a user message and after a tool result (the
trims they decide included), and plain appends. Prints the medians and after/before ratios;
writes ``benchmarks/results/hot_paths.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "hot_paths.json"

CHILD = r'''
import json, statistics, sys, time
import turnledger as tl
from turnledger.domain.messages import (
    AssistantToolCalls, ChatMessage, ToolCall, ToolResult, ToolResults)

calls = int(sys.argv[1])
store = tl.open_store("memory://")
session = store.start_session(tl.RuntimeProfile(max_context_tokens=8000))
session.append(ChatMessage("system", "You are an agent. " * 20))

def turn(n, prepare):
    times = []
    session.append(ChatMessage("user", f"question {n} " + "x" * 300))
    if prepare:
        start = time.thread_time_ns()
        session.prepare_request()
        times.append(time.thread_time_ns() - start)
    session.append(AssistantToolCalls("Looking.", (ToolCall(f"c{n}", "search", '{"q": 1}'),)))
    session.append(ToolResults((ToolResult(f"c{n}", "y" * 1500, "search"),)))
    if prepare:
        start = time.thread_time_ns()
        session.prepare_request()
        times.append(time.thread_time_ns() - start)
    session.append(ChatMessage("assistant", f"answer {n} " + "z" * 200))
    return times

for n in range(100):
    turn(n, prepare=False)
prepare = [t for n in range(calls) for t in turn(100 + n, prepare=True)]
start = time.thread_time_ns()
for n in range(calls):
    session.append(ChatMessage("user", "u" * 200))
    session.append(ChatMessage("assistant", "a" * 200))
append = (time.thread_time_ns() - start) / (2 * calls)
print(json.dumps({"prepare_us": statistics.median(prepare) / 1e3, "append_us": append / 1e3}))
'''


def _child(tree: Path, calls: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(calls)], cwd=tree, env=env,
                         check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="a checkout to time as 'before'")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    trees = {"after": ROOT} if args.before is None else {"before": args.before.resolve(),
                                                         "after": ROOT}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_ in range(1, args.rounds + 1):
        for name, tree in trees.items():
            runs[name].append(_child(tree, args.calls))
            print(f"round {round_} {name:<6} {runs[name][-1]}", flush=True)
    rows = []
    for what in ("prepare_us", "append_us"):
        row: dict[str, object] = {"what": what}
        for name in trees:
            row[name] = round(statistics.median(r[what] for r in runs[name]), 1)
        if "before" in trees:
            after, before = float(str(row["after"])), float(str(row["before"]))
            row["ratio_after_over_before"] = round(after / before, 2)
        rows.append(row)
    ratio = "     ratio" if args.before else ""
    print(f"\n{'what':<12}" + "".join(f"{name:>10}" for name in trees) + ratio)
    for row in rows:
        line = f"{row['what']:<12}" + "".join(f"{row[name]:>10}" for name in trees)
        print(line + (f"{row['ratio_after_over_before']:>10}" if args.before else ""))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"command": " ".join(sys.argv), "rounds": args.rounds,
                                       "calls": args.calls, "rows": rows, "runs": runs},
                                      indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
