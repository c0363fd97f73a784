"""Fault campaign: PostgreSQL backends terminated while appends run (issue 19 point 4).

Runs `tests.integration.pg_terminations.terminate_campaign` (writer threads appending through
a proxy while ``pg_terminate_backend`` hits their connections at random and the proxy blacks
the server out now and then) once per seed, in a child process per tree: ours, and with
``--before PATH`` a tree whose ``turnledger`` package is imported instead (``PATH`` holds the
package; the campaign is always ours). Prints, per tree, how many `StoreUnavailable` were
raised and how many of them had stored their message all the same, how many of those the
store said were in doubt, and the messages lost and duplicated (retries included).

Run from the project root::

    .venv/bin/python -m benchmarks.pg_terminations [--seeds 3] [--writers 8] [--messages 60]
        [--blackout-every 60] [--before PATH]

Writes ``benchmarks/results/pg_terminations.json`` and exits 1 when our tree lost,
duplicated or misreported an append. PostgreSQL must answer on 127.0.0.1:5432.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "pg_terminations.json"
ROOT = Path(__file__).resolve().parent.parent
CHILD = """
import json, sys, uuid
from tests.backends import pg_execute
from tests.integration.pg_terminations import terminate_campaign
from tests.tcp_proxy import commit_cutting_proxy
writers, messages, blackout_every, seed = map(int, sys.argv[1:5])
schema = f"bench_kill_{uuid.uuid4().hex[:12]}"
try:
    with commit_cutting_proxy() as proxy:
        f = terminate_campaign(proxy, schema, writers=writers, messages=messages,
                               blackout_every=blackout_every, seed=seed)
finally:
    pg_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
print(json.dumps({key: getattr(f, key) for key in (
    "acknowledged", "unavailable", "unavailable_stored", "in_doubt", "in_doubt_stored",
    "lost", "duplicated", "gave_up", "blackouts", "lied")}
    | {"terminated": sum(f.kills.values()), "errors": sum(f.errors.values())}))
"""
_SUMMED = ("acknowledged", "unavailable", "unavailable_stored", "in_doubt", "in_doubt_stored",
           "lost", "duplicated", "gave_up", "lied", "terminated", "blackouts", "errors")


def _campaign(tree: Path, args: argparse.Namespace, seed: int) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(args.writers), str(args.messages),
         str(args.blackout_every), str(seed)],
        capture_output=True, text=True, check=False, cwd=tempfile.gettempdir(),
        env={**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys([str(tree), str(ROOT)]))},
    )
    if done.returncode != 0:
        raise SystemExit(f"the campaign failed in {tree}:\n{done.stderr[-4000:]}")
    figures: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _line(tree: str, row: dict[str, Any]) -> str:
    return (
        f"  {tree:<7} {row['unavailable_stored']} of {row['unavailable']} StoreUnavailable "
        f"were stored ({row['in_doubt_stored']} of {row['in_doubt']} said in doubt); "
        f"{row['duplicated']} duplicated, {row['lost']} lost, {row['gave_up']} given up; "
        f"{row['acknowledged']} acknowledged, {row['terminated']} backends terminated, "
        f"{row['blackouts']} blackouts"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--blackout-every", type=int, default=60)
    parser.add_argument("--before", type=Path, help="a tree whose turnledger is 'before'")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    trees = {"ours": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    rows: dict[str, dict[str, Any]] = {}
    for name, tree in trees.items():
        runs = [_campaign(tree, args, seed) for seed in range(args.seeds)]
        rows[name] = {key: sum(run[key] for run in runs) for key in _SUMMED} | {"runs": runs}
    print(f"{args.seeds} campaigns of {args.writers} writers x {args.messages} appends, "
          f"a blackout every {args.blackout_every} terminations")
    for name, row in rows.items():
        print(_line(name, row))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "benchmark": "pg_terminations", "seeds": args.seeds, "writers": args.writers,
        "messages": args.messages, "blackout_every": args.blackout_every, "trees": rows,
    }, indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.output}")
    ours = rows["ours"]
    return 1 if ours["lost"] or ours["duplicated"] or ours["lied"] or ours["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
