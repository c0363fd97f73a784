"""A record's payload, compressed inside its envelope when that pays (ADR-0031).

The envelope of a record is ``[chain, payload]`` (`turnledger.store.mapper`). A payload of at
least `MIN_COMPRESSED` bytes that zlib shrinks by more than `MIN_SAVING` is stored as
``[chain, zlib(payload), ZLIB]`` instead; anything else stays a pair, so every record written
before keeps its bytes and its meaning. The hash chain (ADR-0004) covers the *uncompressed*
payload: compressing or not never changes a chain value, and `verify` checks the same bytes.
This sits before the store's own compressor and cipher (encode -> compress -> encrypt).

An encrypted store (`turnledger.store.crypto`) compresses *before* it encrypts, with the same
rule: `pack_body` marks the plaintext it encrypts as raw or zlib'd, and the envelope of a
ciphertext is never compressed (``envelope_of(..., compress=False)``: random bytes do not shrink,
so trying would only cost a zlib pass per record).
"""

from __future__ import annotations

import zlib
from typing import Any, Final

__all__ = [
    "MIN_COMPRESSED",
    "MIN_SAVING",
    "ZLIB",
    "ZLIB_LEVEL",
    "envelope_of",
    "open_envelope",
    "pack_body",
    "unpack_body",
]

ZLIB: Final = 1
"""The third element of an envelope whose payload is zlib-compressed."""
MIN_COMPRESSED: Final = 200
"""Payloads shorter than this are stored as they are (zlib would not pay for its header)."""
MIN_SAVING: Final = 32
"""Bytes a compressed payload must save to be stored compressed."""
ZLIB_LEVEL: Final = 1
"""zlib's level for record payloads: on the append path level 1 costs half of level 6's time
for about 3 % more event bytes (ADR-0061)."""
_MEM_LEVEL: Final = 4
"""zlib's ``memLevel`` (its hash table's size; 8 by default) for record payloads."""
_MIN_WBITS: Final = 9
_MAX_WBITS: Final = zlib.MAX_WBITS


def _window_bits(size: int) -> int:
    """The smallest zlib window (as ``wbits``) that holds ``size`` bytes, between 512 bytes
    and zlib's 32 KB: a match can never reach further back than the payload's start, so a
    larger window only costs memory to set up."""
    return max(_MIN_WBITS, min(_MAX_WBITS, (size - 1).bit_length()))


def _shrunk(payload: bytes) -> bytes | None:
    """zlib of ``payload`` when that pays (`MIN_COMPRESSED`, `MIN_SAVING`), else None.

    A zlib stream whose window fits the payload, with a smaller hash table than zlib's
    default (ADR-0061): `zlib.compress` sets up a 32 KB window and a 256 KB state for a
    payload of a few hundred bytes, which costs more than compressing it. Any zlib reader
    decompresses the stream (its header names the window).
    """
    size = len(payload)
    if size >= MIN_COMPRESSED:
        compressor = zlib.compressobj(ZLIB_LEVEL, zlib.DEFLATED, _window_bits(size), _MEM_LEVEL)
        packed = compressor.compress(payload) + compressor.flush()
        if len(packed) + MIN_SAVING <= size:
            return packed
    return None


def envelope_of(chain: bytes, payload: bytes, *, compress: bool = True) -> list[Any]:
    """The envelope of a record: ``[chain, payload]`` or ``[chain, zlib(payload), ZLIB]``."""
    packed = _shrunk(payload) if compress else None
    return [chain, payload] if packed is None else [chain, packed, ZLIB]


_RAW_BODY: Final = b"\x00"
_ZLIB_BODY: Final = b"\x01"


def pack_body(payload: bytes) -> bytes:
    """The plaintext an encrypted store encrypts: a marker byte, then the payload or its zlib."""
    packed = _shrunk(payload)
    return _RAW_BODY + payload if packed is None else _ZLIB_BODY + packed


def unpack_body(data: bytes) -> bytes:
    """The payload of `pack_body`'s bytes; ``ValueError`` for an unknown marker."""
    marker, rest = data[:1], data[1:]
    if marker == _RAW_BODY:
        return bytes(rest)
    if marker == _ZLIB_BODY:
        try:
            return zlib.decompress(rest)
        except zlib.error as error:
            raise ValueError(f"the decrypted payload does not decompress: {error}") from error
    raise ValueError(f"the decrypted payload has an unknown encoding {marker!r}")


def open_envelope(envelope: object) -> tuple[object, object]:
    """(chain, payload) of an envelope; ``ValueError`` for one of neither form."""
    if not isinstance(envelope, list) or len(envelope) not in (2, 3):
        raise ValueError("the record is not a [chain, payload] pair")
    if len(envelope) == 2:
        return envelope[0], envelope[1]
    chain, packed, codec = envelope
    if codec != ZLIB or not isinstance(packed, bytes):
        raise ValueError(f"the record's payload has an unknown encoding {codec!r}")
    return chain, zlib.decompress(packed)
