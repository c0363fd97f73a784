"""`fit_then_build` (ADR-0093): an integration's window is built in the event loop's thread
while its transaction's commit waits on the database in a worker, and only the window the
transaction returns is handed out."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable

import pytest

from turnledger.domain.errors import ConcurrencyConflict
from turnledger.domain.messages import ChatMessage
from turnledger.integrations import Decided, fit_then_build

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
