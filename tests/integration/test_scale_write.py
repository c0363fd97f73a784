"""Issue 12 (points 3, 5, 6): appends without a head read, SQLite's ``synchronous`` option,
paged session lists."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tests.backends import ALL_BACKENDS, SHARED_BACKENDS, Target, fresh_target
from turnledger.cli import main
from turnledger.domain.errors import ConcurrencyConflict, SessionNotFound
from turnledger.domain.events import MessageAppended
from turnledger.domain.messages import Chat, ChatMessage
from turnledger.store.backend import InvalidStoreURL, retry_on_conflict
from turnledger.store.session import Store, open_store


@pytest.fixture(params=ALL_BACKENDS)
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    with fresh_target(request.param, tmp_path) as fresh:
        yield fresh


def _texts(store: Store, session_id: str) -> list[str]:
    return [e.message.message.content for e in store.events_of(session_id)
            if isinstance(e, MessageAppended) and isinstance(e.message, Chat)]


def test_appends_read_no_head_from_the_store(shared: Target) -> None:
    """A session's appends and requests never read the stored head: the position knows it."""
    with open_store(shared.url) as store:
        calls: list[UUID] = []
        head = store.backend.head

        def counted(session_id: UUID) -> tuple[int, bytes]:
            calls.append(session_id)
            return head(session_id)

        store.backend.head = counted  # type: ignore[method-assign]
        session = store.start_session()
        for i in range(5):
            session.append(ChatMessage.user(f"q{i}"))
            session.prepare_request()
        assert ([], len(store.events_of(session.id))) == (calls, session.version)


def test_e3_two_writers_without_head_reads_lose_and_duplicate_nothing(shared: Target) -> None:
    """Two store objects racing on one session (threads, retry_on_conflict): every append that
    returned is stored once, nothing else is, and the hash chain holds."""
    with open_store(shared.url) as first_store, open_store(shared.url) as second_store:
        session_id = first_store.start_session().id
        writers = [first_store.restore(session_id), second_store.restore(session_id)]
        returned: list[str] = []
        lock = threading.Lock()
        start = threading.Barrier(2)

        def write(name: str, index: int) -> None:
            start.wait(timeout=30)
            for i in range(12):
                text = f"{name}{i}"
                retry_on_conflict(lambda t=text: writers[index].append(ChatMessage.user(t)))
                with lock:
                    returned.append(text)

        threads = [threading.Thread(target=write, args=(n, i)) for i, n in enumerate("ab")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        stored = _texts(first_store, session_id)
        assert Counter(returned) == Counter(stored)
        assert 24 == len(stored)
        assert [] == first_store.backend.check_chain(UUID(session_id))


def test_e3_a_stale_writer_conflicts_then_settles_on_the_newest_head(shared: Target) -> None:
    """A session object behind the store conflicts on the (session, version) key, stores
    nothing, catches up, and its retry continues the chain after the other writer's event."""
    with open_store(shared.url) as store, open_store(shared.url) as other:
        ahead = store.start_session()
        behind = other.restore(ahead.id)
        ahead.append(ChatMessage.user("first"))
        with pytest.raises(ConcurrencyConflict):
            behind.append(ChatMessage.user("stale"))
        assert ["first"] == _texts(store, ahead.id)
        retry_on_conflict(lambda: behind.append(ChatMessage.user("second")))
        assert ["first", "second"] == _texts(store, ahead.id)
        assert [] == store.backend.check_chain(UUID(ahead.id))
        assert behind.version == store.restore(ahead.id).version


def _pragma(store: Store) -> tuple[int, int]:
    datastore: Any = store.backend.recorder.datastore  # type: ignore[attr-defined]
    with datastore.transaction(commit=False) as cursor:
        cursor.execute("PRAGMA synchronous")
        events = cursor.fetchone()[0]
    sql = store.backend.connect_sql().connection
    try:
        projections = sql.execute("PRAGMA synchronous").fetchone()[0]
    finally:
        sql.close()
    return events, projections


@pytest.mark.parametrize(("option", "expected"), [("", 2), ("?synchronous=full", 2),
                                                  ("?synchronous=normal", 1)])
def test_sqlite_synchronous_option_is_applied_to_every_connection(
    tmp_path: Path, option: str, expected: int
) -> None:
    """``synchronous`` reaches the event store's and the projections' connections (2 = FULL,
    the default; 1 = NORMAL)."""
    with open_store(f"sqlite:///{tmp_path / 'a.db'}{option}") as store:
        store.start_session().append(ChatMessage.user("hello"))
        assert (expected, expected) == _pragma(store)


@pytest.mark.parametrize("value", ["off", "NORMAL", "", "extra"])
def test_sqlite_synchronous_option_refuses_other_values(tmp_path: Path, value: str) -> None:
    """A ``synchronous`` other than full or normal is an InvalidStoreURL naming the option."""
    url = f"sqlite:///{tmp_path / 'a.db'}?synchronous={value}"
    with pytest.raises(InvalidStoreURL, match=f"option synchronous must be full or normal, "
                                              f"got '{value}'"):
        open_store(url)
    assert not (tmp_path / "a.db").exists()


def test_paged_sessions_list_every_session_exactly_once(shared: Target) -> None:
    """Pages of 3 chained by ``after`` give every session once, in creation order."""
    with open_store(shared.url) as store:
        created = [store.start_session().id for _ in range(8)]
        pages: list[list[str]] = []
        after = None
        while True:
            page = store.sessions(after=after, limit=3)
            if not page:
                break
            pages.append(page)
            after = page[-1]
        assert ([3, 3, 2], created) == ([len(p) for p in pages], [s for p in pages for s in p])
        assert created == store.sessions()
        with pytest.raises(SessionNotFound):
            store.sessions(after="00000000-0000-0000-0000-000000000001", limit=3)


@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_cli_sessions_pages_with_limit_and_after(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``sessions --limit/--after`` lists one page and names the next; a bad --after exits 2."""
    import json

    with fresh_target(kind, tmp_path) as target:
        with open_store(target.url) as store:
            created = [store.start_session().id for _ in range(5)]
        listed: list[str] = []
        after: list[str] = []
        for _ in range(3):
            assert 0 == main(["--store", target.url, "sessions", "--limit", "2", *after,
                              "--json"])
            out, err = capsys.readouterr()
            listed += [row["session_id"] for row in json.loads(out)]
            after = ["--after", listed[-1]]
        assert created == listed
        assert "" == err  # the last page is short: no next page is named
        assert 2 == main(["--store", target.url, "sessions", "--after", "not-a-uuid"])
        assert "not a UUID" in capsys.readouterr().err


def test_a_writer_that_lost_a_race_reads_the_head_before_its_next_commands(
    shared: Target,
) -> None:
    """After a conflict a session object checks the stored head first (a cheap catch-up under
    contention): a newer head raises before anything is decided and nothing is stored."""
    with open_store(shared.url) as store, open_store(shared.url) as other:
        winner = store.start_session()
        loser = other.restore(winner.id)
        calls: list[UUID] = []
        head = other.backend.head

        def counted(session_id: UUID) -> tuple[int, bytes]:
            calls.append(session_id)
            return head(session_id)

        other.backend.head = counted  # type: ignore[method-assign]
        winner.append(ChatMessage.user("w1"))
        with pytest.raises(ConcurrencyConflict):  # found by the insert: no head read
            loser.append(ChatMessage.user("l1"))
        assert [] == calls
        loser.append(ChatMessage.user("l2"))  # reloaded, then checks the head: current
        with pytest.raises(ConcurrencyConflict):  # the winner did not see l2 either
            winner.append(ChatMessage.user("w2"))
        winner.append(ChatMessage.user("w2"))  # reloaded
        with pytest.raises(ConcurrencyConflict, match="recorded by another writer"):
            loser.append(ChatMessage.user("l3"))  # refused by the head check
        assert 2 == len(calls)
        loser.append(ChatMessage.user("l4"))
        assert ["w1", "l2", "w2", "l4"] == _texts(store, winner.id)
        assert [] == store.backend.check_chain(UUID(winner.id))


@pytest.mark.parametrize(("option", "expected"), [("", 2), ("?synchronous=normal", 1)])
def test_e3_sqlite_appends_commit_on_a_connection_with_the_stores_synchronous(
    tmp_path: Path, option: str, expected: int
) -> None:
    """The thin SQLite insert (ADR-0056) commits with the URL's ``synchronous``, stores what
    the library's insert stores (same table, checked reads pass) and closes with the store."""
    with open_store(f"sqlite:///{tmp_path / 'a.db'}{option}") as store:
        session = store.start_session()
        session.extend([ChatMessage.user("hello"), ChatMessage.assistant("hi")])
        appender: Any = store.backend._insert_records.__self__  # type: ignore[attr-defined]  # noqa: SLF001
        pragma = appender._connection.execute("PRAGMA synchronous").fetchone()[0]  # noqa: SLF001
        stored = store.backend.read_records(UUID(session.id))
        found = store.backend.check_chain(UUID(session.id))
        assert (expected, 4, []) == (pragma, len(stored), found)
    assert appender._connection is None  # noqa: SLF001


def test_e3_a_lost_race_costs_a_catch_up_not_a_reload(shared: Target) -> None:
    """The loser of a race decided on a clone of its state (ADR-0094): its stored state stands,
    so neither the lost append nor its retry loads a snapshot (what a reload reads first);
    they read only what the winner recorded. Its state then equals a fresh restore's, in
    both views and in every fact a request reads."""
    with open_store(shared.url, snapshot_messages=4) as store, \
            open_store(shared.url, snapshot_messages=4) as other:
        ahead = store.start_session()
        for i in range(10):  # past a few snapshots
            ahead.append(ChatMessage.user(f"q{i}"))
            ahead.append(ChatMessage.assistant(f"a{i}"))
        behind = other.restore(ahead.id)
        ahead.append(ChatMessage.user("first"))
        ahead.prepare_request()
        loads: list[UUID] = []
        load_snapshot = other.backend.load_snapshot

        def counted(session_id: UUID) -> Any:
            loads.append(session_id)
            return load_snapshot(session_id)

        other.backend.load_snapshot = counted  # type: ignore[method-assign]
        with pytest.raises(ConcurrencyConflict):
            behind.append(ChatMessage.assistant("stale"))
        retry_on_conflict(lambda: behind.append(ChatMessage.assistant("second")))
        behind.prepare_request()
        assert [] == loads
        fresh = store.restore(ahead.id)
        assert (fresh.version, fresh.chat_view(), fresh.conversation_view()) == (
            behind.version, behind.chat_view(), behind.conversation_view())
        assert behind.state == store.read_state(ahead.id)
        recorded = [*(t for i in range(10) for t in (f"q{i}", f"a{i}")), "first", "second"]
        assert recorded == _texts(store, ahead.id)
        assert [] == store.backend.check_chain(UUID(ahead.id))
