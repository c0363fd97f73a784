"""`Session.fit_window(messages=...)`: an agent step's new messages and the window for its
next model call in one transaction (issue 22: the per-step cost of the framework loops).

The events and views are those of `extend` then `fit_window`; a conflict records none of the
messages and none of the trims."""

from __future__ import annotations

import pytest

import turnledger as tl
from turnledger.audit import verify
from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.messages import (
    AssistantToolCalls,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)

OPENAI = ProviderProfile("openai", "gpt-4o", 128_000)
ROUTE = Route("openai", "gpt-4o")
PROFILE = RuntimeProfile(max_context_tokens=300, max_history_messages=4)


def _step(n: int) -> list[ConversationMessage | ChatMessage]:
    return [
        ChatMessage.user(f"question {n} " * 6),
        AssistantToolCalls("", (ToolCall(f"c{n}", "search", "{}"),)),
        ToolResults((ToolResult(f"c{n}", f"result {n} " * 6, "search"),)),
        ChatMessage.assistant(f"answer {n} " * 6),
    ]


def _shape(events: list[tl.DomainEvent]) -> list[tuple[str, object]]:
    return [(type(e).__name__, getattr(e, "message", None)) for e in events]


def test_r24_fit_window_with_messages_records_what_extend_then_fit_window_records() -> None:
    with tl.open_store("memory://") as store:
        apart = store.start_session(PROFILE, (OPENAI,), ROUTE)
        together = store.start_session(PROFILE, (OPENAI,), ROUTE)
        for n in range(8):
            apart.extend(_step(n))
            window = apart.fit_window()
            before = together.version
            assert window == together.fit_window(messages=_step(n))
            assert before < together.version
        assert _shape(apart.events()[1:]) == _shape(together.events()[1:])
        assert apart.chat_view() == together.chat_view()
        assert any(isinstance(e, tl.HistoryTrimmed) for e in together.events())
        assert () == verify(store.backend).violations


def test_e3_fit_window_with_messages_is_one_transaction() -> None:
    """Another writer recorded first: none of the step's messages and none of its trims are
    stored, and the same call on the reloaded session records them once."""
    with tl.open_store("memory://") as store:
        mine = store.start_session(PROFILE, (OPENAI,), ROUTE)
        mine.extend(_step(0))
        other = store.restore(mine.id)
        other.append(ChatMessage.user("another writer"))
        version = other.version
        with pytest.raises(tl.ConcurrencyConflict):
            mine.fit_window(messages=_step(1))
        assert version == store.restore(mine.id).version
        mine.fit_window(messages=_step(1))
        texts = [m.content for m in store.restore(mine.id).chat_view()]
        assert 1 == texts.count("question 1 " * 6)


def test_r24_fit_window_refuses_a_message_given_instead_of_messages() -> None:
    with tl.open_store("memory://") as store:
        session = store.start_session(PROFILE, (OPENAI,), ROUTE)
        version = session.version
        with pytest.raises(tl.InvalidMessage, match="iterable of messages"):
            session.fit_window(messages=ChatMessage.user("one"))  # type: ignore[arg-type]
        assert version == session.version
