"""Issue 24 point 5: every framework integration takes a summarizer and uses it in its own loop.

Each test runs a real loop of the framework with its own scripted model (no network) on a small
budget, on SQLite and PostgreSQL: the OpenAI Agents SDK (``TurnledgerSession`` as the run's
session and its ``call_model_input_filter`` between tool steps), LangChain 1.x ``create_agent``
with ``TurnledgerMiddleware``, LangChain's ``RunnableWithMessageHistory`` over
``history_factory``, pydantic-ai with ``TurnledgerHistory`` and Google ADK with
``TurnledgerCallback``. The model inputs are read back in one neutral form (`_Entry`) and
checked alike: the summary in the breadcrumb's place, whole turns, every tool pair; the
summarizer got exactly the turns each ``TurnsSummarized`` covers; a summarizer that raises
gives the plain trim with the breadcrumb and ``SummaryRefused``, and the run completes; a new
object on a reopened store reads the same window without calling a summarizer.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import turnledger as tl
from tests.backends import SHARED_BACKENDS, Target, fresh_target
from tests.extras import need
from tests.integration.test_summaries import Recorder
from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.events import (
    DomainEvent,
    MessageAppended,
    SummaryRefusal,
    SummaryRefused,
    TrimDecided,
    TurnsSummarized,
)
from turnledger.domain.messages import (
    BREADCRUMB_TEXT,
    SUMMARY_PREFIX,
    ChatMessage,
    to_chat_messages,
)
from turnledger.replay.audit import verify
from turnledger.store.session import Store, open_store

os.environ.setdefault("OPENAI_API_KEY", "sk-test-no-network")
# ``RunnableWithMessageHistory`` (the chat-history loop) is deprecated in langchain-core 1.x but
# still what ``history_factory`` serves.
pytestmark = pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")

PADDING = "x" * 200  # ~55 estimated tokens (R20)
Entry = tuple[str, str | None]
"""One model-input message in a neutral form: ("system" | "user" | "summary" | "breadcrumb" |
"assistant", text) or ("call" | "result", call id; None where the framework strips ids)."""
Reader = Callable[[Store, Any], Any]
"""Reads the window the framework's model would get now, as JSON, through a new integration
object on ``store`` with the given summarizer."""
Loop = Callable[[Store, Any], tuple[list[list[Entry]], list[DomainEvent], Reader]]


@pytest.fixture(params=SHARED_BACKENDS)
def shared_target(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    with fresh_target(request.param, tmp_path) as fresh:
        yield fresh


def _raises(turns: Sequence[ChatMessage], previous: str | None) -> str:
    raise RuntimeError("the summary model is down")


def _user(text: str) -> Entry:
    if text == BREADCRUMB_TEXT:
        return ("breadcrumb", text)
    if text.startswith(SUMMARY_PREFIX):
        return ("summary", text[len(SUMMARY_PREFIX):])
    return ("user", text)


def _check_input(entries: list[Entry]) -> Entry | None:
    """One model input: system prompts, at most one breadcrumb or summary (first), then whole
    turns (a user message first), every call answered and no result without its call.
    Returns the breadcrumb or summary, if any."""
    body = [e for e in entries if e[0] != "system"]
    synthetic = [i for i, e in enumerate(body) if e[0] in ("summary", "breadcrumb")]
    assert synthetic in ([], [0]), entries
    rest = body[1:] if synthetic else body
    assert "user" == rest[0][0], f"starts mid-turn: {entries}"
    pending: list[str | None] = []
    for kind, key in rest:
        if kind == "call":
            pending.append(key)
        elif kind == "result":
            assert key in pending or (key is None and pending), f"orphan result: {entries}"
            pending.remove(key if key in pending else pending[0])
    assert [] == pending, f"a call without its result: {entries}"
    return body[0] if synthetic else None


def _check_exact_turns(events: list[DomainEvent], recorder: Recorder) -> list[TurnsSummarized]:
    """Each call of ``recorder`` is one recorded summary, given exactly the chat messages of
    the log positions it covers (the turns its trim dropped; system messages stay in the view)
    and the summary shown before it."""
    summaries = [e for e in events if isinstance(e, TurnsSummarized)]
    assert summaries
    assert len(recorder.calls) == len(summaries)
    logged = {e.position: e.message for e in events if isinstance(e, MessageAppended)}
    trims = [e for e in events if isinstance(e, TrimDecided)]
    previous: str | None = None
    for (given, rolled), summary in zip(recorder.calls, summaries, strict=True):
        covered = [logged[p] for p in range(summary.first_position, summary.last_position + 1)]
        assert [m for m in to_chat_messages(covered) if m.role != "system"] == given
        assert previous == rolled  # summaries roll
        trim = max((t for t in trims if t.originator_version < summary.originator_version),
                   key=lambda t: t.originator_version)
        assert summary.last_position + 1 == trim.first_kept_position  # the dropped turns
        previous = summary.text
    return summaries


# -- the loops, one per framework: model inputs as entries, the log, a window reader --


def _agents_sdk_loop(store: Store, summarizer: Any) -> Any:
    agents = need("agents")
    agents.set_tracing_disabled(True)
    from agents.decorators import tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from turnledger.integrations.openai_agents import TurnledgerSession

    @tool
    async def lookup(q: int) -> str:
        return f"{q}:" + "r" * 400

    session = TurnledgerSession("i24-sdk", store, profile=RuntimeProfile(max_context_tokens=1500),
                                summarizer=summarizer)
    config = agents.RunConfig(call_model_input_filter=session.call_model_input_filter)
    models: list[Any] = []

    async def main() -> None:
        for run in range(4):
            steps = 2 if run < 3 else 8
            model = ScriptedModel([
                *[[function_call("lookup", {"q": k}, call_id=f"c{run}_{k}")]
                  for k in range(steps)],
                [assistant_message(f"answer {run}")]])
            models.append(model)
            agent = agents.Agent(name="x", model=model, tools=[lookup])
            result = await agents.Runner.run(agent, f"question {run}", session=session,
                                             run_config=config, max_turns=steps + 2)
            assert f"answer {run}" == result.final_output  # the run completes

    asyncio.run(main())

    def entries(items: list[Any]) -> list[Entry]:
        out: list[Entry] = []
        for item in items:
            if item.get("type") == "function_call":
                out.append(("call", item["call_id"]))
            elif item.get("type") == "function_call_output":
                out.append(("result", item["call_id"]))
            elif item.get("role") == "user":
                out.append(_user(item["content"]))
            else:
                out.append((item.get("role", "assistant"), json.dumps(item.get("content"))))
        return out

    def read(again: Store, summarizer: Any) -> Any:
        fresh = TurnledgerSession("i24-sdk", again, summarizer=summarizer)
        return asyncio.run(fresh.get_items())

    inputs = [entries(list(call.input)) for model in models for call in model.calls]
    assert 3 * 3 + 9 == len(inputs)
    return inputs, session.session.events(), read


def _langchain_entries(messages: Sequence[Any]) -> list[Entry]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Entry] = []
    for message in messages:
        if isinstance(message, HumanMessage):
            out.append(_user(message.content))  # type: ignore[arg-type]
        elif isinstance(message, SystemMessage):
            out.append(("system", str(message.content)))
        elif isinstance(message, ToolMessage):
            out.append(("result", message.tool_call_id))
        else:
            assert isinstance(message, AIMessage)
            out.append(("assistant", str(message.content)))
            out += [("call", call["id"]) for call in message.tool_calls]
    return out


def _fake_chat(script: list[Any]) -> Any:
    """langchain-core's fake chat model keeping its inputs (test_integration_langchain's)."""
    from tests.integration.test_integration_langchain import _scripted

    return _scripted(script)


def _langchain_agent_loop(store: Store, summarizer: Any) -> Any:
    need("langchain")
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage, messages_to_dict
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    from turnledger.integrations.langchain_agents import TurnledgerMiddleware

    @tool
    def lookup(q: str) -> str:
        """Look a value up."""
        return f"value of {q}: {PADDING}"

    def call(*ids: str) -> Any:
        return AIMessage("", tool_calls=[{"id": i, "name": "lookup", "args": {"q": i}}
                                         for i in ids])

    model = _fake_chat([*[AIMessage(f"answer {n} {PADDING}") for n in range(3)],
                        call("c0"), call("c1", "c2"), *[call(f"c{n}") for n in range(3, 7)],
                        AIMessage("done")])
    config: Any = {"configurable": {"thread_id": "i24-thread"}}
    middleware = TurnledgerMiddleware(store, profile=RuntimeProfile(max_context_tokens=600),
                                      summarizer=summarizer)
    agent = create_agent(model, [lookup], middleware=[middleware], checkpointer=InMemorySaver())
    for n in range(3):
        agent.invoke({"messages": [HumanMessage(f"question {n} {PADDING}")]}, config)
    state = agent.invoke({"messages": [HumanMessage("look everything up")]}, config)
    assert "done" == state["messages"][-1].content  # the run completes
    everything = list(state["messages"])

    def read(again: Store, summarizer: Any) -> Any:
        fresh = TurnledgerMiddleware(again, summarizer=summarizer)
        return messages_to_dict(fresh.trimmer.window(everything, config))

    inputs = [_langchain_entries(seen) for seen in model.inputs]
    assert 3 + 7 == len(inputs)
    return inputs, middleware.session_for(config).events(), read


def _langchain_history_loop(store: Store, summarizer: Any) -> Any:
    need("langchain")
    from langchain_core.messages import AIMessage, HumanMessage, messages_to_dict
    from langchain_core.runnables.history import RunnableWithMessageHistory

    from turnledger.integrations.langchain import TurnledgerChatMessageHistory, history_factory

    model = _fake_chat([AIMessage(f"answer {n} {PADDING}") for n in range(6)])
    factory = history_factory(store, profile=RuntimeProfile(max_context_tokens=400),
                              summarizer=summarizer)
    chain = RunnableWithMessageHistory(model, factory)  # type: ignore[arg-type]
    config: Any = {"configurable": {"session_id": "i24-chat"}}
    for n in range(6):
        reply = chain.invoke([HumanMessage(f"question {n} {PADDING}")], config)
        assert reply.content.startswith(f"answer {n}")  # the run completes

    def read(again: Store, summarizer: Any) -> Any:
        fresh = TurnledgerChatMessageHistory.lazy(again, "i24-chat", summarizer=summarizer)
        return messages_to_dict(fresh.messages)

    session = TurnledgerChatMessageHistory.lazy(store, "i24-chat").session
    return [_langchain_entries(seen) for seen in model.inputs], session.events(), read


def _pydantic_entries(messages: list[Any]) -> list[Entry]:
    from pydantic_ai.messages import ModelRequest, ModelResponse

    out: list[Entry] = []
    for message in messages:
        assert isinstance(message, ModelRequest | ModelResponse)
        for part in message.parts:
            kind = part.part_kind
            if kind == "system-prompt":
                out.append(("system", part.content))
            elif kind == "user-prompt":
                out.append(_user(part.content))
            elif kind == "tool-return":
                out.append(("result", part.tool_call_id))
            elif kind == "tool-call":
                out.append(("call", part.tool_call_id))
            else:
                assert isinstance(message, ModelResponse), kind
                out.append(("assistant", str(getattr(part, "content", kind))))
    return out


def _pydantic_ai_loop(store: Store, summarizer: Any) -> Any:
    need("pydantic_ai")
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from tests.integration.test_integration_pydantic_ai import _agent
    from turnledger.integrations.pydantic_ai import TurnledgerHistory

    history = TurnledgerHistory.open(store, "i24-pa", profile=RuntimeProfile(
        max_context_tokens=1500), summarizer=summarizer)
    inputs: list[list[Any]] = []
    agent = _agent(history, steps_per_run=8, inputs=inputs)  # test_integration_pydantic_ai's
    for n in range(3):
        result = agent.run_sync(f"question {n}", message_history=history.messages())
        assert "answer after 8 lookups" == result.output  # the run completes

    def read(again: Store, summarizer: Any) -> Any:
        messages = TurnledgerHistory.open(again, "i24-pa", summarizer=summarizer).messages()
        return ModelMessagesTypeAdapter.dump_python(messages, mode="json")

    return [_pydantic_entries(i) for i in inputs], history.session.events(), read


def _google_adk_loop(store: Store, summarizer: Any) -> Any:
    need("google.adk")
    from tests.integration.test_integration_google_adk import _run
    from turnledger.integrations.google_adk import TurnledgerCallback

    callback = TurnledgerCallback(store, profile=RuntimeProfile(max_context_tokens=1200),
                                  summarizer=summarizer)
    seen: list[list[Any]] = []
    everything = asyncio.run(_run(callback, questions=3, steps=6, inputs=seen))
    last = everything[-1].parts[0].text
    assert "answer after 6 lookups" == last  # the run completes

    def entries(contents: list[Any]) -> list[Entry]:
        out: list[Entry] = []
        for content in contents:
            for part in content.parts:
                if part.function_call is not None:  # ADK strips the call ids: None
                    out.append(("call", part.function_call.id))
                elif part.function_response is not None:
                    out.append(("result", part.function_response.id))
                elif content.role == "user":
                    out.append(_user(part.text))
                else:
                    out.append(("assistant", part.text))
        return out

    def read(again: Store, summarizer: Any) -> Any:
        contents = TurnledgerCallback(again, summarizer=summarizer).contents("adk-1")
        return [c.model_dump(mode="json") for c in contents]

    return [entries(i) for i in seen], callback.session_for("adk-1").events(), read


CHILDREN: dict[str, tuple[str, str, Callable[[Any], Any]]] = {
    # framework: the existing restore child of its tests, the conversation name, its window
    "openai_agents": ("agents_child.py", "i24-sdk", lambda out: out),
    "langchain_agent": ("langchain_child.py", "i24-thread", lambda out: out["window"]),
    "langchain_history": ("langchain_child.py", "i24-chat", lambda out: out["window"]),
    "pydantic_ai": ("pydantic_ai_child.py", "i24-pa", lambda out: out),
    "google_adk": ("google_adk_child.py", "adk-1", lambda out: out),
}


def _window_in_a_new_process(framework: str, url: str) -> Any:
    """The window a new process reads without any summarizer (the framework's restore child)."""
    script, name, window = CHILDREN[framework]
    child = subprocess.run([sys.executable, str(Path(__file__).with_name(script)), url, name],
                           capture_output=True, text=True, timeout=120, check=False)
    assert 0 == child.returncode, child.stderr
    return window(json.loads(child.stdout))


LOOPS: dict[str, Loop] = {
    "openai_agents": _agents_sdk_loop,
    "langchain_agent": _langchain_agent_loop,
    "langchain_history": _langchain_history_loop,
    "pydantic_ai": _pydantic_ai_loop,
    "google_adk": _google_adk_loop,
}


@pytest.mark.parametrize("framework", list(LOOPS))
def test_i24_each_integration_summarises_the_dropped_turns_in_its_loop(
    framework: str, shared_target: Target
) -> None:
    """With a small budget, the model inputs show the summary where the breadcrumb would be
    (never a breadcrumb), whole turns and every tool pair; each summary the log records was
    one summarizer call given exactly the turns it covers; a new object on a reopened store
    reads the same window and calls no summarizer for what was summarised; a new process
    without one reads it too."""
    recorder = Recorder()
    with open_store(shared_target.url) as store:
        inputs, events, read = LOOPS[framework](store, recorder)
        openers = [_check_input(entries) for entries in inputs]
        assert not any(o and o[0] == "breadcrumb" for o in openers)
        shown = [o[1] for o in openers if o]
        assert shown, "the budget was never passed: no input shows a summary"
        window = read(store, recorder)  # may trim (and summarise) once more, recorded
        assert json.dumps(SUMMARY_PREFIX)[1:-1] in json.dumps(window)  # it shows the summary
        events = _session_events(store, events)
        summaries = _check_exact_turns(events, recorder)
        assert set(shown) <= {s.text for s in summaries}
        assert verify(store.backend).ok
        calls = len(recorder.calls)
    with open_store(shared_target.url) as again:
        assert window == read(again, recorder)
        assert events == _session_events(again, events)  # nothing new decided
    assert calls == len(recorder.calls)
    # A new process without a summarizer reads the summary from the log, trims nothing anew.
    assert json.loads(json.dumps(window)) == _window_in_a_new_process(
        framework, shared_target.url)


@pytest.mark.parametrize("framework", list(LOOPS))
def test_i24_each_integration_falls_back_to_the_breadcrumb_when_the_summarizer_raises(
    framework: str, shared_target: Target
) -> None:
    """A summarizer that raises: every trim is the plain one, the model inputs show the
    breadcrumb, each refusal is recorded (``raised``, the summarizer's name) and every run of
    the loop completes (asserted inside each loop)."""
    summarizer = tl.Summarizer("down-v1", _raises)
    with open_store(shared_target.url) as store:
        inputs, events, _read = LOOPS[framework](store, summarizer)
        openers = [_check_input(entries) for entries in inputs]
        assert any(o and o[0] == "breadcrumb" for o in openers)
        assert not any(o and o[0] == "summary" for o in openers)
        events = _session_events(store, events)
        refused = [e for e in events if isinstance(e, SummaryRefused)]
        assert refused
        assert {(SummaryRefusal.RAISED, "down-v1")} == {(e.reason, e.summarizer)
                                                       for e in refused}
        assert "the summary model is down" in refused[0].detail
        assert not any(isinstance(e, TurnsSummarized) for e in events)
        assert verify(store.backend).ok


def _session_events(store: Store, events: list[DomainEvent]) -> list[DomainEvent]:
    """The events of the session ``events`` belong to, as ``store`` has them now."""
    return store.events_of(str(events[0].originator_id))


def test_i24_a_summarizer_that_is_not_callable_is_refused_when_the_object_is_built() -> None:
    """Each integration checks its ``summarizer`` when it is built (before any I/O or run),
    and names a bare callable as `as_summarizer` does."""
    need("agents")
    need("langchain")
    need("pydantic_ai")
    need("google.adk")
    from turnledger.integrations.google_adk import TurnledgerCallback
    from turnledger.integrations.langchain import (
        TurnledgerChatMessageHistory,
        TurnledgerTrimmer,
        history_factory,
    )
    from turnledger.integrations.langchain_agents import TurnledgerMiddleware
    from turnledger.integrations.openai_agents import TurnledgerSession
    from turnledger.integrations.pydantic_ai import TurnledgerHistory

    with open_store("memory://") as store:
        builders: list[Callable[[Any], object]] = [
            lambda s: TurnledgerSession("n", store, summarizer=s),
            lambda s: TurnledgerTrimmer(store, summarizer=s),
            lambda s: TurnledgerMiddleware(store, summarizer=s),
            lambda s: TurnledgerChatMessageHistory.lazy(store, "n", summarizer=s),
            lambda s: history_factory(store, summarizer=s),
            lambda s: TurnledgerHistory.open(store, "n", summarizer=s),
            lambda s: TurnledgerCallback(store, summarizer=s),
        ]
        for build in builders:
            with pytest.raises(TypeError, match="a summarizer must be callable, got str"):
                build("not a function")
        assert [] == store.sessions()  # refused before anything was opened
        recorder = Recorder()
        recorder.summarizer_name = "recorder-v2"  # type: ignore[attr-defined]
        named = tl.Summarizer("recorder-v2", recorder)
        assert named == TurnledgerSession("n", store, summarizer=recorder).summarizer
        assert named == TurnledgerCallback(store, summarizer=recorder).summarizer
        assert named == TurnledgerMiddleware(store, summarizer=named).trimmer.summarizer


def test_i34_every_integration_takes_one_options_value() -> None:
    """Each integration object takes the same `IntegrationOptions` as ``options=`` (a keyword
    of one of its fields replaces that field), and the sessions it opens start with its
    profile (issue 34: one value for the parameters they all repeat)."""
    need("agents")
    need("langchain")
    need("pydantic_ai")
    need("google.adk")
    from turnledger.integrations import IntegrationOptions
    from turnledger.integrations.google_adk import TurnledgerCallback
    from turnledger.integrations.langchain import (
        TurnledgerChatMessageHistory,
        TurnledgerTrimmer,
        history_factory,
    )
    from turnledger.integrations.langchain_agents import TurnledgerMiddleware
    from turnledger.integrations.openai_agents import TurnledgerSession
    from turnledger.integrations.pydantic_ai import TurnledgerHistory

    profile = RuntimeProfile(max_context_tokens=777)
    named = tl.Summarizer("recorder-v3", Recorder())
    options = IntegrationOptions(profile=profile, summarizer=named, conflict_budget_seconds=2)
    with open_store("memory://") as store:
        opened = [
            TurnledgerSession("a", store, options=options).session,
            TurnledgerTrimmer(store, options=options).session_for(
                {"configurable": {"thread_id": "b"}}),
            TurnledgerMiddleware(store, session_id="c", options=options).session_for({}),
            TurnledgerChatMessageHistory.lazy(store, "d", options=options).session,
            history_factory(store, options=options)("e").session,
            TurnledgerHistory.open(store, "f", options=options).session,
            TurnledgerCallback(store, options=options).session_for("g"),
        ]
        assert [777] * 7 == [session.profile.max_context_tokens for session in opened]
        assert [named, named, named] == [
            TurnledgerCallback(store, options=options).summarizer,
            TurnledgerHistory(opened[0], options=options).summarizer,
            TurnledgerChatMessageHistory(opened[0], options=options).summarizer]
        assert [2.0, 0.0] == [
            TurnledgerSession("a", store, options=options).options.conflict_budget_seconds,
            TurnledgerSession("a", store, options=options, conflict_budget_seconds=0
                              ).options.conflict_budget_seconds]
        with pytest.raises(TypeError, match="unexpected keyword argument 'profile'"):
            TurnledgerHistory(opened[0], profile=profile)  # type: ignore[call-arg]
