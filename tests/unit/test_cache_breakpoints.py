"""Issue 35 point 2: cache breakpoints in the bodies turnledger builds (ADR-0105).

An Anthropic body carries ``cache_control`` on the system, on the last block before the newest
turn and on the last block of a body that ends with a user message, never more than three,
never on a block that cannot carry one, in place of any recorded one; an OpenAI request
carries a ``prompt_cache_key`` derived from the session id. Every body is checked against the
SDKs' own request types (`tests/provider_types.py`), whose checks are shown to refuse a
malformed breakpoint.
"""

from __future__ import annotations

import copy
import hashlib
import typing
from typing import Any
from uuid import UUID

import pytest
from anthropic.types.beta import BetaContentBlockParam
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turnledger as tl
from tests.conversation_fixtures import IMPORTERS, conversations
from tests.properties import examples
from tests.provider_types import cache_breakpoints, problems, request_problems
from tests.strategies import chat_histories, provider_histories
from turnledger.domain.blocks import TextBlock, ThinkingBlock
from turnledger.domain.bodies import APIS, fit_messages, render_body
from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.cache import CACHEABLE, TURNLEDGER_BREAKPOINTS, prompt_cache_key
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
from turnledger.domain.providers import from_anthropic, to_anthropic
from turnledger.domain.turns import segment
from turnledger.replay.timeline import requests

EPHEMERAL = {"type": "ephemeral"}


def _sent(history: list[ConversationMessage] | list[ChatMessage], api: str) -> list[ChatMessage]:
    """The messages of a request for ``api``, as `PreparedRequest.sent` holds them."""
    messages = [m for m in history if isinstance(m, ChatMessage)]
    if len(messages) < len(history):
        messages = to_chat_messages(typing.cast(list[ConversationMessage], history))
    return fit_messages(messages, api)[0]


def _anthropic(history: list[ConversationMessage], *, on: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = render_body(_sent(history, "anthropic"), "anthropic",
                                       cache_breakpoints=on)
    return body


def _call(call_id: str) -> AssistantToolCalls:
    return AssistantToolCalls("", (ToolCall(call_id, "f", "{}"),))


def _result(call_id: str, text: str) -> ToolResults:
    return ToolResults((ToolResult(call_id, text, "f"),))


def _cc(block: dict[str, Any]) -> dict[str, Any]:
    return {**block, "cache_control": EPHEMERAL}


TOOL_TURNS: list[ConversationMessage] = [
    Chat(ChatMessage.system("be brief")),
    Chat(ChatMessage.user("hi")),
    _call("c1"),
    _result("c1", "42"),
    Chat(ChatMessage.assistant("done")),
    Chat(ChatMessage.user("again")),
    _call("c2"),
    _result("c2", "43"),
]


def test_i35_p2_anthropic_breakpoints_on_system_history_end_and_newest_block() -> None:
    """Issue 35 point 2: the system, the last block before the newest turn and the last block
    of the body carry ``cache_control``, exactly there; the body passes the SDK's types."""
    body = _anthropic(TOOL_TURNS)
    tool_use = {"type": "tool_use", "name": "f", "input": {}}
    assert {
        "system": [_cc({"type": "text", "text": "be brief"})],
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{**tool_use, "id": "c1"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                          "content": "42"}]},
            {"role": "assistant", "content": [_cc({"type": "text", "text": "done"})]},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": [{**tool_use, "id": "c2"}]},
            {"role": "user", "content": [_cc({"type": "tool_result", "tool_use_id": "c2",
                                              "content": "43"})]},
        ],
    } == body
    assert [] == problems("anthropic", body)
    assert [] == request_problems("anthropic", body)


def test_i35_p2_one_turn_has_no_history_breakpoint() -> None:
    """Issue 35 point 2: a one-turn conversation has no stable history before its newest
    turn: only its system and the newest block are marked (a string content becomes one text
    block to carry the mark); without a system, the newest block alone."""
    assert ["system[0]", "messages[0].content[0]"] == cache_breakpoints(
        _anthropic([Chat(ChatMessage.system("s")), Chat(ChatMessage.user("hi"))]))
    assert {"messages": [{"role": "user", "content": [_cc({"type": "text", "text": "hi"})]}]
            } == _anthropic([Chat(ChatMessage.user("hi"))])


def test_i35_p2_no_breakpoint_on_an_assistant_prefill_or_an_empty_body() -> None:
    """Issue 35 point 2: a body that ends with an assistant's prefill marks only the history
    before the newest turn (the reply extends the prefill); an empty body carries none."""
    body = _anthropic([Chat(ChatMessage.user("q1")), Chat(ChatMessage.assistant("a1")),
                       Chat(ChatMessage.user("q2")), Chat(ChatMessage.assistant("Sure:"))])
    assert ["messages[1].content[0]"] == cache_breakpoints(body)
    assert {"messages": []} == _anthropic([])


def test_i35_p2_a_mark_moves_back_past_blocks_that_cannot_carry_one() -> None:
    """Issue 35 point 2: a thinking block or an empty text block takes no ``cache_control``
    (the SDK's types and the API refuse it): the mark goes on the nearest block before it."""
    step = Chat(ChatMessage.from_blocks("assistant", [
        TextBlock("a1"), ThinkingBlock("why", signature="sig"), TextBlock("")]))
    body = _anthropic([Chat(ChatMessage.user("q1")), step, Chat(ChatMessage.user("q2"))])
    assert ["messages[1].content[0]", "messages[2].content[0]"] == cache_breakpoints(body)
    assert [] == problems("anthropic", body)
    only_thinking = Chat(ChatMessage.from_blocks("assistant", [
        ThinkingBlock("why", signature="sig")]))
    body = _anthropic([Chat(ChatMessage.user("q1")), only_thinking,
                       Chat(ChatMessage.user("q2"))])
    assert ["messages[0].content[0]", "messages[2].content[0]"] == cache_breakpoints(body)


def test_i35_p2_a_newest_turn_joined_to_tool_results_marks_inside_the_message() -> None:
    """Issue 35 point 2: a user message of blocks right after tool results joins their
    message; the history mark then goes on the last tool result, inside that message."""
    history: list[ConversationMessage] = [
        Chat(ChatMessage.user("q1")), _call("c1"), _result("c1", "r1"),
        Chat(ChatMessage.from_blocks("user", [TextBlock("now this")])),
    ]
    body = _anthropic(history)
    assert ["messages[2].content[0]", "messages[2].content[1]"] == cache_breakpoints(body)
    assert [{"type": "tool_result", "tool_use_id": "c1", "content": "r1",
             "cache_control": EPHEMERAL},
            _cc({"type": "text", "text": "now this"})] == body["messages"][2]["content"]


def _recorded_breakpoints(turns: int) -> dict[str, Any]:
    """An Anthropic conversation as a client records it when it marks the newest message of
    each request it sends: every user message keeps its old mark."""
    messages: list[dict[str, Any]] = []
    for n in range(turns):
        messages.append({"role": "user", "content": [
            {"type": "text", "text": f"q{n}", "cache_control": EPHEMERAL}]})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"a{n}"}]})
    messages.append({"role": "user", "content": [{"type": "text", "text": "last"}]})
    return {"system": [{"type": "text", "text": "s", "cache_control": EPHEMERAL}],
            "messages": messages}


def test_i35_p2_recorded_breakpoints_are_replaced_by_the_rule() -> None:
    """Issue 35 point 2: the marks a client recorded would pile up past the provider's limit
    (the body as recorded is refused); with breakpoints on, the rule's three replace them."""
    raw = _recorded_breakpoints(5)
    history = from_anthropic(raw)
    recorded = _anthropic(history, on=False)
    assert ["body: 6 cache_control breakpoints, more than 4"] == problems("anthropic", recorded)
    body = _anthropic(history)
    assert ["system[0]", "messages[9].content[0]", "messages[10].content[0]"
            ] == cache_breakpoints(body)
    assert [] == problems("anthropic", body)


def test_i35_p2_off_renders_the_messages_as_recorded() -> None:
    """Issue 35 point 2: ``cache_breakpoints=False`` (the default of `render_body`, what an
    export uses) gives `to_anthropic` of the messages; OpenAI bodies are the same either way
    (their key is a request field, not part of the body)."""
    for history in (TOOL_TURNS, from_anthropic(_recorded_breakpoints(2))):
        sent = _sent(history, "anthropic")
        assert to_anthropic(sent) == render_body(sent, "anthropic")
        assert to_anthropic(sent) == render_body(sent, "anthropic", cache_breakpoints=False)
    for api in ("openai_chat", "openai_responses"):
        sent = _sent(TOOL_TURNS, api)
        assert render_body(sent, api) == render_body(sent, api, cache_breakpoints=True)


def test_i35_p2_rendering_leaves_the_plain_body_and_the_record_as_they_were() -> None:
    """Issue 35 point 2: the marks are placed on copies: rendering with them twice gives
    equal bodies and changes neither the messages nor a body rendered before."""
    history = from_anthropic(_recorded_breakpoints(2))
    sent = _sent(history, "anthropic")
    before = copy.deepcopy(sent)
    plain = render_body(sent, "anthropic")
    kept = copy.deepcopy(plain)
    first = render_body(sent, "anthropic", cache_breakpoints=True)
    assert first == render_body(sent, "anthropic", cache_breakpoints=True)
    assert before == sent
    assert kept == plain


def _without_marks(body: Any) -> Any:
    """A body without ``cache_control``, every content as a list of blocks."""
    def blocks(content: Any) -> Any:
        if isinstance(content, str):
            return [{"type": "text", "text": content}] if content else content
        return [_strip(b) for b in content] if isinstance(content, list) else content

    def _strip(block: Any) -> Any:
        if not isinstance(block, dict):
            return block
        out = {k: v for k, v in block.items() if k != "cache_control"}
        if out.get("type") == "tool_result" and isinstance(out.get("content"), list):
            out["content"] = [_strip(b) for b in out["content"]]
        return out

    out = dict(body)
    if "system" in out:
        out["system"] = blocks(out["system"])
    out["messages"] = [{**m, "content": blocks(m.get("content"))} for m in body["messages"]]
    return out


def _takes(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") in CACHEABLE and (
        block["type"] != "text" or bool(block.get("text")))


def _listed(content: Any) -> list[Any]:
    return content if isinstance(content, list) else (
        [{"type": "text", "text": content}] if content else [])


def _back(messages: list[dict[str, Any]], index: int, count: int) -> str | None:
    """The nearest block at or before the ``count``-th of message ``index`` that takes a
    mark, by its place."""
    while index >= 0:
        for position in range(count - 1, -1, -1):
            if _takes(_listed(messages[index]["content"])[position]):
                return f"messages[{index}].content[{position}]"
        index -= 1
        count = len(_listed(messages[index]["content"])) if index >= 0 else 0
    return None


def _expected_places(sent: list[ChatMessage], body: dict[str, Any]) -> list[str]:
    """The rule computed another way: the history's end found by rendering the messages
    before the newest turn on their own, each mark moved back to a block that takes one."""
    plain = _without_marks(body)
    messages = plain["messages"]
    system = _listed(plain.get("system"))
    found = [f"system[{p}]" for p in range(len(system) - 1, -1, -1) if _takes(system[p])][:1]
    start = segment(sent).last_turn_start
    before = to_anthropic(sent[: len(sent) if start is None else start])["messages"]
    ends = []
    if before:
        ends.append((len(before) - 1, len(_listed(before[-1]["content"]))))
    if messages and messages[-1]["role"] == "user":
        ends.append((len(messages) - 1, len(_listed(messages[-1]["content"]))))
    for end in ends:
        place = _back(messages, *end)
        if place is not None and place not in found:
            found.append(place)
    return found


def _order(place: str) -> tuple[int, ...]:
    return tuple(int(part) for part in place.replace("]", "[").split("[") if part.isdigit())


def _check_body(history: list[ConversationMessage] | list[ChatMessage]) -> None:
    sent = _sent(history, "anthropic")
    plain = render_body(sent, "anthropic")
    body = render_body(sent, "anthropic", cache_breakpoints=True)
    places = cache_breakpoints(body)
    assert places == _expected_places(sent, body)
    assert len(places) <= TURNLEDGER_BREAKPOINTS
    assert _without_marks(plain) == _without_marks(body)  # the model reads the same
    if [] == problems("anthropic", _without_marks(plain)):  # a recorded field may be bad
        assert [] == problems("anthropic", body)


FIXTURES = [(name, fmt, raw) for name, fmt, raw in conversations()]


@pytest.mark.parametrize(("name", "fmt", "raw"), FIXTURES, ids=[f[0] for f in FIXTURES])
def test_i35_p2_every_fixture_body_takes_the_rule_and_passes_the_sdk_types(
    name: str, fmt: str, raw: Any
) -> None:
    """Issue 35 point 2: for every fixture conversation (hand-written and public recordings),
    the Anthropic body with breakpoints carries them where the rule says, at most three, the
    same content, and passes the SDK's types."""
    _check_body(IMPORTERS[fmt](raw))


@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(provider_histories("anthropic"), provider_histories("openai"),
                 chat_histories(max_turns=5)))
def test_i35_p2_property_breakpoints_follow_the_rule(
    history: list[ConversationMessage] | list[ChatMessage],
) -> None:
    """Issue 35 point 2, property: any history's Anthropic body marks the rule's places (found
    another way), at most three, without changing what the model reads."""
    _check_body(history)


@settings(max_examples=examples(100), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(provider_histories("anthropic"), st.integers(min_value=0, max_value=20))
def test_i35_p2_property_each_marked_prefix_starts_the_next_request(
    history: list[ConversationMessage], cut: int
) -> None:
    """Issue 35 point 2, property: what a request marks is where the provider can find it
    again: the blocks up to each mark of a request are the first blocks of the request that
    follows once more messages are appended (no trim between), marks aside."""
    cut = min(cut, len(history))
    earlier = _anthropic(history[:cut])
    later = _without_marks(_anthropic(history))
    plain = _without_marks(earlier)
    for place in cache_breakpoints(earlier):
        if place.startswith("system"):
            assert plain["system"] == later["system"]
            continue
        index, position = _order(place)[:2]
        assert plain["messages"][:index] == later["messages"][:index]
        content = plain["messages"][index]["content"]
        assert content[: position + 1] == later["messages"][index]["content"][: position + 1]


def test_i35_p2_cacheable_types_take_cache_control_in_the_sdk() -> None:
    """Issue 35 point 2: every block type turnledger marks defines ``cache_control`` in the
    Anthropic SDK's request types; thinking blocks do not, and are never marked."""
    def members(kind: object) -> list[Any]:
        origin = typing.get_origin(kind)
        if origin is typing.Union:
            return [m for arg in typing.get_args(kind) for m in members(arg)]
        if origin is typing.Annotated:
            return []  # the SDK's response models: not request types
        return [kind]

    takes = {}
    for member in members(BetaContentBlockParam):
        hints = typing.get_type_hints(member)
        (kind,) = typing.get_args(hints["type"])
        takes[kind] = "cache_control" in hints
    assert CACHEABLE <= {kind for kind, yes in takes.items() if yes}
    assert (False, False) == (takes["thinking"], takes["redacted_thinking"])


@pytest.mark.parametrize(("block", "expected"), [
    ({"type": "text", "text": "x", "cache_control": {"type": "permanent"}},
     "messages[0].content[0]: BetaTextBlockParam.cache_control.type: Input should be "
     "'ephemeral'"),
    ({"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "2h"}},
     "messages[0].content[0]: BetaTextBlockParam.cache_control.ttl: Input should be '5m' or "
     "'1h'"),
    ({"type": "thinking", "thinking": "t", "signature": "s", "cache_control": EPHEMERAL},
     "messages[0].content[0]: BetaThinkingBlockParam.cache_control: Extra inputs are not "
     "permitted"),
    ({"type": "text", "text": "", "cache_control": EPHEMERAL},
     "messages[0].content[0]: cache_control on an empty text block"),
    ({"type": "text", "text": "x", "bogus": 1},
     "messages[0].content[0]: BetaTextBlockParam.bogus: Extra inputs are not permitted"),
])
def test_i35_p2_the_sdk_checks_refuse_a_malformed_breakpoint(
    block: dict[str, Any], expected: str
) -> None:
    """Issue 35 point 2: the body checks catch a malformed or misplaced breakpoint (the SDK's
    response models, part of its block union, would have accepted every one of these)."""
    body = {"messages": [{"role": "user", "content": [block]}]}
    assert [expected] == problems("anthropic", body)


def test_i35_p2_the_sdk_checks_refuse_a_fifth_breakpoint() -> None:
    """Issue 35 point 2: more than four breakpoints is refused, as the API refuses it."""
    content = [{"type": "text", "text": str(n), "cache_control": EPHEMERAL} for n in range(5)]
    body = {"messages": [{"role": "user", "content": content}]}
    assert ["body: 5 cache_control breakpoints, more than 4"] == problems("anthropic", body)


SESSION = UUID("0b9f7c1e-3a52-4d61-9b1a-2c4e5f607182")


def test_i35_p2_prompt_cache_key_is_a_digest_of_the_session_id() -> None:
    """Issue 35 point 2: the OpenAI ``prompt_cache_key`` is ``tl-`` and the first 32 hex
    digits of a SHA-256 of the session id: the same from the id's text or UUID, another for
    another session, and neither the id nor any of its parts."""
    digest = hashlib.sha256(b"turnledger prompt_cache_key v1\x00" + str(SESSION).encode())
    expected = "tl-" + digest.hexdigest()[:32]
    assert expected == prompt_cache_key(SESSION) == prompt_cache_key(str(SESSION))
    assert 35 == len(expected)
    other = prompt_cache_key(UUID("0b9f7c1e-3a52-4d61-9b1a-2c4e5f607183"))
    assert expected != other
    assert not any(part in expected for part in str(SESSION).split("-"))


@pytest.mark.parametrize("api", ["openai_chat", "openai_responses"])
def test_i35_p2_prompt_cache_key_is_a_request_field_of_both_openai_apis(api: str) -> None:
    """Issue 35 point 2: the key validates as the SDK's ``prompt_cache_key`` request field
    beside the body (Chat Completions and Responses); a key of the wrong type is refused."""
    body = render_body(_sent(TOOL_TURNS, api), api, cache_breakpoints=True)
    fields = {"prompt_cache_key": prompt_cache_key(SESSION)}
    assert [] == request_problems(api, body, fields)
    refused = request_problems(api, body, {"prompt_cache_key": 7})
    assert ["request: prompt_cache_key: Input should be a valid string"] == refused


def test_i35_p2_a_replayed_request_renders_the_same_body() -> None:
    """Issue 35 point 2: the body is a function of the messages a request sent, so the
    request re-derived from the log (`turnledger.replay.timeline.requests`) renders the body
    the runtime sent, breakpoints included, and the session's key is the same."""
    providers = (ProviderProfile("anthropic", "claude", 200_000, api="anthropic"),)
    sent_bodies: list[Any] = []
    with tl.open_store("memory://") as store:
        session = store.start_session(RuntimeProfile(max_context_tokens=100_000), providers,
                                      Route("anthropic", "claude"))
        for message in to_chat_messages(TOOL_TURNS[:2]):
            session.append(message)
        prepared = session.prepare_request()
        sent_bodies.append(render_body(prepared.sent, "anthropic", cache_breakpoints=True))
        for message in to_chat_messages(TOOL_TURNS[2:]):
            session.append(message)
        prepared = session.prepare_request()
        sent_bodies.append(render_body(prepared.sent, "anthropic", cache_breakpoints=True))
        key = prompt_cache_key(session.id)
        events = store.events_of(session.id)
        restored = store.restore(session.id)
    replayed = [render_body(fit_messages(list(r.messages), "anthropic")[0], "anthropic",
                            cache_breakpoints=True) for r in requests(events)]
    assert sent_bodies == replayed
    assert ["system[0]", "messages[0].content[0]"] == cache_breakpoints(sent_bodies[0])
    assert ["system[0]", "messages[3].content[0]", "messages[6].content[0]"
            ] == cache_breakpoints(sent_bodies[1])
    assert key == prompt_cache_key(restored.id)


def test_i35_p2_breakpoints_only_change_anthropic_bodies() -> None:
    """Issue 35 point 2: of the three APIs, only Anthropic's body has a place for a mark."""
    changed = {api for api in APIS
               if render_body(_sent(TOOL_TURNS, api), api)
               != render_body(_sent(TOOL_TURNS, api), api, cache_breakpoints=True)}
    assert {"anthropic"} == changed
