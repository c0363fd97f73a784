"""Event-sourced sessions through the public store API (R12, R18-R19, R24-R27a, R31-R34, R38,
E1-E5, E11).

Every test runs on every backend: memory, SQLite and PostgreSQL (`store_url` fixture). The token
numbers come from the R20 estimate: ``S("sys")`` costs 5, a 40-byte message 14, ``U("e")`` /
``A("f")`` 5 each, the breadcrumb 17, so the standard history costs 71.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from uuid import uuid4

import pytest

from tests.backends import Target
from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.errors import (
    ConcurrencyConflict,
    ContextWindowExceeded,
    InvalidMessage,
    InvalidProfile,
    SessionNotFound,
)
from turnledger.domain.estimate import estimate_history_tokens
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
    parse_tool_envelope,
    to_chat_messages,
    tool_envelope,
)
from turnledger.domain.truncate import truncate_tool_result
from turnledger.store.backend import retry_on_conflict
from turnledger.store.session import Session, Store, open_store

S = ChatMessage.system
U = ChatMessage.user
A = ChatMessage.assistant
BC = ChatMessage.breadcrumb()

SYS = S("sys")
TURN1 = [U("a" * 40), A("b" * 40)]
TURN2 = [U("c" * 40), A("d" * 40)]
TURN3 = [U("e"), A("f")]
HISTORY = [SYS, *TURN1, *TURN2, *TURN3]  # 71 tokens

BIG = ProviderProfile("big", "big-model", 1_000_000)
PROVIDERS = (
    ProviderProfile("wide", "w-1", 200_000, {"fast": ("w-mini", 500)}),
    ProviderProfile("narrow", "n-1", 50),
)


# --- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture
def store_url(target: Target) -> str:
    """A store URL that a second `open_store` reaches too, on every backend (conftest's
    ``target``: named memory store, SQLite file, PostgreSQL schema)."""
    return target.url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as opened:
        yield opened


def new_session(
    store: Store,
    profile: RuntimeProfile | None = None,
    providers: Sequence[ProviderProfile] = (BIG,),
    route: Route | None = None,
    *,
    legacy: bool = False,
) -> Session:
    return store.start_session(
        profile=profile or RuntimeProfile(), providers=providers, route=route, legacy=legacy
    )


def append_all(session: Session, *messages: ConversationMessage | ChatMessage) -> None:
    for message in messages:
        session.append(message)


def kinds(events: Sequence[DomainEvent]) -> list[type[DomainEvent]]:
    return [type(e) for e in events]


def of_kind(events: Sequence[DomainEvent], kind: type[DomainEvent]) -> list[DomainEvent]:
    return [e for e in events if isinstance(e, kind)]


def tool_loop(call_id: str, output: str = "out") -> list[ConversationMessage]:
    return [
        AssistantToolCalls(None, (ToolCall(call_id, "shell", "{}"),)),
        ToolResults((ToolResult(call_id, output, "shell"),)),
    ]


# --- R24, R27a: proactive trimming at prepare ------------------------------------------------


def test_r24_prepare_request_trims_over_budget_with_exact_counts(store: Store) -> None:
    """Budget 60: turn 1 (2 messages) is dropped, the request costs 60 tokens; all recorded."""
    session = new_session(store, RuntimeProfile(max_context_tokens=60))
    append_all(session, *HISTORY)
    request = session.prepare_request()
    assert [SYS, BC, *TURN2, *TURN3] == request.messages
    assert (60, 60, 1_000_000, 1_000_000) == (
        request.estimated_tokens,
        request.budget,
        request.capacity,
        request.model_context_window,
    )
    tail = session.events()[-4:]
    assert [TrimDecided, BreadcrumbInserted, HistoryTrimmed, RequestPrepared] == kinds(tail)
    decided, _, trimmed, _ = tail
    assert isinstance(decided, TrimDecided)
    assert (TrimTrigger.PREPARE, 2, 1, 2, 71, 60, 60) == (
        decided.trigger,
        decided.dropped_messages,
        decided.dropped_turns,
        decided.kept_turns,
        decided.tokens_before,
        decided.tokens_after,
        decided.limit,
    )
    assert isinstance(trimmed, HistoryTrimmed)
    assert (2, 2, TrimReason.TOKEN_BUDGET) == (
        trimmed.dropped_messages,
        trimmed.kept_turns,
        trimmed.reason,
    )


def test_r24_prepare_under_budget_sends_the_history_untouched(store: Store) -> None:
    """Budget 71: nothing is trimmed; only RequestPrepared is recorded (R5)."""
    session = new_session(store, RuntimeProfile(max_context_tokens=71))
    append_all(session, *HISTORY)
    version = session.version
    request = session.prepare_request()
    assert (HISTORY, 71) == (request.messages, request.estimated_tokens)
    assert [RequestPrepared] == kinds(session.events()[version:])


def test_r27a_chat_view_equals_the_request_until_the_next_append(store: Store) -> None:
    """After prepare_request the chat view is the request; the next append extends it."""
    session = new_session(store, RuntimeProfile(max_context_tokens=40, max_history_messages=2))
    append_all(session, *HISTORY, *tool_loop("c1", "x" * 60))
    request = session.prepare_request()
    assert request.messages == session.chat_view()
    assert estimate_history_tokens(request.messages) == request.estimated_tokens
    session.append(A("done"))
    assert [*request.messages, A("done")] == session.chat_view()


def test_r27a_turn_limit_applies_on_append_of_a_real_user_message(store: Store) -> None:
    """Limit 2: the third real user message trims turn 1 in the same append."""
    session = new_session(store, RuntimeProfile(max_history_messages=2))
    append_all(session, SYS, *TURN1, *TURN2)
    recorded = session.append(U("e"))
    assert [MessageAppended, TrimDecided, BreadcrumbInserted, HistoryTrimmed] == kinds(recorded)
    assert [Chat(m) for m in (SYS, BC, *TURN2, U("e"))] == session.conversation_view()
    assert recorded == session.events()[-4:]


def test_r28_r29_turn_limit_counts_turns_not_rows(store: Store) -> None:
    """Limit 1 with tool loops: the whole old turn goes; tool messages take no slot (R28)."""
    session = new_session(store, RuntimeProfile(max_history_messages=1))
    append_all(session, SYS, U("one"), *tool_loop("c1"), *tool_loop("c2"), A("ok"))
    assert [] == of_kind(session.events(), TrimDecided)
    session.append(U("two"))
    trimmed = of_kind(session.events(), HistoryTrimmed)
    assert 1 == len(trimmed)
    notice = trimmed[0]
    assert isinstance(notice, HistoryTrimmed)
    assert (6, 1) == (notice.dropped_messages, notice.kept_turns)
    assert [SYS, BC, U("two")] == session.chat_view()


def test_r29_explicit_zero_keeps_the_newest_turn(store: Store) -> None:
    """max_history_messages = 0 keeps the newest complete turn."""
    session = new_session(store, RuntimeProfile(max_history_messages=0))
    append_all(session, SYS, *TURN1, U("q"), *tool_loop("c1"))
    expected = [SYS, BC, U("q"), *to_chat_messages(tool_loop("c1"))]
    assert expected == session.prepare_request().messages


# --- R12, R18, R19: the capacity check ----------------------------------------------------------


def test_r12_zero_budget_disables_trimming_but_r18_still_rejects(store: Store) -> None:
    """max_context_tokens = 0, capacity 50: no trim, ContextWindowExceeded names 71 and 50."""
    session = new_session(
        store, RuntimeProfile(max_context_tokens=0), (ProviderProfile("p", "m", 50),)
    )
    append_all(session, *HISTORY)
    with pytest.raises(ContextWindowExceeded) as caught:
        session.prepare_request()
    error = caught.value
    assert (71, 50) == (error.estimated_tokens, error.context_window)
    assert "71" in str(error)
    assert "50" in str(error)
    last = session.events()[-1]
    assert isinstance(last, RequestRejected)
    assert (71, 50, Purpose.TURN) == (last.estimated_tokens, last.window, last.purpose)
    assert [] == of_kind(session.events(), TrimDecided)
    assert HISTORY == session.chat_view()


def test_r12_zero_budget_sends_an_over_budget_history_that_fits_capacity(store: Store) -> None:
    """max_context_tokens = 0, capacity 1000: the 71-token history is sent whole."""
    session = new_session(
        store, RuntimeProfile(max_context_tokens=0), (ProviderProfile("p", "m", 1000),)
    )
    append_all(session, *HISTORY)
    request = session.prepare_request()
    assert (HISTORY, 0) == (request.messages, request.budget)


def test_r18_final_summary_is_rejected_and_recorded(store: Store) -> None:
    """The final summary request gets the same capacity check (purpose final_summary)."""
    session = new_session(store, RuntimeProfile(), (ProviderProfile("p", "m", 40),))
    append_all(session, SYS, U("x" * 400))
    with pytest.raises(ContextWindowExceeded):
        session.prepare_request(final_summary=True)
    last = session.events()[-1]
    assert isinstance(last, RequestRejected)
    assert (Purpose.FINAL_SUMMARY, 109, 40) == (last.purpose, last.estimated_tokens, last.window)


def test_r18_tool_schemas_and_hooks_count_toward_the_capacity(store: Store) -> None:
    """A schema object (12 JSON bytes: 3 tokens) and a hook (1 + 4) take 71 to 79 tokens."""
    schema = {"name": "x"}
    fits = new_session(store, RuntimeProfile(), (ProviderProfile("p", "m", 79),))
    append_all(fits, *HISTORY)
    assert 79 == fits.prepare_request(tools=[schema], hooks=["hook"]).estimated_tokens
    over = new_session(store, RuntimeProfile(), (ProviderProfile("p", "m", 78),))
    append_all(over, *HISTORY)
    assert 71 == over.prepare_request().estimated_tokens
    with pytest.raises(ContextWindowExceeded) as caught:
        over.prepare_request(tools=['{"name":"x"}'], hooks=["hook"])
    assert (79, 78) == (caught.value.estimated_tokens, caught.value.context_window)


def test_r18_non_text_hooks_and_unserialisable_tools_are_invalid(store: Store) -> None:
    """A hook that is not text, or a tool schema that is not JSON, is InvalidMessage; no event."""
    session = new_session(store)
    append_all(session, U("hi"))
    version = session.version
    with pytest.raises(InvalidMessage, match="hooks"):
        session.prepare_request(hooks=[42])  # type: ignore[list-item]
    with pytest.raises(InvalidMessage, match="tools"):
        session.prepare_request(tools=[object()])
    assert version == session.version


def test_r19_unknown_capacity_sends_no_model_context_window(store: Store) -> None:
    """No context_window: capacity and model_context_window are None, the window is 32,000."""
    session = new_session(store, RuntimeProfile(max_context_tokens=0), (ProviderProfile("p", "m"),))
    session.append(U("hi"))
    request = session.prepare_request()
    assert (None, None) == (request.capacity, request.model_context_window)
    session.append(U("x" * 4 * 32_000))  # 32,004 tokens on its own
    with pytest.raises(ContextWindowExceeded) as caught:
        session.prepare_request()
    assert 32_000 == caught.value.context_window


def test_r17_r19_unknown_capacity_with_max_context_tokens_uses_it_as_window(store: Store) -> None:
    """No context_window, max_context_tokens = 100: a 104-token single turn is refused at 100."""
    session = new_session(
        store, RuntimeProfile(max_context_tokens=100), (ProviderProfile("p", "m"),)
    )
    session.append(U("x" * 400))
    with pytest.raises(ContextWindowExceeded) as caught:
        session.prepare_request()
    assert (104, 100) == (caught.value.estimated_tokens, caught.value.context_window)


# --- R19: route selection -----------------------------------------------------------------------


def test_r19_select_route_changes_capacity_budget_and_window(store: Store) -> None:
    """Switching to a 50-token model trims the next request to 50 and reports capacity 50."""
    session = new_session(store, RuntimeProfile(), PROVIDERS)
    append_all(session, *HISTORY)
    assert 200_000 == session.prepare_request().model_context_window
    session.select_route(Route("narrow", "n-1"))
    request = session.prepare_request()
    assert (Route("narrow", "n-1"), 50, 50, 50, [SYS, BC, *TURN3]) == (
        request.route,
        request.capacity,
        request.budget,
        request.model_context_window,
        request.messages,
    )


def test_r19_alias_route_and_classifier_hint_are_recorded(store: Store) -> None:
    """Route(wide, fast) resolves the alias window 500; RouteSelected records classifier_hint."""
    session = new_session(store, RuntimeProfile(), PROVIDERS)
    recorded = session.select_route(Route("wide", "fast"), reason="classifier_hint")
    assert [RouteSelected] == kinds(recorded)
    selected = recorded[0]
    assert isinstance(selected, RouteSelected)
    assert (Route("wide", "fast"), 500, 500, RouteReason.CLASSIFIER_HINT) == (
        selected.route,
        selected.capacity,
        selected.budget,
        selected.reason,
    )
    assert selected == session.events()[-1]
    session.append(U("hi"))
    assert 500 == session.prepare_request().capacity


def test_r19_unknown_model_has_unknown_capacity(store: Store) -> None:
    """A model the provider does not configure: capacity None, not the profile's 200,000."""
    session = new_session(store, RuntimeProfile(), PROVIDERS)
    session.select_route(Route("wide", "w-2"))
    session.append(U("hi"))
    request = session.prepare_request()
    assert (None, None, 32_000) == (request.capacity, request.model_context_window, request.budget)


def test_r19_unknown_provider_or_reason_is_invalid_profile(store: Store) -> None:
    """An unconfigured provider or an unknown reason raises InvalidProfile; nothing is recorded."""
    session = new_session(store, RuntimeProfile(), PROVIDERS)
    version = session.version
    with pytest.raises(InvalidProfile, match="ghost"):
        session.select_route(Route("ghost", "g"))
    with pytest.raises(InvalidProfile, match="reason"):
        session.select_route(Route("wide", "w-1"), reason="whim")
    with pytest.raises(InvalidProfile, match="initial"):
        session.select_route(Route("wide", "w-1"), reason="initial")
    assert (version, Route("wide", "w-1")) == (session.version, session.route)


# BUG (reported to the lead; turnledger/store/session.py): `Session._run` answers any
# TurnledgerError from `execute` with `self._reload()`, which reads `self._uuid`; for a session
# that is being started the state has no session_id yet, so `_uuid`'s `assert` fires and the
# caller gets a bare AssertionError instead of InvalidProfile (with `python -O`, `_load(None)`).
# The decider raised InvalidProfile before anything was recorded, so there is nothing to reload.
def test_r19_start_session_with_unknown_provider_is_invalid_profile(store: Store) -> None:
    """start_session with a route to an unconfigured provider raises InvalidProfile."""
    with pytest.raises(InvalidProfile, match="ghost"):
        store.start_session(
            profile=RuntimeProfile(), providers=PROVIDERS, route=Route("ghost", "g")
        )
    assert [] == store.sessions()


# --- R31-R33: the breadcrumb and HistoryTrimmed reach subscribers --------------------------------


def test_r31_breadcrumb_appears_once_after_the_leading_systems_after_many_trims(
    store: Store,
) -> None:
    """Turn-limit and token trims, again and again: exactly one breadcrumb, after the systems."""
    session = new_session(store, RuntimeProfile(max_history_messages=2, max_context_tokens=45))
    append_all(session, S("one"), S("two"))
    for i in range(6):
        append_all(session, U(f"user {i}" * 3), A(f"reply {i}" * 3))
        session.prepare_request()
    view = session.chat_view()
    assert [2] == [i for i, m in enumerate(view) if is_breadcrumb(m)]
    conversation = to_chat_messages(session.conversation_view())
    assert [2] == [i for i, m in enumerate(conversation) if is_breadcrumb(m)]


def test_r31_real_user_message_with_breadcrumb_text_is_a_real_turn(store: Store) -> None:
    """A real user message equal to the breadcrumb text counts as a turn and is kept as such."""
    session = new_session(store, RuntimeProfile(max_history_messages=1))
    append_all(session, SYS, *TURN1)
    session.append(U(BREADCRUMB_TEXT))
    view = session.chat_view()
    assert [SYS, BC, U(BREADCRUMB_TEXT)] == view
    assert [True, False] == [m.synthetic for m in view[1:]]


def test_r33_subscribers_get_history_trimmed_after_commit(store: Store) -> None:
    """A subscriber sees each HistoryTrimmed, already in session.events(), and nothing else."""
    session = new_session(store, RuntimeProfile(max_history_messages=1))
    seen: list[tuple[DomainEvent, bool]] = []
    store.subscribe(lambda event: seen.append((event, event in session.events())))
    append_all(session, SYS, *TURN1, *TURN2)
    assert 1 == len(seen)
    notice, committed = seen[0]
    assert isinstance(notice, HistoryTrimmed)
    assert (2, 1, TrimReason.TURN_LIMIT, True) == (
        notice.dropped_messages,
        notice.kept_turns,
        notice.reason,
        committed,
    )
    assert of_kind(session.events(), HistoryTrimmed) == [notice]


def test_r33_unsubscribe_stops_notifications(store: Store) -> None:
    """After the returned unsubscribe function is called, no further notices arrive."""
    session = new_session(store, RuntimeProfile(max_history_messages=1))
    seen: list[DomainEvent] = []
    unsubscribe = store.subscribe(seen.append)
    append_all(session, *TURN1, *TURN2)
    unsubscribe()
    append_all(session, *TURN3)
    assert 1 == len(seen)
    assert 2 == len(of_kind(session.events(), HistoryTrimmed))


def test_r33_a_raising_subscriber_does_not_break_the_session(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A subscriber that raises is logged; the trim stays recorded, other subscribers still run."""
    session = new_session(store, RuntimeProfile(max_history_messages=1))

    def broken(event: DomainEvent) -> None:
        raise RuntimeError("dashboard down")

    seen: list[DomainEvent] = []
    store.subscribe(broken)
    store.subscribe(seen.append)
    with caplog.at_level(logging.ERROR, logger="turnledger"):
        append_all(session, *TURN1, *TURN2)
    assert 1 == len(seen)
    assert 1 == len(of_kind(session.events(), HistoryTrimmed))
    assert any("dashboard down" in (r.exc_text or "") for r in caplog.records)
    session.append(A("still works"))
    assert A("still works") == session.chat_view()[-1]


def test_r33_token_budget_trims_reach_subscribers_too(store: Store) -> None:
    """A proactive token trim at prepare is announced with reason token_budget."""
    session = new_session(store, RuntimeProfile(max_context_tokens=60))
    seen: list[DomainEvent] = []
    store.subscribe(seen.append)
    append_all(session, *HISTORY)
    session.prepare_request()
    assert [TrimReason.TOKEN_BUDGET] == [e.reason for e in seen if isinstance(e, HistoryTrimmed)]


# --- R34: the legacy loop -----------------------------------------------------------------------


def test_r34_legacy_turn_limit_is_logged_not_announced(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Legacy: TrimDecided + a WARNING log; no breadcrumb, no HistoryTrimmed, no subscriber call."""
    session = new_session(store, RuntimeProfile(max_history_messages=1), legacy=True)
    seen: list[DomainEvent] = []
    store.subscribe(seen.append)
    with caplog.at_level(logging.WARNING, logger="turnledger"):
        append_all(session, SYS, *TURN1, *TURN2)
    events = session.events()
    decided = of_kind(events, TrimDecided)
    assert 1 == len(decided)
    assert isinstance(decided[0], TrimDecided)
    assert (View.CHAT, TrimReason.TURN_LIMIT) == (decided[0].view, decided[0].reason)
    assert ([], [], []) == (
        of_kind(events, BreadcrumbInserted),
        of_kind(events, HistoryTrimmed),
        seen,
    )
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert 1 == len(warnings)
    assert session.id in warnings[0].getMessage()
    assert "turn limit" in warnings[0].getMessage()
    assert [SYS, *TURN2] == session.chat_view()


def test_r34_legacy_token_budget_trims_stay_visible(store: Store) -> None:
    """Legacy: a token-budget trim still inserts the breadcrumb and announces HistoryTrimmed."""
    session = new_session(store, RuntimeProfile(max_context_tokens=60), legacy=True)
    seen: list[DomainEvent] = []
    store.subscribe(seen.append)
    append_all(session, *HISTORY)
    assert [SYS, BC, *TURN2, *TURN3] == session.prepare_request().messages
    assert 1 == len(seen)


# --- R25-R26: overflow recovery -----------------------------------------------------------------


def test_r25_recover_from_overflow_trims_to_two_thirds(store: Store) -> None:
    """71 tokens: target 47, turns 1 and 2 dropped (32 left), True returned, all recorded."""
    session = new_session(store)
    append_all(session, *HISTORY)
    assert session.recover_from_overflow("This model's maximum context length is 8192 tokens")
    tail = session.events()[-5:]
    assert [
        OverflowReported,
        TrimDecided,
        BreadcrumbInserted,
        HistoryTrimmed,
        OverflowRecovered,
    ] == kinds(tail)
    decided = tail[1]
    assert isinstance(decided, TrimDecided)
    assert (47, 32, TrimTrigger.OVERFLOW) == (decided.limit, decided.tokens_after, decided.trigger)
    assert decided.tokens_after <= 71 * 2 // 3
    assert [SYS, BC, *TURN3] == session.chat_view()


def test_r25_non_overflow_error_returns_false_and_records_nothing(store: Store) -> None:
    """A rate-limit error is not an overflow: False, and no event."""
    session = new_session(store)
    append_all(session, *HISTORY)
    version = session.version
    assert not session.recover_from_overflow(RuntimeError("429 rate limit reached"))
    assert version == session.version
    assert HISTORY == session.chat_view()


def test_r25_one_turn_left_is_unrecoverable(store: Store) -> None:
    """One turn: False, and OverflowUnrecoverable is recorded; the view is unchanged."""
    session = new_session(store)
    append_all(session, SYS, *TURN1)
    assert not session.recover_from_overflow("prompt is too long")
    assert [OverflowReported, OverflowUnrecoverable] == kinds(session.events()[-2:])
    assert [SYS, *TURN1] == session.chat_view()


def test_r25_unrecoverable_detail_names_the_system_prompt(store: Store) -> None:
    """A system prompt (1,004 tokens) alone over the target: the detail says so."""
    session = new_session(store)
    append_all(session, S("s" * 4000), U("hi"))
    assert not session.recover_from_overflow("input is too long for this model")
    last = session.events()[-1]
    assert isinstance(last, OverflowUnrecoverable)
    assert "system prompt" in last.detail


def test_r26_wrapped_overflow_errors_are_recognised(store: Store) -> None:
    """An SDK error raised `from` a provider overflow error is still an overflow."""

    class ProviderError(Exception):
        pass

    session = new_session(store)
    append_all(session, *HISTORY)
    inner = ValueError("Context length exceeded: 9000 > 8192")
    wrapped = ProviderError("400 Bad Request")
    wrapped.__cause__ = inner  # what `raise ProviderError(...) from inner` records
    assert session.recover_from_overflow(wrapped)
    reported = of_kind(session.events(), OverflowReported)
    assert 1 == len(reported)
    assert isinstance(reported[0], OverflowReported)
    assert "400 Bad Request" in reported[0].error


# --- R38: tool result bound ----------------------------------------------------------------------


def test_r38_tool_results_are_truncated_when_recorded(store: Store) -> None:
    """max_tool_result_chars = 30: both a ToolResults and a Chat tool envelope are bounded."""
    session = new_session(store, RuntimeProfile(max_tool_result_chars=30))
    output = "0123456789" * 9
    session.append(U("q"))
    session.append(AssistantToolCalls(None, (ToolCall("c1", "t"), ToolCall("c2", "t"))))
    session.append(ToolResults((ToolResult("c1", output, "t"),)))
    session.append(ChatMessage.tool(tool_envelope("c2", output * 2)))
    appended = of_kind(session.events(), MessageAppended)[-2:]
    assert [90, 180] == [e.original_chars for e in appended if isinstance(e, MessageAppended)]
    tools = [m for m in session.chat_view() if m.role == "tool"]
    assert [
        ("c1", truncate_tool_result(output, 30)),
        ("c2", truncate_tool_result(output * 2, 30)),
    ] == [parse_tool_envelope(m.content) for m in tools]


def test_r38_zero_disables_the_bound(store: Store) -> None:
    """max_tool_result_chars = 0: the result is recorded whole, original_chars None."""
    session = new_session(store, RuntimeProfile(max_tool_result_chars=0))
    result = ToolResults((ToolResult("c1", "z" * 120_000),))
    session.append(result)
    appended = session.events()[-1]
    assert isinstance(appended, MessageAppended)
    assert (result, None) == (appended.message, appended.original_chars)


# --- E1, E3: one command, one transaction -------------------------------------------------------


def test_e1_e3_events_of_one_command_share_one_save(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append that trims saves its four events in one backend.append, versions contiguous."""
    session = new_session(store, RuntimeProfile(max_history_messages=1))
    append_all(session, SYS, *TURN1)
    calls: list[list[int]] = []
    real_append = store.backend.append

    def spy(session_id, events, **kwargs):  # type: ignore[no-untyped-def]
        calls.append([e.originator_version for e in events])
        return real_append(session_id, events, **kwargs)

    monkeypatch.setattr(store.backend, "append", spy)
    before = session.version
    session.append(U("next"))
    session.prepare_request()
    assert [[before + 1, before + 2, before + 3, before + 4], [before + 5]] == calls
    versions = [e.originator_version for e in session.events()]
    assert list(range(1, len(versions) + 1)) == versions


def test_e3_concurrent_writers_conflict_and_the_loser_retries(store: Store) -> None:
    """Two Session objects on one id: the second append conflicts, then retries and wins."""
    first = new_session(store)
    first.append(U("hello"))
    second = store.restore(first.id)
    first.append(A("from first"))
    with pytest.raises(ConcurrencyConflict):
        second.append(A("from second"))
    assert [U("hello"), A("from first")] == second.chat_view()  # the loser reloaded itself
    retry_on_conflict(lambda: second.append(A("from second")))
    expected = [U("hello"), A("from first"), A("from second")]
    assert expected == second.chat_view()
    assert expected == store.restore(first.id).chat_view()
    with pytest.raises(ConcurrencyConflict):
        first.append(A("stale"))


def test_e3_starting_an_existing_session_id_conflicts(store: Store) -> None:
    """start_session with an id that already exists raises ConcurrencyConflict."""
    session = new_session(store)
    with pytest.raises(ConcurrencyConflict):
        store.start_session(session_id=session.id)
    assert [session.id] == store.sessions()


# --- E5: restore ---------------------------------------------------------------------------------


def _busy_session(store: Store, *, legacy: bool, turn_limit: int | None) -> Session:
    """A session with token trims, overflow recovery, a route switch, images and tool loops."""
    session = new_session(
        store,
        RuntimeProfile(max_context_tokens=120, max_history_messages=turn_limit),
        PROVIDERS,
        legacy=legacy,
    )
    append_all(session, SYS, U("look [IMAGE:/x.png]"), *tool_loop("c1", "r" * 80))
    for i in range(4):
        append_all(session, U(f"question {i} " * 4), *tool_loop(f"t{i}", "o" * 50), A("ok"))
        session.prepare_request()
    session.select_route(Route("wide", "fast"), reason="classifier_hint")
    append_all(session, S("late rule"), U("more"), A("fine"))
    session.recover_from_overflow("too many tokens")
    session.append(U("[Tool results] carried"))
    return session


@pytest.mark.parametrize("legacy", [False, True])
def test_e5_restore_from_a_new_store_object_rebuilds_identical_views(
    store_url: str, legacy: bool
) -> None:
    """A second store on the same database restores both views and the estimate exactly."""
    with open_store(store_url) as first_store:
        live = _busy_session(first_store, legacy=legacy, turn_limit=None)
        with open_store(store_url) as second_store:
            restored = second_store.restore(live.id)
            assert (live.chat_view(), live.conversation_view()) == (
                restored.chat_view(),
                restored.conversation_view(),
            )
            assert (live.version, live.route) == (restored.version, restored.route)
            assert live.state.chat_tokens() == restored.state.chat_tokens()
            assert [live.id] == second_store.sessions()


# Regression: events read back once carried plain `str` where the live events carry StrEnums
# (cattrs dispatched StrEnum fields to the codec's `str` hook), and `evolve` compares
# `view is View.CONVERSATION`, so a restore replayed every turn-limit trim as a chat trim.
def test_e5_restore_after_turn_limit_trims_rebuilds_identical_views(store_url: str) -> None:
    """A structured session trimmed by the turn limit restores the same conversation view."""
    with open_store(store_url) as first_store:
        live = _busy_session(first_store, legacy=False, turn_limit=2)
        assert of_kind(live.events(), TrimDecided)
        with open_store(store_url) as second_store:
            restored = second_store.restore(live.id)
            assert (live.chat_view(), live.conversation_view()) == (
                restored.chat_view(),
                restored.conversation_view(),
            )
            assert live.state.chat_tokens() == restored.state.chat_tokens()


def test_e9_events_read_back_keep_their_enum_types(store: Store) -> None:
    """session.events() returns enum members (not plain strings) in every enum field."""
    session = new_session(store, RuntimeProfile(max_history_messages=1, max_context_tokens=20))
    append_all(session, *TURN1, *TURN2)
    session.select_route(Route("big", "big-model"), reason="classifier_hint")
    session.prepare_request()
    found: dict[str, set[type]] = {}
    for event in session.events():
        for field in ("view", "trigger", "reason", "purpose"):
            if hasattr(event, field):
                found.setdefault(f"{type(event).__name__}.{field}", set()).add(
                    type(getattr(event, field))
                )
    assert {
        "RouteSelected.reason": {RouteReason},
        "TrimDecided.view": {View},
        "TrimDecided.trigger": {TrimTrigger},
        "TrimDecided.reason": {TrimReason},
        "BreadcrumbInserted.view": {View},
        "HistoryTrimmed.reason": {TrimReason},
        "RequestPrepared.purpose": {Purpose},
    } == found


def test_e5_restore_with_snapshots_equals_live(store_url: str) -> None:
    """With a snapshot every 5 events, a restore from a new store object equals the live views."""
    with open_store(store_url, snapshot_interval=5) as first_store:
        live = _busy_session(first_store, legacy=True, turn_limit=1)
        with open_store(store_url, snapshot_interval=5) as second_store:
            restored = second_store.restore(live.id)
            assert (live.chat_view(), live.conversation_view(), live.version) == (
                restored.chat_view(),
                restored.conversation_view(),
                restored.version,
            )
            restored.append(U("after restore"))
            assert U("after restore") == restored.chat_view()[-1]


def test_e5_restore_sweeps_a_tool_call_without_result(store_url: str) -> None:
    """A crash after the tool call: restore records OrphansSwept; the log keeps the call."""
    with open_store(store_url) as first_store:
        live = new_session(first_store)
        orphan = AssistantToolCalls(None, (ToolCall("c9", "shell"),))
        append_all(live, SYS, *TURN1, U("go"), orphan)
        with open_store(store_url) as second_store:
            restored = second_store.restore(live.id)
            swept = restored.events()[-1]
            assert isinstance(swept, OrphansSwept)
            assert (("c9",), 1) == (swept.orphan_tool_call_ids, swept.removed)
            assert [SYS, *TURN1, U("go")] == restored.chat_view()
            assert [Chat(m) for m in (SYS, *TURN1, U("go"))] == restored.conversation_view()
            appended = [e.message for e in restored.events() if isinstance(e, MessageAppended)]
            assert orphan in appended
            again = second_store.restore(live.id)
            assert restored.version == again.version  # R37: nothing more to sweep


def test_e5_restore_sweeps_a_tool_result_without_call(store: Store) -> None:
    """A ToolResults answering no call is removed from the views on restore, and recorded."""
    live = new_session(store)
    stray = ToolResults((ToolResult("ghost", "boo"),))
    append_all(live, U("go"), stray, A("done"))
    restored = store.restore(live.id)
    swept = restored.events()[-1]
    assert isinstance(swept, OrphansSwept)
    assert ("ghost",) == swept.orphan_tool_call_ids
    assert [U("go"), A("done")] == restored.chat_view()
    assert stray in [e.message for e in restored.events() if isinstance(e, MessageAppended)]


def test_e5_restore_of_a_consistent_session_records_nothing(store: Store) -> None:
    """R37: restoring a session whose tool pairs are intact appends no event."""
    live = new_session(store)
    append_all(live, U("go"), *tool_loop("c1"), A("done"))
    assert live.version == store.restore(live.id).version


# --- E11: bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("session_id", [str(uuid4()), "not-a-uuid"])
def test_e11_restoring_an_unknown_session_is_session_not_found(
    store: Store, session_id: str
) -> None:
    """An id with no session (or no UUID at all) raises SessionNotFound."""
    with pytest.raises(SessionNotFound):
        store.restore(session_id)


@pytest.mark.parametrize("bad", ["plain text", {"role": "user", "content": "hi"}, BC, Chat(BC)])
def test_e11_invalid_appends_raise_invalid_message_and_record_nothing(
    store: Store, bad: object
) -> None:
    """A non-message or the breadcrumb itself raises InvalidMessage; the session is unchanged."""
    session = new_session(store)
    session.append(U("hi"))
    version = session.version
    with pytest.raises(InvalidMessage):
        session.append(bad)  # type: ignore[arg-type]
    assert (version, [U("hi")]) == (session.version, session.chat_view())
    assert version == len(session.events())


def test_e2_sessions_lists_every_session_oldest_first(store: Store) -> None:
    """store.sessions() lists the started sessions in order; streams are separate (E2)."""
    one = new_session(store)
    two = new_session(store)
    one.append(U("for one"))
    assert [one.id, two.id] == store.sessions()
    assert [] == of_kind(two.events(), MessageAppended)
