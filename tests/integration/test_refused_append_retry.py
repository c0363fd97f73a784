"""An append the store refused because a limit ran out is retried by the integrations.

Issue 19 point 6 / ADR-0065, as amended at issue 23: under load (many writers of one
conversation, a held lock, a pool wait) PostgreSQL refuses an append before anything of it can
commit (a lock, statement or connect timeout). The core `Session` raises `AppendRefused` (a
`StoreUnavailable` that says nothing was stored); the framework integrations call again within
their conflict budget, as after a conflict, so the framework's call lands once. Before the
amendment, one such refusal ended the framework's call (5-10 of 1,000 calls of the fifty-objects
test on a loaded machine).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest

from tests.backends import PG_CONNINFO, PG_URL
from tests.extras import need
from turnledger.domain.errors import AppendRefused, StoreUnavailable
from turnledger.domain.events import MessageAppended
from turnledger.domain.messages import Chat, ChatMessage
from turnledger.store.session import open_store

pytestmark = pytest.mark.postgres


@contextlib.contextmanager
def _table_locked(schema: str, release_after: float | None) -> Iterator[None]:
    """Hold an EXCLUSIVE lock on the events table (appends wait, reads do not) from another
    connection; released after ``release_after`` seconds by a timer, else on leaving."""
    import psycopg

    blocker = psycopg.connect(PG_CONNINFO)
    blocker.execute("SET idle_in_transaction_session_timeout = '20s'")
    blocker.execute(f'LOCK TABLE "{schema}".stored_events IN EXCLUSIVE MODE')
    timer = threading.Timer(release_after or 0, blocker.rollback)
    if release_after is not None:
        timer.start()
    try:
        yield
    finally:
        timer.join() if release_after is not None else blocker.rollback()
        blocker.close()


def _contents(url: str, session_id: object) -> list[str]:
    with open_store(url) as store:
        return [e.message.message.content for e in store.events_of(session_id)  # type: ignore[arg-type]
                if isinstance(e, MessageAppended) and isinstance(e.message, Chat)]


def test_i19_p6_a_refused_append_is_an_append_refused_and_stores_nothing(pg_schema: str) -> None:
    """The core session raises `AppendRefused` (a `StoreUnavailable`) and records nothing."""
    url = f"{PG_URL}?schema={pg_schema}&pool_size=1&lock_timeout=0.3"
    with open_store(url) as store:
        session = store.start_session()
        session.append(ChatMessage.user("hello"))
        with _table_locked(pg_schema, None), pytest.raises(AppendRefused) as refused:
            session.append(ChatMessage.user("blocked"))
        assert isinstance(refused.value, StoreUnavailable)
        assert "lock_timeout=0.3 s exceeded" in str(refused.value)
        assert "nothing of this batch was stored" in str(refused.value)
        session.append(ChatMessage.user("after"))
    assert ["hello", "after"] == _contents(url, session.id)


def test_i19_p6_the_agents_sdk_session_retries_a_refused_append_and_lands_once(
    pg_schema: str,
) -> None:
    """A lock held for 1.5 s refuses each attempt of `add_items` (lock_timeout 0.3 s) until it
    is released: the call returns, and its items are in the log once."""
    need("agents")
    import asyncio

    from turnledger.integrations.openai_agents import TurnledgerSession

    url = f"{PG_URL}?schema={pg_schema}&pool_size=1&lock_timeout=0.3"
    with open_store(url) as store:
        session = TurnledgerSession("refused", store)
        asyncio.run(session.add_items([{"role": "user", "content": "first"}]))
        with _table_locked(pg_schema, release_after=1.5):
            asyncio.run(session.add_items([{"role": "user", "content": "while locked"}]))
        items = asyncio.run(session.get_items())
    assert ["first", "while locked"] == [item["content"] for item in items]


def test_i19_p6_the_integration_gives_up_with_append_refused_when_its_budget_is_spent(
    pg_schema: str,
) -> None:
    """A budget shorter than the lock: `AppendRefused` names the call and the attempts, and
    nothing of the call is in the log."""
    need("agents")
    import asyncio

    from turnledger.integrations.openai_agents import TurnledgerSession

    url = f"{PG_URL}?schema={pg_schema}&pool_size=1&lock_timeout=0.2"
    with open_store(url) as store:
        session = TurnledgerSession("refused", store, conflict_budget_seconds=0.5)
        asyncio.run(session.add_items([{"role": "user", "content": "first"}]))
        with _table_locked(pg_schema, None), pytest.raises(AppendRefused) as refused:
            asyncio.run(session.add_items([{"role": "user", "content": "never"}]))
        items = asyncio.run(session.get_items())
    message = str(refused.value)
    assert ("gave up after" in message, "nothing of this call was recorded" in message) == (
        True, True), message
    assert ["first"] == [item["content"] for item in items]


def test_e3_a_lock_timeout_never_leaves_a_pooled_connection_unable_to_append(
    pg_schema: str,
) -> None:
    """One connection, a lock timeout on each of eight appends in a row, each followed by an
    append that must land. One of the refused inserts is the one psycopg prepares (its fifth
    use): before the fix, its refused Parse stayed counted as prepared and every later append
    on the connection failed ('prepared statement "_pg3_0" does not exist')."""
    url = f"{PG_URL}?schema={pg_schema}&pool_size=1&max_overflow=0&lock_timeout=0.2"
    with open_store(url) as store:
        session = store.start_session()
        for round_ in range(8):
            with _table_locked(pg_schema, None), pytest.raises(AppendRefused):
                session.append(ChatMessage.user(f"refused {round_}"))
            session.append(ChatMessage.user(f"landed {round_}"))
    assert [f"landed {n}" for n in range(8)] == _contents(url, session.id)
