"""Unit tests for turnledger.domain.sweep: the orphan sweep (R36, R37)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    assistant_envelope,
    from_chat_messages,
    to_chat_messages,
    tool_envelope,
)
from turnledger.domain.sweep import SweepResult, sweep_conversation_orphans, sweep_orphans

SYSTEM = ChatMessage.system("You are a careful agent.")
CALL_A = ToolCall("call_a", "shell", '{"cmd":"ls"}')
CALL_B = ToolCall("call_b", "read_file", '{"path":"/etc/hosts"}')
CALL_C = ToolCall("call_c", "screenshot", "{}")


def user(text: str) -> Chat:
    return Chat(ChatMessage.user(text))


def assistant(text: str) -> Chat:
    return Chat(ChatMessage.assistant(text))


def calls(text: str | None, *tool_calls: ToolCall) -> ChatMessage:
    """The flat assistant message that makes these calls."""
    return ChatMessage("assistant", assistant_envelope(text, tool_calls))


def result(call_id: str, text: str = "ok") -> ChatMessage:
    """The flat tool message answering call_id."""
    return ChatMessage.tool(tool_envelope(call_id, text))


def assert_untouched(history: Sequence[ChatMessage]) -> None:
    """The sweep reports nothing and returns the very same message objects, in order."""
    swept = sweep_orphans(history)
    assert SweepResult(tuple(history), 0, (), (), ()) == swept
    assert all(kept is given for kept, given in zip(swept.history, history))


# --- R37: consistent histories are returned untouched ---------------------------------------

CONSISTENT_HISTORIES: dict[str, list[ConversationMessage]] = {
    "empty": [],
    "plain chat": [Chat(SYSTEM), user("hi"), assistant("hello"), user("bye"), assistant("ciao")],
    "one tool exchange": [
        Chat(SYSTEM),
        user("list files"),
        AssistantToolCalls("Let me look.", (CALL_A,)),
        ToolResults((ToolResult("call_a", "a.txt\nb.txt", "shell"),)),
        assistant("There are two files."),
    ],
    "parallel calls answered out of order, images declared": [
        user("compare"),
        AssistantToolCalls(None, (CALL_A, CALL_B, CALL_C), reasoning_content="think"),
        ToolResults(
            (
                ToolResult("call_c", "[IMAGE:/tmp/s.png]", "screenshot", ("/tmp/s.png",)),
                ToolResult("call_a", "ok", "shell"),
            )
        ),
        ToolResults((ToolResult("call_b", "127.0.0.1 localhost", "read_file"),)),
        assistant("Done."),
    ],
    "tool loop over several iterations": [
        user("fix the bug"),
        AssistantToolCalls("", (CALL_A,)),
        ToolResults((ToolResult("call_a", "fail"),)),
        AssistantToolCalls("retrying", (CALL_B,)),
        ToolResults((ToolResult("call_b", "pass"),)),
        assistant("Fixed."),
    ],
    "ids reused in every turn (providers that number calls per turn)": [
        Chat(ChatMessage.breadcrumb()),
        user("one"),
        AssistantToolCalls(None, (ToolCall("call_0", "shell"),)),
        ToolResults((ToolResult("call_0", "1"),)),
        assistant("first"),
        user("two"),
        AssistantToolCalls(None, (ToolCall("call_0", "shell"),)),
        ToolResults((ToolResult("call_0", "2"),)),
        assistant("second"),
    ],
    "legacy carriers and late system messages": [
        user("go"),
        assistant("running"),
        user("[Tool results] exit 0"),
        Chat(ChatMessage.system("late system note")),
        assistant("ok"),
    ],
}


def test_r37_consistent_chat_histories_are_untouched() -> None:
    """Each hand-built consistent history comes back identical with nothing removed."""
    for history in CONSISTENT_HISTORIES.values():
        assert_untouched(to_chat_messages(history))


def test_r37_consistent_conversation_histories_are_untouched() -> None:
    """The structured sweep also returns consistent histories as the same objects."""
    for history in CONSISTENT_HISTORIES.values():
        swept = sweep_conversation_orphans(history)
        assert SweepResult(tuple(history), 0, (), (), ()) == swept
        assert all(kept is given for kept, given in zip(swept.history, history))


# --- R36: tool results without a call -------------------------------------------------------

def test_r36_result_without_any_call_is_removed() -> None:
    """A tool result whose id was never called is removed and its id reported."""
    history = [ChatMessage.user("hi"), result("ghost", "boo"), ChatMessage.assistant("hello")]
    expected = SweepResult(
        (ChatMessage.user("hi"), ChatMessage.assistant("hello")), 1, ("ghost",), (1,), ()
    )
    assert expected == sweep_orphans(history)


def test_r36_result_before_its_call_is_an_orphan_and_so_is_the_call() -> None:
    """A result only pairs with an earlier call; both halves of a reversed pair go."""
    history = [ChatMessage.user("hi"), result("call_a"), calls("Checking.", CALL_A)]
    expected = SweepResult(
        (ChatMessage.user("hi"), ChatMessage.assistant("Checking.")),
        1,
        ("call_a",),
        (1,),
        ((2, ChatMessage.assistant("Checking.")),),
    )
    assert expected == sweep_orphans(history)


def test_r36_duplicate_results_keep_only_the_first() -> None:
    """A second result for an already answered call is an orphan."""
    history = [
        ChatMessage.user("hi"),
        calls(None, CALL_A),
        result("call_a", "first"),
        result("call_a", "second"),
        ChatMessage.assistant("done"),
    ]
    expected = SweepResult(
        (history[0], history[1], history[2], history[4]), 1, ("call_a",), (3,), ()
    )
    assert expected == sweep_orphans(history)


def test_r36_tool_message_without_envelope_is_removed_without_an_id() -> None:
    """Plain-text tool content has no id to pair: it is removed and reports no id."""
    history = [ChatMessage.user("hi"), ChatMessage.tool("raw output"), ChatMessage.assistant("ok")]
    expected = SweepResult((history[0], history[2]), 1, (), (1,), ())
    assert expected == sweep_orphans(history)


def test_r36_result_pairs_with_a_call_in_an_earlier_turn() -> None:
    """Pairing looks at any earlier position, not only the current turn."""
    history = [
        ChatMessage.user("one"),
        calls(None, CALL_A),
        ChatMessage.user("two"),
        result("call_a"),
    ]
    assert_untouched(history)


# --- R36: tool calls without a result -------------------------------------------------------

def test_r36_unanswered_call_with_text_becomes_plain_assistant_text() -> None:
    """All calls unanswered: the assistant's text survives as a plain message."""
    history = [ChatMessage.user("hi"), calls("Let me check.", CALL_A, CALL_B)]
    expected = SweepResult(
        (ChatMessage.user("hi"), ChatMessage.assistant("Let me check.")),
        0,
        ("call_a", "call_b"),
        (),
        ((1, ChatMessage.assistant("Let me check.")),),
    )
    assert expected == sweep_orphans(history)


def test_r36_unanswered_call_without_text_is_removed() -> None:
    """All calls unanswered and no text (null, empty or blank): the message is removed."""
    for text in (None, "", " \n\t"):
        history = [ChatMessage.user("hi"), calls(text, CALL_A)]
        expected = SweepResult((ChatMessage.user("hi"),), 1, ("call_a",), (1,), ())
        assert expected == sweep_orphans(history), text


def test_r36_partially_answered_call_keeps_only_answered_calls() -> None:
    """The envelope is rebuilt with the answered calls, in their original order."""
    history = [
        ChatMessage.user("hi"),
        calls("Two things.", CALL_A, CALL_B, CALL_C),
        result("call_c"),
        result("call_a"),
    ]
    rebuilt = ChatMessage(
        "assistant",
        '{"content":"Two things.","tool_calls":['
        '{"id":"call_a","name":"shell","arguments":"{\\"cmd\\":\\"ls\\"}"},'
        '{"id":"call_c","name":"screenshot","arguments":"{}"}]}',
    )
    expected = SweepResult(
        (history[0], rebuilt, history[2], history[3]), 0, ("call_b",), (), ((1, rebuilt),)
    )
    assert expected == sweep_orphans(history)


def test_r36_reused_id_result_answers_the_newest_call() -> None:
    """When an id is called again before any result, the older call is the orphan."""
    history = [
        ChatMessage.user("hi"),
        calls("first try", CALL_A),
        calls(None, CALL_A),
        result("call_a"),
    ]
    expected = SweepResult(
        (history[0], ChatMessage.assistant("first try"), history[2], history[3]),
        0,
        ("call_a",),
        (),
        ((1, ChatMessage.assistant("first try")),),
    )
    assert expected == sweep_orphans(history)


def test_r36_orphan_ids_are_in_history_order_and_deduplicated() -> None:
    """Ids are listed once, at their first removed occurrence."""
    history = [
        result("r1"),
        calls(None, ToolCall("c1", "x"), ToolCall("c2", "x")),
        result("r2"),
        result("r1"),
        calls("t", ToolCall("c0", "x")),
    ]
    expected = SweepResult(
        (ChatMessage.assistant("t"),),
        4,
        ("r1", "c1", "c2", "r2", "c0"),
        (0, 1, 2, 3),
        ((4, ChatMessage.assistant("t")),),
    )
    assert expected == sweep_orphans(history)


def test_r36_non_tool_messages_are_never_touched() -> None:
    """System, user, breadcrumb and carrier messages stay even when they look like envelopes."""
    history = [
        SYSTEM,
        ChatMessage.breadcrumb(),
        ChatMessage.user(tool_envelope("ghost", "not a tool message")),
        ChatMessage.user("[Tool results] done"),
        ChatMessage.system(assistant_envelope(None, [CALL_A])),
        ChatMessage.assistant("plain text reply"),
    ]
    assert_untouched(history)


# --- R36: the structured sweep --------------------------------------------------------------

def test_r36_conversation_orphan_results_are_dropped_from_their_batch() -> None:
    """Orphan ToolResult entries go; the batch keeps the others and each removal counts one."""
    good = ToolResult("call_a", "ok", "shell", ("/a.png",))
    history: list[ConversationMessage] = [
        user("hi"),
        AssistantToolCalls(None, (CALL_A,)),
        ToolResults((ToolResult("ghost", "?"), good, ToolResult("call_a", "again"))),
    ]
    expected = SweepResult(
        (history[0], history[1], ToolResults((good,))),
        2,
        ("ghost", "call_a"),
        (),
        ((2, ToolResults((good,))),),
    )
    assert expected == sweep_conversation_orphans(history)


def test_r36_conversation_batch_of_orphans_is_removed_and_counted_per_result() -> None:
    """A ToolResults left empty is removed; removed counts its results (ChatMessage units)."""
    history: list[ConversationMessage] = [
        user("hi"),
        ToolResults((ToolResult("x1", "?"), ToolResult("x2", "?"))),
        assistant("hello"),
    ]
    expected = SweepResult((history[0], history[2]), 2, ("x1", "x2"), (1,), ())
    assert expected == sweep_conversation_orphans(history)


def test_r36_conversation_partial_calls_keep_reasoning_content() -> None:
    """A partly answered AssistantToolCalls keeps its answered calls, text and reasoning."""
    history: list[ConversationMessage] = [
        user("hi"),
        AssistantToolCalls("both", (CALL_A, CALL_B), reasoning_content="plan"),
        ToolResults((ToolResult("call_b", "ok"),)),
    ]
    reduced = AssistantToolCalls("both", (CALL_B,), reasoning_content="plan")
    expected = SweepResult(
        (history[0], reduced, history[2]), 0, ("call_a",), (), ((1, reduced),)
    )
    assert expected == sweep_conversation_orphans(history)


def test_r36_conversation_unanswered_calls_become_text_or_go() -> None:
    """No call answered: Chat(assistant text) when there is text, otherwise removed."""
    history: list[ConversationMessage] = [
        user("hi"),
        AssistantToolCalls("I will check.", (CALL_A,), reasoning_content="plan"),
        AssistantToolCalls(None, (CALL_B,)),
        AssistantToolCalls("   ", (CALL_C,)),
    ]
    expected = SweepResult(
        (history[0], assistant("I will check.")),
        2,
        ("call_a", "call_b", "call_c"),
        (2, 3),
        ((1, assistant("I will check.")),),
    )
    assert expected == sweep_conversation_orphans(history)


def test_r36_conversation_chat_wrapped_tool_messages_pair_like_flat_ones() -> None:
    """ChatMessages appended as Chat items (tool envelope, plain tool, call envelope) are swept."""
    history: list[ConversationMessage] = [
        user("hi"),
        Chat(calls("two", CALL_A, CALL_B)),
        Chat(result("call_a")),
        Chat(ChatMessage.tool("plain output")),
        Chat(result("ghost")),
    ]
    rebuilt = Chat(calls("two", CALL_A))
    expected = SweepResult(
        (history[0], rebuilt, history[2]),
        2,
        ("call_b", "ghost"),
        (3, 4),
        ((1, rebuilt),),
    )
    assert expected == sweep_conversation_orphans(history)


def test_r36_conversation_and_chat_sweeps_agree_on_a_restored_history() -> None:
    """Sweeping the structured history or its flat form gives the same messages and counts."""
    flat = [
        ChatMessage.user("hi"),
        calls("a and b", CALL_A, CALL_B),
        result("call_a"),
        ChatMessage.tool("stray"),
        result("call_a", "dup"),
        ChatMessage.user("next"),
        calls(None, CALL_C),
    ]
    structured = from_chat_messages(flat)
    chat_swept = sweep_orphans(flat)
    conversation_swept = sweep_conversation_orphans(structured)
    assert chat_swept.history == tuple(to_chat_messages(conversation_swept.history))
    expected_flat = (3, ("call_b", "call_a", "call_c"))
    assert expected_flat == (chat_swept.removed, chat_swept.orphan_tool_call_ids)
    # from_chat_messages gives the stray plain tool message the id "unknown", which is reported.
    expected_structured = (3, ("call_b", "unknown", "call_a", "call_c"))
    assert expected_structured == (
        conversation_swept.removed,
        conversation_swept.orphan_tool_call_ids,
    )


# --- properties -----------------------------------------------------------------------------

ids = st.sampled_from(["a", "b", "c"])
texts = st.sampled_from([None, "", " ", "thinking", "done"])


@st.composite
def tool_calls(draw: st.DrawFn) -> AssistantToolCalls:
    call_ids = draw(st.lists(ids, min_size=1, max_size=3, unique=True))
    return AssistantToolCalls(
        draw(texts),
        tuple(ToolCall(i, f"tool_{i}") for i in call_ids),
        draw(st.sampled_from([None, "why"])),
    )


tool_results = st.lists(
    st.builds(ToolResult, ids, st.sampled_from(["ok", "[IMAGE:/x.png]"])), min_size=1, max_size=3
).map(lambda results: ToolResults(tuple(results)))

items: st.SearchStrategy[ConversationMessage] = st.one_of(
    st.sampled_from(
        [
            user("hi"),
            Chat(SYSTEM),
            Chat(ChatMessage.breadcrumb()),
            assistant("reply"),
            user("[Tool results] x"),
            Chat(ChatMessage.tool("plain")),
        ]
    ),
    tool_calls(),
    tool_results,
    ids.map(lambda i: Chat(result(i))),
    st.lists(ids, min_size=1, max_size=2, unique=True).map(
        lambda call_ids: Chat(calls("t", *(ToolCall(i, "x") for i in call_ids)))
    ),
)
histories = st.lists(items, max_size=12)


@st.composite
def consistent_histories(draw: st.DrawFn) -> list[ConversationMessage]:
    """Turns in which every call is answered once, after it, before the id is called again."""
    history: list[ConversationMessage] = []
    if draw(st.booleans()):
        history.append(Chat(SYSTEM))
    for turn in range(draw(st.integers(0, 4))):
        history.append(user(f"turn {turn}"))
        for _ in range(draw(st.integers(0, 3))):
            step = draw(tool_calls())
            answers = draw(st.permutations([ToolResult(c.id, "ok") for c in step.tool_calls]))
            split = draw(st.integers(1, len(answers)))
            history.append(step)
            history.append(ToolResults(tuple(answers[:split])))
            if answers[split:]:
                history.append(ToolResults(tuple(answers[split:])))
        history.append(assistant("answer"))
    return history


@given(consistent_histories())
def test_r37_property_consistent_histories_are_untouched(
    history: list[ConversationMessage],
) -> None:
    """Whatever the turns, calls and result batches, a consistent history is not changed."""
    assert_untouched(to_chat_messages(history))
    swept = sweep_conversation_orphans(history)
    assert SweepResult(tuple(history), 0, (), (), ()) == swept


@given(histories)
def test_r36_property_sweep_is_idempotent(history: list[ConversationMessage]) -> None:
    """A swept history is consistent: sweeping it again finds nothing, in both forms."""
    flat = sweep_orphans(to_chat_messages(history)).history
    assert_untouched(flat)
    structured = sweep_conversation_orphans(history).history
    assert SweepResult(structured, 0, (), (), ()) == sweep_conversation_orphans(structured)


@given(histories)
def test_r36_property_structured_sweep_matches_flat_sweep(
    history: list[ConversationMessage],
) -> None:
    """to_chat_messages commutes with the sweep, and both report the same counts and ids."""
    flat = sweep_orphans(to_chat_messages(history))
    structured = sweep_conversation_orphans(history)
    assert flat.history == tuple(to_chat_messages(structured.history))
    assert (flat.removed, flat.orphan_tool_call_ids) == (
        structured.removed,
        structured.orphan_tool_call_ids,
    )


@given(histories)
def test_r36_property_only_tool_traffic_is_touched(history: list[ConversationMessage]) -> None:
    """Every non-tool message survives, in order; indices and rewrites describe the output."""
    flat = to_chat_messages(history)
    swept = sweep_orphans(flat)

    def bystanders(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        return [m for m in messages if m.role in ("system", "user")]

    assert bystanders(flat) == bystanders(swept.history)
    rewrites = dict(swept.rewritten)
    rebuilt = [
        rewrites.get(i, m) for i, m in enumerate(flat) if i not in set(swept.removed_indices)
    ]
    assert rebuilt == list(swept.history)
    assert swept.removed == len(swept.removed_indices)
    assert len(set(swept.orphan_tool_call_ids)) == len(swept.orphan_tool_call_ids)
