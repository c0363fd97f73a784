"""E6: a request's digest is the SHA-256 of one compact JSON text of its messages, whatever
caches the encoding; equal messages whose items differ give different digests."""

from __future__ import annotations

import gc
import hashlib
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.properties import examples
from tests.strategies import every_block_type_history, provider_histories
from turnledger.domain.decider import _DIGEST_ENTRIES, _provider_fields, request_digest
from turnledger.domain.messages import (
    AssistantToolCalls,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    to_chat_messages,
)


def _reference(messages: list[ChatMessage]) -> str:
    """The digest as E6 defines it: the whole list encoded at once."""
    canonical: list[Any] = [
        [m.role, m.content, list(m.attachments), m.synthetic, *_provider_fields(m)]
        for m in messages
    ]
    raw = json.dumps(canonical, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(raw).hexdigest()


@settings(max_examples=examples(150))
@given(history=st.sampled_from(("openai", "anthropic", "responses")).flatmap(provider_histories))
def test_e6_digest_is_the_json_of_the_whole_request(history: list[ConversationMessage]) -> None:
    messages = list(to_chat_messages(history))
    assert request_digest(messages) == _reference(messages)
    # Again, from the cache, and for a window of it (a later request repeats the objects).
    assert request_digest(messages) == _reference(messages)
    assert request_digest(messages[1:]) == _reference(messages[1:])


def test_e6_digest_of_every_block_type_and_of_no_message() -> None:
    messages = list(to_chat_messages(every_block_type_history()))
    assert request_digest(messages) == _reference(messages)
    assert request_digest([]) == _reference([]) == hashlib.sha256(b"[]").hexdigest()


def test_e6_equal_messages_with_different_items_digest_differently() -> None:
    # ``item`` takes no part in a message's equality, but what it carries is sent.
    call = ToolCall("call_1", "search", "{}")
    plain = ChatMessage.of_item(AssistantToolCalls(None, (call,)))
    reasoning = ChatMessage.of_item(AssistantToolCalls(None, (call,), reasoning_content="why"))
    assert plain == reasoning
    assert request_digest([plain]) != request_digest([reasoning])
    assert request_digest([reasoning]) == _reference([reasoning])


def test_e6_a_message_that_dies_leaves_the_cache() -> None:
    message = ChatMessage.user("digest me once")
    request_digest([message])
    key = id(message)
    assert key in _DIGEST_ENTRIES
    del message
    gc.collect()
    assert key not in _DIGEST_ENTRIES
