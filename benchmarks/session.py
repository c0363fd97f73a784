"""Benchmark: event-sourced sessions — append throughput, prepare_request latency, restore, replay.

Four measurements, each printed as a table and written to JSON:

1. **Append throughput** (events/s) on SQLite (a file in a temp dir) and PostgreSQL: turnledger's
   ``session.append`` of realistic messages (user text, `AssistantToolCalls`, `ToolResults` of
   1-2 KB each, assistant text) against a plain ``eventsourcing`` `Application` with its default
   JSON transcoder saving an equivalent ``MessageAppended`` event
   (`benchmarks.baseline_eventsourcing`). Same batching on both sides: one event per
   transaction, and ten events per transaction. The public `Session` API saves *one command's*
   events per transaction (at most four: a user message crossing the turn limit), so the
   ten-event row for turnledger goes one level down, through what a `Session` itself calls:
   ``execute`` (decide + evolve) for ten appends, then one ``EventStoreBackend.append``.
   The one-event row uses a turn limit of 10^9 so that every append is exactly one event.
2. **prepare_request latency** (µs, median) on sessions of 100, 1,000 and 10,000 turns (user +
   tool call + tool result + assistant), built on ``memory://``, with a profile whose budget
   forces token trimming (``max_context_tokens=8000``) and with the default profile (turn limit
   50, 32,000-token budget). The timed calls are the two of each of the last turns (after the
   user message, after the tool results), as an agent loop makes them; they include the trims
   they trigger and the recording of their events.
3. **Restore** of a 100,000-event session from a SQLite file: ``store.restore(id)`` with the
   snapshots the session wrote (default interval) and from a copy without snapshots.
4. **Replay**: ``backend.read`` of all events, then ``evolve`` into a fresh `SessionState`,
   in events/s, next to OpenHands' *reported* 29.5 ms per 1,000 events (quoted, not measured).

The long session is built through the `Session` API on ``memory://`` (fast, no fsync), then its
stored records — events and snapshots, byte for byte — are copied into the SQLite files in
batches. Run from the project root::

    .venv/bin/python -m benchmarks.session            # full run, writes results/session.json
    .venv/bin/python -m benchmarks.session --quick    # smoke run; JSON to the temp dir

PostgreSQL: ``--postgres URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``); every
run uses fresh schemas ``bench_session_<pid>_*`` and drops them at the end. ``--no-postgres``
skips it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import json
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from benchmarks.baseline_eventsourcing import (
    Conversation,
    ConversationApp,
    message_as_dict,
    open_postgres_baseline,
    open_sqlite_baseline,
)
from turnledger.domain.budget import Route, RuntimeProfile
from turnledger.domain.decider import (
    AppendMessage,
    SessionState,
    StartSession,
    evolve,
    execute,
)
from turnledger.domain.events import DomainEvent
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.store.backend import EventStoreBackend
from turnledger.store.mapper import ZERO_CHAIN
from turnledger.store.session import SNAPSHOT_INTERVAL, Store, open_store

RESULTS = Path(__file__).parent / "results" / "session.json"
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"

# OpenHands' own figure, quoted as a reference point; this benchmark does not run OpenHands.
OPENHANDS_MS_PER_1000 = 29.5

FULL: dict[str, Any] = {
    "append_events": 3000,  # per variant and backend, split over the rounds
    "append_rounds": 5,
    "prepare_sizes": (100, 1_000, 10_000),
    "prepare_sample_turns": 50,
    "long_events": 100_000,
    "restore_repeats_snapshot": 7,
    "restore_repeats_full": 3,
    "replay_repeats": 3,
}
QUICK: dict[str, Any] = {
    "append_events": 200,
    "append_rounds": 2,
    "prepare_sizes": (100, 1_000),
    "prepare_sample_turns": 20,
    "long_events": 10_000,
    "restore_repeats_snapshot": 3,
    "restore_repeats_full": 2,
    "replay_repeats": 2,
}

# Mostly ASCII with some multi-byte words, as in `benchmarks.trim`.
_WORDS = (
    "the", "agent", "reads", "the", "file", "and", "runs", "tests", "then", "fixes", "a",
    "failing", "case", "résumé", "café", "naïve", "déjà", "vu", "—", "ok", "✓", "def",
    "main():", "return", "0", "#", "TODO:", "handle", "error", "path", "retry", "backoff",
)  # fmt: skip


def _now() -> datetime:
    return datetime.now(UTC)


# --- workload -------------------------------------------------------------------------------

class Workload:
    """Deterministic realistic turns: user, assistant tool call(s), tool result(s), assistant."""

    def __init__(self, seed: int = 20_250_601) -> None:
        self._rng = random.Random(seed)
        words: list[str] = []
        length = 0
        while length < 200_000:
            word = self._rng.choice(_WORDS)
            words.append(word)
            length += len(word) + 1
        self._pool = " ".join(words)

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

    def messages(self, count: int, first_turn: int = 0) -> list[ConversationMessage]:
        out: list[ConversationMessage] = []
        turn = first_turn
        while len(out) < count:
            out.extend(self.turn(turn))
            turn += 1
        return out[:count]


# --- helpers --------------------------------------------------------------------------------

def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers], *[[_fmt(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
        )

    out = [title, line(cells[0]), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells[1:])
    return "\n".join(out)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        if value >= 100:
            return f"{value:,.0f}"
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- PostgreSQL -----------------------------------------------------------------------------

class Postgres:
    """Fresh schemas on the benchmark server, all dropped by `drop_all`."""

    def __init__(self, url: str) -> None:
        self.url = url
        parts = urllib.parse.urlsplit(url)
        self.params = {
            "dbname": urllib.parse.unquote(parts.path.lstrip("/")),
            "host": parts.hostname or "localhost",
            "port": str(parts.port or 5432),
            "user": urllib.parse.unquote(parts.username or ""),
            "password": urllib.parse.unquote(parts.password or ""),
        }
        self.schemas: list[str] = []

    def _connect(self) -> Any:
        import psycopg
        import psycopg.conninfo

        params = {k: v for k, v in self.params.items() if v}
        conninfo = psycopg.conninfo.make_conninfo("", connect_timeout=5, **params)
        return psycopg.connect(conninfo, autocommit=True)

    def version(self) -> str:
        with self._connect() as connection:
            row = connection.execute("SHOW server_version").fetchone()
            return str(row[0])

    def new_schema(self, tag: str, create: bool) -> str:
        name = f"bench_session_{os.getpid()}_{tag}"
        self.schemas.append(name)
        if create:
            from psycopg import sql

            with self._connect() as connection:
                connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        return name

    def store_url(self, schema: str) -> str:
        return f"{self.url}?schema={schema}"

    def library_settings(self, schema: str) -> dict[str, str]:
        return {
            "POSTGRES_DBNAME": self.params["dbname"],
            "POSTGRES_HOST": self.params["host"],
            "POSTGRES_PORT": self.params["port"],
            "POSTGRES_USER": self.params["user"],
            "POSTGRES_PASSWORD": self.params["password"],
            "POSTGRES_SCHEMA": schema,
        }

    def drop_all(self) -> list[str]:
        from psycopg import sql

        dropped = []
        with self._connect() as connection:
            for name in self.schemas:
                connection.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                )
                dropped.append(name)
        self.schemas = []
        return dropped


# --- 1. append throughput -------------------------------------------------------------------

class OursOnePerTxn:
    """``session.append``: one message, one event, one transaction (turn limit 10^9)."""

    label = "turnledger session.append"

    def __init__(self, url: str) -> None:
        self.store = open_store(url)
        self.sessions: list[UUID] = []

    def run(self, messages: Sequence[ConversationMessage]) -> tuple[int, int, float, float]:
        session = self.store.start_session(profile=RuntimeProfile(max_history_messages=10**9))
        self.sessions.append(UUID(session.id))
        events = 0
        cpu = time.thread_time()
        start = time.perf_counter()
        for message in messages:
            events += len(session.append(message))
        elapsed = time.perf_counter() - start
        cpu = time.thread_time() - cpu
        assert events == len(messages), "one append must be one event here"
        return events, len(messages), elapsed, cpu

    def snapshots(self) -> int:
        recorder = self.store.backend.snapshot_recorder
        return sum(len(recorder.select_events(u)) for u in self.sessions)

    def close(self) -> None:
        self.store.close()


class OursBatch:
    """What a `Session` does for one command, with ten appends per command: ``execute`` each
    message (decide + evolve), then ONE ``EventStoreBackend.append`` of the ten events."""

    label = "turnledger execute + backend.append"

    def __init__(self, url: str, batch: int) -> None:
        self.store = open_store(url)
        self.batch = batch

    def run(self, messages: Sequence[ConversationMessage]) -> tuple[int, int, float, float]:
        backend: EventStoreBackend = self.store.backend
        state = SessionState()
        uuid = uuid4()
        profile = RuntimeProfile(max_history_messages=10**9)
        start_events = execute(
            state, StartSession(uuid, profile, (), Route("default", "default"), False, _now())
        )
        chain = backend.append(uuid, start_events, prev_chain=ZERO_CHAIN)
        events = transactions = 0
        cpu = time.thread_time()
        start = time.perf_counter()
        for i in range(0, len(messages), self.batch):
            batch: list[DomainEvent] = []
            for message in messages[i : i + self.batch]:
                batch.extend(execute(state, AppendMessage(message, _now())))
            chain = backend.append(uuid, batch, prev_chain=chain)
            events += len(batch)
            transactions += 1
        elapsed = time.perf_counter() - start
        cpu = time.thread_time() - cpu
        return events, transactions, elapsed, cpu

    def snapshots(self) -> int:
        return 0

    def close(self) -> None:
        self.store.close()


class Baseline:
    """`eventsourcing` Application: ``batch`` aggregate method calls, then one ``app.save``."""

    label = "eventsourcing Application (JSON)"

    def __init__(self, app: ConversationApp, batch: int) -> None:
        self.app = app
        self.batch = batch

    def run(self, messages: Sequence[ConversationMessage]) -> tuple[int, int, float, float]:
        dicts = [message_as_dict(m) for m in messages]  # the baseline's native input
        conversation = Conversation()
        self.app.save(conversation)
        events = transactions = 0
        cpu = time.thread_time()
        start = time.perf_counter()
        for i in range(0, len(dicts), self.batch):
            chunk = dicts[i : i + self.batch]
            for offset, data in enumerate(chunk):
                conversation.append_message(i + offset, data, None)
            self.app.save(conversation)
            events += len(chunk)
            transactions += 1
        elapsed = time.perf_counter() - start
        cpu = time.thread_time() - cpu
        return events, transactions, elapsed, cpu

    def snapshots(self) -> int:
        return 0

    def close(self) -> None:
        self.app.close()


Runner = OursOnePerTxn | OursBatch | Baseline


def bench_append(
    backend_name: str,
    make: Callable[[str, str, int], Runner],
    config: dict[str, Any],
    workload: Workload,
) -> list[dict[str, Any]]:
    """Alternate the four variants round by round (so drift hits all alike); median rate."""
    rounds = config["append_rounds"]
    per_round = config["append_events"] // rounds
    variants = [("ours", 1), ("baseline", 1), ("ours", 10), ("baseline", 10)]
    runners = {v: make(backend_name, v[0], v[1]) for v in variants}
    rates: dict[tuple[str, int], list[float]] = {v: [] for v in variants}
    txn_rates: dict[tuple[str, int], list[float]] = {v: [] for v in variants}
    cpu_per_event: dict[tuple[str, int], list[float]] = {v: [] for v in variants}
    totals: Counter[tuple[str, int]] = Counter()
    try:
        for r in range(rounds):
            messages = workload.messages(per_round, first_turn=r * per_round)
            for variant in variants:
                gc.collect()
                events, transactions, elapsed, cpu = runners[variant].run(messages)
                rates[variant].append(events / elapsed)
                cpu_per_event[variant].append(cpu / events * 1e6)
                txn_rates[variant].append(transactions / elapsed)
                totals[variant] += events
            _say(f"  {backend_name} round {r + 1}/{rounds}: " + ", ".join(
                f"{v[0]}/{v[1]} {rates[v][-1]:,.0f} ev/s" for v in variants
            ))
        snapshots = {v: runners[v].snapshots() for v in variants}
    finally:
        for runner in runners.values():
            runner.close()
    rows = []
    for batch in (1, 10):
        ours = statistics.median(rates[("ours", batch)])
        base = statistics.median(rates[("baseline", batch)])
        rows.append({
            "backend": backend_name,
            "events_per_txn": batch,
            "ours_label": runners[("ours", batch)].label,
            "baseline_label": runners[("baseline", batch)].label,
            "events_per_variant": totals[("ours", batch)],
            "rounds": rounds,
            "ours_events_per_s": round(ours, 1),
            "baseline_events_per_s": round(base, 1),
            "ours_txn_per_s": round(statistics.median(txn_rates[("ours", batch)]), 1),
            "baseline_txn_per_s": round(statistics.median(txn_rates[("baseline", batch)]), 1),
            "ratio_ours_over_baseline": round(ours / base, 3),
            "ours_cpu_us_per_event": round(statistics.median(cpu_per_event[("ours", batch)]), 1),
            "baseline_cpu_us_per_event": round(
                statistics.median(cpu_per_event[("baseline", batch)]), 1
            ),
            "ours_rounds_events_per_s": [round(x, 1) for x in rates[("ours", batch)]],
            "baseline_rounds_events_per_s": [round(x, 1) for x in rates[("baseline", batch)]],
            "ours_snapshots_written": snapshots[("ours", batch)],
        })
    return rows


# --- 2. prepare_request latency -------------------------------------------------------------

class PrepareCase:
    """One session of ``n_turns`` turns under one profile; the last ``sample_turns`` are timed."""

    def __init__(
        self, n_turns: int, profile_name: str, profile: RuntimeProfile, sample_turns: int
    ) -> None:
        self.n_turns = n_turns
        self.profile_name = profile_name
        self.workload = Workload(seed=n_turns)
        self.store = open_store("memory://")
        self.session = self.store.start_session(profile=profile)
        self.next_turn = n_turns - sample_turns
        start = time.perf_counter()
        for i in range(self.next_turn):
            for message in self.workload.turn(i):
                self.session.append(message)
        self.session.prepare_request()  # the first trim down to the budget happens here
        self.build_s = time.perf_counter() - start
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.sent: list[int] = []
        self.tokens: list[int] = []
        self.budget = 0

    def timed_turn(self) -> None:
        """One agent-loop turn; its two prepare_request calls are timed (wall and thread CPU)."""
        user, calls, results, final = self.workload.turn(self.next_turn)
        self.next_turn += 1
        self.session.append(user)
        for follow_up in ((calls, results), (final,)):
            w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            request = self.session.prepare_request()
            c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
            self.wall.append((w1 - w0) / 1000)
            self.cpu.append((c1 - c0) / 1000)
            self.sent.append(len(request.messages))
            self.tokens.append(request.estimated_tokens)
            self.budget = request.budget
            for message in follow_up:
                self.session.append(message)

    def result(self) -> dict[str, Any]:
        assert self.next_turn == self.n_turns
        return {
            "turns": self.n_turns,
            "profile": self.profile_name,
            "budget_tokens": self.budget,
            "samples": len(self.wall),
            "median_us": round(statistics.median(self.wall), 1),
            "p10_us": round(_pct(self.wall, 0.1), 1),
            "p90_us": round(_pct(self.wall, 0.9), 1),
            "max_us": round(max(self.wall), 1),
            "median_cpu_us": round(statistics.median(self.cpu), 1),
            "mean_messages_sent": round(statistics.mean(self.sent), 1),
            "mean_estimated_tokens": round(statistics.mean(self.tokens)),
            "session_events": self.session.version,
            "window_items": len(self.session.state.index.items),
            "build_s": round(self.build_s, 2),
        }

    def close(self) -> None:
        self.store.close()


def bench_prepare(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Build every session first, then time their turns round-robin, so that load from other
    processes on the machine spreads over all sizes alike."""
    profiles = [
        ("max_context_tokens=8000", RuntimeProfile(max_context_tokens=8000)),
        ("default (50 turns, 32k)", RuntimeProfile()),
    ]
    cases = []
    try:
        for name, profile in profiles:
            for n in config["prepare_sizes"]:
                cases.append(PrepareCase(n, name, profile, config["prepare_sample_turns"]))
                _say(f"  built {name}, {n:,} turns in {cases[-1].build_s:.1f} s")
        gc.collect()
        for _ in range(config["prepare_sample_turns"]):
            for case in cases:
                case.timed_turn()
        rows = [case.result() for case in cases]
    finally:
        for case in cases:
            case.close()
    for name, _ in profiles:
        same = [r for r in rows if r["profile"] == name]
        for r in same:
            r["ratio_to_smallest"] = round(r["median_us"] / same[0]["median_us"], 2)
            r["cpu_ratio_to_smallest"] = round(r["median_cpu_us"] / same[0]["median_cpu_us"], 2)
    return rows


# --- 3./4. the long session: restore and replay ---------------------------------------------

def build_long_session(target: int, workload: Workload) -> dict[str, Any]:
    """A default-profile agent session of at least ``target`` events, built on memory://:
    four appends a turn (the user message crosses the 50-turn limit after turn 50: trim,
    breadcrumb, HistoryTrimmed) and a prepare_request every tenth turn."""
    store = open_store("memory://")
    session = store.start_session()
    start = time.perf_counter()
    turn = 0
    while session.version < target:
        user, calls, results, final = workload.turn(turn)
        session.append(user)
        session.append(calls)
        session.append(results)
        if turn % 10 == 9:
            session.prepare_request()
        session.append(final)
        turn += 1
    build_s = time.perf_counter() - start
    uuid = UUID(session.id)
    backend = store.backend
    records = backend.read_records(uuid)
    snapshots = list(backend.snapshot_recorder.select_events(uuid))
    kinds = Counter(r.topic.rsplit(":", 1)[-1].rsplit(".", 1)[-1] for r in records)
    store.close()
    return {
        "uuid": uuid,
        "records": records,
        "snapshots": snapshots,
        "turns": turn,
        "events": len(records),
        "build_s": build_s,
        "event_types": dict(kinds.most_common()),
    }


def write_sqlite(path: str, long: dict[str, Any], with_snapshots: bool) -> float:
    store = open_store(f"sqlite:///{path}")
    start = time.perf_counter()
    try:
        records = long["records"]
        for i in range(0, len(records), 1000):
            store.backend.recorder.insert_events(records[i : i + 1000])
        if with_snapshots and long["snapshots"]:
            store.backend.snapshot_recorder.insert_events(long["snapshots"])
    finally:
        store.close()
    return time.perf_counter() - start


def _timed_restores(
    store: Store, uuid: UUID, repeats: int, expected: int
) -> tuple[list[float], list[float]]:
    """(wall seconds, thread CPU seconds) of ``repeats`` restores."""
    wall, cpu = [], []
    for _ in range(repeats):
        gc.collect()
        w0, c0 = time.perf_counter(), time.thread_time()
        session = store.restore(uuid)
        c1, w1 = time.thread_time(), time.perf_counter()
        wall.append(w1 - w0)
        cpu.append(c1 - c0)
        # A restore that had to sweep orphans would have written: this session has none.
        assert session.version == expected, (session.version, expected)
    return wall, cpu


def bench_restore(
    paths: dict[str, str], long: dict[str, Any], config: dict[str, Any]
) -> dict[str, Any]:
    uuid = long["uuid"]
    expected = long["events"]
    with_store = open_store(f"sqlite:///{paths['with']}")
    without_store = open_store(f"sqlite:///{paths['without']}")
    try:
        snap = with_store.backend.load_snapshot(uuid)
        assert snap is not None, "the long session must have snapshots"
        assert without_store.backend.load_snapshot(uuid) is None
        with_times, with_cpu = _timed_restores(
            with_store, uuid, config["restore_repeats_snapshot"], expected
        )
        without_times, without_cpu = _timed_restores(
            without_store, uuid, config["restore_repeats_full"], expected
        )
        same = (
            with_store.restore(uuid).chat_view() == without_store.restore(uuid).chat_view()
        )
        assert same, "restore from a snapshot must equal a full replay"
    finally:
        with_store.close()
        without_store.close()
    with_ms = statistics.median(with_times) * 1000
    without_ms = statistics.median(without_times) * 1000
    return {
        "events": expected,
        "turns": long["turns"],
        "snapshot_interval": SNAPSHOT_INTERVAL,
        "snapshots": len(long["snapshots"]),
        "latest_snapshot_version": snap[0],
        "latest_snapshot_bytes": len(snap[1]),
        "events_replayed_after_snapshot": expected - snap[0],
        "with_snapshots_ms": round(with_ms, 2),
        "with_snapshots_runs_ms": [round(t * 1000, 2) for t in with_times],
        "with_snapshots_cpu_ms": round(statistics.median(with_cpu) * 1000, 2),
        "without_snapshots_ms": round(without_ms, 1),
        "without_snapshots_runs_ms": [round(t * 1000, 1) for t in without_times],
        "without_snapshots_cpu_ms": round(statistics.median(without_cpu) * 1000, 1),
        "speedup_without_over_with": round(without_ms / with_ms, 1),
        "same_chat_view": same,
    }


def bench_replay(path: str, long: dict[str, Any], repeats: int) -> dict[str, Any]:
    uuid = long["uuid"]
    store = open_store(f"sqlite:///{path}")
    reads, folds, read_cpu, fold_cpu = [], [], [], []
    try:
        for _ in range(repeats):
            gc.collect()
            c0, t0 = time.thread_time(), time.perf_counter()
            events = store.backend.read(uuid)
            c1, t1 = time.thread_time(), time.perf_counter()
            state = SessionState()
            for event in events:
                evolve(state, event)
            c2, t2 = time.thread_time(), time.perf_counter()
            reads.append(t1 - t0)
            folds.append(t2 - t1)
            read_cpu.append(c1 - c0)
            fold_cpu.append(c2 - c1)
            assert state.version == long["events"]
            del events
    finally:
        store.close()
    n = long["events"]
    read_s, fold_s = statistics.median(reads), statistics.median(folds)
    total = [r + f for r, f in zip(reads, folds)]
    total_s = statistics.median(total)
    reference = 1000 / (OPENHANDS_MS_PER_1000 / 1000)
    return {
        "events": n,
        "repeats": repeats,
        "read_s": round(read_s, 3),
        "fold_s": round(fold_s, 3),
        "total_s": round(total_s, 3),
        "read_events_per_s": round(n / read_s),
        "fold_events_per_s": round(n / fold_s),
        "total_events_per_s": round(n / total_s),
        "read_cpu_s": round(statistics.median(read_cpu), 3),
        "fold_cpu_s": round(statistics.median(fold_cpu), 3),
        "total_cpu_s": round(statistics.median([r + f for r, f in zip(read_cpu, fold_cpu)]), 3),
        "total_ms_per_1000_events": round(total_s * 1000 / n * 1000, 2),
        "openhands_reported_ms_per_1000_events": OPENHANDS_MS_PER_1000,
        "openhands_reported_events_per_s": round(reference),
        "ratio_ours_over_openhands_reported": round(n / total_s / reference, 2),
        "openhands_note": "quoted from OpenHands' own report; not measured here",
    }


# --- main -----------------------------------------------------------------------------------

def _versions(pg: Postgres | None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "eventsourcing": importlib.metadata.version("eventsourcing"),
        "sqlite": sqlite3.sqlite_version,
    }
    if pg is not None:
        info["postgresql"] = pg.version()
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (under a minute)")
    parser.add_argument("--postgres", default=DEFAULT_PG, help="PostgreSQL server URL")
    parser.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--output", type=Path, default=None, help="JSON path")
    args = parser.parse_args(argv)
    config = QUICK if args.quick else FULL
    output = args.output or (
        Path(tempfile.gettempdir()) / "turnledger-session-quick.json" if args.quick else RESULTS
    )
    command = ".venv/bin/python -m benchmarks.session" + (
        " " + " ".join(argv if argv is not None else sys.argv[1:])
        if (argv if argv is not None else sys.argv[1:]) else ""
    )

    pg: Postgres | None = None
    pg_skipped = None
    if not args.no_postgres:
        pg = Postgres(args.postgres)
        try:
            pg.version()
        except Exception as error:
            pg_skipped = f"PostgreSQL unavailable: {type(error).__name__}: {error}"
            pg = None
    else:
        pg_skipped = "--no-postgres"

    started = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "event-sourced sessions: append, prepare_request, restore, replay",
        "command": command,
        "quick": args.quick,
        "machine": _versions(pg),
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()},
    }
    report["machine"]["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    tables: list[str] = []
    workload = Workload()
    with (
        tempfile.TemporaryDirectory(prefix="turnledger-bench-") as tmp,
        contextlib.ExitStack() as cleanup,
    ):
        if pg is not None:
            server = pg
            cleanup.callback(lambda: _say(f"dropped schemas: {server.drop_all()}"))

        # 1. append throughput
        counter = iter(range(1000))

        def make(backend_name: str, who: str, batch: int) -> Runner:
            tag = f"{who}{batch}_{next(counter)}"
            if backend_name == "SQLite":
                if who == "ours":
                    url = f"sqlite:///{tmp}/append_{tag}.db"
                    return OursOnePerTxn(url) if batch == 1 else OursBatch(url, batch)
                return Baseline(open_sqlite_baseline(f"{tmp}/append_{tag}.db"), batch)
            assert pg is not None
            if who == "ours":
                url = pg.store_url(pg.new_schema(tag, create=False))
                return OursOnePerTxn(url) if batch == 1 else OursBatch(url, batch)
            schema = pg.new_schema(tag, create=True)
            return Baseline(open_postgres_baseline(pg.library_settings(schema)), batch)

        _say("1. append throughput")
        append_rows = bench_append("SQLite", make, config, workload)
        if pg is not None:
            append_rows += bench_append("PostgreSQL", make, config, workload)
        report["append"] = {"rows": append_rows, "postgres_skipped": pg_skipped}
        tables.append(_table(
            "1. Append throughput (events/s, median of rounds; higher is better)",
            ["backend", "events/txn", "turnledger ev/s", "eventsourcing ev/s", "ratio ours/base",
             "ours txn/s", "base txn/s", "ours CPU µs/ev", "base CPU µs/ev", "events/variant"],
            [[r["backend"], r["events_per_txn"], r["ours_events_per_s"],
              r["baseline_events_per_s"], r["ratio_ours_over_baseline"], r["ours_txn_per_s"],
              r["baseline_txn_per_s"], r["ours_cpu_us_per_event"],
              r["baseline_cpu_us_per_event"], r["events_per_variant"]] for r in append_rows],
        ) + "\n  1 event/txn: turnledger = session.append (turn limit 10^9 so 1 append = 1 event;"
            " snapshots every 500 events included); baseline = 1 aggregate call + app.save."
            "\n  10 events/txn: turnledger = execute() x10 + one EventStoreBackend.append (the"
            " public Session API saves one command's events per transaction, at most 4);"
            "\n  baseline = 10 aggregate calls + one app.save. CPU = this thread's CPU time per"
            " event (encoding, driver; not the database server)." + (
                f"\n  PostgreSQL skipped: {pg_skipped}" if pg_skipped else ""))
        print(tables[-1] + "\n", flush=True)

        # 2. prepare_request latency
        _say("2. prepare_request latency")
        prepare_rows = bench_prepare(config)
        report["prepare_flatness_largest_over_smallest"] = {
            r["profile"]: {"wall": r["ratio_to_smallest"], "cpu": r["cpu_ratio_to_smallest"]}
            for r in prepare_rows
            if r["turns"] == config["prepare_sizes"][-1]
        }
        report["prepare"] = prepare_rows
        tables.append(_table(
            "2. prepare_request latency (µs per call, memory://; lower is better)",
            ["profile", "turns", "median µs", "p10 µs", "p90 µs", "x smallest", "CPU µs",
             "CPU x smallest", "msgs sent", "est. tokens", "budget", "window items", "samples"],
            [[r["profile"], r["turns"], r["median_us"], r["p10_us"], r["p90_us"],
              r["ratio_to_smallest"], r["median_cpu_us"], r["cpu_ratio_to_smallest"],
              r["mean_messages_sent"], r["mean_estimated_tokens"], r["budget_tokens"],
              r["window_items"], r["samples"]] for r in prepare_rows],
        ) + "\n  timed: the 2 calls of each of the last turns (after the user message, after the"
            " tool results), including the trims they trigger and their recorded events;"
            "\n  sizes interleaved turn by turn; CPU = thread CPU time of the same calls (robust"
            " to other load on the machine).")
        print(tables[-1] + "\n", flush=True)

        # 3. restore
        _say(f"3. building a {config['long_events']:,}-event session on memory://")
        long = build_long_session(config["long_events"], workload)
        _say(f"  {long['events']:,} events, {long['turns']:,} turns in {long['build_s']:.1f} s")
        paths = {"with": f"{tmp}/long_with.db", "without": f"{tmp}/long_without.db"}
        copy_s = write_sqlite(paths["with"], long, with_snapshots=True)
        write_sqlite(paths["without"], long, with_snapshots=False)
        restore = bench_restore(paths, long, config)
        restore["build_on_memory_s"] = round(long["build_s"], 1)
        restore["copy_to_sqlite_s"] = round(copy_s, 1)
        restore["sqlite_file_mb"] = round(os.path.getsize(paths["with"]) / 1e6, 1)
        restore["event_types"] = long["event_types"]
        report["restore"] = restore
        tables.append(_table(
            f"3. Restore of a {restore['events']:,}-event session (SQLite file, store.restore;"
            " lower is better)",
            ["variant", "median ms", "CPU ms", "runs", "events folded"],
            [["with snapshots (every 500)", restore["with_snapshots_ms"],
              restore["with_snapshots_cpu_ms"], len(restore["with_snapshots_runs_ms"]),
              restore["events_replayed_after_snapshot"]],
             ["without snapshots", restore["without_snapshots_ms"],
              restore["without_snapshots_cpu_ms"], len(restore["without_snapshots_runs_ms"]),
              restore["events"]],
             ["ratio without/with", restore["speedup_without_over_with"], "", "", ""]],
        ) + f"\n  {restore['turns']:,} turns (default profile), latest snapshot at version"
            f" {restore['latest_snapshot_version']:,} ({restore['latest_snapshot_bytes']:,}"
            f" bytes); file {restore['sqlite_file_mb']} MB; both restores give the same chat"
            " view.")
        print(tables[-1] + "\n", flush=True)

        # 4. replay
        _say("4. replay")
        replay = bench_replay(paths["without"], long, config["replay_repeats"])
        report["replay"] = replay
        tables.append(_table(
            f"4. Replay of {replay['events']:,} events (SQLite: backend.read, then evolve into a"
            " fresh SessionState; higher is better)",
            ["what", "events/s", "ms per 1,000 events", "seconds", "CPU s", "events/CPU s"],
            [["read (select + decode)", replay["read_events_per_s"],
              replay["read_s"] * 1e6 / replay["events"], replay["read_s"], replay["read_cpu_s"],
              round(replay["events"] / replay["read_cpu_s"])],
             ["fold (evolve)", replay["fold_events_per_s"],
              replay["fold_s"] * 1e6 / replay["events"], replay["fold_s"], replay["fold_cpu_s"],
              round(replay["events"] / replay["fold_cpu_s"])],
             ["read + fold", replay["total_events_per_s"], replay["total_ms_per_1000_events"],
              replay["total_s"], replay["total_cpu_s"],
              round(replay["events"] / replay["total_cpu_s"])],
             ["OpenHands (reported, NOT measured here)",
              replay["openhands_reported_events_per_s"], OPENHANDS_MS_PER_1000, "", "", ""]],
        ) + f"\n  read + fold vs OpenHands' reported figure: x"
            f"{replay['ratio_ours_over_openhands_reported']} (different machines and event"
            " sizes; a reference point, not a comparison).")
        print(tables[-1] + "\n", flush=True)
        del long

    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["wall_s"] = round(time.perf_counter() - started, 1)
    report["tables"] = tables
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"total {report['wall_s']} s; written to {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
