"""Benchmark: a PostgreSQL store of many sessions — list, stats, projection catch-up (issue 12.6).

The data: ``--sessions`` sessions (default 10,000) of ``--turns`` agent turns each (default 100:
user, tool call(s), 1-2 KB tool results, assistant, and one ``prepare_request``), recorded
through the library on ``memory://`` once per template (three `benchmarks.session.Workload`
seeds). Each template event is encoded once; per session its records are re-keyed to a new id
and re-chained with the store's mapper (the bytes `to_stored_events` writes: compared for each
worker's first session) and COPYed, ``--per-transaction`` sessions per transaction under the
library's table lock, by ``--workers`` processes (ADR-0055). ``turnledger verify`` then checks
the first, a middle and the last session. Snapshots are not copied (a cache: nothing timed here
reads them).

Timed, each as the command a user runs (``python -m turnledger --store URL ...`` in a child
process, so imports and the store's open are included), in three phases:

1. no analytics tables (dropped): ``sessions --limit 100 --json`` (the first page) and
   ``sessions --after ID --limit 100 --json`` (the page after the middle session) — every
   listed session's events folded (ADR-0039);
2. ``projections run``: the analytics catch-up from zero (its ``tl_*`` tables dropped first),
   then ``stats --json``;
3. caught up: the same two pages and ``sessions --json`` (every session) — the counts read
   from the tables (ADR-0054).

``--before PATH`` runs the same commands from the tree at PATH too (first on ``PYTHONPATH``),
interleaved with ours, and checks that both trees print the same JSON;
``--no-before-full-list`` and ``--no-before-catch-up`` skip the before tree's slow commands.

Run from the project root::

    .venv/bin/python -m benchmarks.many_sessions                  # 10,000 x 100 turns
    .venv/bin/python -m benchmarks.many_sessions --sessions 500   # quick
    .venv/bin/python -m benchmarks.many_sessions --generate-only  # build, keep, time later:
    .venv/bin/python -m benchmarks.many_sessions --schema bench_many_NNN --before ../base

Writes ``benchmarks/results/many_sessions.json``; the schema ``bench_many_*`` is dropped at the
end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

RESULTS = Path(__file__).parent / "results" / "many_sessions.json"
PG = "postgresql://postgres@127.0.0.1:5432/test"
CONNINFO = "host=127.0.0.1 port=5432 user=postgres dbname=test"
ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = 3


def _template(seed: int, turns: int) -> list[Any]:
    """The events of one session of ``turns`` turns, recorded through the library."""
    from benchmarks.session import Workload
    from turnledger import RuntimeProfile
    from turnledger.store.session import open_store

    workload = Workload(seed=seed)
    with open_store(f"memory://many-template-{seed}") as store:
        session = store.start_session(RuntimeProfile())
        for i in range(turns):
            for message in workload.turn(i):
                session.append(message)
            session.prepare_request()
        return store.events_of(session.id)


def _encoded(template: Sequence[Any], mapper: Any) -> list[tuple[int, str, bytes, list[Any]]]:
    """Per event of a template: (version, topic, chained body, envelope tail after the chain).

    Nothing of these depends on the session id (the payload leaves the id to the record's
    columns), so each template event is encoded and compressed once for every session.
    """
    from turnledger.store.packing import envelope_of

    encoded = []
    for event in template:
        topic, payload = mapper.codec.encode_event(event)
        body = mapper.conceal(event, topic, payload)
        tail = envelope_of(bytes(32), body, compress=mapper.compress_envelope)[1:]
        encoded.append((event.originator_version, topic, body, tail))
    return encoded


def _records(mapper: Any, session_id: uuid.UUID,
             encoded: Sequence[tuple[int, str, bytes, list[Any]]]) -> list[tuple[Any, ...]]:
    """The rows of one session re-keyed to ``session_id`` and re-chained from `ZERO_CHAIN`:
    what `TurnledgerMapper.to_stored_events` writes (checked once per worker)."""
    from turnledger.store.mapper import ZERO_CHAIN

    chain = ZERO_CHAIN
    rows = []
    for version, topic, body, tail in encoded:
        chain = mapper.chain_of(chain, session_id, version, topic, body)
        rows.append((session_id, version, topic,
                     mapper.seal(mapper.transcoder.encode([chain, *tail]))))
    return rows


def _generate(url: str, worker: int, workers: int, sessions: int, turns: int,
              per_transaction: int) -> int:
    """Insert this worker's share of the sessions; the number of events it inserted.

    The rows are the library's bytes (`_records`, compared with `to_stored_events` for the
    worker's first session), written with COPY, ``per_transaction`` sessions per transaction,
    under the library's own ``LOCK TABLE ... IN EXCLUSIVE MODE`` (ADR-0038), so notification
    ids are committed in order as the library's inserts commit them.
    """
    import psycopg
    from psycopg import sql

    from turnledger.store.backend import open_backend
    from turnledger.store.mapper import ZERO_CHAIN

    schema = url.split("schema=", 1)[1]
    table = sql.Identifier(schema, "stored_events")
    templates = [_template(seed, turns) for seed in range(TEMPLATES)]
    with open_backend(url) as backend:
        mapper = backend.mapper
    encoded = [_encoded(t, mapper) for t in templates]
    inserted = 0
    mine = list(range(worker, sessions, workers))
    with psycopg.connect(CONNINFO, autocommit=True) as conn:
        for first in range(0, len(mine), per_transaction):
            chunk = []
            for index in mine[first:first + per_transaction]:
                session_id = uuid.uuid4()
                rows = _records(mapper, session_id, encoded[index % TEMPLATES])
                if inserted == 0 and not chunk:  # the same bytes as the library's writer
                    events = [attrs.evolve(e, originator_id=session_id)
                              for e in templates[index % TEMPLATES]]
                    stored, _ = mapper.to_stored_events(events, ZERO_CHAIN)
                    expected = [(s.originator_id, s.originator_version, s.topic, s.state)
                                for s in stored]
                    if expected != rows:
                        raise AssertionError("the re-keyed rows differ from the library's")
                chunk.extend(rows)
            with conn.transaction():
                conn.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(table))
                copy_sql = sql.SQL(
                    "COPY {} (originator_id, originator_version, topic, state) "
                    "FROM STDIN (FORMAT BINARY)"
                ).format(table)
                with conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
                    copy.set_types(["uuid", "int8", "text", "bytea"])
                    for row in chunk:
                        copy.write_row(row)
            inserted += len(chunk)
    return inserted


def generate(url: str, sessions: int, turns: int, workers: int,
             per_transaction: int = 20) -> dict[str, Any]:
    from turnledger.store.session import open_store

    open_store(url).close()  # the tables, before the workers race to make them
    began = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers) as pool:
        counts = pool.starmap(_generate, [(url, w, workers, sessions, turns, per_transaction)
                                          for w in range(workers)])
    seconds = round(time.perf_counter() - began, 1)
    return {"sessions": sessions, "turns": turns, "events": sum(counts), "seconds": seconds,
            "verified_sample": verify_sample(url)}


def verify_sample(url: str) -> list[str]:
    """``turnledger verify SESSION`` on the first, a middle and the last session (exit 0
    each, else ``AssertionError``): the generated records are ones the library accepts."""
    from turnledger.store.session import open_store

    with open_store(url) as store:
        ids = store.sessions()
    sample = sorted({ids[0], ids[len(ids) // 2], ids[-1]}, key=ids.index)
    for session_id in sample:
        _, out, code = _cli(url, ["verify", session_id], None)
        assert code == 0, f"verify {session_id} failed: {out}"
    return sample


def _cli(url: str, args: Sequence[str], tree: Path | None) -> tuple[float, str, int]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*([str(tree)] if tree else []), str(ROOT)])
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "turnledger", "--store", url, *args],
                          env=env, capture_output=True, text=True, timeout=7200, check=False,
                          cwd=tempfile.gettempdir())  # not the project root: PYTHONPATH rules
    return time.perf_counter() - began, done.stdout, done.returncode


def _drop_analytics(schema: str) -> None:
    import psycopg

    from turnledger.projections.analytics import TABLES

    with psycopg.connect(CONNINFO, autocommit=True) as conn:
        for table in TABLES:
            conn.execute(f'DROP TABLE IF EXISTS "{schema}".{table}')


def measure(url: str, schema: str, trees: dict[str, Path | None], full_list: bool,
            catch_up: bool = True, before_catch_up: bool = True,
            before_full_list: bool = True) -> list[dict[str, Any]]:
    """Time the commands in three phases: the session list with no analytics tables (every
    listed session folded, ADR-0039), the catch-up from zero and ``stats``, then the list
    again with the tables caught up (ADR-0054: counts read from them)."""
    from turnledger.store.session import open_store

    with open_store(url) as store:
        ids = store.sessions()
    middle = ids[len(ids) // 2] if len(ids) > 200 else None
    first = ["sessions", "--limit", "100", "--json"]
    pages: list[tuple[str, list[str]]] = [("sessions --limit 100 (first page)", first)]
    if middle:
        pages.append((f"sessions --after ID --limit 100 (page {len(ids) // 2:,} of the list)",
                      ["sessions", "--after", middle, "--limit", "100", "--json"]))
    everything = ("sessions (all)", ["sessions", "--json"])
    rows: list[dict[str, Any]] = []

    def run(phase: str, label: str, args: list[str], names: Sequence[str],
            from_zero: bool = False) -> None:
        outputs = []
        for name in names:
            if from_zero:
                _drop_analytics(schema)
            seconds, out, code = _cli(url, args, trees[name])
            outputs.append(out)
            rows.append({"phase": phase, "command": label, "tree": name,
                         "seconds": round(seconds, 2) if code == 0 else None, "exit": code})
            print(f"  [{phase}] {label} [{name}]: {rows[-1]['seconds']} s (exit {code})",
                  flush=True)
        if args[-1] == "--json" and len(outputs) > 1:  # the trees must print the same thing
            same = all(json.loads(o) == json.loads(outputs[0]) for o in outputs)
            rows[-1]["same_output_as_before"] = same
            assert same, f"{label}: the trees' outputs differ"

    every = list(trees)
    ours_only = [name for name in every if trees[name] is None]
    _drop_analytics(schema)
    for label, args in pages:
        run("no analytics tables", label, args, every)
    if not catch_up:
        return rows
    run("catch-up", "projections run (catch-up from zero)", ["projections", "run"],
        every if before_catch_up else ours_only, from_zero=True)
    run("caught up", "stats", ["stats", "--json"], every)
    for label, args in pages:
        run("caught up", label, args, every)
    if full_list:
        run("caught up", *everything, every if before_full_list else ours_only)
    return rows


def _table(rows: Sequence[dict[str, Any]]) -> str:
    columns = ["phase", "command", "tree", "seconds", "exit"]
    cells = [[("-" if row.get(c) is None else str(row[c])) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2, help="generating processes")
    parser.add_argument("--per-transaction", type=int, default=20,
                        help="sessions written per COPY transaction")
    parser.add_argument("--generate-only", action="store_true",
                        help="generate the data and keep the schema (time it later: --schema)")
    parser.add_argument("--before", type=Path, help="a tree to time as 'before' too")
    parser.add_argument("--no-full-list", action="store_true",
                        help="skip `sessions` without a limit (reads every event)")
    parser.add_argument("--no-catch-up", action="store_true",
                        help="skip the projection catch-up, stats and the caught-up list")
    parser.add_argument("--no-before-catch-up", action="store_true",
                        help="time the catch-up from zero for our tree only")
    parser.add_argument("--no-before-full-list", action="store_true",
                        help="time `sessions` (all) for our tree only (the before tree's "
                        "folds every event: about 25 minutes at 10,000 sessions)")
    parser.add_argument("--schema", help="reuse this schema's data (generated when empty)")
    parser.add_argument("--keep", action="store_true", help="keep the schema")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    schema = args.schema or f"bench_many_{os.getpid()}"
    url = f"{PG}?schema={schema}"
    try:
        from turnledger.store.session import open_store

        with open_store(url) as store:
            existing = store.sessions(limit=1)
        data = (generate(url, args.sessions, args.turns, args.workers, args.per_transaction)
                if not existing else {"sessions": "reused", "schema": schema})
        print(f"data: {data}", flush=True)
        if args.generate_only:
            print(f"kept: --schema {schema}")
            return 0
        trees: dict[str, Path | None] = {"ours": None}
        if args.before:
            trees = {"before": args.before, "ours": None}
        rows = measure(url, schema, trees, not args.no_full_list, not args.no_catch_up,
                       before_catch_up=not args.no_before_catch_up,
                       before_full_list=not args.no_before_full_list)
    finally:
        if not (args.keep or args.generate_only):
            import psycopg

            with psycopg.connect(CONNINFO, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    size = (f"{args.sessions:,} sessions x {args.turns} turns" if existing == []
            else f"the sessions of schema {schema}")
    print(f"\n{size} on PostgreSQL (wall seconds of the command, child process)")
    print(_table(rows))
    report = {"benchmark": "many_sessions", "python": sys.version.split()[0],
              "platform": platform.platform(), "cpus": os.cpu_count(), "data": data,
              "before": str(args.before) if args.before else None, "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
