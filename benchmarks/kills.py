"""Kill benchmark: SIGKILL `purge --yes`, `forget`, `rekey` and `rechain` at random moments, on
SQLite and PostgreSQL, and count the kills that left a store half done (issue 19 point 5).

Runs the kill loop of ``tests/e2e/test_cli_kills.py`` (`kill_loop`) for each command and
backend: the real command as a subprocess, SIGKILLed after a random delay, the store checked
right after the kill (*unfinished*: it did not verify or was not in a consistent state), the
command run again to completion and the store checked again (*broken*: the rerun failed or did
not finish the command). Unlike the test, every loop runs to the end and the counts are the
result.

Run from the project root: ``.venv/bin/python -m benchmarks.kills`` (``--kills N`` per command
and backend, default 30; ``--commands purge,forget`` and ``--backends sqlite`` choose;
``TURNLEDGER_KILL_SEED`` replays the delays). Prints a table, writes
``benchmarks/results/kills.json`` and exits 1 when any kill left a broken store (or PostgreSQL
does not answer on 127.0.0.1:5432 while it is asked for).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.backends import fresh_target, postgres_problem
from tests.e2e.test_cli_kills import SCENARIOS, kill_loop, kill_seed

RESULTS = Path(__file__).parent / "results" / "kills.json"
COLUMNS = ("command", "backend", "kills", "finished", "unfinished", "refused", "broken", "seconds")


def _row(command: str, kind: str, kills: int, seed: int) -> dict[str, Any]:
    if kind == "postgresql" and (problem := postgres_problem()) is not None:
        return {"command": command, "backend": kind, "ok": False, "failure": problem}
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix=f"kills-{command}-{kind}-") as tmp,
        fresh_target(kind, Path(tmp)) as target,
    ):
        figures = kill_loop(SCENARIOS[command](target, Path(tmp)), kills, seed)
    return {
        "command": figures.command, "backend": kind, "kills": figures.kills,
        "finished": figures.finished, "unfinished": figures.unfinished,
        "refused": figures.refused, "broken": figures.broken,
        "seconds": round(time.monotonic() - began, 1),
        "findings": figures.findings[:10], "final_verify": figures.final_verify,
        "ok": figures.broken == 0 and figures.refused == 0 and not figures.final_verify,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=30,
                        help="kills per command and backend (default 30)")
    parser.add_argument("--commands", default=",".join(SCENARIOS),
                        help=f"comma-separated, of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--backends", default="sqlite,postgresql",
                        help="comma-separated, of sqlite, postgresql (default: both)")
    args = parser.parse_args(argv)
    seed = kill_seed()
    print(f"seed {seed} (TURNLEDGER_KILL_SEED={seed} replays the delays)", flush=True)
    began = time.monotonic()
    rows = []
    for kind in args.backends.split(","):
        for command in args.commands.split(","):
            rows.append(_row(command, kind, args.kills, seed))
            print(json.dumps({k: rows[-1].get(k) for k in (*COLUMNS, "ok")}), flush=True)
    print("  ".join(f"{c:>11}" for c in COLUMNS))
    for row in rows:
        print("  ".join(f"{row.get(c, '-')!s:>11}" for c in COLUMNS))
    for row in rows:
        if not row["ok"]:
            print(f"BROKEN: {row['command']} on {row['backend']}: "
                  f"{row.get('failure') or row['findings'][:3]}", file=sys.stderr)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "seed": seed, "kills_per_loop": args.kills, "python": platform.python_version(),
        "total_seconds": round(time.monotonic() - began, 1), "runs": rows,
    }, indent=2) + "\n")
    return 0 if rows and all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
