"""Benchmark: a PostgreSQL append against the raw driver floor, and writers on many sessions.

Issue 12, point 3. Every measurement runs in its own child process (so a "before" tree can be
measured in the same run, interleaved, by putting it first on ``PYTHONPATH``):

- ``ours``: ``Session.append`` of one message per call (turn limit 10^9: one event, one
  transaction per append), through `open_store`'s PostgreSQL backend;
- ``ours, no table lock``: the same with the library's ``LOCK TABLE ... IN EXCLUSIVE MODE``
  removed from the insert (eventsourcing takes it so that notification ids commit in order;
  this row shows what that costs, it is not a setting);
- ``raw``: psycopg alone: ``BEGIN; INSERT`` of the very bytes ``ours`` stored (topic and
  state column, read back from its table) into a table of the same shape (uuid, version,
  topic, bytea, bigserial notification id, the same primary key and index); ``COMMIT``;
- ``raw + table lock``: the same with the library's ``LOCK TABLE`` first;
- ``before`` (with ``--before PATH``): ``ours`` from the tree at PATH.

Durability is the same on every side: the server's default ``synchronous_commit = on``, one
commit per append. Part 1 gives the median microseconds per append with one writer (rounds
interleaved, the median of the rounds) and the ratio to ``raw``. Part 2 starts 1, 2, 4 and 8
writer processes together, each on its own session (its own originator id for ``raw``), and
gives the appends per second of all of them together. Part 3 times `open_store` on a store
whose tables exist.

Run from the project root::

    .venv/bin/python -m benchmarks.pg_append [--appends 300] [--rounds 5] [--before PATH]

Writes ``benchmarks/results/pg_append.json``; schemas ``bench_pga_*`` are dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "pg_append.json"
PG = "postgresql://postgres@127.0.0.1:5432/test"
CONNINFO = "host=127.0.0.1 port=5432 user=postgres dbname=test"
ROOT = Path(__file__).resolve().parent.parent
WRITERS = (1, 2, 4, 8)


def _text(i: int) -> str:
    """A realistic message body (100-900 characters)."""
    return (f"message {i}: " + "the quick brown fox jumps over the lazy dog. " * (2 + i % 19))


# --- children -------------------------------------------------------------------------------

def _child_ours(schema: str, appends: int, start_at: float, no_lock: bool) -> dict[str, Any]:
    from turnledger import RuntimeProfile
    from turnledger.domain.messages import ChatMessage
    from turnledger.store.session import open_store

    url = f"{PG}?schema={schema}&pool_size=1"
    open_store(url).close()  # imports the driver: the second open is the one timed
    opened = time.perf_counter()
    store = open_store(url)
    open_ms = (time.perf_counter() - opened) * 1000
    if no_lock:
        recorder: Any = store.backend.recorder
        recorder.lock_table_statements = []
    session = store.start_session(RuntimeProfile(max_history_messages=10**9))
    _wait(start_at)
    times: list[float] = []
    began = time.time()
    for i in range(appends):
        message = ChatMessage.user(_text(i)) if i % 2 == 0 else ChatMessage.assistant(_text(i))
        t = time.perf_counter()
        session.append(message)
        times.append(time.perf_counter() - t)
    ended = time.time()
    store.close()
    return {"times": times, "began": began, "ended": ended, "open_ms": open_ms,
            "session": session.id}


def _child_raw(schema: str, appends: int, start_at: float, lock: bool,
               payloads: Path) -> dict[str, Any]:
    import msgpack
    import psycopg

    records = msgpack.unpackb(payloads.read_bytes())
    originator = uuid.uuid4()
    with psycopg.connect(CONNINFO, autocommit=True) as conn:
        insert = (f'INSERT INTO "{schema}".raw_events (originator_id, originator_version, '
                  "topic, state) VALUES (%s, %s, %s, %s)")
        lock_sql = f'LOCK TABLE "{schema}".raw_events IN EXCLUSIVE MODE'
        conn.execute(insert, (originator, 0, "start", b""), prepare=True)
        _wait(start_at)
        times: list[float] = []
        began = time.time()
        for i in range(appends):
            topic, state = records[i % len(records)]
            t = time.perf_counter()
            with conn.transaction():
                if lock:
                    conn.execute(lock_sql, prepare=True)
                conn.execute(insert, (originator, i + 1, topic, state), prepare=True)
            times.append(time.perf_counter() - t)
        ended = time.time()
    return {"times": times, "began": began, "ended": ended}


def _wait(start_at: float) -> None:
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)


def _child_main(args: argparse.Namespace) -> int:
    if args.child == "ours":
        out = _child_ours(args.schema, args.appends, args.start_at, args.no_lock)
    else:
        out = _child_raw(args.schema, args.appends, args.start_at, args.lock, args.payloads)
    print(json.dumps(out))
    return 0


# --- the parent -----------------------------------------------------------------------------

VARIANTS: dict[str, list[str]] = {
    "ours": ["ours"],
    "ours, no table lock": ["ours", "--no-lock"],
    "raw": ["raw"],
    "raw + table lock": ["raw", "--lock"],
    "before": ["ours"],
}


def _spawn(variant: str, schema: str, appends: int, start_at: float, payloads: Path,
           before: Path | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    path = [str(before)] if variant == "before" and before else []
    env["PYTHONPATH"] = os.pathsep.join([*path, str(ROOT)])
    mode, *flags = VARIANTS[variant]
    command = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--schema",
               schema, "--appends", str(appends), "--start-at", repr(start_at),
               "--payloads", str(payloads), *flags]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, cwd=tempfile.gettempdir())


def _run(variant: str, schemas: dict[str, str], writers: int, appends: int, payloads: Path,
         before: Path | None) -> list[dict[str, Any]]:
    start_at = time.time() + 1.5 + 0.15 * writers  # every child imported and connected
    children = [_spawn(variant, schemas[variant], appends, start_at, payloads, before)
                for _ in range(writers)]
    outs = []
    for child in children:
        stdout, _ = child.communicate(timeout=900)
        if child.returncode:
            raise SystemExit(f"{variant}: a child failed (exit {child.returncode})")
        outs.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    return outs


def _setup(variants: Sequence[str], payloads: Path, before: Path | None) -> dict[str, str]:
    """One schema per variant, its tables made before anything is timed; the raw payloads."""

    tag = f"bench_pga_{os.getpid()}"
    schemas = {v: f"{tag}_{i}" for i, v in enumerate(variants)}
    ours = _run("ours", schemas, 1, 40, payloads, None)[0]
    raw_payloads_and_tables(schemas, schemas["ours"], ours["session"], payloads)
    for variant in variants:
        if variant not in ("ours",) and not variant.startswith("raw"):
            _run(variant, schemas, 1, 2, payloads, before)  # creates its tables
    return schemas


def _drop(schemas: dict[str, str]) -> None:
    import psycopg

    with psycopg.connect(CONNINFO, autocommit=True) as conn:
        for schema in schemas.values():
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 1)


def _single(variants: Sequence[str], schemas: dict[str, str], rounds: int, appends: int,
            payloads: Path, before: Path | None) -> list[dict[str, Any]]:
    medians: dict[str, list[float]] = {v: [] for v in variants}
    opens: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(rounds):
        for variant in variants:
            out = _run(variant, schemas, 1, appends, payloads, before)[0]
            medians[variant].append(statistics.median(out["times"]))
            if "open_ms" in out:
                opens[variant].append(out["open_ms"])
    raw = statistics.median(medians["raw"])
    rows = []
    for variant in variants:
        median = statistics.median(medians[variant])
        rows.append({
            "variant": variant,
            "us_per_append": _us(median),
            "x_raw": round(median / raw, 2),
            "open_store_ms": round(statistics.median(opens[variant]), 1)
            if opens[variant] else None,
        })
    return rows


def _scaling(variants: Sequence[str], schemas: dict[str, str], appends: int,
             payloads: Path, before: Path | None) -> list[dict[str, Any]]:
    rows = []
    for writers in WRITERS:
        for variant in variants:
            outs = _run(variant, schemas, writers, appends, payloads, before)
            wall = max(o["ended"] for o in outs) - min(o["began"] for o in outs)
            total = sum(len(o["times"]) for o in outs)
            rows.append({"variant": variant, "writers": writers,
                         "appends_per_second": round(total / wall, 1),
                         "per_writer": round(total / wall / writers, 1)})
            print(f"  {writers} writers, {variant}: {rows[-1]['appends_per_second']}/s",
                  flush=True)
    return rows


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [[str(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--appends", type=int, default=300, help="appends per writer")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved single-writer rounds")
    parser.add_argument("--scaling-appends", type=int, default=150,
                        help="appends per writer in the 1/2/4/8-writer part")
    parser.add_argument("--before", type=Path, help="a tree to measure as 'before'")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--child", choices=["ours", "raw"], help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--payloads", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--no-lock", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lock", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child_main(args)
    variants = [v for v in VARIANTS if v != "before" or args.before]
    with tempfile.TemporaryDirectory() as tmp:
        payloads = Path(tmp) / "payloads.msgpack"
        schemas = _setup(variants, payloads, args.before)
        try:
            single = _single(variants, schemas, args.rounds, args.appends, payloads,
                             args.before)
            print("\nOne writer, one commit per append (median of "
                  f"{args.rounds} interleaved rounds of {args.appends} appends)")
            print(_table(single, ["variant", "us_per_append", "x_raw", "open_store_ms"]))
            scaling = _scaling(variants, schemas, args.scaling_appends, payloads, args.before)
        finally:
            _drop(schemas)
    print(f"\nWriters on different sessions ({args.scaling_appends} appends each), "
          "appends per second of all writers together")
    print(_table(scaling, ["variant", "writers", "appends_per_second", "per_writer"]))
    print("\nFairness: same bytes (raw inserts the topic and state ours stored), same table "
          "shape and keys, one transaction and one commit per append, synchronous_commit=on "
          "on both sides. Ours also encodes the event, hashes the chain and evolves the "
          "session state; the library inserts through unnest() with NOTIFY and LOCK TABLE.")
    report = {"benchmark": "pg_append", "python": sys.version.split()[0],
              "platform": platform.platform(), "cpus": os.cpu_count(),
              "appends": args.appends, "rounds": args.rounds,
              "before": str(args.before) if args.before else None,
              "single_writer": single, "scaling": scaling}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.output}")
    return 0


def raw_payloads_and_tables(
    schemas: dict[str, str], source: str, session_id: str, payloads: Path
) -> None:
    """Write the recorded payloads of ``session_id`` (schema ``source``) to ``payloads`` for
    the raw sides, and make the ``raw_events`` table of every ``raw*`` side's schema."""
    import msgpack
    import psycopg

    with psycopg.connect(CONNINFO, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT topic, state FROM "{source}".stored_events '
            "WHERE originator_id = %s AND originator_version > 1 ORDER BY originator_version",
            (uuid.UUID(session_id),),
        ).fetchall()
        payloads.write_bytes(msgpack.packb([[t, bytes(s)] for t, s in rows]))
        for variant, schema in schemas.items():
            if variant.startswith("raw"):
                conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
                conn.execute(
                    f'CREATE TABLE IF NOT EXISTS "{schema}".raw_events (originator_id uuid NOT '
                    "NULL, originator_version bigint NOT NULL, topic text, state bytea, "
                    "notification_id bigserial, PRIMARY KEY (originator_id, originator_version))"
                )
                conn.execute(f'CREATE UNIQUE INDEX IF NOT EXISTS raw_events_nid ON "{schema}"'
                             ".raw_events (notification_id)")


if __name__ == "__main__":
    sys.exit(main())
