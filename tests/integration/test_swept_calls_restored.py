"""DECISIONS 25 and R36: a tool call swept by a restore is brought back by its result, and a
restore never leaves a signed message altered (issue 33 point 6).

A crash leaves the newest turn with a tool call and no result; the restore sweeps the call
(E5, R36). A runtime that resumes then appends the result: while that turn is still the newest,
the result brings the call back beside it, recorded as `ToolCallsRestored`, and the pair
reaches the next request whole. A result for a call swept in an older turn stays an orphan.
An assistant message holding a signed thinking block is swept whole or kept whole.

Every test runs on every backend (memory, SQLite, PostgreSQL); the crash of the last one is a
real child process that exits without answering its call.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

import pytest

import turnledger as tl
from tests.backends import SHARED_BACKENDS, Target, fresh_target
from turnledger.audit import verify
from turnledger.domain import events as ev
from turnledger.domain.blocks import TextBlock, ThinkingBlock
from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.events import DomainEvent, MessageAppended, OrphansSwept, RequestPrepared
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.replay.timeline import timeline
from turnledger.replay.whatif import what_if
from turnledger.store.pipeline import Pipeline, Position
from turnledger.store.session import Session, Store, open_store

U = ChatMessage.user
A = ChatMessage.assistant
SYS = ChatMessage.system("You are a careful agent.")
PROFILE = RuntimeProfile(max_context_tokens=100_000)
PROVIDERS = (ProviderProfile("anthropic", "claude", 200_000, api="anthropic"),)
ROUTE = Route("anthropic", "claude")

CALL = AssistantToolCalls("Let me look.", (ToolCall("c1", "search", '{"q": "x"}'),))
RESULT = ToolResults((ToolResult("c1", "found it", "search"),))
SIGNED = AssistantToolCalls.from_blocks((
    ThinkingBlock("the user wants both files", signature="sig-abc"),
    TextBlock("Reading both."),
    ToolCall("r1", "read", '{"path": "a"}'),
    ToolCall("r2", "read", '{"path": "b"}'),
))
"""An Anthropic step with extended thinking: its thinking block is signed."""


@pytest.fixture
def target_url(target: Target) -> str:
    return target.url


def _start(store: Store) -> Session:
    session = store.start_session(PROFILE, PROVIDERS, ROUTE)
    session.extend([SYS, U("first question"), A("first answer")])
    return session


def _types(events: Sequence[DomainEvent]) -> list[str]:
    return [type(event).__name__ for event in events]


def _restored_events(session: Session) -> list[DomainEvent]:
    restored = ev.ToolCallsRestored  # AttributeError before DECISIONS 25 was built
    return [event for event in session.events() if isinstance(event, restored)]


def _crash_after(url: str, *messages: ConversationMessage | ChatMessage) -> str:
    """A session whose newest turn ends in ``messages``, left by a writer that stops there."""
    with open_store(url) as store:
        session = _start(store)
        session.extend([U("second question"), *messages])
        return session.id


def test_d25_a_result_brings_back_its_call_swept_by_a_restore(target_url: str) -> None:
    """Crash after a tool call, restore (the call is swept), then the result: both views show
    the call again before its result, the request carries the pair, and the restoration is its
    own event (the log keeps everything)."""
    session_id = _crash_after(target_url, CALL)
    with open_store(target_url) as store:
        session = store.restore(session_id)
        assert isinstance(session.events()[-1], OrphansSwept)
        assert CALL not in session.conversation_view()
        session.append(RESULT)
        expected = [Chat(SYS), Chat(U("first question")), Chat(A("first answer")),
                    Chat(U("second question")), CALL, RESULT]
        assert expected == session.conversation_view()
        assert tl.to_chat_messages(expected) == session.chat_view()
        request = session.prepare_request()
        assert tl.to_chat_messages(expected) == request.messages
        body = request.to_anthropic()["messages"]
        assert ["tool_use", "tool_result"] == [body[-2]["content"][-1]["type"],
                                               body[-1]["content"][0]["type"]]
        tail = session.events()[-3:]
        assert ["MessageAppended", "ToolCallsRestored", "RequestPrepared"] == _types(tail)
        restored = _restored_events(session)[0]
        assert (("c1",), ((4, CALL),)) == (restored.tool_call_ids, restored.restored)
        again = store.restore(session_id)
        assert (session.version, expected) == (again.version, again.conversation_view())
        assert () == verify(store.backend, [session_id]).violations


def test_d25_restoring_survives_a_snapshot_and_a_new_store_object(target_url: str) -> None:
    """The swept call is a fact of the state: a snapshot taken after the sweep carries it, so
    a result appended through another store object brings the call back all the same."""
    session_id = _crash_after(target_url, CALL)
    with open_store(target_url, snapshot_interval=1) as store:
        store.restore(session_id)
    with open_store(target_url, snapshot_interval=1) as store:
        session = store.restore(session_id)
        session.append(RESULT)
        assert [CALL, RESULT] == session.conversation_view()[-2:]
        assert 1 == len(_restored_events(session))
        live = session.state
        with open_store(target_url) as other:
            assert live == other.restore(session_id).state
        assert () == verify(store.backend, [session_id]).violations


def test_r36_d25_a_result_for_a_call_swept_in_an_older_turn_stays_an_orphan(
    target_url: str,
) -> None:
    """Once a new turn began, the swept call stays swept: its late result is swept as an
    orphan (R36). The next crash in the new turn is brought back by its own result."""
    session_id = _crash_after(target_url, CALL)
    with open_store(target_url) as store:
        session = store.restore(session_id)
        session.append(U("third question"))
        session.append(RESULT)  # too late: its call was swept in an older turn
        request = session.prepare_request()
        # The step's text stays (R36); its call and the late result do not.
        assert [U("second question"), A("Let me look."), U("third question")] == (
            request.messages[-3:])
        swept = session.events()[-2]
        assert isinstance(swept, OrphansSwept)
        assert ("c1",) == swept.orphan_tool_call_ids
        later = AssistantToolCalls(None, (ToolCall("c2", "search"),))
        session.append(later)
    with open_store(target_url) as store:
        session = store.restore(session_id)
        session.append(ToolResults((ToolResult("c2", "again"),)))
        assert [Chat(U("third question")), later, ToolResults((ToolResult("c2", "again"),))] == (
            session.conversation_view()[-3:])
        assert [("c2",)] == [e.tool_call_ids for e in _restored_events(session)]
        appended = [e.message for e in session.events() if isinstance(e, MessageAppended)]
        assert [CALL, RESULT, later] == [m for m in appended if m in (CALL, RESULT, later)]


def test_r36_a_restore_never_leaves_a_signed_message_altered(target_url: str) -> None:
    """A signed step with one call answered and one not: the restore sweeps the whole message
    (and the answer its call left) instead of cutting a tool_use out of it; the missing result
    brings the message back whole, with the answer, as the model wrote them."""
    first = ToolResults((ToolResult("r1", "file a"),))
    session_id = _crash_after(target_url, SIGNED, first)
    with open_store(target_url) as store:
        session = store.restore(session_id)
        view = session.conversation_view()
        assert [Chat(U("second question"))] == view[-1:]
        assert all(not isinstance(item, Chat) or item.message.role != "assistant"
                   or not item.message.blocks for item in view)
        second = ToolResults((ToolResult("r2", "file b"),))
        session.append(second)
        assert [Chat(U("second question")), SIGNED, first, second] == (
            session.conversation_view()[-4:])
        body = session.prepare_request().to_anthropic()["messages"]
        assert ["thinking", "text", "tool_use", "tool_use"] == [
            block["type"] for block in body[-2]["content"]]
        assert "sig-abc" == body[-2]["content"][0]["signature"]
        assert [("r1", "r2")] == [e.tool_call_ids for e in _restored_events(session)]
        assert () == verify(store.backend, [session_id]).violations


def test_r36_a_signed_step_whose_only_call_is_swept_leaves_no_thinking_behind(
    target_url: str,
) -> None:
    """The signed step of one unanswered call is not reduced to its thinking block and text:
    it leaves the views whole."""
    step = AssistantToolCalls.from_blocks((
        ThinkingBlock("check the weather", signature="sig-w"),
        ToolCall("w1", "weather"),
    ))
    session_id = _crash_after(target_url, step)
    with open_store(target_url) as store:
        session = store.restore(session_id)
        assert [U("second question")] == session.chat_view()[-1:]
        swept = session.events()[-1]
        assert isinstance(swept, OrphansSwept)
        assert ((), ("w1",)) == (swept.rewritten, swept.orphan_tool_call_ids)


def test_d25_replay_timeline_and_what_if_stay_exact(target_url: str) -> None:
    """The restoration is replayed as recorded: the timeline names it, and a what-if under the
    session's own profile makes the same requests."""
    session_id = _crash_after(target_url, CALL)
    with open_store(target_url) as store:
        session = store.restore(session_id)
        session.append(RESULT)
        session.prepare_request()
        events = session.events()
        entries = [e for e in timeline(events) if e.type == "ToolCallsRestored"]
        assert 1 == len(entries)
        assert "c1" in entries[0].summary
        report = what_if(events, PROFILE)
        assert report.recorded == report.what_if
        assert [True] == [row.same_messages for row in report.requests]


_CHILD = textwrap.dedent("""
    import sys
    from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
    from turnledger.domain.messages import AssistantToolCalls, ChatMessage, ToolCall
    from turnledger.store.session import open_store

    store = open_store(sys.argv[1])
    session = store.start_session(
        RuntimeProfile(max_context_tokens=100_000),
        (ProviderProfile("anthropic", "claude", 200_000, api="anthropic"),),
        Route("anthropic", "claude"),
    )
    session.extend([ChatMessage.user("run it"),
                    AssistantToolCalls(None, (ToolCall("p1", "shell", '{"cmd": "ls"}'),))])
    print(session.id, flush=True)
    store.close()
""")


@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_d25_a_call_left_by_a_crashed_process_is_brought_back_by_its_result(
    kind: str, tmp_path: Path
) -> None:
    """A writer process records a tool call and ends without its result; another process
    restores the session (the call is swept) and appends the result: the next request carries
    the call and its result."""
    with fresh_target(kind, tmp_path) as fresh:
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, fresh.url],
            capture_output=True, text=True, timeout=120, check=True,
        )
        session_id = child.stdout.strip()
        with open_store(fresh.url) as store:
            session = store.restore(session_id)
            assert [U("run it")] == session.chat_view()
            session.append(ToolResults((ToolResult("p1", "a b c", "shell"),)))
            request = session.prepare_request()
            assert ["user", "assistant", "tool"] == [m.role for m in request.messages]
            assert isinstance(session.events()[-1], RequestPrepared)
            assert [("p1",)] == [e.tool_call_ids for e in _restored_events(session)]


def test_e5_a_restore_whose_sweep_loses_the_race_catches_up_instead_of_failing(
    target_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer commits between a restore's read and its sweep (a second restore, or on
    PostgreSQL a killed writer's commit the server finishes late): the restore's sweep catches
    up and decides again instead of raising `ConcurrencyConflict` (the crash loop's PostgreSQL
    check failed so at version 303); the orphan is swept once."""
    session_id = _crash_after(target_url, CALL)
    load = Pipeline.load
    raced: list[str] = []

    def load_then_lose_the_race(self: Pipeline, uuid: UUID) -> Position:
        position = load(self, uuid)
        if not raced:
            raced.append("another writer swept first")
            with open_store(target_url) as other:
                other.restore(session_id)
        return position

    monkeypatch.setattr(Pipeline, "load", load_then_lose_the_race)
    with open_store(target_url) as store:
        session = store.restore(session_id)
        assert raced
        assert 1 == sum(isinstance(event, OrphansSwept) for event in session.events())
        assert CALL not in session.conversation_view()
        session.append(RESULT)
        assert [CALL, RESULT] == session.conversation_view()[-2:]
