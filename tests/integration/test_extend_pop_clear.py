"""`Session.extend` records a step in one transaction; `pop` and `clear` are recorded events
(issue 10, E1-E5).

The property test says extending a session by chunks gives the events, views and trims that
appending the same messages one by one gives (timestamps aside), on memory and SQLite.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.backends import Target
from tests.properties import examples
from tests.strategies import conversation_histories
from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.events import (
    DomainEvent,
    HistoryCleared,
    MessageAppended,
    MessagePopped,
    TrimDecided,
)
from turnledger.domain.messages import (
    BREADCRUMB_TEXT,
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    to_chat_messages,
)
from turnledger.replay.audit import verify
from turnledger.replay.timeline import timeline
from turnledger.replay.whatif import what_if
from turnledger.store.backend import drop_memory_store
from turnledger.store.session import Store, open_store

WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def _untimed(events: Sequence[DomainEvent]) -> list[DomainEvent]:
    return [attrs.evolve(e, timestamp=WHEN) for e in events]


class _CountingAppends:
    """Counts the transactions a store makes, around the real backend's ``append``."""

    def __init__(self, store: Store) -> None:
        self.calls = 0
        backend = store.backend
        real = backend.append

        def append(*args: object, **kwargs: object) -> bytes:
            self.calls += 1
            return real(*args, **kwargs)  # type: ignore[arg-type]

        backend.append = append  # type: ignore[method-assign]


@pytest.fixture(params=["memory", "sqlite"])
def store_urls(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """A function making fresh store URLs of one kind (two per example)."""
    with tempfile.TemporaryDirectory() as directory:
        yield request.param, directory


def _fresh_url(kind: str, directory: str) -> str:
    name = uuid4().hex
    return f"memory://{name}" if kind == "memory" else f"sqlite:///{Path(directory) / name}.db"


def _close(store: Store, url: str) -> None:
    store.close()
    if url.startswith("memory://"):
        drop_memory_store(url.removeprefix("memory://"))


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    history=conversation_histories(max_turns=5),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=5),
    max_turns=st.integers(min_value=0, max_value=3),
)
def test_extend_equals_appending_one_by_one(
    store_urls: tuple[str, str],
    history: list[ConversationMessage],
    cuts: list[int],
    max_turns: int,
) -> None:
    """Extending by chunks records the events, views and trims of one-by-one appends."""
    kind, directory = store_urls
    history = [m for m in history if not (isinstance(m, Chat) and m.message.synthetic)]
    bounds = sorted({0, len(history), *(c for c in cuts if c < len(history))})
    chunks = [history[a:b] for a, b in itertools.pairwise(bounds)]
    profile = RuntimeProfile(max_history_messages=max_turns, max_context_tokens=60)
    session_id = uuid4()
    url_a, url_b = _fresh_url(kind, directory), _fresh_url(kind, directory)
    one, many = open_store(url_a), open_store(url_b)
    try:
        by_one = one.start_session(profile=profile, session_id=session_id)
        for message in history:
            by_one.append(message)
        by_chunk = many.start_session(profile=profile, session_id=session_id)
        counter = _CountingAppends(many)
        for chunk in chunks:
            by_chunk.extend(chunk)
        assert len(chunks) == counter.calls  # one transaction per extend
        assert _untimed(by_one.events()) == _untimed(by_chunk.events())
        assert by_one.chat_view() == by_chunk.chat_view()
        assert by_one.conversation_view() == by_chunk.conversation_view()
        assert by_one.fit_window() == by_chunk.fit_window()
        assert _untimed(by_one.events()) == _untimed(by_chunk.events())
    finally:
        _close(one, url_a)
        _close(many, url_b)


def _turn(n: int) -> list[ConversationMessage]:
    call = ToolCall(f"call_{n}", "lookup", '{"q": 1}')
    return [
        Chat(ChatMessage.user(f"question {n}")),
        AssistantToolCalls(None, (call,)),
        ToolResults((ToolResult(f"call_{n}", f"result {n}", "lookup"),)),
        Chat(ChatMessage.assistant(f"answer {n}")),
    ]


def test_extend_records_a_turn_and_its_trim_in_one_transaction(target: Target) -> None:
    """A whole turn crossing the turn limit: one transaction holds the appends and the trim."""
    with open_store(target.url) as store:
        session = store.start_session(profile=RuntimeProfile(max_history_messages=1))
        session.extend(_turn(0))
        counter = _CountingAppends(store)
        events = session.extend(_turn(1))
        assert 1 == counter.calls
        kinds = [type(e).__name__ for e in events]
        expected = ["MessageAppended", "TrimDecided", "BreadcrumbInserted", "HistoryTrimmed"]
        assert expected + ["MessageAppended"] * 3 == kinds
        assert [ChatMessage.breadcrumb(), *to_chat_messages(_turn(1))] == session.chat_view()


def test_extend_with_an_invalid_message_records_nothing(target: Target) -> None:
    """One bad message in a step: InvalidMessage, and none of the step is stored (E3, E11)."""
    with open_store(target.url) as store:
        session = store.start_session()
        before = session.version
        with pytest.raises(InvalidMessage):
            session.extend([ChatMessage.user("fine"), "not a message"])  # type: ignore[list-item]
        assert before == session.version
        assert [] == session.chat_view()
        with pytest.raises(InvalidMessage, match="iterable of messages"):
            session.extend(ChatMessage.user("one message, not a list"))  # type: ignore[arg-type]


def test_pop_and_clear_are_recorded_and_restored(target: Target) -> None:
    """pop removes the newest message, clear every one; both are events, the log keeps all."""
    with open_store(target.url) as store:
        session = store.start_session()
        system = Chat(ChatMessage.system("be brief"))
        session.extend([system, *_turn(0), *_turn(1)])
        assert Chat(ChatMessage.assistant("answer 1")) == session.pop()
        assert _turn(1)[2] == session.pop()
        assert _turn(1)[1] == session.pop()  # no unanswered call left for the restore to sweep
        assert [system, *_turn(0), _turn(1)[0]] == session.conversation_view()
        restored = store.restore(session.id)
        assert session.conversation_view() == restored.conversation_view()
        restored.clear()
        assert [] == restored.conversation_view()
        assert [] == restored.chat_view()
        assert None is restored.pop()
        assert [] == restored.clear()  # nothing left to clear: nothing recorded
        restored.append(ChatMessage.system("new prompt"))
        restored.append(ChatMessage.user("again"))
        expected = [ChatMessage.system("new prompt"), ChatMessage.user("again")]
        assert expected == restored.prepare_request().messages
        events = store.events_of(session.id)
        appended = [e for e in events if isinstance(e, MessageAppended)]
        assert 11 == len(appended)  # the log keeps every message
        popped = [e for e in events if isinstance(e, MessagePopped)]
        assert [8, 7, 6] == [e.position for e in popped]
        cleared = [e for e in events if isinstance(e, HistoryCleared)]
        assert [(9, 6)] == [(e.next_position, e.removed) for e in cleared]
        assert verify(store.backend).ok
        text = "\n".join(entry.summary for entry in timeline(events))
        assert "popped" in text
        assert "history cleared" in text
        report = what_if(store.events_of(session.id), RuntimeProfile())
        assert [True] == [row.same_messages for row in report.requests]  # pops, clear replayed


def test_pop_never_removes_a_leading_system_message(target: Target) -> None:
    """R4: leading system messages are kept; pop returns None when only they remain."""
    with open_store(target.url) as store:
        session = store.start_session()
        session.extend([ChatMessage.system("prompt"), ChatMessage.user("hi")])
        assert Chat(ChatMessage.user("hi")) == session.pop()
        assert None is session.pop()
        assert [ChatMessage.system("prompt")] == session.chat_view()


def test_pop_after_a_trim_takes_the_newest_kept_message(target: Target) -> None:
    """After a turn-limit trim the breadcrumb stays and pop takes the newest real message."""
    with open_store(target.url) as store:
        session = store.start_session(profile=RuntimeProfile(max_history_messages=1))
        session.extend([*_turn(0), *_turn(1)])
        assert any(isinstance(e, TrimDecided) for e in session.events())
        for expected in reversed(_turn(1)):
            assert expected == session.pop()
        assert [Chat(ChatMessage("user", BREADCRUMB_TEXT, synthetic=True))] == (
            session.conversation_view()
        )
        assert None is session.pop()
        assert verify(store.backend).ok


def test_report_shows_popped_messages_and_a_clear() -> None:
    """The HTML report folds pops (out of their turn's counts) and a clear (its own fate)."""
    from turnledger.audit import report

    with open_store("memory://") as store:
        session = store.start_session()
        session.extend([*_turn(0), *_turn(1)])
        session.pop()
        session.clear()
        session.extend(_turn(2))
        page = report(store.events_of(session.id))
    assert "1 message(s) popped" in page
    assert 2 == page.count('class="turn cleared"')
    assert 1 == page.count('class="turn kept"')
