"""A compacted session for the CLI tests of issue 24 point 4, and the summarizers they pass.

`record` builds, with the library, a session whose log holds `TurnsSummarized`,
`SummaryRefused` and `ToolResultsCleared`: a 600-token budget, tool-result clearing outside the
newest turn, a summarizer on every request but one, whose summarizer raises. `summarize` is a
plain function the CLI imports (``--summarizer tests.e2e.compaction_session:summarize_v2``);
`NOT_CALLABLE` is not callable.
"""

from __future__ import annotations

from collections.abc import Sequence

import turnledger as tl
from turnledger.domain.budget import Compaction, ProviderProfile, Route, RuntimeProfile
from turnledger.domain.messages import (
    AssistantToolCalls,
    ChatMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)

OPENAI = ProviderProfile("openai", "gpt-4o", 128_000)
ROUTE = Route("openai", "gpt-4o")
BUDGET = 600
PROFILE = RuntimeProfile(
    max_context_tokens=BUDGET,
    compaction=Compaction(clear_tool_results=True, keep_tool_result_turns=1),
)
TURNS = 10
REFUSED_AT = 6  # the request of this turn gets the summarizer that raises
NOT_CALLABLE = 42


def summarize(turns: Sequence[ChatMessage], previous: str | None) -> str:
    """A deterministic summary: how many messages, and the first question's first words."""
    first = next((m.content for m in turns if m.role == "user"), "")
    rolled = " (rolling in the previous summary)" if previous else ""
    return f"{len(turns)} messages from {' '.join(first.split()[:2])!r}{rolled}"


summarize.summarizer_name = "cli-test-v1"  # type: ignore[attr-defined]


def summarize_v2(turns: Sequence[ChatMessage], previous: str | None) -> str:
    """Another summarizer, without a declared name: the CLI names it by its import string."""
    return "v2: " + summarize(turns, previous)


def unavailable(turns: Sequence[ChatMessage], previous: str | None) -> str:
    """A summarizer whose model is down."""
    raise RuntimeError("summary model unavailable")


def record(url: str) -> str:
    """Record the compacted session in the store at ``url``; its id."""
    good = tl.Summarizer("cli-test-v1", summarize)
    down = tl.Summarizer("down-v1", unavailable)
    with tl.open_store(url) as store:
        session = store.start_session(PROFILE, (OPENAI,), ROUTE)
        session.append(ChatMessage.system("You are a careful agent."))
        for n in range(TURNS):
            session.extend([
                ChatMessage.user(f"question {n} " * 8),
                AssistantToolCalls("Looking.", (ToolCall(f"c{n}", "search", "{}"),)),
                ToolResults((ToolResult(f"c{n}", f"result {n} " * 40, "search"),)),
                ChatMessage.assistant(f"answer {n} " * 8),
            ])
            session.prepare_request(summarizer=down if n == REFUSED_AT else good)
        return session.id
