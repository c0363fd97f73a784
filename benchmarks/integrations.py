"""Benchmark: turnledger in the runtimes people use, side by side in one run (issue 10).

Three comparisons, each a table on stdout and a section of ``results/integrations.json``. Every
ratio is *theirs / ours* of the times measured in the same run, interleaved round by round, so
machine load weighs on both sides alike: above 1, turnledger is faster.

1. **Append one turn** (five Responses items: user text, reasoning, function call, its 1.5 KB
   output, assistant text), same durability on both sides:
   - SQLite (a WAL file each, SQLite's default ``synchronous``): the SDK's
     ``SQLiteSession.add_items(turn)`` vs turnledger's ``TurnledgerSession.add_items(turn)``
     (conversion + one transaction, in a worker thread like the SDK's) and
     ``Session.extend(turn)`` (messages already converted), and ``Session.append`` message by
     message (one transaction each: what a turn cost before ``extend``), these two also called
     through ``asyncio.to_thread`` like the SDK's own I/O (a blocking call on the event loop's
     thread was measured at up to 3x its time in a worker: a COMMIT there waits on the
     threads the process started, whoever's code it is);
   - on SQLite also the **floor**: the very records ``extend`` wrote for that turn, inserted by
     the bare ``sqlite3`` driver in one ``BEGIN IMMEDIATE`` ... ``COMMIT`` into a table of the
     same schema, same journal and ``synchronous``, through ``asyncio.to_thread``: what a turn
     costs with no turnledger code at all (no decision, encoding, chain or compression), so
     "speed vs SDK" of this row bounds what any turnledger code can reach;
   - PostgreSQL (``synchronous_commit`` on, the server default): the SDK's
     ``SQLAlchemySession`` on asyncpg vs the same three turnledger calls.
2. **Read and restore** at 100 / 1,000 / 10,000 turns, SQLite and PostgreSQL:
   ``get_items()`` (the SDK's default: every item; turnledger: the window its profile keeps),
   ``get_items(limit=100)``, and a restore (open the store and the session afresh, as a new
   process does, then ``get_items()``). turnledger uses the default profile (50 turns,
   32,000-token budget); the item counts returned are in the table.
3. **Trimming in an agent loop**: per model call, LangChain's ``trim_messages`` over the
   whole message list (``strategy="last"``, ``max_tokens=32000``, ``start_on="human"``,
   ``count_tokens_approximately``) vs ``TurnledgerTrimmer.window`` (records the new messages on
   SQLite, decides and records the trims, returns the window) after 100 / 1,000 / 10,000 turns.

Run from the project root::

    .venv/bin/python -m benchmarks.integrations            # full run, writes the JSON
    .venv/bin/python -m benchmarks.integrations --quick    # smoke run (100 turns), JSON to tmp
    .venv/bin/python -m benchmarks.integrations --parts append   # one part, JSON to tmp

``--postgres URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``; each run uses fresh
schemas and drops them), ``--no-postgres`` to skip PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import random
import sqlite3
import statistics
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgpack

os.environ.setdefault("OPENAI_API_KEY", "sk-benchmark-no-network")

import turnledger as tl
from turnledger.integrations.openai_agents import (
    TurnledgerSession,
    from_responses_items,
)

RESULTS = Path(__file__).parent / "results" / "integrations.json"
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
Item = dict[str, Any]


# --- workload -------------------------------------------------------------------------------

class Text:
    """Deterministic filler text."""

    def __init__(self, seed: int = 20_261_130) -> None:
        self.random = random.Random(seed)
        self.words = ["turn", "ledger", "agent", "tool", "result", "context", "window", "log",
                      "event", "store", "trim", "budget", "message", "call", "reply"]

    def __call__(self, size: int) -> str:
        out: list[str] = []
        while sum(map(len, out)) + len(out) < size:
            out.append(self.random.choice(self.words))
        return " ".join(out)[:size]


def turn_items(n: int, text: Text) -> list[Item]:
    """One agent turn as the OpenAI Agents SDK records it (five Responses items)."""
    return [
        {"role": "user", "content": f"Question {n}: {text(200)}"},
        {"type": "reasoning", "id": f"rs_{n}",
         "summary": [{"type": "summary_text", "text": text(300)}]},
        {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": "search",
         "arguments": json.dumps({"q": text(40)}), "status": "completed"},
        {"type": "function_call_output", "call_id": f"call_{n}", "output": text(1500)},
        {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": text(400), "annotations": []}]},
    ]


def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers], *[[_fmt(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(cells[0], widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells[1:]]
    return "\n".join(lines) + "\n"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# --- the two sides ----------------------------------------------------------------------------

@dataclass
class Backend:
    """Where both sides store: turnledger's URL and the SDK's session factory."""

    name: str
    ours_url: str
    theirs: Callable[[str], Any]
    cleanup: list[Callable[[], Awaitable[None] | None]] = field(default_factory=list)


def sqlite_backend(directory: Path) -> Backend:
    from agents import SQLiteSession

    path = directory / "sdk.db"
    return Backend("SQLite", f"sqlite:///{directory / 'turnledger.db'}",
                   lambda sid: SQLiteSession(sid, db_path=path))


def postgres_backend(url: str, tag: str) -> Backend:
    import psycopg
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
    from sqlalchemy.ext.asyncio import create_async_engine

    ours_schema, theirs_schema = f"bench_int_{tag}_tl", f"bench_int_{tag}_sdk"
    parts = urllib.parse.urlsplit(url)
    conninfo = (f"host={parts.hostname} port={parts.port or 5432} user={parts.username} "
                f"dbname={parts.path.lstrip('/')}")
    with psycopg.connect(conninfo, autocommit=True) as pg:
        pg.execute(f'CREATE SCHEMA IF NOT EXISTS "{theirs_schema}"')
    async_url = url.replace("postgresql://", "postgresql+asyncpg://", 1)

    def theirs(sid: str) -> Any:
        engine = create_async_engine(
            async_url, connect_args={"server_settings": {"search_path": theirs_schema}}
        )
        return SQLAlchemySession(sid, engine=engine, create_tables=True)

    def drop() -> None:
        with psycopg.connect(conninfo, autocommit=True) as pg:
            for schema in (ours_schema, theirs_schema):
                pg.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    return Backend("PostgreSQL", f"{url}?schema={ours_schema}", theirs, [drop])


async def _close_theirs(session: Any) -> None:
    engine = getattr(session, "_engine", None)
    if engine is not None:
        await engine.dispose()
    elif hasattr(session, "close"):
        session.close()


# --- 1. append one turn ---------------------------------------------------------------------

async def bench_append(backend: Backend, rounds: int, per_round: int) -> list[dict[str, Any]]:
    """Per-turn time of each way to append a turn, interleaved round by round."""
    text = Text()
    times: dict[str, list[float]] = {k: [] for k in
                                     ("sdk", "add_items", "extend", "append x5")}
    n = 0
    floor = _Floor(backend.ours_url) if backend.name == "SQLite" else None
    if floor is not None:
        times["floor"] = []
    with tl.open_store(backend.ours_url) as store:
        theirs = backend.theirs("append-sdk")
        ours = TurnledgerSession("append-ours", store)
        plain = store.start_session()
        one_by_one = store.start_session()
        await ours.get_items()  # opens the session, as a runtime's first call does
        for _ in range(rounds):
            turns = [turn_items(n + i, text) for i in range(per_round)]
            messages = [from_responses_items(t) for t in turns]
            n += per_round
            times["sdk"].append(await _timed_async(theirs.add_items, turns))
            times["add_items"].append(await _timed_async(ours.add_items, turns))
            # In a worker thread, as the SDK's add_items and ours run: a blocking call on the
            # event loop's thread pays for the threads this process started (a bare sqlite3
            # COMMIT there takes ~2 ms once any worker thread has run, ~0.1 ms in the worker).
            times["extend"].append(await _timed_async(_in_thread(plain.extend), messages))
            times["append x5"].append(await _timed_async(
                _in_thread(lambda m: [one_by_one.append(x) for x in m]), messages))
            if floor is not None:
                times["floor"].append(await _timed_async(_in_thread(floor.insert),
                                                         floor.turns(plain.id, per_round)))
        await _close_theirs(theirs)
        if floor is not None:
            floor.close()
    sdk = statistics.median(times["sdk"]) / per_round
    rows = []
    for kind, samples in times.items():
        per_turn = statistics.median(samples) / per_round
        rows.append({"backend": backend.name, "call": kind, "ms_per_turn": per_turn * 1e3,
                     "sdk_over_this": sdk / per_turn})
    return rows


class _Floor:
    """The driver floor on SQLite: turnledger's own records of a turn, inserted raw."""

    def __init__(self, ours_url: str) -> None:
        ours = Path(ours_url.removeprefix("sqlite:///"))
        self._source = sqlite3.connect(ours)
        self._path = ours.with_name("floor.db")
        self._db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._seen = 0
        self._schema_copied = False

    def turns(self, session_id: str, count: int) -> list[list[tuple[Any, ...]]]:
        """The records of the newest ``count`` turns of ``session_id``, a list per turn
        (read back from turnledger's file after its ``extend``: the same bytes)."""
        if not self._schema_copied:
            (schema,) = self._source.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'stored_events'").fetchone()
            self._db.execute(schema)
            self._schema_copied = True
        rows = self._source.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events "
            "WHERE originator_id = ? AND originator_version > ? ORDER BY originator_version",
            (uuid.UUID(session_id).hex, self._seen)).fetchall()
        self._seen = rows[-1][1]
        batches: list[list[tuple[Any, ...]]] = []
        for row in rows:  # a turn starts at its user message (what start_session wrote: skip)
            if row[2].endswith("MessageAppended") and _starts_turn(row[3]):
                batches.append([])
            if batches:
                batches[-1].append(row)
        assert len(batches) == count, (len(batches), count)
        return batches

    def insert(self, rows: list[tuple[Any, ...]]) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        self._db.executemany("INSERT INTO stored_events VALUES (?, ?, ?, ?)", rows)
        self._db.execute("COMMIT")

    def close(self) -> None:
        self._source.close()
        self._db.close()


def _starts_turn(state: bytes) -> bool:
    """Whether a `MessageAppended` record holds a user message (opens a turn)."""
    from turnledger.store.packing import open_envelope

    _, payload = open_envelope(msgpack.unpackb(state))
    assert isinstance(payload, bytes)
    message = msgpack.unpackb(payload, timestamp=3)["message"]
    return message.get("t") == "chat" and message["message"]["role"] == "user"


async def _timed_async(call: Callable[[Any], Awaitable[Any]], batches: list[Any]) -> float:
    start = time.perf_counter()
    for batch in batches:
        await call(batch)
    return time.perf_counter() - start


def _in_thread(call: Callable[[Any], Any]) -> Callable[[Any], Awaitable[Any]]:
    """``call`` run in a worker thread, awaited (what the SDK's sessions do with their I/O)."""
    return functools.partial(asyncio.to_thread, call)


# --- 2. read and restore --------------------------------------------------------------------

async def _fill(backend: Backend, turns: int, name: str) -> None:
    """``turns`` turns on both sides, written 100 turns per transaction."""
    text = Text(turns)
    theirs = backend.theirs(name)
    with tl.open_store(backend.ours_url) as store:
        ours = TurnledgerSession(name, store)
        for first in range(0, turns, 100):
            items = [i for n in range(first, min(first + 100, turns)) for i in turn_items(n, text)]
            await theirs.add_items(items)
            await ours.add_items(items)
    await _close_theirs(theirs)


async def _median_async(make: Callable[[], Awaitable[Any]], repeat: int) -> tuple[float, Any]:
    samples, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = await make()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), result


async def bench_read(backend: Backend, sizes: Sequence[int], repeat: int) -> list[dict[str, Any]]:
    rows = []
    for turns in sizes:
        name = f"read-{turns}"
        await _fill(backend, turns, name)
        theirs = backend.theirs(name)
        with tl.open_store(backend.ours_url) as store:
            ours = TurnledgerSession(name, store)
            await ours.get_items()  # opened; trims recorded once
            for label, limit in (("get_items()", None), ("get_items(100)", 100)):
                t_theirs, got_theirs = await _median_async(
                    functools.partial(theirs.get_items, limit), repeat)
                t_ours, got_ours = await _median_async(
                    functools.partial(ours.get_items, limit), repeat)
                rows.append(_read_row(backend, turns, label, t_theirs, got_theirs, t_ours,
                                      got_ours))
        await _close_theirs(theirs)
        t_theirs, got_theirs = await _median_async(
            functools.partial(_restore_theirs, backend, name), repeat)
        t_ours, got_ours = await _median_async(
            functools.partial(_restore_ours, backend, name), repeat)
        rows.append(_read_row(backend, turns, "restore + get_items()", t_theirs, got_theirs,
                              t_ours, got_ours))
    return rows


def _read_row(backend: Backend, turns: int, call: str, t_theirs: float, got_theirs: Any,
              t_ours: float, got_ours: Any) -> dict[str, Any]:
    return {"backend": backend.name, "turns": turns, "call": call,
            "sdk_ms": t_theirs * 1e3, "sdk_items": len(got_theirs),
            "turnledger_ms": t_ours * 1e3, "turnledger_items": len(got_ours),
            "sdk_over_turnledger": t_theirs / t_ours}


async def _restore_theirs(backend: Backend, name: str) -> list[Item]:
    session = backend.theirs(name)
    try:
        items: list[Item] = await session.get_items()
    finally:
        await _close_theirs(session)
    return items


async def _restore_ours(backend: Backend, name: str) -> list[Item]:
    with tl.open_store(backend.ours_url) as store:
        return await TurnledgerSession(name, store).get_items()


# --- 3. trim_messages in an agent loop ------------------------------------------------------

def bench_trim(directory: Path, sizes: Sequence[int], loop_turns: int) -> list[dict[str, Any]]:
    """Per model call: LangChain's trim_messages over the history vs turnledger's trimmer."""
    from langchain_core.messages import trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    from turnledger.integrations.langchain import TurnledgerTrimmer

    rows = []
    for turns in sizes:
        text = Text(turns)
        messages = [m for n in range(turns) for m in _lc_turn(n, text)]
        with tl.open_store(f"sqlite:///{directory / f'trim-{turns}.db'}") as store:
            trimmer = TurnledgerTrimmer(store, session_id=f"loop-{turns}")
            trimmer.window(messages)  # the thread so far, recorded once
            theirs, ours = [], []
            for n in range(turns, turns + loop_turns):
                user, call, result, answer = _lc_turn(n, text)
                for step in ([user], [call, result]):
                    messages.extend(step)
                    start = time.perf_counter()
                    window = trim_messages(messages, max_tokens=32_000, strategy="last",
                                           token_counter=count_tokens_approximately,
                                           start_on="human", include_system=True)
                    theirs.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    ours_window = trimmer.window(messages)
                    ours.append(time.perf_counter() - start)
                messages.append(answer)
        t_theirs, t_ours = statistics.median(theirs), statistics.median(ours)
        rows.append({"turns": turns, "messages": len(messages),
                     "trim_messages_ms": t_theirs * 1e3, "trim_messages_kept": len(window),
                     "turnledger_ms": t_ours * 1e3, "turnledger_kept": len(ours_window),
                     "trim_messages_over_turnledger": t_theirs / t_ours})
    return rows


def _lc_turn(n: int, text: Text) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    call = {"id": f"call_{n}", "name": "search", "args": {"q": text(40)}}
    return [HumanMessage(f"Question {n}: {text(200)}"), AIMessage(text(300), tool_calls=[call]),
            ToolMessage(text(1500), tool_call_id=f"call_{n}"), AIMessage(text(400))]


# --- main -----------------------------------------------------------------------------------

async def run(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    sizes = [100] if args.quick else [100, 1_000, 10_000]
    backends = [sqlite_backend(directory)]
    if not args.no_postgres:
        backends.append(postgres_backend(args.postgres, f"{os.getpid()}"))
    parts = set(args.parts.split(","))
    results: dict[str, Any] = {"append": [], "read": [], "trim": []}
    try:
        for backend in backends:
            rounds, per_round = (2, 5) if args.quick else (7, 30)
            if "append" in parts:
                results["append"] += await bench_append(backend, rounds, per_round)
            if "read" in parts:
                results["read"] += await bench_read(backend, sizes, 3 if args.quick else 5)
    finally:
        for backend in backends:
            for step in backend.cleanup:
                done = step()
                if done is not None:
                    await done
    if "trim" in parts:
        results["trim"] = bench_trim(directory, sizes, 3 if args.quick else 10)
    return results


def report(results: dict[str, Any]) -> str:
    out = _table("1. Append one turn (5 Responses items); SDK time / this time",
                 ["backend", "call", "ms/turn", "speed vs SDK"],
                 [[r["backend"], r["call"], r["ms_per_turn"], r["sdk_over_this"]]
                  for r in results["append"]])
    out += "\n" + _table(
        "2. Read and restore; SDK time / turnledger time",
        ["backend", "turns", "call", "SDK ms", "SDK items", "tl ms", "tl items", "ratio"],
        [[r["backend"], r["turns"], r["call"], r["sdk_ms"], r["sdk_items"], r["turnledger_ms"],
          r["turnledger_items"], r["sdk_over_turnledger"]] for r in results["read"]])
    out += "\n" + _table(
        "3. Per model call in an agent loop: trim_messages time / turnledger time",
        ["turns", "messages", "trim_messages ms", "kept", "turnledger ms", "kept", "ratio"],
        [[r["turns"], r["messages"], r["trim_messages_ms"], r["trim_messages_kept"],
          r["turnledger_ms"], r["turnledger_kept"], r["trim_messages_over_turnledger"]]
         for r in results["trim"]])
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="100 turns only; JSON to tmp")
    parser.add_argument("--postgres", default=PG_DEFAULT)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--parts", default="append,read,trim",
                        help="comma-separated parts to run (a partial run writes to tmp)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tl-bench-int-") as tmp:
        directory = Path(tmp)
        results = asyncio.run(run(args, directory))
        print(report(results))
        partial = args.quick or set(args.parts.split(",")) != {"append", "read", "trim"}
        output = Path(tempfile.gettempdir()) / "integrations.json" if partial else RESULTS
        output.parent.mkdir(parents=True, exist_ok=True)
        meta = {"when": datetime.now(UTC).isoformat(timespec="seconds"),
                "command": "python -m benchmarks.integrations"
                + (" --quick" * args.quick) + f" --parts {args.parts}",
                "python": platform.python_version(), "machine": platform.machine(),
                "cpus": os.cpu_count(), "sqlite_synchronous_default": _sqlite_synchronous()}
        output.write_text(json.dumps({**meta, **results}, indent=2) + "\n", encoding="utf-8")
        print(f"results: {output}")


def _sqlite_synchronous() -> int:
    with contextlib.closing(sqlite3.connect(":memory:")) as connection:
        value: int = connection.execute("PRAGMA synchronous").fetchone()[0]
    return value


if __name__ == "__main__":
    main()

