"""Benchmark: many session objects of ONE session in one process, appending in turn (ADR-0094).

A web handler that restores the session per request, or fifty workers of one conversation,
hold several objects of the same session; each one's append after the others wrote loses the
race on the (session, version) key, then catches up and retries (`retry_on_conflict`, no
sleep). Measured per backend, after a 400-message history:

- **one object**: the same appends through a single object (no race: the floor);
- **N objects**: ``--objects`` objects (default 50) taking turns, each behind the others at
  every call: ms per append, the snapshot loads (what a reload reads first: a lost race used
  to reload the whole state, ADR-0094) and the attempts per append.

PostgreSQL runs in a fresh schema, dropped afterwards. Run from the project root::

    .venv/bin/python -m benchmarks.objects                 # SQLite and PostgreSQL
    .venv/bin/python -m benchmarks.objects --no-postgres

Prints a table and writes ``benchmarks/results/objects.json`` (``--output``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from turnledger.domain.errors import ConcurrencyConflict
from turnledger.domain.events import MessageAppended
from turnledger.domain.messages import ChatMessage
from turnledger.store.backend import retry_on_conflict
from turnledger.store.session import Session, Store, open_store

RESULTS = Path(__file__).parent / "results" / "objects.json"
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
HISTORY_TURNS = 200


def _message(round_: int, k: int) -> ChatMessage:
    text = f"round {round_} object {k}"
    return ChatMessage.user(text) if (round_ + k) % 2 == 0 else ChatMessage.assistant(text)


def _filled(store: Store) -> Session:
    session = store.start_session()
    for i in range(HISTORY_TURNS):
        session.append(ChatMessage.user(f"q{i} " + "x" * 500))
        session.append(ChatMessage.assistant(f"a{i} " + "y" * 800))
    return session


def _counted(store: Store) -> list[int]:
    """Counts the snapshot loads of ``store`` (each reload reads one first)."""
    loads: list[int] = []
    load_snapshot: Callable[..., Any] = store.backend.load_snapshot

    def counted(session_id: uuid.UUID) -> Any:
        loads.append(1)
        return load_snapshot(session_id)

    store.backend.load_snapshot = counted  # type: ignore[method-assign]
    return loads


def run(url: str, objects: int, rounds: int) -> dict[str, Any]:
    with open_store(url) as store:
        first = _filled(store)
        many = [store.restore(first.id) for _ in range(objects)]
        single = store.restore(_filled(store).id)
        loads = _counted(store)
        attempts = 0

        def append(session: Session, message: ChatMessage) -> None:
            nonlocal attempts
            attempts += 1
            session.append(message)

        started = time.perf_counter()
        for r in range(rounds):
            for k in range(objects):
                single.append(_message(r, k))
        alone = (time.perf_counter() - started) / (rounds * objects)
        started = time.perf_counter()
        for r in range(rounds):
            for k, session in enumerate(many):
                message = _message(r, k)
                retry_on_conflict(lambda s=session, m=message: append(s, m),
                                  base_delay=0, max_delay=0)
        raced = (time.perf_counter() - started) / (rounds * objects)
        appends = rounds * objects
        stored = sum(isinstance(e, MessageAppended) for e in store.events_of(first.id))
        assert stored == 2 * HISTORY_TURNS + appends, "an append was lost or doubled"
    return {"objects": objects, "appends": appends, "one_object_ms": alone * 1e3,
            "objects_ms": raced * 1e3, "objects_over_one": raced / alone,
            "attempts_per_append": attempts / appends, "snapshot_loads": len(loads)}


def _drop(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=6, help="appends per object")
    parser.add_argument("--postgres", default=POSTGRES)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        schema = f"tl_objects_{uuid.uuid4().hex[:12]}"  # a fresh schema, dropped after
        targets = [("SQLite", f"sqlite:///{directory}/objects.db")]
        if not args.no_postgres:
            targets.append(("PostgreSQL", f"{args.postgres}?schema={schema}"))
        try:
            for name, url in targets:
                try:
                    row = run(url, args.objects, args.rounds)
                except ConcurrencyConflict as error:
                    sys.exit(f"{name}: an append gave up: {error}")
                rows.append({"backend": name, **row})
        finally:
            if not args.no_postgres:
                _drop(args.postgres, schema)
    keys = ["backend", "objects", "appends", "one_object_ms", "objects_ms", "objects_over_one",
            "attempts_per_append", "snapshot_loads"]
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(f"{row[k]:.2f}" if isinstance(row[k], float) else str(row[k])
                         for k in keys))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.objects " + " ".join(argv or sys.argv[1:]),
        "python": platform.python_version(), "rows": rows}, indent=2) + "\n")
    print(f"results: {args.output}")


if __name__ == "__main__":
    main()
