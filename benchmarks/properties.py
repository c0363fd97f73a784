"""The long random run of the property tests: every Hypothesis test of the suite, random
examples, ``--scale`` times the example count CI runs derandomized (`tests.properties`).

CI runs each property test on the same examples every time, so a red CI means a change broke
something; a bug that shows once in thousands of examples hides there. Run this before a
change to the store, the state or the snapshots lands:
``.venv/bin/python -m benchmarks.properties`` (``--scale N``, default 20; ``-k EXPR`` to
select tests as pytest does). Prints one row per test module (tests, failures, seconds),
writes ``benchmarks/results/properties.json`` and exits 1 when any test failed; a failure
prints the blob that reproduces it (``@reproduce_failure``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "properties.json"
ROOT = Path(__file__).resolve().parent.parent


def property_modules() -> list[str]:
    """The test modules that hold a Hypothesis test (they use ``examples``)."""
    found = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if "@given" in text or "RuleBasedStateMachine" in text:
            found.append(str(path.relative_to(ROOT)))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=20,
                        help="examples per test, times CI's count (default 20)")
    parser.add_argument("-k", dest="select", default=None, help="pytest -k expression")
    args = parser.parse_args(argv)
    modules = property_modules()
    env = dict(os.environ, HYPOTHESIS_PROFILE="long",
               TURNLEDGER_EXAMPLES_SCALE=str(args.scale))
    with tempfile.TemporaryDirectory(prefix="properties-") as tmp:
        report = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   f"--junitxml={report}", *modules]
        if args.select:
            command += ["-k", args.select]
        began = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env=env, check=False)
        seconds = time.monotonic() - began
        cases = ET.parse(report).getroot().iter("testcase") if report.exists() else iter(())
        rows: dict[str, dict[str, float]] = defaultdict(
            lambda: {"tests": 0, "failures": 0, "seconds": 0.0}
        )
        failed: list[str] = []
        for case in cases:
            row = rows[case.get("classname", "?")]
            row["tests"] += 1
            row["seconds"] += float(case.get("time", 0))
            if case.find("failure") is not None or case.find("error") is not None:
                row["failures"] += 1
                failed.append(f"{case.get('classname')}::{case.get('name')}")
    print(f"{'module':<58} {'tests':>6} {'failed':>6} {'seconds':>8}")
    for name, row in sorted(rows.items()):
        print(f"{name:<58} {row['tests']:>6.0f} {row['failures']:>6.0f} {row['seconds']:>8.1f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "scale": args.scale,
        "python": platform.python_version(),
        "seconds": round(seconds, 1),
        "exit_code": done.returncode,
        "failed": failed,
        "modules": rows,
    }, indent=2) + "\n")
    return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
