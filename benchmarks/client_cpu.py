"""Benchmark: the client's own CPU per call (issue 23, point 3).

Per backend (``memory://``, SQLite with ``synchronous=full``, PostgreSQL), the client CPU of a
single-message ``Session.append`` (turn limit 10^9: one event, one transaction per append),
measured with ``time.thread_time()`` in the calling thread (what the server and the disk do is
not counted; wall time is printed beside it); and the CPU of ``prepare_request`` on a memory
store with an 8,000- and a 32,000-token budget at 100 and 10,000 turns (the two calls of each
of the last turns, as an agent loop makes them; they record their events).

Each tree (ours, and ``--before PATH`` first on ``PYTHONPATH``) runs in its own child
process, rounds interleaved; the table gives the median of the rounds' medians in
microseconds. Run from the project root::

    .venv/bin/python -m benchmarks.client_cpu [--rounds 3] [--before PATH] [--no-postgres]

Writes ``benchmarks/results/client_cpu.json``; the schemas ``bench_cpu_*`` are dropped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "client_cpu.json"
ROOT = Path(__file__).resolve().parent.parent
PG = "postgresql://postgres@127.0.0.1:5432/test"

CHILD = r"""
import json, os, statistics, sys, tempfile, time
sys.path.append(sys.argv[2])  # benchmarks.session, when the tree on PYTHONPATH has none
from benchmarks.session import Workload
from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.messages import Chat, ChatMessage
from turnledger.store.session import open_store

what, root, arg = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
if what == "append":
    profile = RuntimeProfile(max_history_messages=10**9)
    with open_store(arg) as store:
        session = store.start_session(profile=profile)
        texts = [f"message {i}: " + "the quick brown fox jumps over the lazy dog. " * (2 + i % 19)
                 for i in range(400)]
        for t in texts[:50]:
            session.append(Chat(ChatMessage.user(t)))
        cpu, wall = [], []
        for t in texts[50:]:
            w0, c0 = time.perf_counter(), time.thread_time()
            session.append(Chat(ChatMessage.user(t)))
            cpu.append(time.thread_time() - c0); wall.append(time.perf_counter() - w0)
        out = {"cpu_us": statistics.median(cpu) * 1e6, "wall_us": statistics.median(wall) * 1e6}
else:
    budget, turns = (int(x) for x in arg.split(":"))
    profile = RuntimeProfile(max_context_tokens=budget) if budget != 32000 else RuntimeProfile()
    workload = Workload(seed=12)
    with open_store("memory://") as store:
        session = store.start_session(profile=profile)
        for i in range(turns - 20):
            for m in workload.turn(i):
                session.append(m)
            session.prepare_request()
        cpu = []
        for i in range(turns - 20, turns):
            user, calls, results, answer = workload.turn(i)
            for batch in ((user,), (calls, results)):
                for m in batch:
                    session.append(m)
                c0 = time.thread_time()
                session.prepare_request()
                cpu.append(time.thread_time() - c0)
            session.append(answer)
        out = {"cpu_us": statistics.median(cpu) * 1e6}
print(json.dumps(out))
"""


def main(argv: Sequence[str] | None = None) -> int:  # noqa: C901  (one flat script)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a tree to time as 'before'")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--prepare-turns", default="100,10000")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    trees = {**({"before": args.before} if args.before else {}), "ours": ROOT}
    cases: list[tuple[str, str, str]] = [("append", "memory", "memory://"),
                                         ("append", "sqlite (full)", "")]
    schemas: list[str] = []
    if not args.no_postgres:
        cases.append(("append", "postgresql", ""))
    for turns in args.prepare_turns.split(","):
        for budget in (8000, 32000):
            cases.append(("prepare", f"prepare_request memory {budget // 1000}k {turns} turns",
                          f"{budget}:{turns}"))
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for what, label, arg in cases:
                for name, tree in trees.items():
                    if label.startswith("sqlite"):
                        arg = f"sqlite:///{tmp}/{name}-{r}.db?synchronous=full"
                    elif label == "postgresql":
                        schema = f"bench_cpu_{os.getpid()}_{name}_{r}"
                        schemas.append(schema)
                        arg = f"{PG}?schema={schema}"
                    done = subprocess.run(
                        [sys.executable, "-c", CHILD, what, str(ROOT), arg],
                        capture_output=True, text=True, check=False, cwd=tmp,
                        env={**os.environ, "PYTHONPATH": str(tree)},
                    )
                    if done.returncode:
                        print(done.stderr, file=sys.stderr)
                        raise SystemExit(1)
                    row = json.loads(done.stdout.strip().splitlines()[-1])
                    results.setdefault(label, {}).setdefault(name, []).append(row)
    if schemas:
        import psycopg

        with psycopg.connect("host=127.0.0.1 user=postgres dbname=test",
                             autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    rows = []
    print("client CPU per call, µs (median of rounds; thread_time in the caller)")
    for label, per_tree in results.items():
        row: dict[str, object] = {"case": label}
        for name, values in per_tree.items():
            row[f"{name}_cpu_us"] = round(statistics.median(v["cpu_us"] for v in values), 1)
            if "wall_us" in values[0]:
                row[f"{name}_wall_us"] = round(statistics.median(v["wall_us"] for v in values), 1)
        rows.append(row)
        print("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"benchmark": "client_cpu", "rows": rows}, indent=2)
                           + "\n", encoding="utf-8")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
