"""What the framework integrations share (`turnledger.integrations`): `fit_then_build`
(ADR-0093: an integration's window is built in the event loop's thread while its transaction's
commit waits on the database in a worker, and only the window the transaction returns is handed
out), `after_recorded` (what is new since the record), `IntegrationOptions`, `Asked` (the window
each model call was handed) and the size of each framework module (issue 34)."""

from __future__ import annotations

import asyncio
import gc
import importlib
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import turnledger.integrations
from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.errors import ConcurrencyConflict
from turnledger.domain.messages import ChatMessage
from turnledger.integrations import (
    CONFLICT_BUDGET_SECONDS,
    Asked,
    Decided,
    IntegrationOptions,
    after_recorded,
    fit_then_build,
    options_of,
)
from turnledger.store.summaries import Summarizer

WAIT = 10.0
"""Seconds a fit waits for the build it expects to overlap (reached only when it does not)."""


def _window(text: str) -> list[ChatMessage]:
    return [ChatMessage.user(text)]


def _run(fit: Callable[[Decided], list[ChatMessage]],
         build: Callable[[list[ChatMessage]], object]) -> object:
    return asyncio.run(fit_then_build(fit, build))


def test_i22_the_window_is_built_in_the_loop_while_the_fit_still_commits() -> None:
    built = threading.Event()
    seen: dict[str, object] = {}

    def fit(decided: Decided) -> list[ChatMessage]:
        window = _window("kept")
        decided(window)
        seen["built while the fit waited"] = built.wait(WAIT)  # the commit, still waiting
        return window

    def build(window: list[ChatMessage]) -> str:
        seen.setdefault("builds", []).append(window[0].content)  # type: ignore[union-attr]
        seen["build thread"] = threading.get_ident()
        built.set()
        return f"built {window[0].content}"

    result = _run(fit, build)
    assert ("built kept", True, ["kept"], threading.get_ident()) == (
        result, seen["built while the fit waited"], seen["builds"], seen["build thread"])


def test_i22_a_window_decided_again_is_the_one_built_and_handed_out() -> None:
    """A retry after a conflict decides another window: the first one's build is dropped."""
    builds: list[str] = []

    def fit(decided: Decided) -> list[ChatMessage]:
        decided(_window("first attempt"))
        threading.Event().wait(0.05)  # the first attempt's commit fails meanwhile
        second = _window("second attempt")
        decided(second)
        return second

    def build(window: list[ChatMessage]) -> str:
        builds.append(window[0].content)
        return window[0].content

    assert "second attempt" == _run(fit, build)
    assert "second attempt" == builds[-1]


def test_i22_a_fit_that_raises_after_telling_raises_and_hands_nothing_out() -> None:
    def fit(decided: Decided) -> list[ChatMessage]:
        decided(_window("never written"))
        threading.Event().wait(0.05)
        raise ConcurrencyConflict("another writer recorded first")

    with pytest.raises(ConcurrencyConflict, match="another writer"):
        _run(fit, lambda window: window)


def test_i22_a_fit_with_nothing_to_write_is_built_once_it_returns() -> None:
    builds: list[str] = []

    def build(window: list[ChatMessage]) -> str:
        builds.append(window[0].content)
        return window[0].content

    assert "as it was" == _run(lambda decided: _window("as it was"), build)
    assert ["as it was"] == builds


def test_i22_a_build_that_fails_early_fails_after_the_fit_returned() -> None:
    """The build's error is raised once the write is done, never while it is in flight."""
    finished = threading.Event()

    def fit(decided: Decided) -> list[ChatMessage]:
        window = _window("recorded")
        decided(window)
        threading.Event().wait(0.05)
        finished.set()
        return window

    def build(window: list[ChatMessage]) -> str:
        if not finished.is_set():
            raise ValueError("cannot build")
        raise ValueError(f"cannot build {window[0].content} either")

    with pytest.raises(ValueError, match="cannot build recorded either"):
        _run(fit, build)


def test_i22_a_call_cancelled_while_the_fit_writes_leaves_the_write_to_finish() -> None:
    """Cancelling the framework's call does not stop a write halfway: it lands, and its
    failure, had there been one, is not reported as never retrieved."""
    release, finished = threading.Event(), threading.Event()

    def fit(decided: Decided) -> list[ChatMessage]:
        release.wait(WAIT)
        finished.set()
        raise ConcurrencyConflict("lost the race after the call was cancelled")

    reported: list[str] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, context: reported.append(context["message"]))
        call = asyncio.ensure_future(fit_then_build(fit, lambda window: window))
        await asyncio.sleep(0.05)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        release.set()
        while not finished.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the worker's outcome reaches the loop
        gc.collect()  # a task whose error nobody took reports it when it goes

    asyncio.run(main())
    assert (True, []) == (finished.is_set(), reported)


# -- what is new since the record (issue 34: one helper for the four integrations) --


def test_i34_after_recorded_is_after_the_newest_place_the_record_lines_up() -> None:
    """The index after the newest place where the newest recorded items line up; the place
    where the most line up wins (a question asked again after it is new), else None."""
    assert 3 == after_recorded(list("xaqq"), list("aq"))  # the second q is asked again
    assert 2 == after_recorded(list("aqbz"), list("xaq"))
    assert 2 == after_recorded(list("qq"), list("eq"))  # one lines up: the newest place
    assert after_recorded(list("abc"), list("z")) is None
    assert after_recorded(list("abc"), []) is None


def test_i34_after_recorded_whole_needs_every_compared_item_to_line_up() -> None:
    """``whole``: a place counts only where the whole record lines up, or where the given items
    begin inside it (the Agents SDK's ``limit`` reads); the shortest new tail wins."""
    assert 5 == after_recorded(list("xabcd"), list("abcd"), whole=True)
    assert 2 == after_recorded(list("cdef"), list("abcd"), whole=True)  # begins inside
    assert after_recorded(list("xbcdz"), list("abcd"), whole=True) is None
    assert 3 == after_recorded(list("bcd"), list("abcd"), whole=True,
                               same=lambda item, kept: item == kept)


def test_i34_after_recorded_compares_keys_once_and_at_most_most_items() -> None:
    """``key`` is computed once per given item; ``most`` bounds the record compared (so an
    older difference does not matter)."""
    seen: list[str] = []

    def key(item: str) -> str:
        seen.append(item)
        return item.upper()

    assert 3 == after_recorded(["a", "b", "c", "d"], ["Z", "B", "C"], key=key, most=2)
    assert sorted(seen) == sorted(set(seen))


# -- the options every integration takes (issue 34) --


def test_i34_options_keywords_win_over_the_options_value() -> None:
    """``options=`` is the one value; a keyword given replaces its field; none: the
    defaults."""
    profile = RuntimeProfile(max_context_tokens=300)
    base = IntegrationOptions(profile=profile, conflict_budget_seconds=5)
    assert base is options_of(base, {})
    assert IntegrationOptions(profile=profile, conflict_budget_seconds=0.0) == options_of(
        base, {"conflict_budget_seconds": 0})
    assert CONFLICT_BUDGET_SECONDS == options_of(None, {}).conflict_budget_seconds
    named = IntegrationOptions(summarizer=lambda messages, previous: "s").summarizer
    assert isinstance(named, Summarizer)


def test_e11_options_are_checked_when_built() -> None:
    """A bad budget, a summarizer that is not callable, a value that is no options, or a
    session's keyword given to an object that was given its session are refused."""
    with pytest.raises(ValueError, match="conflict_budget_seconds must be a number >= 0"):
        IntegrationOptions(conflict_budget_seconds=-1)
    with pytest.raises(TypeError, match="a summarizer must be callable"):
        options_of(None, {"summarizer": "no"})  # type: ignore[typeddict-item]
    with pytest.raises(TypeError, match="options must be IntegrationOptions, got dict"):
        options_of({}, {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword argument 'profile'"):
        options_of(None, {"profile": None}, session_given=True)  # type: ignore[typeddict-unknown-key]


# -- what the integrations share for usages (issue 35) and their size (issue 34) --


def test_i34_asked_holds_a_window_per_call_until_taken_and_drops_all_past_most() -> None:
    """A window held for a call is got and then taken once; past ``most`` held, the next hold
    drops the others first (calls whose reply never came); ``most=None`` drops none."""
    asked: Asked[str, list[ChatMessage]] = Asked(most=2)
    window = _window("q")
    asked.hold("run-1", window)
    assert window is asked.get("run-1")
    assert window is asked.take("run-1")
    assert asked.take("run-1") is None
    for n in range(3):
        asked.hold(f"run-{n}", _window(str(n)))
    asked.hold("last", window)  # three held: more than two, so they are dropped first
    assert [None, None, None, window] == [asked.get(k) for k in ("run-0", "run-1", "run-2",
                                                                  "last")]
    unbounded: Asked[int, str] = Asked(most=None)
    for n in range(300):
        unbounded.hold(n, str(n))
    assert ["0", "299"] == [unbounded.get(0), unbounded.get(299)]


FRAMEWORK_MODULES = ("google_adk", "langchain", "langchain_agents", "langchain_history",
                     "langchain_messages", "openai_agents", "openai_agents_items",
                     "pydantic_ai", "pydantic_ai_messages", "google_adk_messages")


def test_i34_each_framework_module_is_at_most_350_lines() -> None:
    """An integration is an adapter (STYLE 24): each framework's module holds its adapter and
    at most 350 lines; what the frameworks share lives in `turnledger.integrations` itself."""
    folder = Path(turnledger.integrations.__file__).parent
    found = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    assert sorted(FRAMEWORK_MODULES) == sorted(found)
    sizes = {name: len((folder / f"{name}.py").read_text(encoding="utf-8").splitlines())
             for name in FRAMEWORK_MODULES}
    assert {} == {name: size for name, size in sizes.items() if size > 350}


def test_i34_a_framework_module_without_its_framework_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Importing an integration whose framework is not installed raises an `ImportError`
    naming the module, what it needs and the extra to install (`missing_extra`)."""
    pytest.importorskip("langchain_core")
    monkeypatch.setitem(sys.modules, "langchain_core.messages", None)  # as if not installed
    for name in ("langchain_messages", "langchain_history", "langchain"):
        monkeypatch.delitem(sys.modules, f"turnledger.integrations.{name}", raising=False)
    with pytest.raises(ImportError) as raised:
        importlib.import_module("turnledger.integrations.langchain_messages")
    assert ("turnledger.integrations.langchain needs langchain-core: "
            "pip install 'turnledger[langchain]'") == str(raised.value)
