"""Record envelopes compressed with a window that fits the payload (ADR-0031, ADR-0061)."""

from __future__ import annotations

import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.properties import examples
from turnledger.store import packing
from turnledger.store.packing import (
    MIN_COMPRESSED,
    MIN_SAVING,
    ZLIB,
    envelope_of,
    open_envelope,
    pack_body,
    unpack_body,
)

CHAIN = bytes(32)


def _prose(size: int, seed: int = 7) -> bytes:
    words = ["turn", "ledger", "agent", "tool", "result", "window", "budget", "é", "日本"]
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words).encode() + b" "
    return bytes(out[:size])


@pytest.mark.parametrize("size", [MIN_COMPRESSED, 511, 512, 513, 4_000, 40_000, 300_000])
def test_e12_a_compressed_payload_is_a_zlib_stream_any_reader_opens(size: int) -> None:
    """Whatever window the payload got, the stored bytes are one zlib stream that the
    standard decompressor (default 32 KB window) opens to the payload, and its header names
    a window no larger than zlib's."""
    payload = _prose(size)
    envelope = envelope_of(CHAIN, payload)
    assert len(envelope) == 3
    assert envelope[2] == ZLIB
    packed = envelope[1]
    assert zlib.decompress(packed) == payload
    assert open_envelope(envelope) == (CHAIN, payload)
    window = 1 << ((packed[0] >> 4) + 8)  # CINFO: log2(window) - 8
    assert window <= 32_768
    assert window >= min(size, 32_768) or window == 32_768


def test_e12_a_small_window_saves_what_zlib_default_saves() -> None:
    """The fitted window loses nothing that matters: for payloads up to 32 KB the stored
    size stays within 2 % (plus a few bytes) of `zlib.compress` at the same level."""
    for size in (300, 900, 1_600, 5_000, 30_000):
        payload = _prose(size, seed=size)
        ours = envelope_of(CHAIN, payload)[1]
        theirs = zlib.compress(payload, packing.ZLIB_LEVEL)
        assert len(ours) <= len(theirs) * 1.02 + 4, (size, len(ours), len(theirs))


def test_e12_compression_is_deterministic() -> None:
    """The same payload always gives the same stored bytes (E12)."""
    payload = _prose(2_000)
    assert envelope_of(CHAIN, payload) == envelope_of(CHAIN, bytes(payload))


def test_e12_what_does_not_pay_stays_plain() -> None:
    """Too short, or saving less than `MIN_SAVING`: the envelope is a pair."""
    assert envelope_of(CHAIN, _prose(MIN_COMPRESSED - 1)) == [CHAIN, _prose(MIN_COMPRESSED - 1)]
    noise = random.Random(3).randbytes(2_000)
    assert envelope_of(CHAIN, noise) == [CHAIN, noise]
    assert envelope_of(CHAIN, _prose(5_000), compress=False) == [CHAIN, _prose(5_000)]
    assert MIN_SAVING > 0


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(min_size=0, max_size=3_000) | st.text(max_size=3_000).map(str.encode))
def test_e12_every_payload_comes_back(payload: bytes) -> None:
    """Any payload, compressed or not, opens to itself; so does an encrypted store's body."""
    assert open_envelope(envelope_of(CHAIN, payload)) == (CHAIN, payload)
    assert unpack_body(pack_body(payload)) == payload
