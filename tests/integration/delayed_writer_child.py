"""A writer of the parallel-commit test (issue 23, ADR-0083) whose commits are delayed.

Usage: ``python delayed_writer_child.py URL SEED SESSIONS APPENDS``. Starts SESSIONS sessions
of its own and appends APPENDS user messages to each, round robin. Every insert transaction
(the append's own statement run in one, ADR-0089) sleeps a random 0-30 ms after its INSERT and
before its COMMIT (one in 25 for 0.5-1.5 s), so
transactions of different writers commit in another order than their notification ids were
drawn. Prints ``DONE N`` (events acknowledged) and exits 0.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from eventsourcing.postgres import PostgresAggregateRecorder

from turnledger.domain.messages import ChatMessage
from turnledger.store.backends.pg_recorders import ThinInsert
from turnledger.store.session import open_store


def main(argv: list[str]) -> int:
    url, seed, sessions, appends = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    rng = random.Random(seed)
    insert = PostgresAggregateRecorder._insert_stored_events  # noqa: SLF001

    def pause() -> None:
        time.sleep(rng.uniform(0.5, 1.5) if rng.random() < 0.04 else rng.uniform(0, 0.03))

    def delayed(self: Any, curs: Any, records: Any, **kwargs: Any) -> None:
        insert(self, curs, records, **kwargs)
        pause()

    def delayed_thin(self: ThinInsert, records: Any, fence: Any) -> None:
        # The append's own statement (ADR-0089, fenced: ADR-0098) in a transaction that
        # commits late: its notification ids are drawn at the INSERT, its rows become
        # visible at the COMMIT.
        with self._datastore.transaction(commit=True) as cursor:
            self.execute(cursor, records, fence)
            pause()

    PostgresAggregateRecorder._insert_stored_events = delayed  # type: ignore[method-assign]  # noqa: SLF001
    ThinInsert.__call__ = delayed_thin  # type: ignore[method-assign]
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
