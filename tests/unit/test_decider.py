"""The pure session decider, driven through `execute` (R2, R6, R12, R18-R19, R24-R25, R27a-R34,
R36-R38, E1, E4, E5, E12).

Every test starts a `SessionState` with `StartSession` and feeds it commands; nothing here
touches a store. The numbers come from the R20 estimate: ``S("sys")`` costs 5, a 40-byte message
14, ``U("e")`` / ``A("f")`` 5 each and the breadcrumb 17, so the standard history
``SYS + TURN1 + TURN2 + TURN3`` costs 71.
"""


from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
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
    PopMessage,
    PrepareRequest,
    RecoverFromOverflow,
    SelectRoute,
    SessionState,
    StartSession,
    SweepOrphans,
    evolve,
    execute,
    request_digest,
)
from turnledger.domain.errors import InvalidMessage, InvalidProfile
from turnledger.domain.estimate import (
    BREADCRUMB_TOKENS,
    IMAGE_TOKEN_ESTIMATE,
    estimate_history_tokens,
)
from turnledger.domain.events import (
    BreadcrumbInserted,
    DomainEvent,
    HistoryTrimmed,
    MessageAppended,
    OrphansSwept,
    OverflowRecovered,
    OverflowReported,
    OverflowUnrecoverable,
    Purpose,
    RequestPrepared,
    RequestRejected,
    RouteReason,
    RouteSelected,
    SessionStarted,
    TrimDecided,
    TrimReason,
    TrimTrigger,
    View,
)
from turnledger.domain.messages import (
    BREADCRUMB_TEXT,
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    is_breadcrumb,
    parse_assistant_envelope,
    parse_tool_envelope,
    to_chat_messages,
    tool_envelope,
)
from turnledger.domain.state import collect_summarised
from turnledger.domain.sweep import sweep_conversation_orphans, sweep_orphans
from turnledger.domain.trimming import (
    trim_conversation_to_recent_turns,
    trim_to_recent_turns,
)
from turnledger.domain.truncate import truncate_tool_result
from turnledger.replay.timeline import FoldedState, fold

S = ChatMessage.system
U = ChatMessage.user
A = ChatMessage.assistant
BC = ChatMessage.breadcrumb()

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
SESSION = UUID("12345678-1234-5678-1234-567812345678")

SYS = S("sys")
TURN1 = [U("a" * 40), A("b" * 40)]
TURN2 = [U("c" * 40), A("d" * 40)]
TURN3 = [U("e"), A("f")]
HISTORY = [SYS, *TURN1, *TURN2, *TURN3]  # 5 + 28 + 28 + 10 = 71 tokens

BIG = ProviderProfile("big", "big-model", 1_000_000)


# --- helpers ---------------------------------------------------------------------------------


def start(
    profile: RuntimeProfile | None = None,
    providers: Sequence[ProviderProfile] = (BIG,),
    route: Route | None = None,
    *,
    legacy: bool = False,
) -> SessionState:
    """A started session state (its SessionStarted + RouteSelected already applied)."""
    state = SessionState()
    if route is None:
        route = Route(providers[0].name, providers[0].model) if providers else Route("x", "y")
    execute(
        state,
        StartSession(
            SESSION, profile or RuntimeProfile(), tuple(providers), route, legacy, NOW
        ),
    )
    return state


def append(state: SessionState, *messages: ConversationMessage | ChatMessage) -> list[DomainEvent]:
    """Append each message; the events of every append, concatenated."""
    events: list[DomainEvent] = []
    for message in messages:
        events.extend(execute(state, AppendMessage(message, NOW)))  # type: ignore[arg-type]
    return events


def prepare(
    state: SessionState,
    tools: tuple[str, ...] = (),
    hooks: tuple[str, ...] = (),
    *,
    final_summary: bool = False,
) -> list[DomainEvent]:
    return execute(state, PrepareRequest.from_texts(tools, hooks, final_summary, NOW))


def kinds(events: Sequence[DomainEvent]) -> list[type[DomainEvent]]:
    return [type(e) for e in events]


def only(events: Sequence[DomainEvent], kind: type[DomainEvent]) -> DomainEvent:
    """The single event of ``kind`` among ``events``."""
    found = [e for e in events if isinstance(e, kind)]
    assert 1 == len(found), f"expected one {kind.__name__}, got {kinds(events)}"
    return found[0]


def tool_loop(call_id: str, output: str = "out", attachments: tuple[str, ...] = ()) -> list[
    ConversationMessage
]:
    return [
        AssistantToolCalls(None, (ToolCall(call_id, "shell", "{}"),)),
        ToolResults((ToolResult(call_id, output, "shell", attachments),)),
    ]


def refold(events: Sequence[DomainEvent]) -> SessionState:
    """A fresh state rebuilt from events alone (E4), with the log it read (its full views)."""
    return fold(events)


class Recorder:
    """Runs commands on a state and keeps every event, to refold later; the state keeps the
    log's items (`FoldedState`), so its full views and its pops read what it summarises."""

    def __init__(self, state: FoldedState, initial: Sequence[DomainEvent]) -> None:
        self.state = state
        self.events: list[DomainEvent] = list(initial)
        collect_summarised(state.log, initial)

    def run(self, command: Command) -> list[DomainEvent]:
        if isinstance(command, PopMessage) and command.summarised is None:
            command = PopMessage(command.now, summarised=self.state.log)
        produced = execute(self.state, command)
        self.events.extend(produced)
        collect_summarised(self.state.log, produced)
        return produced


def recorder(profile: RuntimeProfile | None = None, *, legacy: bool = False) -> Recorder:
    state = FoldedState()
    initial = execute(
        state,
        StartSession(
            SESSION, profile or RuntimeProfile(), (BIG,), Route("big", "big-model"), legacy, NOW
        ),
    )
    return Recorder(state, initial)


def breadcrumb_positions(history: Sequence[ChatMessage]) -> list[int]:
    return [i for i, m in enumerate(history) if is_breadcrumb(m)]


def leading_system_count(history: Sequence[ChatMessage]) -> int:
    n = 0
    while n < len(history) and history[n].role == "system":
        n += 1
    return n


# --- session start (R19, E1) -----------------------------------------------------------------


def test_r19_start_records_route_with_resolved_pair() -> None:
    """StartSession records SessionStarted, then RouteSelected(initial) with the resolved pair."""
    state = SessionState()
    events = execute(
        state,
        StartSession(SESSION, RuntimeProfile(), (BIG,), Route("big", "big-model"), False, NOW),
    )
    assert [SessionStarted, RouteSelected] == kinds(events)
    selected = events[1]
    assert isinstance(selected, RouteSelected)
    assert (1_000_000, 32_000, 1_000_000, RouteReason.INITIAL) == (
        selected.capacity,
        selected.budget,
        selected.window,
        selected.reason,
    )
    assert [1, 2] == [e.originator_version for e in events]


def test_r19_start_with_unknown_provider_is_invalid_profile() -> None:
    """A route naming a provider that is not configured is rejected before anything is recorded."""
    state = SessionState()
    with pytest.raises(InvalidProfile, match="nope"):
        execute(
            state, StartSession(SESSION, RuntimeProfile(), (BIG,), Route("nope", "m"), False, NOW)
        )
    assert 0 == state.version


# --- R24: proactive token trimming at prepare ------------------------------------------------


def test_r24_prepare_over_budget_trims_oldest_turn_with_exact_counts() -> None:
    """71 tokens over a budget of 60: turn 1 (2 messages) is dropped, 60 tokens remain."""
    state = start(RuntimeProfile(max_context_tokens=60))
    append(state, *HISTORY)
    events = prepare(state)
    assert [TrimDecided, BreadcrumbInserted, HistoryTrimmed, RequestPrepared] == kinds(events)
    decided = events[0]
    assert isinstance(decided, TrimDecided)
    assert (View.CHAT, TrimTrigger.PREPARE, TrimReason.TOKEN_BUDGET) == (
        decided.view,
        decided.trigger,
        decided.reason,
    )
    assert (3, 2, 1, 2, 71, 60, 60) == (
        decided.first_kept_position,
        decided.dropped_messages,
        decided.dropped_turns,
        decided.kept_turns,
        decided.tokens_before,
        decided.tokens_after,
        decided.limit,
    )
    trimmed = events[2]
    assert isinstance(trimmed, HistoryTrimmed)
    assert (2, 2, TrimReason.TOKEN_BUDGET) == (
        trimmed.dropped_messages,
        trimmed.kept_turns,
        trimmed.reason,
    )
    assert [SYS, BC, *TURN2, *TURN3] == state.chat_view()
    prepared = events[3]
    assert isinstance(prepared, RequestPrepared)
    assert 60 == prepared.estimated_tokens


def test_r7_r24_prepare_drops_as_few_turns_as_possible() -> None:
    """One token less (59): dropping turn 1 leaves 60, so turns 1 and 2 go (4 messages, 32 left)."""
    state = start(RuntimeProfile(max_context_tokens=59))
    append(state, *HISTORY)
    decided = only(prepare(state), TrimDecided)
    assert isinstance(decided, TrimDecided)
    assert (4, 2, 1, 32) == (
        decided.dropped_messages,
        decided.dropped_turns,
        decided.kept_turns,
        decided.tokens_after,
    )
    assert [SYS, BC, *TURN3] == state.chat_view()


def test_r24_prepare_under_budget_records_only_the_request() -> None:
    """A history that fits its budget exactly (71) is sent untouched (R5)."""
    state = start(RuntimeProfile(max_context_tokens=71))
    append(state, *HISTORY)
    events = prepare(state)
    assert [RequestPrepared] == kinds(events)
    assert HISTORY == state.chat_view()


def test_r24_budget_trim_at_every_tool_loop_boundary() -> None:
    """A tool result that pushes the history over budget is trimmed at the next prepare (R24)."""
    state = start(RuntimeProfile(max_context_tokens=100))
    append(state, SYS, *TURN1, *TURN2, U("go"))
    assert [RequestPrepared] == kinds(prepare(state))
    append(state, *tool_loop("c1", "x" * 200))
    events = prepare(state)
    assert [TrimDecided, BreadcrumbInserted, HistoryTrimmed, RequestPrepared] == kinds(events)
    # The newest turn (the tool loop included) is kept whole (R3, R27).
    view = state.chat_view()
    assert [SYS, BC, U("go"), *to_chat_messages(tool_loop("c1", "x" * 200))] == view


@pytest.mark.parametrize("budget", [1, 20, 32, 45, 59, 60, 70, 71, 200])
def test_r7_r24_session_trim_equals_pure_trim_function(budget: int) -> None:
    """The session's token trim keeps what `trim_to_recent_turns` keeps, with the same tokens."""
    state = start(RuntimeProfile(max_context_tokens=budget))
    append(state, *HISTORY)
    expected = trim_to_recent_turns(HISTORY, budget)
    events = prepare(state)
    assert list(expected.history) == state.chat_view()
    if expected.trimmed:
        decided = only(events, TrimDecided)
        assert isinstance(decided, TrimDecided)
        assert (
            expected.dropped_messages,
            expected.dropped_turns,
            expected.kept_turns,
            expected.tokens_before,
            expected.tokens_after,
        ) == (
            decided.dropped_messages,
            decided.dropped_turns,
            decided.kept_turns,
            decided.tokens_before,
            decided.tokens_after,
        )
    else:
        assert [RequestPrepared] == kinds(events)


# BUG (reported to the lead): a token-budget trim acts on the provider-facing ChatMessage history
# (seed, "L'élagage du budget de jetons agit sur l'historique de travail ChatMessage"), and
# `trim_to_recent_turns` counts its dropped *ChatMessages*. The decider counts dropped log items
# (`SessionState.real_prefix`), so a dropped `ToolResults` with two results counts 1 instead of 2:
# HistoryTrimmed.dropped_messages is 4 here where the pure function (and the chat view) says 5.
def test_r32_token_trim_counts_dropped_provider_messages() -> None:
    """A token trim dropping a 2-result ToolResults counts 2 tool messages, like the pure trim."""
    two_calls = AssistantToolCalls(None, (ToolCall("c1", "t"), ToolCall("c2", "t")))
    two_results = ToolResults((ToolResult("c1", "x"), ToolResult("c2", "y")))
    state = start(RuntimeProfile(max_context_tokens=60))
    append(state, SYS, U("a" * 40), two_calls, two_results, A("b"), *TURN2, *TURN3)
    before = state.chat_view()
    expected = trim_to_recent_turns(before, 60)
    trimmed = only(prepare(state), HistoryTrimmed)
    assert isinstance(trimmed, HistoryTrimmed)
    assert list(expected.history) == state.chat_view()
    assert 5 == expected.dropped_messages
    assert expected.dropped_messages == trimmed.dropped_messages


# --- R12 / R18: the zero switch and the capacity check ---------------------------------------


def test_r12_zero_max_context_tokens_disables_proactive_trim() -> None:
    """max_context_tokens = 0: a history far over any budget is sent untouched if it fits."""
    state = start(RuntimeProfile(max_context_tokens=0), (ProviderProfile("p", "m", 1000),))
    append(state, *HISTORY)
    assert 0 == state.route.budget
    events = prepare(state)
    assert [RequestPrepared] == kinds(events)
    assert HISTORY == state.chat_view()


def test_r12_r18_zero_budget_still_rejects_a_request_over_capacity() -> None:
    """max_context_tokens = 0 and capacity 50: the 71-token request is rejected, nothing trimmed."""
    state = start(RuntimeProfile(max_context_tokens=0), (ProviderProfile("p", "m", 50),))
    append(state, *HISTORY)
    events = prepare(state)
    assert [RequestRejected] == kinds(events)
    rejected = events[0]
    assert isinstance(rejected, RequestRejected)
    assert (71, 50, 50, Purpose.TURN, 7) == (
        rejected.estimated_tokens,
        rejected.window,
        rejected.capacity,
        rejected.purpose,
        rejected.message_count,
    )
    assert "71" in rejected.detail
    assert "50" in rejected.detail
    assert HISTORY == state.chat_view()


def test_r18_newest_turn_over_window_is_trimmed_then_rejected() -> None:
    """Capacity 40: the old turn is dropped (budget); the rest (50) still exceeds 40: refused."""
    state = start(RuntimeProfile(), (ProviderProfile("p", "m", 40),))
    append(state, SYS, *TURN1, *TURN2)
    events = prepare(state)
    assert [TrimDecided, BreadcrumbInserted, HistoryTrimmed, RequestRejected] == kinds(events)
    rejected = events[-1]
    assert isinstance(rejected, RequestRejected)
    assert (5 + BREADCRUMB_TOKENS + 28, 40) == (rejected.estimated_tokens, rejected.window)


def test_r18_raising_the_proactive_target_cannot_make_an_oversized_request_fit() -> None:
    """A budget above the capacity is capped; the request over the window is still refused."""
    state = start(RuntimeProfile(max_context_tokens=10_000), (ProviderProfile("p", "m", 40),))
    append(state, U("x" * 400))  # 104 tokens, one turn
    events = prepare(state)
    assert [RequestRejected] == kinds(events)
    rejected = events[0]
    assert isinstance(rejected, RequestRejected)
    assert (104, 40) == (rejected.estimated_tokens, rejected.window)


def test_r18_final_summary_request_is_checked_too() -> None:
    """The final summary request is rejected the same way, recorded with purpose final_summary."""
    state = start(RuntimeProfile(max_context_tokens=0), (ProviderProfile("p", "m", 50),))
    append(state, *HISTORY)
    rejected = only(prepare(state, final_summary=True), RequestRejected)
    assert isinstance(rejected, RequestRejected)
    assert Purpose.FINAL_SUMMARY == rejected.purpose


def test_r18_final_summary_request_that_fits_is_prepared_with_its_purpose() -> None:
    """A final summary that fits is recorded as RequestPrepared(purpose=final_summary)."""
    state = start()
    append(state, *HISTORY)
    prepared = only(prepare(state, final_summary=True), RequestPrepared)
    assert isinstance(prepared, RequestPrepared)
    assert Purpose.FINAL_SUMMARY == prepared.purpose


def test_r18_tool_schemas_and_hooks_count_toward_the_estimate() -> None:
    """A 12-byte schema costs 3, a 4-byte hook 1 + 4 framing: 71 + 3 + 5 = 79 tokens."""
    schema = '{"name":"x"}'
    state = start(RuntimeProfile(), (ProviderProfile("p", "m", 79),))
    append(state, *HISTORY)
    prepared = only(prepare(state, (schema,), ("hook",)), RequestPrepared)
    assert isinstance(prepared, RequestPrepared)
    assert (79, 3, 5) == (prepared.estimated_tokens, prepared.tool_tokens, prepared.hook_tokens)


def test_r18_tool_schemas_and_hooks_can_push_a_request_over_the_window() -> None:
    """Capacity 78: the history (71) fits, but with the schema and the hook (79) it is refused."""
    schema = '{"name":"x"}'
    state = start(RuntimeProfile(), (ProviderProfile("p", "m", 78),))
    append(state, *HISTORY)
    events = prepare(state, (schema,), ("hook",))
    assert [RequestRejected] == kinds(events)
    rejected = events[0]
    assert isinstance(rejected, RequestRejected)
    assert (79, 78) == (rejected.estimated_tokens, rejected.window)


def test_r19_unknown_capacity_uses_the_32000_fallback_window() -> None:
    """No context_window: capacity None, window 32,000; a 32,001+ token request is refused."""
    state = start(RuntimeProfile(max_context_tokens=0), (ProviderProfile("p", "m"),))
    assert (None, None, 32_000) == (
        state.route.capacity,
        state.route.model_context_window,
        state.route.window,
    )
    append(state, U("x" * 4 * 32_000))  # 32,004 tokens
    rejected = only(prepare(state), RequestRejected)
    assert isinstance(rejected, RequestRejected)
    assert (None, 32_000, 32_004) == (
        rejected.capacity,
        rejected.window,
        rejected.estimated_tokens,
    )


def test_r17_r19_unknown_capacity_uses_max_context_tokens_as_the_window() -> None:
    """No context_window and max_context_tokens = 60: the window is 60, not 32,000 (R17)."""
    state = start(RuntimeProfile(max_context_tokens=60), (ProviderProfile("p", "m"),))
    assert (None, 60, 60) == (state.route.capacity, state.route.budget, state.route.window)
    append(state, U("x" * 400))  # 104 tokens, one turn: nothing to trim
    rejected = only(prepare(state), RequestRejected)
    assert isinstance(rejected, RequestRejected)
    assert (104, 60) == (rejected.estimated_tokens, rejected.window)


# --- R27a-R30: the turn limit ----------------------------------------------------------------


def test_r27a_turn_limit_applies_when_a_real_user_message_is_appended() -> None:
    """max_history_messages = 2: the third user message drops turn 1 in the same command."""
    state = start(RuntimeProfile(max_history_messages=2))
    append(state, SYS, *TURN1, *TURN2)
    events = append(state, U("e"))
    assert [MessageAppended, TrimDecided, BreadcrumbInserted, HistoryTrimmed] == kinds(events)
    decided = events[1]
    assert isinstance(decided, TrimDecided)
    assert (View.CONVERSATION, TrimTrigger.APPEND, TrimReason.TURN_LIMIT, 2, 2, 2, 3) == (
        decided.view,
        decided.trigger,
        decided.reason,
        decided.limit,
        decided.dropped_messages,
        decided.kept_turns,
        decided.first_kept_position,
    )
    trimmed = events[3]
    assert isinstance(trimmed, HistoryTrimmed)
    assert (2, 2, TrimReason.TURN_LIMIT) == (
        trimmed.dropped_messages,
        trimmed.kept_turns,
        trimmed.reason,
    )
    expected = [SYS, BC, *TURN2, U("e")]
    assert [Chat(m) for m in expected] == state.conversation_view()
    assert expected == state.chat_view()


def test_r27a_assistant_and_tool_appends_never_apply_the_turn_limit() -> None:
    """Only a real user message starts a turn, so only it can cross the limit."""
    state = start(RuntimeProfile(max_history_messages=1))
    append(state, U("a"))
    assert [MessageAppended] == kinds(append(state, A("b")))
    assert [MessageAppended] * 2 == kinds(append(state, *tool_loop("c1")))


def test_r27a_prepare_applies_the_turn_limit_too() -> None:
    """A state folded from appends only (no trim) is brought to the limit by prepare."""
    state = start(RuntimeProfile(max_history_messages=1))
    # Build the appends on a state without limit, then fold them into the limited one: the
    # fold records no trim, so the limit is only enforced by prepare.
    unlimited = start(RuntimeProfile(max_history_messages=10))
    for event in append(unlimited, *HISTORY):
        evolve(state, event)
    assert HISTORY == state.chat_view()
    events = prepare(state)
    assert [TrimDecided, BreadcrumbInserted, HistoryTrimmed, RequestPrepared] == kinds(events)
    decided = events[0]
    assert isinstance(decided, TrimDecided)
    assert (TrimTrigger.PREPARE, TrimReason.TURN_LIMIT, 4) == (
        decided.trigger,
        decided.reason,
        decided.dropped_messages,
    )
    assert [SYS, BC, *TURN3] == state.chat_view()


def test_r27a_chat_view_after_prepare_is_what_the_request_digest_names() -> None:
    """RequestPrepared.digest is the digest of the chat view right after prepare."""
    state = start(RuntimeProfile(max_context_tokens=60))
    append(state, *HISTORY)
    prepared = only(prepare(state), RequestPrepared)
    assert isinstance(prepared, RequestPrepared)
    view = state.chat_view()
    assert (request_digest(view), len(view)) == (prepared.digest, prepared.message_count)


def test_r28_tool_calls_and_results_use_no_turn_slot() -> None:
    """Limit 2: a turn with three tool loops and a carrier is still one turn; nothing is trimmed."""
    state = start(RuntimeProfile(max_history_messages=2))
    events = append(
        state,
        SYS,
        U("first"),
        *tool_loop("c1"),
        *tool_loop("c2"),
        U("[Tool results] carried"),
        *tool_loop("c3"),
        A("done"),
        U("second"),
    )
    assert [MessageAppended] * 11 == kinds(events)


def test_r28_turn_limit_drops_a_tool_loop_with_its_turn() -> None:
    """Limit 1: the old turn goes whole, its tool call and result together (4 items dropped)."""
    state = start(RuntimeProfile(max_history_messages=1))
    append(state, SYS, U("first"), *tool_loop("c1"), A("done"))
    events = append(state, U("second"))
    trimmed = only(events, HistoryTrimmed)
    assert isinstance(trimmed, HistoryTrimmed)
    assert (4, 1) == (trimmed.dropped_messages, trimmed.kept_turns)
    assert [Chat(SYS), Chat(BC), Chat(U("second"))] == state.conversation_view()


def test_r29_default_turn_limit_is_50() -> None:
    """Unset max_history_messages: 50 turns stay, the 51st user message drops the first turn."""
    state = start(RuntimeProfile())
    for i in range(50):
        assert [MessageAppended] == kinds(append(state, U(f"u{i}")))
    events = append(state, U("u50"))
    decided = only(events, TrimDecided)
    assert isinstance(decided, TrimDecided)
    assert (50, 50, 1) == (decided.limit, decided.kept_turns, decided.dropped_messages)
    assert U("u1") == state.chat_view()[1]


def test_r29_explicit_zero_keeps_the_newest_turn() -> None:
    """max_history_messages = 0 is authoritative and still keeps the newest complete turn."""
    state = start(RuntimeProfile(max_history_messages=0))
    append(state, SYS, *TURN1)
    events = append(state, U("c"))
    decided = only(events, TrimDecided)
    assert isinstance(decided, TrimDecided)
    assert (0, 1, 2) == (decided.limit, decided.kept_turns, decided.dropped_messages)
    assert [SYS, BC, U("c")] == state.chat_view()


def test_r2_tool_results_carrier_is_not_a_new_turn() -> None:
    """Limit 1: a '[Tool results]' user message continues the turn; nothing is trimmed."""
    state = start(RuntimeProfile(max_history_messages=1))
    events = append(state, U("q"), A("calling"), U("[Tool results] 42"))
    assert [MessageAppended] * 3 == kinds(events)


# --- R31-R33: the breadcrumb and HistoryTrimmed ------------------------------------------------


def test_r31_breadcrumb_never_stacks_after_several_trims() -> None:
    """Limit 1, then a token trim: one breadcrumb, right after the leading system messages."""
    state = start(RuntimeProfile(max_history_messages=2, max_context_tokens=30))
    append(state, S("one"), S("two"))
    for i in range(5):
        append(state, U(f"user {i}"), A(f"reply {i}"))
    append(state, *tool_loop("c9", "y" * 120))
    assert [2] == breadcrumb_positions(to_chat_messages(state.conversation_view()))
    decided = only(prepare(state), TrimDecided)  # a token trim on top of the turn-limit trims
    assert isinstance(decided, TrimDecided)
    assert TrimReason.TOKEN_BUDGET == decided.reason
    view = state.chat_view()
    assert [2] == breadcrumb_positions(view)
    assert U("user 4") == view[3]
    assert [RequestPrepared] == kinds(prepare(state))
    assert [2] == breadcrumb_positions(state.chat_view())


def test_r31_breadcrumb_goes_after_every_leading_system_message() -> None:
    """Three leading systems: the breadcrumb is the fourth message after a trim."""
    state = start(RuntimeProfile(max_history_messages=1))
    append(state, S("a"), S("b"), S("c"), *TURN1, *TURN2)
    assert [S("a"), S("b"), S("c"), BC, *TURN2] == state.chat_view()


def test_r31_user_message_with_breadcrumb_text_is_a_real_turn() -> None:
    """A real user message reading like the breadcrumb starts a turn and is counted when dropped."""
    state = start(RuntimeProfile(max_history_messages=1))
    append(state, SYS, U(BREADCRUMB_TEXT), A("ok"))
    events = append(state, U("next"))
    trimmed = only(events, HistoryTrimmed)
    assert isinstance(trimmed, HistoryTrimmed)
    assert (2, 1) == (trimmed.dropped_messages, trimmed.kept_turns)
    assert [SYS, BC, U("next")] == state.chat_view()


def test_r31_real_breadcrumb_text_message_counts_as_a_turn_for_the_limit() -> None:
    """Limit 1: appending a real user message with the breadcrumb text crosses the limit."""
    state = start(RuntimeProfile(max_history_messages=1))
    append(state, SYS, *TURN1)
    events = append(state, U(BREADCRUMB_TEXT))
    assert [MessageAppended, TrimDecided, BreadcrumbInserted, HistoryTrimmed] == kinds(events)
    view = state.chat_view()
    assert [SYS, BC, U(BREADCRUMB_TEXT)] == view
    assert [1] == breadcrumb_positions(view)


def test_r32_replaced_breadcrumb_is_not_counted_as_dropped() -> None:
    """The second trim drops U2 and A2 (2 messages), not the earlier breadcrumb."""
    state = start(RuntimeProfile(max_history_messages=1))
    append(state, SYS, *TURN1, *TURN2)
    events = append(state, U("e"))
    trimmed = only(events, HistoryTrimmed)
    assert isinstance(trimmed, HistoryTrimmed)
    assert 2 == trimmed.dropped_messages
    decided = only(events, TrimDecided)
    assert isinstance(decided, TrimDecided)
    # Before: SYS 5 + BC 17 + TURN2 28 + U("e") 5; after: SYS + BC + U("e").
    assert (55, 27) == (decided.tokens_before, decided.tokens_after)


def test_r32_late_system_messages_of_dropped_turns_are_kept_and_not_counted() -> None:
    """A system message inside a dropped turn moves behind the leading ones (R4, R9), uncounted."""
    state = start(RuntimeProfile(max_history_messages=1))
    append(state, SYS, U("a"), S("late"), A("b"))
    events = append(state, U("c"))
    trimmed = only(events, HistoryTrimmed)
    assert isinstance(trimmed, HistoryTrimmed)
    assert 2 == trimmed.dropped_messages
    assert [SYS, S("late"), BC, U("c")] == state.chat_view()


# --- R34: the legacy loop ---------------------------------------------------------------------


def test_r34_legacy_turn_limit_records_the_decision_without_breadcrumb_or_notice() -> None:
    """Legacy: the turn limit records TrimDecided only; no breadcrumb, no HistoryTrimmed."""
    state = start(RuntimeProfile(max_history_messages=1), legacy=True)
    append(state, SYS, *TURN1)
    events = append(state, U("c"))
    assert [MessageAppended, TrimDecided] == kinds(events)
    decided = events[1]
    assert isinstance(decided, TrimDecided)
    assert (View.CHAT, TrimReason.TURN_LIMIT, 2) == (
        decided.view,
        decided.reason,
        decided.dropped_messages,
    )
    assert [SYS, U("c")] == state.chat_view()
    assert [Chat(SYS), Chat(U("c"))] == state.conversation_view()


def test_r34_legacy_token_budget_trim_is_still_visible() -> None:
    """Legacy: a token-budget trim still inserts the breadcrumb and emits HistoryTrimmed."""
    state = start(RuntimeProfile(max_context_tokens=60), legacy=True)
    append(state, *HISTORY)
    events = prepare(state)
    assert [TrimDecided, BreadcrumbInserted, HistoryTrimmed, RequestPrepared] == kinds(events)
    assert [SYS, BC, *TURN2, *TURN3] == state.chat_view()


# --- R25-R26: overflow recovery ---------------------------------------------------------------


def test_r25_overflow_trims_to_two_thirds_of_the_estimate() -> None:
    """71 tokens: target floor(71 * 2 / 3) = 47; dropping turns 1 and 2 leaves 32."""
    state = start()
    append(state, *HISTORY)
    events = execute(state, RecoverFromOverflow("maximum context length exceeded", NOW))
    assert [
        OverflowReported,
        TrimDecided,
        BreadcrumbInserted,
        HistoryTrimmed,
        OverflowRecovered,
    ] == kinds(events)
    reported, decided, _, trimmed, recovered = events
    assert isinstance(reported, OverflowReported)
    assert (71, 47) == (reported.estimated_tokens, reported.target_tokens)
    assert isinstance(decided, TrimDecided)
    assert (TrimTrigger.OVERFLOW, TrimReason.TOKEN_BUDGET, 47, 32) == (
        decided.trigger,
        decided.reason,
        decided.limit,
        decided.tokens_after,
    )
    assert isinstance(trimmed, HistoryTrimmed)
    assert TrimReason.TOKEN_BUDGET == trimmed.reason
    assert isinstance(recovered, OverflowRecovered)
    assert (71, 32) == (recovered.tokens_before, recovered.tokens_after)
    assert [SYS, BC, *TURN3] == state.chat_view()
    first = events[0].originator_version
    assert [first, first + 1, first + 2, first + 3, first + 4] == [
        e.originator_version for e in events
    ]


def test_r25_overflow_target_ignores_the_model_capacity() -> None:
    """Capacity 60 (below the 71-token history): the target is still 47, from the estimate."""
    state = start(RuntimeProfile(max_context_tokens=0), (ProviderProfile("p", "m", 60),))
    append(state, *HISTORY)
    reported = only(execute(state, RecoverFromOverflow("too many tokens", NOW)), OverflowReported)
    assert isinstance(reported, OverflowReported)
    assert 47 == reported.target_tokens


def test_r25_overflow_with_one_turn_left_is_unrecoverable() -> None:
    """One turn: nothing can be trimmed; OverflowUnrecoverable says so and the view is unchanged."""
    state = start()
    append(state, SYS, *TURN1)
    events = execute(state, RecoverFromOverflow("prompt is too long", NOW))
    assert [OverflowReported, OverflowUnrecoverable] == kinds(events)
    unrecoverable = events[1]
    assert isinstance(unrecoverable, OverflowUnrecoverable)
    assert "one turn" in unrecoverable.detail
    assert "system prompt" not in unrecoverable.detail
    assert [SYS, *TURN1] == state.chat_view()


def test_r25_unrecoverable_overflow_names_the_system_prompt_floor() -> None:
    """A 1,004-token system prompt over a target of 672: the detail names the system prompt."""
    state = start()
    append(state, S("s" * 4000), U("hi"))
    events = execute(state, RecoverFromOverflow("prompt is too long", NOW))
    unrecoverable = only(events, OverflowUnrecoverable)
    assert isinstance(unrecoverable, OverflowUnrecoverable)
    reported = only(events, OverflowReported)
    assert isinstance(reported, OverflowReported)
    assert (1009, 672) == (reported.estimated_tokens, reported.target_tokens)
    assert "system prompt" in unrecoverable.detail
    assert "1,004" in unrecoverable.detail


# --- R19: route selection ---------------------------------------------------------------------

PROVIDERS = (
    ProviderProfile("wide", "w-1", 200_000, {"fast": ("w-mini", 500)}),
    ProviderProfile("narrow", "n-1", 50),
)


def test_r19_select_route_resolves_capacity_budget_and_window_together() -> None:
    """Switching to a 50-token model makes 50 the capacity, budget and window of the route."""
    state = start(RuntimeProfile(), PROVIDERS)
    append(state, *HISTORY)
    events = execute(state, SelectRoute(Route("narrow", "n-1"), RouteReason.EXPLICIT, NOW))
    selected = only(events, RouteSelected)
    assert isinstance(selected, RouteSelected)
    assert (50, 50, 50, RouteReason.EXPLICIT) == (
        selected.capacity,
        selected.budget,
        selected.window,
        selected.reason,
    )
    prepared = only(prepare(state), RequestPrepared)
    assert isinstance(prepared, RequestPrepared)
    assert (Route("narrow", "n-1"), 50, 32) == (
        prepared.route,
        prepared.budget,
        prepared.estimated_tokens,
    )


def test_r19_alias_route_uses_the_alias_window() -> None:
    """Route(wide, fast) takes the alias's 500-token window, not the profile model's 200,000."""
    state = start(RuntimeProfile(), PROVIDERS)
    selected = only(
        execute(state, SelectRoute(Route("wide", "fast"), RouteReason.CLASSIFIER_HINT, NOW)),
        RouteSelected,
    )
    assert isinstance(selected, RouteSelected)
    assert (500, 500, RouteReason.CLASSIFIER_HINT) == (
        selected.capacity,
        selected.budget,
        selected.reason,
    )
    assert "w-mini" == state.route.model


def test_r19_unknown_model_has_unknown_capacity() -> None:
    """A model the profile does not configure has capacity None: never borrow another's window."""
    state = start(RuntimeProfile(), PROVIDERS)
    selected = only(
        execute(state, SelectRoute(Route("narrow", "other"), RouteReason.EXPLICIT, NOW)),
        RouteSelected,
    )
    assert isinstance(selected, RouteSelected)
    assert (None, 32_000, 32_000) == (selected.capacity, selected.budget, selected.window)
    assert state.route.model_context_window is None


def test_r19_unknown_provider_is_rejected_and_nothing_changes() -> None:
    """SelectRoute to an unconfigured provider raises InvalidProfile; the route stays."""
    state = start(RuntimeProfile(), PROVIDERS)
    version = state.version
    with pytest.raises(InvalidProfile, match="ghost"):
        execute(state, SelectRoute(Route("ghost", "g"), RouteReason.EXPLICIT, NOW))
    assert (version, Route("wide", "w-1")) == (state.version, state.route.route)


# --- R38: tool results are bounded when recorded ----------------------------------------------


def test_r38_oversized_tool_results_are_truncated_at_append() -> None:
    """max_tool_result_chars = 30: a 90-character result is truncated, original_chars = 90."""
    state = start(RuntimeProfile(max_tool_result_chars=30))
    append(state, U("q"), AssistantToolCalls(None, (ToolCall("c1", "t"),)))
    output = "0123456789" * 9
    events = append(state, ToolResults((ToolResult("c1", output, "t"),)))
    appended = only(events, MessageAppended)
    assert isinstance(appended, MessageAppended)
    assert ToolResults((ToolResult("c1", truncate_tool_result(output, 30), "t"),)) == (
        appended.message
    )
    assert 90 == appended.original_chars


def test_r38_chat_tool_envelope_is_truncated_inside_the_envelope() -> None:
    """A Chat tool message keeps its tool_call_id; its inner content is truncated (R39)."""
    state = start(RuntimeProfile(max_tool_result_chars=30), legacy=True)
    output = "x" * 100
    events = append(state, Chat(ChatMessage.tool(tool_envelope("c7", output))))
    appended = only(events, MessageAppended)
    assert isinstance(appended, MessageAppended)
    assert isinstance(appended.message, Chat)
    parsed = parse_tool_envelope(appended.message.message.content)
    assert ("c7", truncate_tool_result(output, 30)) == parsed
    assert 100 == appended.original_chars


def test_r38_zero_means_no_bound() -> None:
    """max_tool_result_chars = 0: a 200,000-character result is recorded whole."""
    state = start(RuntimeProfile(max_tool_result_chars=0))
    result = ToolResults((ToolResult("c1", "z" * 200_000),))
    appended = only(append(state, result), MessageAppended)
    assert isinstance(appended, MessageAppended)
    assert (result, None) == (appended.message, appended.original_chars)


def test_r38_default_bound_is_50000_characters() -> None:
    """By default a 50,000-character result is kept, a 50,001-character one truncated."""
    state = start()
    kept = ToolResults((ToolResult("c1", "k" * 50_000),))
    cut = ToolResults((ToolResult("c2", "k" * 50_001),))
    first, second = (only(append(state, m), MessageAppended) for m in (kept, cut))
    assert isinstance(first, MessageAppended)
    assert isinstance(second, MessageAppended)
    assert (kept, None, 50_001) == (first.message, first.original_chars, second.original_chars)


def test_r38_short_tool_results_and_other_messages_are_untouched() -> None:
    """A user message longer than the bound is not a tool result: no truncation."""
    state = start(RuntimeProfile(max_tool_result_chars=5))
    appended = only(append(state, U("a long user message")), MessageAppended)
    assert isinstance(appended, MessageAppended)
    assert (Chat(U("a long user message")), None) == (appended.message, appended.original_chars)


# --- E11: bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["just text", 42, None, ToolCall("c1", "t")])
def test_e11_appending_a_non_message_is_invalid_and_records_nothing(bad: object) -> None:
    """Anything that is not a (Conversation/Chat) message raises InvalidMessage; no event."""
    state = start()
    version = state.version
    with pytest.raises(InvalidMessage):
        execute(state, AppendMessage(bad, NOW))  # type: ignore[arg-type]
    assert version == state.version


@pytest.mark.parametrize("crumb", [BC, Chat(BC)])
def test_r31_appending_the_breadcrumb_is_invalid(crumb: ChatMessage | Chat) -> None:
    """The breadcrumb is inserted by turnledger only: appending one raises InvalidMessage."""
    state = start()
    with pytest.raises(InvalidMessage, match="breadcrumb"):
        append(state, crumb)
    assert [] == state.chat_view()


# --- R36-R37, E5: orphan sweep ----------------------------------------------------------------


def test_r36_sweep_removes_a_tool_call_without_result() -> None:
    """A trailing AssistantToolCalls with no result is removed from both views, and recorded."""
    state = start()
    append(state, SYS, *TURN1, U("go"), AssistantToolCalls(None, (ToolCall("c1", "t"),)))
    events = execute(state, SweepOrphans(NOW))
    swept = only(events, OrphansSwept)
    assert isinstance(swept, OrphansSwept)
    assert ((4,), ("c1",), 1) == (swept.positions, swept.orphan_tool_call_ids, swept.removed)
    assert [SYS, *TURN1, U("go")] == state.chat_view()
    assert [Chat(m) for m in (SYS, *TURN1, U("go"))] == state.conversation_view()


def test_r36_sweep_removes_a_tool_result_without_call() -> None:
    """A ToolResults answering no call is removed."""
    state = start()
    append(state, U("go"), ToolResults((ToolResult("ghost", "boo"),)), A("done"))
    swept = only(execute(state, SweepOrphans(NOW)), OrphansSwept)
    assert isinstance(swept, OrphansSwept)
    assert ((1,), ("ghost",)) == (swept.positions, swept.orphan_tool_call_ids)
    assert [U("go"), A("done")] == state.chat_view()


def test_r36_sweep_keeps_the_assistant_text_of_an_unanswered_call() -> None:
    """An unanswered call with text becomes a plain assistant message with that text."""
    state = start()
    append(state, U("go"), AssistantToolCalls("let me look", (ToolCall("c1", "t"),)))
    swept = only(execute(state, SweepOrphans(NOW)), OrphansSwept)
    assert isinstance(swept, OrphansSwept)
    assert ((), ("c1",)) == (swept.positions, swept.orphan_tool_call_ids)
    assert [U("go"), A("let me look")] == state.chat_view()


def test_r37_sweep_of_a_consistent_history_records_nothing() -> None:
    """A consistent history (tool loops paired) gives no OrphansSwept."""
    state = start(RuntimeProfile(max_history_messages=1))
    append(state, SYS, U("a"), *tool_loop("c1"), U("b"), *tool_loop("c2"), A("ok"))
    assert [] == execute(state, SweepOrphans(NOW))


# --- E1, E4, E12: events are the record -------------------------------------------------------


def test_e1_versions_are_contiguous_within_and_across_commands() -> None:
    """Every event gets the next version: 1, 2, 3, ... with no gap, whatever the command."""
    rec = recorder(RuntimeProfile(max_history_messages=1, max_context_tokens=40))
    for command in (
        AppendMessage(SYS, NOW),
        AppendMessage(U("a" * 40), NOW),
        AppendMessage(A("b" * 40), NOW),
        AppendMessage(U("c" * 40), NOW),
        PrepareRequest.from_texts((), (), False, NOW),
        RecoverFromOverflow("too many tokens", NOW),
        SelectRoute(Route("big", "big-model"), RouteReason.EXPLICIT, NOW),
    ):
        rec.run(command)
    assert list(range(1, len(rec.events) + 1)) == [e.originator_version for e in rec.events]
    assert {SESSION} == {e.originator_id for e in rec.events}
    assert rec.state.version == len(rec.events)


def test_e4_e12_views_rebuild_from_events_at_every_position() -> None:
    """Folding the events (all, or any prefix) rebuilds the views the live state had then."""
    rec = recorder(RuntimeProfile(max_history_messages=2, max_context_tokens=50))
    snapshots: dict[int, tuple[list[ChatMessage], list[ConversationMessage]]] = {}
    for message in [*HISTORY, *tool_loop("c1", "r", ("/img.png",)), U("[IMAGE:/x.png]")]:
        rec.run(AppendMessage(message, NOW))
        snapshots[rec.state.version] = (rec.state.chat_view(), rec.state.conversation_view())
        rec.run(PrepareRequest.from_texts((), (), False, NOW))
        snapshots[rec.state.version] = (rec.state.chat_view(), rec.state.conversation_view())
    for version, (chat, conversation) in snapshots.items():
        folded = refold(rec.events[:version])
        assert (chat, conversation) == (folded.chat_view(), folded.conversation_view())


def test_r21_r22_chat_tokens_track_images_and_current_turn_attachments() -> None:
    """User images cost 1,600; tool attachments only while their turn is the current one."""
    state = start()
    append(state, U("see [IMAGE:/x.png]"), *tool_loop("c1", "r", ("/shot.png",)))
    tool_cost = estimate_history_tokens(to_chat_messages(tool_loop("c1", "r")))
    with_attachment = 4 + 1 + IMAGE_TOKEN_ESTIMATE + tool_cost + IMAGE_TOKEN_ESTIMATE
    assert with_attachment == state.chat_tokens()
    append(state, U("next"))
    assert with_attachment - IMAGE_TOKEN_ESTIMATE + 5 == state.chat_tokens()
    assert estimate_history_tokens(state.chat_view()) == state.chat_tokens()


# --- properties (Hypothesis) ------------------------------------------------------------------


def _appendable(history: Sequence[ConversationMessage]) -> list[ConversationMessage]:
    """The history without synthetic breadcrumbs (only turnledger may insert those)."""
    return [i for i in history if not (isinstance(i, Chat) and i.message.synthetic)]


def _no_split_pairs(history: Sequence[ChatMessage]) -> bool:
    calls: set[str] = set()
    results: set[str] = set()
    for m in history:
        if m.role == "assistant" and (envelope := parse_assistant_envelope(m.content)):
            calls.update(c.id for c in envelope[1])
        elif m.role == "tool" and (parsed := parse_tool_envelope(m.content)):
            results.add(parsed[0])
    return calls == results


@settings(max_examples=examples(150), deadline=None)
@given(conversation_histories(max_turns=7), st.integers(min_value=0, max_value=4))
def test_r9_r27a_incremental_turn_limit_equals_one_pure_trim(
    history: list[ConversationMessage], limit: int
) -> None:
    """Trimming at every user append ends where one `trim_conversation_to_recent_turns` ends."""
    items = _appendable(history)
    state = start(RuntimeProfile(max_history_messages=limit))
    events = append(state, *items)
    expected = trim_conversation_to_recent_turns(items, limit)
    assert list(expected.history) == state.conversation_view()
    notices = [e for e in events if isinstance(e, HistoryTrimmed)]
    assert expected.dropped_messages == sum(n.dropped_messages for n in notices)
    if notices:
        assert expected.kept_turns == notices[-1].kept_turns
    assert estimate_history_tokens(state.chat_view()) == state.chat_tokens()


@settings(max_examples=examples(150), deadline=None)
@given(conversation_histories(max_turns=7), st.integers(min_value=1, max_value=3000))
def test_r7_r24_prepare_keeps_what_the_pure_token_trim_keeps(
    history: list[ConversationMessage], budget: int
) -> None:
    """The prepared chat view equals `trim_to_recent_turns` of the chat history, tokens too."""
    items = _appendable(history)
    state = start(RuntimeProfile(max_context_tokens=budget))
    append(state, *items)
    chat = to_chat_messages(items)
    expected = trim_to_recent_turns(chat, budget)
    events = prepare(state)
    view = state.chat_view()
    assert list(expected.history) == view
    prepared = events[-1]
    assert isinstance(prepared, RequestPrepared)
    assert (expected.tokens_after, estimate_history_tokens(view)) == (
        prepared.estimated_tokens,
        state.chat_tokens(),
    )
    assert _no_split_pairs(view)
    assert 1 >= len(breadcrumb_positions(view))
    if breadcrumb_positions(view):
        assert [leading_system_count(view)] == breadcrumb_positions(view)


@settings(max_examples=examples(100), deadline=None)
@given(conversation_histories(min_turns=1, max_turns=7))
def test_r25_overflow_recovery_reaches_two_thirds_unless_one_turn_is_left(
    history: list[ConversationMessage],
) -> None:
    """After recovery the estimate is at most floor(estimate * 2 / 3), or one turn is left."""
    items = _appendable(history)
    state = start()
    append(state, *items)
    before = state.chat_tokens()
    events = execute(state, RecoverFromOverflow("context length exceeded", NOW))
    reported = events[0]
    assert isinstance(reported, OverflowReported)
    assert (before, before * 2 // 3) == (reported.estimated_tokens, reported.target_tokens)
    if isinstance(events[-1], OverflowRecovered):
        decided = only(events, TrimDecided)
        assert isinstance(decided, TrimDecided)
        assert decided.tokens_after <= decided.limit or 1 == decided.kept_turns
        assert estimate_history_tokens(state.chat_view()) == decided.tokens_after
    else:
        assert [OverflowReported, OverflowUnrecoverable] == kinds(events)
    assert _no_split_pairs(state.chat_view())


@st.composite
def _histories_with_orphans(draw: st.DrawFn) -> list[ConversationMessage]:
    """Consistent histories with some tool calls or results deleted (an external edit)."""
    items = _appendable(draw(conversation_histories(min_turns=1, max_turns=6)))
    out: list[ConversationMessage] = []
    for item in items:
        if isinstance(item, AssistantToolCalls | ToolResults) and draw(st.booleans()):
            if isinstance(item, ToolResults) and len(item.results) > 1 and draw(st.booleans()):
                out.append(ToolResults(item.results[1:]))  # one result lost, the others kept
            continue
        out.append(item)
    return out


@settings(max_examples=examples(150), deadline=None)
@given(_histories_with_orphans(), st.integers(min_value=1, max_value=2000))
def test_r36_e5_sweep_equals_the_pure_sweep_and_keeps_the_estimate_exact(
    items: list[ConversationMessage], budget: int
) -> None:
    """SweepOrphans leaves the views `sweep_conversation_orphans` / `sweep_orphans` give; later
    trims still pair every call with its result and the running estimate stays exact."""
    rec = recorder(RuntimeProfile(max_context_tokens=budget))
    for item in items:
        rec.run(AppendMessage(item, NOW))
    rec.run(SweepOrphans(NOW))
    assert list(sweep_conversation_orphans(items).history) == rec.state.conversation_view()
    assert list(sweep_orphans(to_chat_messages(items)).history) == rec.state.chat_view()
    assert estimate_history_tokens(rec.state.chat_view()) == rec.state.chat_tokens()
    assert [] == rec.run(SweepOrphans(NOW))  # R37: a swept history is consistent
    rec.run(PrepareRequest.from_texts((), (), False, NOW))
    view = rec.state.chat_view()
    assert _no_split_pairs(view)
    assert estimate_history_tokens(view) == rec.state.chat_tokens()
    folded = refold(rec.events)
    assert (view, rec.state.conversation_view()) == (
        folded.chat_view(),
        folded.conversation_view(),
    )
