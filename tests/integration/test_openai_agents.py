"""The OpenAI Agents SDK runs on a turnledger session (issue 10, point 2).

Real ``openai-agents``: ``Runner.run`` over many turns with a tool and a scripted model (no
network), on SQLite and PostgreSQL, restored in a new process; the SDK's documented session
semantics (``limit``, ``pop_item``, ``clear_session``) side by side with its ``SQLiteSession``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.backends import SHARED_BACKENDS, Target, fresh_target
from tests.extras import need
from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.events import HistoryCleared, HistoryTrimmed, MessagePopped
from turnledger.domain.messages import BREADCRUMB_TEXT
from turnledger.replay.audit import verify
from turnledger.store.session import open_store

CHILD = Path(__file__).with_name("agents_child.py")
BREADCRUMB = {"role": "user", "content": BREADCRUMB_TEXT}
TURN = 5  # user message, reasoning, function call, its output, answer


@pytest.fixture(params=SHARED_BACKENDS)
def shared_target(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    with fresh_target(request.param, tmp_path) as fresh:
        yield fresh


def _run_turns(session: Any, turns: int) -> Any:
    need("agents")
    from agents import Runner

    from tests.integration.scripted_agents import ScriptedModel, make_agent

    model = ScriptedModel()
    agent = make_agent(model)

    async def main() -> None:
        for i in range(turns):
            result = await Runner.run(agent, f"question {i}", session=session)
            assert f"answer {model.calls}" == result.final_output

    asyncio.run(main())
    return model


def test_runner_keeps_whole_turns_exactly_and_restores_in_a_new_process(
    shared_target: Target,
) -> None:
    """Six runs, two kept turns: whole turns as added, a breadcrumb, notices; a child process
    restores the same items."""
    need("agents")
    from agents import SQLiteSession

    from turnledger.integrations.openai_agents import TurnledgerSession

    with open_store(shared_target.url) as store:
        notices: list[HistoryTrimmed] = []
        store.subscribe(notices.append)
        ours = TurnledgerSession("user-42", store, profile=RuntimeProfile(max_history_messages=2))
        model = _run_turns(ours, 6)
        theirs = SQLiteSession("user-42")
        _run_turns(theirs, 6)
        everything = asyncio.run(theirs.get_items())
        items = asyncio.run(ours.get_items())
        assert [BREADCRUMB, *everything[-2 * TURN :]] == items  # exactly as the SDK added them
        # The model saw whole turns: from the fourth run on, two after a breadcrumb.
        firsts = [inp for inp in model.inputs if inp[-1].get("role") == "user"]
        assert [BREADCRUMB] * 3 == [inp[0] for inp in firsts[3:]]
        assert [1, 1 + TURN, 1 + 2 * TURN, *[2 + 2 * TURN] * 3] == [len(i) for i in firsts]
        assert [TURN] * 4 == [n.dropped_messages for n in notices]
        assert verify(store.backend).ok
    child = subprocess.run(
        [sys.executable, str(CHILD), shared_target.url, "user-42"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert 0 == child.returncode, child.stderr
    assert items == json.loads(child.stdout)


def _add_script(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [items[:3], items[3:4], items[4:]]


ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "hello"},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}",
     "status": "completed"},
    {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    {"type": "message", "id": "m1", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "hi", "annotations": [], "logprobs": []}]},
    {"role": "user", "content": [{"type": "input_text", "text": "look"},
                                 {"type": "input_image", "image_url": "https://x/a.png",
                                  "detail": "auto"}]},
]


def test_sdk_session_semantics_match_sqlite_session(tmp_path: Path) -> None:
    """limit, pop_item and clear_session answer as the SDK's SQLiteSession does."""
    need("agents")
    from agents import SQLiteSession
    from agents.memory import Session as SessionProtocol

    from turnledger.integrations.openai_agents import TurnledgerSession

    async def both() -> None:
        with open_store(f"sqlite:///{tmp_path / 'tl.db'}") as store:
            ours, theirs = TurnledgerSession("s", store), SQLiteSession("s")
            assert isinstance(ours, SessionProtocol)  # the SDK's runtime-checkable protocol
            for batch in _add_script(ITEMS):
                await ours.add_items(batch)
                await theirs.add_items(batch)
            for limit in (None, 0, 1, 3, 6, 50, -1):
                assert await theirs.get_items(limit) == await ours.get_items(limit)
            assert ITEMS == await ours.get_items()
            for _ in range(2):
                assert await theirs.pop_item() == await ours.pop_item()
            assert await theirs.get_items() == await ours.get_items()
            await ours.clear_session()
            await theirs.clear_session()
            assert [] == await ours.get_items()
            assert None is await ours.pop_item()
            assert await theirs.pop_item() is None
            events = ours.session.events()
            assert 2 == sum(isinstance(e, MessagePopped) for e in events)
            assert 1 == sum(isinstance(e, HistoryCleared) for e in events)
            assert verify(store.backend).ok

    asyncio.run(both())


def test_an_item_that_would_not_come_back_is_refused_whole(tmp_path: Path) -> None:
    """add_items refuses an item it cannot return exactly; none of the call is recorded."""
    from turnledger.integrations.openai_agents import TurnledgerSession

    async def main() -> None:
        with open_store(f"sqlite:///{tmp_path / 'tl.db'}") as store:
            session = TurnledgerSession("s", store)
            await session.add_items(ITEMS[:1])
            with pytest.raises(InvalidMessage, match=r"items\[1\]"):
                await session.add_items([ITEMS[0], {"role": "robot", "content": "beep"}])
            assert ITEMS[:1] == await session.get_items()

    asyncio.run(main())
