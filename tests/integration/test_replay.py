"""Audit, replay and what-if on real stores: the timeline, time travel, request digests,
`verify` and its tamper evidence (R18, R31-R34, R37, E2, E4-E6, E11, E12).

Sessions are recorded through the public store API, on an in-memory store and on a SQLite file;
the tamper tests edit the SQLite file with the sqlite3 module behind the store's back.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import attrs
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turnledger as tl
from tests.backends import Target
from tests.properties import examples
from tests.strategies import conversation_histories
from turnledger.domain.budget import Compaction, ProviderProfile, Route, RuntimeProfile
from turnledger.domain.decider import request_digest
from turnledger.domain.errors import (
    ContextWindowExceeded,
    SessionNotFound,
    UnansweredToolCalls,
)
from turnledger.domain.events import (
    EVENT_TYPES,
    BreadcrumbInserted,
    DomainEvent,
    HistoryCleared,
    HistoryTrimmed,
    MessageAppended,
    MessagePopped,
    OrphansSwept,
    OverflowRecovered,
    OverflowReported,
    OverflowUnrecoverable,
    Purpose,
    RequestPrepared,
    RequestRejected,
    RouteReason,
    RouteSelected,
    SessionForgotten,
    SessionStarted,
    TrimDecided,
    TrimReason,
    TrimTrigger,
    UsageRecorded,
    View,
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
from turnledger.replay.audit import Rule, Violation, verify
from turnledger.replay.timeline import (
    InvalidPosition,
    requests,
    session_summaries,
    state_at,
    summarize,
    timeline,
    timeline_jsonl,
    views_at,
)
from turnledger.replay.whatif import what_if
from turnledger.store.packing import open_envelope
from turnledger.store.session import Session, Store, open_store

OPENAI = ProviderProfile("openai", "gpt-4o", 128_000)
ANTHROPIC = ProviderProfile("anthropic", "claude", 200_000)
OPAQUE = ProviderProfile("opaque", "mystery")  # capacity unknown (R17, R19)
PROVIDERS = (OPENAI, ANTHROPIC, OPAQUE)
PROFILE = RuntimeProfile(max_context_tokens=700, max_history_messages=4)
TOOLS = ({"name": "search", "parameters": {"type": "object"}},)
HOOKS = ("Be brief.",)

View_ = tuple[list[ChatMessage], list[ConversationMessage]]


# --- recording ------------------------------------------------------------------------------


class Live:
    """Drives a session through the public API and captures both views after each command."""

    def __init__(self, store: Store, session: Session) -> None:
        self.store = store
        self.session = session
        self.captured: dict[int, View_] = {}
        self.capture()

    def capture(self) -> None:
        s = self.session
        self.captured[s.version] = (s.chat_view(), s.conversation_view())

    def append(self, message: ChatMessage | ConversationMessage) -> None:
        self.session.append(message)
        self.capture()

    def prepare(self, **kwargs: Any) -> None:
        with contextlib.suppress(ContextWindowExceeded):  # recorded as RequestRejected (R18)
            self.session.prepare_request(TOOLS, HOOKS, **kwargs)
        self.capture()

    def tool_turn(self, n: int) -> None:
        self.append(ChatMessage.user(f"question {n}: " + "why " * 40))
        self.prepare()
        call = ToolCall(f"call_{n}", "search", '{"q": "why"}')
        self.append(AssistantToolCalls("Let me look.", (call,)))
        images = ("/tmp/plot.png",) if n % 3 == 0 else ()
        self.append(ToolResults((ToolResult(f"call_{n}", "result " * 80, "search", images),)))
        self.prepare()
        self.append(ChatMessage.assistant(f"answer {n}: " + "because " * 15))


def record_agent(store: Store) -> Live:
    """A structured agent session that produces every kind of event but a rejection."""
    live = Live(store, store.start_session(PROFILE, PROVIDERS, Route("openai", "gpt-4o")))
    live.append(ChatMessage.system("You are a careful agent."))
    for n in range(6):
        live.tool_turn(n)
    live.session.select_route(Route("anthropic", "claude"), reason="classifier_hint")
    live.capture()
    live.session.recover_from_overflow("maximum context length exceeded")
    live.capture()
    live.prepare(final_summary=True)
    # A dangling tool call, then a restore: the orphan sweep records what it removes (E5).
    live.append(AssistantToolCalls(None, (ToolCall("call_x", "search", "{}"),)))
    live.session = store.restore(live.session.id)
    live.capture()
    live.tool_turn(6)
    return live


def record_refusals(store: Store) -> Live:
    """A session with a rejected request and an unrecoverable overflow (R18, R25)."""
    live = Live(
        store,
        store.start_session(
            RuntimeProfile(max_context_tokens=100), PROVIDERS, Route("opaque", "mystery")
        ),
    )
    live.append(ChatMessage.user("long " * 200))
    live.prepare()
    live.session.recover_from_overflow("prompt is too long")
    live.capture()
    return live


def record_legacy(store: Store) -> Live:
    """A legacy session whose turn limit trims silently and whose budget trims visibly (R34)."""
    live = Live(
        store,
        store.start_session(
            RuntimeProfile(max_context_tokens=100, max_history_messages=2),
            PROVIDERS,
            legacy=True,
        ),
    )
    for n in range(6):
        # Small turns meet the turn limit first; the large fourth one the token budget.
        live.append(ChatMessage.user(f"q{n} " + "word " * (60 if n == 3 else 5)))
        live.prepare()
        live.append(ChatMessage.assistant(f"a{n} " + "word " * 5))
    return live


@pytest.fixture
def store(target: Target) -> Iterator[Store]:
    """A fresh store on every backend: memory, SQLite and PostgreSQL (conftest's ``target``)."""
    with open_store(target.url) as opened:
        yield opened


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "x.db"


def open_sqlite(path: Path, **options: Any) -> Store:
    return open_store(f"sqlite:///{path}", **options)


def event_types(events: list[DomainEvent]) -> set[str]:
    return {type(e).__name__ for e in events}


# --- timeline (E6) ----------------------------------------------------------------------------

T = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
SID = UUID("00000000-0000-4000-8000-0000000000aa")
STAMP: dict[str, Any] = {"originator_id": SID, "originator_version": 7, "timestamp": T}


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            SessionStarted(**STAMP, profile=RuntimeProfile(max_context_tokens=8_000),
                           providers=(OPENAI,), route=Route("openai", "gpt-4o"), legacy=False),
            "session started (structured) on gpt-4o via openai: turn limit 50, "
            "max_context_tokens 8,000",
        ),
        (
            MessageAppended(**STAMP, position=3, message=Chat(ChatMessage.user("What is it?"))),
            "appended user: 'What is it?' (7 tokens)",
        ),
        (
            MessageAppended(**STAMP, position=3, message=Chat(ChatMessage.user("x" * 100))),
            "appended user: '" + "x" * 39 + "…' (29 tokens)",
        ),
        (
            MessageAppended(
                **STAMP, position=4,
                message=AssistantToolCalls("ok", (ToolCall("c1", "search", "{}"),)),
            ),
            "appended assistant 'ok' calling search (23 tokens)",
        ),
        (
            MessageAppended(
                **STAMP, position=5, original_chars=80_000,
                message=ToolResults((ToolResult("c1", "found", "search", ("/a.png",)),)),
            ),
            "appended 1 tool result, 1 image: search 'found' (1,614 tokens); tool result "
            "truncated from 80,000 characters (R38)",
        ),
        (
            RouteSelected(**STAMP, route=Route("anthropic", "claude"), capacity=200_000,
                          budget=32_000, window=200_000, reason=RouteReason.EXPLICIT),
            "route → anthropic/claude (capacity 200,000, budget 32,000): explicit",
        ),
        (
            RouteSelected(**STAMP, route=Route("opaque", "mystery"), capacity=None,
                          budget=0, window=32_000, reason=RouteReason.CLASSIFIER_HINT),
            "route → opaque/mystery (capacity unknown, window 32,000, proactive trimming off): "
            "classifier_hint",
        ),
        (
            TrimDecided(**STAMP, view=View.CHAT, trigger=TrimTrigger.PREPARE,
                        reason=TrimReason.TOKEN_BUDGET, first_kept_position=420,
                        dropped_messages=412, dropped_turns=3, kept_turns=2,
                        tokens_before=18_204, tokens_after=7_950, limit=8_000),
            "dropped 3 turns (412 messages, 18,204 → 7,950 tokens): token budget 8,000; "
            "2 turns kept in the chat view, before a request (R24, R27a)",
        ),
        (
            TrimDecided(**STAMP, view=View.CONVERSATION, trigger=TrimTrigger.APPEND,
                        reason=TrimReason.TURN_LIMIT, first_kept_position=9,
                        dropped_messages=4, dropped_turns=1, kept_turns=1,
                        tokens_before=90, tokens_after=40, limit=1),
            "dropped 1 turn (4 messages, 90 → 40 tokens): turn limit 1 turn; 1 turn kept in "
            "the conversation view, on append (R27a)",
        ),
        (
            BreadcrumbInserted(**STAMP, view=View.CHAT, before_position=420),
            "breadcrumb inserted before log position 420 (chat view, R31)",
        ),
        (
            HistoryTrimmed(**STAMP, dropped_messages=412, kept_turns=2,
                           reason=TrimReason.TOKEN_BUDGET),
            "HistoryTrimmed sent to clients: 412 messages dropped, 2 turns kept "
            "(token_budget, R32-R33)",
        ),
        (  # issue 35: a notice says what the trim did to the context
            HistoryTrimmed(**STAMP, dropped_messages=4, kept_turns=2,
                           reason=TrimReason.TOKEN_BUDGET, tokens_before=8_200,
                           tokens_after=4_900, budget=8_000),
            "HistoryTrimmed sent to clients: 4 messages dropped, 2 turns kept, 8,200 → 4,900 "
            "tokens, budget 8,000 (token_budget, R32-R33)",
        ),
        (
            UsageRecorded(**STAMP, request_position=7, digest="ab", estimated_tokens=7_950,
                          api="anthropic", input_tokens=8_120, cache_read_tokens=6_000,
                          cache_write_tokens=1_900, output_tokens=210),
            "provider billed the request at position 7: 8,120 input tokens (6,000 read from "
            "its cache, 1,900 written to it), 210 output; estimated 7,950 (anthropic, issue 35)",
        ),
        (
            RequestPrepared(**STAMP, purpose=Purpose.TURN, route=Route("openai", "gpt-4o"),
                            capacity=128_000, budget=8_000, window=128_000,
                            estimated_tokens=7_950, message_count=14, digest="ab"),
            "request prepared: 14 messages, ~7,950 tokens of 128,000 (gpt-4o via openai)",
        ),
        (
            RequestPrepared(**STAMP, purpose=Purpose.FINAL_SUMMARY,
                            route=Route("openai", "gpt-4o"), capacity=128_000, budget=8_000,
                            window=128_000, estimated_tokens=7_950, message_count=14,
                            digest="ab", tool_tokens=300, hook_tokens=40),
            "final-summary request prepared: 14 messages, ~7,950 tokens incl. 300 tool + 40 "
            "hook tokens of 128,000 (gpt-4o via openai)",
        ),
        (
            RequestRejected(**STAMP, purpose=Purpose.TURN, route=Route("opaque", "mystery"),
                            capacity=None, window=100, estimated_tokens=260, message_count=1,
                            detail="request needs about 260 tokens"),
            "request rejected: request needs about 260 tokens",
        ),
        (
            OverflowReported(**STAMP, error="maximum context length is 8192",
                             estimated_tokens=9_000, target_tokens=6_000),
            "provider overflow at ~9,000 tokens, trimming to 6,000 (R25): "
            "'maximum context length is 8192'",
        ),
        (
            OverflowRecovered(**STAMP, tokens_before=9_000, tokens_after=5_500),
            "overflow recovered: 9,000 → 5,500 tokens; the request is retried",
        ),
        (
            OverflowUnrecoverable(**STAMP, detail="only one turn is left"),
            "overflow unrecoverable: only one turn is left",
        ),
        (
            OrphansSwept(**STAMP, positions=(4, 5), orphan_tool_call_ids=("c1", "c2"),
                         removed=2),
            "orphan sweep removed 2 messages (tool call ids c1, c2) (R36, E5)",
        ),
        (
            MessagePopped(**STAMP, position=7, message=Chat(ChatMessage.user("oops"))),
            "popped user: 'oops' at log position 7 (it stays in the log)",
        ),
        (
            HistoryCleared(**STAMP, next_position=9, removed=8),
            "history cleared: 8 messages left the views (the log keeps them; the next message "
            "is at log position 9)",
        ),
        (
            SessionForgotten(**STAMP, reason="erasure request"),
            "session forgotten (erasure request): its data key was destroyed, its content "
            "erased",
        ),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, DomainEvent) else "",
)
def test_e6_timeline_summary_of_each_event_type(event: DomainEvent, expected: str) -> None:
    """Each event type gets a one-line summary that says what happened and why (E6)."""
    assert expected == summarize(event)


def test_e6_timeline_covers_a_recorded_session(store: Store) -> None:
    """A recorded session's timeline has one entry per event, every type summarised (E6)."""
    popped = store.start_session()
    popped.extend([ChatMessage.user("a"), ChatMessage.assistant("b")])
    popped.pop()
    popped.clear()
    cleared = store.start_session(RuntimeProfile(  # issue 24: an opt-in clearing
        compaction=Compaction(clear_tool_results=True, keep_tool_result_turns=1)))
    for n in range(2):
        cleared.append(ChatMessage.user(f"q{n}"))
        cleared.append(AssistantToolCalls(None, (ToolCall(f"k{n}", "search", "{}"),)))
        cleared.append(ToolResults((ToolResult(f"k{n}", "long result " * 20, "search"),)))
    cleared.prepare_request()
    cleared.record_usage({"prompt_tokens": 300, "completion_tokens": 9})  # issue 35
    summarised = store.start_session(RuntimeProfile(max_context_tokens=150))  # issue 24
    answers = iter(["what was asked and answered", RuntimeError("down")])

    def summarize(turns: object, previous: object) -> str:
        answer = next(answers, "later")
        if isinstance(answer, Exception):
            raise answer
        return answer

    for n in range(6):
        summarised.extend([ChatMessage.user(f"question {n} " * 8),
                           ChatMessage.assistant(f"answer {n} " * 8)])
        summarised.prepare_request(summarizer=tl.Summarizer("replay", summarize))
    crashed = store.start_session()  # E5: a call swept by a restore, brought back by its result
    crashed.extend([ChatMessage.user("go"), AssistantToolCalls(None, (ToolCall("z", "run"),))])
    restored = store.restore(crashed.id)
    restored.append(ToolResults((ToolResult("z", "done", "run"),)))
    events = [
        *record_agent(store).session.events(),
        *record_refusals(store).session.events(),
        *popped.events(),
        *cleared.events(),
        *summarised.events(),
        *restored.events(),
    ]
    entries = timeline(events)
    assert [e.originator_version for e in events] == [e.position for e in entries]
    # SessionForgotten ends a session whose other events can no longer be read: it is
    # summarised on its own (test_e6_timeline_summary_of_each_event_type).
    readable = {cls.__name__ for cls in EVENT_TYPES if cls is not SessionForgotten}
    assert readable == {e.type for e in entries}
    assert all(e.summary and e.summary != e.type for e in entries)
    assert all("\n" not in e.summary for e in entries)


def test_e12_timeline_json_is_byte_identical(sqlite_path: Path) -> None:
    """The same events give the same JSON, byte for byte, even read by another store (E12)."""
    with open_sqlite(sqlite_path) as first:
        session_id = record_agent(first).session.id
        once = timeline_jsonl(first.events_of(session_id))
        twice = timeline_jsonl(first.events_of(session_id))
    with open_sqlite(sqlite_path) as second:
        again = timeline_jsonl(second.events_of(session_id))
    assert once == twice == again
    entry = timeline(second_events := [*open_sqlite(sqlite_path).events_of(session_id)])[0]
    assert entry.to_json() == timeline(second_events)[0].to_json()
    assert '"timestamp":"' in entry.to_json()
    assert entry.to_json().count("+00:00") >= 1


def test_e12_timeline_json_renders_awkward_values() -> None:
    """NaN ratios, UUIDs, enums and datetimes become plain JSON deterministically (E12, R14)."""
    event = SessionStarted(
        **STAMP, profile=RuntimeProfile(context_compact_ratio=float("nan")),
        providers=(ProviderProfile("p", "m", 10, {"fast": ("m-mini", 5)}),),
        route=Route("p", "m"), legacy=True,
    )
    (entry,) = timeline([event])
    text = entry.to_json()
    assert '"context_compact_ratio":"NaN"' in text
    assert '"timestamp":"2024-05-01T12:00:00.000000+00:00"' in text
    assert '"aliases":{"fast":["m-mini",5]}' in text
    assert text == timeline([event])[0].to_json()


# --- time travel (E4) -------------------------------------------------------------------------


def test_e4_views_at_every_position_equal_the_live_views(store: Store) -> None:
    """The views rebuilt at each recorded position equal the live session's at that time (E4)."""
    for live in (record_agent(store), record_refusals(store), record_legacy(store)):
        events = live.session.events()
        assert 4 <= len(live.captured)
        for position, (chat, conversation) in live.captured.items():
            assert (chat, conversation) == views_at(events, position)


def test_e4_state_at_every_position_is_a_fold_of_the_prefix(store: Store) -> None:
    """state_at(N) holds version N, and position 0 is the empty, unstarted state (E4)."""
    events = record_legacy(store).session.events()
    assert [e.originator_version for e in events] == [
        state_at(events, e.originator_version).version for e in events
    ]
    assert ([], []) == views_at(events, 0)
    assert not state_at(events, 0).started


def test_e4_positions_outside_the_stream_are_refused(store: Store) -> None:
    """A position below 0 or past the last event is an InvalidPosition (E4, E11)."""
    events = record_refusals(store).session.events()
    with pytest.raises(InvalidPosition, match=f"0..{len(events)}"):
        views_at(events, len(events) + 1)
    with pytest.raises(InvalidPosition):
        state_at(events, -1)


# --- requests (E6) ----------------------------------------------------------------------------


def test_e6_every_prepared_request_is_reproduced_exactly(store: Store) -> None:
    """Each RequestPrepared's messages are re-derived from the log and match its digest (E6)."""
    live = record_agent(store)
    events = live.session.events()
    audited = requests(events)
    prepared = [e for e in events if isinstance(e, RequestPrepared)]
    assert [e.originator_version for e in prepared] == [a.position for a in audited]
    assert all(a.matches for a in audited)
    assert [e.message_count for e in prepared] == [len(a.messages) for a in audited]
    # Each request is what the live session held right after preparing it (R27a).
    assert [tuple(live.captured[a.position][0]) for a in audited] == [
        a.messages for a in audited
    ]
    assert [request_digest(live.captured[a.position][0]) for a in audited] == [
        a.digest for a in audited
    ]


def test_e6_a_tampered_digest_is_reported(store: Store) -> None:
    """A RequestPrepared whose digest was altered no longer matches its messages (E6)."""
    events = record_agent(store).session.events()
    target = next(i for i, e in enumerate(events) if isinstance(e, RequestPrepared))
    original = events[target]
    assert isinstance(original, RequestPrepared)
    events[target] = attrs.evolve(original, digest="0" * 64)
    audited = requests(events)
    assert [original.originator_version] == [a.position for a in audited if not a.matches]
    assert original.digest == audited[0].digest
    assert "0" * 64 == audited[0].recorded_digest


# --- verify: healthy stores --------------------------------------------------------------------


def test_e4_verify_a_healthy_store_is_ok(store: Store) -> None:
    """Sessions recorded through the API pass every check (E4, E6, R18, R31-R34, R37)."""
    lives = [record_agent(store), record_refusals(store), record_legacy(store)]
    seen: list[tuple[int, int | None]] = []
    report = verify(store.backend, progress=lambda done, total: seen.append((done, total)))
    assert [] == list(report.violations)
    assert report.ok
    assert 3 == report.sessions_checked
    total = sum(len(live.session.events()) for live in lives)
    assert total == report.events_checked
    assert (total, total) == seen[-1]
    assert 3 == len(seen)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=conversation_histories(max_turns=5),
    budget=st.sampled_from((None, 0, 40, 150)),
    turns=st.sampled_from((None, 0, 2)),
    legacy=st.booleans(),
    prepares=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_e4_verify_finds_nothing_in_any_session_recorded_through_the_api(
    history: list[ConversationMessage],
    budget: int | None,
    turns: int | None,
    legacy: bool,
    prepares: list[bool],
) -> None:
    """No false alarm: any consistent history recorded through a session verifies clean
    (R18, R31-R34, R37, E6)."""
    profile = RuntimeProfile(max_context_tokens=budget, max_history_messages=turns)
    with open_store("memory://") as store:
        live = Live(store, store.start_session(profile, (OPAQUE,), legacy=legacy))
        for item, prepare in zip(
            (i for i in history if not (isinstance(i, Chat) and i.message.synthetic)), prepares
        ):
            live.append(item)
            # A runtime calls the provider only once the tool calls are answered.
            if prepare and not isinstance(item, AssistantToolCalls):
                live.prepare()
        report = verify(store.backend)
        assert [] == list(report.violations)
        assert live.captured == {
            p: views_at(live.session.events(), p) for p in live.captured
        }


def test_r37_verify_reports_a_request_sent_with_unanswered_tool_calls(store: Store) -> None:
    """A request prepared before the tool answered would be refused by the provider (R37).

    A session refuses to prepare it (DECISIONS 11, `UnansweredToolCalls`); a buggy writer that
    records it anyway is reported.
    """
    session = store.start_session(RuntimeProfile(), PROVIDERS)
    session.append(ChatMessage.user("look it up"))
    answered = session.prepare_request()
    session.append(AssistantToolCalls("Looking.", (ToolCall("call_9", "search", "{}"),)))
    with pytest.raises(UnansweredToolCalls):
        session.prepare_request()
    assert [] == list(verify(store.backend).violations)
    good = next(e for e in session.events() if isinstance(e, RequestPrepared))
    append_raw(
        store, session.id,
        attrs.evolve(good, **next_stamp(store, session.id),
                     digest=request_digest(session.chat_view()),
                     message_count=len(answered.messages) + 1),
    )
    forged, _ = store.backend.head(UUID(session.id))
    (violation,) = verify(store.backend).violations
    assert (forged, Rule.TOOL_PAIRING) == (violation.position, violation.rule)
    assert "tool calls without a result: call_9" in violation.detail


def test_e4_verify_checks_only_the_given_sessions(store: Store) -> None:
    """verify(backend, [id]) checks that session alone; an unknown id is SessionNotFound."""
    record_agent(store)
    live = record_legacy(store)
    report = verify(store.backend, [live.session.id])
    assert (1, len(live.session.events())) == (report.sessions_checked, report.events_checked)
    with pytest.raises(SessionNotFound):
        verify(store.backend, ["00000000-0000-4000-8000-00000000ffff"])
    with pytest.raises(SessionNotFound):
        verify(store.backend, ["not-a-uuid"])


def test_e5_verify_checks_snapshots_against_the_records(sqlite_path: Path) -> None:
    """With snapshots taken every 10 events, a healthy store still verifies clean (E5)."""
    with open_sqlite(sqlite_path, snapshot_interval=10) as store:
        live = record_agent(store)
        assert store.backend.load_snapshot(UUID(live.session.id)) is not None
        assert verify(store.backend).ok


# --- verify: tamper evidence (E2, E11) ---------------------------------------------------------


def sql(path: Path, statement: str, *params: object) -> list[Any]:
    connection = sqlite3.connect(path)
    try:
        with connection:
            return connection.execute(statement, params).fetchall()
    finally:
        connection.close()


def first_version_of(events: list[DomainEvent], cls: type[DomainEvent], after: int = 0) -> int:
    return next(
        e.originator_version for e in events
        if isinstance(e, cls) and e.originator_version > after
    )


def rules_at(violations: tuple[Violation, ...], session_id: str) -> set[tuple[int, Rule]]:
    return {(v.position, v.rule) for v in violations if v.session_id == session_id}


def test_e2_verify_reports_an_edited_record_by_session_and_position(sqlite_path: Path) -> None:
    """A record whose message text was edited in the SQLite file is named (E2, E6)."""
    with open_sqlite(sqlite_path) as store:
        live = record_agent(store)
        record_legacy(store)
        session_id = live.session.id
        events = live.session.events()
    version = next(
        e.originator_version for e in events
        if isinstance(e, MessageAppended) and e.originator_version > 5
        and isinstance(e.message, Chat) and e.message.message.role == "user"
    )
    ((state,),) = sql(
        sqlite_path,
        "SELECT state FROM stored_events WHERE originator_id=? AND originator_version=?",
        UUID(session_id).hex, version,
    )
    chain, payload = open_envelope(msgpack.unpackb(state))
    edited = payload.replace(b"question", b"QUESTION")
    assert edited != payload
    sql(
        sqlite_path,
        "UPDATE stored_events SET state=? WHERE originator_id=? AND originator_version=?",
        msgpack.packb([chain, edited]), UUID(session_id).hex, version,
    )
    with open_sqlite(sqlite_path) as store:
        report = verify(store.backend)
    assert not report.ok
    found = rules_at(report.violations, session_id)
    assert (version, Rule.HASH_CHAIN) in found
    # The edited text also changes the next request's messages: its digest fails (E6).
    assert (first_version_of(events, RequestPrepared, after=version), Rule.DIGEST) in found
    assert {session_id} == {v.session_id for v in report.violations}
    assert f"session {session_id} position {version}: [E2-hash-chain]" in str(
        next(v for v in report.violations if v.rule is Rule.HASH_CHAIN)
    )


def test_e11_verify_reports_garbage_bytes_without_crashing(sqlite_path: Path) -> None:
    """A record overwritten with garbage is a corrupt-record violation, not a crash (E11)."""
    with open_sqlite(sqlite_path) as store:
        live = record_legacy(store)
        session_id = live.session.id
    sql(
        sqlite_path,
        "UPDATE stored_events SET state=? WHERE originator_id=? AND originator_version=?",
        b"\xc1garbage", UUID(session_id).hex, 4,
    )
    with open_sqlite(sqlite_path) as store:
        report = verify(store.backend)
    assert {(4, Rule.CORRUPT_RECORD)} == rules_at(report.violations, session_id)
    assert str(report.violations[0]).startswith(f"session {session_id} position 4: ")


def test_e2_verify_reports_a_deleted_record(sqlite_path: Path) -> None:
    """A record deleted from the middle of a stream is reported at its position (E2)."""
    with open_sqlite(sqlite_path) as store:
        session_id = record_agent(store).session.id
    sql(
        sqlite_path,
        "DELETE FROM stored_events WHERE originator_id=? AND originator_version=?",
        UUID(session_id).hex, 12,
    )
    with open_sqlite(sqlite_path) as store:
        report = verify(store.backend)
    assert (12, Rule.MISSING_RECORD) in rules_at(report.violations, session_id)
    assert all(v.position >= 12 for v in report.violations)


def test_e2_verify_reports_deleted_newest_records_against_the_snapshot(sqlite_path: Path) -> None:
    """Deleting the newest records leaves a snapshot past the end: reported (E2, E5)."""
    with open_sqlite(sqlite_path, snapshot_interval=10) as store:
        live = record_agent(store)
        session_id = live.session.id
        snapshot = store.backend.load_snapshot(UUID(session_id))
    assert snapshot is not None
    keep = snapshot[0] - 3
    sql(
        sqlite_path,
        "DELETE FROM stored_events WHERE originator_id=? AND originator_version>?",
        UUID(session_id).hex, keep,
    )
    with open_sqlite(sqlite_path) as store:
        report = verify(store.backend)
    assert (keep + 1, Rule.SNAPSHOT) in rules_at(report.violations, session_id)


def test_e5_verify_reports_a_tampered_snapshot(sqlite_path: Path) -> None:
    """A snapshot whose bytes were replaced is reported: a restore would start from it (E5)."""
    with open_sqlite(sqlite_path, snapshot_interval=10) as store:
        session_id = record_agent(store).session.id
        snapshot = store.backend.load_snapshot(UUID(session_id))
    assert snapshot is not None
    sql(
        sqlite_path,
        "UPDATE stored_snapshots SET state=? WHERE originator_id=? AND originator_version=?",
        msgpack.packb({"format": 1}), UUID(session_id).hex, snapshot[0],
    )
    with open_sqlite(sqlite_path) as store:
        report = verify(store.backend)
    assert {(snapshot[0], Rule.SNAPSHOT)} == rules_at(report.violations, session_id)


# --- verify: invariants of the log (R18, R31-R34, R37, E6) --------------------------------------


def append_raw(store: Store, session_id: str, *events: DomainEvent) -> None:
    """Record events as a buggy writer would: a valid chain, bypassing the decider."""
    uuid = UUID(session_id)
    _, chain = store.backend.head(uuid)
    store.backend.append(uuid, list(events), prev_chain=chain)


def next_stamp(store: Store, session_id: str, offset: int = 1) -> dict[str, Any]:
    version, _ = store.backend.head(UUID(session_id))
    return {"originator_id": UUID(session_id), "originator_version": version + offset,
            "timestamp": T}


def test_e6_r18_verify_reports_bad_requests_written_by_a_buggy_writer(store: Store) -> None:
    """A request whose digest does not match, or over its window, is reported (E6, R18)."""
    live = record_legacy(store)
    session_id = live.session.id
    good = next(e for e in live.session.events() if isinstance(e, RequestPrepared))
    append_raw(
        store, session_id,
        attrs.evolve(good, **next_stamp(store, session_id), digest="f" * 64),
        attrs.evolve(good, **next_stamp(store, session_id, 2),
                     digest=request_digest(live.session.chat_view()),
                     estimated_tokens=good.window + 1),
    )
    version = live.session.version
    report = verify(store.backend)
    assert {(version + 1, Rule.DIGEST), (version + 2, Rule.CAPACITY)} == rules_at(
        report.violations, session_id
    )


def test_r31_verify_reports_a_trim_without_its_notices(store: Store) -> None:
    """A structured trim must be followed by BreadcrumbInserted and HistoryTrimmed (R31-R33)."""
    live = record_agent(store)
    session_id = live.session.id
    trim = next(e for e in live.session.events() if isinstance(e, TrimDecided))
    notice = next(e for e in live.session.events() if isinstance(e, HistoryTrimmed))
    append_raw(
        store, session_id,
        attrs.evolve(trim, **next_stamp(store, session_id),
                     first_kept_position=trim.first_kept_position),
        attrs.evolve(notice, **next_stamp(store, session_id, 2)),
    )
    version = live.session.version
    report = verify(store.backend)
    found = rules_at(report.violations, session_id)
    assert (version + 2, Rule.TRIM_NOTICE) in found
    assert any("must be followed by BreadcrumbInserted" in v.detail for v in report.violations)


def test_r34_verify_reports_notices_after_a_legacy_turn_limit_trim(store: Store) -> None:
    """A legacy turn-limit trim is followed by no notice; a stray one is reported (R34)."""
    live = record_legacy(store)
    session_id = live.session.id
    events = live.session.events()
    assert any(
        isinstance(e, TrimDecided) and e.reason is TrimReason.TURN_LIMIT for e in events
    )
    notice = next(e for e in events if isinstance(e, HistoryTrimmed))
    append_raw(store, session_id, attrs.evolve(notice, **next_stamp(store, session_id)))
    report = verify(store.backend)
    assert {(live.session.version + 1, Rule.TRIM_NOTICE)} == rules_at(
        report.violations, session_id
    )


def test_r37_verify_reports_a_request_with_a_split_tool_exchange(store: Store) -> None:
    """A tool result whose call was trimmed away (a user message cut the exchange) is
    reported: the orphan sweep must find nothing in a prepared request (R37)."""
    session = store.start_session(RuntimeProfile(max_history_messages=1), PROVIDERS)
    session.append(ChatMessage.user("first"))
    session.append(AssistantToolCalls(None, (ToolCall("call_1", "search", "{}"),)))
    session.append(ChatMessage.user("second, before the tool answered"))
    session.append(ToolResults((ToolResult("call_1", "late result", "search"),)))
    # A session sweeps the orphan before it renders the request (DECISIONS 7) ...
    request = session.prepare_request()
    assert ["[earlier turns omitted to fit the context window]",
            "second, before the tool answered"] == [m.content for m in request.messages]
    assert isinstance(session.events()[-2], OrphansSwept)
    assert [] == list(verify(store.backend).violations)
    # ... a buggy writer that sends it with the orphan is reported.
    session = store.start_session(RuntimeProfile(max_history_messages=1), PROVIDERS)
    session.append(ChatMessage.user("first"))
    session.append(AssistantToolCalls(None, (ToolCall("call_1", "search", "{}"),)))
    session.append(ChatMessage.user("second, before the tool answered"))
    session.append(ToolResults((ToolResult("call_1", "late result", "search"),)))
    route, messages = session.state.route, session.chat_view()
    append_raw(
        store, session.id,
        RequestPrepared(
            **next_stamp(store, session.id), purpose=Purpose.TURN, route=route.route,
            capacity=route.capacity, budget=route.budget, window=route.window,
            estimated_tokens=session.state.chat_tokens(), message_count=len(messages),
            digest=request_digest(messages),
        ),
    )
    report = verify(store.backend)
    (violation,) = report.violations
    assert (session.id, session.version + 1, Rule.TOOL_PAIRING) == (
        violation.session_id, violation.position, violation.rule
    )
    assert "tool results without their call: call_1" in violation.detail


def test_e4_verify_report_json_names_each_violation(store: Store) -> None:
    """to_json lists the violations with session, position, rule and detail (E4)."""
    live = record_legacy(store)
    notice = next(e for e in live.session.events() if isinstance(e, HistoryTrimmed))
    append_raw(store, live.session.id, attrs.evolve(notice, **next_stamp(store, live.session.id)))
    text = verify(store.backend).to_json()
    assert '"ok":false' in text
    assert f'"session_id":"{live.session.id}"' in text
    assert '"rule":"R31-R34-trim-notice"' in text


# --- what-if and the session list -------------------------------------------------------------


def test_e6_whatif_on_a_store_writes_nothing(sqlite_path: Path) -> None:
    """A what-if replay of a stored session leaves the store as it was."""
    with open_sqlite(sqlite_path) as store:
        session_id = record_agent(store).session.id
        before = store.backend.max_notification_id()
        events = store.events_of(session_id)
        smaller = what_if(events, attrs.evolve(PROFILE, max_context_tokens=300))
        larger = what_if(events, attrs.evolve(PROFILE, max_context_tokens=100_000))
        assert before == store.backend.max_notification_id()
        assert events == store.events_of(session_id)
    (count,) = sql(sqlite_path, "SELECT COUNT(*) FROM stored_events")[0]
    assert before == count
    assert smaller.recorded.trims < smaller.what_if.trims
    assert larger.what_if.trims < larger.recorded.trims


def test_e7_session_summaries_list_every_session_with_counts(store: Store) -> None:
    """The session list gives each session's counts, oldest first."""
    agent = record_agent(store)
    legacy = record_legacy(store)
    rows = session_summaries(store.backend)
    assert [agent.session.id, legacy.session.id] == [r["session_id"] for r in rows]
    events = legacy.session.events()
    assert {
        "legacy": True,
        "events": len(events),
        "messages": sum(isinstance(e, MessageAppended) for e in events),
        "requests": sum(isinstance(e, RequestPrepared) for e in events),
        "route": "openai/gpt-4o",
        "corrupt_at": None,
    }.items() <= rows[1].items()
    assert "anthropic/claude" == rows[0]["route"]
