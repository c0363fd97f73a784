"""Benchmark: writers of different sessions on one PostgreSQL store, against raw INSERTs.

Issue 23 (ADR-0083, ADR-0089): the issue's table in one command. For 1, 2, 4, 8 and 16 writer
processes, each appending one message per call to its own session (its own originator id for
the raw sides) for ``--seconds``, in one run, the sides interleaved per writer count:

- ``horizon``: turnledger as it is, the default ``log_order=horizon`` (no table lock);
- ``lock``: ``log_order=lock``, the library's order (an EXCLUSIVE table lock and a NOTIFY in
  every insert transaction), what every store did before ADR-0083;
- ``raw``: psycopg alone, ``BEGIN; INSERT; COMMIT`` per append (the same commits) of the very
  topic and state bytes turnledger stored, into a table of the library's shape (uuid,
  version, topic, bytea, bigserial notification id, the same keys);
- ``raw + lock``: the same with the library's ``LOCK TABLE ... IN EXCLUSIVE MODE`` first;
- ``before`` (with ``--before PATH``): ``horizon`` from the tree at PATH.

While the writers run, the parent samples ``pg_locks`` every 20 ms and counts the samples in
which at least one writer's backend waits for a lock (``NOT granted``): the writers share no
session, so any wait is one writer on another. Each writer measures its own process CPU
(``time.process_time``) over its appends: the client CPU per append. The load average is
printed with the table (other processes on the machine share its cores).

Run from the project root::

    .venv/bin/python -m benchmarks.pg_order [--seconds 3] [--writers 1,2,4,8,16] [--before PATH]

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
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.pg_append import CONNINFO, PG, ROOT, _text, _wait, raw_payloads_and_tables

RESULTS = Path(__file__).parent / "results" / "pg_order.json"
ORDERS = ("lock", "horizon")
SIDES = ("horizon", "lock", "raw", "raw + lock", "before")
SAMPLE_EVERY = 0.02


def _child(schema: str, side: str, seconds: float, start_at: float, ready: Path,
           payloads: Path | None) -> int:
    if side.startswith("raw"):
        assert payloads is not None
        out = _child_raw(schema, side == "raw + lock", seconds, start_at, ready, payloads)
    else:
        out = _child_ours(schema, "lock" if side == "lock" else "horizon", seconds, start_at,
                          ready)
    print(json.dumps(out))
    return 0


def _child_ours(schema: str, order: str, seconds: float, start_at: float,
                ready: Path) -> dict[str, Any]:
    from turnledger import RuntimeProfile
    from turnledger.domain.messages import ChatMessage
    from turnledger.store.session import open_store

    store = open_store(f"{PG}?schema={schema}&pool_size=1&log_order={order}")
    session = store.start_session(RuntimeProfile(max_history_messages=10**9))
    with store.backend.recorder.datastore.get_connection() as conn:  # type: ignore[attr-defined]
        ready.write_text(str(conn.info.backend_pid))  # the pool's one connection
    _wait(start_at)
    began, cpu = time.time(), time.process_time()
    count = 0
    while time.time() - began < seconds:
        message = ChatMessage.user(_text(count)) if count % 2 == 0 else ChatMessage.assistant(
            _text(count))
        session.append(message)
        count += 1
    ended, cpu = time.time(), time.process_time() - cpu
    store.close()
    return {"appends": count, "began": began, "ended": ended, "cpu": cpu}


def _child_raw(schema: str, lock: bool, seconds: float, start_at: float, ready: Path,
               payloads: Path) -> dict[str, Any]:
    import msgpack
    import psycopg

    records = msgpack.unpackb(payloads.read_bytes())
    originator = uuid.uuid4()
    with psycopg.connect(CONNINFO, autocommit=True) as conn:
        insert = (f'INSERT INTO "{schema}".raw_events (originator_id, originator_version, '
                  "topic, state) VALUES (%s, %s, %s, %s)")
        lock_sql = f'LOCK TABLE "{schema}".raw_events IN EXCLUSIVE MODE'
        ready.write_text(str(conn.info.backend_pid))
        _wait(start_at)
        began, cpu = time.time(), time.process_time()
        count = 0
        while time.time() - began < seconds:
            topic, state = records[count % len(records)]
            with conn.transaction():
                if lock:
                    conn.execute(lock_sql, prepare=True)
                conn.execute(insert, (originator, count + 1, topic, state), prepare=True)
            count += 1
        ended, cpu = time.time(), time.process_time() - cpu
    return {"appends": count, "began": began, "ended": ended, "cpu": cpu}


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


def _run(schema: str, side: str, writers: int, seconds: float, payloads: Path,
         before: Path | None) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="pgo"))
    start_at = time.time() + 2.0 + 0.25 * writers  # every child imported and connected
    # The child runs this file as a script from a directory of its own, so that ``before``
    # (first on the path) gives the turnledger package and nothing else is found in ROOT.
    path = [str(before)] if side == "before" and before else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*path, str(ROOT)]))
    children = []
    for i in range(writers):
        ready = directory / f"{i}.pid"
        command = [sys.executable, str(Path(__file__).resolve()), "--child", "--schema",
                   schema, "--side", side, "--seconds", str(seconds), "--start-at",
                   repr(start_at), "--ready", str(ready), "--payloads", str(payloads)]
        children.append((subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                          cwd=directory), ready))
    while not all(ready.exists() and ready.read_text() for _, ready in children):
        if any(child.poll() is not None for child, _ in children):
            raise SystemExit(f"{side}: a writer failed before starting")
        time.sleep(0.05)
    sampler = _Sampler([int(ready.read_text()) for _, ready in children])
    _wait(start_at)
    sampler.start()
    outs = []
    for child, _ in children:
        stdout, _ = child.communicate(timeout=600)
        if child.returncode:
            raise SystemExit(f"{side}: a writer failed (exit {child.returncode})")
        outs.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    sampler.stop.set()
    sampler.join()
    wall = max(o["ended"] for o in outs) - min(o["began"] for o in outs)
    total = sum(o["appends"] for o in outs)
    return {
        "side": side, "writers": writers,
        "appends_per_second": round(total / wall, 1),
        "per_writer": round(total / wall / writers, 1),
        "cpu_ms_per_append": round(sum(o["cpu"] for o in outs) / max(total, 1) * 1000, 3),
        "samples": sampler.samples,
        "waiting_share": round(sampler.waiting / max(sampler.samples, 1), 3),
        "mean_waiting_writers": round(sampler.waiters / max(sampler.samples, 1), 2),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _setup(sides: Sequence[str], payloads: Path) -> dict[str, str]:
    """A schema per side, its tables made before anything is timed; the raw sides' bytes:
    the topic and state of 40 messages turnledger stored."""

    from turnledger import RuntimeProfile
    from turnledger.domain.messages import ChatMessage
    from turnledger.store.session import open_store

    tag = f"bench_pgo_{os.getpid()}"
    schemas = {side: f"{tag}_{i}" for i, side in enumerate(sides)}
    for side, schema in schemas.items():
        if not side.startswith("raw"):
            order = "lock" if side == "lock" else "horizon"
            open_store(f"{PG}?schema={schema}&log_order={order}").close()  # the tables
    with open_store(f"{PG}?schema={schemas['horizon']}") as store:
        session = store.start_session(RuntimeProfile(max_history_messages=10**9))
        for i in range(40):
            session.append(ChatMessage.user(_text(i)) if i % 2 == 0
                           else ChatMessage.assistant(_text(i)))
    raw_payloads_and_tables(schemas, schemas["horizon"], session.id, payloads)
    return schemas


def _drop(schemas: dict[str, str]) -> None:
    import psycopg

    with psycopg.connect(CONNINFO, autocommit=True) as conn:
        for schema in schemas.values():
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _table(rows: Sequence[dict[str, Any]], sides: Sequence[str]) -> str:
    by = {(r["side"], r["writers"]): r for r in rows}
    head = ["writers", *(f"{side}: appends/s" for side in sides), "horizon / raw",
            "horizon: waiting", "lock: waiting",
            *(f"{side}: CPU ms/append" for side in sides if side != "raw + lock"),
            "load average (1 min)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for writers in sorted({r["writers"] for r in rows}):
        cells = [str(writers)]
        cells += [f"{by[(side, writers)]['appends_per_second']:,.0f}" for side in sides]
        cells.append(f"{by[('horizon', writers)]['appends_per_second'] / by[('raw', writers)]['appends_per_second']:.2f}x")  # noqa: E501
        cells += [f"{by[(side, writers)]['waiting_share']:.0%}" for side in ("horizon", "lock")]
        cells += [f"{by[(side, writers)]['cpu_ms_per_append']:.2f}" for side in sides
                  if side != "raw + lock"]
        loads = [by[(side, writers)]["load_average"][0] for side in sides]
        cells.append(f"{min(loads):.1f}-{max(loads):.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0, help="appending time per cell")
    parser.add_argument("--writers", default="1,2,4,8,16", help="writer counts, comma-separated")
    parser.add_argument("--before", type=Path, help="a tree to measure as 'before'")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--ready", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--payloads", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.schema, args.side, args.seconds, args.start_at, args.ready,
                      args.payloads)
    sides = [side for side in SIDES if side != "before" or args.before]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        payloads = Path(tmp) / "payloads.msgpack"
        schemas = _setup(sides, payloads)
        try:
            for writers in (int(w) for w in args.writers.split(",")):
                for side in sides:
                    rows.append(_run(schemas[side], side, writers, args.seconds, payloads,
                                     args.before))
                    r = rows[-1]
                    print(f"  {writers:>2} writers, {side:<10}: {r['appends_per_second']:>7}/s,"
                          f" {r['cpu_ms_per_append']:.2f} ms CPU/append, waiting in "
                          f"{r['waiting_share']:.0%} of {r['samples']} samples, load "
                          f"{r['load_average'][0]}", flush=True)
        finally:
            _drop(schemas)
    print(_table(rows, sides))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "seconds": args.seconds, "before": str(args.before) if args.before else None,
        "rows": rows,
    }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
