"""Benchmark: the Agents SDK's `OpenAIConversationsSession` on turnledger's server and on an
items-only server of the same framework over the same store engine (issue 37's floor).

The floor is what storing items over HTTP costs with nothing else: a Starlette application
under uvicorn (as ``turnledger serve``) answering the calls the session makes —
``conversations.create``, ``items.create``, ``items.list`` (``limit``, ``order``, ``after``,
``has_more``) — from one SQLite file in WAL mode with ``synchronous=FULL`` (turnledger's
default), each call in a worker thread. It keeps items as JSON rows: no log, no chain, no
views, no checks.

Per turn the workload does what a runner does with a session: ``get_items()`` (every item,
paged by the client) then ``add_items`` of the turn's two items (a question and an answer),
for ``--turns`` turns over ``--conversations`` conversations, one conversation on each server
in turn so a drift of the machine reaches both. Prints p50 and p99 of a turn and the ratio
(goal ≤ 1.3×), writes ``benchmarks/results/server_floor.json``. Run from the project root:
``.venv/bin/python -m benchmarks.server_floor``. ``--serve-floor PATH`` runs the floor server
alone (what the benchmark starts in a subprocess).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import secrets
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.server import _items, _percentile, _serve

RESULTS = Path(__file__).parent / "results" / "server_floor.json"


class FloorStore:
    """Items as JSON rows in one SQLite file; one connection, one call at a time."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("CREATE TABLE IF NOT EXISTS items (conversation TEXT, seq INTEGER, "
                         "id TEXT, item TEXT, PRIMARY KEY (conversation, seq))")
        self._db.execute("CREATE TABLE IF NOT EXISTS conversations (id TEXT PRIMARY KEY, "
                         "created_at INTEGER, metadata TEXT)")
        self._lock = threading.Lock()

    def create(self, metadata: dict[str, str]) -> dict[str, Any]:
        record = {"id": "conv_" + secrets.token_hex(16), "object": "conversation",
                  "created_at": int(time.time()), "metadata": metadata}
        with self._lock:
            self._db.execute("INSERT INTO conversations VALUES (?, ?, ?)",
                             (record["id"], record["created_at"], json.dumps(metadata)))
        return record

    def add(self, conversation: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        stored = []
        for item in items:
            item = dict(item)
            item.setdefault("type", "message")
            item.setdefault("id", "msg_" + secrets.token_hex(16))
            if item["type"] == "message":
                item.setdefault("status", "completed")
            stored.append(item)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            (last,) = self._db.execute("SELECT coalesce(max(seq), 0) FROM items "
                                       "WHERE conversation = ?", (conversation,)).fetchone()
            self._db.executemany("INSERT INTO items VALUES (?, ?, ?, ?)", [
                (conversation, last + n, item["id"], json.dumps(item))
                for n, item in enumerate(stored, 1)])
            self._db.execute("COMMIT")
        return stored

    def page(self, conversation: str, limit: int, order: str, after: str | None,
             ) -> tuple[list[dict[str, Any]], bool]:
        direction = "ASC" if order == "asc" else "DESC"
        with self._lock:
            start = None
            if after is not None:
                row = self._db.execute("SELECT seq FROM items WHERE conversation = ? AND id = ?",
                                       (conversation, after)).fetchone()
                start = row[0] if row else None
            bound = "" if start is None else ("AND seq > ?" if order == "asc" else "AND seq < ?")
            rows = self._db.execute(
                f"SELECT item FROM items WHERE conversation = ? {bound} "
                f"ORDER BY seq {direction} LIMIT ?",
                (conversation, *(() if start is None else (start,)), limit + 1)).fetchall()
        items = [json.loads(row[0]) for row in rows]
        return items[:limit], len(items) > limit


def floor_app(path: str) -> Any:
    """The items-only Starlette application on ``path``."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    store = FloorStore(path)

    async def create(request: Request) -> JSONResponse:
        body = await request.json()
        record = await run_in_threadpool(store.create, body.get("metadata") or {})
        if body.get("items"):
            await run_in_threadpool(store.add, record["id"], body["items"])
        return JSONResponse(record)

    async def add(request: Request) -> JSONResponse:
        body = await request.json()
        stored = await run_in_threadpool(store.add, request.path_params["id"], body["items"])
        return JSONResponse({"object": "list", "data": stored, "first_id": stored[0]["id"],
                             "last_id": stored[-1]["id"], "has_more": False})

    async def listing(request: Request) -> JSONResponse:
        query = request.query_params
        items, more = await run_in_threadpool(
            store.page, request.path_params["id"], int(query.get("limit", 20)),
            query.get("order", "desc"), query.get("after"))
        return JSONResponse({"object": "list", "data": items,
                             "first_id": items[0]["id"] if items else None,
                             "last_id": items[-1]["id"] if items else None, "has_more": more})

    one = "/v1/conversations/{id}"
    return Starlette(routes=[Route("/v1/conversations", create, methods=["POST"]),
                             Route(one + "/items", add, methods=["POST"]),
                             Route(one + "/items", listing, methods=["GET"])])


def _serve_floor(path: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.server_floor", "--serve-floor", path],
        stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
        if found:
            threading.Thread(target=process.stderr.read, daemon=True).start()
            port = int(found.group(1).rsplit(":", 1)[1])
            for _ in range(200):  # it prints its address just before uvicorn binds it
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    return process, found.group(1)
                except OSError:
                    time.sleep(0.05)
    raise SystemExit("error: the floor server did not start")


def _run_floor(path: str) -> int:
    import uvicorn

    with socket.socket() as probe:  # a free port, then uvicorn binds it as `serve` does
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    print(f"running on http://127.0.0.1:{port}", file=sys.stderr)
    uvicorn.run(floor_app(path), host="127.0.0.1", port=port, log_level="warning")
    return 0


async def _conversation(base: str, turns: int) -> list[float]:
    """Seconds per turn (get_items, then add_items of two items) through the SDK's session."""
    from agents.memory import OpenAIConversationsSession
    from openai import AsyncOpenAI

    samples: list[float] = []
    async with AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0) as client:
        session = OpenAIConversationsSession(openai_client=client)
        for turn in range(turns):
            start = time.perf_counter()
            held = await session.get_items()
            assert len(held) == 2 * turn, (len(held), turn)
            await session.add_items(_items(turn))  # type: ignore[arg-type]
            samples.append(time.perf_counter() - start)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--conversations", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--serve-floor", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_floor:
        return _run_floor(args.serve_floor)
    lanes: dict[str, list[float]] = {"items_only": [], "turnledger": []}
    with tempfile.TemporaryDirectory(prefix="tl-bench-floor-") as tmp:
        ours, ours_url = _serve(f"sqlite:///{tmp}/turnledger.db")
        floor, floor_url = _serve_floor(f"{tmp}/floor.db")
        try:
            for _ in range(args.conversations):
                lanes["items_only"] += asyncio.run(_conversation(floor_url, args.turns))
                lanes["turnledger"] += asyncio.run(_conversation(ours_url, args.turns))
        finally:
            for process in (ours, floor):
                process.send_signal(signal.SIGTERM)
                process.wait(30)
    ms = 1000.0
    rows = {name: {"p50_ms": statistics.median(s) * ms, "p99_ms": _percentile(s, 0.99) * ms,
                   "total_s": sum(s)} for name, s in lanes.items()}
    ratio = rows["turnledger"]["p50_ms"] / rows["items_only"]["p50_ms"]
    total_ratio = rows["turnledger"]["total_s"] / rows["items_only"]["total_s"]
    result = {"benchmark": "server_floor", "store": "sqlite", "turns": args.turns,
              "conversations": args.conversations, "lanes": rows, "ratio_p50": ratio,
              "ratio_total": total_ratio, "goal_ratio": 1.3,
              "python": platform.python_version(), "machine": platform.machine(),
              "cpus": os.cpu_count(), "load": os.getloadavg()[0]}
    print(f"OpenAIConversationsSession: get_items + add_items(2) per turn, {args.turns} turns x "
          f"{args.conversations} conversations, SQLite, loopback")
    print(f"{'':12} {'p50 ms':>8} {'p99 ms':>8} {'total s':>8}")
    for name, row in rows.items():
        print(f"{name:12} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f} {row['total_s']:8.2f}")
    print(f"ratio p50 {ratio:.2f}x, total {total_ratio:.2f}x (goal <= 1.3x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
