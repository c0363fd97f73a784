"""Issue 37's fault figures through the server: SIGKILL a replica mid-request, lose nothing.

A small run of ``benchmarks/server_kills.py``'s loop (`run_lane`): six client threads append
items with ids they chose over ``turnledger serve`` processes (three on one PostgreSQL store,
one on a SQLite file) while a replica is SIGKILLed five times at random moments and restarted
on a new port; a request that gets no answer is retried with the same ids on the next live
replica until it is answered (200, or 400 `duplicate_item_id` when the kill cut the
answer of a stored write). Then nothing acknowledged is missing, no id is stored twice, no item
appears that no client sent, every replica lists what the store holds and the store verifies.
At least one kill must cut a request in flight, else the run proved nothing. The seed is
printed; ``TURNLEDGER_KILL_SEED`` replays the kills.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.backends import SHARED_BACKENDS, fresh_target
from tests.extras import need

KILLS = 5
SECONDS = {"sqlite": 10.0, "postgresql": 10.0}
REPLICAS = {"sqlite": 1, "postgresql": 3}


@pytest.mark.slow  # ~11 s on SQLite, ~17 s on PostgreSQL (2 cores)
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_i37_sigkill_of_a_replica_mid_request_loses_and_duplicates_nothing(
        kind: str, tmp_path: Path) -> None:
    need("uvicorn")
    need("httpx")
    from benchmarks.server_kills import kill_seed, run_lane

    seed = kill_seed()
    print(f"server kills seed: {seed} (TURNLEDGER_KILL_SEED={seed} replays the kills)")
    with fresh_target(kind, tmp_path) as target:
        figures = run_lane(target.url, kind, replicas=REPLICAS[kind], kills=KILLS,
                           seconds=SECONDS[kind], seed=seed)
    context = f"seed {seed}: {figures.row()}"
    assert figures.kills == KILLS, context
    assert figures.cut > 0, f"no kill landed mid-request, the run proves nothing; {context}"
    assert figures.acknowledged > 0, context
    assert figures.unexpected == [], context
    assert figures.unanswered == 0, context
    assert (figures.lost, figures.duplicated, figures.phantom) == (0, 0, 0), context
    assert figures.replicas_disagree == 0, context
    assert figures.verify_ok, context
    assert figures.items_present == figures.acknowledged_items + figures.in_doubt_present, context
