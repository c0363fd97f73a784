"""R36 for signed steps, E5's restoration of swept calls (DECISIONS 25), and `OrphansSwept`
version 3 (E10): the pure parts, decided without a store.

A signed step (a thinking block with its signature, or a redacted thinking block) is never
cut by the sweep: kept whole when every call of it is answered, removed whole otherwise, with
the results its answered calls then leave unpaired. A tool result appended while the turn a
sweep took its call from is the newest brings the call back (`ToolCallsRestored`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

import attrs
import msgpack

from turnledger.domain.blocks import RedactedThinkingBlock, TextBlock, ThinkingBlock
from turnledger.domain.budget import Route, RuntimeProfile
from turnledger.domain.decider import (
    AppendMessage,
    SessionState,
    StartSession,
    SweepOrphans,
    execute,
    unanswered_tool_calls,
)
from turnledger.domain.events import DomainEvent, OrphansSwept, ToolCallsRestored
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    to_chat_messages,
)
from turnledger.domain.sweep import sweep_conversation_orphans, sweep_orphans, with_calls
from turnledger.store.codec import EventCodec, default_codec

SESSION = UUID("5e55104e-0000-4000-8000-0000000d0025")
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
USER = Chat(ChatMessage.user("read both"))
SIGNED = AssistantToolCalls.from_blocks((
    ThinkingBlock("both files are needed", signature="sig-1"),
    TextBlock("Reading."),
    ToolCall("a", "read"),
    ToolCall("b", "read"),
))
REDACTED = AssistantToolCalls.from_blocks((RedactedThinkingBlock("ciphertext"), ToolCall("c", "x")))
UNSIGNED = AssistantToolCalls.from_blocks((
    ThinkingBlock("no signature here"), TextBlock("Reading."), ToolCall("a", "read"),
    ToolCall("b", "read"),
))
ANSWER_A = ToolResults((ToolResult("a", "file a"),))
ANSWER_B = ToolResults((ToolResult("b", "file b"),))


def test_r36_a_signed_step_with_an_unanswered_call_is_removed_whole() -> None:
    """One call answered, one not: the step goes whole (no tool_use is cut out of it), and
    the answer its call left goes too; both sweeps agree."""
    history: list[ConversationMessage] = [USER, SIGNED, ANSWER_A]
    swept = sweep_conversation_orphans(history)
    assert ([USER], (1, 2), ("a", "b")) == (
        list(swept.history), swept.removed_indices, swept.orphan_tool_call_ids)
    flat = sweep_orphans(to_chat_messages(history))
    assert to_chat_messages(swept.history) == list(flat.history)
    assert swept.orphan_tool_call_ids == flat.orphan_tool_call_ids
    # Every call answered: kept as it is (R37). Without a signature: cut as before.
    whole = sweep_conversation_orphans([USER, SIGNED, ANSWER_A, ANSWER_B])
    assert ([USER, SIGNED, ANSWER_A, ANSWER_B], ()) == (list(whole.history), whole.rewritten)
    unsigned = sweep_conversation_orphans([USER, UNSIGNED, ANSWER_A])
    assert [USER, UNSIGNED.keeping(frozenset({"a"})), ANSWER_A] == list(unsigned.history)


def test_r36_a_redacted_thinking_step_is_removed_whole_not_reduced_to_its_ciphertext() -> None:
    """A step holding a redacted thinking block and an unanswered call leaves nothing behind."""
    swept = sweep_conversation_orphans([USER, REDACTED])
    assert ([USER], ()) == (list(swept.history), swept.rewritten)


def test_e5_with_calls_gives_what_the_sweep_leaves_of_an_item() -> None:
    """A step keeps the calls named, a signed one is whole or nothing."""
    assert UNSIGNED.keeping(frozenset({"b"})) == with_calls(UNSIGNED, frozenset({"b"}))
    assert (None, SIGNED) == (with_calls(SIGNED, frozenset({"a"})),
                              with_calls(SIGNED, frozenset({"a", "b"})))


def _session(*items: ConversationMessage) -> tuple[SessionState, list[DomainEvent]]:
    state = SessionState()
    events = execute(state, StartSession(SESSION, RuntimeProfile(), (), Route("p", "m"), False,
                                         NOW))
    for item in items:
        events += execute(state, AppendMessage(item, NOW))
    return state, events


def test_d25_a_result_brings_back_each_call_of_a_step_as_it_arrives() -> None:
    """An unsigned step with two swept calls comes back call by call: the first result
    brings back its call only (the view stays sendable), the second the whole step."""
    state, _ = _session(USER, UNSIGNED)
    swept = execute(state, SweepOrphans(NOW))[-1]
    assert isinstance(swept, OrphansSwept)
    assert (1,) == swept.restorable
    first = execute(state, AppendMessage(ANSWER_A, NOW))[-1]
    assert isinstance(first, ToolCallsRestored)
    assert (("a",), ((1, UNSIGNED.keeping(frozenset({"a"}))),)) == (
        first.tool_call_ids, first.restored)
    assert ((1, UNSIGNED),) == state.restorable  # the log's step, still partly swept
    second = execute(state, AppendMessage(ANSWER_B, NOW))[-1]
    assert isinstance(second, ToolCallsRestored)
    assert [USER, UNSIGNED, ANSWER_A, ANSWER_B] == state.conversation_view()
    assert () == state.restorable


def test_d25_a_result_brings_back_a_signed_step_whole_with_the_answer_swept_along() -> None:
    """The signed step and the answer the sweep took with it come back together. Before,
    a request is refused naming the call without a result only (R18), not the answered one
    the sweep takes along."""
    state, _ = _session(USER, SIGNED, ANSWER_A)
    assert ("b",) == unanswered_tool_calls(state.chat_view())
    execute(state, SweepOrphans(NOW))
    assert [USER] == state.conversation_view()
    restored = execute(state, AppendMessage(ANSWER_B, NOW))[-1]
    assert isinstance(restored, ToolCallsRestored)
    assert (("a", "b"), ((1, SIGNED), (2, ANSWER_A))) == (
        restored.tool_call_ids, restored.restored)
    assert [USER, SIGNED, ANSWER_A, ANSWER_B] == state.conversation_view()


def test_d25_a_new_turn_ends_what_a_result_can_bring_back() -> None:
    """After a real user message the swept call stays swept: no event but the append."""
    state, _ = _session(USER, UNSIGNED)
    execute(state, SweepOrphans(NOW))
    execute(state, AppendMessage(Chat(ChatMessage.user("never mind")), NOW))
    assert () == state.restorable
    events = execute(state, AppendMessage(ANSWER_A, NOW))
    assert ["MessageAppended"] == [type(e).__name__ for e in events]


@attrs.frozen
class OrphansSweptV2(DomainEvent):
    """`OrphansSwept` exactly as version 2 of the code declared it."""

    positions: tuple[int, ...]
    orphan_tool_call_ids: tuple[str, ...]
    removed: int
    rewritten: tuple[tuple[int, ConversationMessage], ...] = ()

    class_version = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, object]) -> None:
        """Nothing to change for this test's records."""


def test_e10_a_version_2_sweep_loads_with_nothing_restorable() -> None:
    """A sweep recorded before E5's restoration marked nothing a result may bring back."""
    codec = default_codec()
    fields = {"positions": (3,), "orphan_tool_call_ids": ("x",), "removed": 1}
    topic, _ = codec.encode_event(OrphansSwept(SESSION, 4, NOW, **fields))
    _, old = EventCodec({topic: OrphansSweptV2}).encode_event(
        OrphansSweptV2(SESSION, 4, NOW, **fields))
    assert 2 == msgpack.unpackb(old, timestamp=3)["class_version"]
    assert OrphansSwept(SESSION, 4, NOW, **fields, restorable=()) == codec.decode_event(
        topic, old, SESSION, 4)
