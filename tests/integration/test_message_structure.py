"""Issue 8, point 2: a message's structure is decided once, when it is appended, and recorded.

The views, the restore sweep (E5, R36), `verify` and export read what was recorded; an assistant
answer that happens to be JSON shaped like a tool-call envelope stays text for ever.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.backends import Target
from turnledger.domain.budget import ProviderProfile, RuntimeProfile
from turnledger.domain.events import MessageAppended, OrphansSwept
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    assistant_envelope,
    tool_envelope,
)
from turnledger.replay.audit import verify
from turnledger.store.session import Store, open_store

JSON_ANSWER = (
    '{"tool_calls": [{"id": "call_abc", "name": "get_weather", '
    '"arguments": "{\\"city\\": \\"Paris\\"}"}]}'
)
JSON_ANSWER_WITH_CONTENT = (
    '{"content": "hi", "tool_calls": [{"id": "call_abc", "name": "get_weather", '
    '"arguments": "{\\"city\\": \\"Paris\\"}"}]}'
)


@pytest.fixture
def store(target: Target) -> Iterator[Store]:
    with open_store(target.url) as opened:
        yield opened


def _record_json_answer(store: Store, answer: ChatMessage) -> str:
    session = store.start_session(
        profile=RuntimeProfile(), providers=[ProviderProfile("p", "m", 100_000)]
    )
    session.append(ChatMessage.user("show me an example tool call as JSON"))
    session.append(answer)
    session.append(ChatMessage.user("thanks"))
    session.prepare_request()
    return session.id


@pytest.mark.parametrize("text", [JSON_ANSWER, JSON_ANSWER_WITH_CONTENT])
def test_e5_json_looking_assistant_answer_survives_restore_and_verify(
    store: Store, text: str
) -> None:
    """The issue's reproduction: the answer is kept on restore, nothing swept, verify clean."""
    session_id = _record_json_answer(store, ChatMessage.assistant(text))
    restored = store.restore(session_id)
    assert [] == [e for e in restored.events() if isinstance(e, OrphansSwept)]
    assert [
        ChatMessage.user("show me an example tool call as JSON"),
        ChatMessage.assistant(text),
        ChatMessage.user("thanks"),
    ] == restored.chat_view()
    assert [] == list(verify(store.backend).violations)


def test_e5_explicit_text_stays_text_even_in_turnledgers_own_envelope_form(store: Store) -> None:
    """`ChatMessage.assistant_text` records text even when it is the canonical envelope."""
    text = assistant_envelope(None, [ToolCall("call_abc", "get_weather")])
    session_id = _record_json_answer(store, ChatMessage.assistant_text(text))
    restored = store.restore(session_id)
    assert [] == [e for e in restored.events() if isinstance(e, OrphansSwept)]
    assert [] == list(verify(store.backend).violations)


def test_r36_structure_is_recorded_in_the_appended_event(store: Store) -> None:
    """A bare message's classification is in its MessageAppended: canonical envelopes are calls,
    any other assistant text is text, a tool message is a result."""
    session = store.start_session(profile=RuntimeProfile())
    call = ToolCall("c1", "shell", "{}")
    session.append(ChatMessage.user("go"))
    session.append(ChatMessage.assistant(assistant_envelope(None, [call])))
    session.append(ChatMessage.tool(tool_envelope("c1", "ok")))
    session.append(ChatMessage.assistant(JSON_ANSWER))
    recorded = [e.message for e in session.events() if isinstance(e, MessageAppended)]
    assert [None, True, True, False] == [
        m.message.envelope for m in recorded if isinstance(m, Chat)
    ]


def test_r36_explicit_envelope_constructors_record_structured_items(store: Store) -> None:
    """`ChatMessage.tool_calls_envelope` / `tool_result_envelope` are recorded as the items."""
    session = store.start_session(profile=RuntimeProfile())
    call = ToolCall("c1", "shell", "{}")
    session.append(ChatMessage.user("go"))
    session.append(ChatMessage.tool_calls_envelope(None, [call]))
    session.append(ChatMessage.tool_result_envelope("c1", "ok"))
    recorded = [e.message for e in session.events() if isinstance(e, MessageAppended)]
    assert [
        Chat(ChatMessage.user("go")),
        AssistantToolCalls(None, (call,)),
        ToolResults((ToolResult("c1", "ok"),)),
    ] == recorded
    restored = store.restore(session.id)
    assert [] == [e for e in restored.events() if isinstance(e, OrphansSwept)]
