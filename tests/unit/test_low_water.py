"""Issue 35 point 1: low-water trims hold the prefix (`Compaction.low_water`, ADR-0104).

The scripted sessions use the R20 estimate: ``S("sys")`` costs 5 tokens, a 40-byte user or
assistant message 14, the breadcrumb 17; a turn of one of each costs 28. The store tests run on
every backend (memory, SQLite, PostgreSQL).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import attrs
import pytest

import turnledger as tl
from tests.backends import ALL_BACKENDS, fresh_target
from turnledger.cli import main
from turnledger.domain.budget import (
    Compaction,
    ProviderProfile,
    Route,
    RuntimeProfile,
    low_water_tokens,
    low_water_turns,
    parse_profile_document,
)
from turnledger.domain.decider import AppendMessage, PrepareRequest, SessionState, StartSession, run
from turnledger.domain.errors import InvalidProfile
from turnledger.domain.events import (
    BreadcrumbInserted,
    DomainEvent,
    HistoryTrimmed,
    RequestPrepared,
    SessionStarted,
    ToolResultsCleared,
    TrimDecided,
    TrimReason,
    TurnsSummarized,
    View,
)
from turnledger.domain.messages import (
    SUMMARY_PREFIX,
    AssistantToolCalls,
    ChatMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.domain.trimming import turns_to_drop_for_budget, turns_to_drop_for_count
from turnledger.profiles import load_profile_document
from turnledger.replay.audit import verify
from turnledger.replay.report import report
from turnledger.replay.timeline import fold, requests
from turnledger.replay.whatif import what_if
from turnledger.store.snapshots import decode_snapshot

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
SESSION = UUID("00000000-0000-4000-8000-000000000035")
BIG = ProviderProfile("big", "big-model", 1_000_000)
ROUTE = Route("big", "big-model")


def _user(n: int) -> ChatMessage:
    return ChatMessage.user(f"q{n:02d} " + "x" * 36)  # 40 bytes: 14 tokens


def _assistant(n: int) -> ChatMessage:
    return ChatMessage.assistant(f"a{n:02d} " + "y" * 36)


class Scripted:
    """A session driven through the pure decider, keeping every event and every request."""

    def __init__(self, profile: RuntimeProfile, *, legacy: bool = False) -> None:
        self.state = SessionState()
        self.events: list[DomainEvent] = list(run(self.state, StartSession(
            SESSION, profile, (BIG,), ROUTE, legacy, NOW)).events)
        self.requests: list[list[ChatMessage]] = []
        self.append(ChatMessage.system("sys"))

    def append(self, *messages: ChatMessage) -> list[DomainEvent]:
        new: list[DomainEvent] = []
        for message in messages:
            new += run(self.state, AppendMessage(message, NOW)).events
        self.events += new
        return new

    def turn(self, n: int) -> list[DomainEvent]:
        """Turn ``n``: its user and assistant messages, then a request; the events."""
        new = self.append(_user(n), _assistant(n))
        batch = run(self.state, PrepareRequest(0, 0, False, NOW))
        assert batch.request is not None
        self.requests.append(batch.request.messages)
        self.events += batch.events
        return new + batch.events


def _of(kind: type[DomainEvent], events: Sequence[DomainEvent]) -> list[DomainEvent]:
    return [e for e in events if isinstance(e, kind)]


# --- the setting --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, 0.0, 1.0, -0.25, 1.5, math.nan, math.inf, -math.inf,
                                   True, False, "0.6", [0.6]])
def test_i35_p1_low_water_must_be_a_fraction_strictly_between_0_and_1(value: object) -> None:
    """Issue 35 point 1: NaN, the infinities, a bool, 0, 1 and anything outside (0, 1) or not a
    number is refused, naming compaction.low_water, in code and in a profile file."""
    with pytest.raises(InvalidProfile, match=r"^compaction\.low_water: must be a number "
                       r"strictly between 0 and 1 or absent, got "):
        Compaction(low_water=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidProfile, match=r"^p\.toml: compaction\.low_water: "):
        parse_profile_document({"compaction": {"low_water": value}}, "p.toml")


def test_i35_p1_low_water_is_off_by_default_and_keeps_the_spelling_of_the_benchmark() -> None:
    """Issue 35 point 1: None by default (the spec's trim, DECISIONS 21); the benchmark's
    profile is built as written."""
    assert None is Compaction().low_water
    profile = RuntimeProfile(max_context_tokens=8000, compaction=Compaction(low_water=0.6))
    assert (8000, 0.6) == (profile.max_context_tokens, profile.compaction.low_water)
    assert 0.000001 == Compaction(low_water=0.000001).low_water
    assert 0.999 == Compaction(low_water=0.999).low_water


def test_i35_p1_low_water_targets_are_exact_floors() -> None:
    """Issue 35 point 1: floor(low_water x budget) on the decimal value (0.29 x 100 is 29, not
    the 28 of binary floats); turns: floor(low_water x limit), at least the newest turn."""
    assert 4800 == low_water_tokens(8000, 0.6)
    assert 29 == low_water_tokens(100, 0.29)
    assert 0 == low_water_tokens(1, 0.5)
    assert 8000 == low_water_tokens(8000, None)
    assert 30 == low_water_turns(50, 0.6)
    assert 2 == low_water_turns(7, 0.3)
    assert 1 == low_water_turns(1, 0.5)
    assert 1 == low_water_turns(0, 0.9)
    assert 1 == low_water_turns(0, None)
    assert 50 == low_water_turns(50, None)


def test_i35_p1_the_rules_trim_on_the_same_trigger_and_drop_to_the_low_water() -> None:
    """Issue 35 point 1: nothing drops while the limit holds; over it, the result fits the
    low water (the newest turn kept even when nothing does)."""
    tokens = [100, 80, 60, 40, 20].__getitem__  # after k dropped turns, k = 0..4
    assert 0 == turns_to_drop_for_budget(5, tokens, 100, down_to=50)
    assert 1 == turns_to_drop_for_budget(5, tokens, 99)
    assert 3 == turns_to_drop_for_budget(5, tokens, 99, down_to=50)
    assert 4 == turns_to_drop_for_budget(5, tokens, 99, down_to=0)
    with pytest.raises(ValueError, match="down_to must be <= budget_tokens"):
        turns_to_drop_for_budget(5, tokens, 99, down_to=100)
    assert 0 == turns_to_drop_for_budget(5, tokens, 100, down_to=50, over=100)
    assert 3 == turns_to_drop_for_budget(5, tokens, 100, down_to=50, over=50)
    assert 4 == turns_to_drop_for_budget(5, tokens, 100, down_to=0, over=0)  # 0: a number
    assert 0 == turns_to_drop_for_budget(5, tokens, 0, down_to=0, over=0)  # budget 0: off
    assert 0 == turns_to_drop_for_count(10, 10, low_water=0.5)
    assert 6 == turns_to_drop_for_count(11, 10, low_water=0.5)
    assert 1 == turns_to_drop_for_count(11, 10)
    assert 10 == turns_to_drop_for_count(11, 0, low_water=0.5)


# --- a scripted session: the token budget ------------------------------------------------------


def test_i35_p1_budget_trim_drops_to_the_low_water_and_the_prefix_holds() -> None:
    """Issue 35 point 1: budget 200, low water 0.5 (100 tokens). Seven turns cost 5 + 7 x 28 =
    201: the trim keeps 2 turns (5 + 17 + 56 = 78 <= 100); turns 8-11 grow the window to 190
    with the same first kept message, byte-identical prefix; turn 12 (218) trims again to 78,
    and turn 17. The spec's trim drops one turn on every request from turn 7 on."""
    session = Scripted(RuntimeProfile(max_context_tokens=200, compaction=Compaction(low_water=0.5)))
    batches = [session.turn(n) for n in range(1, 18)]
    trims = _of(TrimDecided, session.events)
    assert [(t.tokens_before, t.tokens_after, t.dropped_turns, t.kept_turns, t.limit)
            for t in trims] == [(201, 78, 5, 2, 200), (218, 78, 5, 2, 200),
                                (218, 78, 5, 2, 200)]
    assert [1 + 2 * 5, 1 + 2 * 10, 1 + 2 * 15] == [t.first_kept_position for t in trims]
    assert [7, 12, 17] == [n for n, batch in enumerate(batches, 1) if _of(TrimDecided, batch)]
    assert all(isinstance(t, TrimDecided) and t.reason is TrimReason.TOKEN_BUDGET
               and t.view is View.CHAT for t in trims)
    assert 3 == len(_of(BreadcrumbInserted, session.events))
    assert 3 == len(_of(HistoryTrimmed, session.events))
    firsts = [request[2].content[:3] for request in session.requests]
    assert ["q06"] * 5 + ["q11"] * 5 + ["q16"] == firsts[6:]
    estimates = [e.estimated_tokens for e in _of(RequestPrepared, session.events)]
    assert [78, 106, 134, 162, 190, 78] == estimates[6:12]
    for before, after in zip(session.requests[6:10], session.requests[7:11], strict=True):
        assert before == after[: len(before)]  # the whole earlier request is the prefix
    spec = Scripted(RuntimeProfile(max_context_tokens=200))
    for n in range(1, 18):
        spec.turn(n)
    assert 11 == len(_of(TrimDecided, spec.events))  # turns 7 to 17, one per request


def test_i35_p1_a_trim_never_exceeds_the_budget_and_keeps_the_newest_turn() -> None:
    """Issue 35 point 1: a low water below what the newest turn costs keeps the newest turn
    alone (R6), never more than the budget while it fits."""
    session = Scripted(RuntimeProfile(max_context_tokens=100, compaction=Compaction(low_water=0.1)))
    for n in range(1, 8):
        session.turn(n)
    for trim in _of(TrimDecided, session.events):
        assert isinstance(trim, TrimDecided)
        assert (1, 50) == (trim.kept_turns, trim.tokens_after)  # 5 + 17 + 28
    assert all(e.estimated_tokens <= 100 for e in _of(RequestPrepared, session.events))


# --- a scripted session: the turn limit --------------------------------------------------------


@pytest.mark.parametrize("legacy", [False, True])
def test_i35_p1_turn_limit_trim_keeps_the_low_water_turns(legacy: bool) -> None:
    """Issue 35 point 1: a turn limit of 10 with low water 0.5 trims when the 11th turn starts
    (R27a) down to 5 turns, then not before the count passes 10 again, at the 17th: the first
    kept message holds for 6 requests. The spec's trim drops one turn at every turn from the
    11th on."""
    profile = RuntimeProfile(max_history_messages=10, compaction=Compaction(low_water=0.5))
    session = Scripted(profile, legacy=legacy)
    for n in range(1, 24):
        session.turn(n)
    trims = _of(TrimDecided, session.events)
    assert [(TrimReason.TURN_LIMIT, 6, 5, 10)] * 3 == [
        (t.reason, t.dropped_turns, t.kept_turns, t.limit) for t in trims]
    assert [1 + 2 * 6, 1 + 2 * 12, 1 + 2 * 18] == [t.first_kept_position for t in trims]
    head = 1 if legacy else 2  # the legacy loop logs its turn-limit trims only (R34)
    firsts = [request[head].content[:3] for request in session.requests]
    assert ["q07"] * 6 + ["q13"] * 6 + ["q19"] == firsts[10:]
    assert (0 if legacy else 3) == len(_of(HistoryTrimmed, session.events))
    spec = Scripted(attrs.evolve(profile, compaction=Compaction()), legacy=legacy)
    for n in range(1, 24):
        spec.turn(n)
    assert 13 == len(_of(TrimDecided, spec.events))


# --- clearing and summaries in the same chunks --------------------------------------------------


def _tool_turn(n: int) -> list[ChatMessage | AssistantToolCalls | ToolResults]:
    return [
        ChatMessage.user(f"question {n}"),
        AssistantToolCalls("Looking.", (ToolCall(f"c{n}", "search", "{}"),)),
        ToolResults((ToolResult(f"c{n}", f"result {n} " * 40, "search"),)),
        ChatMessage.assistant(f"answer {n}"),
    ]


def test_i35_p1_clearing_waits_for_the_forced_trim_and_moves_with_it() -> None:
    """Issue 35 point 1: with a low water, tool results are cleared only in a request over the
    budget, and that request's budget trim goes on down to the low water even when the
    clearing alone brought it under the budget: between two forced trims neither the
    clearing boundary nor the first kept turn moves (the earlier request is a prefix)."""
    compaction = Compaction(clear_tool_results=True, keep_tool_result_turns=1, low_water=0.5)
    profile = RuntimeProfile(max_context_tokens=1_000, compaction=compaction)
    with tl.open_store("memory://") as store:
        session = store.start_session(profile, (BIG,), ROUTE)
        sent: list[list[ChatMessage]] = []
        marks: list[list[str]] = []
        for n in range(12):
            version = session.version
            session.extend(_tool_turn(n))
            sent.append(session.prepare_request().messages)
            marks.append([type(e).__name__ for e in session.events(after_version=version)
                          if isinstance(e, ToolResultsCleared | TrimDecided)])
        forced = [n for n, kinds in enumerate(marks) if kinds]
        assert [7, 11] == forced  # 8 turns cost 1,128 > 1,000; then 4 more (1,064)
        assert all(["ToolResultsCleared", "TrimDecided"] == marks[n] for n in forced)
        for n in range(1, 12):
            if n not in forced:
                assert sent[n - 1] == sent[n][: len(sent[n - 1])]
        cleared = [(e.tokens_before, e.tokens_after, e.positions) for e in session.events()
                   if isinstance(e, ToolResultsCleared)]
        assert [(1128, 589, (2, 6, 10, 14, 18, 22, 26)), (1064, 747, (30, 34, 38, 42))] == cleared
        # The clearing alone fit the budget (589, 747): the trim still goes to the low water.
        trims = [(e.tokens_before, e.tokens_after, e.first_kept_position)
                 for e in session.events() if isinstance(e, TrimDecided)]
        assert [(589, 478, 8), (747, 491, 24)] == trims
        plain = store.start_session(attrs.evolve(profile, compaction=attrs.evolve(
            compaction, low_water=None)), (BIG,), ROUTE)
        for n in range(12):
            plain.extend(_tool_turn(n))
            plain.prepare_request()
        every = [e for e in plain.events() if isinstance(e, ToolResultsCleared)]
        assert 11 == len(every)  # without it: one clearing per request from the 2nd turn
        assert () == verify(store.backend).violations


def test_i35_p1_a_forced_trim_after_a_clearing_may_go_down_to_zero_tokens() -> None:
    """Issue 35 point 1 (a case Hypothesis found): budget 30, low water 1/32 (0 tokens). The
    clearing of the first turn's result is the forced trim's first part; the trim then drops
    everything but the newest turn, as a low water of 0 tokens asks, instead of reading 0 as
    "trimming off" (R12) and sending 62 tokens over a budget of 30."""
    compaction = Compaction(clear_tool_results=True, keep_tool_result_turns=1, low_water=0.03125)
    with tl.open_store("memory://") as store:
        session = store.start_session(RuntimeProfile(max_context_tokens=30, compaction=compaction),
                                      (BIG,), ROUTE)
        session.extend([
            ChatMessage.user(""),
            AssistantToolCalls(None, (ToolCall("c0", "shell", "{}"),)),
            ToolResults((ToolResult("c0", "", "shell", ("/tmp/shot.png",)),)),
            ChatMessage.user(""),
        ])
        request = session.prepare_request()
        kinds = [type(e).__name__ for e in session.events()
                 if isinstance(e, ToolResultsCleared | TrimDecided)]
        assert ["ToolResultsCleared", "TrimDecided"] == kinds
        trim = next(e for e in session.events() if isinstance(e, TrimDecided))
        assert (1, 3, 21) == (trim.kept_turns, trim.first_kept_position, trim.tokens_after)
        assert 21 == request.estimated_tokens  # the breadcrumb (17) and the empty turn (4)


def test_i35_p1_a_summary_covers_the_low_water_chunk_and_holds_until_the_next() -> None:
    """Issue 35 point 1: a summarised trim drops the same chunk down to the low water, and the
    summary message stays the same in every request until the next forced trim."""
    def summarize(turns: Sequence[ChatMessage], previous: str | None) -> str:
        return f"summary of {len(turns)} messages"

    profile = RuntimeProfile(max_context_tokens=200, compaction=Compaction(low_water=0.5))
    with tl.open_store("memory://") as store:
        session = store.start_session(profile, (BIG,), ROUTE)
        session.append(ChatMessage.system("sys"))
        sent = []
        for n in range(1, 13):
            session.extend([_user(n), _assistant(n)])
            sent.append(session.prepare_request(summarizer=summarize).messages)
        summaries = [(e.first_position, e.last_position, e.covers_from, e.text)
                     for e in session.events() if isinstance(e, TurnsSummarized)]
        trims = [(e.first_kept_position, e.tokens_after)
                 for e in session.events() if isinstance(e, TrimDecided)]
        # Over 200 at turn 7 (201): down to 100, the summary (25 tokens) in the breadcrumb's
        # place: 5 + 25 + 2 x 28 = 86; again at turn 12 (226), the summary rolled.
        assert [(11, 86), (21, 86)] == trims
        assert [(1, 10, 1, "summary of 10 messages"),
                (11, 20, 1, "summary of 10 messages")] == summaries
        assert [6, 11] == [n for n in range(1, 12) if sent[n][2] != sent[n - 1][2]]
        for n in range(7, 11):
            assert sent[n - 1] == sent[n][: len(sent[n - 1])]  # the summary included
        assert sent[6][1].content.startswith(SUMMARY_PREFIX)


# --- profile files, the store, replay and what-if ----------------------------------------------


def test_i35_p1_profile_file_round_trip(tmp_path: Path) -> None:
    """Issue 35 point 1: ``[compaction] low_water`` in a profile file is the setting."""
    path = tmp_path / "profile.toml"
    path.write_text("max_context_tokens = 8000\n[compaction]\nlow_water = 0.6\n")
    document = load_profile_document(path)
    assert RuntimeProfile(max_context_tokens=8000, compaction=Compaction(low_water=0.6)) == (
        document.runtime)
    path.write_text("[compaction]\nlow_water = 1\n")
    with pytest.raises(InvalidProfile, match=r"profile\.toml: compaction\.low_water: .*got 1$"):
        load_profile_document(path)


@pytest.mark.parametrize("kind", ALL_BACKENDS)
def test_i35_p1_store_round_trip_restore_replay_and_what_if(kind: str, tmp_path: Path) -> None:
    """Issue 35 point 1: a session started with a low water records it, restores with it
    (from a snapshot and from the events) and goes on trimming in the same chunks; every
    request replays to its digest, verify finds nothing, what-if under the recorded profile
    is the recording and under the spec's trim shows more trims."""
    profile = RuntimeProfile(max_context_tokens=200, compaction=Compaction(low_water=0.5))
    with fresh_target(kind, tmp_path) as target, tl.open_store(target.url,
                                                               snapshot_interval=7) as store:
        session = store.start_session(profile, (BIG,), ROUTE)
        session.append(ChatMessage.system("sys"))
        for n in range(1, 10):
            session.extend([_user(n), _assistant(n)])
            session.prepare_request()
        snapshot = store.backend.load_snapshot(UUID(session.id))
        assert snapshot is not None
        held = decode_snapshot(snapshot[1], session_id=UUID(session.id), version=snapshot[0])
        assert held is not None
        assert profile.compaction == held[0].profile.compaction  # the snapshot carries it
        restored = store.restore(session.id)
        assert profile.compaction == restored.profile.compaction
        assert session.chat_view() == restored.chat_view()
        assert fold(store.events_of(session.id)).chat_view() == restored.chat_view()
        for n in range(10, 17):
            restored.extend([_user(n), _assistant(n)])
            restored.prepare_request()
        events = store.events_of(session.id)
        trims = [e for e in events if isinstance(e, TrimDecided)]
        assert [6, 11] == [(t.first_kept_position - 1) // 2 + 1 for t in trims]  # kept turns
        assert all(audited.matches for audited in requests(events))
        assert () == verify(store.backend).violations
        same = what_if(events, profile)
        assert all(row.same_messages and row.recorded == row.what_if for row in same.requests)
        spec = what_if(events, attrs.evolve(profile, compaction=Compaction()))
        assert (2, 10) == (spec.recorded.trims, spec.what_if.trims)


def test_i35_p1_what_if_with_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 35 point 1: ``what-if --low-water`` and ``report --what-if compaction.low_water``
    re-decide the recorded session with the low water; ``none`` gives back the spec's trim."""
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    with tl.open_store(store_url) as store:
        session = store.start_session(RuntimeProfile(max_context_tokens=200), (BIG,), ROUTE)
        session.append(ChatMessage.system("sys"))
        for n in range(1, 17):
            session.extend([_user(n), _assistant(n)])
            session.prepare_request()
        session_id = str(session.id)
    capsys.readouterr()
    assert 0 == main(["--store", store_url, "what-if", session_id, "--low-water", "0.5",
                      "--json"])
    result = json.loads(capsys.readouterr().out)
    assert 0.5 == result["profile"]["compaction"]["low_water"]
    assert (10, 2) == (sum(r["recorded"]["trims"] for r in result["requests"]),
                       sum(r["what_if"]["trims"] for r in result["requests"]))
    assert 2 == main(["--store", store_url, "what-if", session_id, "--low-water", "1.5"])
    assert "compaction.low_water" in capsys.readouterr().err
    html = tmp_path / "r.html"
    assert 0 == main(["--store", store_url, "report", session_id, "-o", str(html),
                      "--what-if", "compaction.low_water=0.5"])
    text = html.read_text()
    assert "compaction.low_water unset → 0.5" in text  # no `None` in a report (issue 38)


def test_i35_p1_report_shows_the_profile_setting() -> None:
    """Issue 35 point 1: the HTML report says the session's low water; a default profile's
    header says nothing of compaction."""
    session = Scripted(RuntimeProfile(max_context_tokens=200, compaction=Compaction(low_water=0.5)))
    for n in range(1, 9):
        session.turn(n)
    assert ("compaction: low water 0.5: a forced trim drops to 50% of the budget, or to 50% "
            "of the turn limit in turns (issue 35)") in report(session.events)
    plain = Scripted(RuntimeProfile(max_context_tokens=200))
    plain.turn(1)
    assert "compaction:" not in report(plain.events)


def test_i35_p1_default_profile_records_are_unchanged() -> None:
    """Issue 35 point 1 (DECISIONS 21): a default profile encodes as before (the compaction
    field is left out at its default) and trims as the spec says."""
    from turnledger.store.codec import encode_event

    started = _of(SessionStarted, Scripted(RuntimeProfile()).events)[0]
    _, payload = encode_event(started)
    assert b"compaction" not in payload
    assert b"low_water" not in payload


def test_i35_p1_a_profile_without_low_water_encodes_as_before() -> None:
    """A compaction stage chosen before issue 35 (clearing alone) records the same fields as
    before; the low water is recorded only when set."""
    from turnledger.store.codec import make_converter

    converter = make_converter()
    assert {"clear_tool_results": True, "keep_tool_result_turns": 3} == converter.unstructure(
        Compaction(clear_tool_results=True))
    assert {"clear_tool_results": False, "keep_tool_result_turns": 3, "low_water": 0.5} == (
        converter.unstructure(Compaction(low_water=0.5)))
