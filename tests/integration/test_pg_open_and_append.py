"""Issue 23, ADR-0089: a PostgreSQL store opens on one server connection and appends with one
statement, with the same checks.

An open checks the tables on one connection that the pool then hands out first (the pool
starts on first use); the composite types a process has read are read again when the schema
was made again; a ``pool=shared`` store reads the settings afresh on every open; an append of
one or many records is one INSERT that either stores the whole batch or nothing, with the
transaction id of the horizon (ADR-0083). Times are measured in ``benchmarks.pg_open`` and
``benchmarks.client_cpu``, never here.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from eventsourcing.persistence import StoredEvent

from tests.backends import PG_URL, pg_execute
from turnledger.domain.errors import ConcurrencyConflict, KeyRequired
from turnledger.domain.messages import ChatMessage
from turnledger.store.backends.postgres import close_shared_pools
from turnledger.store.keys import new_key_text
from turnledger.store.session import open_store

pytestmark = pytest.mark.postgres

U = ChatMessage.user


@pytest.fixture
def app_name() -> Iterator[str]:
    """A libpq ``application_name`` for the connections opened meanwhile (``PGAPPNAME``)."""
    name = f"tl-i23-{uuid.uuid4().hex[:12]}"
    before = os.environ.get("PGAPPNAME")
    os.environ["PGAPPNAME"] = name
    try:
        yield name
    finally:
        if before is None:
            del os.environ["PGAPPNAME"]
        else:
            os.environ["PGAPPNAME"] = before


def _backends(app_name: str) -> set[int]:
    return {int(row[0]) for row in pg_execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        " AND pid <> pg_backend_pid()", app_name
    )}


def test_i23_an_existing_store_opens_on_one_connection_that_its_pool_then_uses(
    pg_schema: str, app_name: str
) -> None:
    url = f"{PG_URL}?schema={pg_schema}"
    with open_store(url):
        pass  # the tables
    store = open_store(url)
    opened = _backends(app_name)
    session = store.start_session()
    session.append(U("hello"))
    used = _backends(app_name)
    store.close()
    assert (1, opened, set()) == (len(opened), used, _backends(app_name))


def test_i23_an_open_store_sees_only_what_it_opened_and_a_new_one_checks_again(
    pg_schema: str,
) -> None:
    """The horizon column dropped under a closed store: the next open finds it missing and
    adds it again (nothing is taken on trust from an earlier open of the process)."""
    url = f"{PG_URL}?schema={pg_schema}"
    with open_store(url) as store:
        store.start_session().append(U("before"))
    pg_execute(f'DROP INDEX "{pg_schema}".stored_events_horizon_idx')
    with open_store(url) as store:
        store.start_session().append(U("after"))
    assert pg_execute(
        "SELECT to_regclass(%s) IS NOT NULL", f'"{pg_schema}".stored_events_horizon_idx'
    ) == [(True,)]


def test_i23_a_schema_made_again_has_its_composite_types_read_again(pg_schema: str) -> None:
    """The process keeps the composite types it read, by oid: a schema dropped and made
    again (new oids) is read again, and the library's insert with them works."""
    url = f"{PG_URL}?schema={pg_schema}"
    for _ in range(2):
        with open_store(url):
            pass  # made (first time: made again after the drop)
        with open_store(url) as store:  # an existing store: the catalog and the cache
            session_id = uuid.uuid4()
            store.backend.snapshot_recorder.insert_events(
                [StoredEvent(session_id, 1, "probe", b"state")]
            )
            assert [e.state for e in store.backend.snapshot_recorder.select_events(
                session_id
            )] == [b"state"]
        pg_execute(f'DROP SCHEMA "{pg_schema}" CASCADE')


def test_i23_a_shared_pool_reads_the_settings_again_on_every_open(pg_schema: str) -> None:
    """A key claimed by another open after the pool was made: the next open without the key
    is refused, as on a pool of its own."""
    url = f"{PG_URL}?schema={pg_schema}&pool=shared"
    try:
        open_store(url).close()  # empty, unencrypted: the pool is made
        open_store(url, key=new_key_text()).close()  # claims encryption for the empty store
        with pytest.raises(KeyRequired):
            open_store(url)
    finally:
        close_shared_pools()


@pytest.mark.parametrize("size", [1, 3, 8, 9, 40], ids=lambda n: f"{n}-records")
def test_i23_a_batch_is_one_insert_stored_whole_with_its_transaction_id(
    pg_schema: str, size: int
) -> None:
    url = f"{PG_URL}?schema={pg_schema}"
    with open_store(url) as store:
        session = store.start_session()
        before = session.version
        session.extend([U(f"m{i}") for i in range(size)])
        assert [m.content for m in store.restore(session.id).chat_view()] == [
            f"m{i}" for i in range(size)
        ]
    rows = pg_execute(
        f'SELECT count(DISTINCT transaction_id), min(transaction_id::text::bigint)'
        f' FROM "{pg_schema}".stored_events WHERE originator_id = %s'
        f' AND originator_version > %s', uuid.UUID(session.id), before,
    )
    assert rows[0][0] == 1  # one transaction for the batch
    assert rows[0][1] > 0  # the horizon's default, not the migrated rows' 0


@pytest.mark.parametrize("size", [2, 20], ids=lambda n: f"{n}-records")
def test_i23_a_batch_that_meets_another_writers_version_stores_nothing(
    pg_schema: str, size: int
) -> None:
    url = f"{PG_URL}?schema={pg_schema}"
    with open_store(url) as mine, open_store(url) as theirs:
        session = mine.start_session()
        session.append(U("first"))
        theirs.restore(session.id).append(U("theirs"))
        with pytest.raises(ConcurrencyConflict):
            session.extend([U(f"mine {i}") for i in range(size)])
        assert [m.content for m in theirs.restore(session.id).chat_view()] == [
            "first", "theirs"
        ]
