"""Snapshots of the formats older versions wrote (1-3), made from a format 4 snapshot's bytes.

Only format 4 is written since ADR-0074, but a store in the field may still hold an older
snapshot of a session, which must be a miss. `in_old_format` rewrites the snapshot of a live
session into such bytes, as commit 153a0a6's encoder laid them out (the fixtures of
``tests/fixtures/snapshots`` are that encoder's own bytes; a test holds the two to each other).
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Any

import msgpack

_COLUMNS = ("turn_gaps", "segment_tokens", "segment_real")
_REGION = ("lo", *_COLUMNS, "systems", "suspects")  # what format 3 added to format 2


def _unpacked(column: bytes) -> list[int]:
    """A packed integer column (a type code byte, then the little-endian array) as a list."""
    width = {"B": 1, "H": 2, "I": 4, "Q": 8, "q": 8}[chr(column[0])]
    signed = chr(column[0]) == "q"
    return [int.from_bytes(column[at : at + width], "little", signed=signed)
            for at in range(1, len(column), width)]


def in_old_format(payload: bytes, form: int) -> bytes:
    """The format 4 snapshot ``payload`` in format ``form`` (1, 2 or 3), with its digest.

    3: the same fields, the integer columns as msgpack arrays (zlib'd, ADR-0030); 2: without
    the region, not compressed (ADR-0023); 1: format 2's body alone, without a digest.
    """
    four, _, z = msgpack.unpackb(payload)
    assert 4 == four, four
    body: dict[str, Any] = msgpack.unpackb(zlib.decompress(z), timestamp=3)
    body["format"] = form
    if form == 3:
        body.update((name, _unpacked(body[name])) for name in _COLUMNS)
        z = zlib.compress(msgpack.packb(body, datetime=True), 1)
        return _digested(3, z)
    for name in _REGION:
        del body[name]
    if form == 2:
        return _digested(2, msgpack.packb(body, datetime=True))
    assert 1 == form, form
    undigested: bytes = msgpack.packb(body, datetime=True)
    return undigested


def _digested(form: int, body: bytes) -> bytes:
    wrapped: bytes = msgpack.packb([form, hashlib.sha256(body).digest(), body])
    return wrapped
