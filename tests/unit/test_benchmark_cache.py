"""Issue 35 point 5: `benchmarks.cache` counts breaks, shared prefixes and cache costs exactly.

Hand-computed example: every message costs 4 framing tokens + ceil(bytes / 4) (R20), so
S (36 bytes) 13, U1 (16) 8, A1 (24) 10, U2 (8) 6, A2 (40) 14, U3 (4) 5. Three requests:

- r0 = [S, U1]            21 tokens, first request (no previous: shared 0, not a break);
- r1 = [S, U1, A1, U2]    37 tokens, starts with the whole of r0: shared 2 messages = 21 tokens;
- r2 = [S, U2, A2, U3]    38 tokens, turn 1 trimmed: shared [S] = 13 tokens, a break.
"""

from __future__ import annotations

import pytest

from benchmarks import cache
from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.messages import Chat, ChatMessage

S = ChatMessage.system("s" * 36)
U1, A1 = ChatMessage.user("a" * 16), ChatMessage.assistant("b" * 24)
U2, A2 = ChatMessage.user("c" * 8), ChatMessage.assistant("d" * 40)
U3 = ChatMessage.user("e" * 4)


def requests() -> list[cache.Request]:
    return [cache.request_of([S, U1], 1), cache.request_of([S, U1, A1, U2], 2),
            cache.request_of([S, U2, A2, U3], 3)]


def test_i35_request_prices_each_message_with_turnledgers_estimate() -> None:
    """Issue 35 point 5: tokens per message, the newest turn's start and the system prefix."""
    r0, r1, r2 = requests()
    assert ((13, 8), (13, 8, 10, 6), (13, 6, 14, 5)) == (r0.tokens, r1.tokens, r2.tokens)
    assert ((1, 1), (3, 1), (3, 1)) == tuple((r.newest_turn, r.leading) for r in (r0, r1, r2))


def test_i35_shared_prefix_and_breaks_as_counted_by_hand() -> None:
    """Issue 35 point 5: shared prefix = leading messages equal to the previous request's;
    a break = a request not starting with the whole previous one."""
    r0, r1, r2 = requests()
    assert (0, 2, 1) == (cache.shared_prefix(None, r0), cache.shared_prefix(r0, r1),
                         cache.shared_prefix(r1, r2))
    assert (False, False, True) == (cache.is_break(None, r0), cache.is_break(r0, r1),
                                    cache.is_break(r1, r2))


def test_i35_measure_gives_the_hand_computed_figures() -> None:
    """Issue 35 point 5: over r1 and r2 (steady state from r1): 1 break in 2 turns = 5 per 10
    turns, 34 of 75 tokens shared, mean context 37.5 = 93.75 % of a budget of 40; all prefixes
    under 1,024 tokens, so neither provider caches anything (cost = input)."""
    figures = cache.measure(requests(), 1, 40)
    assert {"requests": 2, "turns": 2, "breaks": 1, "breaks_per_10_turns": 5.0,
            "input_tokens": 75, "shared_tokens": 34, "shared": 0.4533, "mean_context": 37.5,
            "mean_context_of_budget": 0.9375, "over_budget": 0, "anthropic_cost": 75.0,
            "anthropic_x": 1.0, "anthropic_last_cost": 75.0, "anthropic_last_x": 1.0,
            "openai_cost": 75.0, "openai_x": 1.0} == figures


def test_i35_anthropic_cost_reads_writes_and_uncached_tokens_by_hand() -> None:
    """Issue 35 point 5, minimum 10 tokens: r0 writes [S] (13 x 1.25) + 8 uncached = 24.25;
    r1 reads [S] (1.3), writes up to U1's turn end (18 x 1.25 = 22.5), U2 uncached (6): 29.8;
    r2 reads [S] (1.3), writes S..A2 (20 x 1.25 = 25), U3 uncached (5): 31.3."""
    assert [24.25, 29.8, 31.3] == pytest.approx(cache.anthropic_costs(requests(), minimum=10))


def test_i35_anthropic_cost_with_a_breakpoint_on_the_last_message() -> None:
    """Issue 35 point 5: with a breakpoint on the last message too, r0 writes all 21 tokens
    (26.25); r1 reads [S, U1] (2.1) and writes A1, U2 (16 x 1.25 = 20): 22.1; r2 reads [S]
    (1.3) and writes the other 25 tokens (31.25): 32.55."""
    costs = cache.anthropic_costs(requests(), minimum=10, last=True)
    assert [26.25, 22.1, 32.55] == pytest.approx(costs)


def test_i35_anthropic_lookback_limits_how_far_back_a_hit_is_found() -> None:
    """Issue 35 point 5: with no lookback, r1's breakpoint after U1 (position 3) misses the
    entry r0 wrote at position 2, so it reads only [S] at the system breakpoint."""
    with_lookback = cache.anthropic_costs(requests(), minimum=10, last=True)
    without = cache.anthropic_costs(requests(), minimum=10, last=True, lookback=0)
    assert pytest.approx(22.1) == with_lookback[1]
    assert pytest.approx(0.1 * 13 + 1.25 * 24) == without[1]


def test_i35_openai_cached_tokens_in_granular_prefixes() -> None:
    """Issue 35 point 5, minimum 10 and step 4: r1 matches r0 whole (21 tokens -> 10 + 8 =
    18), r2 matches [S] (13 -> 10); nothing below the minimum, nothing on the first request."""
    assert [0, 18, 10] == cache.openai_cached_tokens(requests(), minimum=10, step=4)
    assert [0, 0, 0] == cache.openai_cached_tokens(requests(), minimum=22, step=4)


def test_i35_replay_points_and_steady_state_of_a_tiny_session() -> None:
    """Issue 35 point 5: one request before each model reply; steady state starts at the first
    request whose history exceeds the budget (S+U1+A1+U2 = 37 > 30, the second request)."""
    conv = cache.Conversation("tiny", [Chat(m) for m in (S, U1, A1, U2, A2, U3)])
    assert [(2, 1), (4, 2)] == list(cache.replay_points(conv.items))
    assert (1, 2) == (cache.steady_start(conv, 30), cache.steady_start(conv, 40))


def test_i35_turnledger_lane_sends_the_whole_history_under_the_budget() -> None:
    """Issue 35 point 5: driven through the public API with a budget that holds everything,
    turnledger's requests are the histories so far: no break, everything after r0 shared."""
    conv = cache.Conversation("tiny", [Chat(m) for m in (S, U1, A1, U2, A2, U3)])
    lane = cache.turnledger_lane(conv, RuntimeProfile(max_context_tokens=1_000))
    assert [cache.request_of([S, U1], 1), cache.request_of([S, U1, A1, U2], 2)] == lane
    figures = cache.measure(lane, 1, 1_000)
    assert (0, 21, 37) == (figures["breaks"], figures["shared_tokens"], figures["input_tokens"])


def test_i35_peer_lanes_send_the_same_requests_when_nothing_is_trimmed() -> None:
    """Issue 35 point 5: LangChain's trim_messages and the Agents SDK session (limit above the
    session's items) see the same data as turnledger, priced and rendered the same way."""
    conv = cache.Conversation("tiny", [Chat(m) for m in (S, U1, A1, U2, A2, U3)])
    expected = [cache.request_of([S, U1], 1), cache.request_of([S, U1, A1, U2], 2)]
    assert expected == cache.trim_messages_lane(conv, 1_000)
    assert expected == cache.sdk_lane(conv, 100)


def test_i35_peer_lanes_cut_the_oldest_messages() -> None:
    """Issue 35 point 5: trim_messages under a budget of 30 keeps [S, U2] (19 tokens; with A1
    it would start on an AI message); the SDK with limit 1 reads the newest item (A1) at the
    start of turn 2, after [S] (the instructions)."""
    conv = cache.Conversation("tiny", [Chat(m) for m in (S, U1, A1, U2, A2, U3)])
    assert [cache.request_of([S, U1], 1), cache.request_of([S, U2], 2)] == (
        cache.trim_messages_lane(conv, 30))
    assert [cache.request_of([S, U1], 1), cache.request_of([S, A1, U2], 2)] == (
        cache.sdk_lane(conv, 1))


# --- the floor (benchmarks.cache_floor): what no whole-turn trim can beat --------------------

def _schedules(turns: list[int], n: int, first: int = 1) -> list[list[int]]:
    """Every non-decreasing sequence of ``n`` first-kept turns, each at most its request's
    turn (``turns``), starting from ``first``."""
    if n == 0:
        return [[]]
    out = []
    for f in range(first, turns[0] + 1):
        out += [[f, *rest] for rest in _schedules(turns[1:], n - 1, f)]
    return out


@pytest.mark.parametrize("seed", range(12))
def test_i35_floor_schedule_is_the_exhaustive_optimum(seed: int) -> None:
    """Issue 35 goals: the dynamic programme finds the schedule an exhaustive search over every
    whole-turn trim finds (the least ``breaks - w * context`` within the budget)."""
    import random

    from benchmarks.cache_floor import Requests, best_schedule

    rng = random.Random(seed)
    sizes = tuple(rng.randint(5, 40) for _ in range(5))
    at = []
    for turn in range(1, 6):
        for _ in range(rng.randint(1, 2)):
            at.append((turn, rng.randint(1, sizes[turn - 1])))
    requests = Requests(head=rng.randint(0, 10), turns=sizes, at=tuple(at))
    budget, weight, steady = rng.randint(45, 90), rng.choice((0.0, 0.02, 0.1)), rng.randint(0, 2)
    prefix = [0]
    for s in sizes:
        prefix.append(prefix[-1] + s)
    best: tuple[float, int, int] | None = None
    for schedule in _schedules([t for t, _ in at], len(at)):
        contexts = [requests.context(r, f, prefix) for r, f in enumerate(schedule)]
        if max(contexts) > budget:
            continue
        breaks = sum(1 for r in range(max(1, steady), len(at)) if schedule[r] != schedule[r - 1])
        context = sum(contexts[steady:])
        value = (breaks - weight * context, breaks, context)
        best = value if best is None or value < best else best
    if best is None:
        with pytest.raises(ValueError, match="does not fit"):
            best_schedule(requests, budget, weight, steady)
        return
    found = best_schedule(requests, budget, weight, steady)
    assert found[0] == pytest.approx(best[0])


def test_i35_floor_is_below_every_low_water_lane_meeting_the_mean() -> None:
    """Issue 35 goals: the floor bounds what turnledger's trims reach. On 40 synthetic turns at
    5,000 tokens, every lane whose mean context meets 70 % of the budget breaks at least as
    often as the floor says, and the best schedule found meets the mean it claims."""
    from benchmarks.cache_floor import floor, requests_of

    conv = cache.synthetic(40)
    budget = 5_000
    points = list(cache.replay_points(conv.items))
    requests = requests_of(conv.items, points)
    steady = cache.steady_start(conv, budget)
    turns = len({turn for turn, _ in requests.at[steady:]})
    found = floor(requests, budget, cache.GOAL_MEAN_CONTEXT, steady, turns)
    assert found.schedule_per_10_turns is not None
    assert found.least_per_10_turns <= found.floor_per_10_turns <= found.schedule_per_10_turns
    assert found.schedule_mean_of_budget is not None
    assert found.schedule_mean_of_budget >= cache.GOAL_MEAN_CONTEXT
    checked = 0
    for lane, profile in cache.lanes(budget):
        assert profile is not None
        measured = cache.measure(cache.turnledger_lane(conv, profile), steady, budget)
        assert measured["over_budget"] == 0, lane
        if measured["mean_context_of_budget"] >= cache.GOAL_MEAN_CONTEXT:
            checked += 1
            assert measured["breaks_per_10_turns"] >= found.floor_per_10_turns, lane
    assert checked >= 2
