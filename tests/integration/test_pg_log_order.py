"""PostgreSQL's ``log_order=lock`` (ADR-0083) through the one insert path (ADR-0102).

Under ``lock`` every append takes the events table's EXCLUSIVE lock and sends a NOTIFY before
its one insert statement, in one transaction; under ``horizon`` (the default) it takes
neither. Both check the fence in that statement (ADR-0098) and run a forget's keys statements
in the same transaction (ADR-0066).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.backends import PG_CONNINFO, PG_URL, pg_execute
from turnledger.domain.errors import AppendRefused, SessionForgottenError, StoreChanged
from turnledger.domain.events import MessageAppended
from turnledger.domain.messages import Chat, ChatMessage
from turnledger.store.session import open_store

pytestmark = pytest.mark.postgres


@contextlib.contextmanager
def _row_exclusive(schema: str) -> Iterator[None]:
    """Hold the ROW EXCLUSIVE lock an insert transaction holds (it conflicts with EXCLUSIVE,
    not with another ROW EXCLUSIVE) from another connection, until leaving."""
    import psycopg

    with psycopg.connect(PG_CONNINFO) as blocker:
        blocker.execute("SET idle_in_transaction_session_timeout = '20s'")
        blocker.execute(f'LOCK TABLE "{schema}".stored_events IN ROW EXCLUSIVE MODE')
        try:
            yield
        finally:
            blocker.rollback()


def _contents(url: str, session_id: str) -> list[str]:
    with open_store(url) as store:
        return [e.message.message.content for e in store.events_of(session_id)
                if isinstance(e, MessageAppended) and isinstance(e.message, Chat)]


def _notifications(listener: Any) -> list[str]:
    return [n.channel for n in listener.notifies(timeout=0.5, stop_after=1)]


@pytest.mark.parametrize(("order", "waits", "notified"), [
    ("lock", True, ["stored_events"]),
    ("horizon", False, []),
])
def test_e3_log_order_lock_takes_the_table_lock_and_notifies_horizon_neither(
    pg_schema: str, order: str, waits: bool, notified: list[str]
) -> None:
    import psycopg

    url = f"{PG_URL}?schema={pg_schema}&pool_size=1&lock_timeout=0.3&log_order={order}"
    with open_store(url) as store, psycopg.connect(PG_CONNINFO, autocommit=True) as listener:
        session = store.start_session()
        listener.execute("LISTEN stored_events")
        with _row_exclusive(pg_schema):
            try:
                session.append(ChatMessage.user("beside another insert"))
                refused = False
            except AppendRefused:
                refused = True
        if refused:
            session.append(ChatMessage.user("after it"))
        channels = _notifications(listener)
        expected = ["after it"] if waits else ["beside another insert"]
        assert (waits, notified, expected) == (refused, channels, _contents(url, session.id))


@pytest.mark.parametrize("order", ["lock", "horizon"])
def test_e3_both_log_orders_refuse_an_append_after_the_settings_changed(
    pg_schema: str, order: str
) -> None:
    """The fence (ADR-0098) holds under either order: a store encrypted since the writer
    opened it in clear refuses the append, and nothing of it is stored."""
    url = f"{PG_URL}?schema={pg_schema}&log_order={order}"
    with open_store(url) as store:
        session = store.start_session()
        session.append(ChatMessage.user("before"))
        pg_execute(f"INSERT INTO \"{pg_schema}\".tl_settings (name, value) "
                   "VALUES ('encryption', 'someone else''s key')")
        with pytest.raises(StoreChanged):
            session.append(ChatMessage.user("after"))
        pg_execute(f"DELETE FROM \"{pg_schema}\".tl_settings WHERE name = 'encryption'")
    assert ["before"] == _contents(url, session.id)


def test_e3_log_order_lock_forgets_a_session_with_its_key_in_one_transaction(
    pg_schema: str,
) -> None:
    """A forget's keys statements run in the append's transaction under the table lock too
    (ADR-0066): its record is stored, its data key destroyed, its content unreadable."""
    pytest.importorskip("cryptography")
    from turnledger.store.keys import new_key_text

    url = f"{PG_URL}?schema={pg_schema}&log_order=lock"
    with open_store(url, key=new_key_text()) as store:
        session = store.start_session()
        session.append(ChatMessage.user("secret"))
        store.forget(session.id)
        with pytest.raises(SessionForgottenError):
            store.events_of(session.id)
    keys = pg_execute(f"SELECT wrapped IS NULL, forgotten_at IS NOT NULL FROM \"{pg_schema}\""
                      ".tl_keys WHERE session_id = %s", session.id)
    newest = pg_execute(f"SELECT topic FROM \"{pg_schema}\".stored_events"
                        " ORDER BY originator_version DESC LIMIT 1")
    assert ([(True, True)], True) == (keys, "SessionForgotten" in newest[0][0])
