"""What the provider billed, recorded beside what turnledger decided (issue 35 point 3).

`Session.record_usage` ties a provider's usage to the request it answers (by the request's
digest), as `UsageRecorded`; the counters, the analytics tables and `stats` sum it; `verify`
checks it names a request the log holds; `HistoryTrimmed` and `TrimDecided` say the budget
and the tokens before and after.
"""

from __future__ import annotations

import json
from uuid import UUID

import attrs
import pytest

import turnledger as tl
from turnledger.audit import verify
from turnledger.cli import main
from turnledger.domain.decider import request_digest
from turnledger.domain.events import HistoryTrimmed, RequestPrepared, TrimDecided, UsageRecorded
from turnledger.errors import InvalidUsage
from turnledger.projections.analytics import Analytics
from turnledger.projections.counters import fold_counters
from turnledger.store.session import _USAGE_TAIL

CHAT = {"prompt_tokens": 1_000, "completion_tokens": 40,
        "prompt_tokens_details": {"cached_tokens": 768}}


def _turn(session: tl.Session, n: int) -> tl.PreparedRequest:
    session.append(tl.ChatMessage.user(f"question {n} " + "why " * 30))
    request = session.prepare_request()
    session.append(tl.ChatMessage.assistant(f"answer {n} " + "because " * 30))
    return request


def test_i35_p3_usage_answers_the_newest_request_by_default() -> None:
    with tl.open_store("memory://") as store:
        session = store.start_session()
        _turn(session, 0)
        second = _turn(session, 1)
        (event,) = session.record_usage(CHAT)
        prepared = [e for e in session.events() if isinstance(e, RequestPrepared)][-1]
    assert isinstance(event, UsageRecorded)
    assert (prepared.originator_version, second.digest, second.estimated_tokens) == (
        event.request_position, event.digest, event.estimated_tokens)
    assert ("openai-chat", 1_000, 768, 0, 40) == (
        event.api, event.input_tokens, event.cache_read_tokens, event.cache_write_tokens,
        event.output_tokens)


def test_i35_p3_usage_names_its_request_by_object_or_digest_even_far_back() -> None:
    """A usage that arrives late answers the request it names, however far back in the log
    (past the tail `record_usage` reads first)."""
    with tl.open_store("memory://") as store:
        session = store.start_session()
        first = _turn(session, 0)
        while session.version < _USAGE_TAIL + 20:
            _turn(session, session.version)
        (by_object,) = session.record_usage(CHAT, first)
        (by_digest,) = session.record_usage({"input_tokens": 90, "output_tokens": 2},
                                            first.digest)
    assert (first.digest, first.digest) == (by_object.digest, by_digest.digest)
    assert by_object.request_position == by_digest.request_position < 10


def test_i35_p3_refused_usage_records_nothing() -> None:
    with tl.open_store("memory://") as store:
        session = store.start_session()
        session.append(tl.ChatMessage.user("hi"))
        with pytest.raises(InvalidUsage, match="prepared no request: there is no request"):
            session.record_usage(CHAT)
        session.prepare_request()
        version = session.version
        with pytest.raises(InvalidUsage, match="no request with digest 'nope'"):
            session.record_usage(CHAT, "nope")
        with pytest.raises(InvalidUsage, match=r"keys: tokens"):
            session.record_usage({"tokens": 3})
        with pytest.raises(InvalidUsage, match="request must be a PreparedRequest, its digest"):
            session.record_usage(CHAT, 7)  # type: ignore[arg-type]
        assert version == session.version
    assert issubclass(InvalidUsage, tl.InvalidMessage)  # a ValueError, as bad input is


def test_i35_p3_another_process_records_the_usage_of_a_restored_session(tmp_path) -> None:
    """The request is read back from the store: a worker that did not prepare it (a restored
    session on another store object) records its usage."""
    url = f"sqlite:///{tmp_path / 'usage.db'}"
    with tl.open_store(url) as store:
        session = store.start_session()
        request = _turn(session, 0)
    with tl.open_store(url) as store:
        (event,) = store.restore(session.id).record_usage(CHAT, request.digest)
        assert [] == list(verify(store.backend).violations)
    assert request.digest == event.digest


def test_i35_p3_counters_analytics_and_stats_sum_the_bill(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'stats.db'}"
    with tl.open_store(url) as store:
        session = store.start_session()
        first = _turn(session, 0)
        session.record_usage(CHAT, first)
        second = _turn(session, 1)
        session.record_usage({"input_tokens": 200, "cache_read_input_tokens": 1_500,
                              "cache_creation_input_tokens": 300, "output_tokens": 60}, second)
        counters = fold_counters(session.events())
        with Analytics(store.backend) as analytics:
            analytics.catch_up()
            (row,) = analytics.session_stats()
    estimated = first.estimated_tokens + second.estimated_tokens
    expected = {"usage_records": 2, "billed_input_tokens": 3_000, "cache_read_tokens": 2_268,
                "cache_write_tokens": 300, "billed_output_tokens": 100,
                "billed_estimated_tokens": estimated}
    assert expected == {k: getattr(counters, k) for k in expected}
    assert expected == {k: row[k] for k in expected}
    assert 2_268 / 3_000 == counters.cache_hit_rate
    assert estimated / 3_000 == counters.estimate_ratio
    assert main(["--store", url, "stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert expected == {k: stats["sessions"][0][k] for k in expected}
    assert main(["--store", url, "stats"]) == 0
    text = capsys.readouterr().out
    assert "provider usage per session" in text
    assert f"{session.id[:8]}" in text
    assert "75.6 %" in text


def test_i35_p3_verify_finds_a_usage_that_names_no_request() -> None:
    """A usage written by a buggy writer (a valid chain, bypassing the decider) that names no
    request, or a request with another digest or estimate, is reported (E6)."""
    with tl.open_store("memory://") as store:
        session = store.start_session()
        request = _turn(session, 0)
        (good,) = session.record_usage(CHAT, request)
        assert [] == list(verify(store.backend).violations)
        uuid = UUID(session.id)
        version, chain = store.backend.head(uuid)
        bad = [
            attrs.evolve(good, originator_version=version + 1, request_position=2),
            attrs.evolve(good, originator_version=version + 2, digest="f" * 64),
            attrs.evolve(good, originator_version=version + 3,
                         estimated_tokens=good.estimated_tokens + 1),
        ]
        store.backend.append(uuid, bad, prev_chain=chain)
        found = verify(store.backend).violations
    assert [(version + n, "E6-digest") for n in (1, 2, 3)] == [
        (f.position, f.rule.value) for f in found]
    assert "the log has no request there" in found[0].detail
    assert f"estimated at {good.estimated_tokens} tokens" in found[2].detail


def test_i35_p3_history_trimmed_says_tokens_and_budget_as_the_trim_decided() -> None:
    profile = tl.RuntimeProfile(max_context_tokens=300)
    with tl.open_store("memory://") as store:
        session = store.start_session(profile)
        for n in range(8):
            _turn(session, n)
        events = session.events()
    trims = [e for e in events if isinstance(e, TrimDecided)]
    notices = [e for e in events if isinstance(e, HistoryTrimmed)]
    assert trims
    assert len(trims) == len(notices)
    for trim, notice in zip(trims, notices, strict=True):
        assert (trim.tokens_before, trim.tokens_after, 300) == (
            notice.tokens_before, notice.tokens_after, notice.budget)
        assert 300 == trim.budget
        assert notice.tokens_after <= 300 < notice.tokens_before


def test_i35_p3_a_framework_window_is_answered_without_a_request_record() -> None:
    """An agent framework builds its own request from `fit_window`'s window: its usage answers
    that window (no request position; the window's digest and estimate), and verify accepts
    it; a request prepared after it is what the next usage answers."""
    with tl.open_store("memory://") as store:
        session = store.start_session()
        window = session.fit_window(messages=[tl.ChatMessage.user("hello " * 20)])
        (fitted,) = session.record_usage({"input_tokens": 40, "output_tokens": 3})
        estimate = session.state.chat_tokens()
        request = session.prepare_request()
        (prepared,) = session.record_usage({"input_tokens": 41, "output_tokens": 3})
        assert [] == list(verify(store.backend).violations)
        line = tl.audit.timeline([fitted])[0].summary
    assert (None, request_digest(window), estimate) == (
        fitted.request_position, fitted.digest, fitted.estimated_tokens)
    assert request.digest == prepared.digest
    assert prepared.request_position is not None
    assert line.startswith("provider billed the window handed to the framework: 40 input")
