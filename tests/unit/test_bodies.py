"""Issue 21 point 1: every body accepted by the provider it goes to, what cannot cross said.

Each fixture conversation (hand-written ones of every block type, and public recordings of
reasoning, server tools, documents, audio...) is converted for every request API and checked
against that provider's own SDK request types (`tests/provider_types.py`), plus the rules the
types cannot express: no foreign signature, tool pairs intact.

Issue 36 points 3 and 4 (the sections at the end): what one format's fields do in another's
body, and a custom tool call keeps its kind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import turnledger as tl
from tests.conversation_fixtures import EXPORTERS, IMPORTERS, NATIVE_API, conversations, public
from tests.extras import need
from tests.provider_types import problems, signatures
from turnledger.domain.blocks import OpaqueBlock, block_text, extra_text
from turnledger.domain.bodies import APIS, LeftOut, fit_messages, render_body
from turnledger.domain.messages import (
    AssistantToolCalls,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    to_chat_messages,
)
from turnledger.domain.providers import (
    TranscriptError,
    from_openai_chat,
    is_custom_call,
    to_openai_chat,
)
from turnledger.replay.transcripts import read_conversations

CASES = [(name, fmt, raw, api) for name, fmt, raw in conversations() for api in APIS]


def _body(fmt: str, raw: Any, api: str) -> tuple[Any, tuple[LeftOut, ...]]:
    messages = tl.to_chat_messages(IMPORTERS[fmt](raw))
    sent, left_out = fit_messages(messages, api)
    return render_body(sent, api), left_out


@pytest.mark.parametrize(("name", "fmt", "raw", "api"), CASES,
                         ids=[f"{c[0]}->{c[3]}" for c in CASES])
def test_i21_p1_every_fixture_body_is_accepted_by_each_api(
    name: str, fmt: str, raw: Any, api: str
) -> None:
    """The body of every fixture for every API passes that provider's SDK request types."""
    body, _ = _body(fmt, raw, api)
    assert [] == problems(api, body)


@pytest.mark.parametrize(("name", "fmt", "raw", "api"), CASES,
                         ids=[f"{c[0]}->{c[3]}" for c in CASES])
def test_i21_p1_a_signature_only_goes_back_to_the_provider_that_made_it(
    name: str, fmt: str, raw: Any, api: str
) -> None:
    """Another provider's body carries no signature or ciphertext; the maker's keeps all."""
    body, _ = _body(fmt, raw, api)
    native = signatures(NATIVE_API[fmt], EXPORTERS[fmt](IMPORTERS[fmt](raw)))
    expected = native if api == NATIVE_API[fmt] else set()
    assert expected == signatures(api, body)


PUBLIC_IDS = [p[0] for p in public()]


@pytest.mark.parametrize(("name", "fmt", "raw"), public(), ids=PUBLIC_IDS)
def test_i21_public_recordings_import_and_export_byte_equal(name: str, fmt: str, raw: Any) -> None:
    """Every public recording imports and exports back equal in its own format."""
    assert raw == EXPORTERS[fmt](IMPORTERS[fmt](raw))


OUTPUT_ONLY = {"responses_file_search": ["file_search_call results fields vector_store_id"]}


@pytest.mark.parametrize(("name", "fmt", "raw"), public(), ids=PUBLIC_IDS)
def test_i21_p1_the_native_body_leaves_out_nothing_but_output_only_fields(
    name: str, fmt: str, raw: Any
) -> None:
    """To the API it came from a recording is sent whole (a Responses output item's
    output-only fields aside, and empty fields the request type does not define, such as a
    reply's ``annotations: []``), equal to the record."""
    body, left_out = _body(fmt, raw, NATIVE_API[fmt])
    assert OUTPUT_ONLY.get(name, []) == [entry.what for entry in left_out]
    if not left_out:
        assert _without_empty(EXPORTERS[fmt](IMPORTERS[fmt](raw))) == _without_empty(body)


def _without_empty(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items() if v not in ([], None)}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def test_i21_p1_anthropic_thinking_and_server_tools_are_left_out_of_openai_and_said() -> None:
    """The issue's case: Anthropic's signed thinking and web search blocks never reach an
    OpenAI Chat body; each one left out is named with its reason."""
    (raw,) = [c[2] for c in public() if c[0] == "anthropic_web_search"]
    body, left_out = _body("anthropic", raw, "openai_chat")
    kinds = {entry.what for entry in left_out}
    assert {"thinking block", "server_tool_use block", "web_search_tool_result block"} <= kinds
    text = repr(body)
    assert ("'thinking'", "server_tool_use", "web_search_tool_result") == tuple(
        k for k in ("'thinking'", "server_tool_use", "web_search_tool_result") if k not in text
    )


def test_i21_p1_responses_reasoning_never_becomes_an_anthropic_thinking_block() -> None:
    """A Responses reasoning item (OpenAI ciphertext) is left out of an Anthropic body, not
    turned into a thinking block whose signature is OpenAI's."""
    (raw,) = [c[2] for c in public() if c[0] == "responses_reasoning"]
    body, left_out = _body("responses", raw, "anthropic")
    assert ["reasoning item"] == [e.what for e in left_out if "reasoning" in e.what]
    assert [] == [b for m in body["messages"] if isinstance(m["content"], list)
                  for b in m["content"] if b["type"] == "thinking"]


# --- issue 36 points 3 and 4: what one format's fields do in another's body -------------------
# A function call's ``namespace`` is a field of a Responses function call (the installed openai
# package defines it): the Responses body keeps it and the SDK's type accepts it. The fields a
# framework integration keeps under its own key (``google_adk``, ``pydantic_ai``, ``bedrock``)
# are no provider's: an export in any provider format leaves them out and says so, keeping the
# record's own unknown fields. A reason names "an assistant message", not "a assistant".

def test_i36_p4_a_function_call_keeps_its_namespace_in_a_responses_body() -> None:
    need("openai")
    call = ToolCall("c1", "read_file", '{"path": "a"}', extra=extra_text({"namespace": "fs"}))
    result = ToolResults((ToolResult("c1", "contents"),))
    messages = [ChatMessage.user("read a"),
                *to_chat_messages([AssistantToolCalls(None, (call,)), result])]
    sent, left_out = fit_messages(messages, "openai_responses")
    body = render_body(sent, "openai_responses")
    assert () == left_out
    assert {"type": "function_call", "call_id": "c1", "name": "read_file",
            "arguments": '{"path": "a"}', "namespace": "fs"} == body[-2]
    assert [] == problems("openai_responses", body)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("key", ["google_adk", "pydantic_ai", "bedrock"])
def test_i36_p3_an_integrations_keyed_fields_never_reach_another_format(
    api: str, key: str
) -> None:
    message = ChatMessage("assistant", "done", extra=extra_text(
        {key: {"invocation_id": "e-1"}, "x_own": 2}))
    (sent,), left_out = fit_messages([message], api, fields=False)
    assert {"x_own": 2} == _fields(sent.extra)
    assert [(0, f"message fields {key}")] == [(o.message, o.what) for o in left_out]


def test_i36_p3_a_reason_says_an_assistant_message() -> None:
    block = OpaqueBlock('{"type": "reasoning", "summary": []}')
    message = ChatMessage("assistant", block_text(block), blocks=(block,))
    _, (block_left_out, _) = fit_messages([message], "openai_chat")
    assert ("OpenAI Chat Completions takes no such block in an assistant message (it came "
            "from another provider, or the target cannot replay it)") == block_left_out.reason


def _fields(extra: str) -> dict[str, object]:
    from turnledger.domain.blocks import extra_fields

    return extra_fields(extra)


# --- point 4: a custom tool call keeps its kind ----------------------------------------------

CODEX = Path(__file__).parents[1] / "fixtures" / "agents" / "codex_rich.jsonl"


def _codex_payload(kind: str) -> dict[str, Any]:
    records = [json.loads(line) for line in CODEX.read_text(encoding="utf-8").splitlines()]
    (payload,) = [r["payload"] for r in records
                  if r["type"] == "response_item" and r["payload"]["type"] == kind]
    return payload


def _codex_record() -> list[ConversationMessage]:
    (session,) = read_conversations(CODEX.read_text(encoding="utf-8"), "auto")
    assert not isinstance(session, TranscriptError)
    return session.history


def test_i36_p4_a_codex_custom_tool_call_is_recorded_as_a_tool_call_of_kind_custom() -> None:
    """Codex's apply_patch (a custom_tool_call) is a tool call, its input the arguments, and
    its output the result of that call: not an assistant message."""
    call, output = _codex_payload("custom_tool_call"), _codex_payload("custom_tool_call_output")
    record = _codex_record()
    steps = [m for m in record if isinstance(m, AssistantToolCalls)]
    (patch,) = [c for step in steps for c in step.tool_calls if c.name == "apply_patch"]
    (answer,) = [r for m in record if isinstance(m, ToolResults) for r in m.results
                 if r.tool_call_id == patch.id]
    assert (True, call["call_id"], call["input"], output["output"]) == (
        is_custom_call(patch), patch.id, patch.arguments, answer.content)


EXPECTED_CALL = {
    "openai_chat": lambda c: {"id": c["call_id"], "type": "custom",
                              "custom": {"name": c["name"], "input": c["input"]}},
    "anthropic": lambda c: {"type": "tool_use", "id": c["call_id"], "name": c["name"],
                            "input": {"input": c["input"]}},
    "openai_responses": lambda c: {k: v for k, v in c.items() if k != "status"},
}
"""The call in each API's body (a Responses custom call defines no ``status``)."""


@pytest.mark.parametrize("api", APIS)
def test_i36_p4_a_custom_tool_call_crosses_with_its_kind_where_the_format_has_it(
    api: str,
) -> None:
    """Chat keeps the kind (a ``custom`` tool call), Responses writes ``custom_tool_call``
    and its ``custom_tool_call_output``, Anthropic a ``tool_use`` with the input as argument
    ``input``, the kind change said; accepted by the SDK's types (in Responses, the custom
    items: Codex records its reasoning and replies without the ids the types require)."""
    need("openai")
    need("anthropic")
    call = _codex_payload("custom_tool_call")
    sent, left_out = fit_messages(to_chat_messages(_codex_record()), api)
    body = render_body(sent, api)
    checked = [i for i in body if i.get("type", "").startswith("custom")] if (
        api == "openai_responses") else body
    assert [] == problems(api, checked)
    assert EXPECTED_CALL[api](call) in _calls(api, body)
    kind_notes = [o.what for o in left_out if o.what.startswith("kind")]
    changed = ["kind custom_tool_call of call call_02 (apply_patch)"]
    assert (changed if api == "anthropic" else []) == kind_notes
    if api == "openai_responses":
        output = _codex_payload("custom_tool_call_output")
        assert output in body


def _calls(api: str, body: Any) -> list[Any]:
    if api == "openai_chat":
        return [c for m in body for c in m.get("tool_calls") or ()]
    if api == "anthropic":
        return [b for m in body["messages"] if isinstance(m["content"], list)
                for b in m["content"]]
    return list(body)


def test_i36_p4_an_openai_chat_custom_call_round_trips_and_answers_as_custom_in_responses(
) -> None:
    """A Chat recording's custom call comes back exactly; in Responses its result is the
    custom call's output."""
    chat = [{"role": "user", "content": "fix"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "custom",
                 "custom": {"name": "apply_patch", "input": "*** Begin Patch"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    record = from_openai_chat(chat)
    sent, _ = fit_messages(to_chat_messages(record), "openai_responses")
    assert chat == to_openai_chat(record)
    assert [{"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch",
             "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "ok"}] == (
        render_body(sent, "openai_responses")[1:])
