"""Snapshot format 4 (ADR-0060, ADR-0074): a cache that is cheaper to decode, not looser.

Encoding reads a state and never changes it. Format 4 packs the region's integer
columns as arrays and structures its body through a generated function: every snapshot round
trips, the generated function accepts no body the converter refuses, and a body that is wrong
(a column of an unknown type, a torn column, columns of different lengths, a wrong type, an
unknown key) is refused even with a matching digest. The format 4 bytes main wrote still read
to the same state; a snapshot of formats 1-3 is a miss, noted by `verify` as not compared.
"""

from __future__ import annotations

import hashlib
import traceback
import zlib
from pathlib import Path
from typing import Any
from uuid import UUID

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fixtures.snapshots import make_snapshots
from tests.old_snapshots import in_old_format
from tests.unit.test_compact_state import NOW, SESSION, _start
from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.decider import (
    AppendMessage,
    PrepareRequest,
    SessionState,
    execute,
)
from turnledger.domain.errors import CorruptRecord
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.store.snapshots import (
    OLD_FORMATS,
    SNAPSHOT_FORMAT,
    SnapshotMismatch,
    _converter,
    _decoder,
    _pack_ints,
    _Snapshot,
    _unpack_ints,
    compare_snapshot,
    decode_snapshot,
    encode_snapshot,
    snapshot_format,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "snapshots"

CHAIN = b"\1" * 32
LIMIT_OFF = RuntimeProfile(max_context_tokens=300, max_history_messages=10**9)


def _turn(index: int) -> tuple[ConversationMessage, ...]:
    call = ToolCall(f"c{index}", "shell", "{}")
    return (
        Chat(ChatMessage.user(f"question {index} " + "x" * (50 + 37 * (index % 7)))),
        AssistantToolCalls(None, (call,)),
        ToolResults((ToolResult(call.id, "y" * (100 + 61 * (index % 5)), "shell"),)),
        Chat(ChatMessage.assistant("z" * (20 + index % 3))),
    )


def _long_state(turns: int = 200, profile: RuntimeProfile = LIMIT_OFF) -> SessionState:
    """A compact state with a long summarised region (the turn limit off, budget trims)."""
    state = SessionState()
    _start(profile, False, state)
    for index in range(turns):
        for item in _turn(index):
            execute(state, AppendMessage(item, NOW))
        execute(state, PrepareRequest(0, 0, False, NOW))
    return state


def _body(payload: bytes) -> dict[str, Any]:
    form, _, z = msgpack.unpackb(payload)
    assert SNAPSHOT_FORMAT == form
    body: dict[str, Any] = msgpack.unpackb(zlib.decompress(z), timestamp=3)
    return body


def _wrap(body: dict[str, Any]) -> bytes:
    """A format 4 snapshot of ``body`` with a digest that matches: only its content is wrong."""
    z = zlib.compress(msgpack.packb(body, datetime=True), 1)
    wrapped: bytes = msgpack.packb([SNAPSHOT_FORMAT, hashlib.sha256(z).digest(), z])
    return wrapped


# --- the packed columns ---------------------------------------------------------------------


@given(
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=50)
    | st.lists(st.integers(min_value=0, max_value=2**64 - 1), max_size=50)
)
def test_an_integer_column_round_trips_in_the_narrowest_type(values: list[int]) -> None:
    """Any int64 or uint64 column unpacks to itself; numbers below 256 take one byte each."""
    packed = _pack_ints(values)
    assert values == _unpack_ints(packed)
    if values and min(values) >= 0 and max(values) < 256:
        assert len(values) + 1 == len(packed)


def test_integers_beyond_64_bits_are_refused_when_packing() -> None:
    """Numbers no one packed type holds are an error, never truncated."""
    for values in ([1, 2**64], [-1, 2**63]):
        with pytest.raises(ValueError, match="no 64-bit type holds"):
            _pack_ints(values)


@pytest.mark.parametrize(
    ("column", "message"),
    [(b"", "lacks its type code"), (b"x\0\0", "unknown integer column type"),
     (b"H\1\0\2", "3 bytes long"), (b"i\0\0\0\0", "unknown integer column type")],
)
def test_a_damaged_integer_column_is_refused(column: bytes, message: str) -> None:
    """No type code, an unknown one, or a length that is not whole items: ValueError."""
    with pytest.raises(ValueError, match=message):
        _unpack_ints(column)


# --- encoding ------------------------------------------------------------------------------


def test_encoding_a_state_leaves_it_as_it_was() -> None:
    """`encode_snapshot` reads a state: the canonical form of a state not in it is a copy's."""
    state = _long_state(60)
    held = (state.index.lo, state.index.base, list(state.index.items))
    encode_snapshot(state, CHAIN)
    assert held == (state.index.lo, state.index.base, list(state.index.items))


# --- format 4 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", [LIMIT_OFF, RuntimeProfile(max_history_messages=6)])
def test_format_4_round_trips_and_the_restored_state_decides_the_same(
    profile: RuntimeProfile,
) -> None:
    """decode(encode(state)) re-encodes to the same bytes, compares equal field by field and
    goes on deciding as the live state."""
    live = _long_state(120, profile)
    payload = encode_snapshot(live, CHAIN)
    restored, chain = decode_snapshot(payload, session_id=SESSION, version=live.version)
    assert (CHAIN, payload) == (chain, encode_snapshot(restored, chain))
    assert [] == compare_snapshot(payload, live, CHAIN)
    for index in range(120, 130):
        for item in _turn(index):
            assert execute(live, AppendMessage(item, NOW)) == execute(
                restored, AppendMessage(item, NOW)
            )
        command = PrepareRequest(0, 0, False, NOW)
        assert execute(live, command) == execute(restored, command)
        assert live.chat_view() == restored.chat_view()


def test_format_4_holds_the_region_in_fewer_bytes_than_format_3() -> None:
    """With the turn limit off, 200 turns: format 4 is no larger than format 3."""
    state = _long_state(200)
    assert len(state.index.region.turns) > 150
    assert len(encode_snapshot(state, CHAIN)) <= len(in_old_format(encode_snapshot(state, CHAIN),
                                                                  3))


@pytest.mark.parametrize(
    ("name", "state"), [("format4", "limit_off"), ("format4_systems", "systems")]
)
def test_i20_p2_format_4_bytes_main_wrote_read_to_the_same_state(name: str, state: str) -> None:
    """The format 4 fixtures (commit 153a0a6's bytes): decoded, they compare equal to the state
    they were taken of, re-encode to the bytes that state encodes to today (the profile has
    gained `Pricing` fields since, with their defaults), and the state decides the same."""
    payload = (FIXTURES / f"{name}.msgpack").read_bytes()
    live = make_snapshots.STATES[state]()
    decoded = decode_snapshot(payload, session_id=SESSION, version=live.version)
    assert decoded is not None
    restored, chain = decoded
    assert (CHAIN, encode_snapshot(live, CHAIN)) == (chain, encode_snapshot(restored, chain))
    assert [] == compare_snapshot(payload, live, CHAIN)
    for index in range(60, 63):
        for item in _turn(index):
            assert execute(live, AppendMessage(item, NOW)) == execute(
                restored, AppendMessage(item, NOW)
            )


@pytest.mark.parametrize("form", sorted(OLD_FORMATS))
def test_i20_p2_a_snapshot_of_an_old_format_is_a_miss_not_compared(form: int) -> None:
    """The fixtures of formats 1-3 (intact, of the very state): decode gives None (a miss, no
    `SnapshotMismatch`), compare gives None (not compared, no `CorruptRecord`)."""
    payload = (FIXTURES / f"format{form}.msgpack").read_bytes()
    live = make_snapshots.STATES["limit_off"]()
    assert form == snapshot_format(payload)
    assert (None, None) == (
        decode_snapshot(payload, session_id=SESSION, version=live.version),
        compare_snapshot(payload, live, CHAIN),
    )


@pytest.mark.parametrize("form", [0, 5, 6, 12, 20, 36, 68, 2**40])
def test_i20_p2_a_format_no_version_wrote_is_a_miss_on_restore_and_a_finding_of_verify(
    form: int,
) -> None:
    """Any other format number (the flips of one bit of 4 among them): restore misses it;
    verify refuses it, naming the format, since only damage or a newer writer makes it."""
    state = _long_state(10)
    _, digest, z = msgpack.unpackb(encode_snapshot(state, CHAIN))
    payload = msgpack.packb([form, digest, z])
    assert None is decode_snapshot(payload, session_id=SESSION, version=state.version)
    with pytest.raises(CorruptRecord, match=f"format {form} is none"):
        compare_snapshot(payload, state, CHAIN)


def test_i20_p2_bytes_of_no_format_are_damage_not_a_miss() -> None:
    """Bytes that are not msgpack, neither shape a format ever had, an old format's shape
    whose digest fails, or a map saying format 1 without format 1's keys: `SnapshotMismatch`."""
    three = (FIXTURES / "format3.msgpack").read_bytes()
    _, digest, z = msgpack.unpackb(three)
    one = msgpack.unpackb((FIXTURES / "format1.msgpack").read_bytes(), timestamp=3)
    del one["chain"]
    for payload in (b"\xc1 not msgpack", msgpack.packb([4, b"x"]), msgpack.packb({"f": 1}),
                    msgpack.packb(["4", b"", b""]), msgpack.packb({"format": "1"}),
                    msgpack.packb({"format": 1}), msgpack.packb([3, digest, z + b"\0"]),
                    msgpack.packb([7, b"\0" * 32, z]), msgpack.packb(one, datetime=True)):
        assert None is snapshot_format(payload)
        with pytest.raises(SnapshotMismatch, match="cannot be trusted"):
            decode_snapshot(payload, session_id=SESSION, version=1)


def test_i20_p2_the_old_format_helper_writes_the_bytes_the_old_encoder_wrote() -> None:
    """`tests.old_snapshots.in_old_format` of the format 4 fixture gives the fixtures of
    formats 1-3 byte for byte: the integration tests' old snapshots are the real layout."""
    four = (FIXTURES / "format4.msgpack").read_bytes()
    for form in sorted(OLD_FORMATS):
        assert (FIXTURES / f"format{form}.msgpack").read_bytes() == in_old_format(four, form)


def _edits(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Bodies wrong in one place each, every one with a matching digest once wrapped."""
    edited: list[tuple[str, dict[str, Any]]] = []
    for key, value in body.items():
        for wrong in ("7", 7, None, [], b"\0" * 16, True, 1.5, {"t": "chat"}):
            if wrong.__class__ is not value.__class__ or wrong != value:
                edited.append((f"{key}={wrong!r}", {**body, key: wrong}))
        edited.append((f"-{key}", {k: v for k, v in body.items() if k != key}))
    edited.append(("+extra", {**body, "extra": 1}))
    edited.append(("items[0] tag", {**body, "items": [{"t": "nope"}, *body["items"][1:]]}))
    return edited


def test_the_generated_body_decoder_agrees_with_the_converter_on_every_edited_body() -> None:
    """For each body edited in one place: when the generated function accepts it, the
    converter returns an equal value (the one-sided contract of ADR-0052)."""
    body = _body(encode_snapshot(_long_state(40), CHAIN))
    assert _decoder()(body) == _converter().structure(body, _Snapshot)
    accepted = 0
    for _, edited in _edits(body):
        try:
            fast = _decoder()(edited)
        except Exception:  # refused: refused (the converter only explains, ADR-0074)
            continue
        accepted += 1
        assert _converter().structure(edited, _Snapshot) == fast
    assert accepted < len(_edits(body))


def test_i20_p2_a_refusal_names_the_field_and_its_traceback_shows_the_generated_line() -> None:
    """A body with a wrong type: the error says which field (the converter's path), and its
    cause, raised by the generated decoder, shows the generated source line that refused."""
    state = _long_state(10)
    body = _body(encode_snapshot(state, CHAIN))
    with pytest.raises(SnapshotMismatch, match=r"chat_cursor") as raised:
        decode_snapshot(_wrap({**body, "chat_cursor": "7"}), session_id=SESSION,
                        version=state.version)
    refusal = raised.value.__cause__.__cause__  # SnapshotMismatch <- converter <- decoder
    assert refusal is not None
    frames = traceback.extract_tb(refusal.__traceback__)
    generated = [f for f in frames if f.filename.startswith("<turnledger generated")]
    assert ["raise _Reject('_Snapshot.chat_cursor')"] == [f.line for f in generated]


def test_a_wrong_format_4_body_is_refused_despite_a_matching_digest() -> None:
    """Wrong types, missing or unknown keys, unknown tags, damaged columns: a restore refuses
    them (`SnapshotMismatch`) and so does verify (`CorruptRecord`); a body that still decodes
    (another value of the right type) is one verify names a differing field of."""
    state = _long_state(40)
    body = _body(encode_snapshot(state, CHAIN))
    tokens = body["segment_tokens"]
    damaged = [
        {**body, "segment_tokens": b"z" + tokens[1:]},
        {**body, "segment_tokens": tokens[:-1]},
        {**body, "segment_real": _pack_ints([1, 2, 3])},
    ]
    for edited in damaged:
        with pytest.raises(SnapshotMismatch, match="column"):
            decode_snapshot(_wrap(edited), session_id=SESSION, version=state.version)
        with pytest.raises(CorruptRecord, match="column"):
            compare_snapshot(_wrap(edited), state, CHAIN)
    refused = 0
    for name, edited in _edits(body):
        payload = _wrap(edited)
        try:
            differing = compare_snapshot(payload, state, CHAIN)
        except CorruptRecord:
            refused += 1
            with pytest.raises(SnapshotMismatch):
                decode_snapshot(payload, session_id=SESSION, version=state.version)
            continue
        assert differing, name
    assert refused > len(_edits(body)) // 2


def test_a_rewritten_format_4_column_is_named_by_verify() -> None:
    """A region column changed and re-digested: verify names exactly that field."""
    state = _long_state(60)
    body = _body(encode_snapshot(state, CHAIN))
    tokens = _unpack_ints(body["segment_tokens"])
    tokens[3] += 1
    payload = _wrap({**body, "segment_tokens": _pack_ints(tokens)})
    assert ["segment_tokens"] == compare_snapshot(payload, state, CHAIN)
    gaps = _unpack_ints(body["turn_gaps"])
    gaps[-1] += 1
    payload = _wrap({**body, "turn_gaps": _pack_ints(gaps)})
    assert ["turn_gaps"] == compare_snapshot(payload, state, CHAIN)


def test_a_snapshot_of_another_session_or_version_is_refused() -> None:
    """The decoded body's session and version must be the ones asked for."""
    state = _long_state(10)
    payload = encode_snapshot(state, CHAIN)
    with pytest.raises(SnapshotMismatch):
        decode_snapshot(payload, session_id=UUID(int=13), version=state.version)
    with pytest.raises(SnapshotMismatch):
        decode_snapshot(payload, session_id=SESSION, version=state.version + 1)
