"""Benchmark: ``prepare_request`` on SQLite against LangChain ``trim_messages`` (issue 12.5).

A session of ``--turns`` agent turns (default 100; `benchmarks.session.Workload`) under the
default profile (turn limit 50, a 32,000-token budget) is built in a SQLite file; then each
variant times ``--calls`` calls of ``prepare_request`` in its own child process, rounds
interleaved with LangChain's ``trim_messages`` on the same history (``max_tokens=32000``,
``strategy="last"``, UTF-8 bytes / 4 as the token counter, timed in this process):

- ``ours, synchronous=full``: the default durability (one fsync per recorded request);
- ``ours, synchronous=normal``: ADR-0037's option;
- ``before`` (``--before PATH``): the tree at PATH (first on ``PYTHONPATH``), default URL.

Run from the project root::

    .venv/bin/python -m benchmarks.prepare_sqlite [--turns 100] [--rounds 7] [--before PATH]

Prints the medians and the speed relative to ``trim_messages``; writes
``benchmarks/results/prepare_sqlite.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "prepare_sqlite.json"
ROOT = Path(__file__).resolve().parent.parent


def _child(path: Path, session_id: str, option: str, calls: int) -> None:
    from turnledger.store.session import open_store

    with open_store(f"sqlite:///{path}{option}") as store:
        session = store.restore(session_id)
        session.prepare_request()
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            session.prepare_request()
            times.append(time.perf_counter() - started)
    print(json.dumps({"median": statistics.median(times)}))


def _build(path: Path, turns: int) -> tuple[str, list[Any]]:
    from benchmarks.peers import _langchain_messages, _turns
    from turnledger.store.session import open_store

    history = _turns(turns)
    with open_store(f"sqlite:///{path}?synchronous=normal") as store:
        session = store.start_session()
        for turn in history:
            for message in turn:
                session.append(message)
            session.prepare_request()
        return session.id, _langchain_messages(history)


def _run_child(tree: Path | None, path: Path, session_id: str, option: str,
               calls: int) -> float:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*([str(tree)] if tree else []), str(ROOT)])
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", str(path), session_id,
         option, str(calls)],
        env=env, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir(),
    )
    median: float = json.loads(done.stdout.strip().splitlines()[-1])["median"]
    return median


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(Path(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--before", type=Path, help="a tree to time as 'before'")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    from benchmarks.peers import _trim

    variants: dict[str, tuple[Path | None, str]] = {
        "ours, synchronous=full": (None, ""),
        "ours, synchronous=normal": (None, "?synchronous=normal"),
    }
    if args.before:
        variants["before (synchronous=full)"] = (args.before, "")
    medians: dict[str, list[float]] = {name: [] for name in [*variants, "trim_messages"]}
    with tempfile.TemporaryDirectory() as tmp:
        built = Path(tmp) / "built.db"
        session_id, messages = _build(built, args.turns)
        copies = {}
        for i, name in enumerate(variants):  # one file each: every call records an event
            copies[name] = Path(tmp) / f"v{i}.db"
            for suffix in ("", "-wal"):
                if Path(f"{built}{suffix}").exists():
                    shutil.copy(f"{built}{suffix}", f"{copies[name]}{suffix}")
        for _ in range(args.rounds):
            for name, (tree, option) in variants.items():
                medians[name].append(
                    _run_child(tree, copies[name], session_id, option, args.calls))
            times = []
            for _ in range(args.calls):
                started = time.perf_counter()
                _trim(messages)
                times.append(time.perf_counter() - started)
            medians["trim_messages"].append(statistics.median(times))
    trim = statistics.median(medians["trim_messages"])
    rows = [{"variant": name, "median_us": round(statistics.median(values) * 1e6, 1),
             "speed_vs_trim_messages": round(trim / statistics.median(values), 2)}
            for name, values in medians.items()]
    print(f"\nprepare_request on SQLite, {args.turns} turns, 32k budget (median of "
          f"{args.rounds} interleaved rounds of {args.calls} calls)")
    width = max(len(r["variant"]) for r in rows)
    print(f"{'variant':<{width}}  median_us  speed_vs_trim_messages")
    for r in rows:
        print(f"{r['variant']:<{width}}  {r['median_us']:>9}  {r['speed_vs_trim_messages']:>6}")
    report = {"benchmark": "prepare_sqlite", "python": sys.version.split()[0],
              "platform": platform.platform(), "cpus": os.cpu_count(), "turns": args.turns,
              "before": str(args.before) if args.before else None, "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
