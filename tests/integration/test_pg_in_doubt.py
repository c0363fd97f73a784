"""On PostgreSQL, "unavailable" must not mean "stored" (issue 19 point 4, E3, ADR-0064).

Every failure after an append's INSERT was sent is settled from the chain value stored at the
batch's last version once the server answers again; `AppendInDoubt` (a `StoreUnavailable`)
only when it does not answer in time, and retrying the same command then records it once,
whoever retries. The server is cut off by `tests.tcp_proxy` (a COMMIT that lands or is lost,
then a blackout) and its backends are terminated by ``pg_terminate_backend``
(`tests.integration.pg_terminations`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from tests.backends import PG_URL
from tests.integration.pg_terminations import message_texts
from tests.tcp_proxy import CommitCuttingProxy
from turnledger.domain.messages import ChatMessage
from turnledger.store.backend import StoreUnavailable
from turnledger.store.session import open_store

pytestmark = pytest.mark.postgres

T = TypeVar("T")

DARK = 1.5
"""Seconds a blackout lasts: longer than an append keeps asking with ``connect_timeout=1``."""
RECONNECT_SECONDS = 30.0
"""How long a caller retries while the pool reconnects after a blackout."""


def _url(proxy: CommitCuttingProxy, schema: str, connect_timeout: int = 1) -> str:
    return (f"postgresql://postgres@127.0.0.1:{proxy.port}/test?schema={schema}"
            f"&pool_size=2&connect_timeout={connect_timeout}")


def _stored(schema: str, session_id: str) -> list[str]:
    """The session's message texts, read by a fresh store that does not go through the proxy."""
    with open_store(f"{PG_URL}?schema={schema}") as store:
        return message_texts(store.events_of(session_id))


def _when_reachable(call: Callable[[], T]) -> T:
    """``call()``, called again while it raises `StoreUnavailable` (the pool reconnecting after
    a blackout), for up to `RECONNECT_SECONDS`: how a caller retries."""
    deadline = time.monotonic() + RECONNECT_SECONDS
    while True:
        try:
            return call()
        except StoreUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_i19_p4_commit_answer_lost_while_the_server_is_briefly_out_of_reach_succeeds(
    proxy: CommitCuttingProxy, pg_schema: str
) -> None:
    """A COMMIT that landed, then a server out of reach for a moment: success, stored once."""
    with open_store(_url(proxy, pg_schema, connect_timeout=3)) as store:
        session = store.start_session()
        proxy.arm(1, dark=0.5)
        recorded = session.append(ChatMessage.user("kept"))
    assert (1, ["kept"], ["kept"]) == (
        proxy.cuts, message_texts(recorded), _stored(pg_schema, session.id)
    )
