"""A record's payload, compressed inside its envelope when that pays (ADR-0031).

The envelope of a record is ``[chain, payload]`` (`turnledger.store.mapper`). A payload of at
least `MIN_COMPRESSED` bytes that zlib shrinks by more than `MIN_SAVING` is stored as
``[chain, zlib(payload), ZLIB]`` instead; anything else stays a pair, so every record written
before keeps its bytes and its meaning. The hash chain (ADR-0004) covers the *uncompressed*
payload: compressing or not never changes a chain value, and `verify` checks the same bytes.
This sits before the store's own compressor and cipher (encode -> compress -> encrypt).
"""

from __future__ import annotations

import zlib
from typing import Any, Final

__all__ = ["MIN_COMPRESSED", "MIN_SAVING", "ZLIB", "envelope_of", "open_envelope"]

ZLIB: Final = 1
"""The third element of an envelope whose payload is zlib-compressed."""
MIN_COMPRESSED: Final = 200
"""Payloads shorter than this are stored as they are (zlib would not pay for its header)."""
MIN_SAVING: Final = 32
"""Bytes a compressed payload must save to be stored compressed."""
_LEVEL: Final = 6


def envelope_of(chain: bytes, payload: bytes) -> list[Any]:
    """The envelope of a record: ``[chain, payload]`` or ``[chain, zlib(payload), ZLIB]``."""
    if len(payload) >= MIN_COMPRESSED:
        packed = zlib.compress(payload, _LEVEL)
        if len(packed) + MIN_SAVING <= len(payload):
            return [chain, packed, ZLIB]
    return [chain, payload]


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
