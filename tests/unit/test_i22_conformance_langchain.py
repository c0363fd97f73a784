"""Issue 22: the langchain-core conformance step fails on what it must (its judge, pure)."""

from __future__ import annotations

import pytest

from conformance import langchain_core
from conformance.langchain_core import judge

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
