"""Crash benchmark: SIGKILL a session writer 200 times on SQLite and 100 on PostgreSQL (issue 9).

Runs the crash loop of ``tests/integration/test_crash.py`` (`crash_loop`): a child process
appends turns with trims, requests and snapshots to one session; the parent kills it with
SIGKILL at a random moment, then checks from a new store object that every acknowledged append is
recorded once, versions are contiguous, no trim decision is half written and the restored views
equal a fresh fold. The loop stops at the first broken invariant.

It runs a second pattern on each backend, "store opened per request" (issue 19): the writer also
opens and closes another store object every fifth append, and two processes open the store, list
its sessions and close it, in a loop, the whole time; SQLite's file must then pass
``PRAGMA integrity_check``.

Run from the project root: ``.venv/bin/python -m benchmarks.crash`` (``--sqlite N``,
``--postgresql N``, ``--per-request-sqlite N`` and ``--per-request-postgresql N`` change the
counts; ``--parallel`` runs the loops at the same time, one process each;
``TURNLEDGER_CRASH_SEED`` replays the delays). Prints a table, writes
``benchmarks/results/crash.json`` and exits 1 when an invariant broke, anything acknowledged
was lost or duplicated, or the file is damaged — CI runs it and checks the exit code.
PostgreSQL must answer
on 127.0.0.1:5432 (exit 1 otherwise, as in CI).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.backends import fresh_target, postgres_problem
from tests.integration.test_crash import CrashFigures, crash_loop, crash_seed

RESULTS = Path(__file__).parent / "results" / "crash.json"


PER_REQUEST = " per-request"
"""Suffix of a plan entry that runs the "store opened per request" pattern."""


def _run(kind: str, kills: int, seed: int) -> tuple[CrashFigures | None, str]:
    """One backend's loop: its figures, or None and the broken invariant."""
    backend, per_request = kind.removesuffix(PER_REQUEST), kind.endswith(PER_REQUEST)
    with (
        tempfile.TemporaryDirectory(prefix=f"crash-{backend}-") as tmp,
        fresh_target(backend, Path(tmp)) as target,
    ):
        try:
            figures = crash_loop(target.url, kills, seed, Path(tmp), per_request=per_request)
        except AssertionError as error:
            return None, f"{type(error).__name__}: {error}"
        return figures, ""


def _backend_row(kind: str, kills: int, seed: int) -> dict[str, Any]:
    """One backend's figures as a table row (runs in a worker process with --parallel)."""
    if kind.startswith("postgresql") and (problem := postgres_problem()) is not None:
        return _row(kind, kills, None, problem)
    figures, failure = _run(kind, kills, seed)
    return _row(kind, kills, figures, failure)


def _row(kind: str, kills: int, figures: CrashFigures | None, failure: str) -> dict[str, Any]:
    if figures is None:
        return {"backend": kind, "kills_planned": kills, "ok": False, "failure": failure}
    faults = [e for e in figures.lister_errors if "locked" not in e and "busy" not in e]
    return {
        "backend": kind,
        "kills_planned": kills,
        "kills": figures.kills,
        "killed_before_first_append": figures.silent,
        "acknowledged": figures.acknowledged,
        "recorded": figures.recorded,
        "lost": figures.lost,
        "duplicated": figures.duplicated,
        "seconds": round(figures.seconds, 1),
        "integrity": figures.integrity,
        "lister_errors": len(figures.lister_errors),
        "lister_faults": faults[:5],
        "ok": (figures.lost == 0 and figures.duplicated == 0 and figures.kills == kills
               and figures.integrity in ("ok", "-") and not faults),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sqlite", type=int, default=200, help="kills on SQLite (default 200)")
    parser.add_argument("--postgresql", type=int, default=100,
                        help="kills on PostgreSQL (default 100; 0 skips it)")
    parser.add_argument("--per-request-sqlite", type=int, default=100,
                        help="kills on SQLite with stores opened per request (default 100)")
    parser.add_argument("--per-request-postgresql", type=int, default=40,
                        help="kills on PostgreSQL with stores opened per request (default 40)")
    parser.add_argument("--parallel", action="store_true",
                        help="run both backends at the same time (two processes)")
    args = parser.parse_args(argv)
    seed = crash_seed()
    print(f"seed {seed} (TURNLEDGER_CRASH_SEED={seed} replays the delays)", flush=True)
    counts = (("sqlite", args.sqlite), ("postgresql", args.postgresql),
              ("sqlite" + PER_REQUEST, args.per_request_sqlite),
              ("postgresql" + PER_REQUEST, args.per_request_postgresql))
    plan = [(kind, n) for kind, n in counts if n > 0]
    began = time.monotonic()
    if args.parallel:
        with concurrent.futures.ProcessPoolExecutor(max_workers=len(plan) or 1) as pool:
            futures = [pool.submit(_backend_row, kind, n, seed) for kind, n in plan]
            rows = [future.result() for future in futures]
    else:
        rows = []
        for kind, kills in plan:
            rows.append(_backend_row(kind, kills, seed))
            print(json.dumps(rows[-1]), flush=True)
    columns = ("backend", "kills", "acknowledged", "recorded", "lost", "duplicated", "integrity",
               "seconds")
    print(f"{columns[0]:>22}  " + "  ".join(f"{c:>12}" for c in columns[1:]))
    for row in rows:
        print(f"{row['backend']:>22}  "
              + "  ".join(f"{row.get(c, '-')!s:>12}" for c in columns[1:]))
    for row in rows:
        if not row["ok"]:
            print(f"FAILED on {row['backend']}: {row.get('failure', row)}", file=sys.stderr)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "seed": seed,
        "python": platform.python_version(),
        "total_seconds": round(time.monotonic() - began, 1),
        "parallel": args.parallel,
        "runs": rows,
    }, indent=2) + "\n")
    return 0 if rows and all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
