"""The generated decoders (ADR-0052) give exactly the converter's events, or step aside (E9-E11).

The fast path is one-sided by design: whenever it returns an event, the cattrs converter must
return an identical one (same types all the way down, ``eq=False`` fields included); whatever it
does not vouch for goes to the converter, which decides and explains. These tests compare the
two on every event class, on every block type, on the stored v1/v2 fixtures, and on payloads
mutated at random places.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast
from uuid import UUID

import attrs
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.event_strategies import EVENT_STRATEGIES, any_event
from tests.properties import examples
from tests.strategies import every_block_type_history
from turnledger.domain.errors import CorruptRecord
from turnledger.domain.events import EVENT_TYPES, DomainEvent, MessageAppended
from turnledger.domain.messages import AssistantToolCalls, ToolCall
from turnledger.store.codec import EventCodec, UndecodableRecord, default_codec, make_converter
from turnledger.store.mapper import paused_gc
from turnledger.store.packing import open_envelope

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "records"
SESSION = UUID("0f0f0f0f-0000-4000-8000-000000000052")
_NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def slow_codec() -> EventCodec:
    """A codec that only has the converter: a converter passed in gets no generated decoder."""
    return EventCodec(converter=make_converter())


SLOW = slow_codec()


def assert_same(expected: object, actual: object, path: str = "$") -> None:
    """Equal and of the very same types all the way down, fields outside ``eq`` included."""
    assert type(expected) is type(actual), f"{path}: {type(expected)} vs {type(actual)}"
    if attrs.has(type(expected)):
        for field in attrs.fields(cast(Any, type(expected))):
            name = field.name
            assert_same(getattr(expected, name), getattr(actual, name), f"{path}.{name}")
    elif isinstance(expected, tuple):
        assert isinstance(actual, tuple)
        assert len(expected) == len(actual), path
        for i, (left, right) in enumerate(zip(expected, actual)):
            assert_same(left, right, f"{path}[{i}]")
    else:
        assert expected == actual, path
        if isinstance(expected, float) and isinstance(actual, float):
            assert str(expected) == str(actual), path  # -0.0 and 0.0 are equal


def fast_decode(topic: str, payload: bytes, version: int = 1) -> DomainEvent:
    """The generated decoder alone (no fallback): raises when it does not vouch."""
    codec = default_codec()
    entry = codec._by_topic[topic]  # noqa: SLF001 - the fast path itself is under test
    assert entry.fast is not None
    state = codec._upcast(entry, msgpack.unpackb(payload, timestamp=3))  # noqa: SLF001
    event: DomainEvent = entry.fast(state, SESSION, version)
    return event


def decode_both(topic: str, payload: bytes, version: int = 1) -> tuple[object, object]:
    """(default codec's outcome, converter-only codec's outcome): an event or the error text."""
    outcomes: list[object] = []
    for codec in (default_codec(), SLOW):
        try:
            outcomes.append(codec.decode_event(topic, payload, SESSION, version))
        except UndecodableRecord as error:
            outcomes.append(("refused", str(error)))
    return outcomes[0], outcomes[1]


def test_e9_every_event_class_has_a_generated_decoder() -> None:
    """The default codec generates a decoder for each event class (none falls back for good)."""
    codec = default_codec()
    expected = [cls.__name__ for cls in EVENT_TYPES]
    actual = [e.cls.__name__ for e in codec._by_topic.values() if e.fast is not None]  # noqa: SLF001
    assert expected == actual


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_e9_generated_decoder_gives_the_converters_event(
    cls: type[DomainEvent], data: st.DataObject
) -> None:
    """For every event class, the generated decoder accepts a valid record and builds exactly
    the event the converter builds."""
    event = data.draw(EVENT_STRATEGIES[cls])
    topic, payload = default_codec().encode_event(event)
    expected = SLOW.decode_event(topic, payload, SESSION, 7)
    assert_same(expected, fast_decode(topic, payload, 7))
    assert_same(expected, default_codec().decode_event(topic, payload, SESSION, 7))


def test_e9_generated_decoder_reads_every_block_type() -> None:
    """Every content block and provider field turnledger keeps decodes as the converter's."""
    for position, item in enumerate(every_block_type_history()):
        event = MessageAppended(SESSION, position + 1, _NOW, position, item)
        topic, payload = default_codec().encode_event(event)
        assert_same(SLOW.decode_event(topic, payload, SESSION, position + 1),
                    fast_decode(topic, payload, position + 1))


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.msgpack")), ids=lambda p: p.stem)
def test_e10_stored_fixtures_decode_alike_on_both_paths(path: Path) -> None:
    """The v1 and v2 records kept as fixtures (upcast on read) decode to the same events."""
    raw = msgpack.unpackb(path.read_bytes())
    session, version = UUID(bytes=raw["originator_id"]), raw["originator_version"]
    _, payload = open_envelope(msgpack.unpackb(raw["state"]))
    assert isinstance(payload, bytes)
    fast = default_codec().decode_event(raw["topic"], payload, session, version)
    assert_same(SLOW.decode_event(raw["topic"], payload, session, version), fast)


# --- malformed payloads ---------------------------------------------------------------------

def _paths(value: object, path: tuple[object, ...] = ()) -> Iterator[tuple[object, ...]]:
    yield path
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _paths(inner, (*path, index))


_REPLACEMENTS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False), st.text(max_size=4),
    st.binary(max_size=17), st.just([]), st.just({}), st.lists(st.integers(0, 2), max_size=2),
    st.sampled_from(["chat", "calls", "results", "text", "tool_call", "user", "tool",
                     "assistant", "{}", "token_budget", "conversation"]),
)


@st.composite
def mutated_payloads(draw: st.DrawFn) -> tuple[str, bytes]:
    """A valid record's payload with one value replaced, one key deleted or one key added."""
    event = draw(any_event)
    topic, payload = default_codec().encode_event(event)
    state = msgpack.unpackb(payload, timestamp=3)
    path = draw(st.sampled_from(list(_paths(state))))
    how = draw(st.sampled_from(["replace", "delete", "add"]))
    if not path:
        return topic, msgpack.packb(draw(_REPLACEMENTS), datetime=True)
    *parents, last = path
    target: Any = state
    for step in parents:
        target = target[step]
    if how == "delete":
        del target[last]
    elif how == "add" and isinstance(target[last], dict):
        target[last][draw(st.sampled_from(["surprise", "t", "extra", "blocks", "item"]))] = (
            draw(_REPLACEMENTS))
    else:
        target[last] = draw(_REPLACEMENTS)
    return topic, msgpack.packb(state, datetime=True)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated=mutated_payloads())
def test_e11_generated_decoder_never_accepts_what_the_converter_refuses(
    mutated: tuple[str, bytes],
) -> None:
    """A payload edited anywhere: when the generated decoder accepts it, the converter accepts
    it too, with an identical event; the store's answer (event, or the explaining
    `UndecodableRecord` naming session and version) is the converter's either way."""
    topic, payload = mutated
    try:
        fast: object = fast_decode(topic, payload)
    except Exception:  # stepping aside is always allowed
        fast = None
    store, converter = decode_both(topic, payload)
    if fast is not None:
        assert_same(converter, fast)
    if isinstance(converter, tuple):
        assert converter == store
        assert f"session {SESSION} version 1 " in converter[1]
    else:
        assert_same(converter, store)


_TYPE_SAMPLES: tuple[object, ...] = (
    None, True, False, 0, 7, -1, 1.5, "", "x", "chat", "text", b"", bytes(16), [], [1], {},
    {"t": "chat"},
)
"""One value of every msgpack type (and the tags), tried in place of every value of a record."""


def _check_same_outcome(topic: str, state: object) -> None:
    payload = msgpack.packb(state, datetime=True)
    try:
        fast: object = fast_decode(topic, payload)
    except Exception:  # stepping aside is always allowed
        fast = None
    store, converter = decode_both(topic, payload)
    if fast is not None:
        assert_same(converter, fast)
    if isinstance(converter, tuple):
        assert converter == store
    else:
        assert_same(converter, store)


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=examples(4), deadline=None)
@given(data=st.data())
def test_e11_generated_decoder_refuses_every_wrong_type_the_converter_refuses(
    cls: type[DomainEvent], data: st.DataObject
) -> None:
    """Every value of a valid record replaced by a value of every msgpack type, and every key
    deleted in turn: the generated decoder accepts only what the converter accepts, alike."""
    event = data.draw(EVENT_STRATEGIES[cls])
    topic, payload = default_codec().encode_event(event)
    original = msgpack.unpackb(payload, timestamp=3)
    for path in list(_paths(original))[1:]:
        *parents, last = path
        for sample in (*_TYPE_SAMPLES, KeyError):
            state = msgpack.unpackb(payload, timestamp=3)
            target: Any = state
            for step in parents:
                target = target[step]
            if sample is KeyError:
                del target[last]
            else:
                target[last] = sample
            _check_same_outcome(topic, state)


def test_e11_a_record_the_fast_path_refuses_is_explained_by_the_converter() -> None:
    """An invalid field still gives the converter's one-line cause with its path (E11)."""
    call = AssistantToolCalls("checking", (ToolCall("call_1", "search", '{"q": "x"}'),))
    event = MessageAppended(SESSION, 3, _NOW, 2, call)
    topic, payload = default_codec().encode_event(event)
    state = msgpack.unpackb(payload, timestamp=3)
    state["position"] = "1"
    broken = msgpack.packb(state, datetime=True)
    with pytest.raises(CorruptRecord) as caught:
        default_codec().decode_event(topic, broken, SESSION, 3)
    assert "expected int, got str @ $.position" in str(caught.value)
    assert f"session {SESSION} version 3" in str(caught.value)


# --- the collector during bulk reads -------------------------------------------------------

def test_e4_paused_gc_turns_the_collector_off_and_back_on() -> None:
    """`paused_gc` disables the cyclic collector inside and restores it after, even on error."""
    assert gc.isenabled()
    inside = []

    def read() -> None:
        with paused_gc():
            inside.append(gc.isenabled())
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        read()
    assert [False] == inside
    assert gc.isenabled()


def test_e4_paused_gc_leaves_a_disabled_collector_disabled() -> None:
    """A caller that turned the collector off keeps it off after a bulk read."""
    gc.disable()
    try:
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


