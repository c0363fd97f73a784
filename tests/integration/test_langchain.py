"""LangChain and LangGraph on turnledger sessions (issue 10, point 3).

Real langchain-core and LangGraph: lossless message conversions, the chat message history, and
a ReAct agent loop (``create_react_agent``) with a tool and langchain-core's fake chat model,
whose ``pre_model_hook`` is the turnledger trimming step.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.extras import need
from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.events import HistoryTrimmed, MessageAppended, TrimDecided
from turnledger.domain.messages import BREADCRUMB_TEXT, AssistantToolCalls, ToolResults
from turnledger.replay.audit import verify
from turnledger.store.session import open_store


def _lc() -> Any:
    need("langchain_core")
    from langchain_core import messages

    return messages


def _samples() -> list[Any]:
    m = _lc()
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    return [
        m.SystemMessage("You are terse.", id="s1"),
        m.HumanMessage("plain text"),
        m.HumanMessage([{"type": "text", "text": "what is this?"}, image], id="h2", name="ann"),
        m.HumanMessage([{"type": "image", "url": "https://example.com/a.png"}]),  # v1 block
        m.AIMessage(
            "let me look",
            id="a1",
            tool_calls=[
                {"id": "call_1", "name": "lookup", "args": {"q": "x", "n": [1, 2]}},
                {"id": "call_2", "name": "fetch", "args": {}},
            ],
            response_metadata={"model_name": "fake", "finish_reason": "tool_calls"},
            usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
            additional_kwargs={"refusal": None},
        ),
        m.ToolMessage("x is 1", tool_call_id="call_1", name="lookup", artifact={"raw": [1]}),
        m.ToolMessage([{"type": "text", "text": "page"}], tool_call_id="call_2",
                      status="error"),
        m.AIMessage([{"type": "text", "text": "done", "annotations": []}], id="a2"),
    ]


def test_langchain_messages_convert_losslessly() -> None:
    """Each sample goes to turnledger and back equal, tool calls and results typed."""
    from turnledger.integrations.langchain import (
        from_langchain_messages,
        to_langchain_messages,
    )

    samples = _samples()
    converted = from_langchain_messages(samples)
    assert samples == to_langchain_messages(converted)
    assert [("call_1", "lookup"), ("call_2", "fetch")] == [
        (c.id, c.name) for c in converted[4].tool_calls  # type: ignore[union-attr]
    ]
    assert isinstance(converted[4], AssistantToolCalls)
    assert isinstance(converted[5], ToolResults)


def test_an_unsupported_message_is_refused() -> None:
    """A ChatMessage of a custom role or a tool call without an id: InvalidMessage."""
    m = _lc()
    from turnledger.integrations.langchain import from_langchain_messages

    with pytest.raises(InvalidMessage, match=r"messages\[1\]: ChatMessage"):
        from_langchain_messages([m.HumanMessage("a"), m.ChatMessage("b", role="critic")])
    call = {"id": None, "name": "f", "args": {}}
    with pytest.raises(InvalidMessage, match="no id"):
        from_langchain_messages([m.AIMessage("", tool_calls=[call])])


def test_chat_message_history_keeps_whole_turns(tmp_path: Path) -> None:
    """The history records each step in one transaction and answers the window."""
    m = _lc()
    from turnledger.integrations.langchain import TurnledgerChatMessageHistory

    with open_store(f"sqlite:///{tmp_path / 'h.db'}") as store:
        session = store.start_session(profile=RuntimeProfile(max_history_messages=1))
        history = TurnledgerChatMessageHistory(session)
        samples = _samples()
        history.add_messages(samples)
        history.add_messages([m.HumanMessage("next"), m.AIMessage("ok")])
        expected = [samples[0], m.HumanMessage(BREADCRUMB_TEXT), m.HumanMessage("next"),
                    m.AIMessage("ok")]
        assert expected == history.messages
        history.clear()
        assert [] == history.messages
        assert 10 == sum(isinstance(e, MessageAppended) for e in session.events())
        assert verify(store.backend).ok


def _scripted_model(turns: int) -> Any:
    need("langgraph")
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class ScriptedChat(GenericFakeChatModel):
        """The fake chat model with tools bound and the inputs it got kept."""

        inputs: list[list[Any]] = []  # noqa: RUF012 - a pydantic field

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            self.inputs.append(list(messages))
            return super()._generate(messages, *args, **kwargs)

    script: list[Any] = []
    for n in range(turns):
        call = {"id": f"call_{n}", "name": "lookup", "args": {"q": f"q{n}"}}
        script += [AIMessage("", tool_calls=[call]), AIMessage(f"answer {n}")]
    return ScriptedChat(messages=iter(script), inputs=[])


# create_react_agent moved to the `langchain` package, which the extra does not install.
@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_langgraph_react_agent_sees_the_window_through_the_pre_model_hook(
    tmp_path: Path,
) -> None:
    """A ReAct loop over five turns: the model sees two whole turns after a breadcrumb; the
    graph keeps every message; the trims are recorded and notified."""
    model = _scripted_model(5)
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    from turnledger.integrations.langchain import TurnledgerTrimmer

    @tool
    def lookup(q: str) -> str:
        """Look a value up."""
        return f"value of {q}"

    with open_store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        notices: list[HistoryTrimmed] = []
        store.subscribe(notices.append)
        trimmer = TurnledgerTrimmer(store, profile=RuntimeProfile(max_history_messages=2))
        agent = create_react_agent(model, [lookup], pre_model_hook=trimmer.as_runnable(),
                                   checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "thread-1"}}
        for n in range(5):
            state = agent.invoke({"messages": [HumanMessage(f"question {n}")]}, config)
        assert 20 == len(state["messages"])  # the graph keeps everything
        seen = model.inputs[-1]  # the last call: after the last tool result
        assert [BREADCRUMB_TEXT, "question 3"] == [seen[0].content, seen[1].content]
        assert state["messages"][12:-1] == seen[1:]  # whole turns, as the graph holds them
        assert [4, 4, 4] == [n.dropped_messages for n in notices]
        session = trimmer.session_for(config)
        assert 3 == sum(isinstance(e, TrimDecided) for e in session.events())
        assert verify(store.backend).ok


def test_trimmer_is_an_lcel_step_sync_and_async(tmp_path: Path) -> None:
    """As a Runnable on a message list, sync and async, it answers the same window."""
    m = _lc()
    from turnledger.integrations.langchain import TurnledgerTrimmer

    with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        step = TurnledgerTrimmer(
            store, session_id="chat", profile=RuntimeProfile(max_history_messages=1)
        ).as_runnable()
        talk = [m.HumanMessage("a"), m.AIMessage("b"), m.HumanMessage("c")]
        assert [m.HumanMessage(BREADCRUMB_TEXT), m.HumanMessage("c")] == step.invoke(talk)
        more = [*talk, m.AIMessage("d"), m.HumanMessage("e")]
        window = asyncio.run(step.ainvoke(more))
        assert [m.HumanMessage(BREADCRUMB_TEXT), m.HumanMessage("e")] == window
