"""The session list from the analytics tables (E7, ADR-0054): the same page as folding.

``session_summaries`` (``turnledger sessions``) reads each listed session's counts from
``tl_session_stats`` / ``tl_session_list`` and folds only the events the tables have not
applied. Every test compares its answer with the fold of every listed session's events (the
same call with `listed_sessions` answering nothing: the path a store without tables takes)
and counts the records decoded, so a page that silently fell back to folding fails too.
SQLite and PostgreSQL only: a ``memory://`` store's tables are private to one `Analytics`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest

import turnledger as tl
from tests.backends import SHARED_BACKENDS, Target
from tests.extras import need
from tests.integration.conftest import SqlRecords
from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.messages import ChatMessage
from turnledger.projections import analytics as analytics_module
from turnledger.projections.analytics import Analytics
from turnledger.projections.counters import Counters, Tally, count, fold_counters
from turnledger.replay.timeline import session_summaries
from turnledger.store.backend import EventStoreBackend
from turnledger.store.keys import new_key_text
from turnledger.store.session import Session, Store, open_store

SHARED = pytest.mark.parametrize("target", SHARED_BACKENDS, indirect=True)

WIDE = ProviderProfile("wide", "w-1", 10_000)
NARROW = ProviderProfile("narrow", "n-1", 60)


@pytest.fixture
def store(target: Target) -> Iterator[Store]:
    with open_store(target.url) as opened:
        yield opened


def _start(store: Store, *, legacy: bool = False) -> Session:
    return store.start_session(
        profile=RuntimeProfile(max_history_messages=2),
        providers=[WIDE, NARROW],
        route=Route("wide", "w-1"),
        legacy=legacy,
    )


def _turns(session: Session, count: int, tag: str) -> None:
    """``count`` user/assistant turns and a request: trims once the turn limit is passed."""
    for i in range(count):
        session.append(ChatMessage.user(f"{tag} question {i} " * 4))
        session.append(ChatMessage.assistant(f"{tag} answer {i} " * 4))
    session.prepare_request()


def _fill(store: Store) -> list[Session]:
    a, b, c = _start(store), _start(store, legacy=True), _start(store)
    _turns(a, 4, "a")
    a.select_route(Route("narrow", "n-1"))
    _turns(b, 3, "b")
    _turns(c, 1, "c")
    return [a, b, c]


class _Decodes:
    """Counts the records `session_summaries` decodes through the backend's mapper."""

    def __init__(self, backend: EventStoreBackend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        decode = backend.mapper.decode_record

        def counted(record: Any) -> Any:
            self.count += 1
            return decode(record)

        monkeypatch.setattr(backend.mapper, "decode_record", counted)


class _Reads:
    """Counts the sessions whose records `session_summaries` reads."""

    def __init__(self, backend: EventStoreBackend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        read = backend.read_records

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return read(*args, **kwargs)

        monkeypatch.setattr(backend, "read_records", counted)


def _folded(backend: EventStoreBackend, monkeypatch: pytest.MonkeyPatch,
            **page: Any) -> list[dict[str, Any]]:
    """The page as folding every listed session's events gives it (no tables consulted)."""
    with monkeypatch.context() as patch:
        patch.setattr(analytics_module, "listed_sessions", lambda backend, ids: {})
        return session_summaries(backend, **page)


def _catch_up(store: Store) -> None:
    with Analytics(store.backend) as analytics:
        analytics.catch_up(batch_size=7)  # batches that split commands: rows re-read


@SHARED
def test_e7_a_caught_up_page_comes_from_the_tables_and_equals_the_fold(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Caught up: every page equals the fold of its sessions, and no record is read."""
    _fill(store)
    _catch_up(store)
    pages = [{}, {"limit": 2}, {"after": UUID(store.sessions()[0]), "limit": 1}]
    expected = [_folded(store.backend, monkeypatch, **page) for page in pages]
    decodes, reads = _Decodes(store.backend, monkeypatch), _Reads(store.backend, monkeypatch)
    actual = [session_summaries(store.backend, **page) for page in pages]
    assert (expected, 0, 0) == (actual, decodes.count, reads.count)


@SHARED
def test_e7_events_after_the_last_catch_up_are_folded_onto_the_tables_counts(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends, a route switch and a new session after the catch-up: the page is still
    exact, and only the events the tables have not applied are decoded."""
    a, b, _ = _fill(store)
    _catch_up(store)
    before = store.backend.max_notification_id()
    _turns(a, 2, "a2")
    b.select_route(Route("narrow", "n-1"))
    d = _start(store)
    _turns(d, 1, "d")
    expected = _folded(store.backend, monkeypatch)
    decodes = _Decodes(store.backend, monkeypatch)
    actual = session_summaries(store.backend)
    new_events = store.backend.max_notification_id() - before
    assert (expected, new_events) == (actual, decodes.count)
    assert "narrow/n-1" == actual[1]["route"]


@SHARED
def test_e7_a_store_never_caught_up_is_folded_and_gets_no_tables(
    target: Target, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No analytics tables: the list folds every session and creates nothing (the store's
    own settings table, which a writable open of PostgreSQL makes for the fence, ADR-0098,
    is no analytics table)."""
    _fill(store)
    expected = _folded(store.backend, monkeypatch)
    actual = session_summaries(store.backend)
    tables = _tables(target)
    analytics = [t for t in tables if t.startswith("tl_") and t != "tl_settings"]
    assert (expected, []) == (actual, analytics)


@SHARED
def test_e7_sessions_started_before_the_list_table_existed_are_folded(
    target: Target, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tables from before ``tl_session_list`` (its rows missing): those sessions are folded,
    a session started afterwards is read from the tables; the page is the fold's."""
    old = _fill(store)
    _catch_up(store)
    target.query("DELETE FROM tl_session_list")
    new = _start(store)
    _turns(new, 1, "new")
    _catch_up(store)
    expected = _folded(store.backend, monkeypatch)
    decodes = _Decodes(store.backend, monkeypatch)
    actual = session_summaries(store.backend)
    old_events = sum(len(s.events()) for s in old)
    assert (expected, old_events) == (actual, decodes.count)
    assert [(new.id,)] == [(str(r[0]),) for r in target.query(
        "SELECT session_id FROM tl_session_list")]


@SHARED
def test_e11_a_corrupt_record_after_the_catch_up_is_named_as_the_fold_names_it(
    target: Target, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record the tables have not applied that cannot be decoded: ``corrupt_at`` is its
    version and the counts stop before it, as when folding."""
    a, _, _ = _fill(store)
    _catch_up(store)
    version = len(a.events()) + 1
    _turns(a, 2, "late")
    records = SqlRecords(target)
    topic, _ = records.read(UUID(a.id), version)
    records.write(UUID(a.id), version, topic, b"\xc1garbage")
    expected = _folded(store.backend, monkeypatch)
    actual = session_summaries(store.backend)
    assert (expected, version) == (actual, actual[0]["corrupt_at"])


@SHARED
def test_e7_a_forgotten_session_is_listed_as_the_fold_lists_it(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forgetting (which catches the tables up first): the forgotten session shows its
    records only, the others their counts from the tables; the page is the fold's."""
    need("cryptography")
    monkeypatch.delenv("TURNLEDGER_KEY", raising=False)
    with tl.open_store(target.url, key=new_key_text()) as store:
        a, b, _ = _fill(store)
        store.forget(b.id)
        _turns(a, 1, "after")
        expected = _folded(store.backend, monkeypatch)
        actual = session_summaries(store.backend)
    assert expected == actual
    assert (True, "(forgotten)") == (actual[1]["forgotten"], actual[1]["route"])


def _tables(target: Target) -> list[str]:
    if target.sqlite_path is not None:
        rows = target.query("SELECT name FROM sqlite_master WHERE type = 'table'")
    else:
        rows = target.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            target.pg_schema,
        )
    return sorted(str(r[0]) for r in rows)


def test_e7_a_tally_read_between_events_counts_as_one_fold() -> None:
    """`Tally.counters()` mid-way, then more events: the same counts as folding all at once
    and as `count` event by event."""
    with open_store("memory://session-list-tally") as store:
        sessions = _fill(store)
        events = [e for s in sessions for e in s.events()]
    tally = Tally()
    middle = []
    for i, event in enumerate(events):
        tally.add(event)
        if i % 5 == 0:
            middle.append(tally.counters())
    stepwise = Counters()
    for event in events:
        stepwise = count(stepwise, event)
    assert (fold_counters(events), stepwise) == (tally.counters(), tally.counters())
    assert fold_counters(events[:1]) == middle[0]
