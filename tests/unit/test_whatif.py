"""What-if replay: a recorded session re-decided under another profile, in memory (R12, R17-R18,
R24-R25, R28-R29, E6, E12).

Sessions are recorded with the pure decider (`execute`), no store: the what-if replay only ever
sees events.
"""


from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.properties import examples
from tests.strategies import conversation_histories
from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.decider import (
    AppendMessage,
    Command,
    PrepareRequest,
    RecoverFromOverflow,
    SelectRoute,
    StartSession,
    execute,
)
from turnledger.domain.events import (
    DomainEvent,
    MessageAppended,
    OverflowReported,
    RequestPrepared,
    RequestRejected,
    RouteReason,
    TrimDecided,
)
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.domain.state import collect_summarised
from turnledger.replay.timeline import (
    FoldedState,
    ReplayError,
    requests,
    timeline_jsonl,
    views_at,
)
from turnledger.replay.whatif import WhatIfReport, what_if

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
SESSION = UUID("00000000-0000-4000-8000-000000000001")
OPENAI = ProviderProfile("openai", "gpt-4o", 128_000)
OPAQUE = ProviderProfile("opaque", "mystery")  # capacity unknown (R17, R19)

RECORDED = RuntimeProfile(max_context_tokens=1_500)
TOOLS = ('{"name":"search","parameters":{"type":"object"}}',)
HOOKS = ("Remember: be brief.",)


class Recorder:
    """Drives the decider like a live session and keeps every event, with increasing times."""

    def __init__(
        self,
        profile: RuntimeProfile = RECORDED,
        provider: ProviderProfile = OPENAI,
        *,
        legacy: bool = False,
    ) -> None:
        self.state = FoldedState()  # keeps the log's items: its full views read them
        self.events: list[DomainEvent] = []
        self.tick = 0
        self.run(
            StartSession(
                SESSION, profile, (OPENAI, OPAQUE), Route(provider.name, provider.model),
                legacy, self.now(),
            )
        )

    def now(self) -> datetime:
        self.tick += 1
        return T0 + timedelta(seconds=self.tick)

    def run(self, command: Command) -> list[DomainEvent]:
        produced = execute(self.state, command)
        self.events.extend(produced)
        collect_summarised(self.state.log, produced)
        return produced

    def append(self, message: ConversationMessage | ChatMessage) -> None:
        self.run(AppendMessage(message, self.now()))  # type: ignore[arg-type]

    def prepare(self, *, final: bool = False) -> DomainEvent:
        return self.run(PrepareRequest.from_texts(TOOLS, HOOKS, final, self.now()))[-1]

    def tool_turn(self, n: int) -> None:
        """One user turn with a tool loop: two requests, about 290 tokens."""
        self.append(ChatMessage.user(f"question {n}: " + "why " * 60))
        self.prepare()
        call = ToolCall(f"call_{n}", "search", '{"q": "why"}')
        self.append(AssistantToolCalls("Let me look.", (call,)))
        self.append(ToolResults((ToolResult(f"call_{n}", "result " * 120, "search"),)))
        self.prepare()
        self.append(ChatMessage.assistant(f"answer {n}: " + "because " * 20))


def recorded_session(turns: int = 12, profile: RuntimeProfile = RECORDED) -> list[DomainEvent]:
    recorder = Recorder(profile)
    recorder.append(ChatMessage.system("You are a careful agent."))
    for n in range(turns):
        recorder.tool_turn(n)
    return recorder.events


def count(events: list[DomainEvent], cls: type[DomainEvent]) -> int:
    return sum(isinstance(e, cls) for e in events)


# --- fidelity ---------------------------------------------------------------------------------


def test_e6_whatif_under_the_recorded_profile_reproduces_every_request() -> None:
    """Replaying under the recorded profile re-decides exactly what was recorded (E6)."""
    events = recorded_session()
    report = what_if(events, RECORDED)
    assert count(events, RequestPrepared) == len(report.requests)
    assert all(row.recorded == row.what_if for row in report.requests)
    assert all(row.same_messages for row in report.requests)
    assert report.recorded == report.what_if
    assert 0 < report.recorded.trims


def test_r18_whatif_injects_the_recorded_tool_and_hook_overhead() -> None:
    """The recorded tool and hook tokens count in the what-if estimate too (R18)."""
    events = recorded_session(turns=2)
    prepared = [e for e in events if isinstance(e, RequestPrepared)]
    report = what_if(events, RECORDED)
    assert 0 < prepared[0].tool_tokens
    assert 0 < prepared[0].hook_tokens
    assert [p.estimated_tokens for p in prepared] == [
        row.what_if.estimated_tokens for row in report.requests
    ]


# --- other profiles ---------------------------------------------------------------------------


def test_r24_smaller_budget_shows_more_trims_than_recorded() -> None:
    """A smaller max_context_tokens trims more often and drops more messages (R24)."""
    report = what_if(recorded_session(), RuntimeProfile(max_context_tokens=700))
    assert report.recorded.trims < report.what_if.trims
    assert report.recorded.dropped_messages < report.what_if.dropped_messages
    assert any(not row.same_messages for row in report.requests)
    assert all(
        row.what_if.estimated_tokens <= row.recorded.estimated_tokens for row in report.requests
    )


def test_r12_larger_budget_shows_fewer_trims_than_recorded() -> None:
    """A budget that fits the whole session trims nothing where the recording trimmed (R12)."""
    report = what_if(recorded_session(), RuntimeProfile(max_context_tokens=100_000))
    assert 0 < report.recorded.trims
    assert 0 == report.what_if.trims
    assert 0 == report.what_if.dropped_messages


def test_r12_explicit_zero_disables_token_trims_in_whatif() -> None:
    """max_context_tokens = 0 replays with no token-budget trim at all (R12)."""
    report = what_if(recorded_session(), RuntimeProfile(max_context_tokens=0))
    assert {"token_budget": 0, "turn_limit": 0} == report.what_if.trims_by_reason


def test_r29_smaller_turn_limit_shows_turn_limit_trims() -> None:
    """A turn limit of 2 drops old turns for the turn limit instead (R28-R29)."""
    profile = RuntimeProfile(max_context_tokens=100_000, max_history_messages=2)
    report = what_if(recorded_session(), profile)
    assert 0 == report.recorded.trims_by_reason["turn_limit"]
    assert 0 < report.what_if.trims_by_reason["turn_limit"]
    assert report.what_if.notices == report.what_if.trims  # structured: every trim is visible


def test_r18_whatif_reports_requests_the_profile_would_reject() -> None:
    """With unknown capacity, a small max_context_tokens is the window: requests are refused
    (R17, R18)."""
    recorder = Recorder(RuntimeProfile(), provider=OPAQUE)
    for n in range(3):
        recorder.tool_turn(n)
    report = what_if(recorder.events, RuntimeProfile(max_context_tokens=200))
    assert 0 == report.recorded.rejections
    # The first request of a turn fits; the one carrying the 120-word tool result does not.
    assert [False, True] * 3 == [row.what_if.rejected for row in report.requests]
    assert 3 == report.what_if.rejections
    assert all(200 == row.what_if.window for row in report.requests)


def test_r18_recorded_rejection_is_replayed_with_its_overhead() -> None:
    """A recorded rejection's overhead (estimate minus chat view) is replayed too (R18)."""
    recorder = Recorder(RuntimeProfile(max_context_tokens=150), provider=OPAQUE)
    recorder.tool_turn(0)
    rejected = [e for e in recorder.events if isinstance(e, RequestRejected)]
    report = what_if(recorder.events, RuntimeProfile(max_context_tokens=150))
    assert 0 < len(rejected)
    assert [r.estimated_tokens for r in rejected] == [
        row.what_if.estimated_tokens for row in report.requests if row.what_if.rejected
    ]
    assert report.recorded == report.what_if


def test_r19_route_selections_are_replayed() -> None:
    """A recorded route switch is re-run, with the capacity of the new route (R19)."""
    recorder = Recorder()
    recorder.tool_turn(0)
    recorder.run(SelectRoute(Route("opaque", "mystery"), RouteReason.EXPLICIT, recorder.now()))
    recorder.tool_turn(1)
    report = what_if(recorder.events, RuntimeProfile(max_context_tokens=50_000))
    windows = [row.what_if.window for row in report.requests]
    assert [128_000, 128_000, 50_000, 50_000] == windows


# --- overflows --------------------------------------------------------------------------------


def overflow_session() -> list[DomainEvent]:
    recorder = Recorder(RuntimeProfile(max_context_tokens=100_000))
    for n in range(6):
        recorder.tool_turn(n)
    recorder.run(RecoverFromOverflow("maximum context length exceeded", recorder.now()))
    recorder.prepare()
    return recorder.events


def test_r25_overflow_recovery_is_replayed_when_the_view_is_as_large() -> None:
    """Under the recorded profile the provider overflow is recovered again, to 2/3 (R25)."""
    events = overflow_session()
    report = what_if(events, RuntimeProfile(max_context_tokens=100_000))
    assert 1 == report.recorded.overflow_recoveries
    assert 1 == report.what_if.overflow_recoveries
    assert 0 == report.overflows_avoided
    assert report.requests[-1].recorded == report.requests[-1].what_if


def test_r25_overflow_counts_as_avoided_when_the_view_is_smaller() -> None:
    """A profile that keeps the view below what the provider refused avoids the overflow."""
    events = overflow_session()
    refused = next(e for e in events if isinstance(e, OverflowReported)).estimated_tokens
    report = what_if(events, RuntimeProfile(max_context_tokens=refused // 2))
    assert 1 == report.overflows_avoided
    assert 0 == report.what_if.overflow_recoveries


# --- report -----------------------------------------------------------------------------------


def test_e12_whatif_json_is_byte_identical_across_runs() -> None:
    """The same events and profile give the same JSON, byte for byte (E12)."""
    events = recorded_session()
    profile = RuntimeProfile(max_context_tokens=800, context_compact_ratio=0.5)
    assert what_if(events, profile).to_json() == what_if(list(events), profile).to_json()


def test_whatif_rows_follow_the_columns() -> None:
    """rows() gives one row of display strings per request, keyed by COLUMNS in order."""
    report = what_if(recorded_session(turns=3), RuntimeProfile(max_context_tokens=300))
    rows = report.rows()
    assert len(report.requests) == len(rows)
    assert [WhatIfReport.COLUMNS] * len(rows) == [tuple(r) for r in rows]
    first = report.requests[0]
    assert ["1", str(first.position), "turn"] == list(rows[0].values())[:3]
    assert f"{first.what_if.estimated_tokens:,}" == rows[0]["what-if tokens"]


def test_whatif_summary_names_both_sides() -> None:
    """summary() gives the recorded and the what-if totals, one line each."""
    report = what_if(recorded_session(), RuntimeProfile(max_context_tokens=100_000))
    lines = report.summary().splitlines()
    assert 2 == len(lines)
    assert lines[0].startswith(f"recorded: {report.recorded.trims} trims (")
    assert lines[1].startswith("what-if:  0 trims, 0 messages dropped, 0 of 24 requests rejected")


def test_whatif_trims_are_attributed_to_the_request_they_shaped() -> None:
    """Each row counts the trims recorded since the previous request (E6)."""
    events = recorded_session()
    report = what_if(events, RECORDED)
    assert count(events, TrimDecided) == sum(row.recorded.trims for row in report.requests)


def test_whatif_needs_a_session_start() -> None:
    """Events that do not start with SessionStarted are refused with a clear error."""
    events = recorded_session(turns=1)
    with pytest.raises(ReplayError, match="SessionStarted"):
        what_if([e for e in events if isinstance(e, MessageAppended)], RECORDED)
    with pytest.raises(ReplayError):
        what_if([], RECORDED)


def test_whatif_does_not_touch_the_recorded_events() -> None:
    """The replay leaves the recorded event list as it was (it writes nothing)."""
    events = recorded_session(turns=3)
    before = list(events)
    what_if(events, RuntimeProfile(max_context_tokens=100))
    assert before == events


# --- properties (E4, E6, E12) -------------------------------------------------------------------


@st.composite
def recorded_histories(
    draw: st.DrawFn,
) -> tuple[RuntimeProfile, list[DomainEvent], dict[int, tuple[object, object]]]:
    """A session recorded from a generated history, preparing requests at random points, with
    both views captured after every command."""
    profile = RuntimeProfile(
        max_context_tokens=draw(st.sampled_from((None, 0, 40, 120, 400))),
        max_history_messages=draw(st.sampled_from((None, 0, 1, 3))),
        max_tool_result_chars=draw(st.sampled_from((0, 30))),
    )
    recorder = Recorder(profile, legacy=draw(st.booleans()))
    captured: dict[int, tuple[object, object]] = {}
    for item in draw(conversation_histories(max_turns=5)):
        if isinstance(item, Chat) and item.message.synthetic:
            continue  # the breadcrumb is turnledger's to insert
        recorder.append(item)
        captured[recorder.state.version] = (
            recorder.state.chat_view(), recorder.state.conversation_view()
        )
        if draw(st.booleans()):
            recorder.prepare(final=draw(st.booleans()))
            captured[recorder.state.version] = (
                recorder.state.chat_view(), recorder.state.conversation_view()
            )
    return profile, recorder.events, captured


@settings(max_examples=examples(60), deadline=None)
@given(recorded_histories())
def test_e6_whatif_under_the_recorded_profile_is_the_recording(
    recorded: tuple[RuntimeProfile, list[DomainEvent], dict[int, tuple[object, object]]],
) -> None:
    """For any recorded session, the same profile re-decides every request identically (E6)."""
    profile, events, _ = recorded
    report = what_if(events, profile)
    assert [(row.recorded, True) for row in report.requests] == [
        (row.what_if, row.same_messages) for row in report.requests
    ]
    assert report.recorded == report.what_if


@settings(max_examples=examples(60), deadline=None)
@given(recorded_histories())
def test_e4_e6_e12_replay_matches_the_live_session(
    recorded: tuple[RuntimeProfile, list[DomainEvent], dict[int, tuple[object, object]]],
) -> None:
    """Views at every captured position equal the live ones, every digest matches, and the
    timeline JSON is byte-identical across replays (E4, E6, E12)."""
    _, events, captured = recorded
    assert captured == {position: views_at(events, position) for position in captured}
    assert all(audited.matches for audited in requests(events))
    assert timeline_jsonl(events) == timeline_jsonl(list(events))
