"""Issue 35 point 3: every integration records the provider's usage where its framework
exposes it, on the framework's real loop (a scripted model that returns usage, no network).

Each test takes, at every model call, the session's log version (the window handed to that call
is the chat view the log rebuilds there) and checks that each `UsageRecorded` answers exactly
that window (its digest and estimate, no request position) with exactly the usage the model
returned; a call whose model returned no usage records none, and a usage that cannot be what
was billed is logged while the loop goes on.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.extras import need
from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.decider import evolve, request_digest
from turnledger.domain.events import DomainEvent, TrimDecided, UsageRecorded
from turnledger.domain.state import SessionState
from turnledger.replay.audit import verify
from turnledger.store.session import Session, open_store

os.environ.setdefault("OPENAI_API_KEY", "sk-test-no-network")

Row = tuple[int | None, str, int, str, int, int, int, int]


def _window_at(events: Sequence[DomainEvent], version: int) -> tuple[str, int]:
    """The digest and estimate of the chat view the log rebuilds at ``version``."""
    state = SessionState()
    for event in events[:version]:
        evolve(state, event)
    return request_digest(state.chat_view()), state.chat_tokens()


def _usages(session: Session) -> list[Row]:
    return [(e.request_position, e.digest, e.estimated_tokens, e.api, e.input_tokens,
             e.cache_read_tokens, e.cache_write_tokens, e.output_tokens)
            for e in session.events() if isinstance(e, UsageRecorded)]


def _expected(session: Session, versions: list[int], billed: dict[int, tuple[str, int, int, int,
              int]]) -> list[Row]:
    """The rows of the calls in ``billed`` (call index -> api, input, read, write, output),
    each answering the window of the version taken at that call."""
    events = session.events()
    rows: list[Row] = []
    for call, (api, given, read, write, out) in sorted(billed.items()):
        digest, estimate = _window_at(events, versions[call])
        rows.append((None, digest, estimate, api, given, read, write, out))
    # The loop trimmed between its steps, and every call answered a window of its own.
    assert any(isinstance(e, TrimDecided) for e in events)
    assert len(rows) == len({row[1] for row in rows})
    return rows


SMALL = RuntimeProfile(max_context_tokens=900)  # trims between the tool steps


# -- Google ADK --


def test_i35_p3_adk_records_each_replys_usage_metadata_against_its_window(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A real ADK Runner loop (two questions of four lookups each, trimmed between steps): each
    model call's ``usage_metadata`` is recorded as answering the window the callback handed
    to that call; a call without usage records none, a malformed one is logged and the loop
    goes on."""
    need("google.adk")
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types as t

    from turnledger.integrations.google_adk import TurnledgerCallback

    versions: list[int] = []
    steps = 4

    with open_store(f"sqlite:///{tmp_path / 'adk.db'}") as store:
        callback = TurnledgerCallback(store, profile=SMALL)

        class Scripted(BaseLlm):
            model: str = "scripted"

            async def generate_content_async(
                self, llm_request: LlmRequest, stream: bool = False
            ) -> AsyncGenerator[LlmResponse, None]:
                call = len(versions)
                versions.append(callback.session_for("adk-u").version)
                done = 0
                for content in reversed(llm_request.contents):
                    if any(p.text and p.text.startswith("question")
                           for p in content.parts or []):
                        break
                    done += sum(1 for p in content.parts or [] if p.function_response)
                if done < steps:
                    parts = [t.Part(text=f"step {done} " + "s" * 300), t.Part(
                        function_call=t.FunctionCall(name="lookup", args={"q": done}))]
                else:
                    parts = [t.Part(text=f"answer after {done}")]
                usage: Any = t.GenerateContentResponseUsageMetadata(
                    prompt_token_count=1000 + call, cached_content_token_count=10 * call,
                    candidates_token_count=20 + call, thoughts_token_count=3)
                if call == 2:
                    usage = None  # the model returned none
                if call == 6:  # more cached than the prompt: not what was billed
                    usage = t.GenerateContentResponseUsageMetadata(
                        prompt_token_count=5, cached_content_token_count=9)
                yield LlmResponse(content=t.Content(role="model", parts=parts),
                                  usage_metadata=usage)

        def lookup(q: int) -> str:
            """Look ``q`` up."""
            return f"result {q}: " + "x" * 300

        async def run() -> None:
            agent = LlmAgent(name="looker", model=Scripted(), instruction="Look up.",
                             tools=[lookup], before_model_callback=callback,
                             after_model_callback=callback.after_model)
            service = InMemorySessionService()  # type: ignore[no-untyped-call]
            runner = Runner(agent=agent, app_name="app", session_service=service)
            await service.create_session(app_name="app", user_id="u", session_id="adk-u")
            for n in range(2):
                message = t.Content(role="user", parts=[t.Part(text=f"question {n}")])
                async for _ in runner.run_async(user_id="u", session_id="adk-u",
                                                new_message=message):
                    pass

        with caplog.at_level(logging.WARNING, "turnledger.integrations"):
            asyncio.run(run())
        session = callback.session_for("adk-u")
        assert 2 * (steps + 1) == len(versions)
        billed = {call: ("gemini", 1000 + call, 10 * call, 0, 23 + call)
                  for call in range(len(versions)) if call not in (2, 6)}
        # The last answer's usage is recorded with the answer, when the run ends.
        assert _expected(session, versions, billed) == _usages(session)
        assert any("more than the 5 input tokens" in r.getMessage() for r in caplog.records)
        assert verify(store.backend).ok


# -- pydantic-ai --


def test_i35_p3_pydantic_ai_records_each_model_responses_usage_against_its_window(
    tmp_path: Path,
) -> None:
    """Two real pydantic-ai runs (FunctionModel, four tool steps each, trimmed between steps):
    each ModelResponse's usage is recorded as answering the window sent to its request; a
    response whose usage pydantic-ai did not measure records none."""
    need("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    from turnledger.integrations.pydantic_ai import TurnledgerHistory

    versions: list[int] = []
    steps = 4
    with open_store(f"sqlite:///{tmp_path / 'pai.db'}") as store:
        history = TurnledgerHistory.open(store, "pai-u", profile=SMALL)

        def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
            call = len(versions)
            versions.append(history.session.version)
            done = sum(isinstance(p, ToolReturnPart) for m in messages[-1:] for p in m.parts)
            asked = any(getattr(p, "part_kind", "") == "user-prompt" for p in messages[-1].parts)
            step = 0 if asked else int(messages[-2].parts[-1].tool_call_id.split("-")[-1]) + done
            usage = RequestUsage(input_tokens=2000 + call, cache_read_tokens=100 + call,
                                 cache_write_tokens=7, output_tokens=30 + call)
            if call == 3:
                usage = RequestUsage(unmeasured_requests=1)  # the provider returned none
            if step < steps:
                part = ToolCallPart("lookup", {"q": step}, tool_call_id=f"c-{call}-{step}")
                return ModelResponse(parts=[TextPart(f"step {step} " + "s" * 300), part],
                                     usage=usage)
            return ModelResponse(parts=[TextPart(f"answer after {step}")], usage=usage)

        agent = Agent(FunctionModel(model), capabilities=[history])

        @agent.tool_plain
        def lookup(q: int) -> str:
            return f"result {q}: " + "x" * 300

        for n in range(2):
            result = agent.run_sync(f"question {n}", message_history=history.messages())
            assert f"answer after {steps}" == result.output
        session = history.session
        assert 2 * (steps + 1) == len(versions)
        billed = {call: ("pydantic-ai", 2000 + call, 100 + call, 7, 30 + call)
                  for call in range(len(versions)) if call != 3}
        assert _expected(session, versions, billed) == _usages(session)
        assert verify(store.backend).ok


# -- LangChain agents (create_agent middleware) --


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
def test_i35_p3_langchain_middleware_records_each_replys_usage_metadata_against_its_window(
    call: str, tmp_path: Path,
) -> None:
    """Two real ``create_agent`` runs (four tool steps each, trimmed between steps; the
    middleware's sync and async paths): each
    AIMessage's ``usage_metadata`` is recorded as answering the window the middleware handed
    to that model call, its cache writes read from ``cache_creation`` or from the lifetime
    split langchain-anthropic writes; a reply without usage records none."""
    need("langchain")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    from turnledger.integrations.langchain_agents import TurnledgerMiddleware

    steps = 4
    config: Any = {"configurable": {"thread_id": "lc-u"}}
    versions: list[int] = []

    def usage(call: int) -> dict[str, Any] | None:
        if call == 1:
            return None  # the provider returned none
        details = ({"cache_read": 200 + call, "cache_creation": 50} if call % 2 else
                   {"cache_read": 200 + call, "cache_creation": 0,
                    "ephemeral_5m_input_tokens": 11, "ephemeral_1h_input_tokens": 2})
        return {"input_tokens": 3000 + call, "output_tokens": 40 + call,
                "total_tokens": 3040 + 2 * call, "input_token_details": details}

    def reply(call: int) -> AIMessage:
        step = call % (steps + 1)
        if step < steps:
            return AIMessage(f"step {step} " + "s" * 300, usage_metadata=usage(call),
                             tool_calls=[{"id": f"c{call}", "name": "lookup", "args": {"q": "x"}}])
        return AIMessage(f"answer after {step}", usage_metadata=usage(call))

    with open_store(f"sqlite:///{tmp_path / 'lc.db'}") as store:
        middleware = TurnledgerMiddleware(store, profile=SMALL)

        class Scripted(GenericFakeChatModel):
            def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
                return self

            def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
                versions.append(middleware.session_for(config).version)
                return super()._generate(messages, *args, **kwargs)

        @tool
        def lookup(q: str) -> str:
            """Look a value up."""
            return f"value of {q}: " + "x" * 300

        model = Scripted(messages=iter([reply(call) for call in range(2 * (steps + 1))]))
        agent = create_agent(model, [lookup], middleware=[middleware],
                             checkpointer=InMemorySaver())
        for n in range(2):
            question = {"messages": [HumanMessage(f"question {n}")]}
            state = (agent.invoke(question, config) if call == "invoke"
                     else asyncio.run(agent.ainvoke(question, config)))
            assert f"answer after {steps}" == state["messages"][-1].content
        session = middleware.session_for(config)
        assert 2 * (steps + 1) == len(versions)
        billed = {call: ("langchain", 3000 + call, 200 + call, 50 if call % 2 else 13, 40 + call)
                  for call in range(len(versions)) if call != 1}
        assert _expected(session, versions, billed) == _usages(session)
        assert verify(store.backend).ok


# -- OpenAI Agents SDK --


def test_i35_p3_openai_agents_run_hooks_record_each_responses_usage_against_its_window(
    tmp_path: Path,
) -> None:
    """Real ``Runner.run`` loops (the SDK's ScriptedModel, four tool steps, trimmed between
    steps) with ``hooks=session.run_hooks()``: with the filter, each model response's usage is
    recorded as answering the window the filter handed to that call; a response without usage
    records none; without the filter (the model's input is not a turnledger window) none is."""
    agents = need("agents")
    agents.set_tracing_disabled(True)
    from agents.decorators import tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
    from agents.usage import Usage as AgentsUsage
    from openai.types.responses.response_usage import InputTokensDetails

    from turnledger.integrations.openai_agents import TurnledgerSession

    steps = 4
    versions: list[int] = []

    @tool
    async def lookup(q: int) -> str:
        return f"value {q}: " + "x" * 300

    def usage(call: int) -> AgentsUsage:
        if call == 2:
            return AgentsUsage()  # the model returned none
        return AgentsUsage(requests=1, input_tokens=4000 + call, output_tokens=50 + call,
                           total_tokens=4050 + 2 * call, input_tokens_details=InputTokensDetails(
                               cached_tokens=300 + call, cache_write_tokens=9))

    def script(first: int) -> list[Any]:
        calls = [ModelStep(output=[function_call("lookup", {"q": k}, call_id=f"c{first}_{k}")],
                           usage=usage(first + k)) for k in range(steps)]
        return [*calls, ModelStep(output=[assistant_message("done " + "d" * 300)],
                                  usage=usage(first + steps))]

    async def main(session: Any) -> None:
        async def noted_filter(data: Any) -> Any:
            window = await session.call_model_input_filter(data)
            versions.append(session.session.version)  # the log's state for this call
            return window

        hooks = session.run_hooks()
        unfiltered = ScriptedModel(script(100))
        await agents.Runner.run(agents.Agent(name="x", model=unfiltered, tools=[lookup]),
                                "question without the filter", session=session, hooks=hooks)
        assert [] == _usages(session.session)
        config = agents.RunConfig(call_model_input_filter=noted_filter)
        for n in range(2):
            model = ScriptedModel(script(n * (steps + 1)))
            result = await agents.Runner.run(
                agents.Agent(name="x", model=model, tools=[lookup]), f"question {n}",
                session=session, hooks=hooks, run_config=config)
            assert result.final_output.startswith("done")

    with open_store(f"sqlite:///{tmp_path / 'agents.db'}") as store:
        session = TurnledgerSession("agents-u", store, profile=SMALL)
        asyncio.run(main(session))
        assert 2 * (steps + 1) == len(versions)
        billed = {call: ("openai-responses", 4000 + call, 300 + call, 9, 50 + call)
                  for call in range(len(versions)) if call != 2}
        assert _expected(session.session, versions, billed) == _usages(session.session)
        assert verify(store.backend).ok
