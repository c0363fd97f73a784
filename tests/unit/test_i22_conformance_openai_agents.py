"""The Agents SDK conformance step's judge (issue 22): what fails the CI step and what not."""

from __future__ import annotations

from conformance.openai_agents import EXCLUDED, _judge

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
