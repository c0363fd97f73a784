"""Benchmark: turnledger side by side with its peers on the same turns (issue 12, point 7).

The same deterministic agent turns (`benchmarks.session.Workload`: a user message, one or two
tool calls, their 1-2 KB results, an assistant answer) are given to:

- **turnledger** on ``memory://`` (the same calls, nothing written to disk) and on SQLite,
  ``synchronous=full`` (the default) and ``synchronous=normal``
  (ADR-0037): ``Session.prepare_request()`` with the default profile (turn limit 50, a
  32,000-token budget) — it trims to the budget, sweeps orphans and *records* a
  ``RequestPrepared`` (one transaction, one fsync with ``full``);
- **LangChain** ``trim_messages`` (langchain_core) on the same history as LangChain messages,
  ``max_tokens=32000``, ``strategy="last"``, ``start_on="human"``, ``include_system=True``
  and a token counter with turnledger's estimate (UTF-8 bytes / 4): a pure function over a
  list already in memory, it stores nothing;
- the **OpenAI Agents SDK** ``SQLiteSession``: ``get_items(limit=N)`` with N the number of
  messages turnledger's request holds (what a run reads from its session memory: the SDK does
  not trim to a budget, and writes nothing on a read);
- **LangGraph** ``SqliteSaver`` under a one-node ``StateGraph(MessagesState)`` invoked once per
  turn: per call ``get_tuple`` (the latest checkpoint: what a graph run loads) followed by
  ``trim_messages`` as above. LangGraph stores the whole message list in every checkpoint, so
  its disk grows with the square of the session: it runs only up to ``--langgraph-max`` turns.

Measured per side and session length (100 / 1,000 / 10,000 turns by default): the median cost
of one prepare call (rounds interleaved across sides), disk per turn (database files after the
build; ours with one ``prepare_request`` per turn, as an agent loop makes at least one), and the
restore cost (turnledger: ``Store.restore`` from a new store object; the SDK:
``get_items(limit=N)`` on a new session object; LangGraph: ``get_tuple`` on a new saver).

Run from the project root::

    .venv/bin/python -m benchmarks.peers                    # 100, 1,000, 10,000 turns
    .venv/bin/python -m benchmarks.peers --turns 100,1000   # quicker

Prints the tables and the fairness notes; writes ``benchmarks/results/peers.json`` and one
PNG per comparison next to it (``peers_prepare.png``, ``peers_disk.png``,
``peers_restore.png``). Needs the ``bench`` extra (langchain-core, openai-agents, langgraph,
langgraph-checkpoint-sqlite, matplotlib).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.session import Workload
from turnledger.domain.estimate import FRAMING_TOKENS, utf8_len
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ConversationMessage,
    ToolResults,
)
from turnledger.store.session import Session, Store, open_store

RESULTS = Path(__file__).parent / "results" / "peers.json"
BUDGET = 32_000

FAIRNESS = """\
Fairness notes (what each side does per call):
- turnledger (memory://): the same prepare_request, its events kept in the process's memory.
- turnledger: trims to the budget when needed, sweeps orphans, renders the request, and RECORDS
  a RequestPrepared event in one SQLite transaction (synchronous=full: one fsync per call;
  normal: no fsync on commit, survives a process crash, not a power cut).
- LangChain trim_messages: a pure function on messages already in memory; stores nothing,
  restores nothing (the floor of "trim a list"); counter = UTF-8 bytes / 4 like ours.
- Agents SDK SQLiteSession: get_items(limit=N) reads the newest N items (N = the messages of
  turnledger's request) and decodes their JSON; no budget, no trimming, writes nothing; its
  async API runs the query in a worker thread (one event loop for all calls).
- LangGraph SqliteSaver: get_tuple (latest checkpoint, the whole message list unpickled) +
  trim_messages; writes nothing per call. Each checkpoint holds the whole list, so its disk
  grows with the square of the session; runs are limited to --langgraph-max turns.
- Disk per turn: database file(s) after the build, divided by the turns. Ours includes one
  RequestPrepared per turn and the snapshots; the SDK stores items only; LangGraph its
  checkpoints (one graph invocation per turn)."""


def _turns(n: int) -> list[tuple[ConversationMessage, ...]]:
    workload = Workload(seed=12)
    return [workload.turn(i) for i in range(n)]


def _estimate(text: str) -> int:
    """Turnledger's text estimate (R20): ceil(UTF-8 bytes / 4)."""
    return -(-utf8_len(text) // 4)


# --- turnledger -------------------------------------------------------------------------------

class Ours:
    """A session of the turns in a SQLite file; prepare_request per call."""

    def __init__(self, tmp: Path, turns: list[tuple[ConversationMessage, ...]]) -> None:
        self.path = tmp / "turnledger.db"
        with open_store(self._url("normal")) as store:  # building: same bytes, faster
            session = store.start_session()
            for turn in turns:
                for message in turn:
                    session.append(message)
                session.prepare_request()
            self.session_id = session.id
            self.window = len(session.prepare_request().messages)
        self.disk = _files_size(self.path)
        self.stores: dict[str, Store] = {}
        self.sessions: dict[str, Session] = {}
        self.stores["memory"] = open_store("memory://")
        memory = self.stores["memory"].start_session()
        for turn in turns:
            memory.extend(turn)
            memory.prepare_request()
        self.sessions["memory"] = memory
        for sync in ("full", "normal"):  # one copy each: two writers on one session conflict
            for suffix in ("", "-wal"):
                if Path(f"{self.path}{suffix}").exists():
                    shutil.copy(f"{self.path}{suffix}", f"{self.path}.{sync}{suffix}")
            self.stores[sync] = open_store(self._url(sync, copy=True))
            self.sessions[sync] = self.stores[sync].restore(self.session_id)

    def _url(self, sync: str, *, copy: bool = False) -> str:
        path = f"{self.path}.{sync}" if copy else self.path
        return f"sqlite:///{path}?synchronous={sync}"

    def prepare(self, sync: str) -> Callable[[], object]:
        return self.sessions[sync].prepare_request

    def restore(self) -> float:
        with open_store(self._url("full")) as store:
            started = time.perf_counter()
            store.restore(self.session_id)
            return time.perf_counter() - started

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


# --- LangChain ----------------------------------------------------------------------------

def _langchain_messages(turns: Sequence[tuple[ConversationMessage, ...]]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out: list[Any] = []
    for turn in turns:
        for item in turn:
            if isinstance(item, Chat):
                role = item.message.role
                cls = HumanMessage if role == "user" else AIMessage
                out.append(cls(content=item.message.content))
            elif isinstance(item, AssistantToolCalls):
                calls = [{"name": c.name, "args": json.loads(c.arguments), "id": c.id}
                         for c in item.tool_calls]
                out.append(AIMessage(content=item.text or "", tool_calls=calls))
            elif isinstance(item, ToolResults):
                out.extend(ToolMessage(content=r.content, tool_call_id=r.tool_call_id)
                           for r in item.results)
    return out


def _count(messages: list[Any]) -> int:
    """Turnledger's estimate for LangChain messages: 4 framing tokens per message plus UTF-8
    bytes / 4 of its text and tool-call arguments."""
    total = 0
    for m in messages:
        total += FRAMING_TOKENS + _estimate(
            m.content if isinstance(m.content, str) else str(m.content)
        )
        for call in getattr(m, "tool_calls", None) or ():
            total += _estimate(json.dumps(call["args"]))
    return total


def _trim(messages: list[Any]) -> list[Any]:
    from langchain_core.messages import trim_messages

    trimmed: list[Any] = trim_messages(
        messages, max_tokens=BUDGET, token_counter=_count, strategy="last",
        start_on="human", include_system=True,
    )
    return trimmed


# --- OpenAI Agents SDK ----------------------------------------------------------------------

def _sdk_items(turn: tuple[ConversationMessage, ...]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for item in turn:
        if isinstance(item, Chat):
            items.append({"role": item.message.role, "content": item.message.content})
        elif isinstance(item, AssistantToolCalls):
            if item.text:
                items.append({"role": "assistant", "content": item.text})
            items.extend({"type": "function_call", "call_id": c.id, "name": c.name,
                          "arguments": c.arguments} for c in item.tool_calls)
        elif isinstance(item, ToolResults):
            items.extend({"type": "function_call_output", "call_id": r.tool_call_id,
                          "output": r.content} for r in item.results)
    return items


class Sdk:
    def __init__(self, tmp: Path, turns: Sequence[tuple[ConversationMessage, ...]],
                 window: int) -> None:
        from agents import SQLiteSession

        self.path = tmp / "agents.db"
        self.window = window
        self.loop = asyncio.new_event_loop()
        self.session = SQLiteSession("bench", self.path)
        for turn in turns:
            self.loop.run_until_complete(self.session.add_items(_sdk_items(turn)))  # type: ignore[arg-type]
        self.disk = _files_size(self.path)

    def prepare(self) -> object:
        return self.loop.run_until_complete(self.session.get_items(limit=self.window))

    def restore(self) -> float:
        from agents import SQLiteSession

        session = SQLiteSession("bench", self.path)
        started = time.perf_counter()
        self.loop.run_until_complete(session.get_items(limit=self.window))
        elapsed = time.perf_counter() - started
        session.close()
        return elapsed

    def close(self) -> None:
        self.session.close()
        self.loop.close()


# --- LangGraph ------------------------------------------------------------------------------

class Graph:
    def __init__(self, tmp: Path, turns: Sequence[tuple[ConversationMessage, ...]]) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import START, MessagesState, StateGraph

        self.path = tmp / "langgraph.db"
        self.connection = sqlite3.connect(self.path, check_same_thread=False)
        self.saver = SqliteSaver(self.connection)
        builder = StateGraph(MessagesState)
        builder.add_node("agent", lambda state: {})
        builder.add_edge(START, "agent")
        graph = builder.compile(checkpointer=self.saver)
        self.config: Any = {"configurable": {"thread_id": "bench"}}
        for turn in turns:
            graph.invoke({"messages": _langchain_messages([turn])}, self.config)
        self.disk = _files_size(self.path)

    def prepare(self) -> object:
        checkpoint = self.saver.get_tuple(self.config)
        assert checkpoint is not None
        return _trim(checkpoint.checkpoint["channel_values"]["messages"])

    def restore(self) -> float:
        from langgraph.checkpoint.sqlite import SqliteSaver

        with sqlite3.connect(self.path, check_same_thread=False) as connection:
            started = time.perf_counter()
            SqliteSaver(connection).get_tuple(self.config)
            return time.perf_counter() - started

    def close(self) -> None:
        self.connection.close()


# --- measuring ------------------------------------------------------------------------------

def _files_size(path: Path) -> int:
    """The bytes of a SQLite database once its write-ahead log is checkpointed into it."""
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())


def _per_call(fn: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls


def measure(n: int, rounds: int, calls: int, langgraph_max: int) -> list[dict[str, Any]]:
    """Every side on ``n`` turns; one row per side."""
    turns = _turns(n)
    with tempfile.TemporaryDirectory() as tmp:
        built = time.perf_counter()
        ours = Ours(Path(tmp), turns)
        print(f"  {n} turns: turnledger built in {time.perf_counter() - built:.1f} s",
              flush=True)
        lc_messages = _langchain_messages(turns)
        sdk = Sdk(Path(tmp), turns, ours.window)
        graph = Graph(Path(tmp), turns) if n <= langgraph_max else None
        sides: dict[str, Callable[[], object]] = {
            "turnledger (memory://)": ours.prepare("memory"),
            "turnledger (SQLite, synchronous=full)": ours.prepare("full"),
            "turnledger (SQLite, synchronous=normal)": ours.prepare("normal"),
            "LangChain trim_messages": lambda: _trim(lc_messages),
            "Agents SDK SQLiteSession.get_items(limit)": sdk.prepare,
        }
        if graph is not None:
            sides["LangGraph SqliteSaver get_tuple + trim_messages"] = graph.prepare
        times: dict[str, list[float]] = {name: [] for name in sides}
        for fn in sides.values():
            fn()  # warm
        for _ in range(rounds):
            for name, fn in sides.items():
                times[name].append(_per_call(fn, calls))
        restores = {"ours": [], "sdk": [], "graph": []}  # type: dict[str, list[float]]
        for _ in range(max(3, rounds)):
            restores["ours"].append(ours.restore())
            restores["sdk"].append(sdk.restore())
            if graph is not None:
                restores["graph"].append(graph.restore())
        disk = {"ours": ours.disk, "sdk": sdk.disk, "graph": graph.disk if graph else None}
        ours.close()
        sdk.close()
        if graph is not None:
            graph.close()
    trim = statistics.median(times["LangChain trim_messages"])
    rows = []
    for name, values in times.items():
        median = statistics.median(values)
        key = ("ours" if name.startswith("turnledger (SQLite") else "sdk" if "SDK" in name
               else "graph" if "LangGraph" in name else None)
        rows.append({
            "turns": n,
            "side": name,
            "prepare_us": round(median * 1e6, 1),
            "speed_vs_trim_messages": round(trim / median, 2),
            "disk_kb_per_turn": round(disk[key] / n / 1024, 2)
            if key and disk[key] is not None else None,
            "restore_ms": round(statistics.median(restores[key]) * 1000, 2)
            if key and restores[key] else None,
        })
    return rows


def _table(rows: Sequence[dict[str, Any]]) -> str:
    columns = ["turns", "side", "prepare_us", "speed_vs_trim_messages", "disk_kb_per_turn",
               "restore_ms"]
    cells = [[("-" if row[c] is None else str(row[c])) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], folder: Path) -> list[Path]:
    """One PNG per comparison (prepare cost, disk per turn, restore), next to the JSON."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for metric, label, name in (
        ("prepare_us", "µs per prepare call", "peers_prepare.png"),
        ("disk_kb_per_turn", "KB on disk per turn", "peers_disk.png"),
        ("restore_ms", "ms to restore the window", "peers_restore.png"),
    ):
        figure, axes = plt.subplots(figsize=(7, 4.2))
        for side in dict.fromkeys(r["side"] for r in rows):
            points = [(r["turns"], r[metric]) for r in rows
                      if r["side"] == side and r[metric] is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                axes.plot(xs, ys, marker="o", label=side)
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("turns in the session")
        axes.set_ylabel(label)
        axes.set_title(f"{label} (python -m benchmarks.peers)")
        axes.legend(fontsize=7)
        axes.grid(True, which="both", alpha=0.3)
        figure.tight_layout()
        path = folder / name
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", default="100,1000,10000",
                        help="session lengths, comma-separated (default 100,1000,10000)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per side")
    parser.add_argument("--calls", type=int, default=20, help="calls per round")
    parser.add_argument("--langgraph-max", type=int, default=100,
                        help="longest session given to LangGraph (its disk is quadratic)")
    parser.add_argument("--output", type=Path, default=RESULTS, help="JSON results file")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for n in (int(t) for t in args.turns.split(",")):
        rows.extend(measure(n, args.rounds, args.calls, args.langgraph_max))
    print("\nPer call: prepare cost (median), disk per turn, restore (median)")
    print(_table(rows))
    print()
    print(FAIRNESS)
    report = {"benchmark": "peers", "python": sys.version.split()[0],
              "platform": platform.platform(), "cpus": os.cpu_count(),
              "budget_tokens": BUDGET, "rounds": args.rounds, "calls": args.calls,
              "fairness": FAIRNESS.splitlines()[1:], "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for path in plot(rows, args.output.parent):
        print(f"written to {path}")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
