"""Google ADK on turnledger sessions (issue 22): lossless conversion of genai contents, and a
real ADK loop (Runner, InMemorySessionService, a scripted BaseLlm: no network) whose every
model call sees whole turns (R24: trims between tool steps), on SQLite and PostgreSQL, restored
in a new process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
import threading
from collections.abc import AsyncGenerator, Callable
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
from turnledger.domain.messages import BREADCRUMB_TEXT, AssistantToolCalls, ToolResults
from turnledger.replay.audit import verify
from turnledger.store.session import open_store

CHILD = Path(__file__).with_name("google_adk_child.py")


def _types() -> Any:
    need("google.adk")
    from google.genai import types

    return types


def _samples() -> list[Any]:
    t = _types()
    return [
        t.Content(role="user", parts=[
            t.Part(text="what is in these?"),
            t.Part(inline_data=t.Blob(mime_type="image/png", data=b"\x89PNG\xfb\xff")),
            t.Part(inline_data=t.Blob(mime_type="application/pdf", data=b"%PDF-1.4")),
            t.Part(file_data=t.FileData(file_uri="gs://b/a.mp3", mime_type="audio/mpeg"))]),
        t.Content(role="model", parts=[
            t.Part(text="let me think", thought=True, thought_signature=b"sig"),
            t.Part(text="I will look"),
            t.Part(function_call=t.FunctionCall(name="lookup", args={"q": "x", "n": [1]}),
                   thought_signature=b"s2"),
            t.Part(function_call=t.FunctionCall(name="lookup", args={"q": "y"})),
            t.Part(function_call=t.FunctionCall(id="own-id", name="fetch"))]),
        t.Content(role="user", parts=[
            t.Part(function_response=t.FunctionResponse(name="lookup", response={"r": 1})),
            t.Part(function_response=t.FunctionResponse(name="lookup", response={"r": 2})),
            t.Part(function_response=t.FunctionResponse(id="own-id", name="fetch",
                                                        response={"error": "404"}))]),
        t.Content(role="model", parts=[
            t.Part(executable_code=t.ExecutableCode(code="print(1)", language="PYTHON")),
            t.Part(code_execution_result=t.CodeExecutionResult(outcome="OUTCOME_OK",
                                                               output="1")),
            t.Part(text="done")]),
    ]


def test_i22_genai_contents_round_trip() -> None:
    """Every part kind goes to turnledger and back with the same JSON; calls without ids are
    paired with their responses by order and name."""
    from turnledger.domain.messages import to_chat_messages
    from turnledger.integrations.google_adk import from_genai, to_genai

    samples = _samples()
    converted = from_genai(samples)
    assert [c.model_dump(mode="json") for c in samples] == [
        c.model_dump(mode="json") for c in to_genai(to_chat_messages(converted))]
    calls, results = converted[1], converted[2]
    assert isinstance(calls, AssistantToolCalls)
    assert isinstance(results, ToolResults)
    assert [c.id for c in calls.tool_calls] == [r.tool_call_id for r in results.results]
    assert "own-id" == calls.tool_calls[2].id


def test_i22_genai_unknown_parts_and_roles_are_refused_by_name() -> None:
    """A part or a role with no turnledger form is refused, naming it."""
    t = _types()
    from turnledger.integrations.google_adk import from_genai

    odd = t.Content(role="user", parts=[t.Part(text="a"), t.Part(
        video_metadata=t.VideoMetadata(fps=2.0))])
    with pytest.raises(InvalidMessage, match=r"contents\[0\]\.parts\[1\].*video_metadata"):
        from_genai([odd])
    with pytest.raises(InvalidMessage, match="role 'system'"):
        from_genai([t.Content(role="system", parts=[t.Part(text="x")])])
    with pytest.raises(InvalidMessage, match=r"not a google\.genai Content"):
        from_genai(["hello"])


def _json(contents: list[Any]) -> list[Any]:
    return [c.model_dump(mode="json") for c in contents]


def _edit_in_place(contents: list[Any]) -> None:
    """What ADK or a model class may do to a request's contents: edit a part's fields, a
    call's or a response's fields, a blob's, and the parts list itself."""
    t = _types()
    for content in contents:
        for part in content.parts:
            if part.text is not None:
                part.text = "edited"
            if part.function_call is not None:
                part.function_call.args = {"edited": True}
                part.function_call.id = "edited"
            if part.function_response is not None:
                part.function_response.id = None
                part.function_response.response = {"edited": True}
            if part.inline_data is not None:
                part.inline_data.display_name = "edited"
        content.parts.append(t.Part(text="appended"))
        content.role = "model"


def test_i22_adk_callback_builds_each_window_content_once_and_hands_out_copies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The window of each model call is the last one plus the step's contents: each genai
    content of it is built and validated once per callback object — a recorded content's by
    the check of its conversion — (the window equals a fresh
    `to_genai` of the session's chat view, breadcrumb included); what is handed out is a copy,
    so ADK or a model class editing the request's contents in place never changes the next
    window."""
    t = _types()
    import turnledger.integrations.google_adk as adk

    with open_store("memory://") as store:
        callback = adk.TurnledgerCallback(store, profile=RuntimeProfile(max_context_tokens=600))
        built = count_window_builds(monkeypatch, adk, callback, "_genai_of")
        session = callback.session_for("adk-1")
        contents = _samples()  # every part kind
        first = callback.window(contents, "adk-1")
        assert _json(adk.to_genai(session.chat_view())) == _json(first)
        breadcrumbs = 0
        for n in range(12):
            contents += [
                t.Content(role="user", parts=[t.Part(text=f"q{n} " + "x" * 200)]),
                t.Content(role="model", parts=[t.Part(text=f"t{n}"), t.Part(
                    function_call=t.FunctionCall(name="lookup", args={"q": n}))]),
                t.Content(role="user", parts=[t.Part(function_response=t.FunctionResponse(
                    name="lookup", response={"result": f"r{n}"}))])]
            built.clear()
            window = callback.window(contents, "adk-1")
            # Only a new breadcrumb's content: the step's three contents are the ones the
            # conversion's check validated (`BuiltOnce.seed`), never built again.
            assert sum(built) <= 1
            fresh = adk.to_genai(session.chat_view())
            assert _json(fresh) == _json(window)
            _edit_in_place(window)
            again = callback.window(contents, "adk-1")  # nothing new
            assert _json(fresh) == _json(again)
            breadcrumbs += again[0].parts[0].text == BREADCRUMB_TEXT
        assert breadcrumbs > 0
        assert verify(store.backend).ok


def _scripted(steps: int, inputs: list[list[Any]]) -> Any:
    need("google.adk")
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse

    t = _types()

    class Scripted(BaseLlm):
        """A model that calls ``lookup`` ``steps`` times per question, then answers."""

        model: str = "scripted"

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            contents = list(llm_request.contents)
            inputs.append(contents)
            done = 0
            for content in reversed(contents):
                if any(p.text and p.text.startswith("question") for p in content.parts or []):
                    break
                done += sum(1 for p in content.parts or [] if p.function_response)
            if done < steps:
                call = t.Part(function_call=t.FunctionCall(name="lookup", args={"q": done}))
                parts = [t.Part(text=f"step {done}"), call]
            else:
                parts = [t.Part(text=f"answer after {done} lookups")]
            yield LlmResponse(content=t.Content(role="model", parts=parts))

    return Scripted()


def _parts(contents: list[Any]) -> list[Any]:
    out = []
    for content in contents:
        for part in content.model_dump(mode="json", exclude_none=True)["parts"]:
            for key in ("function_call", "function_response"):
                if key in part:
                    part[key].pop("id", None)  # ADK strips them before the model call
            out.append((content.role, part))
    return out


async def _run(callback: Any, questions: int, steps: int, inputs: list[list[Any]],
               *, include_contents: str = "default",
               on_question: Callable[[int], None] | None = None,
               on_lookup: Callable[[int], None] | None = None) -> list[Any]:
    from google.adk.agents import LlmAgent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService

    t = _types()

    def lookup(q: int) -> str:
        """Look ``q`` up."""
        if on_lookup is not None:
            on_lookup(q)
        return f"result {q}: " + "x" * 200

    agent = LlmAgent(name="looker", model=_scripted(steps, inputs), instruction="Look up.",
                     tools=[lookup], before_model_callback=callback,
                     after_model_callback=callback.after_model,
                     include_contents=include_contents)
    service = InMemorySessionService()  # type: ignore[no-untyped-call]
    runner = Runner(agent=agent, app_name="app", session_service=service)
    await service.create_session(app_name="app", user_id="u", session_id="adk-1")
    for n in range(questions):
        if on_question is not None:
            on_question(n)
        message = t.Content(role="user", parts=[t.Part(text=f"question {n}")])
        async for _ in runner.run_async(user_id="u", session_id="adk-1", new_message=message):
            pass
    session = await service.get_session(app_name="app", user_id="u", session_id="adk-1")
    assert session is not None
    return [e.content for e in session.events if e.content is not None]


def _check_inputs(inputs: list[list[Any]], everything: list[Any]) -> int:
    """Each model input is the breadcrumb when trimmed, then a suffix of the conversation that
    starts at a question (whole turns), with no response before its call."""
    full = _parts(everything)
    trimmed = 0
    for n, given in enumerate(inputs):
        parts = _parts(given)
        if parts[0][1].get("text") == BREADCRUMB_TEXT:
            trimmed += 1
            parts = parts[1:]
        assert parts[0][1].get("text", "").startswith("question"), f"input {n} mid-turn"
        start = full.index(parts[0])
        assert full[start: start + len(parts)] == parts, f"input {n} is not whole turns"
        calls = 0
        for _role, part in parts:
            calls += "function_call" in part
            calls -= "function_response" in part
            assert calls >= 0, f"input {n}: a response without its call"
    return trimmed


@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_r24_adk_agent_loop_trims_between_tool_steps(kind: str, tmp_path: Path) -> None:
    """Three questions of a 10-step tool loop on a small budget: every model call gets whole
    turns, the breadcrumb once older turns go; the trims are recorded; a new process (and a new
    ADK session) restores the same window."""
    from turnledger.integrations.google_adk import TurnledgerCallback

    with fresh_target(kind, tmp_path) as target:
        with open_store(target.url) as store:
            callback = TurnledgerCallback(store, profile=RuntimeProfile(max_context_tokens=1200))
            inputs: list[list[Any]] = []
            everything = asyncio.run(_run(callback, questions=3, steps=10, inputs=inputs))
            assert 33 == len(inputs)
            assert _check_inputs(inputs, everything) >= 10
            session = callback.session_for("adk-1")
            assert any(isinstance(e, HistoryTrimmed) for e in session.events())
            assert 3 * 22 == session.next_position  # the last answer included
            window = json.dumps([c.model_dump(mode="json") for c in callback.contents("adk-1")])
            assert verify(store.backend).ok
        child = subprocess.run([sys.executable, str(CHILD), target.url, "adk-1"],
                               capture_output=True, text=True, timeout=120, check=True)
        assert window == child.stdout.strip()


def test_i22_adk_callback_writes_the_store_outside_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """ADR-0043 with ADR-0092: the callback builds the window's contents in the event loop's
    thread and records in a worker thread, so no commit stalls the loop."""
    from turnledger.integrations.google_adk import TurnledgerCallback

    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as store:
        callback = TurnledgerCallback(store, profile=RuntimeProfile(max_context_tokens=1200))
        callback.session_for("adk-1")  # started here, outside the loop
        threads = note_writing_threads(monkeypatch, store)
        loop_thread = threading.get_ident()  # asyncio.run runs the loop in this thread
        asyncio.run(_run(callback, questions=3, steps=4, inputs=[]))
        assert len(threads) >= 3 * 5  # each model call's transaction, each final answer
        assert loop_thread not in threads
        assert any(isinstance(e, HistoryTrimmed) for e in callback.session_for("adk-1").events())


class _Swappable:
    """The agent's model callbacks, delegating to ``current`` (replaced mid-run, as a process
    restart would) and noting the contents ADK itself put in each request."""

    def __init__(self, current: Any) -> None:
        self.current = current
        self.given: list[list[Any]] = []

    async def __call__(self, callback_context: Any, llm_request: Any) -> Any:
        self.given.append([c.model_copy(deep=True) for c in llm_request.contents])
        return await self.current(callback_context, llm_request)

    async def after_model(self, callback_context: Any, llm_response: Any) -> Any:
        return await self.current.after_model(callback_context, llm_response)


@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_r24_adk_include_contents_none_turnledger_supplies_the_history(
    kind: str, tmp_path: Path
) -> None:
    """``LlmAgent(include_contents="none")``: ADK puts only the current turn in each request
    and turnledger's window supplies the history. Four questions of a 10-step tool loop on a
    small budget, a new callback object (as after a process restart) taking over mid-turn and
    another at a turn's start: every model input is whole turns of the log (the breadcrumb when
    trimmed, no response without its call) ending with the current turn as ADK gave it; the
    log holds every content of ADK's session exactly once; a new process restores the same
    window."""
    from turnledger.integrations.google_adk import TurnledgerCallback, to_genai
    from turnledger.replay.transcripts import record_of

    profile = RuntimeProfile(max_context_tokens=1200)
    with fresh_target(kind, tmp_path) as target:
        with contextlib.ExitStack() as stores:
            objects: list[Any] = []

            def restarted() -> Any:
                store = stores.enter_context(open_store(target.url))
                objects.append(TurnledgerCallback(store, profile=profile))
                return objects[-1]

            swappable = _Swappable(restarted())
            asked: list[int] = []

            def on_question(n: int) -> None:
                asked.append(n)
                if n == 3:  # a new object at a turn's start
                    swappable.current = restarted()

            def on_lookup(q: int) -> None:
                if asked[-1] == 1 and q == 4:  # a new object mid-turn: its first call
                    swappable.current = restarted()  # holds the question and 5 steps

            inputs: list[list[Any]] = []
            everything = asyncio.run(_run(swappable, questions=4, steps=10, inputs=inputs,
                                          include_contents="none", on_question=on_question,
                                          on_lookup=on_lookup))
            assert 44 == len(inputs) == len(swappable.given)
            assert 3 == len(objects)
            assert _check_inputs(inputs, everything) >= 10
            full = _parts(everything)
            for n, (given, adk) in enumerate(zip(inputs, swappable.given, strict=True)):
                current = _parts(adk)  # ADK's request: this turn only, from its question
                assert current[0][1]["text"] == f"question {n // 11}", f"input {n}"
                assert 1 + 2 * (n % 11) == len(adk), f"input {n}: not the current turn"
                assert _parts(given)[-len(current):] == current, f"input {n}: not at the end"
                assert len(given) > len(adk) or n < 11  # the history came from turnledger
            session = swappable.current.session_for("adk-1")
            log = list(record_of(session.events()))
            assert full == _parts(to_genai(log))  # every content once, in order
            assert 4 * 22 == session.next_position
            assert any(isinstance(e, HistoryTrimmed) for e in session.events())
            window = json.dumps([c.model_dump(mode="json")
                                 for c in swappable.current.contents("adk-1")])
            assert verify(stores.enter_context(open_store(target.url)).backend).ok
        child = subprocess.run([sys.executable, str(CHILD), target.url, "adk-1"],
                               capture_output=True, text=True, timeout=120, check=True)
        assert window == child.stdout.strip()


def _flaky(empty: frozenset[int]) -> Any:
    """A model that answers ``answer N`` to its Nth call, with no parts to the calls in
    ``empty`` (a turn that leaves no reply to record)."""
    need("google.adk")
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse

    t = _types()

    class Flaky(BaseLlm):
        model: str = "flaky"
        calls: int = 0

        async def generate_content_async(
            self, llm_request: Any, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            self.calls += 1
            parts = [] if self.calls in empty else [t.Part(text=f"answer {self.calls}")]
            yield LlmResponse(content=t.Content(role="model", parts=parts))

    return Flaky()


async def _ask(callback: Any, model: Any, texts: list[str], *, include_contents: str,
               before_each: Callable[[], None] | None = None) -> list[Any]:
    """Ask ``texts`` one invocation each on an in-memory ADK session; ADK's contents after."""
    from google.adk.agents import LlmAgent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService

    t = _types()
    agent = LlmAgent(name="a", model=model, before_model_callback=callback,
                     after_model_callback=callback.after_model, include_contents=include_contents)
    service = InMemorySessionService()  # type: ignore[no-untyped-call]
    runner = Runner(agent=agent, app_name="app", session_service=service)
    await service.create_session(app_name="app", user_id="u", session_id="adk-1")
    for text in texts:
        if before_each is not None:
            before_each()
        message = t.Content(role="user", parts=[t.Part(text=text)])
        async for _ in runner.run_async(user_id="u", session_id="adk-1", new_message=message):
            pass
    session = await service.get_session(app_name="app", user_id="u", session_id="adk-1")
    assert session is not None
    return [e.content for e in session.events if e.content is not None and e.content.parts]


@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_r24_adk_include_contents_none_same_question_after_a_turn_with_no_reply(
    kind: str, tmp_path: Path
) -> None:
    """``include_contents="none"``: a turn whose model call left no reply to record (an empty
    reply), then the same question asked again: ADK's request is that question alone, equal to
    the last content the callback saw; being a new invocation's, it is recorded (as ADK's
    session holds it twice), and the next turns are recorded once."""
    from turnledger.integrations.google_adk import TurnledgerCallback, to_genai
    from turnledger.replay.transcripts import record_of

    with fresh_target(kind, tmp_path) as target, open_store(target.url) as store:
        callback = TurnledgerCallback(store)
        everything = asyncio.run(_ask(callback, _flaky(frozenset({1})),
                                      ["hello", "hello", "bye", "bye"], include_contents="none"))
        log = list(record_of(callback.session_for("adk-1").events()))
        assert _parts(everything) == _parts(to_genai(log))
        assert ["hello", "hello", "answer 2", "bye", "answer 3", "bye", "answer 4"] == [
            p.text for c in everything for p in c.parts]
        assert verify(store.backend).ok


@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_r24_adk_new_callback_object_same_question_after_a_turn_with_no_reply(
    kind: str, tmp_path: Path
) -> None:
    """ADK's default contents, a new callback object for every question (a process restarted
    between turns): a turn whose model call left no reply to record, then the same question
    asked again. ADK's contents end ``hello, hello``, the record ``hello``: lined up, the
    record ends at the first, so the second is recorded; the log equals ADK's contents."""
    from turnledger.integrations.google_adk import TurnledgerCallback, to_genai
    from turnledger.replay.transcripts import record_of

    with fresh_target(kind, tmp_path) as target, open_store(target.url) as store:
        swappable = _Swappable(None)

        def restart() -> None:
            swappable.current = TurnledgerCallback(store)  # a new process, say

        everything = asyncio.run(_ask(swappable, _flaky(frozenset({1, 3})),
                                      ["hello", "hello", "bye", "bye"],
                                      include_contents="default", before_each=restart))
        assert ["hello", "hello", "answer 2", "bye", "bye", "answer 4"] == [
            p.text for c in everything for p in c.parts]
        log = list(record_of(TurnledgerCallback(store).session_for("adk-1").events()))
        assert _parts(everything) == _parts(to_genai(log))
        assert verify(store.backend).ok


def test_r24_adk_new_contents_lines_up_the_record_before_its_newest_content() -> None:
    """A new callback object finds where a long record ends in ADK's contents by lining up
    its last contents, not by its newest content alone: ``..., A, Q`` recorded against
    contents ``..., A, Q, Q`` ends at the first ``Q`` (the second is a question asked again);
    a record that only partly lines up ends at the place that lines up most."""
    from turnledger.integrations.google_adk import _new_contents

    t = _types()

    def said(role: str, text: str) -> Any:
        return t.Content(role=role, parts=[t.Part(text=text)])

    turns = [said(role, f"{role} {n}") for n in range(6) for role in ("user", "model")]
    q = said("user", "again?")
    recorded = [*turns, q]  # longer than what is lined up (8)
    assert len(recorded) == _new_contents([*turns, q], None, recorded)  # nothing new
    assert len(recorded) == _new_contents([*turns, q, q], None, recorded)
    assert len(recorded) == _new_contents([*turns, q, said("model", "x"), q], None, recorded)
    other = [said("user", "elsewhere"), q]  # lines up one content only: the last place
    assert 2 == _new_contents([q, q], None, other)
    assert 0 == _new_contents([said("user", "new")], None, recorded)  # nothing lines up


# -- concurrency: many callback objects of one conversation (issue 22) --


@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_i22_adk_many_callback_objects_of_one_conversation_all_land(
    kind: str, tmp_path: Path
) -> None:
    """Six threads (a store each) and six coroutines, each with its own callback object of one
    conversation (``session_id``), record their invocations step by step at once, as ADK calls
    the callbacks (contents before each model call, the reply after it): every message lands
    once, each function call next to its response, and verify passes."""
    import threading

    from turnledger.domain.messages import Chat
    from turnledger.integrations import off_loop
    from turnledger.integrations.google_adk import TurnledgerCallback
    from turnledger.replay.transcripts import record_of

    t = _types()
    workers, runs = 6, 3
    profile = RuntimeProfile(max_context_tokens=300)

    def one_worker(callback: Any, worker: int) -> None:
        contents: list[Any] = []  # this worker's ADK session: its own events
        for n in range(runs):
            contents.append(t.Content(role="user", parts=[t.Part(text=f"w{worker} q{n}")]))
            callback.window(contents, f"adk-{worker}")
            call = t.Content(role="model", parts=[t.Part(function_call=t.FunctionCall(
                id=f"w{worker}-{n}", name="lookup", args={"q": n}))])
            callback.record_reply(call, f"adk-{worker}")
            contents += [call, t.Content(role="user", parts=[t.Part(
                function_response=t.FunctionResponse(id=f"w{worker}-{n}", name="lookup",
                                                     response={"result": n}))])]
            callback.window(contents, f"adk-{worker}")
            answer = t.Content(role="model", parts=[t.Part(text=f"w{worker} answer {n}")])
            callback.record_reply(answer, f"adk-{worker}")
            contents.append(answer)

    with fresh_target(kind, tmp_path) as target:
        errors: list[BaseException] = []

        def thread_worker(worker: int) -> None:
            try:
                with open_store(target.url) as store:
                    one_worker(TurnledgerCallback(store, profile=profile, session_id="shared"),
                               worker)
            except BaseException as error:  # reported by the test
                errors.append(error)

        threads = [threading.Thread(target=thread_worker, args=(w,)) for w in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [] == errors

        async def coroutines(store: Any) -> None:
            await asyncio.gather(*(
                off_loop(one_worker, TurnledgerCallback(store, profile=profile,
                                                        session_id="shared"), workers + w)
                for w in range(workers)))

        with open_store(target.url) as store:
            asyncio.run(coroutines(store))
            session = TurnledgerCallback(store, session_id="shared").session_for()
            log = list(record_of(session.events()))
            everyone = range(2 * workers)
            texts = sorted(m.message.content for m in log if isinstance(m, Chat))
            assert sorted([f"w{w} q{n}" for w in everyone for n in range(runs)]
                          + [f"w{w} answer {n}" for w in everyone for n in range(runs)]) == texts
            assert 4 * len(everyone) * runs == len(log)  # each message once
            for i, message in enumerate(log):  # a call next to its response
                if isinstance(message, AssistantToolCalls):
                    result = log[i + 1]
                    assert isinstance(result, ToolResults)
                    assert [c.id for c in message.tool_calls] == [
                        r.tool_call_id for r in result.results]
            assert any(isinstance(e, HistoryTrimmed) for e in session.events())
            assert verify(store.backend).ok


@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_i22_adk_new_callback_object_records_nothing_twice(kind: str, tmp_path: Path) -> None:
    """A callback object that has seen nothing of a conversation (a new process) records only
    what is new: with a fresh ADK session continuing it (contents: the new question), and with
    the ADK session restored (its whole contents, then the new question)."""
    from turnledger.integrations.google_adk import TurnledgerCallback
    from turnledger.replay.transcripts import record_of

    t = _types()

    def question(n: int) -> Any:
        return t.Content(role="user", parts=[t.Part(text=f"q{n}")])

    def answer(n: int) -> Any:
        return t.Content(role="model", parts=[t.Part(text=f"a{n}")])

    with fresh_target(kind, tmp_path) as target:
        with open_store(target.url) as store:
            first = TurnledgerCallback(store, session_id="c")
            contents = [question(0)]
            first.window(contents, "adk-1")
            first.record_reply(answer(0), "adk-1")
            contents.append(answer(0))
        with open_store(target.url) as store:  # a new process, a fresh ADK session
            TurnledgerCallback(store, session_id="c").window([question(1)], "adk-2")
        with open_store(target.url) as store:  # a new process, the ADK session restored
            restored = TurnledgerCallback(store, session_id="c")
            restored.window([*contents, question(2)], "adk-1")
            restored.record_reply(answer(2), "adk-1")
            restored.window([*contents, question(2), answer(2), question(3)], "adk-1")
            log = list(record_of(restored.session_for().events()))
            assert ["q0", "a0", "q1", "q2", "a2", "q3"] == [
                m.message.content for m in log]  # type: ignore[union-attr]
            assert verify(store.backend).ok


# --- issue 35 point 3: each model call's usage recorded against its window, on the
# framework's real loop (a scripted model that returns usage, no network); what is
# compared: tests/usage_windows.py.


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
        assert expected_usages(session, versions, billed) == usages(session)
        assert any("more than the 5 input tokens" in r.getMessage() for r in caplog.records)
        assert verify(store.backend).ok
