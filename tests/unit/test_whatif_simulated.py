"""Issue 8, point 6: what-if on a session without recorded requests simulates the model calls.

An imported transcript records appends only (no `RequestPrepared`): the what-if replay simulates
a request before every assistant message, where the runtime called the model, and says so.
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.decider import (
    AppendMessage,
    ImportConversation,
    PrepareRequest,
    SessionState,
    StartSession,
    execute,
    run,
)
from turnledger.domain.events import DomainEvent, MessageAppended, RequestPrepared, TrimDecided
from turnledger.domain.messages import (
    AssistantToolCalls,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.replay.whatif import what_if

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
SESSION = UUID("00000000-0000-4000-8000-0000000000a8")
START = StartSession(SESSION, RuntimeProfile(), (ProviderProfile("p", "m", 100_000),),
                     Route("p", "m"), False, T0)


def _imported() -> list[DomainEvent]:
    """Three turns, one with a tool loop: four assistant messages, no request recorded."""
    messages: list[ConversationMessage | ChatMessage] = [
        ChatMessage.user("one"), ChatMessage.assistant("a1"),
        ChatMessage.user("two"),
        AssistantToolCalls(None, (ToolCall("c1", "ls"),)),
        ToolResults((ToolResult("c1", "files"),)),
        ChatMessage.assistant("a2"),
        ChatMessage.user("three"), ChatMessage.assistant("a3"),
    ]
    return run(SessionState(), ImportConversation(START, tuple(messages))).events


def test_e6_import_records_appends_only() -> None:
    """An import records the start and one MessageAppended per message: no trim, no request."""
    events = _imported()
    assert 8 == sum(isinstance(e, MessageAppended) for e in events)
    assert [] == [e for e in events if isinstance(e, TrimDecided | RequestPrepared)]


def test_e6_what_if_simulates_a_call_before_every_assistant_message() -> None:
    """Four assistant messages: four simulated requests, compared side by side, and said."""
    report = what_if(_imported(), RuntimeProfile(max_history_messages=1))
    assert 4 == report.simulated_requests
    assert 4 == len(report.requests)
    assert [1, 3, 5, 7] == [row.recorded.message_count for row in report.requests]
    assert report.what_if.trims > 0  # the one-turn limit now drops turns
    assert report.summary().startswith(
        "no request was recorded in this session: a model call was simulated before each of "
        "its 4 assistant messages"
    )
    assert 4 == report.to_jsonable()["simulated_requests"]


def test_e6_what_if_with_recorded_requests_simulates_nothing() -> None:
    """A session that recorded its requests is replayed as recorded: nothing simulated."""
    state = SessionState()
    events = execute(state, START)
    for message in (ChatMessage.user("q"), ChatMessage.assistant("a")):
        events += execute(state, AppendMessage(message, T0))
    events += execute(state, PrepareRequest(0, 0, False, T0))
    report = what_if(events, RuntimeProfile())
    assert report.simulated_requests is None
    assert "simulated_requests" not in report.to_jsonable()
    assert 1 == len(report.requests)


def test_i38_p3_simulated_sides_and_an_undeclared_window_are_said() -> None:
    """Issue 38 point 3: the recorded side of a simulated run is labelled ``simulated`` (its
    columns and totals), and a route with no declared window says what its requests were
    judged against (R17); a declared one says nothing."""
    report = what_if(_imported(), RuntimeProfile(max_context_tokens=2_000))
    assert ("#", "position", "purpose", "simulated msgs", "simulated tokens", "simulated trims",
            "simulated", "what-if msgs", "what-if tokens", "what-if trims",
            "what-if") == report.columns
    assert list(report.columns) == list(report.rows()[0])
    assert report.window_note is None  # the route declared 100,000 tokens
    lines = report.summary().splitlines()
    assert lines[1].startswith("simulated, recorded profile: 0 trims")
    assert lines[2].startswith("simulated, what-if profile:  0 trims")

    undeclared = START.__class__(SESSION, RuntimeProfile(), (), Route("p", "m"), False, T0)
    messages = (ChatMessage.user("one"), ChatMessage.assistant("a1"))
    events = run(SessionState(), ImportConversation(undeclared, messages)).events
    note = ("no context window was declared for p/m: a request is judged against the "
            "profile's max_context_tokens, else 32,000 (R17): 32,000 tokens under the recorded "
            "profile; 2,000 tokens under the what-if profile")
    report = what_if(events, RuntimeProfile(max_context_tokens=2_000))
    assert note == report.window_note
    assert note in report.summary().splitlines()
    assert note == report.to_jsonable()["window_note"]
