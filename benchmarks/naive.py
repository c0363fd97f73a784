"""The naive token-budget trim: the quadratic baseline turnledger does not ship (DESIGN.md).

For k = 1, 2, ... drop the k oldest turns, rebuild the whole candidate history and re-estimate
it with `estimate_history_tokens`; stop at the first candidate that fits the budget, or when one
turn is left. Each candidate costs O(n), and up to one candidate per turn is built: O(n x turns).

It builds its candidates with its own loop (not `turnledger.domain.trimming`), so it also serves
as an independent oracle for the fast implementation in the property tests.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from turnledger.domain.estimate import estimate_history_tokens
from turnledger.domain.messages import ChatMessage
from turnledger.domain.trimming import TrimResult
from turnledger.domain.turns import Segmentation, segment

__all__ = ["NaiveTimeout", "naive_candidate", "naive_trim_to_recent_turns"]


class NaiveTimeout(Exception):
    """The time-boxed run stopped before finding the answer; says how far it got."""

    def __init__(self, candidates: int, messages_estimated: int, elapsed: float) -> None:
        super().__init__(f"stopped after {candidates} candidates ({elapsed:.1f} s)")
        self.candidates = candidates
        self.messages_estimated = messages_estimated
        self.elapsed = elapsed


def naive_candidate(
    history: Sequence[ChatMessage],
    dropped_turns: int,
    *,
    breadcrumb: bool = True,
    seg: Segmentation | None = None,
) -> tuple[list[ChatMessage], int]:
    """The history without its ``dropped_turns`` oldest turns, and its dropped message count.

    Same shape as the real trim: leading systems, late systems of the dropped region, one
    breadcrumb, then everything from the first kept turn (an earlier breadcrumb is not counted).
    """
    seg = segment(history) if seg is None else seg
    first_kept = seg.turn_starts[dropped_turns]
    candidate = list(history[: seg.leading_end])
    dropped = 0
    for message in history[seg.leading_end : first_kept]:
        if message.role == "system":
            candidate.append(message)
        elif not message.synthetic:
            dropped += 1
    if breadcrumb:
        candidate.append(ChatMessage.breadcrumb())
    candidate.extend(history[first_kept:])
    return candidate, dropped


def naive_trim_to_recent_turns(
    history: Sequence[ChatMessage],
    budget_tokens: int,
    *,
    breadcrumb: bool = True,
    deadline: float | None = None,
) -> TrimResult[ChatMessage]:
    """R7 the slow way. ``deadline`` (a `time.perf_counter` value) raises `NaiveTimeout`."""
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
    start = time.perf_counter()
    before = estimate_history_tokens(history)
    seg = segment(history)  # segmenting once is fair to the baseline; rebuilding is the cost
    turns = seg.turn_count
    if budget_tokens == 0 or turns <= 1 or before <= budget_tokens:
        return TrimResult(tuple(history), 0, 0, turns, before, before, False)
    estimated = 0
    for k in range(1, turns):
        candidate, dropped = naive_candidate(history, k, breadcrumb=breadcrumb, seg=seg)
        tokens = estimate_history_tokens(candidate)
        estimated += len(candidate)
        if tokens <= budget_tokens or k == turns - 1:
            return TrimResult(tuple(candidate), dropped, k, turns - k, before, tokens, True)
        if deadline is not None and time.perf_counter() > deadline:
            raise NaiveTimeout(k, estimated, time.perf_counter() - start)
    raise AssertionError("unreachable: the loop returns at k == turns - 1")
