"""The kept view and its cost (`turnledger.domain.window`), the loop rule and the batch."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from uuid import UUID

from hypothesis import given
from hypothesis import strategies as st

from tests.strategies import chat_histories, conversation_histories
from turnledger.domain import messages as msg
from turnledger.domain.budget import Route, RuntimeProfile
from turnledger.domain.decider import AppendMessage, Batch, SessionState, StartSession, run
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.estimate import estimate_history_tokens
from turnledger.domain.events import MessageAppended, TrimReason, View
from turnledger.domain.messages import ChatMessage, ConversationMessage, to_chat_messages
from turnledger.domain.state import Loop
from turnledger.domain.window import CHAT_ROWS, CONVERSATION_ROWS, Window, WindowIndex

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SESSION = UUID("00000000-0000-4000-8000-000000000007")


@given(chat_histories(), st.booleans())
def test_r20_a_windows_estimate_is_the_estimate_of_what_it_renders(
    history: list[ChatMessage], breadcrumb: bool
) -> None:
    """For every window a trim can keep, `tokens` equals estimating `render` (R20-R23, R31)."""
    index = WindowIndex.of(CHAT_ROWS, history)
    for start in [0, *index.turns_from(0)]:
        window = Window(start, breadcrumb)
        assert estimate_history_tokens(index.render(window)) == index.tokens(window)


@given(conversation_histories(), st.booleans())
def test_r9_forgetting_the_dropped_log_changes_no_window(
    history: list[ConversationMessage], breadcrumb: bool
) -> None:
    """After `forget_before` a window renders and costs the same: late systems are retained."""
    index = WindowIndex.of(CONVERSATION_ROWS, history)
    starts = index.turns_from(0)
    for start in starts:
        window = Window(start, breadcrumb)
        before = (index.render(window), index.tokens(window))
        fresh = WindowIndex.of(CONVERSATION_ROWS, history)
        fresh.forget_before(start)
        assert before == (fresh.render(window), fresh.tokens(window))
        rendered = to_chat_messages(fresh.render(window))
        assert estimate_history_tokens(rendered) == fresh.tokens(window)


def test_r32_a_cut_counts_items_or_sent_messages() -> None:
    """Dropped items vs dropped provider-facing messages: a two-result ToolResults is 1 or 2."""
    calls = msg.AssistantToolCalls(None, (msg.ToolCall("c1", "t"), msg.ToolCall("c2", "t")))
    results = msg.ToolResults((msg.ToolResult("c1", "x"), msg.ToolResult("c2", "y")))
    history = [
        msg.Chat(ChatMessage.system("s")),
        msg.Chat(ChatMessage.user("a")),
        calls,
        results,
        msg.Chat(ChatMessage.user("b")),
    ]
    index = WindowIndex.of(CONVERSATION_ROWS, history)
    kept = Window(index.turns_from(0)[1], breadcrumb=True)
    assert 3 == index.cut(Window(), kept).dropped_messages
    assert 4 == index.cut(Window(), kept, sent=True).dropped_messages


def test_r34_only_the_legacy_turn_limit_goes_unannounced() -> None:
    """The legacy loop logs its turn-limit trims; every other trim is announced (R31-R34)."""
    assert not Loop.LEGACY.announces(TrimReason.TURN_LIMIT)
    assert Loop.LEGACY.announces(TrimReason.TOKEN_BUDGET)
    assert Loop.STRUCTURED.announces(TrimReason.TURN_LIMIT)
    assert (View.CHAT, View.CHAT) == (
        Loop.LEGACY.window_of(View.CONVERSATION),
        Loop.LEGACY.turn_limit_view,
    )
    assert View.CONVERSATION == Loop.STRUCTURED.turn_limit_view


def test_e3_a_batch_numbers_its_events_from_the_state_version() -> None:
    """A command's events get consecutive versions after the state's, and one time."""
    state = SessionState()
    started = run(
        state, StartSession(SESSION, RuntimeProfile(), (), Route("default", "default"), False, NOW)
    )
    assert [1, 2] == [e.originator_version for e in started.events]
    batch = run(state, AppendMessage(ChatMessage.user("hi"), NOW))
    assert isinstance(batch, Batch)
    assert [(3, NOW, SESSION)] == [
        (e.originator_version, e.timestamp, e.originator_id) for e in batch.events
    ]
    assert isinstance(batch.events[0], MessageAppended)
    assert 3 == state.version


@given(conversation_histories(), conversation_histories())
def test_e4_a_cloned_state_is_equal_and_shares_nothing_a_decision_changes(
    before: list[ConversationMessage], after: list[ConversationMessage]
) -> None:
    """`SessionState.clone` (ADR-0094): the clone equals the state; deciding on it (appends
    with their turn-limit trims) leaves the state equal to what it was; and every field of
    the index is a kind the clone copies or may share (a new mutable kind would be shared)."""
    import attrs

    from turnledger.domain.window import Region, Rows

    state = SessionState()
    profile = RuntimeProfile(max_history_messages=2)
    run(state, StartSession(SESSION, profile, (), Route("p", "m"), False, NOW))
    for message in before:
        _append(state, message)
    copy = state.clone()
    assert copy == state
    kept = state.clone()
    for message in after:
        _append(copy, message)
    assert kept == state
    assert kept.chat_view() == state.chat_view()
    index = state.index
    for field in attrs.fields(type(index)):
        value = getattr(index, field.name)
        assert isinstance(value, list | int | Region | Rows), (field.name, type(value))
        if isinstance(value, list):
            assert value is not getattr(copy.index, field.name), field.name


def _append(state: SessionState, message: ConversationMessage) -> None:
    """Append ``message`` as a session would; one a session refuses (a breadcrumb the
    strategy drew) changes nothing and is passed over."""
    with contextlib.suppress(InvalidMessage):
        run(state, AppendMessage(message, NOW))
