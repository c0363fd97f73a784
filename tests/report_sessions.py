"""Long sessions for the report's readability tests (issue 38 point 3).

Each builder returns one session's events as a user would have them, with the what-if profile
a user would try on it (or None):

- ``agent``: the report benchmark's tool loop (`benchmarks.report.record_agent_session`: route
  switches with the rejection each causes, provider overflows, orphan sweeps, trims on most
  turns), 120 turns (every request drawn one by one) or 600 (buckets);
- ``fixtures``: the real turns of the repository's recorded conversations and transcripts
  (`benchmarks.cache.fixtures`: 300 turns taken in turn), replayed live with a request before
  every model reply, under the spec's trim at 8,000 tokens or the low-water profile, the
  provider's usage recorded for each request;
- ``rejections``: a tool loop whose newest turn outgrows the model's window, so that dozens of
  consecutive requests are refused before they are sent (R18);
- ``imported``: the same real turns imported as a transcript is (appended, no request);
- the coding agents' real transcripts of ``tests/fixtures/agents`` imported through the CLI.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path

import attrs

import turnledger as tl
from benchmarks.cache import fixtures, replay_points
from benchmarks.report import record_agent_session
from turnledger.cli import main as cli_main
from turnledger.domain.events import DomainEvent
from turnledger.events import SessionStarted
from turnledger.profiles import Compaction

AGENTS = Path(__file__).resolve().parent / "fixtures" / "agents"
PROVIDER = tl.ProviderProfile("anthropic", "claude-sonnet", context_window=200_000)
SPEC_8K = tl.RuntimeProfile(max_context_tokens=8_000)
LOW_WATER_8K = attrs.evolve(SPEC_8K, compaction=Compaction(low_water=0.6))

Built = tuple[list[DomainEvent], tl.RuntimeProfile | None]


def agent(turns: int) -> Built:
    with tl.open_store("memory://") as store:
        session = record_agent_session(store, turns)
        events = store.events_of(session.id)
    started = events[0]
    assert isinstance(started, SessionStarted)
    return events, attrs.evolve(started.profile, max_context_tokens=3_000)


def live_fixtures(profile: tl.RuntimeProfile, turns: int = 300) -> Built:
    conv = fixtures(turns)
    with tl.open_store("memory://") as store:
        session = store.start_session(profile, providers=[PROVIDER])
        done = 0
        previous = 0
        for index, _ in replay_points(conv.items):
            for item in conv.items[done:index]:
                session.append(item)
            done = index
            request = session.prepare_request()
            shared = min(previous, request.estimated_tokens)
            session.record_usage({"prompt_tokens": request.estimated_tokens,
                                  "completion_tokens": 50,
                                  "prompt_tokens_details": {"cached_tokens": shared}})
            previous = request.estimated_tokens
        for item in conv.items[done:]:
            session.append(item)
        events = store.events_of(session.id)
    other = SPEC_8K if profile.compaction.low_water is not None else LOW_WATER_8K
    return events, other


def rejections(turns: int = 60) -> Built:
    """A small model; from turn 20 one turn's tool loop grows past its window, and every
    request of that loop is refused (R18) until the next turn starts."""
    small = tl.ProviderProfile("local", "tiny", context_window=4_000)
    profile = tl.RuntimeProfile(max_context_tokens=3_000)
    with tl.open_store("memory://") as store:
        session = store.start_session(profile, providers=[small])
        session.append(tl.ChatMessage.system("You are a coding agent."))
        for turn in range(turns):
            session.append(tl.ChatMessage.user(f"question {turn}: what does m{turn} do?"))
            steps = 40 if turn == 20 else 1 + turn % 3
            for step in range(steps):
                call = tl.ToolCall(f"c{turn}_{step}", "read_file", json.dumps({"n": step}))
                session.append(tl.AssistantToolCalls(None, (call,)))
                body = "x = 1\n" * (60 if turn == 20 else 20)
                session.append(tl.ToolResults((tl.ToolResult(call.id, body, "read_file"),)))
                with contextlib.suppress(tl.ContextWindowExceeded):
                    session.prepare_request()
            session.append(tl.ChatMessage.assistant(f"Answer {turn}."))
        events = store.events_of(session.id)
    return events, attrs.evolve(profile, max_context_tokens=2_000)


def imported_fixtures(turns: int = 300) -> Built:
    conv = fixtures(turns)
    with tl.open_store("memory://") as store:
        session = store.import_conversation(conv.items)  # as `turnledger import` records it
        events = store.events_of(session.id)
    return events, SPEC_8K


def imported_agent(name: str, store_path: Path) -> Built:
    """A coding agent's transcript imported by ``turnledger import`` (its first session)."""
    url = f"sqlite:///{store_path}"
    out = io.StringIO()
    assert 0 == cli_main(["--store", url, "import", str(AGENTS / name)], out)
    session_id = out.getvalue().split("\t", 1)[0].strip()
    with tl.open_store(url) as store:
        events = store.events_of(session_id)
    return events, SPEC_8K


def long_sessions(workdir: Path) -> dict[str, Callable[[], Built]]:
    """Every session of the module doc, by name (built when called)."""
    agents = {
        f"imported-{name.split('.')[0]}": (lambda name=name: imported_agent(
            name, workdir / f"{name}.db"))
        for name in ("claude_code_rich.jsonl", "codex_rich.jsonl", "gemini_cli_session.json")
    }
    return {
        "agent-120": lambda: agent(120),
        "agent-600": lambda: agent(600),
        "fixtures-spec-8k": lambda: live_fixtures(SPEC_8K),
        "fixtures-low-water-8k": lambda: live_fixtures(LOW_WATER_8K),
        "rejections": rejections,
        "imported-fixtures": imported_fixtures,
        **agents,
    }
