"""Benchmark: single-bit flips of one stored snapshot — how many change a restore silently.

Records the agent session of the replay tests (``tests.integration.test_replay.record_agent``)
on a SQLite file with a snapshot every 10 events, then flips every bit of its latest snapshot's
stored bytes, one at a time, and for each flip restores the session (`Pipeline.load`) and runs
`verify` on it. A flip is *silently accepted* when the restore succeeds with a state that differs
from the state replayed from the events (any field a snapshot holds: profile, providers, route,
legacy flag, chain, window); *verify missed* counts flips of those that `verify` passed. Runs on
the code before and after ADR-0023 alike::

    .venv/bin/python -m benchmarks.snapshot_flips --label after
    cd /tmp/old && /work/wt/.venv/bin/python -m benchmarks.snapshot_flips --label before

(``/tmp/old`` holding ``git archive`` of the older ``turnledger``, ``benchmarks`` and ``tests``).
``--step 23`` flips every 23rd bit (about 3,000 flips of the 8.7 KB snapshot, in minutes).

writes ``benchmarks/results/snapshot_flips_<label>.json`` and prints one table row.
"""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from tests.integration.test_replay import record_agent
from turnledger.domain.decider import SessionState, evolve
from turnledger.domain.errors import CorruptRecord
from turnledger.replay.audit import Rule, verify
from turnledger.store.backend import EventStoreBackend
from turnledger.store.mapper import ZERO_CHAIN
from turnledger.store.pipeline import Pipeline
from turnledger.store.session import open_store

RESULTS = Path(__file__).parent / "results"


def whole_state(state: SessionState, chain: bytes) -> tuple[object, ...]:
    index = state.index
    return (
        state.session_id, state.version, chain, state.profile, state.providers, state.legacy,
        state.route.route, tuple(index.leading), tuple(index.retained), index.base,
        tuple(index.items), state.conversation, state.chat,
    )


def replayed(backend: EventStoreBackend, session_id: UUID) -> tuple[object, ...]:
    state, chain = SessionState(), ZERO_CHAIN
    for event, event_chain in backend.read_with_chain(session_id):
        evolve(state, event)
        chain = event_chain
    return whole_state(state, chain)


def sweep(path: Path, session_id: UUID, step: int) -> dict[str, Any]:
    db = sqlite3.connect(path, isolation_level=None)
    ((version, original),) = db.execute(
        "SELECT originator_version, state FROM stored_snapshots WHERE originator_id=? "
        "ORDER BY originator_version DESC LIMIT 1", (session_id.hex,),
    ).fetchall()
    original = bytes(original)
    counts = {"tried": 0, "silently_accepted": 0, "restore_failed": 0, "verify_missed": 0,
              "verify_flagged": 0, "profile_route_changed": 0}
    with open_store(f"sqlite:///{path}") as store:
        expected = replayed(store.backend, session_id)
        pipeline = Pipeline(store.backend, snapshot_interval=10, publish=lambda _: None)
        for bit in range(0, len(original) * 8, step):
            flipped = bytearray(original)
            flipped[bit // 8] ^= 1 << (bit % 8)
            db.execute("UPDATE stored_snapshots SET state=? WHERE originator_id=? AND "
                       "originator_version=?", (bytes(flipped), session_id.hex, version))
            counts["tried"] += 1
            try:
                position = pipeline.load(session_id)
                got = whole_state(position.state, position.chain)
            except CorruptRecord:
                counts["restore_failed"] += 1
                got = expected
            report = verify(store.backend, [session_id])
            flagged = any(v.rule is Rule.SNAPSHOT for v in report.violations)
            counts["verify_flagged"] += flagged
            if got != expected:
                counts["silently_accepted"] += 1
                counts["verify_missed"] += not flagged
                counts["profile_route_changed"] += got[3:7] != expected[3:7]
    db.close()
    counts["snapshot_bytes"] = len(original)
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="after", help="names the JSON file")
    parser.add_argument("--step", type=int, default=1, help="flip every STEP-th bit")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # one "snapshot not used" warning per flip
    with tempfile.TemporaryDirectory(prefix="turnledger-flips-") as tmp:
        path = Path(tmp) / "x.db"
        with open_store(f"sqlite:///{path}", snapshot_interval=10) as store:
            session_id = UUID(record_agent(store).session.id)
        result = sweep(path, session_id, args.step)
    result["label"] = args.label
    keys = ("snapshot_bytes", "tried", "silently_accepted", "profile_route_changed",
            "verify_missed", "restore_failed", "verify_flagged")
    print(" | ".join(["label", *keys]))
    print(" | ".join([args.label, *(str(result[k]) for k in keys)]))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"snapshot_flips_{args.label}.json").write_text(
        json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
