"""Issue 37 point 2: the Agents SDK's unmodified `OpenAIConversationsSession` on the server."""

from __future__ import annotations

import asyncio

from tests.extras import need


def test_i37_p2_openai_conversations_session_adds_gets_pops_and_clears(
        server_url: str) -> None:
    """The SDK's session protocol through AsyncOpenAI(base_url=...): items come back in
    order with their ids, limit gives the newest, pop_item removes the newest (a recorded pop),
    clear_session deletes the conversation and the next call starts a new one."""
    openai = need("openai")
    agents = need("agents")

    async def run() -> None:
        client = openai.AsyncOpenAI(base_url=server_url + "/v1", api_key="unused")
        session = agents.OpenAIConversationsSession(openai_client=client)
        items = [{"role": "user", "content": "What is 2+2?"},
                 {"type": "function_call", "call_id": "c1", "name": "add",
                  "arguments": '{"a": 2, "b": 2}'},
                 {"type": "function_call_output", "call_id": "c1", "output": "4"},
                 {"role": "assistant", "content": "4"}]
        await session.add_items(items * 6)  # 24 items: two requests of at most 20
        got = await session.get_items()
        assert 24 == len(got)
        assert ["c1", "4"] == [got[1]["call_id"], got[2]["output"]]
        assert "4" == got[-1]["content"][0]["text"]
        assert got[-2:] == await session.get_items(limit=2)
        popped = await session.pop_item()
        assert popped is not None
        assert got[-1]["id"] == popped["id"]
        assert got[:-1] == await session.get_items()
        first = session.session_id
        await session.clear_session()
        assert [] == await session.get_items()
        assert first != session.session_id

    asyncio.run(run())
