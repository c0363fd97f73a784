"""R1's envelopes are compact JSON: the strings-only writer gives `compact_json`'s bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.properties import examples
from turnledger.domain.messages import (
    ToolCall,
    assistant_envelope,
    compact_json,
    tool_envelope,
)

# Any code point, lone surrogates and controls included: json escapes them, the writer must too.
texts = st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), max_size=40)
calls = st.builds(ToolCall, id=texts.filter(bool), name=texts, arguments=texts)


@settings(max_examples=examples(300))
@given(text=st.none() | texts, tool_calls=st.lists(calls, max_size=4))
def test_r1_assistant_envelope_is_compact_json_of_its_fields(
    text: str | None, tool_calls: list[ToolCall]
) -> None:
    expected = compact_json({
        "content": text,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in tool_calls],
    })
    assert assistant_envelope(text, tool_calls) == expected


@settings(max_examples=examples(300))
@given(call_id=texts, content=texts)
def test_r1_tool_envelope_is_compact_json_of_its_fields(call_id: str, content: str) -> None:
    expected = compact_json({"tool_call_id": call_id, "content": content})
    assert tool_envelope(call_id, content) == expected
