"""Tool-call ids and JSON values refused where they are given (issue 33; DECISIONS 26 and 28,
ADR-0096): a second unanswered call with one id in a turn, NaN and infinities in a JSON value,
and a value that is no JSON at all in an Agents SDK item. Each was accepted (or raised a bare
`TypeError`) before; records stored before the checks still decode.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import turnledger as tl
import turnledger.domain.decider as decider
from tests.extras import need
from turnledger.domain.blocks import OpaqueBlock, TextBlock
from turnledger.domain.messages import assistant_envelope


@pytest.fixture
def store() -> Any:
    with tl.open_store("memory://") as opened:
        yield opened


def _unchanged(session: tl.Session, call: Any, match: str) -> None:
    """``call()`` raises `InvalidMessage` matching ``match`` and records nothing."""
    events = session.events()
    with pytest.raises(tl.InvalidMessage, match=match):
        call()
    assert events == session.events()


def _calls(*ids: str) -> tl.AssistantToolCalls:
    return tl.AssistantToolCalls(None, [tl.ToolCall(i, "f", "{}") for i in ids])


def test_d26_a_call_with_the_id_of_an_unanswered_call_of_the_turn_is_refused(
    store: Any,
) -> None:
    """The live view kept both calls and a restored one swept the first, so a restarted worker
    sent another history than the model saw; now the second is refused, naming the id. An id
    answered already, or left unanswered in an older turn, may be called again."""
    session = store.start_session()
    session.append(tl.ChatMessage.user("go"))
    session.append(_calls("c1", "c2"))
    _unchanged(session, lambda: session.append(_calls("c1")), r"tool_calls\[0\]\.id 'c1'")
    _unchanged(session, lambda: session.extend([_calls("c3"), _calls("c4", "c2")]),
               r"tool_calls\[1\]\.id 'c2'")
    session.append(tl.ToolResults([tl.ToolResult("c1", "ok"), tl.ToolResult("c2", "ok")]))
    _unchanged(session, lambda: session.extend([_calls("c5"), _calls("c5")]), "'c5'")
    session.extend([_calls("c1"), tl.ToolResults([tl.ToolResult("c1", "again")])])
    session.append(_calls("c9"))  # left unanswered; the next turn may call c9
    session.append(tl.ChatMessage.user("next"))
    session.append(_calls("c9"))
    restored = store.restore(session.id)
    assert [m for m in session.chat_view() if "c9" not in m.content] == restored.chat_view()


def test_d26_an_envelope_naming_one_id_twice_is_refused(store: Any) -> None:
    """An assistant envelope with two calls of one id was recorded as a message that calls
    nothing (the envelope does not parse); two such calls in one message are refused."""
    session = store.start_session()
    session.append(tl.ChatMessage.user("go"))
    twice = assistant_envelope(None, [tl.ToolCall("a", "f"), tl.ToolCall("a", "g")])
    _unchanged(session, lambda: session.append(tl.ChatMessage("assistant", twice,
                                                              envelope=True)),
               r"tool_calls\[1\] has the id 'a' of tool_calls\[0\]")
    with pytest.raises(tl.InvalidMessage, match="duplicate id 'a'"):  # built: refused at once
        _calls("a", "a")


def test_d26_the_agents_sdk_session_refuses_a_second_open_call_id(store: Any) -> None:
    """Two ``function_call`` items with one ``call_id`` and no output between were recorded;
    now `add_items` refuses them, naming the id, and records none of the items."""
    need("agents")
    from turnledger.integrations.openai_agents import TurnledgerSession

    agents_session = TurnledgerSession("d26", store)
    call = {"type": "function_call", "call_id": "fc1", "name": "f", "arguments": "{}"}
    asyncio.run(agents_session.add_items([{"role": "user", "content": "go"}]))
    before = agents_session.session.events()
    with pytest.raises(tl.InvalidMessage, match="'fc1'"):
        asyncio.run(agents_session.add_items([call, dict(call)]))
    assert before == agents_session.session.events()


def test_d26_adk_gives_an_id_less_call_the_same_id_at_each_conversion() -> None:
    """A Gemini call without an id got a random one, so two conversions of the same contents
    (a retry, another worker) recorded different histories; the id is now made from the
    contents, and an id-less call made again while the first is open gets another one."""
    need("google.adk")
    from google.genai import types as t

    from turnledger.integrations.google_adk import from_genai

    call = t.Part(function_call=t.FunctionCall(name="lookup", args={"q": "x"}))
    contents = [t.Content(role="user", parts=[t.Part(text="q")]),
                t.Content(role="model", parts=[call, call])]
    first, again = from_genai(contents), from_genai(contents)
    assert first == again
    ids = [c.id for c in first[1].tool_calls]  # type: ignore[union-attr]
    assert 2 == len(set(ids))
    assert all(i.startswith("adk-") and len(i) == 36 for i in ids)
    open_call = first[1].tool_calls[0]  # type: ignore[union-attr]
    later = from_genai([t.Content(role="model", parts=[call])], unanswered=[open_call])
    assert open_call.id != later[0].tool_calls[0].id  # type: ignore[union-attr]


def test_d26_adk_records_a_repeated_id_less_call_and_pairs_each_response(
    tmp_path: Path,
) -> None:
    """The same id-less call in two steps of a turn, each answered by an id-less response:
    each response answers its own call, and a restored session shows what the live one did."""
    need("google.adk")
    from google.genai import types as t

    from turnledger.integrations.google_adk import TurnledgerCallback

    call = t.Content(role="model", parts=[
        t.Part(function_call=t.FunctionCall(name="poll", args={}))])
    response = t.Content(role="user", parts=[
        t.Part(function_response=t.FunctionResponse(name="poll", response={"s": "wait"}))])
    with tl.open_store(f"sqlite:///{tmp_path / 'adk.db'}") as store:
        callback = TurnledgerCallback(store)
        contents = [t.Content(role="user", parts=[t.Part(text="status?")])]
        for _ in range(3):
            callback.window(contents, "adk-d26")
            contents += [call, response]
        window = callback.window(contents, "adk-d26")
        session = callback.session_for("adk-d26")
        calls = [m for m in session.conversation_view() if isinstance(m, tl.AssistantToolCalls)]
        results = [m for m in session.conversation_view() if isinstance(m, tl.ToolResults)]
        assert 3 == len({c.tool_calls[0].id for c in calls})
        assert [c.tool_calls[0].id for c in calls] == [r.results[0].tool_call_id
                                                      for r in results]
        assert [c.model_dump(mode="json") for c in window] == [
            c.model_dump(mode="json") for c in contents]
        assert session.chat_view() == store.restore(session.id).chat_view()


_NOT_JSON = "NaN and infinities are not JSON values"


def test_d28_nan_and_infinities_are_refused_when_appended_naming_the_field(
    store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tool arguments and extras holding NaN or an infinity were recorded (Python's json
    writes them, no provider reads them); refused at append, naming the field. A session
    stored before the check still decodes and restores."""
    session = store.start_session()
    session.append(tl.ChatMessage.user("go"))
    refused = [
        (_calls_with(arguments='{"a": [1, NaN]}'),
         r"tool_calls\[0\]\.arguments holds NaN at a\[1\]"),
        (_calls_with(arguments='{"big": 1e999}'), r"tool_calls\[0\]\.arguments holds 1e999 at big"),
        (_calls_with(extra='{"x": -Infinity}'), r"tool_calls\[0\]\.extra holds -Infinity at x"),
        (tl.AssistantToolCalls(None, [tl.ToolCall("c", "f")], extra='{"t": NaN}'),
         r"assistant_tool_calls\.extra holds NaN at t"),
        (tl.ChatMessage("user", "hi", extra='{"meta": {"score": Infinity}}'),
         r"^extra holds Infinity at meta\.score"),
        (tl.ChatMessage.from_blocks("user", [TextBlock("hi", extra='{"w": NaN}')]),
         r"blocks\[0\]\.extra holds NaN at w"),
        (tl.ChatMessage.from_blocks("user", [OpaqueBlock('{"type": "x", "v": NaN}')]),
         r"blocks\[0\]\.json holds NaN at v"),
    ]
    for message, match in refused:
        _unchanged(session, lambda m=message: session.append(m), match + ".*" + _NOT_JSON)
    session.append(_calls_with(arguments='{"fine": 1.5e3, "text": "NaN"}'))  # JSON, finite
    _unchanged(session, lambda: session.append(tl.ToolResults(
        [tl.ToolResult("c", "ok", extra='{"cost": NaN}')])), r"results\[0\]\.extra holds NaN")

    # Stored before the check (as an older version recorded it): still read, as it was.
    monkeypatch.setattr(decider, "check_appended", lambda item: None)
    with tl.open_store(f"sqlite:///{tmp_path / 'old.db'}") as old:
        stored = old.start_session()
        stored.extend([tl.ChatMessage.user("go"), _calls_with(arguments='{"a": NaN}'),
                       tl.ToolResults([tl.ToolResult("c", "ok", extra='{"v": Infinity}')])])
        assert stored.chat_view() == old.restore(stored.id).chat_view()
        monkeypatch.setattr(decider, "_check_call_ids", lambda state, item: None)
        twice = old.start_session()  # DECISIONS 26: two open calls of one id, stored before
        twice.extend([tl.ChatMessage.user("go"), _calls("d"), _calls("d")])
        assert ["user"] == [m.role for m in old.restore(twice.id).chat_view()]  # both open


def _calls_with(*, arguments: str = "{}", extra: str = "") -> tl.AssistantToolCalls:
    return tl.AssistantToolCalls(None, [tl.ToolCall("c", "f", arguments, extra=extra)])


def test_i33_agents_add_items_names_a_value_that_is_no_json(store: Any) -> None:
    """An extra field holding ``bytes`` raised a bare `TypeError` from ``json`` (LangChain's
    history says `InvalidMessage`); now `InvalidMessage` names the item and the field, and
    nothing is stored. NaN in an item is named too (it was "would not be returned exactly")."""
    need("agents")
    from turnledger.integrations.openai_agents import TurnledgerSession

    agents_session = TurnledgerSession("i33", store)
    asyncio.run(agents_session.add_items([{"role": "user", "content": "go"}]))
    before = agents_session.session.events()
    bad = [
        ([{"role": "user", "content": "hi"}, {"role": "user", "content": "x", "meta": b"\x00"}],
         r"items\[1\]: not a JSON value: meta is bytes"),
        ([{"type": "function_call", "call_id": "f1", "name": "f", "arguments": "{}",
           "trace": {"ids": [1, {2, 3}]}}],
         r"items\[0\]: not a JSON value: trace\.ids\[1\] is set"),
        ([{"role": "user", "content": [{"type": "input_text", "text": "a", "x": b"1"}]}],
         r"items\[0\]: not a JSON value: x is bytes"),
        ([{"type": "function_call", "call_id": "f2", "name": "f", "arguments": "{}",
           "score": float("nan")}], r"items\[0\]: tool_calls\[0\]\.extra holds NaN at score"),
        ([{"role": "user", "content": "hi", "w": float("inf")}],
         r"items\[0\]: extra holds Infinity at w"),
        ([{"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "f3",
                                              "name": "f", "arguments": '{"a": NaN}'}],
         r"items\[1\]: tool_calls\[0\]\.arguments holds NaN at a"),
    ]
    for items, match in bad:
        with pytest.raises(tl.InvalidMessage, match=match):
            asyncio.run(agents_session.add_items(items))
    assert before == agents_session.session.events()
