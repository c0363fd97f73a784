"""The serialization seam: codec (cattrs + msgpack) and record mapper (E9-E12, ADR-0003/0004)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar, cast
from uuid import UUID

import attrs
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.event_strategies import EVENT_STRATEGIES, any_event, streams_with_every_type
from tests.properties import examples
from tests.strategies import every_block_type_history
from turnledger.domain.budget import MAX_STORED_INT, ProviderProfile, Route, RuntimeProfile
from turnledger.domain.errors import CorruptRecord, InvalidMessage, InvalidProfile
from turnledger.domain.events import (
    EVENT_TYPES,
    DomainEvent,
    HistoryTrimmed,
    MessageAppended,
    OrphansSwept,
    SessionStarted,
    TrimDecided,
    TrimReason,
    TrimTrigger,
    View,
)
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.store.codec import (
    MESSAGE_TAGS,
    EventCodec,
    decode_event,
    default_codec,
    encode_event,
    make_converter,
)
from turnledger.store.mapper import ZERO_CHAIN, TurnledgerMapper, chain_digest

SESSION = UUID("00000000-0000-4000-8000-000000000001")
NOW = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def tool_call_message(version: int = 2) -> MessageAppended:
    return MessageAppended(
        SESSION,
        version,
        NOW,
        position=1,
        message=AssistantToolCalls("checking", (ToolCall("call_1", "search", '{"q": "x"}'),)),
    )


def trim_decided(version: int = 3) -> TrimDecided:
    return TrimDecided(
        SESSION, version, NOW, View.CHAT, TrimTrigger.APPEND, TrimReason.TURN_LIMIT,
        first_kept_position=4, dropped_messages=3, dropped_turns=1, kept_turns=2,
        tokens_before=900, tokens_after=300, limit=2,
    )


def roundtrip(event: DomainEvent) -> DomainEvent:
    topic, payload = encode_event(event)
    return decode_event(topic, payload, event.originator_id, event.originator_version)


def assert_identical(expected: object, actual: object, path: str = "$") -> None:
    """Equal AND of the same types all the way down (StrEnum == str would hide a lost enum)."""
    if attrs.has(type(expected)):
        assert type(expected) is type(actual), path
        for field in attrs.fields(cast(Any, type(expected))):
            name = field.name
            assert_identical(getattr(expected, name), getattr(actual, name), f"{path}.{name}")
    elif isinstance(expected, tuple):
        assert type(expected) is type(actual), path
        assert isinstance(actual, tuple)
        assert len(expected) == len(actual), path
        for i, (left, right) in enumerate(zip(expected, actual)):
            assert_identical(left, right, f"{path}[{i}]")
    elif isinstance(expected, Mapping):
        assert isinstance(actual, Mapping), path
        assert list(expected) == list(actual), path
        for key in expected:
            assert_identical(expected[key], actual[key], f"{path}[{key!r}]")
    else:
        # An int ratio is stored as the equal float (E12); nothing else may change type.
        widened = type(expected) is int and type(actual) is float
        assert widened or type(expected) is type(actual), f"{path}: {type(actual).__name__}"
        assert expected == actual, path


# --- round trips ----------------------------------------------------------------------------

@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=examples(30), deadline=None)
@given(data=st.data())
def test_e9_every_event_type_round_trips(cls: type[DomainEvent], data: st.DataObject) -> None:
    """Every event class survives structure -> msgpack -> structure unchanged."""
    event = data.draw(EVENT_STRATEGIES[cls])
    decoded = roundtrip(event)
    assert event == decoded
    assert_identical(event, decoded)


@settings(max_examples=examples(10), deadline=None)
@given(stream=streams_with_every_type())
def test_e9_a_stream_with_every_event_type_round_trips(stream: list[DomainEvent]) -> None:
    """A stream holding one event of every class decodes to the same events."""
    assert stream == [roundtrip(event) for event in stream]


def test_e9_enums_decode_as_their_members() -> None:
    """StrEnum fields come back as enum members (code compares them with `is`)."""
    decoded = roundtrip(trim_decided())
    assert isinstance(decoded, TrimDecided)
    assert (View.CHAT, TrimTrigger.APPEND, TrimReason.TURN_LIMIT) == (
        decoded.view, decoded.trigger, decoded.reason
    )
    assert decoded.reason is TrimReason.TURN_LIMIT
    assert TrimReason is type(decoded.reason)


def test_e9_decoded_tuples_stay_tuples() -> None:
    """Tuple fields come back as tuples (hashable, equal), not lists."""
    event = OrphansSwept(
        SESSION, 5, NOW, positions=(1, 2), orphan_tool_call_ids=("a",), removed=2,
        rewritten=((3, Chat(ChatMessage.user("x"))),),
    )
    decoded = roundtrip(event)
    assert isinstance(decoded, OrphansSwept)
    assert (tuple, tuple, tuple) == (
        type(decoded.positions), type(decoded.rewritten), type(decoded.rewritten[0])
    )
    assert hash(event) == hash(decoded)


def test_e9_message_variants_use_short_stable_tags() -> None:
    """ConversationMessage variants are tagged 'chat', 'calls', 'results' in the payload."""
    messages: list[ConversationMessage] = [
        Chat(ChatMessage.user("hi")),
        AssistantToolCalls(None, (ToolCall("c", "f"),)),
        ToolResults((ToolResult("c", "ok"),)),
    ]
    tags = []
    for position, message in enumerate(messages):
        _, payload = encode_event(MessageAppended(SESSION, 2, NOW, position, message))
        tags.append(msgpack.unpackb(payload, timestamp=3)["message"]["t"])
    assert ["chat", "calls", "results"] == tags
    assert {Chat: "chat", AssistantToolCalls: "calls", ToolResults: "results"} == dict(
        MESSAGE_TAGS
    )


def test_e9_payload_leaves_record_columns_out_and_keeps_enums_as_strings() -> None:
    """originator_id/version live in columns; enums are their string values; v1 has no
    class_version key; a field added at version 1 (issue 35) is left out while None."""
    _, payload = encode_event(trim_decided())
    state = msgpack.unpackb(payload, timestamp=3)
    assert "originator_id" not in state
    assert "originator_version" not in state
    assert "class_version" not in state
    assert {"budget", "estimate_correction"}.isdisjoint(state)
    _, with_budget = encode_event(attrs.evolve(trim_decided(), budget=8_000))
    assert 8_000 == msgpack.unpackb(with_budget, timestamp=3)["budget"]
    assert ("chat", "append", "turn_limit") == (state["view"], state["trigger"], state["reason"])
    assert str is type(state["reason"])


def test_e9_timestamps_are_msgpack_timestamps_in_utc() -> None:
    """A timestamp is a msgpack Timestamp; any zone decodes to the same instant in UTC."""
    local = NOW.astimezone(timezone(timedelta(hours=-7)))
    event = HistoryTrimmed(SESSION, 4, local, 3, 2, TrimReason.TOKEN_BUDGET)
    _, payload = encode_event(event)
    raw = msgpack.unpackb(payload)
    decoded = roundtrip(event)
    assert isinstance(raw["timestamp"], msgpack.Timestamp)
    assert (NOW, UTC) == (decoded.timestamp, decoded.timestamp.tzinfo)


def test_e9_naive_datetime_is_rejected() -> None:
    """Encoding a naive timestamp fails with a message saying to use an aware one."""
    event = HistoryTrimmed(SESSION, 4, datetime(2025, 1, 1), 3, 2, TrimReason.TOKEN_BUDGET)
    with pytest.raises(ValueError, match="naive datetime"):
        encode_event(event)


def test_e11_text_without_utf8_form_is_an_invalid_message() -> None:
    """A lone surrogate cannot be stored: InvalidMessage, nothing half-encoded."""
    event = MessageAppended(SESSION, 2, NOW, 0, Chat(ChatMessage.user("bad \ud800")))
    with pytest.raises(InvalidMessage, match="not valid Unicode"):
        encode_event(event)


def test_e11_largest_valid_profile_integers_are_stored() -> None:
    """Every integer a profile accepts can be encoded: the validation bound is the codec's."""
    big = MAX_STORED_INT
    profile = RuntimeProfile(max_context_tokens=big, max_history_messages=big,
                             max_tool_result_chars=big)
    provider = ProviderProfile("p", "m", big, {"fast": ("m-mini", big)})
    event = SessionStarted(SESSION, 1, NOW, profile, (provider,), Route("p", "m"), False)
    assert event == roundtrip(event)
    with pytest.raises(InvalidProfile, match="max_context_tokens"):
        RuntimeProfile(max_context_tokens=big + 1)


def test_e9_provider_aliases_round_trip_as_a_mapping() -> None:
    """ProviderProfile.aliases (alias -> (model, window)) survives encoding."""
    provider = ProviderProfile("p", "m", 1000, {"fast": ("m-mini", 500), "slow": ("m-big", None)})
    route = Route("p", "fast")
    event = SessionStarted(SESSION, 1, NOW, RuntimeProfile(), (provider,), route, False)
    decoded = roundtrip(event)
    assert isinstance(decoded, SessionStarted)
    assert {"fast": ("m-mini", 500), "slow": ("m-big", None)} == dict(decoded.providers[0].aliases)


# --- determinism ----------------------------------------------------------------------------

@settings(max_examples=examples(60), deadline=None)
@given(event=any_event)
def test_e12_same_event_gives_same_bytes(event: DomainEvent) -> None:
    """Encoding is a function: twice the same event, or its decoded copy, gives equal bytes."""
    first = encode_event(event)
    assert first == encode_event(event)
    assert first == encode_event(roundtrip(event))


def test_e12_equal_profiles_give_equal_bytes() -> None:
    """Ratio 1 and 1.0 are equal values, so their events encode to the same bytes."""
    def started(ratio: float) -> SessionStarted:
        profile = RuntimeProfile(context_compact_ratio=ratio)
        return SessionStarted(SESSION, 1, NOW, profile, (), Route("p", "m"), False)

    assert started(1) == started(1.0)
    assert encode_event(started(1.0)) == encode_event(started(1))


def test_e12_nan_ratio_encodes_deterministically() -> None:
    """A NaN ratio (R14: unset) is kept and encodes to the same bytes every time."""
    event = SessionStarted(
        SESSION, 1, NOW, RuntimeProfile(context_compact_ratio=float("nan")), (), Route("p", "m"),
        False,
    )
    assert encode_event(event) == encode_event(roundtrip(event))


# --- decode errors --------------------------------------------------------------------------

def corrupt_message(topic: str, payload: bytes) -> str:
    with pytest.raises(CorruptRecord) as caught:
        decode_event(topic, payload, SESSION, 7)
    error = caught.value
    assert (str(SESSION), 7) == (error.session_id, error.version)
    text = str(error)
    assert "\n" not in text
    return text


def test_e11_unknown_topic_names_session_and_version() -> None:
    """An unknown event type is a CorruptRecord naming session, version and topic."""
    text = corrupt_message("turnledger:NoSuchEvent", b"\x80")
    assert f"session {SESSION} version 7" in text
    assert "unknown event type 'turnledger:NoSuchEvent'" in text


@pytest.mark.parametrize(
    ("payload", "cause"),
    [
        (b"", "Unpack failed"),
        (b"\xc1", "FormatError"),
        (msgpack.packb([1, 2]), "not a map"),
        (b"\x81\xa1a", "Unpack failed"),
    ],
    ids=["empty", "reserved-byte", "not-a-map", "truncated"],
)
def test_e11_undecodable_payload_is_a_corrupt_record(payload: bytes, cause: str) -> None:
    """Bytes that are not an event map give CorruptRecord with the cause on one line."""
    assert cause in corrupt_message("turnledger:MessageAppended", payload)


def edited_payload(event: DomainEvent, edit: dict[str, object]) -> tuple[str, bytes]:
    topic, payload = encode_event(event)
    state = msgpack.unpackb(payload, timestamp=3)
    for path, value in edit.items():
        target = state
        *parents, key = path.split(".")
        for parent in parents:
            target = target[int(parent)] if parent.isdigit() else target[parent]
        if value is KeyError:
            del target[key]
        else:
            target[key] = value
    return topic, msgpack.packb(state, datetime=True)


@pytest.mark.parametrize(
    ("edit", "cause"),
    [
        ({"position": "1"}, "expected int, got str @ $.position"),
        ({"position": 1.5}, "expected int, got float @ $.position"),
        ({"position": KeyError}, "required field missing @ $.position"),
        ({"surprise": 1}, "extra fields found (surprise)"),
        ({"message.tool_calls.0.id": ""}, "tool_call.id must not be empty"),
        ({"message.t": "nope"}, "unknown message tag 'nope' @ $.message"),
        ({"timestamp": 3}, "expected a msgpack Timestamp"),
        ({"class_version": 9}, "newer version of MessageAppended"),
    ],
    ids=["str-for-int", "float-for-int", "missing", "extra", "validator", "bad-tag",
         "bad-timestamp", "newer-version"],
)
def test_e11_invalid_payload_fields_are_corrupt_records(
    edit: dict[str, object], cause: str
) -> None:
    """Type errors, missing or extra fields and failing validators are reported, not coerced."""
    topic, payload = edited_payload(tool_call_message(), edit)
    assert cause in corrupt_message(topic, payload)


# --- registry and versions ------------------------------------------------------------------

def test_e10_default_topics_are_short_stable_names() -> None:
    """Each event class has the topic 'turnledger:<ClassName>'."""
    expected = tuple(f"turnledger:{cls.__name__}" for cls in EVENT_TYPES)
    assert expected == default_codec().topics


def test_e10_topics_must_be_unique_and_prefix_free() -> None:
    """A shared topic or a topic that prefixes another is refused (ADR-0004)."""
    with pytest.raises(ValueError, match="prefix"):
        EventCodec({"x:Trim": TrimDecided, "x:TrimDecided": HistoryTrimmed})
    with pytest.raises(ValueError, match="registered under two topics"):
        EventCodec({"x:A": TrimDecided, "x:B": TrimDecided})


@attrs.frozen
class NoteV1(DomainEvent):
    """Test-only event, as version 1 of the code wrote it."""

    text: str


@attrs.frozen
class NoteV3(DomainEvent):
    """Test-only event at version 3: v2 renamed ``text`` to ``body``, v3 added ``level``."""

    body: str
    level: int

    class_version: ClassVar[int] = 3

    @staticmethod
    def upcast_v1_v2(state: dict[str, object]) -> None:
        state["body"] = state.pop("text")

    @staticmethod
    def upcast_v2_v3(state: dict[str, object]) -> dict[str, object]:
        return {**state, "level": 0}


def test_e10_upcasters_run_in_order_from_the_recorded_version() -> None:
    """A v1 payload reads as v3 through upcast_v1_v2 then upcast_v2_v3 (mutate or return)."""
    old, new = EventCodec({"test:Note": NoteV1}), EventCodec({"test:Note": NoteV3})
    topic, payload = old.encode_event(NoteV1(SESSION, 3, NOW, "hello"))
    assert NoteV3(SESSION, 3, NOW, "hello", 0) == new.decode_event(topic, payload, SESSION, 3)


def test_e10_current_version_is_recorded_and_not_upcast() -> None:
    """A class at version 3 writes class_version 3, which reads back without upcasting."""
    codec = EventCodec({"test:Note": NoteV3})
    topic, payload = codec.encode_event(NoteV3(SESSION, 3, NOW, "b", 2))
    assert 3 == msgpack.unpackb(payload, timestamp=3)["class_version"]
    assert NoteV3(SESSION, 3, NOW, "b", 2) == codec.decode_event(topic, payload, SESSION, 3)


def test_e10_a_class_version_without_its_upcaster_is_refused() -> None:
    """Registering a v2 class without upcast_v1_v2 fails early, not on the first old record."""

    @attrs.frozen
    class Broken(DomainEvent):
        class_version: ClassVar[int] = 2

    with pytest.raises(ValueError, match="upcast_v1_v2"):
        EventCodec({"test:Broken": Broken})


# --- mapper and chain -----------------------------------------------------------------------

class Reverse:
    """Test compressor: reverses bytes (order of operations becomes visible)."""

    def compress(self, data: bytes) -> bytes:
        return b"C" + data[::-1]

    def decompress(self, data: bytes) -> bytes:
        assert data.startswith(b"C"), "decompress must run after decrypt"
        return data[1:][::-1]


class Xor:
    """Test cipher: xor with 0x5A and a marker."""

    def __init__(self, environment: object = None) -> None:
        pass

    def encrypt(self, plaintext: bytes) -> bytes:
        return b"E" + bytes(b ^ 0x5A for b in plaintext)

    def decrypt(self, ciphertext: bytes) -> bytes:
        assert ciphertext.startswith(b"E"), "decrypt must run first"
        return bytes(b ^ 0x5A for b in ciphertext[1:])


def test_e2_mapper_compresses_then_encrypts_and_reverses_on_read() -> None:
    """State = encrypt(compress(msgpack([chain, payload]))); reading undoes it in reverse."""
    mapper = TurnledgerMapper(compressor=Reverse(), cipher=Xor())  # type: ignore[arg-type]
    event = tool_call_message(version=1)
    (stored,), head = mapper.to_stored_events([event], ZERO_CHAIN)
    _, payload = encode_event(event)
    envelope = msgpack.packb([head, payload])
    assert Xor().encrypt(Reverse().compress(envelope)) == stored.state
    assert (event, head) == mapper.decode_record(stored)


def test_e2_chain_is_sha256_over_previous_id_version_topic_payload() -> None:
    """The chain formula of ADR-0004, checked against hashlib directly."""
    first, second = tool_call_message(version=1), trim_decided(version=2)
    stored, head = TurnledgerMapper().to_stored_events([first, second], ZERO_CHAIN)
    expected = []
    previous = ZERO_CHAIN
    for event in (first, second):
        topic, payload = encode_event(event)
        previous = hashlib.sha256(
            previous + SESSION.bytes + event.originator_version.to_bytes(8, "big")
            + topic.encode() + payload
        ).digest()
        expected.append(previous)
    assert expected == [msgpack.unpackb(s.state)[0] for s in stored]
    assert expected[1] == head
    topic, payload = encode_event(second)
    assert expected[1] == chain_digest(expected[0], SESSION, 2, topic, payload)


def test_e2_single_event_mapping_is_refused() -> None:
    """Mapper.to_stored_event cannot chain one event on its own; it says what to use."""
    with pytest.raises(TypeError, match="to_stored_events"):
        TurnledgerMapper().to_stored_event(trim_decided())


def test_e11_undecodable_envelope_names_session_and_version() -> None:
    """Sealed bytes that are not [chain, payload] give CorruptRecord with session/version."""
    (stored,), _ = TurnledgerMapper().to_stored_events([tool_call_message(1)], ZERO_CHAIN)
    broken = dataclasses.replace(stored, state=msgpack.packb([b"x", b""]))
    with pytest.raises(CorruptRecord, match=f"session {SESSION} version 1 .*chain is not 32"):
        TurnledgerMapper().decode_record(broken)


# --- issue 8: content blocks, provider fields, recorded structure ------------------------------


def test_e9_every_block_type_round_trips() -> None:
    """Messages of every block type, with provider fields, decode to equal values (E9, E12)."""
    for position, item in enumerate(every_block_type_history()):
        event = MessageAppended(SESSION, position + 2, NOW, position=position, message=item)
        decoded = roundtrip(event)
        assert event == decoded
        assert encode_event(event) == encode_event(decoded)


def test_e10_plain_message_payload_has_no_new_keys() -> None:
    """A message without blocks or provider fields encodes the fields it always had."""
    event = MessageAppended(
        SESSION, 2, NOW, position=0, message=Chat(ChatMessage.user("hi"))
    )
    state = msgpack.unpackb(encode_event(event)[1])
    assert {"role", "content", "attachments", "synthetic"} == set(state["message"]["message"])


@pytest.mark.parametrize(
    ("role", "content", "envelope"),
    [
        ("assistant", '{"tool_calls": [{"id": "c", "name": "n", "arguments": "{}"}]}', True),
        ("assistant", "plain", False),
        ("tool", '{"tool_call_id": "c", "content": "x"}', True),
        ("tool", "raw output", False),
        ("user", '{"tool_calls": [{"id": "c"}]}', None),
    ],
)
def test_e10_v1_chat_message_upcasts_with_the_seed_reading(
    role: str, content: str, envelope: bool | None
) -> None:
    """A v1 MessageAppended's chat message is recorded as the seed's rule read it (E10)."""
    payload = msgpack.packb(
        {
            "timestamp": NOW,
            "position": 0,
            "message": {
                "t": "chat",
                "message": {"role": role, "content": content, "attachments": [],
                            "synthetic": False},
            },
            "original_chars": None,
        },
        datetime=True,
    )
    event = decode_event("turnledger:MessageAppended", payload, SESSION, 2)
    assert isinstance(event, MessageAppended)
    assert isinstance(event.message, Chat)
    assert envelope == event.message.message.envelope


@pytest.mark.parametrize(
    ("value", "problem"),
    [([1, True, 3], "expected int, got bool"), ([1, "2"], "expected int, got str"),
     ([1, 2.0], "expected int, got float")],
)
def test_e11_a_tuple_of_ints_with_one_stray_element_is_refused(
    value: list[Any], problem: str
) -> None:
    """The one-pass type check of a tuple of scalars (ADR-0058) refuses what the per-element
    hook refuses, with the hook's own message, and passes exact ints through unchanged."""
    converter = make_converter()
    assert (1, 2, 3) == converter.structure([1, 2, 3], tuple[int, ...])
    with pytest.raises(Exception, match=problem):
        converter.structure(value, tuple[int, ...])
