"""The runtime's summarizer, called between two decisions of a budget trim (issue 24).

turnledger never calls a model (ADR-0086): a runtime that wants the turns a trim drops shown
as a summary gives its session a `Summarizer`, a callable around its own model call with a
declared name and a time limit. When a token-budget trim drops turns, the session calls it
with exactly those turns' chat messages and the summary the view shows now (summaries roll),
outside the decider, and the decider records what it returned (`TurnsSummarized`) or why it
was not used (`SummaryRefused`): it raised, timed out, returned no text or too large a one.
The request goes out either way. Replay and restore read the text from the log.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs

from turnledger.domain.decider import SummaryOutcome, SummaryPlan
from turnledger.domain.events import SummaryRefusal
from turnledger.domain.messages import ChatMessage

__all__ = ["Summarizer", "as_summarizer", "summary_outcome"]

DEFAULT_SUMMARY_TIMEOUT = 30.0
"""Seconds a summarizer may take before the plain trim is recorded instead."""

SummaryFunction = Callable[[Sequence[ChatMessage], str | None], str | Awaitable[str]]


@attrs.frozen
class Summarizer:
    """A runtime's summarizer: ``summarize(turns, previous)`` returns the summary text of
    ``turns`` (the chat messages a trim drops, oldest first), rolling in ``previous`` (the
    summary the view shows now, None for the first). Sync, or a coroutine function (run to
    completion in the thread that waits for it). ``name`` is recorded with every summary;
    ``timeout`` (seconds, None: no limit) bounds the call: past it the plain trim is
    recorded and the request goes out (the call is left to finish in its thread)."""

    name: str
    summarize: SummaryFunction
    timeout: float | None = DEFAULT_SUMMARY_TIMEOUT

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError("a Summarizer needs a name (str), recorded with its summaries")
        if not callable(self.summarize):
            raise TypeError("Summarizer.summarize must be callable")
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"Summarizer.timeout must be positive or None, got {self.timeout}")


def as_summarizer(value: Summarizer | SummaryFunction | None) -> Summarizer | None:
    """``value`` as a `Summarizer`: a bare callable is named by its ``summarizer_name``
    attribute, else its qualified name."""
    if value is None or isinstance(value, Summarizer):
        return value
    if not callable(value):
        raise TypeError(f"a summarizer must be callable, got {type(value).__name__}")
    name = getattr(value, "summarizer_name", None) or getattr(
        value, "__qualname__", type(value).__name__)
    return Summarizer(str(name), value)


async def _awaited(result: Awaitable[str]) -> str:
    return await result


def _call(summarizer: Summarizer, plan: SummaryPlan) -> Any:
    result = summarizer.summarize(list(plan.messages), plan.previous)
    if inspect.isawaitable(result):
        result = _run_awaitable(result)
    return result


def _run_awaitable(result: Awaitable[str]) -> Any:
    """Run ``result`` to completion: here, or in a thread of its own when this thread runs an
    event loop already (a session used from a coroutine, without a time limit)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(result))
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = asyncio.run(_awaited(result))
        except Exception as error:  # raised again in the caller's thread
            box["error"] = error

    thread = threading.Thread(target=work, name="summarizer loop", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def summary_outcome(summarizer: Summarizer, plan: SummaryPlan) -> SummaryOutcome:
    """Call ``summarizer`` on ``plan`` under its time limit; its text or why there is none.
    Never raises for what the summarizer does (an exception is a refusal, recorded)."""
    name = summarizer.name
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["text"] = _call(summarizer, plan)
        except Exception as error:  # the refusal records it
            box["error"] = error

    if summarizer.timeout is None:
        work()
    else:
        thread = threading.Thread(target=work, name=f"summarizer {name}", daemon=True)
        thread.start()
        thread.join(summarizer.timeout)
        if thread.is_alive():
            return SummaryOutcome(plan, name, refusal=SummaryRefusal.TIMED_OUT,
                                  detail=f"no answer within {summarizer.timeout:g} s")
    if "error" in box:
        error = box["error"]
        return SummaryOutcome(plan, name, refusal=SummaryRefusal.RAISED,
                              detail=f"{type(error).__name__}: {error}"[:2000])
    text = box.get("text")
    if not isinstance(text, str) or not text.strip():
        return SummaryOutcome(plan, name, refusal=SummaryRefusal.INVALID,
                              detail=f"it returned {type(text).__name__}, not a non-empty text")
    return SummaryOutcome(plan, name, text=text)
