"""Issue 35 point 4, for every history: an estimate that learns from the bill keeps every
trimming invariant and replays exactly (Hypothesis; derandomized in CI).

A session under `Compaction(learn_estimate=True)` (with or without a low water) runs appends,
requests and the provider's usages of those requests, billed at any ratio of the estimate.
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.properties import examples
from tests.strategies import conversation_histories
from turnledger.domain.budget import (
    Compaction,
    ProviderProfile,
    Route,
    RuntimeProfile,
    corrected_limit,
    low_water_tokens,
)
from turnledger.domain.decider import (
    AppendMessage,
    PrepareRequest,
    RecordUsage,
    StartSession,
    run,
)
from turnledger.domain.events import DomainEvent, RequestPrepared, TrimDecided, TrimReason
from turnledger.domain.messages import Chat, ConversationMessage
from turnledger.domain.state import collect_summarised
from turnledger.domain.turns import is_turn_start_item
from turnledger.domain.usage import Usage
from turnledger.replay.timeline import FoldedState, fold, requests
from turnledger.replay.whatif import what_if

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
SESSION = UUID("00000000-0000-4000-8000-000000000354")
BIG = ProviderProfile("big", "big-model", 1_000_000)
Command = ConversationMessage | float | None  # an item; a request (None); a usage (its ratio)


@st.composite
def scripts(draw: st.DrawFn) -> tuple[RuntimeProfile, list[Command]]:
    low_water = draw(st.none() | st.floats(0.3, 0.9))
    profile = RuntimeProfile(
        max_context_tokens=draw(st.sampled_from((30, 60, 120, 250, 600))),
        max_tool_result_chars=draw(st.sampled_from((0, 30))),
        compaction=Compaction(learn_estimate=True, low_water=low_water),
    )
    commands: list[Command] = []
    for item in draw(conversation_histories(min_turns=1, max_turns=14)):
        if isinstance(item, Chat) and item.message.synthetic:
            continue  # the breadcrumb is turnledger's to insert
        commands.append(item)
        if draw(st.booleans()):
            commands.append(None)
            if draw(st.booleans()):
                commands.append(draw(st.floats(0.2, 3.0)))
    commands.append(None)
    return profile, commands


def _play(profile: RuntimeProfile, commands: list[Command]) -> tuple[FoldedState,
                                                                      list[DomainEvent]]:
    state = FoldedState()
    events = list(run(state, StartSession(SESSION, profile, (BIG,), Route("big", "big-model"),
                                          False, NOW)).events)
    last: RequestPrepared | None = None
    for command in commands:
        if command is None:
            new = run(state, PrepareRequest(0, 0, False, NOW)).events
            last = next((e for e in new if isinstance(e, RequestPrepared)), last)
        elif isinstance(command, float):
            if last is None:
                continue
            billed = int(last.estimated_tokens * command)
            new = run(state, RecordUsage(Usage("openai-responses", billed, 1),
                                         last.originator_version, last.digest,
                                         last.estimated_tokens, NOW)).events
        else:
            new = run(state, AppendMessage(command, NOW)).events
        collect_summarised(state.log, new)
        events += new
    return state, events


@settings(max_examples=examples(150), deadline=None)
@given(scripts())
def test_i35_p4_learned_estimate_keeps_the_budget_and_replays_exactly(
    script: tuple[RuntimeProfile, list[Command]],
) -> None:
    """Under any bill: no request exceeds the budget by the estimate unless it holds the
    newest turn alone (R6); a trim that learned fits the corrected budget (its low water's
    share), records a correction in (1, 2]; the log folds to the same views, every request
    to its digest, and what-if under the profile re-decides every request the same."""
    profile, commands = script
    state, events = _play(profile, commands)
    budget = state.route.budget
    for trim in (e for e in events if isinstance(e, TrimDecided)):
        if trim.reason is not TrimReason.TOKEN_BUDGET:
            continue
        correction = trim.estimate_correction
        assert correction is None or 1 < correction <= 2
        fits = low_water_tokens(corrected_limit(budget, correction),
                                profile.compaction.low_water)
        assert trim.tokens_after <= fits or trim.kept_turns == 1
    audited = requests(events)
    assert all(request.matches for request in audited)
    prepared = [e for e in events if isinstance(e, RequestPrepared)]
    for event, request in zip(prepared, audited, strict=True):
        starts = sum(1 for m in request.messages if is_turn_start_item(Chat(m)))
        assert event.estimated_tokens <= budget or starts <= 1
    folded = fold(events)
    assert state.chat_view() == folded.chat_view()
    report = what_if(events, profile)
    assert [(row.recorded, True) for row in report.requests] == [
        (row.what_if, row.same_messages) for row in report.requests]

