"""Issue 22, LangChain and LangGraph: inside the loops people run.

Real langchain 1.x, langchain-core and LangGraph with langchain-core's fake chat model (no
network): the ``create_agent`` middleware trims between the tool steps of one run (R24) and
records every message; LangGraph's hooks leave the log whole when a loop ends; the history
factory does no I/O on the event loop; many history objects of one conversation write at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.backends import SHARED_BACKENDS, Target, fresh_target
from tests.docs_text import section as docs_section
from tests.extras import need
from tests.usage_windows import SMALL, expected_usages, usages
from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.errors import StoreUnavailable
from turnledger.domain.events import HistoryTrimmed, TrimDecided
from turnledger.domain.messages import BREADCRUMB_TEXT
from turnledger.replay.audit import verify
from turnledger.replay.transcripts import record_of
from turnledger.store.session import Session, open_store

CHILD = Path(__file__).with_name("langchain_child.py")
README, _ = docs_section("## LangChain and LangGraph")  # docs/integrations/langchain.md
PADDING = "x" * 200  # ~55 estimated tokens per message (R20: ceil(bytes / 4) + 4)


@pytest.fixture(params=SHARED_BACKENDS)
def shared_target(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    with fresh_target(request.param, tmp_path) as fresh:
        yield fresh


def _scripted(script: list[Any]) -> Any:
    """langchain-core's fake chat model with tools bound and every input it got kept."""
    need("langchain")
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    class ScriptedChat(GenericFakeChatModel):
        inputs: list[list[Any]] = []  # noqa: RUF012 - a pydantic field

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            self.inputs.append(list(messages))
            return super()._generate(messages, *args, **kwargs)

    return ScriptedChat(messages=iter(script), inputs=[])


def _lookup_tool() -> Any:
    from langchain_core.tools import tool

    @tool
    def lookup(q: str) -> str:
        """Look a value up."""
        return f"value of {q}: {PADDING}"

    return lookup


def _call(*ids: str) -> Any:
    from langchain_core.messages import AIMessage

    return AIMessage("", tool_calls=[{"id": i, "name": "lookup", "args": {"q": i}} for i in ids])


def _log(session: Session) -> list[Any]:
    """Every message the session recorded, as LangChain messages."""
    from turnledger.integrations.langchain import to_langchain_messages

    return to_langchain_messages(record_of(session.events()))


def _check_whole_turns(seen: list[Any], everything: list[Any]) -> int:
    """``seen`` (one model input) is a breadcrumb when older turns were cut, then whole turns
    as the graph holds them, up to the reply it got, with every tool pair; returns where its
    first turn starts in ``everything``."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    crumbs = [i for i, m in enumerate(seen) if m.content == BREADCRUMB_TEXT]
    rest = seen[1:] if crumbs else seen
    start = everything.index(rest[0])
    assert ([0] if start else []) == crumbs  # a breadcrumb exactly when turns were cut
    assert isinstance(everything[start], HumanMessage)  # a whole turn first
    assert everything[start : start + len(rest)] == rest
    assert isinstance(everything[start + len(rest)], AIMessage)  # what answered this input
    calls = {c["id"] for m in rest if isinstance(m, AIMessage) for c in m.tool_calls}
    results = {m.tool_call_id for m in rest if isinstance(m, ToolMessage)}
    assert calls == results  # no orphan either way
    return start


def test_r24_middleware_trims_between_tool_steps_of_one_run_and_restores(
    shared_target: Target,
) -> None:
    """Three short turns, then one run whose tool loop passes the budget: the trims happen
    between its tool steps, each model input is whole turns with the breadcrumb and every
    tool pair, the log holds every message (the final reply too), and a new process restores
    the thread whole."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage, messages_to_dict
    from langgraph.checkpoint.memory import InMemorySaver

    from turnledger.integrations.langchain_agents import TurnledgerMiddleware

    loop = [_call("c0"), _call("c1", "c2"), *[_call(f"c{n}") for n in range(3, 7)]]
    script = [AIMessage(f"answer {n} {PADDING}") for n in range(3)]
    model = _scripted([*script, *loop, AIMessage("done")])
    config: Any = {"configurable": {"thread_id": "long-run"}}
    with open_store(shared_target.url) as store:
        notices: list[HistoryTrimmed] = []
        store.subscribe(notices.append)
        middleware = TurnledgerMiddleware(store, profile=RuntimeProfile(max_context_tokens=600))
        agent = create_agent(model, [_lookup_tool()], middleware=[middleware],
                             checkpointer=InMemorySaver())
        for n in range(3):
            agent.invoke({"messages": [HumanMessage(f"question {n} {PADDING}")]}, config)
        state = agent.invoke({"messages": [HumanMessage("look everything up")]}, config)
        everything = state["messages"]
        assert 3 * 2 + 1 + 6 + 7 + 1 == len(everything)  # 6 calls, 7 results: the graph keeps all
        assert "done" == everything[-1].content
        starts = [_check_whole_turns(seen, everything) for seen in model.inputs]
        assert [0, 0, 0] == starts[:3]
        in_the_run = starts[3:]
        assert 7 == len(in_the_run)
        assert 0 == in_the_run[0] < in_the_run[-1]  # trimmed inside the run, not before it
        assert in_the_run == sorted(in_the_run)  # trims are permanent
        assert len(set(in_the_run)) - 1 == len(notices)  # each trim recorded and notified
        session = middleware.session_for(config)
        assert len(notices) == sum(isinstance(e, TrimDecided) for e in session.events())
        assert everything == _log(session)  # every message, the final reply included
        assert verify(store.backend).ok
    child = subprocess.run(
        [sys.executable, str(CHILD), shared_target.url, "long-run"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert 0 == child.returncode, child.stderr
    restored = json.loads(child.stdout)
    assert messages_to_dict(everything) == restored["log"]
    assert messages_to_dict([*model.inputs[-1], everything[-1]]) == restored["window"]


def test_i22_middleware_async_run_records_the_final_reply(tmp_path: Path) -> None:
    """``ainvoke`` over five turns with a tool each: the log holds all 20 messages when the
    last run ends, and the model saw two whole turns after a breadcrumb."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from turnledger.integrations.langchain_agents import TurnledgerMiddleware

    script = [m for n in range(5) for m in (_call(f"call_{n}"), AIMessage(f"answer {n}"))]
    model = _scripted(script)
    config: Any = {"configurable": {"thread_id": "async-thread"}}
    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as store:
        middleware = TurnledgerMiddleware(store, profile=RuntimeProfile(max_history_messages=2))
        agent = create_agent(model, [_lookup_tool()], middleware=[middleware],
                             checkpointer=InMemorySaver())

        async def talk() -> Any:
            for n in range(5):
                state = await agent.ainvoke({"messages": [HumanMessage(f"question {n}")]}, config)
            return state

        everything = asyncio.run(talk())["messages"]
        assert 20 == len(everything)
        assert everything == _log(middleware.session_for(config))
        seen = model.inputs[-1]
        assert [BREADCRUMB_TEXT, "question 3"] == [seen[0].content, seen[1].content]
        assert everything[12:-1] == seen[1:]


def test_i22_middleware_records_a_run_that_a_tool_ends(tmp_path: Path) -> None:
    """A tool with ``return_direct`` ends the run without another model call: its result is
    recorded all the same (``after_agent``)."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    from turnledger.integrations.langchain_agents import TurnledgerMiddleware

    @tool(return_direct=True)
    def lookup(q: str) -> str:
        """Look a value up and answer with it."""
        return f"value of {q}"

    with open_store(f"sqlite:///{tmp_path / 'd.db'}") as store:
        middleware = TurnledgerMiddleware(store, session_id="direct")
        agent = create_agent(_scripted([_call("c0")]), [lookup], middleware=[middleware])
        everything = agent.invoke({"messages": [HumanMessage("what is q?")]})["messages"]
        assert isinstance(everything[-1], ToolMessage)
        assert everything == _log(middleware.session_for({}))


@pytest.mark.parametrize("state_window", [False, True])
def test_i22_middleware_refuses_a_thread_whose_checkpoint_was_lost(
    tmp_path: Path, state_window: bool
) -> None:
    """A graph that lost the thread's messages (a new checkpointer) but kept its thread id is
    refused with an error that says so (whole state, or ``state_window``); nothing more is
    recorded."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from turnledger.domain.errors import TurnledgerError
    from turnledger.integrations.langchain_agents import TurnledgerMiddleware

    config: Any = {"configurable": {"thread_id": "lost"}}
    with open_store(f"sqlite:///{tmp_path / 'l.db'}") as store:
        middleware = TurnledgerMiddleware(store, state_window=state_window)
        agents = [create_agent(_scripted([AIMessage("hi")]), [], middleware=[middleware],
                               checkpointer=InMemorySaver()) for _ in range(2)]
        agents[0].invoke({"messages": [HumanMessage("hello")]}, config)
        message = (r"do not hold the last one it recorded.*checkpointer must keep" if state_window
                   else r"recorded 2 messages but only 1 were given.*checkpointer must keep the "
                   "thread")
        with pytest.raises(TurnledgerError, match=message):
            agents[1].invoke({"messages": [HumanMessage("hello")]}, config)
        assert 2 == middleware.session_for(config).next_position


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_i22_langgraph_post_model_hook_leaves_the_log_whole(tmp_path: Path) -> None:
    """With the trimmer as ``pre_model_hook`` and its ``as_post_model_hook()``, the log holds
    every message of the thread when the loop ends (it lacked the last reply before)."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    from turnledger.integrations.langchain import TurnledgerTrimmer

    script = [m for n in range(5) for m in (_call(f"call_{n}"), AIMessage(f"answer {n}"))]
    model = _scripted(script)
    config: Any = {"configurable": {"thread_id": "graph-thread"}}
    with open_store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        trimmer = TurnledgerTrimmer(store, profile=RuntimeProfile(max_history_messages=2))
        agent = create_react_agent(model, [_lookup_tool()], checkpointer=InMemorySaver(),
                                   pre_model_hook=trimmer.as_runnable(),
                                   post_model_hook=trimmer.as_post_model_hook())
        for n in range(5):
            state = agent.invoke({"messages": [HumanMessage(f"question {n}")]}, config)
        assert 20 == len(state["messages"])
        assert state["messages"] == _log(trimmer.session_for(config))
        assert [BREADCRUMB_TEXT, "question 3"] == [m.content for m in model.inputs[-1][:2]]


# LangChain deprecates RunnableWithMessageHistory, but people run it: its factory is the bug.
@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
def test_i22_history_factory_does_no_io_until_the_first_read(tmp_path: Path) -> None:
    """``RunnableWithMessageHistory`` calls its factory on the event loop: a history from
    `history_factory` touches no store until it is read (built on a closed store, it fails
    only then), and ``ainvoke`` through it records each exchange."""
    need("langchain_core")
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.runnables import RunnableLambda
    from langchain_core.runnables.history import RunnableWithMessageHistory

    from turnledger.integrations.langchain import history_factory

    closed = open_store(f"sqlite:///{tmp_path / 'closed.db'}")
    factory = history_factory(closed)
    closed.close()
    history = factory("user-1")  # no I/O, so the closed store is not noticed
    with pytest.raises(StoreUnavailable, match="closed"):
        _ = history.messages
    with pytest.raises(ValueError, match="conflict_budget_seconds"):
        history_factory(closed, conflict_budget_seconds=-1)

    def reply(messages: list[Any]) -> AIMessage:
        return AIMessage(f"you said {messages[-1].content}; I have {len(messages)}")

    with open_store(f"sqlite:///{tmp_path / 'h.db'}") as store:
        chain = RunnableWithMessageHistory(RunnableLambda(reply), history_factory(store))
        config: Any = {"configurable": {"session_id": "user-1"}}

        async def talk() -> list[Any]:
            return [await chain.ainvoke([HumanMessage(t)], config) for t in ("a", "b")]

        answers = asyncio.run(talk())
        assert ["you said a; I have 1", "you said b; I have 3"] == [a.content for a in answers]
        assert ["a", "you said a; I have 1", "b", "you said b; I have 3"] == [
            m.content for m in history_factory(store)("user-1").messages
        ]


def test_i22_many_history_objects_of_one_conversation_all_land(shared_target: Target) -> None:
    """Six workers, each with its own store and a new history object per step, write one
    conversation at once (threads, then coroutines): every step lands, whole."""
    need("langchain_core")
    from langchain_core.messages import AIMessage, HumanMessage

    from turnledger.integrations.langchain import history_factory

    workers, steps = 6, 4

    def step(worker: int, n: int) -> list[Any]:
        return [HumanMessage(f"w{worker} q{n}"), AIMessage(f"w{worker} a{n}")]

    def thread_worker(worker: int) -> None:
        with open_store(shared_target.url) as store:
            factory = history_factory(store)
            for n in range(steps):
                factory("shared").add_messages(step(worker, n))

    threads = [threading.Thread(target=thread_worker, args=(w,)) for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    async def coroutines(factory: Any) -> None:
        await asyncio.gather(*(factory("shared").aadd_messages(step(workers + w, n))
                               for w in range(workers) for n in range(steps)))

    with open_store(shared_target.url) as store:
        asyncio.run(coroutines(history_factory(store)))
        log = [m.content for m in _log(history_factory(store)("shared").session)]
        expected = {f"w{w} q{n}" for w in range(2 * workers) for n in range(steps)}
        assert 2 * len(expected) == len(log)
        assert expected == {c for c in log if " q" in c}
        for i in range(0, len(log), 2):  # each step in one transaction: its pair adjacent
            assert log[i].replace(" q", " a") == log[i + 1]
        assert verify(store.backend).ok


def _section_examples(heading: str) -> list[tuple[str, str]]:
    _, section = docs_section(heading)
    found = re.findall(r"```python\n(.*?)```\s*Prints:\s*```text\n(.*?)```", section, re.DOTALL)
    assert found, f"{heading}: no python example followed by its output"
    return found


def test_i22_readme_langchain_examples_run_as_written_without_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every example of the README's LangChain section runs in a fresh namespace, prints what
    the README says, and prints no warning (no deprecated API)."""
    need("langchain")
    need("langgraph")
    monkeypatch.chdir(tmp_path)
    for code, expected in _section_examples("## LangChain and LangGraph"):
        out = io.StringIO()
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
            warnings.simplefilter("always")
            exec(compile(code, f"{README}:LangChain", "exec"), {"__name__": "__readme__"})
        assert [] == [f"{w.category.__name__}: {w.message}" for w in caught]
        assert expected == out.getvalue()


def test_i22_trimmer_converts_each_window_message_once_and_hands_out_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window of each model call is the last one plus the step's messages: each message
    is built as a LangChain message once per trimmer (the window equals a fresh conversion,
    breadcrumb and tool messages included). A window message equal to one given is that very
    object (as LangGraph hands the model its state's messages); any other is a copy, never the
    trimmer's own, so a model or middleware that edits its input in place does not change the
    next window."""
    need("langchain_core")
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    import turnledger.integrations.langchain as lc

    built: list[int] = []
    convert = lc.to_langchain_messages

    def counting(history: Any) -> Any:
        out = convert(history)
        built.append(len(out))
        return out

    monkeypatch.setattr(lc, "to_langchain_messages", counting)
    with open_store(f"sqlite:///{tmp_path}/s.db") as store:
        trimmer = lc.TurnledgerTrimmer(store, session_id="t",
                                       profile=RuntimeProfile(max_context_tokens=400))
        messages: list[Any] = []
        for n in range(8):
            messages += [HumanMessage(f"q{n} " + PADDING, id=f"h{n}"),
                         AIMessage("", id=f"a{n}", tool_calls=[
                             {"id": f"c{n}", "name": "lookup", "args": {"q": n}},
                             {"id": f"d{n}", "name": "lookup", "args": {"q": [n]}}]),
                         ToolMessage(f"r{n}", tool_call_id=f"c{n}", id=f"t{n}"),
                         ToolMessage([{"type": "text", "text": f"s{n}"}], tool_call_id=f"d{n}",
                                     id=f"u{n}")]
            built.clear()
            window = trimmer.window(messages)
            assert sum(built) <= 1 + 4 + 1  # the last answer, the step's, a new breadcrumb
            assert convert(trimmer.session_for().chat_view()) == window
            assert all(a is b for a, b in zip(window[-4:], messages[-4:], strict=True))
            if window[0].content == BREADCRUMB_TEXT:  # not the caller's: a copy
                assert all(window[0] is not m for m in messages)
            window[-1].content.append({"type": "text", "text": "edited"})  # in place
            window[-3].tool_calls[0]["args"]["q"] = "edited"
            window[0].content = "edited"
            messages.append(AIMessage(f"answer {n}", id=f"b{n}"))
            trimmer.record(messages)
        assert BREADCRUMB_TEXT == trimmer.window(messages)[0].content
        assert convert(trimmer.session_for().chat_view()) == trimmer.window(messages)


def _checkpoints_of_a_run(middleware: Any) -> int:
    """How many checkpoints one run of three tool steps and an answer writes."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    model = _scripted([_call("c0"), _call("c1"), _call("c2"), AIMessage("done")])
    agent = create_agent(model, [_lookup_tool()], middleware=[middleware], checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "counted"}}
    agent.invoke({"messages": [HumanMessage("look three things up")]}, config)
    return len(list(saver.list(config)))


def test_i22_middleware_adds_one_checkpoint_a_run_not_one_a_step(tmp_path: Path) -> None:
    """The middleware records the reply inside nodes the graph runs anyway (the tool step, or
    the end of the run), not in a node of its own after each model call: a run of three tool
    steps writes one checkpoint more than the same agent with a do-nothing middleware (the
    end-of-run node), where an ``after_model`` node wrote five more (issue 22)."""
    need("langchain")
    from langchain.agents.middleware import wrap_model_call

    from turnledger.integrations.langchain_agents import TurnledgerMiddleware

    @wrap_model_call
    def passing(request: Any, handler: Any) -> Any:
        return handler(request)

    with open_store(f"sqlite:///{tmp_path / 'c.db'}") as store:
        ours = _checkpoints_of_a_run(TurnledgerMiddleware(store))
    assert _checkpoints_of_a_run(passing) + 1 == ours


def test_i22_middleware_records_the_reply_before_its_tools_run(shared_target: Target) -> None:
    """Each tool of a step (two at once here) finds the reply that called it at the end of the
    log, recorded once, as the graph holds it; when the run ends the log equals the graph."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    from turnledger.integrations.langchain_agents import TurnledgerMiddleware

    config: Any = {"configurable": {"thread_id": "seen-by-tools"}}
    seen: list[list[Any]] = []
    with open_store(shared_target.url) as store:
        middleware = TurnledgerMiddleware(store)

        @tool
        def lookup(q: str) -> str:
            """Look a value up."""
            seen.append(_log(middleware.session_for(config)))
            return f"value of {q}"

        model = _scripted([_call("c0", "c1"), _call("c2"), AIMessage("done")])
        agent = create_agent(model, [lookup], middleware=[middleware],
                             checkpointer=InMemorySaver())
        everything = agent.invoke({"messages": [HumanMessage("look up")]}, config)["messages"]
        assert 3 == len(seen)
        assert [2, 2, 5] == [len(log) for log in seen]  # the tool results: at the next call
        for log in seen:  # the reply that called the tool, once, as the graph holds it
            assert log == everything[: len(log)]
            assert isinstance(log[-1], AIMessage)
            assert log[-1].tool_calls
        assert everything == _log(middleware.session_for(config))


def _step_child(target: Target, checkpoints: Path, *args: str) -> Any:
    child = Path(__file__).with_name("langchain_step_child.py")
    return subprocess.run([sys.executable, str(child), target.url, str(checkpoints), *args],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("kept", ["all", "window"])
def test_i22_middleware_step_killed_in_its_tool_resumes_whole(
    shared_target: Target, tmp_path: Path, kept: str
) -> None:
    """A process killed while a tool runs (the graph checkpointed the reply) leaves the reply
    in the log as in the graph; a new process resumes the run from the checkpoint and the log
    equals the graph, the reply recorded once (the whole thread in the state, or the window:
    ``state_window``)."""
    need("langchain")
    need("langgraph.checkpoint.sqlite")
    flags = ("window",) if kept == "window" else ()
    crashed = _step_child(shared_target, tmp_path / "checkpoints.db", "crash", *flags)
    assert 17 == crashed.returncode, crashed.stderr
    with open_store(shared_target.url) as store:
        from turnledger.integrations.langchain_agents import TurnledgerMiddleware

        config: Any = {"configurable": {"thread_id": "crashed-step"}}
        log = _log(TurnledgerMiddleware(store).session_for(config))
        assert ["q-1", "reply-1"] == [m.id for m in log]
    resumed = _step_child(shared_target, tmp_path / "checkpoints.db", "resume", *flags)
    assert 0 == resumed.returncode, resumed.stderr
    out = json.loads(resumed.stdout)
    assert ["q-1", "reply-1", None, "reply-2"] == [
        m["data"]["id"] if m["type"] != "tool" else None for m in out["log"]]
    if kept == "all":
        assert out["state"] == out["log"]
    else:  # what the state holds is the log's, in its order, up to the last reply
        where = [out["log"].index(m) for m in out["state"]]
        assert where == sorted(where)
        assert out["log"][-1] == out["state"][-1]


def test_i22_state_window_keeps_the_window_in_the_graph_across_processes(
    shared_target: Target, tmp_path: Path
) -> None:
    """With ``state_window``, four turns (a tool step each), each in a new process on the same
    checkpointer and store: the graph state holds the model's last input and its reply, not
    the thread; the log holds every message; each process finds what is new by id."""
    need("langchain")
    need("langgraph.checkpoint.sqlite")
    outs = []
    for turn in range(4):
        done = _step_child(shared_target, tmp_path / "cp.db", "turn", str(turn), "window")
        assert 0 == done.returncode, done.stderr
        outs.append(json.loads(done.stdout))
    last = outs[-1]
    ids = [m["data"]["id"] if m["type"] != "tool" else m["data"]["tool_call_id"]
           for m in last["log"]]
    assert [x for t in range(4) for x in (f"q-{t}", f"call-{t}", f"c-{t}", f"answer-{t}")] == ids
    assert [*last["inputs"][-1], last["log"][-1]] == last["state"]  # the window and the reply
    assert BREADCRUMB_TEXT == last["state"][0]["data"]["content"]
    assert last["state"][1:] == last["log"][-4:]
    for out in outs:
        assert len(out["state"]) <= 5  # never more than a breadcrumb and one turn


def test_i22_state_window_shows_the_model_what_the_whole_state_would(tmp_path: Path) -> None:
    """The same conversation (trims between the tool steps of a run included) through the
    middleware with the whole thread in the graph state and with ``state_window`` (``invoke``
    and ``ainvoke``): the model gets the same inputs and the logs are the same; with
    ``state_window`` the state is the last input plus the reply, and a run writes no more
    checkpoints."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from turnledger.integrations.langchain_agents import TurnledgerMiddleware

    seen: dict[str, Any] = {}
    for way in ("whole", "window", "window, async"):
        window = way != "whole"
        script = [m for n in range(4) for m in (_call(f"k{n}"), AIMessage(f"answer {n}"))]
        loop = [_call("c0"), _call("c1", "c2"), *[_call(f"c{n}") for n in range(3, 7)]]
        model = _scripted([*script, *loop, AIMessage("done")])
        saver = InMemorySaver()
        config: Any = {"configurable": {"thread_id": "both-ways"}}
        with open_store(f"sqlite:///{tmp_path / f'{len(seen)}.db'}") as store:
            middleware = TurnledgerMiddleware(
                store, profile=RuntimeProfile(max_context_tokens=600), state_window=window)
            agent = create_agent(model, [_lookup_tool()], middleware=[middleware],
                                 checkpointer=saver)
            for n in range(5):
                question = f"question {n} {PADDING}" if n < 4 else "look everything up"
                turn = {"messages": [HumanMessage(question, id=f"q{n}")]}
                state = (asyncio.run(agent.ainvoke(turn, config)) if "async" in way
                         else agent.invoke(turn, config))
            log = _log(middleware.session_for(config))
            seen[way] = ([_no_ids(i) for i in model.inputs], _no_ids(log),
                            len(list(saver.list(config))))
            if window:
                assert [*model.inputs[-1], log[-1]] == state["messages"]
            else:
                assert log == state["messages"]
    assert seen["whole"] == seen["window"] == seen["window, async"]
    assert BREADCRUMB_TEXT == seen["window"][0][-1][0]["content"]  # trimmed: it is a window


def _no_ids(messages: list[Any]) -> list[dict[str, Any]]:
    """The messages without their ids (the graph gives tool results random ones)."""
    return [{"class": type(m).__name__, **m.model_dump(exclude={"id"})} for m in messages]


# --- issue 35 point 3: each model call's usage recorded against its window, on the
# framework's real loop (a scripted model that returns usage, no network); what is
# compared: tests/usage_windows.py.


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
        assert expected_usages(session, versions, billed) == usages(session)
        assert verify(store.backend).ok
