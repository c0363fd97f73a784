"""A writer of the parallel-commit test (issue 23, ADR-0083) whose commits are delayed.

Usage: ``python delayed_writer_child.py URL SEED SESSIONS APPENDS``. Starts SESSIONS sessions
of its own and appends APPENDS user messages to each, round robin. Every insert transaction
(the append's own statement, ADR-0089, run in one: a step before its commit is a parameter of
the insert, `BeforeCommit`) sleeps a random 0-30 ms after its INSERT and before its COMMIT (one
in 25 for 0.5-1.5 s), so
transactions of different writers commit in another order than their notification ids were
drawn. Prints ``DONE N`` (events acknowledged) and exits 0.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import attrs

from turnledger.domain.messages import ChatMessage
from turnledger.store.backends.pg_recorders import ThinInsert
from turnledger.store.backends.port import BeforeCommit
from turnledger.store.session import open_store


def main(argv: list[str]) -> int:
    url, seed, sessions, appends = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    rng = random.Random(seed)
    insert = ThinInsert.__call__

    def pause() -> float:
        return rng.uniform(0.5, 1.5) if rng.random() < 0.04 else rng.uniform(0, 0.03)

    def delayed(self: ThinInsert, records: Any, before: BeforeCommit) -> None:
        # The append's own statement (ADR-0089, fenced: ADR-0098) in a transaction that
        # commits late (a step after the INSERT, as the keys statements are): its
        # notification ids are drawn at the INSERT, its rows become visible at the COMMIT.
        insert(self, records, attrs.evolve(
            before, keys=[*before.keys, ("SELECT pg_sleep(%s)", (pause(),))]
        ))

    ThinInsert.__call__ = delayed  # type: ignore[method-assign]
    with open_store(url) as store:
        live = [store.start_session() for _ in range(sessions)]
        for turn in range(appends):
            for session in live:
                session.append(ChatMessage.user(f"w{seed} t{turn} " + "x" * 40))
        events = sum(session.version for session in live)
    print(f"DONE {events}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
