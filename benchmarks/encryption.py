"""Benchmark: what encryption at rest costs on append, restore and replay (issue 11, aim <= 15 %).

Two stores of the same backend, one plain and one encrypted (per-session data keys, ADR-0045),
get the same work in the same process, interleaved round by round (plain, encrypted, then
encrypted, plain), so the machine's load hits both alike; the table shows the median time of
each (wall clock and this process's CPU time, which other processes' load disturbs less)
and their ratio::

    .venv/bin/python -m benchmarks.encryption --messages 1000 --rounds 7

- append: a new session, ``--messages`` messages appended one by one (each its own
  transaction, as a runtime does); the first append also creates and wraps the data key;
- restore: `Store.restore` of that session (snapshot + later events, decrypted and checked);
- replay: `Store.events_of`, every event of the session decrypted, checked and decoded.

``memory://`` shows the CPU cost alone (the worst case for the ratio); ``sqlite://`` the cost
as a SQLite store sees it (appends wait for the disk). Writes
``benchmarks/results/encryption.json``.

Wall and even CPU times move by 20 % between rounds on a loaded machine; instruction counts do
not. ``--only OP --mode plain|encrypted --count N`` runs one operation N times on a memory
store (after the same setup), for callgrind; the cost of one operation is the difference
between N=4 and N=0, divided by 4::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        .venv/bin/python -m benchmarks.encryption --only replay --mode encrypted --count 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import turnledger as tl
from turnledger.store.keys import new_key_text

RESULTS = Path(__file__).parent / "results"
TEXT = "The customer asked about invoice 4471; the account shows two open items. " * 8


def _messages(count: int) -> list[tl.ChatMessage]:
    out = []
    for i in range(count):
        if i % 2 == 0:
            out.append(tl.ChatMessage.user(f"question {i}: {TEXT[: 200 + (i * 37) % 400]}"))
        else:
            out.append(tl.ChatMessage.assistant(f"answer {i}: {TEXT}"))
    return out


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of ``fn()``."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def _round(store: tl.Store, messages: list[tl.ChatMessage]) -> dict[str, tuple[float, float]]:
    session = store.start_session()

    def append() -> None:
        for message in messages:
            session.append(message)

    return {
        "append": _timed(append),
        "restore": _timed(lambda: store.restore(session.id)),
        "replay": _timed(lambda: store.events_of(session.id)),
    }


def bench(kind: str, messages: int, rounds: int, directory: str) -> dict[str, Any]:
    """Median seconds per operation, plain and encrypted, and encrypted / plain."""
    urls = {
        "plain": f"memory://bench-plain-{time.time_ns()}" if kind == "memory"
        else f"sqlite:///{directory}/plain.db",
        "encrypted": f"memory://bench-enc-{time.time_ns()}" if kind == "memory"
        else f"sqlite:///{directory}/encrypted.db",
    }
    stores = {
        "plain": tl.open_store(urls["plain"], snapshot_interval=200),
        "encrypted": tl.open_store(urls["encrypted"], key=new_key_text(),
                                   snapshot_interval=200),
    }
    work = _messages(messages)
    times: dict[str, dict[str, list[tuple[float, float]]]] = {m: {} for m in stores}
    try:
        _round(stores["plain"], work[:50])  # warm up both code paths
        _round(stores["encrypted"], work[:50])
        for r in range(rounds):
            order = ("plain", "encrypted") if r % 2 == 0 else ("encrypted", "plain")
            for mode in order:
                for op, seconds in _round(stores[mode], work).items():
                    times[mode].setdefault(op, []).append(seconds)
    finally:
        for store in stores.values():
            store.close()
    result: dict[str, Any] = {"backend": kind, "messages": messages, "rounds": rounds}
    for op in ("append", "restore", "replay"):
        cell: dict[str, float] = {}
        for index, clock in ((0, "wall"), (1, "cpu")):
            plain = statistics.median(t[index] for t in times["plain"][op])
            encrypted = statistics.median(t[index] for t in times["encrypted"][op])
            cell[f"plain_{clock}_ms"] = round(plain * 1000, 2)
            cell[f"encrypted_{clock}_ms"] = round(encrypted * 1000, 2)
            cell[f"{clock}_ratio"] = round(encrypted / plain, 3) if plain else float("nan")
        result[op] = cell
    return result


def only(op: str, mode: str, count: int, messages: int) -> None:
    """Run ``op`` ``count`` times on a memory store (for an instruction counter)."""
    key = new_key_text() if mode == "encrypted" else None
    store = tl.open_store("memory://", key=key, snapshot_interval=200)
    session = store.start_session()
    work = _messages(messages)
    if op == "append":  # the session is the work itself: count=0 appends nothing
        for message in work[: count * messages // 4]:
            session.append(message)
        return
    for message in work:
        session.append(message)
    for _ in range(count):
        if op == "replay":
            store.events_of(session.id)
        else:
            store.read_state(session.id)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000, help="messages per session")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--backends", default="memory,sqlite", help="comma-separated")
    parser.add_argument("--only", choices=("append", "restore", "replay"),
                        help="run one operation --count times (for callgrind), no table")
    parser.add_argument("--mode", choices=("plain", "encrypted"), default="encrypted")
    parser.add_argument("--count", type=int, default=4)
    args = parser.parse_args(argv)
    if args.only:
        only(args.only, args.mode, args.count, args.messages)
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="turnledger-encryption-") as tmp:
        for kind in args.backends.split(","):
            results.append(bench(kind, args.messages, args.rounds, tmp))
    print("backend | operation | plain wall ms | encrypted wall ms | wall ratio | "
          "plain cpu ms | encrypted cpu ms | cpu ratio")
    for row in results:
        for op in ("append", "restore", "replay"):
            c = row[op]
            print(f"{row['backend']} | {op} | {c['plain_wall_ms']} | {c['encrypted_wall_ms']} | "
                  f"{c['wall_ratio']} | {c['plain_cpu_ms']} | {c['encrypted_cpu_ms']} | "
                  f"{c['cpu_ratio']}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "encryption.json").write_text(
        json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
