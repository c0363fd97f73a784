"""The conformance steps' judges (issue 22): what fails a CI step that runs a framework's own
test suite through turnledger (`conformance.langchain_core`, `conformance.openai_agents`), and
what does not. Pure: no suite is fetched or run."""

from __future__ import annotations

import pytest

from conformance import langchain_core
from conformance.langchain_core import judge
from conformance.openai_agents import EXCLUDED, _judge

# -- langchain-core --

PASSED = {"runnables/test_history.py::test_input_messages": "passed"}
BUILT = {"tests/unit_tests/runnables/test_history.py::test_input_messages": 1}


def test_i22_conformance_passes_when_every_test_passes_through_turnledger() -> None:
    """Every test passed and histories were built: nothing to report."""
    assert [] == judge(PASSED, BUILT)


def test_i22_conformance_fails_on_a_failure_outside_the_exclusions() -> None:
    """A failed or erroring test that is not excluded fails the step, by name."""
    outcomes = {**PASSED, "chat_history/test_chat_history.py::test_x": "error"}
    assert ["chat_history/test_chat_history.py::test_x: error"] == judge(outcomes, BUILT)


def test_i22_conformance_fails_when_the_swap_did_not_happen() -> None:
    """All passed but no turnledger history was built: the swap failed, so the step fails."""
    assert ["no test built a turnledger history: the swap did not happen"] == judge(
        PASSED, dict.fromkeys(BUILT, 0)
    )


def test_i22_conformance_fails_on_a_stale_exclusion(monkeypatch: pytest.MonkeyPatch) -> None:
    """An excluded test that passes, or is no longer run, fails the step: the list is stale."""
    name = "runnables/test_history.py::test_input_messages"
    monkeypatch.setattr(langchain_core, "EXCLUDED", {name: "why", "gone.py::test_y": "why"})
    assert [f"{name}: excluded (why) but it passed: drop it from EXCLUDED",
            "gone.py::test_y: excluded but not run"] == judge(PASSED, BUILT)


# -- the OpenAI Agents SDK --

LISTED = next(iter(EXCLUDED))
OK = "tests/memory/test_session.py::test_basic"


def test_i22_an_unlisted_failure_fails_the_step() -> None:
    """A failure outside the exclusions: exit 1."""
    assert 1 == _judge("0", {OK: "passed", "tests/x.py::test_y": "failed"}, {OK})


def test_i22_a_listed_failure_and_a_stale_exclusion_pass_the_step() -> None:
    """An excluded test that fails (any parameters) or passes: exit 0."""
    assert 0 == _judge("0", {OK: "passed", f"{LISTED}[a]": "failed"}, {OK})
    assert 0 == _judge("0", {OK: "passed", LISTED: "passed"}, {OK, LISTED})


def test_i22_no_swap_fails_the_step() -> None:
    """All green but no test built a TurnledgerSession (the swap did not happen): exit 1."""
    assert 1 == _judge("0", {OK: "passed"}, set())
