"""ADR-0084: the request's orphan sweep and digest are incremental, with the same outcome.

`WindowIndex.pairs_from` lets `SweepOrphans` skip a window whose every turn pairs among
itself (R36, DECISIONS 7), and `request_digest` extends the hash of the last request when
the window only grew (E6). Random histories with orphans of every kind (results without
calls, calls without results, ids called twice, flat tool messages, results in a later turn),
trims, pops, clears and fit_window: the same commands on a state whose sweep always looks
give the same events, and every recorded digest is the digest of the whole request.
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.decider import (
    AppendMessage,
    ClearHistory,
    FitWindow,
    PopMessage,
    PrepareRequest,
    StartSession,
    execute,
    request_digest,
)
from turnledger.domain.events import RequestPrepared
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.domain.state import SessionState
from turnledger.domain.window import WindowIndex

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SESSION = UUID(int=23)
BIG = ProviderProfile("big", "big-model", 1_000_000)
IDS = st.sampled_from(["a", "b", "c", "d"])

ITEM = st.one_of(
    st.builds(lambda n: Chat(ChatMessage.user("u" * n)), st.integers(1, 300)),
    st.builds(lambda n: Chat(ChatMessage.assistant("t" * n)), st.integers(1, 300)),
    st.builds(
        lambda ids, text: AssistantToolCalls(text, tuple(ToolCall(i, "f", "{}") for i in ids)),
        st.lists(IDS, min_size=1, max_size=2, unique=True), st.sampled_from([None, "", "why"]),
    ),
    st.builds(
        lambda ids, n: ToolResults(tuple(ToolResult(i, "r" * n, "f") for i in ids)),
        st.lists(IDS, min_size=1, max_size=2), st.integers(1, 300),
    ),
    st.builds(lambda i: Chat(ChatMessage.tool("flat", i)), IDS),
)
STEP = st.one_of(
    ITEM, ITEM, st.sampled_from(["prepare", "prepare", "prepare", "fit", "pop", "clear"])
)


def _start(profile: RuntimeProfile) -> SessionState:
    state = SessionState()
    execute(state, StartSession(SESSION, profile, (BIG,), Route("big", "big-model"), False, NOW))
    return state


def _command(step: object) -> object:
    match step:
        case "prepare":
            return PrepareRequest.from_texts((), (), False, NOW)
        case "fit":
            return FitWindow(NOW)
        case "pop":
            return PopMessage(NOW)
        case "clear":
            return ClearHistory(NOW)
    return AppendMessage(step, NOW)  # type: ignore[arg-type]


def _looking(state: SessionState, command: object) -> list[object]:
    """`execute` with a sweep that always looks at the whole window."""
    looks = WindowIndex.pairs_from
    WindowIndex.pairs_from = lambda self, start: False  # type: ignore[method-assign]
    try:
        return list(execute(state, command))  # type: ignore[arg-type]
    finally:
        WindowIndex.pairs_from = looks  # type: ignore[method-assign]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(STEP, min_size=5, max_size=80),
    budget=st.sampled_from([300, 800, 3000, 100_000]),
    turns=st.sampled_from([2, 5, None]),
)
def test_incremental_sweep_and_digest_decide_as_the_whole_window(
    steps: list[object], budget: int, turns: int | None
) -> None:
    profile = RuntimeProfile(max_context_tokens=budget, max_history_messages=turns)
    fast, full = _start(profile), _start(profile)
    for step in steps:
        command = _command(step)
        try:
            got = list(execute(fast, command))  # type: ignore[arg-type]
        except Exception as error:  # the same refusal on both sides, then stop
            with pytest.raises(type(error)):
                _looking(full, command)
            return
        want = _looking(full, command)
        assert got == want
        for event in got:
            if isinstance(event, RequestPrepared):
                assert event.digest == request_digest(fast.chat_view())
        assert fast.chat_view() == full.chat_view()
