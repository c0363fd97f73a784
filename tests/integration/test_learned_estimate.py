"""An estimate that learns from the bill (issue 35 point 4, docs/behaviour.md C10).

With `Compaction(learn_estimate=True)` and recorded usages, budget trims count each estimated
token as what the provider billed for the newest requests (bounded to [1, 2]); each trim it
changed records the correction; restore, verify and a what-if under the same profile decide
the same trims.
"""

from __future__ import annotations

import json

import pytest

import turnledger as tl
from turnledger.audit import verify, what_if
from turnledger.domain.budget import (
    BILLED_KEPT,
    MAX_CORRECTION,
    Compaction,
    corrected_limit,
    estimate_correction,
)
from turnledger.domain.events import TrimDecided

BUDGET = 600


def _session(store: tl.Store, learn: bool, low_water: float | None = None) -> tl.Session:
    return store.start_session(tl.RuntimeProfile(
        max_context_tokens=BUDGET,
        compaction=Compaction(learn_estimate=learn, low_water=low_water)))


def _run(session: tl.Session, turns: int, billed_over_estimate: float) -> list[int]:
    """Turns whose provider bills ``billed_over_estimate`` × the estimate; the estimate of
    each request sent."""
    sent = []
    for n in range(turns):
        session.append(tl.ChatMessage.user(f"question {n} " + "why " * 25))
        request = session.prepare_request()
        sent.append(request.estimated_tokens)
        billed = int(request.estimated_tokens * billed_over_estimate)
        session.record_usage({"input_tokens": billed, "output_tokens": 10}, request)
        session.append(tl.ChatMessage.assistant(f"answer {n} " + "because " * 25))
    return sent


def test_i35_p4_the_correction_is_the_bill_over_the_estimate_bounded() -> None:
    assert estimate_correction([(150, 100)], learn=False) is None
    assert estimate_correction([], learn=True) is None
    assert estimate_correction([(90, 100)], learn=True) is None  # never loosened
    assert 1.5 == estimate_correction([(100, 100), (200, 100)], learn=True)
    assert MAX_CORRECTION == estimate_correction([(900, 100)], learn=True)
    assert 1.3333 == estimate_correction([(400, 300)], learn=True)
    assert (400, 600) == (corrected_limit(600, 1.5), corrected_limit(600, None))


def test_i35_p4_a_billed_underestimate_trims_to_the_corrected_budget() -> None:
    """The provider bills 1.5 × the estimate: with learning, the requests after the first
    usages fit 600 / 1.5 = 400 estimated tokens; without, they fill the 600."""
    with tl.open_store("memory://") as store:
        learning, plain = _session(store, True), _session(store, False)
        learned, spec = _run(learning, 14, 1.5), _run(plain, 14, 1.5)
        trims = [e for e in learning.events() if isinstance(e, TrimDecided)]
        plain_trims = [e for e in plain.events() if isinstance(e, TrimDecided)]
    assert max(learned[2:]) <= 401 < max(spec)  # 600 / 1.4993 at the loosest
    assert max(spec) <= BUDGET
    assert trims
    for trim in trims:  # int() of 1.5 x the estimate bills a hair under 1.5
        assert trim.estimate_correction == pytest.approx(1.5, abs=0.005)
        assert trim.tokens_after <= corrected_limit(BUDGET, trim.estimate_correction)
    assert {None} == {t.estimate_correction for t in plain_trims}


def test_i35_p4_only_the_newest_bills_count_and_an_overestimate_changes_nothing() -> None:
    with tl.open_store("memory://") as store:
        session = _session(store, True)
        _run(session, BILLED_KEPT, 1.8)
        _run(session, BILLED_KEPT, 0.7)  # the older bills age out: nothing to correct
        _run(session, 4, 1.0)
        events = session.events()
    late = [e for e in events if isinstance(e, TrimDecided)][-3:]
    assert late
    assert {None} == {t.estimate_correction for t in late}


@pytest.mark.parametrize("low_water", [None, 0.6])
def test_i35_p4_restore_verify_and_what_if_decide_the_same(tmp_path, low_water) -> None:
    """The usages are in the snapshot and the log: a restored session goes on with the same
    correction, verify finds nothing, a what-if under the same profile the same requests."""
    url = f"sqlite:///{tmp_path / 'learn.db'}"
    with tl.open_store(url, snapshot_interval=5) as store:
        session = _session(store, True, low_water)
        _run(session, 6, 1.6)
        restored = store.restore(session.id)
        assert restored.state == session.state
        _run(restored, 6, 1.6)
        events = store.events_of(session.id)
        assert [] == list(verify(store.backend).violations)
    profile = tl.RuntimeProfile(max_context_tokens=BUDGET,
                                compaction=Compaction(learn_estimate=True, low_water=low_water))
    report = what_if(events, profile)
    assert report.recorded == report.what_if
    trims = [e for e in events if isinstance(e, TrimDecided)]
    assert trims
    assert all(t.estimate_correction == pytest.approx(1.6, abs=0.005)
               for t in trims if t.originator_version > 20)


def test_i35_p4_what_if_learn_estimate_on_the_command_line(tmp_path, capsys) -> None:
    """``what-if --learn-estimate`` replays a session whose provider billed 1.5 × the
    estimate: its requests fit 400 of the 600 estimated tokens; the recorded ones did not."""
    from turnledger.cli import main

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with tl.open_store(url) as store:
        session = _session(store, False)
        _run(session, 14, 1.5)
    assert 0 == main(["--store", url, "what-if", session.id, "--learn-estimate", "--json"])
    rows = json.loads(capsys.readouterr().out)["requests"]
    assert max(row["what_if"]["estimated_tokens"] for row in rows) <= 401
    assert max(row["recorded"]["estimated_tokens"] for row in rows) > 401
    assert 0 == main(["--store", url, "report", session.id, "-o", str(tmp_path / "r.html"),
                      "--what-if", "compaction.learn_estimate=true"])
    assert "compaction.learn_estimate" in (tmp_path / "r.html").read_text("utf-8")
