"""Benchmark: writers racing on ONE session through `retry_on_conflict` (issue 9, point 8).

``--writers`` processes (default 8), each with its own store object on the same session, start
together and append ``--appends`` messages each (default 200) through `retry_on_conflict`. Two
policies are run per backend:

- ``immediate x5``: ``attempts=5, base_delay=0, max_delay=0`` — the old behaviour (retry at
  once, 5 calls at most);
- ``defaults``: `retry_on_conflict`'s defaults (exponential backoff with full jitter, 30 s
  budget, no count limit).

For each: appends that gave up (the last `ConcurrencyConflict` propagated), attempts per
append, wall time and committed appends per second, and a check that every append that
returned is stored exactly once. SQLite (a file under a temporary directory) and PostgreSQL
(127.0.0.1:5432, user postgres, db test, a unique schema dropped afterwards).

Run from the project root: ``.venv/bin/python -m benchmarks.contention`` (``--no-postgres``
to skip PostgreSQL). Writes ``benchmarks/results/contention.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from turnledger.domain.errors import ConcurrencyConflict
from turnledger.domain.events import MessageAppended
from turnledger.domain.messages import Chat, ChatMessage
from turnledger.store.backend import retry_on_conflict
from turnledger.store.session import open_store

RESULTS = Path(__file__).parent / "results" / "contention.json"
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
POLICIES: dict[str, dict[str, Any]] = {
    "immediate x5": {"attempts": 5, "base_delay": 0.0, "max_delay": 0.0},
    "defaults": {},
}


def _writer(
    url: str, session_id: str, writer: int, appends: int, policy: dict[str, Any],
    barrier: Any, results: Any,
) -> None:
    """One writer process: restore, wait for the others, append; report its counts."""
    calls = 0

    def counted(fn: Callable[[], object]) -> Callable[[], object]:
        def call() -> object:
            nonlocal calls
            calls += 1
            return fn()
        return call

    ok: list[str] = []
    gave_up = 0
    with open_store(url) as store:
        session = store.restore(session_id)
        barrier.wait(timeout=60)
        started = time.perf_counter()
        for seq in range(appends):
            text = f"w{writer} #{seq}"
            try:
                retry_on_conflict(
                    counted(functools.partial(session.append, ChatMessage.user(text))), **policy
                )
                ok.append(text)
            except ConcurrencyConflict:
                gave_up += 1
        elapsed = time.perf_counter() - started
    results.put({"writer": writer, "ok": ok, "gave_up": gave_up, "calls": calls,
                 "seconds": elapsed})


def run_case(url: str, writers: int, appends: int, policy: dict[str, Any]) -> dict[str, Any]:
    """All writers on one fresh session of ``url``; the figures of this run."""
    with open_store(url) as store:
        session_id = store.start_session().id
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(writers + 1), context.Queue()
    processes = [
        context.Process(target=_writer,
                        args=(url, session_id, w, appends, policy, barrier, results))
        for w in range(writers)
    ]
    for process in processes:
        process.start()
    barrier.wait(timeout=120)
    started = time.perf_counter()
    reports = [results.get(timeout=900) for _ in processes]
    wall = time.perf_counter() - started
    for process in processes:
        process.join(timeout=60)
    with open_store(url) as store:
        stored = [
            e.message.message.content for e in store.events_of(session_id)
            if isinstance(e, MessageAppended) and isinstance(e.message, Chat)
        ]
    returned = sorted(text for r in reports for text in r["ok"])
    total = writers * appends
    gave_up = sum(r["gave_up"] for r in reports)
    return {
        "appends": total,
        "gave_up": gave_up,
        "gave_up_percent": round(100 * gave_up / total, 2),
        "attempts_per_append": round(sum(r["calls"] for r in reports) / total, 2),
        "wall_seconds": round(wall, 2),
        "committed_per_second": round(len(returned) / wall, 1),
        "stored_exactly_once": sorted(stored) == returned,
    }


@contextmanager
def _targets(tmp: Path, postgres: bool) -> Iterator[list[tuple[str, Callable[[], str]]]]:
    schemas: list[str] = []

    def sqlite_url() -> str:
        return f"sqlite:///{tmp / uuid.uuid4().hex / 'store.db'}"

    def pg_url() -> str:
        schemas.append(f"tl_bench_{uuid.uuid4().hex[:12]}")
        return f"{PG_URL}?schema={schemas[-1]}&pool_size=1&lock_timeout=30"

    kinds = [("SQLite", sqlite_url)] + ([("PostgreSQL", pg_url)] if postgres else [])
    try:
        yield kinds
    finally:
        if schemas:
            import psycopg

            with psycopg.connect("host=127.0.0.1 user=postgres dbname=test",
                                 autocommit=True) as connection:
                for schema in schemas:
                    connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _table(rows: Sequence[dict[str, Any]]) -> str:
    columns = ["backend", "policy", "appends", "gave_up", "gave_up_percent",
               "attempts_per_append", "wall_seconds", "committed_per_second",
               "stored_exactly_once"]
    cells = [[str(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--writers", type=int, default=8, help="writer processes (default 8)")
    parser.add_argument("--appends", type=int, default=200, help="appends per writer")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--policy", choices=sorted(POLICIES), help="run only this policy")
    parser.add_argument("--output", type=Path, default=RESULTS, help="JSON results file")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, _targets(Path(tmp), not args.no_postgres) as kinds:
        for backend, make_url in kinds:
            for name, policy in POLICIES.items():
                if args.policy not in (None, name):
                    continue
                figures = run_case(make_url(), args.writers, args.appends, policy)
                rows.append({"backend": backend, "policy": name, **figures})
                print(f"  {backend} {name}: {figures}", flush=True)
    print(f"\n{args.writers} writers x {args.appends} appends on ONE session "
          "(gave_up: the last ConcurrencyConflict propagated)")
    print(_table(rows))
    report = {
        "benchmark": "contention",
        "writers": args.writers,
        "appends_per_writer": args.appends,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
