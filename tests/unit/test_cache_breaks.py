"""Cache breaks read from the log (issue 35 point 3): which request stopped sharing the
previous one's prefix, and what caused it."""

from __future__ import annotations

import turnledger as tl
from turnledger.domain.budget import Compaction
from turnledger.replay.cache_breaks import CAUSES, CacheBreak, cache_breaks

QUESTION = "why " * 40


def _turn(session: tl.Session, n: int) -> None:
    session.append(tl.ChatMessage.user(f"question {n} " + QUESTION))
    session.prepare_request()
    session.append(tl.ChatMessage.assistant(f"answer {n} " + "because " * 40))


def test_i35_p3_a_growing_window_breaks_nothing() -> None:
    with tl.open_store("memory://") as store:
        session = store.start_session()
        for n in range(6):
            _turn(session, n)
        assert [] == cache_breaks(session.events())


def test_i35_p3_each_trim_breaks_the_next_request_and_says_so() -> None:
    """The spec's trim at the budget drops a little of the front before nearly every request:
    each such request is a break caused by the trim before it."""
    with tl.open_store("memory://") as store:
        session = store.start_session(tl.RuntimeProfile(max_context_tokens=400))
        for n in range(8):
            _turn(session, n)
        events = session.events()
    trims = [e.originator_version for e in events if isinstance(e, tl.TrimDecided)]
    requests = [e.originator_version for e in events if isinstance(e, tl.RequestPrepared)]
    expected = [CacheBreak(next(r for r in requests if r > t), "trim", t) for t in trims]
    assert len(expected) >= 4
    assert expected == cache_breaks(events)


def test_i35_p3_a_low_water_trim_breaks_less_often() -> None:
    with tl.open_store("memory://") as store:
        spec = store.start_session(tl.RuntimeProfile(max_context_tokens=400))
        held = store.start_session(tl.RuntimeProfile(
            max_context_tokens=400, compaction=Compaction(low_water=0.5)))
        for n in range(12):
            _turn(spec, n)
            _turn(held, n)
        assert len(cache_breaks(held.events())) < len(cache_breaks(spec.events()))


def test_i35_p3_route_switch_clear_and_pop_are_named() -> None:
    with tl.open_store("memory://") as store:
        session = store.start_session(providers=(tl.ProviderProfile("a", "m1", 100_000),
                                                 tl.ProviderProfile("b", "m2", 100_000)),
                                      route=tl.Route("a", "m1"))
        _turn(session, 0)
        (switch,) = session.select_route(tl.Route("b", "m2"))
        _turn(session, 1)
        session.append(tl.ChatMessage.user("oops"))
        session.pop()
        _turn(session, 2)
        (cleared,) = session.clear()
        _turn(session, 3)
        events = session.events()
    popped = next(e for e in events if isinstance(e, tl.events.MessagePopped))
    requests = [e.originator_version for e in events if isinstance(e, tl.RequestPrepared)]
    assert [CacheBreak(requests[1], "route", switch.originator_version),
            CacheBreak(requests[2], "pop", popped.originator_version),
            CacheBreak(requests[3], "clear", cleared.originator_version)] == cache_breaks(events)


def test_i35_p3_the_causes_are_named_in_one_list() -> None:
    assert ("trim", "clearing", "summary", "route", "sweep", "pop", "clear") == CAUSES
