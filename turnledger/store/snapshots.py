"""Snapshots of a session's *compact* state, so a restore costs O(window) (ADR-0002).

A snapshot holds what cannot be derived cheaply: the leading and retained system messages, the
window of the log from the earliest cursor (with swept positions as gaps), the cursors and
breadcrumb flags, the profile/providers/route, the version and the hash-chain head. Estimates,
prefix sums and turn starts are recomputed from the window on load (O(window)), so they can
never disagree with the items. Snapshots are caches: a missing or unreadable one only costs a
longer replay; an unreadable one is reported as `CorruptRecord`, never silently ignored.

Format 2 (ADR-0023) wraps the body in ``msgpack([2, sha256(body), body])``: a snapshot whose
bytes changed is refused by its digest before anything in it is believed. Format 1 (no digest)
still decodes, for `verify`, but `decode_snapshot` refuses it unless ``trust_undigested``.

Format 3 (ADR-0030) is O(window) whatever the turn limit: ``msgpack([3, sha256(z), z])`` with
``z`` the zlib-compressed body, which holds the chat window's items and the *summary* of the
rest of the conversation window (`Region`: turn starts as gaps, per-turn token and message
sums, system items, sweep suspects), in one canonical form: region ``[conversation start,
chat start)``, items from the chat start. A format 2 snapshot is still read (its items become
the held window of a compact state) and compared by `verify` against the state as folded.

Format 4 (ADR-0060) is format 3 with the region's three integer columns (a number per turn of
the conversation window) packed as little-endian arrays of the narrowest width instead of
msgpack arrays, and its body structured by a generated function (ADR-0052), the converter
deciding whatever that one refuses. Format 3 snapshots are still read and compared as before.
"""

from __future__ import annotations

import hashlib
import sys
import zlib
from array import array
from collections.abc import Callable, Sequence
from functools import cache
from itertools import accumulate
from operator import sub
from typing import Any
from uuid import UUID

import attrs
import cattrs
import msgpack

from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.decider import SessionState
from turnledger.domain.errors import CorruptRecord, SnapshotMismatch
from turnledger.domain.messages import ConversationMessage
from turnledger.domain.window import Region, Window
from turnledger.store.codec import _FAST_OMITTED, _FAST_UNIONS, describe_error, make_converter
from turnledger.store.fastdecode import build_hook

__all__ = [
    "SNAPSHOT_FORMAT",
    "SnapshotMismatch",
    "compare_snapshot",
    "decode_snapshot",
    "encode_snapshot",
]

SNAPSHOT_FORMAT = 4
_COMPACT_FORMAT = 3  # ADR-0030: format 4's fields, its integer columns as msgpack arrays
_WINDOW_FORMAT = 2  # ADR-0023: the whole conversation window's items, digested
_UNDIGESTED_FORMAT = 1  # before ADR-0023: the body alone, without a digest


@attrs.frozen
class _Snapshot:
    format: int
    session_id: UUID
    version: int
    chain: bytes
    profile: RuntimeProfile
    providers: tuple[ProviderProfile, ...]
    legacy: bool
    route: Route
    leading: tuple[ConversationMessage, ...]
    retained: tuple[ConversationMessage, ...]
    base: int
    items: tuple[ConversationMessage | None, ...]
    conv_cursor: int
    chat_cursor: int
    conv_breadcrumb: bool
    chat_breadcrumb: bool


@attrs.frozen
class _Compact:
    """Formats 3 and 4: the chat window held, the rest of the conversation window summarised.

    What `verify` compares field by field, whichever of the two formats the bytes are in."""

    format: int
    session_id: UUID
    version: int
    chain: bytes
    profile: RuntimeProfile
    providers: tuple[ProviderProfile, ...]
    legacy: bool
    route: Route
    leading: tuple[ConversationMessage, ...]
    retained: tuple[ConversationMessage, ...]
    lo: int
    base: int
    items: tuple[ConversationMessage | None, ...]
    turn_gaps: tuple[int, ...]
    """The region's turn starts as gaps from ``lo`` (then from the previous one)."""
    segment_tokens: tuple[int, ...]
    segment_real: tuple[int, ...]
    systems: tuple[tuple[int, ConversationMessage], ...]
    suspects: tuple[tuple[int, ConversationMessage], ...]
    conv_cursor: int
    chat_cursor: int
    conv_breadcrumb: bool
    chat_breadcrumb: bool


@attrs.frozen
class _Packed:
    """Format 4 as stored: `_Compact`'s fields, its three integer columns packed (`_pack_ints`)
    instead of msgpack arrays, which cost a decode and a type check per integer (ADR-0060)."""

    format: int
    session_id: UUID
    version: int
    chain: bytes
    profile: RuntimeProfile
    providers: tuple[ProviderProfile, ...]
    legacy: bool
    route: Route
    leading: tuple[ConversationMessage, ...]
    retained: tuple[ConversationMessage, ...]
    lo: int
    base: int
    items: tuple[ConversationMessage | None, ...]
    turn_gaps: bytes
    segment_tokens: bytes
    segment_real: bytes
    systems: tuple[tuple[int, ConversationMessage], ...]
    suspects: tuple[tuple[int, ConversationMessage], ...]
    conv_cursor: int
    chat_cursor: int
    conv_breadcrumb: bool
    chat_breadcrumb: bool


_COLUMNS = ("turn_gaps", "segment_tokens", "segment_real")
"""`_Compact`'s integer columns: one number per turn of the conversation window (ADR-0030)."""

_LEVEL = 1
"""zlib level of a snapshot body: a snapshot is written on the append path, and level 1
compresses a 130 KB window in 1.5 ms against 4.1 ms at level 6 for 15 % more bytes (ADR-0058)."""

_INT_CODES = {"B": 1, "H": 2, "I": 4, "Q": 8, "q": 8}
"""The `array` type codes of a packed integer column and their widths in bytes, narrowest
first (``q``: a column with a negative value, which no writer produces)."""
_SWAP = sys.byteorder != "little"  # packed columns are little-endian on every machine


def _pack_ints(values: Sequence[int]) -> bytes:
    """``values`` as one type code byte and the little-endian array of the narrowest type
    that holds them all: small numbers cost zlib one byte each, as in msgpack."""
    for code, width in _INT_CODES.items():
        try:
            packed = array(code, values)
        except OverflowError:
            continue
        if packed.itemsize != width:  # pragma: no cover - no CPython platform we know of
            raise ValueError(f"array({code!r}) is {packed.itemsize} bytes here, not {width}")
        if _SWAP:  # pragma: no cover - big-endian machines
            packed.byteswap()
        return code.encode() + packed.tobytes()
    raise ValueError("an integer column of the snapshot holds numbers no 64-bit type holds")


def _unpack_ints(data: bytes) -> list[int]:
    """The inverse of `_pack_ints`; ``ValueError`` for an unknown type code or a length that
    is not a whole number of items."""
    if not data:
        raise ValueError("an integer column is empty (it lacks its type code)")
    code = chr(data[0])
    width = _INT_CODES.get(code)
    if width is None:
        raise ValueError(f"unknown integer column type {code!r}")
    if (len(data) - 1) % width:
        raise ValueError(f"an integer column of type {code!r} is {len(data) - 1} bytes long")
    values = array(code)
    values.frombytes(memoryview(data)[1:])
    if _SWAP:  # pragma: no cover - big-endian machines
        values.byteswap()
    return values.tolist()


@cache
def _converter() -> cattrs.Converter:
    return make_converter()


@cache
def _fast_packed() -> Callable[[Any], Any]:
    """The generated structuring function of `_Packed` (ADR-0052, ADR-0060)."""
    return build_hook(_Packed, _converter(), unions=_FAST_UNIONS, omitted=_FAST_OMITTED)


def encode_snapshot(
    state: SessionState, chain: bytes, *, snapshot_format: int = SNAPSHOT_FORMAT
) -> bytes:
    """The snapshot bytes of ``state`` whose last record has chain value ``chain``.

    ``snapshot_format=3`` or ``2`` writes an older format (ADR-0030; before it: the whole held
    window's items), for tests and tools that need an old snapshot; ``ValueError`` for any
    other format. Reads ``state`` only.
    """
    if snapshot_format == SNAPSHOT_FORMAT:
        compact = _compact_of(state, chain)
        fields = {name: getattr(compact, name) for name in _PACKED_FIELDS}
        fields.update((name, _pack_ints(getattr(compact, name))) for name in _COLUMNS)
        packed = msgpack.packb(_converter().unstructure(_Packed(**fields)), datetime=True)
        body = zlib.compress(packed, _LEVEL)
    elif snapshot_format == _COMPACT_FORMAT:
        compact = attrs.evolve(_compact_of(state, chain), format=_COMPACT_FORMAT)
        body = zlib.compress(
            msgpack.packb(_converter().unstructure(compact), datetime=True), _LEVEL
        )
    elif snapshot_format == _WINDOW_FORMAT:
        body = msgpack.packb(_converter().unstructure(_snapshot_of(state, chain)), datetime=True)
    else:
        raise ValueError(f"cannot write snapshot format {snapshot_format}")
    wrapped: bytes = msgpack.packb([snapshot_format, hashlib.sha256(body).digest(), body])
    return wrapped


_PACKED_FIELDS = tuple(f.name for f in attrs.fields(_Packed) if f.name not in _COLUMNS)


def _compact_of(state: SessionState, chain: bytes) -> _Compact:
    """``state`` as it is: its one form is the snapshot's (ADR-0076)."""
    assert state.session_id is not None
    chat, index = state.chat, state.index
    region = index.region
    turns = region.turns
    return _Compact(
        format=SNAPSHOT_FORMAT,
        session_id=state.session_id,
        version=state.version,
        chain=chain,
        profile=state.profile,
        providers=state.providers,
        legacy=state.legacy,
        route=state.route.route,
        leading=tuple(index.leading),
        retained=tuple(index.retained),
        lo=index.lo,
        base=index.base,
        items=tuple(index.items),
        turn_gaps=tuple(map(sub, turns, [index.lo, *turns])),
        segment_tokens=tuple(region.tokens),
        segment_real=tuple(region.real),
        systems=tuple(region.systems),
        suspects=tuple(region.suspects),
        conv_cursor=state.conversation.start,
        chat_cursor=chat.start,
        conv_breadcrumb=state.conversation.breadcrumb,
        chat_breadcrumb=chat.breadcrumb,
    )


def _snapshot_of(state: SessionState, chain: bytes) -> _Snapshot:
    assert state.session_id is not None
    return _Snapshot(
        format=_WINDOW_FORMAT,
        session_id=state.session_id,
        version=state.version,
        chain=chain,
        profile=state.profile,
        providers=state.providers,
        legacy=state.legacy,
        route=state.route.route,
        leading=tuple(state.index.leading),
        retained=tuple(state.index.retained),
        base=state.index.base,
        items=tuple(state.index.items),
        conv_cursor=state.conversation.start,
        chat_cursor=state.chat.start,
        conv_breadcrumb=state.conversation.breadcrumb,
        chat_breadcrumb=state.chat.breadcrumb,
    )


_DIGESTED = (SNAPSHOT_FORMAT, _COMPACT_FORMAT, _WINDOW_FORMAT)


def _unwrap(payload: bytes, trust_undigested: bool) -> _Snapshot | _Compact | _Columns:
    """The snapshot in ``payload``; ``ValueError`` (or a msgpack/cattrs error) if untrusted."""
    raw = msgpack.unpackb(payload, timestamp=3)
    if isinstance(raw, list) and len(raw) == 3 and raw[0] in _DIGESTED:
        form, digest, body = raw
        if not isinstance(body, bytes) or hashlib.sha256(body).digest() != digest:
            raise ValueError("its digest does not match its bytes")
        snapshot: _Snapshot | _Compact | _Columns
        if form == SNAPSHOT_FORMAT:
            snapshot = _columns(msgpack.unpackb(zlib.decompress(body), timestamp=3))
        elif form == _COMPACT_FORMAT:
            unpacked = msgpack.unpackb(zlib.decompress(body), timestamp=3)
            snapshot = _converter().structure(unpacked, _Compact)
        else:
            snapshot = _converter().structure(msgpack.unpackb(body, timestamp=3), _Snapshot)
        if snapshot.format != form:
            raise ValueError(f"the body says format {snapshot.format}")
        return snapshot
    if isinstance(raw, dict) and raw.get("format") == _UNDIGESTED_FORMAT:
        if not trust_undigested:
            raise ValueError("format 1 carries no digest (written before ADR-0023)")
        return _converter().structure(raw, _Snapshot)
    raise ValueError("unknown snapshot format")


@attrs.frozen
class _Columns:
    """A format 4 snapshot read: its `_Packed` fields, and its integer columns unpacked."""

    packed: _Packed
    turn_gaps: list[int]
    segment_tokens: list[int]
    segment_real: list[int]

    @property
    def format(self) -> int:
        return self.packed.format

    @property
    def session_id(self) -> UUID:
        return self.packed.session_id

    @property
    def version(self) -> int:
        return self.packed.version

    @property
    def chain(self) -> bytes:
        return self.packed.chain

    def compact(self) -> _Compact:
        """The same snapshot as `verify` compares it (`_compact_of`)."""
        fields: dict[str, Any] = {name: getattr(self.packed, name) for name in _PACKED_FIELDS}
        fields.update((name, tuple(getattr(self, name))) for name in _COLUMNS)
        return _Compact(**fields)


def _columns(raw: object) -> _Columns:
    """A format 4 body, structured by its generated function, or by the converter when that
    one refuses (the converter decides, and explains a failure, ADR-0052)."""
    try:
        packed: _Packed = _fast_packed()(raw)
    except Exception:  # anything unusual: the converter decides
        packed = _converter().structure(raw, _Packed)
    tokens, real = _unpack_ints(packed.segment_tokens), _unpack_ints(packed.segment_real)
    if len(tokens) != len(real):
        raise ValueError("the region's token and message columns differ in length")
    return _Columns(packed, _unpack_ints(packed.turn_gaps), tokens, real)


def compare_snapshot(payload: bytes, state: SessionState, chain: bytes) -> list[str]:
    """The fields of the snapshot ``payload`` that differ from ``state`` and its ``chain``.

    Every field is compared: profile, providers, route, legacy flag, chain, and the window
    (leading, retained, base, items, cursors, breadcrumbs; the region's summary for formats 3
    and 4). Undigested (format 1) snapshots are compared too. Raises `CorruptRecord` when the
    payload cannot be decoded.
    """
    assert state.session_id is not None
    try:
        unwrapped = _unwrap(payload, trust_undigested=True)
    except Exception as error:
        raise CorruptRecord(
            f"session {state.session_id}: snapshot at version {state.version} cannot be "
            f"decoded: {describe_error(error)}",
            session_id=str(state.session_id),
            version=state.version,
        ) from error
    stored = unwrapped.compact() if isinstance(unwrapped, _Columns) else unwrapped
    replayed: _Snapshot | _Compact = (
        _compact_of(state, chain) if isinstance(stored, _Compact) else _snapshot_of(state, chain)
    )
    return [
        field.name
        for field in attrs.fields(type(stored))
        if field.name != "format" and getattr(stored, field.name) != getattr(replayed, field.name)
    ]


def decode_snapshot(
    payload: bytes, *, session_id: UUID, version: int, trust_undigested: bool = False
) -> tuple[SessionState, bytes]:
    """Rebuild (state, chain head) from snapshot bytes.

    Raises `SnapshotMismatch` (a `CorruptRecord`) when the bytes are unreadable, fail their
    digest, belong to another session or version, or (unless ``trust_undigested``) are of the
    undigested format 1. The chain head is checked against the log by the caller.
    """
    try:
        snapshot = _unwrap(payload, trust_undigested)
        if snapshot.session_id != session_id or snapshot.version != version:
            raise ValueError("snapshot belongs to another session or version")
    except Exception as error:
        raise SnapshotMismatch(
            f"session {session_id}: snapshot at version {version} cannot be trusted: "
            f"{describe_error(error)}",
            session_id=str(session_id),
            version=version,
        ) from error
    return _state_of(snapshot), snapshot.chain


def _state_of(snapshot: _Snapshot | _Compact | _Columns) -> SessionState:
    body = snapshot.packed if isinstance(snapshot, _Columns) else snapshot
    lo, region = None, None
    if isinstance(snapshot, _Compact | _Columns):
        assert not isinstance(body, _Snapshot)
        lo = body.lo
        starts = accumulate(snapshot.turn_gaps, initial=lo)
        next(starts)  # lo itself
        region = Region(
            list(starts), list(snapshot.segment_tokens), list(snapshot.segment_real),
            list(body.systems), list(body.suspects),
        )
    return SessionState.restored(
        session_id=body.session_id,
        version=body.version,
        profile=body.profile,
        providers=body.providers,
        legacy=body.legacy,
        route=body.route,
        conversation=Window(body.conv_cursor, body.conv_breadcrumb),
        chat=Window(body.chat_cursor, body.chat_breadcrumb),
        leading=body.leading,
        retained=body.retained,
        base=body.base,
        items=body.items,
        lo=lo,
        region=region,
    )
