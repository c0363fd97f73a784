"""The fewest cache breaks any whole-turn trim could reach on a session (issue 35's goals).

`benchmarks.cache` measures what each trim setting does; this module says what no setting can
do. A trim that keeps whole turns, never goes over the budget and keeps the newest turn is, at
every request, a choice of the first turn kept (never moving back: trims are permanent). Each
change of that choice is a cache break (the request no longer starts with the previous one);
the model sees more the later it moves. Over the session's own requests, dynamic programming
finds, for a weight ``w`` on the context seen, the schedule that minimises
``breaks - w * context``; the best such figure, plus ``w`` times the context the goal asks
for, is a lower bound on the breaks of every schedule meeting it (the Lagrangian dual):

    floor = max over w >= 0 of  min over schedules (breaks - w * (context - goal * budget * n))

It leaves out what only makes real trims worse (the breadcrumb's tokens, a summary), so every
lane of `benchmarks.cache` is at or above it. When the floor at a budget is above the goal of
at most one break per 10 turns, no trim setting can meet the goals there: the turns are too
large for the budget, and the measure to change is the budget, not the trim.

    .venv/bin/python -m benchmarks.cache_floor      # both data sets, budgets 8,000 and 32,000
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from turnledger.domain.estimate import message_tokens
from turnledger.domain.messages import (
    Chat,
    ConversationMessage,
    is_real_user_message,
    to_chat_messages,
)

INFINITY = float("inf")


@dataclass(frozen=True)
class Requests:
    """A session's requests as the floor sees them: turn sizes and each request's place."""

    head: int
    """Tokens before the first turn (the system prompt): in every request."""
    turns: tuple[int, ...]
    """Tokens of each whole turn once it is older than the newest."""
    at: tuple[tuple[int, int], ...]
    """Per request: (its turn, 1-based; tokens of that turn's messages it holds)."""

    def context(self, request: int, first: int, prefix: Sequence[int]) -> int:
        """Tokens of ``request`` when turns before ``first`` (1-based) are dropped."""
        turn, partial = self.at[request]
        return self.head + prefix[turn - 1] - prefix[first - 1] + partial


def requests_of(items: Sequence[ConversationMessage],
                points: Sequence[tuple[int, int]]) -> Requests:
    """The requests made before ``items[index]`` for each ``(index, turn)`` of ``points``."""
    starts = [i for i, item in enumerate(items)
              if isinstance(item, Chat) and is_real_user_message(item.message)]
    bounds = [*starts, len(items)]
    head = sum(message_tokens(m, current_turn=False)
               for m in to_chat_messages(items[:starts[0] if starts else len(items)]))
    turns = tuple(sum(message_tokens(m, current_turn=False)
                      for m in to_chat_messages(items[a:b]))
                  for a, b in pairwise(bounds))
    at = []
    for index, turn in points:
        if turn == 0:
            continue  # before the first user message: nothing to trim
        start = starts[turn - 1]
        partial = sum(message_tokens(m, current_turn=True)
                      for m in to_chat_messages(items[start:index]))
        at.append((turn, partial))
    return Requests(head, turns, tuple(at))


def _prefix(requests: Requests) -> list[int]:
    prefix = [0]
    for size in requests.turns:
        prefix.append(prefix[-1] + size)
    return prefix


def best_schedule(requests: Requests, budget: int, weight: float,
                  steady_from: int = 0) -> tuple[float, int, int]:
    """The schedule minimising ``breaks - weight * context`` over the requests from
    ``steady_from`` on: (that value, its breaks, its context there). Raises ValueError when a
    request cannot fit even with its own turn alone."""
    prefix = _prefix(requests)
    # value[f]: best (objective, breaks, context) of a schedule whose current first kept turn
    # is f, over the requests so far; only first turns that fit are kept.
    value: dict[int, tuple[float, int, int]] = {1: (0.0, 0, 0)}
    for r, (turn, _) in enumerate(requests.at):
        counted = r >= steady_from
        best_before: tuple[float, int, int] | None = None  # best value[f'] with f' < f
        previous = sorted(value)
        p = 0
        nxt: dict[int, tuple[float, int, int]] = {}
        lowest = min(previous)
        for first in range(lowest, turn + 1):
            while p < len(previous) and previous[p] < first:
                candidate = value[previous[p]]
                if best_before is None or candidate[0] < best_before[0]:
                    best_before = candidate
                p += 1
            ctx = requests.context(r, first, prefix)
            if ctx > budget:
                continue
            options = []
            if first in value:
                options.append(value[first])  # no trim: no break
            if best_before is not None:
                o, b, c = best_before
                options.append((o + (1 if counted else 0), b + (1 if counted else 0), c))
            if not options:
                continue
            o, b, c = min(options)
            if counted:
                nxt[first] = (o - weight * ctx, b, c + ctx)
            else:
                nxt[first] = (o, b, c)
        if not nxt:
            raise ValueError(f"request {r} does not fit {budget} tokens with its turn alone")
        value = nxt
    return min(value.values())


@dataclass(frozen=True)
class Floor:
    """The fewest breaks per 10 turns at a mean context of at least ``goal`` of the budget."""

    budget: int
    goal: float
    floor_per_10_turns: float
    """No whole-turn schedule within the budget that meets the mean context does better."""
    schedule_per_10_turns: float | None
    """Breaks per 10 turns of the best schedule found that meets the mean (an upper bound on
    the optimum; None when none was found)."""
    schedule_mean_of_budget: float | None
    least_per_10_turns: float
    """Without the mean-context goal: the fewest breaks that keep every request in budget."""

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def floor(requests: Requests, budget: int, goal: float, steady_from: int,
          turns: int, rounds: int = 40) -> Floor:
    """The `Floor` of ``requests`` at ``budget`` over the steady state (``turns`` turns)."""
    count = len(requests.at) - steady_from
    target = goal * budget * count
    scale = 1.0 / budget  # a weight per budget's worth of context

    def dual(w: float) -> tuple[float, int, int]:
        value, breaks, context = best_schedule(requests, budget, w * scale, steady_from)
        return value + w * scale * target, breaks, context

    least = dual(0.0)[1]
    lo, hi = 0.0, 1.0
    while dual(hi)[2] < target and hi < 1e6:  # a weight high enough to meet the mean
        hi *= 2
    best = -INFINITY
    schedule: tuple[int, int] | None = None
    for _ in range(rounds):  # the dual is concave in w: a ternary search finds its top
        a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        da, db = dual(a), dual(b)
        for d in (da, db):
            best = max(best, d[0])
            if d[2] >= target and (schedule is None or d[1] < schedule[0]):
                schedule = (d[1], d[2])
        if da[0] < db[0]:
            lo = a
        else:
            hi = b
    top = dual(hi)
    if top[2] >= target and (schedule is None or top[1] < schedule[0]):
        schedule = (top[1], top[2])
    per10 = 10 / turns
    return Floor(
        budget=budget, goal=goal,
        floor_per_10_turns=round(max(best, 0.0) * per10, 2),
        schedule_per_10_turns=None if schedule is None else round(schedule[0] * per10, 2),
        schedule_mean_of_budget=None if schedule is None else round(
            schedule[1] / count / budget, 4),
        least_per_10_turns=round(least * per10, 2),
    )


def floors(turns: int = 300, budgets: Sequence[int] = (8_000, 32_000),
           data: Sequence[str] = ("synthetic", "fixtures")) -> list[dict[str, Any]]:
    """Every data set of `benchmarks.cache` at every budget."""
    from benchmarks.cache import (
        GOAL_MEAN_CONTEXT,
        fixtures,
        replay_points,
        steady_start,
        synthetic,
    )

    makers = {"synthetic": synthetic, "fixtures": fixtures}
    rows = []
    for name in data:
        conv = makers[name](turns)
        points = list(replay_points(conv.items))
        requests = requests_of(conv.items, points)
        skipped = len(points) - len(requests.at)  # requests before the first turn
        for budget in budgets:
            steady = max(0, steady_start(conv, budget) - skipped)
            steady_turns = len({turn for turn, _ in requests.at[steady:]})
            found = floor(requests, budget, GOAL_MEAN_CONTEXT, steady, steady_turns)
            rows.append({"data": name, "mean_turn_tokens": round(
                sum(requests.turns) / len(requests.turns)), **found.as_dict()})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--budgets", default="8000,32000")
    args = parser.parse_args(argv)
    rows = floors(args.turns, [int(b) for b in args.budgets.split(",")])
    print("| data | budget | mean turn | floor at mean >= 70 % | best schedule found "
          "| its mean | fewest breaks, no mean goal |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['data']} | {r['budget']:,} | {r['mean_turn_tokens']:,} | "
              f"{r['floor_per_10_turns']:.2f} | {r['schedule_per_10_turns']} | "
              f"{r['schedule_mean_of_budget']} | {r['least_per_10_turns']:.2f} |")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
