"""Issue 21 point 1: every body accepted by the provider it goes to, what cannot cross said.

Each fixture conversation (hand-written ones of every block type, and public recordings of
reasoning, server tools, documents, audio...) is converted for every request API and checked
against that provider's own SDK request types (`tests/provider_types.py`), plus the rules the
types cannot express: no foreign signature, tool pairs intact.
"""

from __future__ import annotations

from typing import Any

import pytest

import turnledger as tl
from tests.conversation_fixtures import EXPORTERS, IMPORTERS, NATIVE_API, conversations, public
from tests.provider_types import problems, signatures
from turnledger.domain.bodies import APIS, LeftOut, fit_messages, render_body

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
