"""Benchmark: cost that follows the window, not the history (issue 12, points 1, 2, 4).

For sessions of 100, 1,000 and 10,000 agent turns (user, tool call(s), tool result(s),
assistant; a ``prepare_request`` every tenth turn) under two profiles — the default one (turn
limit 50) and the turn limit off (``max_history_messages=10**9``, only the token budget trims)
— it measures on SQLite:

- **snapshot bytes** kept for the session, **event bytes** (the ``state`` column of its
  records), the **file size** and the **disk per turn**;
- **restore ms** (``store.restore``, median) and **prepare ms** (``prepare_request`` on the
  restored session, median; each call records its ``RequestPrepared`` with an fsync);
- **replay events/s** (``backend.read`` + ``evolve`` into a fresh state) and **verify
  events/s** (``backend.verify``: the hash chain and a decode of every record);
- the **OpenAI Agents SDK** ``SQLiteSession`` disk per turn on the same turns (one
  ``add_items`` per turn of the same four items as Responses items), file size / turns.

The session is built through the `Session` API on ``memory://`` (no fsync), then its records
and the snapshots the store kept are copied byte for byte into a fresh SQLite file. The text
comes from a Zipf-distributed vocabulary of 5,000 pseudo-words, so compression gains are not
those of a ten-word pool. Run from the project root::

    .venv/bin/python -m benchmarks.scale                     # 100, 1,000, 10,000 turns
    .venv/bin/python -m benchmarks.scale --turns 100 1000 --output /tmp/x.json

The table goes to stdout, the JSON to ``benchmarks/results/scale.json`` (``--output``).
Wall-clock times on a loaded machine are noisy: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import sqlite3
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.decider import SessionState, evolve
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.store.session import open_store

RESULTS = Path(__file__).parent / "results" / "scale.json"
PROFILES = {
    "default": RuntimeProfile(),
    "turn limit off": RuntimeProfile(max_history_messages=10**9),
}


class Workload:
    """Deterministic agent turns whose text compresses like prose, not like a tiny pool."""

    def __init__(self, seed: int = 12) -> None:
        rng = self._rng = random.Random(seed)
        vocabulary = [
            "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 10)))
            for _ in range(5000)
        ]
        weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
        self._pool = " ".join(rng.choices(vocabulary, weights, k=60_000))

    def text(self, lo: int, hi: int) -> str:
        size = self._rng.randint(lo, hi)
        start = self._rng.randrange(0, len(self._pool) - size)
        return self._pool[start : start + size]

    def turn(self, index: int) -> tuple[ConversationMessage, ...]:
        rng = self._rng
        calls = tuple(
            ToolCall(
                f"call_{index}_{k}",
                rng.choice(("read_file", "shell", "search")),
                json.dumps({"path": f"src/mod_{index}_{k}.py", "query": self.text(10, 120)}),
            )
            for k in range(rng.choice((1, 1, 2)))
        )
        return (
            Chat(ChatMessage.user(self.text(80, 600))),
            AssistantToolCalls(self.text(0, 200) or None, calls),
            ToolResults(tuple(ToolResult(c.id, self.text(1000, 2000), c.name) for c in calls)),
            Chat(ChatMessage.assistant(self.text(100, 1200))),
        )


def responses_items(turn: tuple[ConversationMessage, ...]) -> list[dict[str, Any]]:
    """The same turn as OpenAI Responses items, as the Agents SDK stores them."""
    user, calls, results, final = turn
    assert isinstance(user, Chat)
    assert isinstance(final, Chat)
    assert isinstance(calls, AssistantToolCalls)
    assert isinstance(results, ToolResults)
    items: list[dict[str, Any]] = [{"role": "user", "content": user.message.content}]
    if calls.text:
        items.append(_assistant(calls.text))
    items += [
        {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments,
         "id": f"fc_{c.id}", "status": "completed"}
        for c in calls.tool_calls
    ]
    items += [
        {"type": "function_call_output", "call_id": r.tool_call_id, "output": r.content}
        for r in results.results
    ]
    items.append(_assistant(final.message.content))
    return items


def _assistant(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "status": "completed",
            "id": f"msg_{abs(hash(text)) % 10**12}",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def _file_bytes(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def sdk_disk(turns: Sequence[tuple[ConversationMessage, ...]], directory: str) -> int:
    """The SQLite file size of the Agents SDK's SQLiteSession holding ``turns``."""
    from agents import SQLiteSession

    path = os.path.join(directory, "sdk.db")
    session = SQLiteSession("bench", path)

    async def fill() -> None:
        for turn in turns:
            await session.add_items(responses_items(turn))  # type: ignore[arg-type]

    asyncio.run(fill())
    session.close()
    return _file_bytes(path)


def build(profile: RuntimeProfile, turns: Sequence[tuple[ConversationMessage, ...]]) -> Any:
    store = open_store("memory://")
    session = store.start_session(profile=profile)
    for index, (user, calls, results, final) in enumerate(turns):
        session.append(user)
        session.append(calls)
        session.append(results)
        if index % 10 == 9:
            session.prepare_request()
        session.append(final)
    uuid = UUID(session.id)
    records = store.backend.read_records(uuid)
    snapshots = list(store.backend.snapshot_recorder.select_events(uuid))
    store.close()
    return uuid, records, snapshots


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def measure(
    profile_name: str, turns: Sequence[tuple[ConversationMessage, ...]], directory: str,
    repeats: int,
) -> dict[str, Any]:
    uuid, records, snapshots = build(PROFILES[profile_name], turns)
    path = os.path.join(directory, f"{profile_name.replace(' ', '_')}_{len(turns)}.db")
    store = open_store(f"sqlite:///{path}")
    for i in range(0, len(records), 1000):
        store.backend.recorder.insert_events(records[i : i + 1000])
    if snapshots:
        store.backend.snapshot_recorder.insert_events(snapshots)
    store.close()
    file_bytes = _file_bytes(path)
    store = open_store(f"sqlite:///{path}")
    try:
        restores = []
        for _ in range(repeats):
            gc.collect()
            t0 = time.perf_counter()
            session = store.restore(uuid)
            restores.append(time.perf_counter() - t0)
        prepares = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            session.prepare_request()
            prepares.append(time.perf_counter() - t0)
        replays, verifies = [], []
        for _ in range(max(1, repeats // 2)):
            gc.collect()
            t0 = time.perf_counter()
            events = store.backend.read(uuid)
            state = SessionState()
            for event in events:
                evolve(state, event)
            replays.append(time.perf_counter() - t0)
            del events, state
            gc.collect()
            t0 = time.perf_counter()
            problems = store.backend.check_chain(uuid)
            verifies.append(time.perf_counter() - t0)
            assert not problems, problems
    finally:
        store.close()
    events = len(records)
    return {
        "profile": profile_name,
        "turns": len(turns),
        "events": events,
        "snapshots_kept": len(snapshots),
        "replayed_after_snapshot": events - max((s.originator_version for s in snapshots),
                                                default=0),
        "snapshot_bytes": sum(len(s.state) for s in snapshots),
        "event_bytes": sum(len(r.state) for r in records),
        "file_bytes": file_bytes,
        "disk_per_turn": round(file_bytes / len(turns)),
        "restore_ms": _median_ms(restores),
        "prepare_ms": _median_ms(prepares),
        "replay_events_per_s": round(events / statistics.median(replays)),
        "verify_events_per_s": round(events / statistics.median(verifies)),
    }


def _table(rows: list[dict[str, Any]]) -> str:
    keys = ["profile", "turns", "events", "snapshots_kept", "snapshot_bytes", "event_bytes",
            "file_bytes", "disk_per_turn", "sdk_disk_per_turn", "restore_ms", "prepare_ms",
            "replay_events_per_s", "verify_events_per_s"]
    cells = [[str(row.get(k, "")) for k in keys] for row in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = [" | ".join(k.ljust(w) for k, w in zip(keys, widths))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(c.rjust(w) for c, w in zip(cell, widths)) for cell in cells]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[100, 1_000, 10_000])
    parser.add_argument("--profiles", nargs="+", default=list(PROFILES), choices=list(PROFILES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    workload = Workload()
    rows: list[dict[str, Any]] = []
    for size in args.turns:
        turns = [workload.turn(i) for i in range(size)]
        with tempfile.TemporaryDirectory() as directory:
            sdk = sdk_disk(turns, directory)
            for name in args.profiles:
                row = measure(name, turns, directory, args.repeats)
                row["sdk_file_bytes"] = sdk
                row["sdk_disk_per_turn"] = round(sdk / size)
                row["disk_over_sdk"] = round(row["file_bytes"] / sdk, 2)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    print(_table(rows))
    report = {
        "benchmark": "scale",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "cpus": os.cpu_count(),
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nJSON: {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
