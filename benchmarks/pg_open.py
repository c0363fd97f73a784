"""Benchmark: opening (and closing) a PostgreSQL store whose tables exist (issue 12, point 3).

Each round runs one child process per tree (ours, and ``--before PATH`` first on
``PYTHONPATH``), interleaved; a child opens the store once (imports, tables), then times
``open_store(url).close()`` ten times with the default pool settings and prints the median;
the ``ours, pool=shared`` row opens with ``&pool=shared`` (one pool per process, ADR-0084);
the ``floor`` row times a bare ``psycopg.connect``, ``SELECT 1`` and close (ADR-0089).
The table gives the median of the rounds' medians in milliseconds.

Run from the project root::

    .venv/bin/python -m benchmarks.pg_open [--rounds 5] [--before PATH]

Writes ``benchmarks/results/pg_open.json``; the schema ``bench_open_*`` is dropped at the end.
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

RESULTS = Path(__file__).parent / "results" / "pg_open.json"
ROOT = Path(__file__).resolve().parent.parent
CHILD = """
import statistics, sys, time
from turnledger.store.session import open_store
url = sys.argv[1]
open_store(url).close()
times = []
for _ in range(10):
    started = time.perf_counter()
    open_store(url).close()
    times.append(time.perf_counter() - started)
print(statistics.median(times) * 1000)
"""
FLOOR = """
import statistics, sys, time
import psycopg
conninfo = sys.argv[1]
psycopg.connect(conninfo).close()
times = []
for _ in range(10):
    started = time.perf_counter()
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute("SELECT 1").fetchall()
    times.append(time.perf_counter() - started)
print(statistics.median(times) * 1000)
"""
"""The ``floor`` row: a bare psycopg connection, one query, closed: what an open on a
connection of its own cannot go below (ADR-0089)."""
SHARED = "&pool=shared"
"""The URL option of the ``ours, pool=shared`` row (ADR-0084): every open after the first
reuses the process's pool."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=Path, help="a tree to time as 'before'")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    schema = f"bench_open_{os.getpid()}"
    url = f"postgresql://postgres@127.0.0.1:5432/test?schema={schema}"
    trees = {"ours": ROOT, "ours, pool=shared": ROOT,
             **({"before": args.before} if args.before else {}), "floor": ROOT}
    medians: dict[str, list[float]] = {name: [] for name in trees}
    try:
        for _ in range(args.rounds):
            for name, tree in trees.items():
                command = (
                    [FLOOR, "host=127.0.0.1 port=5432 user=postgres dbname=test"]
                    if name == "floor" else [CHILD, url + (SHARED if "shared" in name else "")]
                )
                done = subprocess.run(
                    [sys.executable, "-c", *command],
                    capture_output=True, text=True,
                    check=True, cwd=tempfile.gettempdir(),
                    env={**os.environ, "PYTHONPATH": str(tree)},
                )
                medians[name].append(float(done.stdout.strip().splitlines()[-1]))
    finally:
        import psycopg

        with psycopg.connect("host=127.0.0.1 user=postgres dbname=test",
                             autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    rows = [{"tree": name, "open_close_ms": round(statistics.median(values), 1),
             "rounds_ms": [round(v, 1) for v in values]} for name, values in medians.items()]
    print("open_store(url).close() on an existing PostgreSQL store, default pool (median ms);"
          " floor: psycopg.connect + SELECT 1 + close")
    for row in rows:
        print(f"  {row['tree']:<18} {row['open_close_ms']:>8}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"benchmark": "pg_open", "rows": rows}, indent=2) + "\n",
                           encoding="utf-8")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
