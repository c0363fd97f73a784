"""Benchmark: the cost of the checked read path (ADR-0024) on restore.

Builds the long default-profile session of `benchmarks.session` (same workload), copies its
records into two SQLite files (with and without its snapshots) and times ``store.restore`` on
each (`benchmarks.session.bench_restore`). Run it on the code before and after the read check
to compare; the restore from snapshots is the one the 10 % budget is about::

    .venv/bin/python -m benchmarks.read_check --events 100000 --label after
    cd /tmp/old && /work/wt/.venv/bin/python -m benchmarks.read_check --events 100000 --label before

writes ``benchmarks/results/read_check_<label>.json`` and prints one table row. On a shared
machine wall and even CPU times of two runs differ by more than the check costs, so the
"after" run also isolates the check in one process, interleaved: the records a restore reads
decoded with the chain check (`decode_chained`) and without (`decode_record`), best of N,
next to the restore's own best time (``check_cost``).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import turnledger
import turnledger.store.mapper
from benchmarks.session import Workload, bench_restore, build_long_session, write_sqlite
from turnledger.store.session import open_store

RESULTS = Path(__file__).parent / "results"


def _best(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def check_cost(path: str, long: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Best-of-N ms: the restore, and decoding what it reads with and without the check."""
    uuid = long["uuid"]
    with open_store(f"sqlite:///{path}") as store:
        backend = store.backend
        snapshot = backend.load_snapshot(uuid)
        assert snapshot is not None
        after = backend.read_records(uuid, after_version=snapshot[0] - 1)
        anchor, _ = backend.mapper.open_record(after[0])
        tail = after[1:]
        first = snapshot[0] + 1
        timings = {"restore": [], "checked": [], "unchecked": []}
        for _ in range(repeats):  # interleaved, so load changes hit all three alike
            timings["restore"].append(_best(lambda: store.restore(uuid), 1))
            timings["checked"].append(_best(
                lambda: backend.mapper.decode_chained(tail, first, anchor), 5))
            timings["unchecked"].append(_best(
                lambda: [backend.mapper.decode_record(r) for r in tail], 5))
    best = {k: min(v) * 1000 for k, v in timings.items()}
    return {
        "records_after_snapshot": len(tail),
        "restore_best_ms": round(best["restore"], 3),
        "decode_checked_best_ms": round(best["checked"], 3),
        "decode_unchecked_best_ms": round(best["unchecked"], 3),
        "check_share_of_restore_pct": round(
            100 * (best["checked"] - best["unchecked"]) / best["restore"], 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="session length")
    parser.add_argument("--repeats", type=int, default=7, help="restores from snapshots")
    parser.add_argument("--label", default="after", help="names the JSON file")
    args = parser.parse_args(argv)
    long = build_long_session(args.events, Workload())
    config = {"restore_repeats_snapshot": args.repeats, "restore_repeats_full": 3}
    with tempfile.TemporaryDirectory(prefix="turnledger-readcheck-") as tmp:
        paths = {"with": os.path.join(tmp, "with.db"), "without": os.path.join(tmp, "without.db")}
        write_sqlite(paths["with"], long, with_snapshots=True)
        write_sqlite(paths["without"], long, with_snapshots=False)
        result = bench_restore(paths, long, config)
        if hasattr(turnledger.store.mapper.TurnledgerMapper, "decode_chained"):
            result["check_cost"] = check_cost(paths["with"], long, args.repeats)
    result["package"] = str(Path(turnledger.__file__).parent)
    result["label"] = args.label
    keys = ("events", "events_replayed_after_snapshot", "with_snapshots_ms",
            "with_snapshots_cpu_ms", "without_snapshots_ms", "without_snapshots_cpu_ms")
    print(" | ".join(["label", *keys]))
    print(" | ".join([args.label, *(str(result[k]) for k in keys)]))
    if "check_cost" in result:
        print("check cost: " + ", ".join(f"{k} {v}" for k, v in result["check_cost"].items()))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"read_check_{args.label}.json").write_text(
        json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
