"""Benchmark: the cost of the checked read path (ADR-0024) on restore.

Builds the long default-profile session of `benchmarks.session` (same workload), copies its
records into two SQLite files (with and without its snapshots) and times ``store.restore`` on
each (`benchmarks.session.bench_restore`). Run it on the code before and after the read check
to compare; the restore from snapshots is the one the 10 % budget is about::

    .venv/bin/python -m benchmarks.read_check --events 100000 --label after
    cd /tmp/old && /work/wt/.venv/bin/python -m benchmarks.read_check --events 100000 --label before

writes ``benchmarks/results/read_check_<label>.json`` and prints one table row.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import turnledger
from benchmarks.session import Workload, bench_restore, build_long_session, write_sqlite

RESULTS = Path(__file__).parent / "results"


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
    result["package"] = str(Path(turnledger.__file__).parent)
    result["label"] = args.label
    keys = ("events", "events_replayed_after_snapshot", "with_snapshots_ms",
            "with_snapshots_cpu_ms", "without_snapshots_ms", "without_snapshots_cpu_ms")
    print(" | ".join(["label", *keys]))
    print(" | ".join([args.label, *(str(result[k]) for k in keys)]))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"read_check_{args.label}.json").write_text(
        json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
