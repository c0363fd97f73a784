"""Benchmark: writers of different sessions on one PostgreSQL store, table lock vs horizon.

Issue 23, points 1-2 (ADR-0083). For 1, 2, 4, 8 and 16 writer processes, each appending one
message per call to its own session of one store for ``--seconds``, in one run and
interleaved per writer count:

- ``lock``: ``log_order=lock``, the library's order (an EXCLUSIVE table lock and a NOTIFY in
  every insert transaction) — what every store did before;
- ``horizon``: the default, no table lock and no NOTIFY; followers read below the
  transaction-id horizon.

While the writers run, the parent samples ``pg_locks`` every 20 ms and counts the samples in
which at least one writer's backend waits for a lock (``NOT granted``): a writer waiting on
another session's lock (the writers share no session, so any wait is one writer on another).
It reports appends per second of all writers together, per writer, and that share.

Run from the project root::

    .venv/bin/python -m benchmarks.pg_order [--seconds 3] [--writers 1,2,4,8,16]

Writes ``benchmarks/results/pg_order.json``; schemas ``bench_pgo_*`` are dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.pg_append import CONNINFO, PG, ROOT, _text, _wait

RESULTS = Path(__file__).parent / "results" / "pg_order.json"
ORDERS = ("lock", "horizon")
SAMPLE_EVERY = 0.02


def _child(schema: str, order: str, seconds: float, start_at: float, ready: Path) -> int:
    from turnledger import RuntimeProfile
    from turnledger.domain.messages import ChatMessage
    from turnledger.store.session import open_store

    store = open_store(f"{PG}?schema={schema}&pool_size=1&log_order={order}")
    session = store.start_session(RuntimeProfile(max_history_messages=10**9))
    with store.backend.recorder.datastore.get_connection() as conn:  # type: ignore[attr-defined]
        ready.write_text(str(conn.info.backend_pid))  # the pool's one connection
    _wait(start_at)
    began = time.time()
    count = 0
    while time.time() - began < seconds:
        message = ChatMessage.user(_text(count)) if count % 2 == 0 else ChatMessage.assistant(
            _text(count))
        session.append(message)
        count += 1
    ended = time.time()
    store.close()
    print(json.dumps({"appends": count, "began": began, "ended": ended}))
    return 0


class _Sampler(threading.Thread):
    """Samples pg_locks: how often at least one of ``pids`` waits for a lock."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.samples = 0
        self.waiting = 0
        self.waiters = 0
        self.stop = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(CONNINFO, autocommit=True) as conn:
            while not self.stop.is_set():
                row = conn.execute(
                    "SELECT count(DISTINCT pid) FROM pg_locks WHERE NOT granted AND pid = ANY(%s)",
                    (self.pids,), prepare=True,
                ).fetchone()
                waiting = int(row[0]) if row else 0
                self.samples += 1
                self.waiting += waiting > 0
                self.waiters += waiting
                self.stop.wait(SAMPLE_EVERY)


def _run(schema: str, order: str, writers: int, seconds: float) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="pgo"))
    start_at = time.time() + 2.0 + 0.2 * writers  # every child imported and connected
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    children = []
    for i in range(writers):
        ready = directory / f"{i}.pid"
        command = [sys.executable, "-m", "benchmarks.pg_order", "--child", "--schema", schema,
                   "--order", order, "--seconds", str(seconds), "--start-at", repr(start_at),
                   "--ready", str(ready)]
        children.append((subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                          cwd=ROOT), ready))
    while not all(ready.exists() and ready.read_text() for _, ready in children):
        if any(child.poll() is not None for child, _ in children):
            raise SystemExit(f"{order}: a writer failed before starting")
        time.sleep(0.05)
    sampler = _Sampler([int(ready.read_text()) for _, ready in children])
    _wait(start_at)
    sampler.start()
    outs = []
    for child, _ in children:
        stdout, _ = child.communicate(timeout=600)
        if child.returncode:
            raise SystemExit(f"{order}: a writer failed (exit {child.returncode})")
        outs.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    sampler.stop.set()
    sampler.join()
    wall = max(o["ended"] for o in outs) - min(o["began"] for o in outs)
    total = sum(o["appends"] for o in outs)
    return {
        "order": order, "writers": writers,
        "appends_per_second": round(total / wall, 1),
        "per_writer": round(total / wall / writers, 1),
        "samples": sampler.samples,
        "waiting_share": round(sampler.waiting / max(sampler.samples, 1), 3),
        "mean_waiting_writers": round(sampler.waiters / max(sampler.samples, 1), 2),
    }


def _setup() -> dict[str, str]:
    from turnledger.store.session import open_store

    tag = f"bench_pgo_{os.getpid()}"
    schemas = {order: f"{tag}_{order}" for order in ORDERS}
    for order, schema in schemas.items():
        open_store(f"{PG}?schema={schema}&log_order={order}").close()  # the tables
    return schemas


def _drop(schemas: dict[str, str]) -> None:
    import psycopg

    with psycopg.connect(CONNINFO, autocommit=True) as conn:
        for schema in schemas.values():
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _table(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| writers | lock: appends/s | lock: per writer | lock: waiting | "
             "horizon: appends/s | horizon: per writer | horizon: waiting | horizon / lock |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by = {(r["order"], r["writers"]): r for r in rows}
    for writers in sorted({r["writers"] for r in rows}):
        lock, horizon = by[("lock", writers)], by[("horizon", writers)]
        lines.append(
            f"| {writers} | {lock['appends_per_second']:,.0f} | {lock['per_writer']:,.0f} | "
            f"{lock['waiting_share']:.0%} | {horizon['appends_per_second']:,.0f} | "
            f"{horizon['per_writer']:,.0f} | {horizon['waiting_share']:.0%} | "
            f"{horizon['appends_per_second'] / lock['appends_per_second']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0, help="appending time per run")
    parser.add_argument("--writers", default="1,2,4,8,16", help="writer counts, comma-separated")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    parser.add_argument("--order", choices=ORDERS, help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--ready", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.schema, args.order, args.seconds, args.start_at, args.ready)
    schemas = _setup()
    rows = []
    try:
        for writers in (int(w) for w in args.writers.split(",")):
            for order in ORDERS:
                rows.append(_run(schemas[order], order, writers, args.seconds))
                r = rows[-1]
                print(f"  {writers:>2} writers, {order:<7}: {r['appends_per_second']:>7}/s, "
                      f"waiting in {r['waiting_share']:.0%} of {r['samples']} samples",
                      flush=True)
    finally:
        _drop(schemas)
    print(_table(rows))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "seconds": args.seconds, "rows": rows,
    }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
