"""Verify and replay throughput on a 100,000-event SQLite store (issue 12, point 4).

    .venv/bin/python -m benchmarks.audit [--events N] [--rounds R] [--before PATH]

Builds one default-profile agent session of N events (the same workload as
``benchmarks.session``), copies its records into a SQLite file, then times, each in a fresh
child process per round (rounds interleaved between the trees when ``--before`` names a
checkout to compare with, e.g. ``git worktree add /tmp/base <commit>``):

- ``read``: ``backend.read(session)`` — select, hash chain check, decode;
- ``replay``: ``read`` plus the fold of every event into a fresh ``SessionState`` (``evolve``);
- ``timeline``: ``timeline(store.events_of(session))`` — a replay rendered as entries;
- ``verify``: ``turnledger.replay.audit.verify`` (hash chain, decode, fold, every invariant);
- ``floor``: the bare loop under all of them, written with the drivers alone — select the
  rows, open each envelope, unzip, recompute and compare the SHA-256 chain, unpack the
  payload — with no event built, nothing validated and nothing folded: what no checked read
  can beat in this interpreter.

Prints the median of the rounds per tree in events per second of the child's CPU time (steadier
than wall time on a shared machine; both are in the JSON) and the ratio to ``--before``; writes
``benchmarks/results/audit.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "audit.json"
ROOT = Path(__file__).resolve().parent.parent
MEASURES = ("floor", "read", "replay", "timeline", "verify")


def _child(path: str, session_id: str) -> None:
    """Time each measure once, in this process (the tree first on ``PYTHONPATH``)."""
    from uuid import UUID

    from turnledger.domain.decider import SessionState, evolve
    from turnledger.replay.audit import verify
    from turnledger.replay.timeline import timeline
    from turnledger.store.session import open_store

    uuid = UUID(session_id)
    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}
    counts: dict[str, int] = {}
    marks: list[float] = []

    def start() -> None:
        gc.collect()
        marks[:] = [time.perf_counter(), time.thread_time()]

    def stop(measure: str) -> None:
        seconds[measure] = time.perf_counter() - marks[0]
        cpu[measure] = time.thread_time() - marks[1]

    start()
    counts["floor"] = _bare_loop(path, uuid)
    stop("floor")
    with open_store(f"sqlite:///{path}") as store:
        start()
        events = store.backend.read(uuid)
        stop("read")
        counts["read"] = len(events)
        del events
        start()
        state = SessionState()
        for event in store.backend.read(uuid):
            evolve(state, event)
        stop("replay")
        counts["replay"] = state.version
        del state
        start()
        entries = timeline(store.events_of(uuid))
        stop("timeline")
        counts["timeline"] = len(entries)
        del entries
        start()
        report = verify(store.backend)
        stop("verify")
        counts["verify"] = report.events_checked
        if not report.ok:
            raise SystemExit(f"verify found violations: {report.violations[:3]}")
    print(json.dumps({"seconds": seconds, "cpu": cpu, "counts": counts}))


def _bare_loop(path: str, uuid: Any) -> int:
    """The floor measure (module doc): the records of ``uuid`` read and chain-checked with
    sqlite3, msgpack, zlib and hashlib alone; the number of records."""
    import hashlib
    import sqlite3
    import zlib

    import msgpack

    prev, key, count = bytes(32), uuid.bytes, 0
    with contextlib.closing(sqlite3.connect(path)) as connection:
        rows = connection.execute(
            "SELECT originator_version, topic, state FROM stored_events "
            "WHERE originator_id = ? ORDER BY originator_version", (uuid.hex,))
        for version, topic, state in rows:
            envelope = msgpack.unpackb(state)
            payload = zlib.decompress(envelope[1]) if len(envelope) == 3 else envelope[1]
            chain = hashlib.sha256(b"".join(
                (prev, key, version.to_bytes(8, "big"), topic.encode(), payload))).digest()
            if chain != envelope[0]:
                raise SystemExit(f"floor: the chain breaks at version {version}")
            msgpack.unpackb(payload, timestamp=3)
            prev, count = chain, count + 1
    return count


def _run_child(tree: Path, path: str, session_id: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(ROOT)])
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", path, session_id],
        env=env, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir(),
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a checkout to time as 'before'")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    from benchmarks.session import Workload, build_long_session, write_sqlite

    trees = {"after": ROOT}
    if args.before:
        trees = {"before": args.before.resolve(), **trees}
    long = build_long_session(args.events, Workload())
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/audit.db"
        write_sqlite(path, long, with_snapshots=True)
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                runs[name].append(_run_child(tree, path, str(long["uuid"])))
                cpu = runs[name][-1]["cpu"]
                print(f"round {round_ + 1} {name:6} CPU " + "  ".join(
                    f"{m} {cpu[m]:.2f} s" for m in MEASURES), flush=True)
    events = long["events"]
    rows = []
    for measure in MEASURES:
        row: dict[str, Any] = {"what": measure, "events": events}
        for name in trees:
            counted = runs[name][0]["counts"][measure]
            for kind, suffix in (("cpu", "cpu_"), ("seconds", "wall_")):
                median = statistics.median(r[kind][measure] for r in runs[name])
                row[f"{name}_{suffix}s"] = round(median, 3)
                row[f"{name}_{suffix}events_per_s"] = round(counted / median)
            row[f"{name}_events_per_s"] = row[f"{name}_cpu_events_per_s"]
        if args.before:
            row["speedup"] = round(row["before_cpu_s"] / row["after_cpu_s"], 2)
            row["wall_speedup"] = round(row["before_wall_s"] / row["after_wall_s"], 2)
        rows.append(row)
    print(f"\n{events:,} events, median of {args.rounds} interleaved rounds, events per "
          "second of the child's CPU time (wall time in the JSON)")
    header = f"{'what':10}" + "".join(f" {name + ' ev/s':>14}" for name in trees)
    print(header + ("  speedup" if args.before else ""))
    for row in rows:
        line = f"{row['what']:10}" + "".join(
            f" {row[f'{name}_events_per_s']:>14,}" for name in trees)
        print(line + (f"  {row['speedup']:>6}x" if args.before else ""))
    report = {
        "command": ".venv/bin/python -m benchmarks.audit"
                   + (f" --events {args.events}" if args.events != 100_000 else "")
                   + (f" --rounds {args.rounds}" if args.rounds != 3 else "")
                   + (" --before PATH" if args.before else ""),
        "python": platform.python_version(), "platform": platform.platform(),
        "cpus": os.cpu_count(), "events": events, "event_types": long["event_types"],
        "rounds": args.rounds, "rows": rows,
        "runs": {name: [{"cpu": r["cpu"], "wall": r["seconds"]} for r in values]
                 for name, values in runs.items()},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
