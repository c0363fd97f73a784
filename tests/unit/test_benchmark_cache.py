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
