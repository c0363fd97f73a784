"""Benchmark: the Responses conversion of `TurnledgerSession.add_items` and `get_items` (issue 10).

Per turn of five Responses items (`benchmarks.integrations.turn_items`: user text, reasoning,
function call, its 1.5 KB output, assistant message), in microseconds, the median of
``--rounds`` rounds over ``--turns`` turns, every way timed in each round (interleaved, so
machine load weighs on all alike):

- ``checked``: every item converted, exported again and compared (`from_openai_responses_item`,
  `to_openai_responses`): what `from_responses_items` did for every item before ADR-0059, and
  still does for an item whose shape is not exact by construction;
- ``from_responses_items``: what ``add_items`` runs before `Session.extend`;
- ``baseline from_responses_items`` (with ``--baseline DIR``): the same function of another
  checkout (e.g. ``/work/main``), its ``turnledger`` package loaded under another name;
- ``to_openai_responses``: the export of the converted turn, message by message (what
  ``get_items`` does with the messages it returns), and with ``--baseline`` the baseline's.

Run from the project root::

    .venv/bin/python -m benchmarks.convert                       # JSON to /tmp
    .venv/bin/python -m benchmarks.convert --baseline /work/main --out /tmp/convert.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.integrations import Text, turn_items
from turnledger.domain.providers import from_openai_responses_item, plain, to_openai_responses
from turnledger.integrations.openai_agents import from_responses_items

OUT = Path(tempfile.gettempdir()) / "turnledger-convert.json"
BASELINE_PACKAGE = "turnledger_baseline"


def checked(items: list[Any]) -> list[Any]:
    """Every item converted, exported and compared (the path before ADR-0059)."""
    out = []
    for raw in items:
        item = plain(raw)
        converted = from_openai_responses_item(item)
        if to_openai_responses((converted,)) != [item]:
            raise AssertionError("a benchmark item would not come back")
        out.append(converted)
    return out


def load_baseline(checkout: Path) -> Any:
    """The ``turnledger`` package of ``checkout``, as ``turnledger_baseline`` (its absolute
    imports renamed in a temporary copy)."""
    target = Path(tempfile.mkdtemp(prefix="turnledger-baseline-"))
    package = target / BASELINE_PACKAGE
    shutil.copytree(checkout / "turnledger", package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for path in package.rglob("*.py"):
        text = path.read_text()
        path.write_text(text.replace("turnledger.", f"{BASELINE_PACKAGE}.")
                        .replace("from turnledger import", f"from {BASELINE_PACKAGE} import")
                        .replace("import turnledger\n", f"import {BASELINE_PACKAGE}\n"))
    sys.path.insert(0, str(target))
    return importlib.import_module(f"{BASELINE_PACKAGE}.integrations.openai_agents")


def _export(to_responses: Callable[[Any], Any]) -> Callable[[list[Any]], Any]:
    def run(messages: list[Any]) -> None:
        for message in messages:
            to_responses((message,))
    return run


def _timed(call: Callable[[Any], Any], batches: list[Any]) -> float:
    start = time.perf_counter()
    for batch in batches:
        call(batch)
    return time.perf_counter() - start


def measure(turns: int, rounds: int, baseline: Path | None) -> list[dict[str, Any]]:
    text = Text()
    workload = [turn_items(n, text) for n in range(turns)]
    ways: dict[str, tuple[Callable[[Any], Any], list[Any]]] = {
        "checked": (checked, workload),
        "from_responses_items": (from_responses_items, workload),
    }
    messages = [from_responses_items(turn) for turn in workload]
    exports: dict[str, tuple[Callable[[Any], Any], list[Any]]] = {
        "to_openai_responses": (_export(to_openai_responses), messages),
    }
    if baseline is not None:
        old = load_baseline(baseline)
        old_messages = [old.from_responses_items(turn) for turn in workload]
        if [[repr(m) for m in t] for t in old_messages] != [[repr(m) for m in t]
                                                             for t in messages]:
            raise AssertionError("the baseline converts the workload differently")
        ways["baseline from_responses_items"] = (old.from_responses_items, workload)
        exports["baseline to_openai_responses"] = (_export(old.to_openai_responses),
                                                   old_messages)
    every = {**ways, **exports}
    times: dict[str, list[float]] = {name: [] for name in every}
    for _ in range(rounds):
        for name, (call, batches) in every.items():
            times[name].append(_timed(call, batches))
    rows = []
    for name, samples in times.items():
        rows.append({"call": name, "us_per_turn": statistics.median(samples) / turns * 1e6,
                     "best_us_per_turn": min(samples) / turns * 1e6})
    for group in (ways, exports):
        reference = next(r for r in rows if r["call"] == next(iter(group)))
        for row in rows:
            if row["call"] in group:
                row["vs_first_of_group"] = reference["us_per_turn"] / row["us_per_turn"]
    return rows


def _table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [f"{'call':32s} {'us/turn':>9s} {'best':>9s} {'speed-up':>9s}"]
    for row in rows:
        lines.append(f"{row['call']:32s} {row['us_per_turn']:9.1f} {row['best_us_per_turn']:9.1f}"
                     f" {row['vs_first_of_group']:8.2f}x")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a checkout whose from_responses_items is timed alongside")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    rows = measure(args.turns, args.rounds, args.baseline)
    print(f"Responses conversion, per turn of five items ({args.turns} turns, median of "
          f"{args.rounds} interleaved rounds; speed-up against the first row of its group)")
    print(_table(rows))
    args.out.write_text(json.dumps({
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "turns": args.turns,
        "rounds": args.rounds,
        "baseline": None if args.baseline is None else str(args.baseline),
        "rows": rows,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
