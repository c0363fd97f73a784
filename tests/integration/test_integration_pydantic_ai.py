"""pydantic-ai on turnledger sessions (issue 22): lossless conversion of every part kind, and a
real agent loop whose every model call sees whole turns (R24: trims between tool steps).

The model is pydantic-ai's own `FunctionModel` (no network); the tests run on SQLite and
PostgreSQL, and a new process restores the conversation.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.backends import SHARED_BACKENDS, fresh_target
from tests.extras import need
from tests.store_threads import note_writing_threads
from tests.usage_windows import SMALL, expected_usages, usages
from tests.window_builds import count_window_builds
from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.events import HistoryTrimmed
from turnledger.domain.messages import BREADCRUMB_TEXT
from turnledger.replay.audit import verify
from turnledger.store.session import open_store

CHILD = Path(__file__).with_name("pydantic_ai_child.py")
T0 = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def _pa() -> Any:
    need("pydantic_ai")
    from pydantic_ai import messages

    return messages


def _dump(messages: list[Any]) -> list[Any]:
    m = _pa()
    return m.ModelMessagesTypeAdapter.dump_python(messages, mode="json")  # type: ignore[no-any-return]


def _reloaded(messages: list[Any]) -> list[Any]:
    """``messages`` as pydantic-ai saves and loads them (a legacy part loads as its successor)."""
    adapter = _pa().ModelMessagesTypeAdapter
    return adapter.validate_json(adapter.dump_json(messages))  # type: ignore[no-any-return]


def _every_part_kind() -> list[Any]:
    """One message per row of the conversion table (ADR-0081), every part kind it maps."""
    m = _pa()
    png = m.BinaryContent(b"\x89PNG\r\n", media_type="image/png")
    return [
        m.ModelRequest(
            parts=[m.SystemPromptPart("be terse", timestamp=T0),
                   m.UserPromptPart("plain", timestamp=T0)],
            instructions="answer in French", run_id="r1", timestamp=T0),
        m.ModelRequest(parts=[m.UserPromptPart(
            ["look:", m.TextContent("typed", metadata={"k": 1}),
             m.ImageUrl("https://example.com/a.png"), png,
             m.DocumentUrl("https://example.com/a.pdf"), m.AudioUrl("https://example.com/a.mp3"),
             m.VideoUrl("https://example.com/a.mp4"),
             m.BinaryContent(b"%PDF-1.4", media_type="application/pdf"), m.CachePoint()],
            timestamp=T0)]),
        m.ModelResponse(
            parts=[m.ThinkingPart("hmm", signature="sig-1", provider_name="anthropic"),
                   m.ThinkingPart("unsigned"),
                   m.TextPart("I will look", id="t1", provider_details={"x": [1]}),
                   m.ToolCallPart("lookup", {"q": "x", "n": [1, 2]}, tool_call_id="c1"),
                   m.ToolCallPart("fetch", '{"url": "u"}', tool_call_id="c2"),
                   m.ToolCallPart("noargs", None, tool_call_id="c3"),
                   m.NativeToolCallPart("web_search", {"query": "q"}, tool_call_id="b1",
                                        provider_name="openai"),
                   m.NativeToolReturnPart("web_search", {"hits": 2}, tool_call_id="b1",
                                          provider_name="openai", timestamp=T0),
                   m.FilePart(png)],
            model_name="fake", timestamp=T0, finish_reason="tool_call",
            usage=m.RequestUsage(input_tokens=3, output_tokens=4)),
        m.ModelRequest(parts=[
            m.ToolReturnPart("lookup", "x is 1", tool_call_id="c1", timestamp=T0),
            m.ToolReturnPart("fetch", {"status": 200, "body": ["a"]}, tool_call_id="c2",
                             timestamp=T0, metadata={"raw": True}),
            m.RetryPromptPart("noargs needs q", tool_name="noargs", tool_call_id="c3",
                              timestamp=T0),
            m.UserPromptPart("and then?", timestamp=T0)]),
        m.ModelResponse(parts=[m.TextPart("not json")], timestamp=T0),
        m.ModelRequest(parts=[m.RetryPromptPart(
            [{"type": "json_invalid", "loc": [], "msg": "bad", "input": "not json"}],
            timestamp=T0)]),
        m.ModelResponse(parts=[m.CompactionPart("summary so far", provider_name="x")],
                        timestamp=T0),
        m.ModelResponse(parts=[], timestamp=T0),
    ]


@pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")
def test_i22_pydantic_ai_every_part_kind_round_trips() -> None:
    """Each part kind of the table goes to turnledger and back with the same JSON."""
    from turnledger.domain.messages import to_chat_messages
    from turnledger.integrations.pydantic_ai import from_pydantic_ai, to_pydantic_ai

    samples = _every_part_kind()
    for i, message in enumerate(samples):
        back = to_pydantic_ai(to_chat_messages(from_pydantic_ai([message])))
        assert _dump(_reloaded([message])) == _dump(back), f"row {i}"
    whole = to_pydantic_ai(to_chat_messages(from_pydantic_ai(samples)))
    assert _dump(_reloaded(samples)) == _dump(whole)


@pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")
def test_i22_pydantic_ai_parts_are_typed_for_the_rules() -> None:
    """Tool calls and returns are turnledger's own (so trims keep pairs); images are images."""
    from turnledger.domain.blocks import ImageBlock
    from turnledger.domain.messages import AssistantToolCalls, Chat, ToolResults
    from turnledger.integrations.pydantic_ai import from_pydantic_ai

    converted = from_pydantic_ai(_every_part_kind()[:4])
    kinds = [type(c).__name__ for c in converted]
    assert ["Chat", "Chat", "Chat", "AssistantToolCalls", "ToolResults", "Chat"] == kinds
    calls = converted[3]
    assert isinstance(calls, AssistantToolCalls)
    assert ["c1", "c2", "c3"] == [c.id for c in calls.tool_calls]
    results = converted[4]
    assert isinstance(results, ToolResults)
    assert ["c1", "c2", "c3"] == [r.tool_call_id for r in results.results]
    user = converted[2]
    assert isinstance(user, Chat)
    assert 2 == sum(isinstance(b, ImageBlock) for b in user.message.blocks)


def test_i22_pydantic_ai_unknown_part_kinds_are_refused_by_name() -> None:
    """A part kind with no turnledger form is refused, naming it; nothing is dropped."""
    m = _pa()
    from turnledger.integrations.pydantic_ai import from_pydantic_ai

    delta = m.ModelRequest(parts=[m.UserPromptPart("hi"),
                                  m.InstructionDeltaPart(id=None, content="more")])
    with pytest.raises(InvalidMessage, match=r"messages\[1\]\.parts\[1\].*'instruction-delta'"):
        from_pydantic_ai([m.ModelRequest(parts=[m.UserPromptPart("a")]), delta])
    with pytest.raises(InvalidMessage, match="not pydantic-ai messages"):
        from_pydantic_ai(["hello"])  # type: ignore[list-item]
    with pytest.raises(InvalidMessage, match="without parts"):
        from_pydantic_ai([m.ModelRequest(parts=[])])


def _agent(history: Any, steps_per_run: int, inputs: list[list[Any]]) -> Any:
    need("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def model(messages: list[Any], info: AgentInfo) -> Any:
        inputs.append(list(messages))
        done = sum(isinstance(p, ToolReturnPart) for p in messages[-1].parts)
        asked = [p for p in messages[-1].parts if getattr(p, "part_kind", "") == "user-prompt"]
        step = 0 if asked else int(messages[-2].parts[-1].tool_call_id.split("-")[-1]) + done
        if step < steps_per_run:
            call = ToolCallPart("lookup", {"q": step}, tool_call_id=f"call-{len(inputs)}-{step}")
            return ModelResponse(parts=[TextPart(f"step {step}"), call])
        return ModelResponse(parts=[TextPart(f"answer after {step} lookups")])

    agent = Agent(FunctionModel(model), system_prompt="You look things up.",
                  capabilities=[history])

    @agent.tool_plain
    def lookup(q: int) -> str:
        return f"result {q}: " + "x" * 200

    return agent


def _parts(messages: list[Any]) -> list[Any]:
    return [(raw["kind"], part) for raw in _dump(messages) for part in raw["parts"]]


def _check_inputs(inputs: list[list[Any]], everything: list[Any]) -> int:
    """Every model input is the system prompt, the breadcrumb when trimmed, then whole turns
    of the conversation (a suffix of it from a user prompt); returns how many were trimmed."""
    full = _parts(everything)
    system = [p for p in full if p[1]["part_kind"] == "system-prompt"]
    body = [p for p in full if p[1]["part_kind"] != "system-prompt"]
    trimmed = 0
    for n, given in enumerate(inputs):
        parts = _parts(given)
        assert system == parts[: len(system)], f"input {n}"
        rest = parts[len(system):]
        if rest[0][1].get("content") == BREADCRUMB_TEXT:
            trimmed += 1
            rest = rest[1:]
        assert "user-prompt" == rest[0][1]["part_kind"], f"input {n} starts mid-turn"
        start = body.index(rest[0])
        assert body[start: start + len(rest)] == rest, f"input {n} is not whole turns"
        called: set[str] = set()
        for _kind, part in rest:
            if part["part_kind"] == "tool-call":
                called.add(part["tool_call_id"])
            if part["part_kind"] == "tool-return":
                assert part["tool_call_id"] in called, f"input {n}: orphan tool return"
    return trimmed


@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_r24_pydantic_ai_agent_loop_trims_between_tool_steps(kind: str, tmp_path: Path) -> None:
    """Three runs of a 12-step tool loop on a small budget: every model call gets whole turns,
    the breadcrumb once older turns go, no orphan; the log keeps every message, the final
    answers included; a new process restores the same window."""
    from turnledger.integrations.pydantic_ai import TurnledgerHistory

    with fresh_target(kind, tmp_path) as target:
        with open_store(target.url) as store:
            history = TurnledgerHistory.open(store, "user-42",
                                             profile=RuntimeProfile(max_context_tokens=1500))
            inputs: list[list[Any]] = []
            agent = _agent(history, steps_per_run=12, inputs=inputs)
            everything: list[Any] = []
            for n in range(3):
                result = agent.run_sync(f"question {n}", message_history=history.messages())
                assert "answer after 12 lookups" == result.output
                everything += [m for m in result.all_messages() if m.run_id == result.run_id]
            assert 39 == len(inputs)
            trimmed = _check_inputs(inputs, everything)
            assert trimmed >= 10  # the budget is passed inside each run, not only between runs
            assert max(len(i) for i in inputs) < 40
            session = history.session
            assert any(isinstance(e, HistoryTrimmed) for e in session.events())
            recorded = session.conversation_view()
            assert "answer after 12 lookups" == recorded[-1].message.content  # type: ignore[union-attr]
            assert 3 * (1 + 12 * 2 + 1) + 1 == session.next_position  # every message, + system
            window = json.dumps(_dump(history.messages()), sort_keys=True)
            assert verify(store.backend).ok
        child = subprocess.run([sys.executable, str(CHILD), target.url, "user-42"],
                               capture_output=True, text=True, timeout=120, check=True)
        assert window == child.stdout.strip()




def test_i22_pydantic_ai_replies_that_carry_another_runs_id_are_recorded(tmp_path: Path) -> None:
    """A model may hand back a reply stamped with another run's id (pydantic-ai keeps a
    producer's ``run_id``; a model that reuses its reply objects does so): it is still this
    run's reply, recorded with its tool calls, and nothing is swept as an orphan."""
    need("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from turnledger.domain.events import OrphansSwept
    from turnledger.integrations.pydantic_ai import TurnledgerHistory

    def model(messages: list[Any], info: AgentInfo) -> Any:
        if isinstance(messages[-1].parts[-1], ToolReturnPart):
            return ModelResponse(parts=[TextPart("found it")], run_id="an-earlier-run")
        return ModelResponse(parts=[ToolCallPart("lookup", {"q": 1}, tool_call_id="c-1")],
                             run_id="an-earlier-run")

    with open_store(f"sqlite:///{tmp_path / 'h.db'}") as store:
        history = TurnledgerHistory.open(store, "c")
        agent = Agent(FunctionModel(model), capabilities=[history])

        @agent.tool_plain
        def lookup(q: int) -> str:
            return f"result {q}"

        assert "found it" == agent.run_sync("question", message_history=history.messages()).output
        session = history.session
        assert ["user", "assistant", "tool", "assistant"] == [
            m.role for m in session.chat_view()]
        assert "found it" == session.chat_view()[-1].content
        assert not [e for e in session.events() if isinstance(e, OrphansSwept)]


def test_i22_pydantic_ai_history_writes_the_store_outside_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """ADR-0043 with ADR-0092: the conversions of a model request run in the event loop's
    thread, every write of the store (each step's transaction, the run's last messages) in a
    worker thread, so no commit stalls the loop."""
    from turnledger.integrations.pydantic_ai import TurnledgerHistory

    with open_store(f"sqlite:///{tmp_path / 'h.db'}") as store:
        history = TurnledgerHistory.open(store, "c", profile=RuntimeProfile(max_context_tokens=900))
        given = history.messages()
        threads = note_writing_threads(monkeypatch, store)
        agent = _agent(history, steps_per_run=4, inputs=[])
        loop_thread = threading.get_ident()  # asyncio.run runs the loop in this thread
        for n in range(3):
            result = asyncio.run(agent.run(f"question {n}", message_history=given))
            given = result.all_messages()
        assert len(threads) >= 3 * 5  # each model request's transaction, each run's end
        assert loop_thread not in threads
        assert any(isinstance(e, HistoryTrimmed) for e in history.session.events())


@pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")
def test_i22_pydantic_ai_history_builds_each_window_message_once_and_hands_out_copies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The window of each model request is the last one plus the step's messages: each
    pydantic-ai message of it is built and validated once per history — a recorded message's
    by the check of its conversion — and the window equals a fresh `to_pydantic_ai` of the
    session's chat view, breadcrumb included; what is handed
    out is a copy, so pydantic-ai or a model editing a request (its parts, its instructions)
    never changes the next window."""
    m = _pa()
    import turnledger.integrations.pydantic_ai as pa

    with open_store("memory://") as store:
        history = pa.TurnledgerHistory.open(store, "c",
                                            profile=RuntimeProfile(max_context_tokens=600))
        built = count_window_builds(monkeypatch, pa, history, "_to_pydantic_ai")
        history.record(_every_part_kind())  # every part kind, grouped as the table says
        first = history.messages()  # the trims it takes are recorded: the chat view after
        assert _dump(pa.to_pydantic_ai(history.session.chat_view())) == _dump(first)
        messages: list[Any] = []
        for n in range(12):
            run = f"run-{n}"
            messages += [
                m.ModelRequest(parts=[m.UserPromptPart(f"q{n} " + "x" * 200, timestamp=T0)],
                               run_id=run),
                m.ModelResponse(parts=[m.TextPart(f"t{n}"), m.ToolCallPart(
                    "lookup", {"q": n}, tool_call_id=f"c{n}")], timestamp=T0, run_id=run),
                m.ModelRequest(parts=[m.ToolReturnPart("lookup", f"r{n}", tool_call_id=f"c{n}",
                                                       timestamp=T0)], run_id=run)]
            built.clear()
            window = history.window(messages, run)
            # Only a new breadcrumb's request: the step's three messages are the ones the
            # conversion's check validated (`BuiltOnce.seed`), never built again.
            assert sum(built) <= 1
            fresh = pa.to_pydantic_ai(history.session.chat_view())
            assert _dump(fresh) == _dump(window)
            window[-1].parts.append(m.UserPromptPart("edited"))  # in place
            window[-1].instructions = "edited"
            window[0].parts = []
            again = history.window(messages, run)
            assert _dump(fresh) == _dump(again)
        assert any(m.parts[-1].content == BREADCRUMB_TEXT for m in again
                   if isinstance(m, pa.ModelRequest) and m.parts)


def _untimed(messages: list[Any]) -> list[Any]:
    """The parts of ``messages`` without their timestamps (a plain user part's is "now")."""
    return [[{k: v for k, v in part.items() if k != "timestamp"} for part in message["parts"]]
            for message in _dump(messages)]


def test_i22_pydantic_ai_window_of_provider_messages_without_their_items_is_built_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A window whose tool messages do not carry their results (provider messages read from
    elsewhere: a result's tool name is its call's, in an earlier message) is not looked up
    by its messages: it is built whole, every time, as `to_pydantic_ai` builds it."""
    m = _pa()
    import turnledger.integrations.pydantic_ai as pa
    from turnledger.domain.messages import (
        ChatMessage,
        ToolCall,
        assistant_envelope,
        tool_envelope,
    )

    call = ToolCall("c1", "lookup", "{}")
    bare = [ChatMessage("user", "look it up"),
            ChatMessage("assistant", assistant_envelope("looking", [call])),
            ChatMessage("tool", tool_envelope("c1", "found")),
            ChatMessage("assistant", "done")]
    with open_store("memory://") as store:
        history = pa.TurnledgerHistory.open(store, "c")
        built = count_window_builds(monkeypatch, pa, history, "_to_pydantic_ai")
        for _ in range(2):
            window = history._to_pydantic_ai(bare)  # noqa: SLF001
            assert _untimed(pa.to_pydantic_ai(bare)) == _untimed(window)
            assert [4] == built  # all four messages, each time
            built.clear()
        returned = window[2].parts[0]
        assert isinstance(returned, m.ToolReturnPart)
        assert "lookup" == returned.tool_name  # its call's name, from the message before


# -- concurrency: many history objects of one conversation (issue 22) --


def _run_steps(worker: int, n: int) -> list[list[Any]]:
    """The messages a run adds before each model request and at its end, as pydantic-ai
    builds them: the question; the tool call with its result; the answer."""
    m = _pa()
    run = f"w{worker}-run{n}"
    call = f"w{worker}-{n}"
    return [
        [m.ModelRequest(parts=[m.UserPromptPart(f"w{worker} q{n}", timestamp=T0)], run_id=run)],
        [m.ModelResponse(parts=[m.ToolCallPart("lookup", {"q": call}, tool_call_id=call)],
                         timestamp=T0, run_id=run),
         m.ModelRequest(parts=[m.ToolReturnPart("lookup", f"found {call}", tool_call_id=call,
                                                timestamp=T0)], run_id=run)],
        [m.ModelResponse(parts=[m.TextPart(f"w{worker} answer {n}")], timestamp=T0, run_id=run)],
    ]


def _check_shared_log(store: Any, everyone: range, runs: int) -> None:
    from turnledger.domain.messages import AssistantToolCalls, Chat, ToolResults
    from turnledger.integrations.pydantic_ai import TurnledgerHistory
    from turnledger.replay.transcripts import record_of

    session = TurnledgerHistory.open(store, "shared").session
    log = list(record_of(session.events()))
    assert 4 * len(everyone) * runs == len(log)  # question, call, result, answer: each once
    texts = sorted(m.message.content for m in log if isinstance(m, Chat))
    assert sorted([f"w{w} q{n}" for w in everyone for n in range(runs)]
                  + [f"w{w} answer {n}" for w in everyone for n in range(runs)]) == texts
    calls = [i for i, m in enumerate(log) if isinstance(m, AssistantToolCalls)]
    assert len(everyone) * runs == len(calls)
    for i in calls:  # the step's call and its result, together (one transaction)
        result = log[i + 1]
        assert isinstance(result, ToolResults)
        assert [c.id for c in log[i].tool_calls] == [r.tool_call_id for r in result.results]
    assert any(isinstance(e, HistoryTrimmed) for e in session.events())
    assert verify(store.backend).ok


@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_i22_pydantic_ai_many_history_objects_of_one_conversation_all_land(
    kind: str, tmp_path: Path
) -> None:
    """Six threads (a store each) and six coroutines, each with its own history object of one
    conversation, record their runs step by step at once, as the capability does before each
    model request (``window``) on a budget that trims: every message lands once, each tool
    call next to its result, and verify passes."""
    import asyncio
    import threading

    from turnledger.integrations import off_loop
    from turnledger.integrations.pydantic_ai import TurnledgerHistory

    workers, runs = 6, 3
    profile = RuntimeProfile(max_context_tokens=300)

    def one_run(history: Any, worker: int, n: int) -> None:
        so_far: list[Any] = []
        for step in _run_steps(worker, n):
            so_far += step
            history.window(so_far, f"w{worker}-run{n}")

    with fresh_target(kind, tmp_path) as target:
        errors: list[BaseException] = []

        def thread_worker(worker: int) -> None:
            try:
                with open_store(target.url) as store:
                    for n in range(runs):  # a new history object per run, as a web worker
                        one_run(TurnledgerHistory.open(store, "shared", profile=profile),
                                worker, n)
            except BaseException as error:  # reported by the test
                errors.append(error)

        threads = [threading.Thread(target=thread_worker, args=(w,)) for w in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [] == errors

        async def coroutines(store: Any) -> None:
            histories = [TurnledgerHistory.open(store, "shared", profile=profile)
                         for _ in range(workers)]
            await asyncio.gather(*(off_loop(one_run, histories[w], workers + w, n)
                                   for w in range(workers) for n in range(runs)))

        with open_store(target.url) as store:
            asyncio.run(coroutines(store))
            _check_shared_log(store, range(2 * workers), runs)


_QUESTION: Any = None  # the question of the run a model call belongs to (a ContextVar)


def _concurrent_agent(history: Any, sent: list[list[Any]]) -> Any:
    """An agent whose model (pydantic-ai's FunctionModel, async) calls ``lookup`` once per
    question, then answers; it yields to the other runs inside each call. ``sent`` gets each
    model input whose last part is not its own run's (the question in `_QUESTION`)."""
    import asyncio
    import contextvars
    import random

    global _QUESTION
    if _QUESTION is None:
        _QUESTION = contextvars.ContextVar("question")

    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    async def model(messages: list[Any], info: AgentInfo) -> Any:
        await asyncio.sleep(random.random() / 200)
        # The run's own part is the last (pydantic-ai merges the request another writer's
        # tool return ends with into the next one).
        last = messages[-1].parts[-1]
        question = _QUESTION.get()
        if getattr(last, "content", None) not in (question, f"found {question}"):
            sent.append(list(messages))
        if isinstance(last, ToolReturnPart):
            return ModelResponse(parts=[TextPart(f"{last.content} answered")])
        question = str(last.content)
        return ModelResponse(parts=[TextPart(f"looking {question}"), ToolCallPart(
            "lookup", {"q": question}, tool_call_id=f"call-{question}")])

    agent = Agent(FunctionModel(model), capabilities=[history])

    @agent.tool_plain
    def lookup(q: str) -> str:
        return f"found {q}"

    return agent


@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_i22_pydantic_ai_concurrent_agent_runs_of_one_conversation(
    kind: str, tmp_path: Path
) -> None:
    """Real ``agent.run`` calls at once on one conversation: eight coroutines on one history
    object, and four threads (a store and a history object each) running ``run_sync``. The
    window a run's model gets ends with that run's current request (pydantic-ai refuses a
    history ending with another writer's reply), every run answers, every message lands once,
    each tool call next to its result, verify passes."""
    import asyncio
    import threading
    import time

    from turnledger.domain.messages import AssistantToolCalls, Chat, ToolResults
    from turnledger.integrations.pydantic_ai import TurnledgerHistory
    from turnledger.replay.transcripts import record_of

    need("pydantic_ai")

    def slowed(history: Any) -> Any:
        """The history with its window step slowed, as under load: the other runs record
        while it waits."""
        fit = history.session.fit_window

        def fit_window(**options: Any) -> Any:
            time.sleep(0.005)
            return fit(**options)

        history.session.fit_window = fit_window
        return history

    profile = RuntimeProfile(max_context_tokens=400)
    coroutines, threads_n, rounds = 12, 4, 3
    sent: list[list[Any]] = []

    with fresh_target(kind, tmp_path) as target:
        errors: list[BaseException] = []
        outputs: list[str] = []

        def thread_worker(worker: int) -> None:
            try:
                with open_store(target.url) as store:
                    history = slowed(TurnledgerHistory.open(store, "shared", profile=profile))
                    agent = _concurrent_agent(history, sent)
                    for n in range(rounds):
                        question = f"t{worker}-{n}"
                        _QUESTION.set(question)
                        outputs.append(agent.run_sync(question).output)
            except BaseException as error:  # reported by the test
                errors.append(error)

        with open_store(target.url) as store:
            history = slowed(TurnledgerHistory.open(store, "shared", profile=profile))
            agent = _concurrent_agent(history, sent)

            async def one(question: str) -> Any:
                _QUESTION.set(question)
                return await agent.run(question)

            async def everyone() -> list[Any]:
                return await asyncio.gather(*(one(f"c{w}-{n}")
                                              for w in range(coroutines) for n in range(rounds)))

            threads = [threading.Thread(target=thread_worker, args=(w,))
                       for w in range(threads_n)]
            for thread in threads:
                thread.start()
            results = asyncio.run(everyone())
            for thread in threads:
                thread.join()
            assert [] == errors
            outputs += [r.output for r in results]
            questions = [f"c{w}-{n}" for w in range(coroutines) for n in range(rounds)] + [
                f"t{w}-{n}" for w in range(threads_n) for n in range(rounds)]
            assert [] == sent  # every model input ended with its own run's request
            assert sorted(f"found {q} answered" for q in questions) == sorted(outputs)

            session = TurnledgerHistory.open(store, "shared").session
            log = list(record_of(session.events()))
            assert 4 * len(questions) == len(log)  # question, call, result, answer: each once
            texts = sorted(m.message.content for m in log if isinstance(m, Chat))
            assert sorted([*questions, *(f"found {q} answered" for q in questions)]) == texts
            calls = [i for i, m in enumerate(log) if isinstance(m, AssistantToolCalls)]
            assert len(questions) == len(calls)
            for i in calls:
                result = log[i + 1]
                assert isinstance(result, ToolResults)
                assert [c.id for c in log[i].tool_calls] == [  # type: ignore[attr-defined]
                    r.tool_call_id for r in result.results]
            assert verify(store.backend).ok


# --- issue 35 point 3: each model call's usage recorded against its window, on the
# framework's real loop (a scripted model that returns usage, no network); what is
# compared: tests/usage_windows.py.


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
        assert expected_usages(session, versions, billed) == usages(session)
        assert verify(store.backend).ok
