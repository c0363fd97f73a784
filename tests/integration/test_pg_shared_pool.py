"""ADR-0084: ``pool=shared`` gives every PostgreSQL store of one URL in a process one pool.

The second ``open_store`` reuses the first one's pool (no new pool connections), closing a
store leaves the pool to the others, the process's server connections stay bounded by
``pool_size + max_overflow`` however many stores are opened, and `close_shared_pools` closes
them. Times are measured in ``benchmarks.pg_open``, never here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.backends import PG_URL, pg_execute
from turnledger.domain.errors import InvalidStoreURL
from turnledger.domain.messages import ChatMessage
from turnledger.store.backends.port import StoreUnavailable
from turnledger.store.backends.postgres import close_shared_pools
from turnledger.store.session import open_store


@pytest.fixture
def shared_url(pg_schema: str) -> Iterator[str]:
    yield f"{PG_URL}?schema={pg_schema}&pool=shared&pool_size=2"
    close_shared_pools()


def _pool_connections(schema: str) -> int:
    """Server connections of this process's pools: the library names no application, so
    count the backends whose last query named the schema's tables, idle in the pool."""
    return int(pg_execute(
        "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
        " AND datname = 'test' AND query LIKE %s", f"%{schema}%",
    )[0][0])


def test_stores_of_one_url_share_one_pool_and_survive_each_others_close(
    shared_url: str, pg_schema: str
) -> None:
    first = open_store(shared_url)
    session = first.start_session()
    session.append(ChatMessage.user("hello"))
    stores = [open_store(shared_url) for _ in range(20)]
    assert {id(s.backend.recorder.datastore.pool) for s in [first, *stores]} == {
        id(first.backend.recorder.datastore.pool)
    }
    for store in stores:
        assert store.restore(session.id).chat_view() == session.chat_view()
        store.close()
    first.close()
    again = open_store(shared_url)
    again.restore(session.id).append(ChatMessage.user("still there"))
    assert _pool_connections(pg_schema) <= 2  # pool_size 2, max_overflow 0: bounded
    close_shared_pools()
    with pytest.raises(StoreUnavailable):
        again.restore(session.id)
    reopened = open_store(shared_url)  # a new pool after close_shared_pools
    assert len(reopened.restore(session.id).chat_view()) == 2
    reopened.close()


def test_a_different_setting_gets_its_own_pool(shared_url: str) -> None:
    one = open_store(shared_url)
    other = open_store(shared_url.replace("pool_size=2", "pool_size=3"))
    try:
        assert one.backend.recorder.datastore.pool is not (
            other.backend.recorder.datastore.pool
        )
    finally:
        one.close()
        other.close()


def test_pool_must_be_own_or_shared() -> None:
    with pytest.raises(InvalidStoreURL, match="pool must be own or shared"):
        open_store(f"{PG_URL}?pool=global")
