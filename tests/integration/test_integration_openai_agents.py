"""Issue 22, the OpenAI Agents SDK: the bugs a user hits at once, trims between the tool steps
of one run (R24), and concurrency the SDK's users report.

Real ``openai-agents`` (its own ``agents.testing.ScriptedModel``, no network), real stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.backends import SHARED_BACKENDS, Target, fresh_target
from tests.docs_text import section as docs_section
from tests.extras import need
from tests.usage_windows import SMALL, expected_usages, usages
from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.decider import evolve
from turnledger.domain.events import HistoryTrimmed, MessageAppended
from turnledger.domain.messages import BREADCRUMB_TEXT
from turnledger.domain.providers import to_openai_responses
from turnledger.domain.state import SessionState
from turnledger.replay.audit import verify
from turnledger.store.session import open_store

os.environ.setdefault("OPENAI_API_KEY", "sk-test-no-network")

BREADCRUMB = {"role": "user", "content": BREADCRUMB_TEXT}
CHILD = Path(__file__).with_name("agents_child.py")
README, _ = docs_section("## OpenAI Agents SDK sessions")  # docs/integrations/openai-agents.md

SIX: list[dict[str, Any]] = [
    {"role": "user", "content": "hello"},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    {"role": "assistant", "content": "hi"},
    {"role": "user", "content": "again"},
    {"role": "assistant", "content": "sure"},
]


@pytest.fixture(params=SHARED_BACKENDS)
def shared_target(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    with fresh_target(request.param, tmp_path) as fresh:
        yield fresh


def _sdk() -> Any:
    agents = need("agents")
    agents.set_tracing_disabled(True)
    return agents


# -- 1. the bugs a user hits at once --


def test_i22_get_items_limit_larger_than_the_history_returns_everything(tmp_path: Path) -> None:
    """limit=10 over 6 items returns the 6 (it returned 4), as SQLiteSession does."""
    agents = _sdk()
    from turnledger.integrations.openai_agents import TurnledgerSession

    async def main() -> None:
        with open_store(f"sqlite:///{tmp_path / 'tl.db'}") as store:
            ours, theirs = TurnledgerSession("s", store), agents.SQLiteSession("s")
            await ours.add_items(SIX)
            await theirs.add_items(SIX)
            for limit in (5, 6, 7, 10, 1000):
                assert await theirs.get_items(limit) == await ours.get_items(limit)
            assert SIX == await ours.get_items(10)

    asyncio.run(main())


def test_i22_the_sdk_reconciles_a_session_write_that_failed(tmp_path: Path) -> None:
    """A resumed run whose tool-output write failed is settled by the SDK's recovery (it read
    the tail with a limit larger than the history and raised 'Cannot reconcile')."""
    agents = _sdk()
    from agents.decorators import tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from turnledger.integrations.openai_agents import TurnledgerSession

    class FailingOnce(TurnledgerSession):
        failed = False

        async def add_items(self, items: list[Any]) -> None:
            if not self.failed and any(i.get("type") == "function_call_output" for i in items):
                self.failed = True
                raise RuntimeError("synthetic append failure")
            await super().add_items(items)

    @tool(needs_approval=True)
    async def approved_tool() -> str:
        return "approved"

    async def main() -> None:
        model = ScriptedModel([[function_call("approved_tool", {}, call_id="a")],
                               [assistant_message("done")]])
        agent = agents.Agent(name="x", model=model, tools=[approved_tool])
        with open_store(f"sqlite:///{tmp_path / 'tl.db'}") as store:
            session = FailingOnce("r", store)
            interrupted = await agents.Runner.run(agent, "go", session=session)
            state = interrupted.to_state()
            state.approve(interrupted.interruptions[0])
            with pytest.raises(RuntimeError, match="synthetic append failure"):
                await agents.Runner.run(agent, state, session=session)
            resumed = await agents.Runner.run(agent, state, session=session)
            assert "done" == resumed.final_output
            kinds = [i.get("type", i.get("role")) for i in await session.get_items()]
            assert ["user", "function_call", "function_call_output", "message"] == kinds

    asyncio.run(main())


def test_i22_session_settings_take_a_dict_and_refuse_a_mistyped_key(tmp_path: Path) -> None:
    """session_settings={"limit": 2} is the SDK's SessionSettings (Runner.run raised
    AttributeError); {"limitt": 1} is refused, naming the key, as the SDK's sessions do."""
    agents = _sdk()
    from agents.testing import ScriptedModel, assistant_message

    from turnledger.integrations.openai_agents import InvalidSessionSettings, TurnledgerSession

    async def main() -> None:
        with open_store(f"sqlite:///{tmp_path / 'tl.db'}") as store:
            session = TurnledgerSession("s", store, session_settings={"limit": 2})
            assert agents.SessionSettings(limit=2) == session.session_settings
            assert agents.SessionSettings() == TurnledgerSession("t", store).session_settings
            await session.add_items(SIX)
            assert SIX[-2:] == await session.get_items()
            assert SIX == await session.get_items(-1)
            model = ScriptedModel([[assistant_message("fine")]])
            agent = agents.Agent(name="x", model=model)
            result = await agents.Runner.run(agent, "next", session=session)
            assert "fine" == result.final_output
            assert model.last_call is not None
            assert [*SIX[-2:], {"role": "user", "content": "next"}] == model.last_call.input
            with pytest.raises(InvalidSessionSettings, match="Unknown session settings: limitt"):
                TurnledgerSession("u", store, session_settings={"limitt": 1})
            with pytest.raises(TypeError, match=r"'s'.*dict of: limit"):
                TurnledgerSession("s", store, session_settings=3)

    asyncio.run(main())


def test_i22_close_ends_the_object_like_sqlite_session_closes(tmp_path: Path) -> None:
    """close() (awaitable or not, idempotent) ends the object: any use raises SessionClosed, a
    RuntimeError as SQLiteSession's; the history stays for a new object."""
    _sdk()
    from turnledger.integrations.openai_agents import SessionClosed, TurnledgerSession

    async def main() -> None:
        with open_store(f"sqlite:///{tmp_path / 'tl.db'}") as store:
            session = TurnledgerSession("s", store)
            await session.add_items(SIX)
            session.close()
            await session.close()
            for use in (session.get_items(), session.add_items([]), session.pop_item(),
                        session.clear_session(), session.add_items(SIX[:1])):
                with pytest.raises(SessionClosed, match="'s' is closed"):
                    await use
            with pytest.raises(RuntimeError, match="closed"):
                session.items()
            assert SIX == await TurnledgerSession("s", store).get_items()

    asyncio.run(main())


# -- 2. trims between the tool steps of one run (R24) --

STEPS = 24  # tool steps of the long run: past the budget many times over
RESULT = "r" * 400  # ~100 tokens per tool output


def _check_whole_turns_and_pairs(window: list[dict[str, Any]]) -> None:
    body = window[1:] if window and window[0] == BREADCRUMB else window
    assert BREADCRUMB not in body  # at most one breadcrumb, first (R31)
    assert "user" == body[0].get("role")  # whole turns: the window starts a turn (R3)
    calls = [i["call_id"] for i in body if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in body if i.get("type") == "function_call_output"]
    assert calls == outputs  # every tool pair whole (R35)


def test_r24_i22_trims_between_the_tool_steps_of_one_run_and_records_them(
    shared_target: Target,
) -> None:
    """One Runner.run whose tool loop passes the budget: before every model call the window is
    trimmed to whole turns after a breadcrumb, tool pairs whole; each model input is what the
    log says the window was at that call; a new process restores the history intact."""
    agents = _sdk()
    from agents.decorators import tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from turnledger.integrations.openai_agents import TurnledgerSession

    @tool
    async def lookup(q: int) -> str:
        return f"{q}:{RESULT}"

    profile = RuntimeProfile(max_context_tokens=2000)
    with open_store(shared_target.url) as store:
        notices: list[HistoryTrimmed] = []
        store.subscribe(notices.append)
        session = TurnledgerSession("loop-1", store, profile=profile)
        versions: list[int] = []

        async def recorded_filter(data: Any) -> Any:
            window = await session.call_model_input_filter(data)
            versions.append(session.session.version)  # the log's state for this call
            return window

        config = agents.RunConfig(call_model_input_filter=recorded_filter)

        def script(run: int, steps: int) -> list[Any]:
            return [*[[function_call("lookup", {"q": run * 100 + k}, call_id=f"c{run}_{k}")]
                      for k in range(steps)], [assistant_message(f"answer {run}")]]

        async def main() -> ScriptedModel:
            for run in range(4):  # four short turns of history first
                model = ScriptedModel(script(run, 2))
                agent = agents.Agent(name="x", model=model, tools=[lookup])
                await agents.Runner.run(agent, f"question {run}", session=session,
                                        run_config=config)
            model = ScriptedModel(script(4, STEPS))
            agent = agents.Agent(name="x", model=model, tools=[lookup])
            result = await agents.Runner.run(agent, "the long one", session=session,
                                             run_config=config, max_turns=STEPS + 2)
            assert "answer 4" == result.final_output
            return model

        model = asyncio.run(main())
        inputs = [list(call.input) for call in model.calls]
        assert STEPS + 1 == len(inputs)
        for window in inputs:
            _check_whole_turns_and_pairs(window)
        # The tool loop passed the budget: older turns went between its steps, until only the
        # long turn was left (R6), and each trim was announced (R32).
        firsts = [w[1]["content"] if w[0] == BREADCRUMB else w[0]["content"] for w in inputs]
        order = [*(f"question {run}" for run in range(4)), "the long one"]
        assert order == sorted(set(firsts), key=order.index)  # each older turn went, in order
        assert firsts == sorted(firsts, key=order.index)  # and never came back (DECISIONS 4)
        assert "question 0" == firsts[0]
        assert BREADCRUMB != inputs[0][0]
        assert [BREADCRUMB, {"role": "user", "content": "the long one"}] == inputs[-1][:2]
        assert 4 <= len(notices)
        assert all("token_budget" == n.reason for n in notices)
        # Each model input is the window the log rebuilds at the version of that call (E4, E6).
        events = session.session.events()
        for window, version in zip(inputs[-len(versions):], versions[-len(inputs):], strict=True):
            state = SessionState()
            for event in events[:version]:
                evolve(state, event)
            assert to_openai_responses(state.chat_view()) == window
        # The log keeps every item of every run, in order, each once.
        appended = [to_openai_responses([e.message])[0] for e in events
                    if isinstance(e, MessageAppended)]
        assert 4 * (1 + 2 * 2 + 1) + 1 + 2 * STEPS + 1 == len(appended)
        assert [f"c4_{k}" for k in range(STEPS)] == [
            i["call_id"] for i in appended if i.get("type") == "function_call_output"
        ][-STEPS:]
        final = asyncio.run(session.get_items())
        assert verify(store.backend).ok
    child = subprocess.run(
        [sys.executable, str(CHILD), shared_target.url, "loop-1"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert 0 == child.returncode, child.stderr
    restored = json.loads(child.stdout)
    assert json.loads(json.dumps(final, sort_keys=True)) == restored
    _check_whole_turns_and_pairs(restored)
    assert "answer 4" in json.dumps(restored[-1])


def test_r24_i22_the_filter_records_the_steps_without_a_session(tmp_path: Path) -> None:
    """Without session=, the filter records each step's new items once (the user's input, the
    calls and their outputs), judged against the log's newest items."""
    agents = _sdk()
    from agents.decorators import tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from turnledger.integrations.openai_agents import TurnledgerSession

    @tool
    async def lookup(q: int) -> str:
        return f"value {q}"

    async def main() -> None:
        with open_store(f"sqlite:///{tmp_path / 'tl.db'}") as store:
            session = TurnledgerSession("s", store)
            config = agents.RunConfig(call_model_input_filter=session.call_model_input_filter)
            model = ScriptedModel([[function_call("lookup", {"q": k}, call_id=f"c{k}")]
                                   for k in range(3)] + [[assistant_message("done")]])
            agent = agents.Agent(name="x", model=model, tools=[lookup])
            result = await agents.Runner.run(agent, "go", run_config=config)
            assert "done" == result.final_output
            recorded = await session.get_items()
            assert result.to_input_list()[:-1] == recorded  # all but the final answer
            assert [i.get("call_id") for i in recorded][1:] == [
                "c0", "c0", "c1", "c1", "c2", "c2"]
            # The next run carries the whole list on: the final answer is recorded then.
            model.extend([[assistant_message("again")]])
            await agents.Runner.run(agent, [*result.to_input_list(),
                                            {"role": "user", "content": "more"}],
                                    run_config=config)
            assert [*result.to_input_list(), {"role": "user", "content": "more"}] == (
                await session.get_items())
            stranger = [{"role": "user", "content": "another conversation"},
                        {"role": "assistant", "content": "x"}]
            with pytest.raises(Exception, match="does not continue this conversation"):
                session.window(stranger)
            assert 9 == len(await session.get_items())

    asyncio.run(main())


# -- 3. concurrency the SDK's users report --


def test_i22_forty_concurrent_pops_return_forty_distinct_items(shared_target: Target) -> None:
    """40 concurrent pop_item calls on one session return the 40 newest items, each once
    (the SDK's own sessions return 26 distinct in a reported issue)."""
    _sdk()
    from turnledger.integrations.openai_agents import TurnledgerSession

    items = [{"role": "user", "content": f"m{i}"} for i in range(50)]

    async def main() -> None:
        with open_store(shared_target.url) as store:
            session = TurnledgerSession("pops", store)
            await session.add_items(items)
            popped = await asyncio.gather(*(session.pop_item() for _ in range(40)))
            assert sorted(items[10:], key=str) == sorted(popped, key=str)
            assert items[:10] == await session.get_items()

    asyncio.run(main())


def test_i22_concurrent_add_items_from_many_objects_all_land(shared_target: Target) -> None:
    """add_items from 12 objects of one conversation at once: every item lands, once, each
    call's items together."""
    _sdk()
    from turnledger.integrations.openai_agents import TurnledgerSession

    async def main() -> None:
        with open_store(shared_target.url) as store:
            sessions = [TurnledgerSession("shared", store) for _ in range(12)]
            await sessions[0].get_items()

            async def writer(n: int) -> None:
                for k in range(3):
                    await sessions[n].add_items([{"role": "user", "content": f"w{n}-{k}-a"},
                                                 {"role": "assistant", "content": f"w{n}-{k}-b"}])

            await asyncio.gather(*(writer(n) for n in range(12)))
            got = await TurnledgerSession("shared", store).get_items(-1)
            assert 72 == len(got)
            assert sorted(f"w{n}-{k}-{s}" for n in range(12) for k in range(3) for s in "ab") == (
                sorted(i["content"] for i in got))
            for first, second in zip(got[::2], got[1::2], strict=True):
                assert first["content"][:-1] == second["content"][:-1]  # a call's pair together
            assert verify(store.backend).ok

    asyncio.run(main())


def test_i22_a_cancelled_write_is_settled_before_the_cancellation_is_raised(
    tmp_path: Path,
) -> None:
    """add_items cancelled (twice) while its transaction waits for the SQLite write lock: the
    cancellation reaches the caller only once the item is recorded, as the SDK's own sessions
    do (the SDK's recovery reads the history right after)."""
    _sdk()
    import sqlite3

    from turnledger.integrations.openai_agents import TurnledgerSession

    path = tmp_path / "tl.db"

    async def main() -> None:
        with open_store(f"sqlite:///{path}") as store:
            session = TurnledgerSession("s", store)
            await session.add_items(SIX[:1])
            blocker = sqlite3.connect(path, isolation_level=None)
            blocker.execute("BEGIN IMMEDIATE")  # the store's next write waits for this lock
            try:
                write = asyncio.create_task(session.add_items(SIX[3:4]))
                await asyncio.sleep(0.2)
                write.cancel()
                await asyncio.sleep(0)
                write.cancel()
                await asyncio.sleep(0.2)
                assert not write.done()  # still waiting for its outcome
            finally:
                blocker.execute("ROLLBACK")
                blocker.close()
            with pytest.raises(asyncio.CancelledError):
                await write
            assert [SIX[0], SIX[3]] == await TurnledgerSession("s", store).get_items()

    asyncio.run(main())


def test_i22_readme_agents_examples_run_as_written_without_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every example of the README's "OpenAI Agents SDK sessions" section runs in a fresh
    namespace, prints what the README says, and prints no warning."""
    _sdk()
    monkeypatch.chdir(tmp_path)
    _, section = docs_section("## OpenAI Agents SDK sessions")
    examples = re.findall(r"```python\n(.*?)```\s*Prints:\s*```text\n(.*?)```", section,
                          re.DOTALL)
    assert 2 <= len(examples)
    for code, expected in examples:
        out = io.StringIO()
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
            warnings.simplefilter("always")
            exec(compile(code, f"{README}:Agents", "exec"), {"__name__": "__readme__"})
        assert [] == [f"{w.category.__name__}: {w.message}" for w in caught]
        assert expected == out.getvalue()


# --- issue 35 point 3: each model call's usage recorded against its window, on the
# framework's real loop (a scripted model that returns usage, no network); what is
# compared: tests/usage_windows.py.


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
        assert [] == usages(session.session)
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
        assert expected_usages(session.session, versions, billed) == usages(session.session)
        assert verify(store.backend).ok
