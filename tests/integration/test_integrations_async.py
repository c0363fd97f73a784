"""The integrations' coroutines never block the event loop; the core imports no framework
(issue 10, points 4 and the extras).

asyncio's debug mode logs every callback (a task step) that runs longer than
``loop.slow_callback_duration``, naming the task's coroutine and the file that defines it. The
same store work done by a blocking call in a coroutine is caught (the control), and done by our
coroutines is not: their store I/O runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.extras import need
from turnledger.domain.budget import RuntimeProfile
from turnledger.store.session import open_store

THRESHOLD = 0.05  # seconds; the control's blocking work takes several times this
CONTROL = 4 * THRESHOLD
"""How long a control blocks the loop with store work: a fixed amount of work shrank below the
threshold once appends got faster, and then the control proved nothing."""


def _block_for(seconds: float, work: Callable[[int], object]) -> None:
    """Call ``work(0)``, ``work(1)``, ... on this thread until ``seconds`` have passed."""
    start, step = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        work(step)
        step += 1
OURS = "turnledger/integrations"


def _slow_steps(
    main: Callable[[], Awaitable[None]], caplog: pytest.LogCaptureFixture
) -> list[str]:
    """Run ``main`` in debug mode; the slow-callback warnings asyncio logged."""

    async def run() -> None:
        asyncio.get_running_loop().slow_callback_duration = THRESHOLD
        await main()

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        asyncio.run(run(), debug=True)
    return [r.getMessage() for r in caplog.records
            if r.name == "asyncio" and " took " in r.getMessage()]


def _slow_steps_of_ours(
    scenario: Callable[[int], Callable[[], Awaitable[None]]], caplog: pytest.LogCaptureFixture
) -> list[str]:
    """The slow steps naming our code, over up to three fresh runs of ``scenario(attempt)``.

    Work done on the loop overruns the threshold on every run. A step that only hands work to
    a thread can overrun once, when the loop thread waits for the GIL (or the CPU) while our
    worker runs; a second fresh run tells the two apart. The warnings of the last run count.
    """
    slow: list[str] = []
    for attempt in range(3):
        slow = [w for w in _slow_steps(scenario(attempt), caplog) if OURS in w]
        if not slow:
            break
    return slow


def _items(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "x" * 200}
        for i in range(start, start + n)
    ]


def test_openai_agents_session_does_its_io_off_the_event_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each protocol call as its own task: no slow step from our code; the control is slow."""
    from turnledger.integrations.openai_agents import TurnledgerSession

    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as store:
        session = TurnledgerSession("async", store)

        async def blocking() -> None:  # the same work, on the loop: must be caught
            _block_for(CONTROL, lambda step: session.add(_items(100, 100 * step)))

        async def control() -> None:
            await asyncio.create_task(blocking())

        assert any("blocking()" in w for w in _slow_steps(control, caplog))

        def scenario(attempt: int) -> Callable[[], Awaitable[None]]:
            fresh = TurnledgerSession(f"async-{attempt}", store)

            async def ours() -> None:
                await asyncio.create_task(fresh.add_items(_items(600, 600)))
                await asyncio.create_task(fresh.get_items(10))
                await asyncio.create_task(fresh.pop_item())
                await asyncio.create_task(fresh.clear_session())
                assert [] == await fresh.get_items()

            return ours

        assert [] == _slow_steps_of_ours(scenario, caplog)


def test_runner_run_on_our_session_has_no_slow_step_of_ours(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Runner.run with a scripted model in debug mode: no slow step names our code."""
    need("agents")
    from agents import Runner

    from tests.integration.scripted_agents import ScriptedModel, make_agent
    from turnledger.integrations.openai_agents import TurnledgerSession

    with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        unbounded = RuntimeProfile(max_context_tokens=0, max_history_messages=1000)
        def scenario(attempt: int) -> Callable[[], Awaitable[None]]:
            session = TurnledgerSession(f"runner-{attempt}", store, profile=unbounded)
            agent = make_agent(ScriptedModel())

            async def main() -> None:
                await session.add_items(_items(400))
                for i in range(3):
                    await Runner.run(agent, f"question {i}", session=session)
                assert 400 + 3 * 5 == len(await session.get_items())

            return main

        assert [] == _slow_steps_of_ours(scenario, caplog)


def test_langchain_history_and_trimmer_do_their_io_off_the_event_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """aadd_messages, aget_messages, aclear and the trimmer's ainvoke: no slow step of ours."""
    need("langchain_core")
    from langchain_core.messages import AIMessage, HumanMessage

    from turnledger.integrations.langchain import (
        TurnledgerChatMessageHistory,
        TurnledgerTrimmer,
    )

    talk = [HumanMessage(f"q{i} " + "x" * 200) if i % 2 == 0 else AIMessage(f"a{i}")
            for i in range(600)]
    with open_store(f"sqlite:///{tmp_path / 'l.db'}") as store:
        history = TurnledgerChatMessageHistory(store.start_session())

        async def blocking() -> None:
            _block_for(CONTROL, lambda _: history.add_messages(talk[:100]))

        async def control() -> None:
            await asyncio.create_task(blocking())

        assert any("blocking()" in w for w in _slow_steps(control, caplog))

        def scenario(attempt: int) -> Callable[[], Awaitable[None]]:
            fresh = TurnledgerChatMessageHistory(store.start_session())
            step = TurnledgerTrimmer(store, session_id=f"lcel-{attempt}").as_runnable()

            async def ours() -> None:
                await asyncio.create_task(fresh.aadd_messages(talk))
                await asyncio.create_task(fresh.aget_messages())
                await asyncio.create_task(fresh.aclear())
                await asyncio.create_task(step.ainvoke(talk))

            return ours

        assert [] == _slow_steps_of_ours(scenario, caplog)


def test_import_turnledger_imports_no_framework() -> None:
    """The core install keeps its four dependencies: importing turnledger loads no extra."""
    probe = (
        "import sys, turnledger, turnledger.integrations, turnledger.integrations.openai_agents\n"
        "heavy = ('agents', 'openai', 'langchain_core', 'langgraph', 'sqlalchemy', 'pydantic')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60)
    assert "[]" == out.stdout.strip()
