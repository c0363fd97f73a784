"""Verify and replay throughput on a 100,000-event SQLite store (issue: audit and replay).

    .venv/bin/python -m benchmarks.audit [--events N]

Builds one default-profile agent session of N events (the same workload as
``benchmarks.session``), copies its records into a SQLite file, then times
``turnledger.replay.audit.verify`` (hash chain + decode + fold + every invariant) and a replay
(``store.events_of`` + ``timeline``). Prints a table, writes ``benchmarks/results/audit.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks.session import Workload, build_long_session, write_sqlite
from turnledger.replay.audit import verify
from turnledger.replay.timeline import timeline
from turnledger.store.session import open_store

RESULTS = Path(__file__).resolve().parent / "results" / "audit.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    args = parser.parse_args()
    long = build_long_session(args.events, Workload())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/audit.db"
        write_sqlite(path, long, with_snapshots=True)
        with open_store(f"sqlite:///{path}") as store:
            start = time.perf_counter()
            report = verify(store.backend)
            verify_s = time.perf_counter() - start
            assert report.ok, report.violations[:3]
            start = time.perf_counter()
            entries = timeline(store.events_of(long["uuid"]))
            replay_s = time.perf_counter() - start
    events = long["events"]
    rows.append({"what": "verify (chain, decode, fold, invariants)", "events": events,
                 "seconds": round(verify_s, 2), "events_per_s": round(events / verify_s)})
    rows.append({"what": "replay (read, decode, timeline)", "events": len(entries),
                 "seconds": round(replay_s, 2), "events_per_s": round(len(entries) / replay_s)})
    print(f"{'what':44} {'events':>8} {'seconds':>8} {'events/s':>9}")
    for r in rows:
        print(f"{r['what']:44} {r['events']:>8,} {r['seconds']:>8.2f} {r['events_per_s']:>9,}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(
        {"command": ".venv/bin/python -m benchmarks.audit", "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
