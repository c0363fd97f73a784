"""Issue 24 point 3: tool-result clearing, an opt-in profile stage recorded as an event."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import turnledger as tl
from tests.integration.test_replay import append_raw, next_stamp
from tests.properties import examples
from tests.strategies import conversation_histories
from turnledger.audit import Rule
from turnledger.domain.budget import Compaction, ProviderProfile, Route, RuntimeProfile
from turnledger.domain.compaction import cleared_text, is_cleared
from turnledger.domain.events import MessageAppended, ToolResultsCleared
from turnledger.domain.messages import (
    AssistantToolCalls,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.domain.sweep import sweep_orphans
from turnledger.domain.turns import is_breadcrumb_item, segment
from turnledger.errors import UnansweredToolCalls
from turnledger.replay.audit import verify
from turnledger.replay.timeline import timeline

OPENAI = ProviderProfile("openai", "gpt-4o", 128_000)
CLEARING = RuntimeProfile(
    max_context_tokens=100_000,
    compaction=Compaction(clear_tool_results=True, keep_tool_result_turns=2),
)


def _tool_turns(session: tl.Session, turns: int) -> None:
    for n in range(turns):
        session.append(ChatMessage.user(f"question {n}"))
        session.append(AssistantToolCalls("Looking.", (ToolCall(f"c{n}", "search", "{}"),)))
        session.append(ToolResults((ToolResult(f"c{n}", f"result {n} " * 100, "search"),)))
        session.append(ChatMessage.assistant(f"answer {n}"))


def test_i24_default_profile_clears_nothing() -> None:
    """The default profile records no clearing: it behaves as the SPEC says (DECISIONS 21)."""
    with tl.open_store("memory://") as store:
        session = store.start_session(RuntimeProfile(), (OPENAI,), Route("openai", "gpt-4o"))
        _tool_turns(session, 5)
        session.prepare_request()
        assert [] == [e for e in session.events() if isinstance(e, ToolResultsCleared)]


def test_i24_clearing_replaces_older_results_and_keeps_calls_ids_and_log() -> None:
    """Results outside the newest 2 turns become placeholders; calls and ids stay, the log
    keeps the originals, nothing is orphaned and verify and restore agree."""
    with tl.open_store("memory://") as store:
        session = store.start_session(CLEARING, (OPENAI,), Route("openai", "gpt-4o"))
        _tool_turns(session, 4)
        request = session.prepare_request()
        cleared = [e for e in session.events() if isinstance(e, ToolResultsCleared)]
        assert 1 == len(cleared)
        event = cleared[0]
        assert ("c0", "c1") == event.tool_call_ids
        assert (2, 6) == event.positions  # the results of the two oldest turns
        assert event.tokens_after < event.tokens_before
        tools = [m.content for m in request.messages if m.role == "tool"]
        assert cleared_text("c0", "search", len("result 0 " * 100)) in tools[0]
        assert "result 3 " * 100 in tools[3]  # the newest turns keep theirs
        assert () == tuple(sweep_orphans(request.messages).removed_indices)  # pairs intact
        appended = {e.position: e.message for e in session.events()
                    if isinstance(e, MessageAppended)}
        assert "result 0 " * 100 == appended[2].results[0].content  # the log keeps it
        assert request.estimated_tokens == session.prepare_request().estimated_tokens
        assert 1 == sum(isinstance(e, ToolResultsCleared) for e in session.events())
        assert session.chat_view() == store.restore(session.id).chat_view()
        assert () == verify(store.backend).violations
        lines = [e.summary for e in timeline(session.events()) if e.type == "ToolResultsCleared"]
        assert ["tool results cleared at log positions 2, 6 (calls c0, c1), outside the "
                f"newest 2 turns: {event.tokens_before:,} -> {event.tokens_after:,} tokens "
                "(issue 24)"] == lines


def test_i24_clearing_comes_before_dropping_turns() -> None:
    """Clearing saves tokens before the budget trim, so fewer whole turns are dropped."""
    def dropped(profile: RuntimeProfile) -> int:
        with tl.open_store("memory://") as store:
            session = store.start_session(profile, (OPENAI,), Route("openai", "gpt-4o"))
            _tool_turns(session, 6)
            session.prepare_request()
            return len(session.events()) and sum(
                e.dropped_turns for e in session.events() if isinstance(e, tl.TrimDecided))
    budget = RuntimeProfile(max_context_tokens=1_000)
    assert dropped(attrs.evolve(budget, compaction=CLEARING.compaction)) < dropped(budget)


def test_i24_verify_refuses_a_clearing_the_log_cannot_explain() -> None:
    """A ToolResultsCleared whose placeholder is not the log's result cleared is reported."""
    with tl.open_store("memory://") as store:
        session = store.start_session(CLEARING, (OPENAI,), Route("openai", "gpt-4o"))
        _tool_turns(session, 4)
        session.prepare_request()
        _tool_turns(session, 1)
        assert () == verify(store.backend).violations
        good = next(e for e in session.events() if isinstance(e, ToolResultsCleared))
        fake = ToolResults((ToolResult("c2", "something else", "search"),))
        append_raw(store, session.id, attrs.evolve(
            good, **next_stamp(store, session.id), positions=(10,), rewritten=((10, fake),)))
        (violation,) = verify(store.backend).violations
        assert Rule.REPLAY == violation.rule
        assert "ToolResultsCleared at log position 10" in violation.detail


@pytest.mark.parametrize("keep", [0, -1, True])
def test_i24_keep_turns_must_be_a_positive_count(keep: object) -> None:
    """The newest turn's results are always kept: a count below 1 is a profile error."""
    with pytest.raises(tl.InvalidProfile, match=r"compaction\.keep_tool_result_turns"):
        Compaction(clear_tool_results=True, keep_tool_result_turns=keep)  # type: ignore[arg-type]


def test_i24_profile_file_reads_the_compaction_table() -> None:
    """`[compaction]` in a profile file sets the stage; an unknown key is named."""
    from turnledger.domain.budget import parse_profile_document

    doc = parse_profile_document({"compaction": {"clear_tool_results": True,
                                                 "keep_tool_result_turns": 4}})
    assert Compaction(True, 4) == doc.runtime.compaction
    with pytest.raises(tl.InvalidProfile, match=r"compaction\.nope: unknown key"):
        parse_profile_document({"compaction": {"nope": 1}})


@settings(max_examples=examples(40))
@given(
    history=conversation_histories(min_turns=1, max_turns=8),
    keep=st.integers(1, 4),
    budget=st.sampled_from([0, 300, 1_500, 100_000]),
)
def test_i24_property_clearing_never_orphans_keeps_the_newest_turn_and_replays(
    history: list[ConversationMessage], keep: int, budget: int
) -> None:
    """For random histories: no request carries an orphan, the newest turn is sent as it
    was recorded, verify explains every clearing, and restore and replay give the same
    request without deciding anything new."""
    profile = RuntimeProfile(
        max_context_tokens=budget,
        compaction=Compaction(clear_tool_results=True, keep_tool_result_turns=keep),
    )
    with tl.open_store("memory://") as store:
        session = store.start_session(profile, (OPENAI,), Route("openai", "gpt-4o"))
        session.extend([m for m in history if not is_breadcrumb_item(m)])  # ours alone
        try:
            request = session.prepare_request()
        except (UnansweredToolCalls, tl.ContextWindowExceeded):
            return
        swept = sweep_orphans(request.messages)
        assert ((), ()) == (tuple(swept.removed_indices), tuple(swept.rewritten))
        newest = segment(request.messages).last_turn_start
        if newest is not None:
            sent = request.messages[newest:]
            assert not any(is_cleared(m.content) for m in sent if m.role == "tool")
        assert () == verify(store.backend).violations
        restored = store.restore(session.id)
        assert session.chat_view() == restored.chat_view()
        again = restored.prepare_request()
        assert request.digest == again.digest
        assert not any(isinstance(e, ToolResultsCleared)
                       for e in restored.events()[len(session.events()):])
