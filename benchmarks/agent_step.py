"""Benchmark: what a user pays per model call of an OpenAI Agents SDK run (issue 22).

One **agent step** is what happens between two model calls of a tool loop: record the step
(the model's reasoning and function call, the tool's output: three Responses items, ~2 KB)
and build the input of the next model call. Measured, interleaved step by step so machine load
weighs on both sides alike, after 100 / 1,000 / 10,000 turns of history:

- **SDK**: the SDK's own session (``SQLiteSession`` on SQLite; ``SQLAlchemySession`` on asyncpg
  on PostgreSQL), ``add_items(step)`` as the SDK's run loop saves a step, then
  ``get_items()`` and the trimming a user adds to stay in budget: whole turns kept from the
  newest, at most 50 turns and 32,000 estimated tokens (``ceil(len(json) / 4) + 4`` an item),
  the same policy as turnledger's default profile;
- **turnledger**: ``TurnledgerSession.add_items(step)`` (the same save), then
  ``call_model_input_filter`` on the SDK's whole run input (the window read at the start of the
  run plus the run's items): it finds nothing new to record, decides and records the trims
  (R24) and returns the window.

Each run is a user message, three tool steps and a final answer (all recorded on both sides);
the three tool steps are timed. The ratio is SDK / turnledger: above 1, turnledger is faster.
Goal (issue 22): >= 1x at 100 turns.

Run from the project root::

    .venv/bin/python -m benchmarks.agent_step            # full run, writes results/agent_step.json
    .venv/bin/python -m benchmarks.agent_step --quick    # 100 and 1,000 turns, JSON to tmp

``--postgres URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``; fresh schemas,
dropped after), ``--no-postgres`` to skip PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_API_KEY", "sk-benchmark-no-network")

import turnledger as tl
from benchmarks.integrations import (
    PG_DEFAULT,
    Backend,
    Text,
    _close_theirs,
    _table,
    postgres_backend,
    sqlite_backend,
    turn_items,
)
from turnledger.integrations.openai_agents import TurnledgerSession

RESULTS = Path(__file__).parent / "results" / "agent_step.json"
MAX_TURNS = 50  # turnledger's default turn limit (R29), applied on the SDK side too
BUDGET = 32_000  # turnledger's default token budget (R11), applied on the SDK side too
Item = dict[str, Any]


def user_trim(items: list[Item], max_turns: int = MAX_TURNS, budget: int = BUDGET) -> list[Item]:
    """The trimming a user adds after ``get_items()``: whole turns (a turn starts at a user
    message) from the newest, at most ``max_turns`` and ``budget`` estimated tokens; the
    newest turn is kept whatever its size."""
    kept_from, tokens, turns = 0, 0, 0
    for i in range(len(items) - 1, -1, -1):
        tokens += math.ceil(len(json.dumps(items[i])) / 4) + 4
        if items[i].get("role") == "user":
            turns += 1
            if turns > 1 and (turns > max_turns or tokens > budget):
                break
            kept_from = i
    return items[kept_from:]


class _Input:
    """Stands for the SDK's ``CallModelData`` (``model_data.input``, ``.instructions``)."""

    def __init__(self, items: list[Item]) -> None:
        self.model_data = self
        self.input = items
        self.instructions = "Answer briefly."


async def _fill(backend: Backend, turns: int, name: str) -> None:
    """``turns`` turns on both sides, 100 turns a transaction."""
    text = Text(turns)
    theirs = backend.theirs(name)
    with tl.open_store(backend.ours_url) as store:
        ours = TurnledgerSession(name, store)
        for first in range(0, turns, 100):
            items = [i for n in range(first, min(first + 100, turns)) for i in turn_items(n, text)]
            await theirs.add_items(items)
            await ours.add_items(items)
    await _close_theirs(theirs)


def _run_items(n: int, text: Text) -> tuple[Item, list[list[Item]], Item]:
    """A run: its user message, three tool steps (reasoning, call, output), its answer."""
    whole = turn_items(n, text)
    user, reasoning, call, output, answer = whole
    steps = []
    for k in range(3):
        steps.append([
            {**reasoning, "id": f"rs_{n}_{k}"},
            {**call, "id": f"fc_{n}_{k}", "call_id": f"call_{n}_{k}"},
            {**output, "call_id": f"call_{n}_{k}"},
        ])
    return user, steps, answer


async def bench_size(backend: Backend, turns: int, runs: int) -> dict[str, Any]:
    """Median step time of each side after ``turns`` turns, ``runs`` runs of three steps."""
    name = f"step-{turns}-{uuid.uuid4().hex[:8]}"
    await _fill(backend, turns, name)
    text = Text(turns + 7)
    times: dict[str, list[float]] = {"sdk": [], "turnledger": []}
    sizes: dict[str, list[int]] = {"sdk": [], "turnledger": []}
    theirs = backend.theirs(name)
    with tl.open_store(backend.ours_url) as store:
        ours = TurnledgerSession(name, store)
        for r in range(runs):
            user, steps, answer = _run_items(turns + r, text)
            # Run start (untimed, alike on both sides): read the history, save the input.
            await theirs.get_items()
            await theirs.add_items([user])
            run_input = [*(await ours.get_items()), user]
            await ours.add_items([user])
            for k, step in enumerate(steps):
                sides = ("sdk", "turnledger") if (r + k) % 2 == 0 else ("turnledger", "sdk")
                for side in sides:
                    start = time.perf_counter()
                    if side == "sdk":
                        await theirs.add_items(step)
                        window = user_trim(await theirs.get_items())
                    else:
                        await ours.add_items(step)
                        run_input += step
                        window = (await ours.call_model_input_filter(_Input(run_input))).input
                    times[side].append(time.perf_counter() - start)
                    sizes[side].append(len(window))
            await theirs.add_items([answer])
            await ours.add_items([answer])
        ours.close()
    await _close_theirs(theirs)
    sdk, mine = statistics.median(times["sdk"]), statistics.median(times["turnledger"])
    return {"backend": backend.name, "turns": turns, "steps": len(times["sdk"]),
            "sdk_ms": sdk * 1e3, "turnledger_ms": mine * 1e3,
            "sdk_items": sizes["sdk"][-1], "turnledger_items": sizes["turnledger"][-1],
            "sdk_over_turnledger": sdk / mine}


async def run(args: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    sizes = (100, 1_000) if args.quick else (100, 1_000, 10_000)
    runs = 4 if args.quick else 8
    backends = [sqlite_backend(directory)]
    if not args.no_postgres:
        backends.append(postgres_backend(args.postgres, f"step_{uuid.uuid4().hex[:8]}"))
    rows = []
    try:
        for backend in backends:
            for turns in sizes:
                rows.append(await bench_size(backend, turns, runs))
    finally:
        for backend in backends:
            for cleanup in backend.cleanup:
                done = cleanup()
                if done is not None:
                    await done
    return rows


def report(rows: Sequence[dict[str, Any]]) -> str:
    return _table(
        "One agent step (record reasoning + call + output, build the next model input); "
        "median ms; ratio SDK / turnledger",
        ["backend", "turns", "steps", "SDK ms", "turnledger ms", "SDK items",
         "turnledger items", "ratio"],
        [[r["backend"], r["turns"], r["steps"], r["sdk_ms"], r["turnledger_ms"], r["sdk_items"],
          r["turnledger_items"], f"{r['sdk_over_turnledger']:.2f}x"] for r in rows],
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 turns; JSON to tmp")
    parser.add_argument("--postgres", default=PG_DEFAULT)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tl-bench-step-") as tmp:
        rows = asyncio.run(run(args, Path(tmp)))
    print(report(rows))
    output = Path(tempfile.gettempdir()) / "agent_step.json" if args.quick else RESULTS
    output.parent.mkdir(parents=True, exist_ok=True)
    meta = {"when": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": "python -m benchmarks.agent_step" + (" --quick" * args.quick)
            + (" --no-postgres" * args.no_postgres),
            "python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "max_turns": MAX_TURNS, "budget_tokens": BUDGET}
    output.write_text(json.dumps({**meta, "steps": rows}, indent=2) + "\n", encoding="utf-8")
    print(f"results: {output}")


if __name__ == "__main__":
    main()
