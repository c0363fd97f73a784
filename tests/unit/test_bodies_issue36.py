"""Issue 36 points 3 and 4, the parts built: what one format's fields do in another's body.

A function call's ``namespace`` is a field of a Responses function call (the installed openai
package defines it): the Responses body keeps it and the SDK's type accepts it. The fields a
framework integration keeps under its own key (``google_adk``, ``pydantic_ai``, ``bedrock``)
are no provider's: an export in any provider format leaves them out and says so, keeping the
record's own unknown fields. A reason names "an assistant message", not "a assistant".
"""

from __future__ import annotations

import pytest

from tests.extras import need
from tests.provider_types import problems
from turnledger.domain.blocks import OpaqueBlock, block_text, extra_text
from turnledger.domain.bodies import APIS, fit_messages, render_body
from turnledger.domain.messages import (
    AssistantToolCalls,
    ChatMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    to_chat_messages,
)


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
