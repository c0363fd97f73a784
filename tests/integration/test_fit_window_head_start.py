"""`Session.fit_window(decided=...)` (ADR-0093): the window is handed to the caller once it is
decided and the backend only waits on its commit, so an integration builds its framework's
messages meanwhile; what the call returns is that very window once the commit landed.

SQLite and PostgreSQL (the in-memory store has no commit to wait for and tells nothing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import turnledger as tl
from tests.backends import SHARED_BACKENDS, Target, fresh_target
from turnledger.audit import verify
from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.messages import ChatMessage

OPENAI = ProviderProfile("openai", "gpt-4o", 128_000)
ROUTE = Route("openai", "gpt-4o")
PROFILE = RuntimeProfile(max_context_tokens=300, max_history_messages=4)


@pytest.fixture(params=SHARED_BACKENDS)
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    with fresh_target(request.param, tmp_path) as fresh:
        yield fresh


def _rows(target: Target, session: tl.Session) -> int:
    """The session's records as the database holds them, read on a connection of its own."""
    mark = target.mark()
    ((count,),) = target.query(
        f"SELECT COUNT(*) FROM stored_events WHERE originator_id = {mark}",
        target.stored_id(session.id))
    return int(count)


def _step(n: int) -> list[ChatMessage]:
    return [ChatMessage.user(f"question {n} " * 8), ChatMessage.assistant(f"answer {n} " * 8)]


def test_i22_fit_window_tells_the_decided_window_before_its_commit(shared: Target) -> None:
    with tl.open_store(shared.url) as store:
        session = store.start_session(PROFILE, (OPENAI,), ROUTE)
        told: list[tuple[list[ChatMessage], int]] = []

        def tell(window: list[ChatMessage]) -> None:
            told.append((window, _rows(shared, session)))

        for n in range(6):  # trims: the window told is the trimmed one
            told.clear()
            before = _rows(shared, session)
            window = session.fit_window(messages=_step(n), decided=tell)
            assert len(told) == 1
            (early, rows_when_told), = told
            assert early is window
            assert (before, True) == (rows_when_told, _rows(shared, session) > before)
            assert window == session.chat_view()
        assert any(isinstance(e, tl.HistoryTrimmed) for e in session.events())


def test_i22_a_head_start_that_fails_changes_nothing_of_the_write(shared: Target) -> None:
    def fails(window: list[ChatMessage]) -> None:
        raise RuntimeError("the caller's head start broke")

    with tl.open_store(shared.url) as store:
        session = store.start_session(PROFILE, (OPENAI,), ROUTE)
        version = session.version
        window = session.fit_window(messages=_step(1), decided=fails)
        assert ["question 1 " * 8, "answer 1 " * 8] == [m.content for m in window]
        assert version < session.version
        restored = store.restore(session.id)
        assert window == restored.chat_view()
        assert () == verify(store.backend).violations


def test_i22_fit_window_with_nothing_to_write_tells_nothing(shared: Target) -> None:
    with tl.open_store(shared.url) as store:
        session = store.start_session(PROFILE, (OPENAI,), ROUTE)
        session.extend(_step(1))
        told: list[list[ChatMessage]] = []
        version = session.version
        assert session.chat_view() == session.fit_window(decided=told.append)
        assert ([], version) == (told, session.version)
