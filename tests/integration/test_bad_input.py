"""Bad input to the library's public API (a review against a demanding user, stop 33): a clear
error of a documented type naming what is wrong, raised where the mistake is made, and nothing
stored by a refused call. Each case below was accepted, or failed far from its cause, before.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

import turnledger as tl
from tests.extras import need
from turnledger.audit import Analytics, verify, what_if
from turnledger.errors import InvalidStoreURL, SessionExists, TranscriptError
from turnledger.integrations import session_uuid
from turnledger.providers import from_anthropic, from_openai_chat, to_openai_chat


@pytest.fixture
def store() -> Any:
    with tl.open_store("memory://") as opened:
        yield opened


def _unchanged(session: tl.Session, call: Any, error: type[BaseException], match: str) -> None:
    """``call()`` raises ``error`` matching ``match`` and records nothing."""
    events = session.events()
    with pytest.raises(error, match=match):
        call()
    assert events == session.events()


def test_e11_an_extra_that_is_no_object_is_refused_when_appended(store: Any) -> None:
    """A call's, a result's or a batch's ``extra`` must be an object's JSON text: ``"[1]"`` was
    recorded, and every later request of the session then failed, restored or not."""
    session = store.start_session()
    session.append(tl.ChatMessage.user("go"))
    bad_call = tl.ToolCall("c1", "f", "{}", extra="[1]")
    _unchanged(session, lambda: session.append(tl.AssistantToolCalls(None, [bad_call])),
               tl.InvalidMessage, r"tool_calls\[0\]\.extra must be the JSON text of an object")
    _unchanged(session, lambda: session.append(tl.AssistantToolCalls(
        None, [tl.ToolCall("c1", "f")], extra="[1]")), tl.InvalidMessage,
        r"assistant_tool_calls\.extra")
    session.append(tl.AssistantToolCalls(None, [tl.ToolCall("c1", "f")]))
    _unchanged(session, lambda: session.append(tl.ToolResults(
        [tl.ToolResult("c1", "ok", extra='"x"')])), tl.InvalidMessage, r"results\[0\]\.extra")
    session.append(tl.ToolResults([tl.ToolResult("c1", "ok")]))
    assert session.prepare_request().messages[-1].role == "tool"


def test_e11_a_batch_answering_a_call_twice_is_refused(store: Any) -> None:
    """The second result for the same call was dropped from every request without a word."""
    session = store.start_session()
    session.append(tl.ChatMessage.user("go"))
    session.append(tl.AssistantToolCalls(None, [tl.ToolCall("a1", "f")]))
    twice = tl.ToolResults([tl.ToolResult("a1", "x"), tl.ToolResult("a1", "y")])
    _unchanged(session, lambda: session.append(twice), tl.InvalidMessage,
               r"results\[1\] answers tool call 'a1' again")


def test_r36_the_structured_sweep_refuses_what_is_not_a_conversation_message() -> None:
    """`sweep_conversation_orphans` dropped ChatMessages (and anything else) and reported
    nothing removed."""
    with pytest.raises(tl.InvalidMessage, match=r"history\[0\] must be a Chat, "
                                                 r"AssistantToolCalls or ToolResults, got "
                                                 r"ChatMessage \(sweep_orphans"):
        tl.sweep_conversation_orphans([tl.ChatMessage.user("hi")])


def test_e11_a_session_name_is_a_non_empty_str(store: Any) -> None:
    """``None``, ``5`` and ``"5"`` named one shared conversation (mixing the users that passed
    them); a `UUID` named another session than its own text. Refused where given."""
    need("agents")
    from turnledger.integrations.openai_agents import TurnledgerSession

    for name, error in ((None, TypeError), (5, TypeError), ("", ValueError),
                        ("  ", ValueError)):
        with pytest.raises(error, match="session name"):
            TurnledgerSession(name, store)
    known = UUID(int=42)
    assert session_uuid(known) == session_uuid(str(known)) == known
    for wrong in (None, "not a store"):
        with pytest.raises(TypeError, match="store must be a turnledger Store"):
            TurnledgerSession("user-1", wrong)
    with pytest.raises(TypeError, match="session name"):  # arguments swapped
        TurnledgerSession(store, "user-1")


def test_e11_a_profile_given_for_a_restored_session_is_said_not_applied(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A named session keeps the profile it was started with; a different one given later is
    logged (it was ignored without a word)."""
    from turnledger.integrations import open_session

    open_session(store, "user-9")
    with caplog.at_level(logging.WARNING, logger="turnledger.integrations"):
        session = open_session(store, "user-9", profile=tl.RuntimeProfile(max_history_messages=1))
    assert session.profile.max_history_messages == tl.RuntimeProfile().max_history_messages
    assert "keeps the profile it was started with" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="turnledger.integrations"):
        open_session(store, "user-9", profile=tl.RuntimeProfile())  # the same: nothing said
    assert "" == caplog.text


def test_e11_session_flags_are_bools_and_options_are_checked_on_import(store: Any) -> None:
    """``legacy="no"`` recorded a legacy session for good (any non-empty string is true);
    ``as_live="yes"`` likewise; a dict profile or a lone provider failed deep inside."""
    with pytest.raises(TypeError, match="legacy must be a bool, got str 'no'"):
        store.start_session(legacy="no")
    messages = [tl.ChatMessage.user("hi")]
    with pytest.raises(TypeError, match="as_live must be a bool"):
        store.import_conversation(messages, as_live="yes")
    with pytest.raises(tl.InvalidProfile, match="profile must be a RuntimeProfile, got dict"):
        store.import_conversation(messages, profile={"max_history_messages": 3})
    provider = tl.ProviderProfile("p", "m", 1000)
    with pytest.raises(tl.InvalidProfile, match="got one ProviderProfile: pass"):
        store.start_session(providers=provider)
    assert [] == store.sessions()


def test_r18_tools_and_hooks_are_lists(store: Any) -> None:
    """A schema dict given as ``tools`` counted its key names as schemas (and a string its
    characters), recorded as a `RequestPrepared` whose capacity check counted the wrong text."""
    session = store.start_session()
    session.append(tl.ChatMessage.user("hi"))
    schema = {"type": "function", "name": "f", "parameters": {}}
    _unchanged(session, lambda: session.prepare_request(tools=schema), tl.InvalidMessage,
               "tools must be a list of tools, got one dict")
    _unchanged(session, lambda: session.prepare_request(hooks="be brief"), tl.InvalidMessage,
               "hooks must be a list of hooks, got one str")
    before = session.prepare_request().estimated_tokens
    assert session.prepare_request(tools=[schema]).estimated_tokens > before


def test_e11_an_empty_store_url_is_refused(tmp_path: Path, monkeypatch: Any) -> None:
    """``open_store("")`` opened (and created) ``./turnledger.db``; None still means it."""
    monkeypatch.chdir(tmp_path)
    for url in ("", "  ", 0):
        with pytest.raises(InvalidStoreURL, match="a store URL is a non-empty str"):
            tl.open_store(url)
    assert [] == list(tmp_path.iterdir())


def test_e3_a_taken_session_id_is_not_retried(store: Any) -> None:
    """Starting a session with an id the store holds is `SessionExists` (a
    `ConcurrencyConflict`), raised by `retry_on_conflict` at once: it used to retry for its
    whole budget (30 s by default) a conflict that never clears."""
    taken = store.start_session().id
    began = time.monotonic()
    with pytest.raises(SessionExists, match="already exists"):
        tl.retry_on_conflict(lambda: store.start_session(session_id=taken), budget_seconds=5)
    assert time.monotonic() - began < 1
    assert issubclass(SessionExists, tl.ConcurrencyConflict)


def test_e11_an_extra_never_replaces_what_a_message_says_or_answers() -> None:
    """A hand-made ``extra`` holding ``content`` or ``tool_call_id`` replaced the message's own
    in every format; only a kept null (an importer's) may stand in for it."""
    message = tl.ChatMessage("user", "hi", extra='{"content":"IGNORE","name":"u"}')
    assert [{"role": "user", "content": "hi", "name": "u"}] == to_openai_chat(
        [tl.Chat(message)])
    result = tl.ToolResults([tl.ToolResult("c1", "ok", extra='{"tool_call_id":"c9"}')])
    calls = tl.AssistantToolCalls(None, [tl.ToolCall("c1", "f")])
    assert to_openai_chat([calls, result])[1]["tool_call_id"] == "c1"


def test_e11_a_malformed_tool_call_is_refused_by_the_importers() -> None:
    """A ``tool_use`` whose input is no object (or without id) was kept as an opaque block: the
    call left every request and its result was swept as an orphan. An OpenAI ``tool_calls``
    that is no list became assistant text."""
    for block, expected in (({"input": '{"path":"x"}'}, r"content\[0\]\.input must be an object"),
                            ({"input": {}, "id": None}, r"content\[0\]\.id must be a string")):
        tool_use = {"type": "tool_use", "id": "t1", "name": "read", **block}
        with pytest.raises(TranscriptError, match=expected):
            from_anthropic([{"role": "user", "content": "read it"},
                               {"role": "assistant", "content": [tool_use]}])
    with pytest.raises(TranscriptError, match="tool_calls must be a list, got dict"):
        from_openai_chat([{"role": "user", "content": "hi"},
                             {"role": "assistant", "content": None,
                              "tool_calls": {"id": "c1"}}])


def test_e11_wrong_arguments_name_themselves_instead_of_failing_inside(store: Any) -> None:
    """What raised a bare AssertionError, KeyError, AttributeError or TypeError from inside."""
    need("pydantic_ai")
    need("langchain_core")
    from turnledger.integrations.langchain import TurnledgerTrimmer
    from turnledger.integrations.pydantic_ai import to_pydantic_ai

    with pytest.raises(tl.InvalidMessage, match=r"history\[0\] is not a message: str"):
        to_pydantic_ai(["hi"])
    with pytest.raises(tl.InvalidMessage, match=r"history\[1\] is a ChatMessage among"):
        to_pydantic_ai([tl.Chat(tl.ChatMessage.user("a")), tl.ChatMessage.user("b")])
    with pytest.raises(TypeError, match=r"verify takes an EventStoreBackend \(a Store's is "):
        verify(store)
    with pytest.raises(TypeError, match="session_ids must be a list"):
        verify(store.backend, session_ids=str(UUID(int=1)))
    with pytest.raises(TypeError, match=r"Analytics takes an EventStoreBackend \(a Store's"):
        Analytics(store)
    session = store.start_session()
    session.append(tl.ChatMessage.user("hi"))
    with pytest.raises(TypeError, match="what-if profile must be a RuntimeProfile, got NoneType"):
        what_if(session.events(), None)
    with pytest.raises(TypeError, match=r"older_than must be a datetime\.timedelta, got str"):
        store.idle_sessions("90d")
    with pytest.raises(TypeError, match="holds its messages under 'messages'; this one has foo"):
        TurnledgerTrimmer(store, session_id="t").invoke({"foo": 1})


def test_e11_the_agents_sdk_session_takes_a_list_and_an_int_limit(store: Any) -> None:
    """``add_items(item)`` (one dict) recorded its keys as items (refused: "item must be an
    object, got str"); ``get_items("2")`` failed in a comparison."""
    need("agents")
    import asyncio

    from turnledger.integrations.openai_agents import TurnledgerSession

    session = TurnledgerSession("user-1", store)
    item = {"role": "user", "content": "hi"}
    with pytest.raises(TypeError, match=r"add_items takes a list of items, got one dict"):
        asyncio.run(session.add_items(item))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="limit must be an int or None, got str '2'"):
        asyncio.run(session.get_items("2"))  # type: ignore[arg-type]
    asyncio.run(session.add_items([item]))
    assert [item] == asyncio.run(session.get_items(1))


def test_e11_a_langgraph_thread_id_may_be_an_int(store: Any) -> None:
    """LangGraph keeps a thread id as text (``42`` and ``"42"`` are one thread): the trimmer's
    ``session_id`` (and a chat history's, from a config) may be an int, naming the session of
    its text; other names that are no str are still refused."""
    need("langchain_core")
    from turnledger.integrations.langchain import TurnledgerChatMessageHistory, TurnledgerTrimmer

    by_int = TurnledgerTrimmer(store, session_id=42).session_for()
    assert by_int.id == TurnledgerTrimmer(store, session_id="42").session_for().id
    assert by_int.id == TurnledgerChatMessageHistory.lazy(store, 42).session.id
    with pytest.raises(TypeError, match="session name must be a str, got NoneType"):
        TurnledgerChatMessageHistory.lazy(store, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="session name must be a str, got float"):
        TurnledgerTrimmer(store, session_id=4.2)  # type: ignore[arg-type]
