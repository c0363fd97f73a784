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
"""

from __future__ import annotations

import hashlib
import zlib
from functools import cache
from itertools import accumulate
from uuid import UUID

import attrs
import cattrs
import msgpack

from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.decider import SessionState
from turnledger.domain.errors import CorruptRecord
from turnledger.domain.events import View
from turnledger.domain.messages import ConversationMessage
from turnledger.domain.window import Region, Window, WindowIndex
from turnledger.store.codec import describe_error, make_converter

__all__ = [
    "SNAPSHOT_FORMAT",
    "SnapshotMismatch",
    "compare_snapshot",
    "decode_snapshot",
    "encode_snapshot",
]

SNAPSHOT_FORMAT = 3
_WINDOW_FORMAT = 2  # ADR-0023: the whole conversation window's items, digested
_UNDIGESTED_FORMAT = 1  # before ADR-0023: the body alone, without a digest


class SnapshotMismatch(CorruptRecord):
    """A snapshot that cannot be trusted (damaged, undigested, not the log's): replay instead."""


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
    """Format 3: the chat window held, the rest of the conversation window summarised."""

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


_LEVEL = 1
"""zlib level of a snapshot body: a snapshot is written on the append path, and level 1
compresses a 130 KB window in 1.5 ms against 4.1 ms at level 6 for 15 % more bytes (ADR-0058)."""


@cache
def _converter() -> cattrs.Converter:
    return make_converter()


def encode_snapshot(
    state: SessionState, chain: bytes, *, snapshot_format: int = SNAPSHOT_FORMAT
) -> bytes:
    """The snapshot bytes of ``state`` whose last record has chain value ``chain``.

    ``snapshot_format=2`` writes the format before ADR-0030 (the whole held window's items),
    for tests and tools that need an old snapshot; ``ValueError`` for any other format.
    """
    if snapshot_format == SNAPSHOT_FORMAT:
        packed = msgpack.packb(_converter().unstructure(_compact_of(state, chain)), datetime=True)
        body = zlib.compress(packed, _LEVEL)
    elif snapshot_format == _WINDOW_FORMAT:
        body = msgpack.packb(_converter().unstructure(_snapshot_of(state, chain)), datetime=True)
    else:
        raise ValueError(f"cannot write snapshot format {snapshot_format}")
    wrapped: bytes = msgpack.packb([snapshot_format, hashlib.sha256(body).digest(), body])
    return wrapped


def _compact_of(state: SessionState, chain: bytes) -> _Compact:
    """The canonical compact form of ``state``, whether it is compact or holds everything."""
    assert state.session_id is not None
    conversation, chat = state.window(View.CONVERSATION), state.chat
    index = _canonical(state.index, conversation.start, chat.start)
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
        turn_gaps=tuple(b - a for a, b in zip([index.lo, *turns], turns, strict=False)),
        segment_tokens=tuple(region.tokens),
        segment_real=tuple(region.real),
        systems=tuple(region.systems),
        suspects=tuple(region.suspects),
        conv_cursor=state.conversation.start,
        chat_cursor=chat.start,
        conv_breadcrumb=state.conversation.breadcrumb,
        chat_breadcrumb=chat.breadcrumb,
    )


def _canonical(
    index: WindowIndex[ConversationMessage], start: int, held: int
) -> WindowIndex[ConversationMessage]:
    """A copy of ``index`` that forgot the log before ``start`` and summarises it up to
    ``held``: the same form whatever the amortised history of ``index``; O(window)."""
    region = index.region
    copy = WindowIndex(
        index.rows, list(index.leading), list(index.retained), index.base, list(index.items),
        lo=index.lo,
        region=Region(
            list(region.turns), list(region.tokens), list(region.real), list(region.systems),
            list(region.suspects),
        ),
    )
    copy.forget_before(start, force=True)
    copy.compact_before(max(held, copy.base), force=True)
    return copy


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


def _unwrap(payload: bytes, trust_undigested: bool) -> _Snapshot | _Compact:
    """The snapshot in ``payload``; ``ValueError`` (or a msgpack/cattrs error) if untrusted."""
    raw = msgpack.unpackb(payload, timestamp=3)
    if isinstance(raw, list) and len(raw) == 3 and raw[0] in (SNAPSHOT_FORMAT, _WINDOW_FORMAT):
        form, digest, body = raw
        if not isinstance(body, bytes) or hashlib.sha256(body).digest() != digest:
            raise ValueError("its digest does not match its bytes")
        if form == SNAPSHOT_FORMAT:
            unpacked = msgpack.unpackb(zlib.decompress(body), timestamp=3)
            snapshot: _Snapshot | _Compact = _converter().structure(unpacked, _Compact)
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


def compare_snapshot(payload: bytes, state: SessionState, chain: bytes) -> list[str]:
    """The fields of the snapshot ``payload`` that differ from ``state`` and its ``chain``.

    Every field is compared: profile, providers, route, legacy flag, chain, and the window
    (leading, retained, base, items, cursors, breadcrumbs). Undigested (format 1) snapshots are
    compared too. Raises `CorruptRecord` when the payload cannot be decoded.
    """
    assert state.session_id is not None
    try:
        stored = _unwrap(payload, trust_undigested=True)
    except Exception as error:
        raise CorruptRecord(
            f"session {state.session_id}: snapshot at version {state.version} cannot be "
            f"decoded: {describe_error(error)}",
            session_id=str(state.session_id),
            version=state.version,
        ) from error
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


def _state_of(snapshot: _Snapshot | _Compact) -> SessionState:
    lo, region = None, None
    if isinstance(snapshot, _Compact):
        turns = list(accumulate(snapshot.turn_gaps, initial=snapshot.lo))[1:]
        lo = snapshot.lo
        region = Region(
            turns, list(snapshot.segment_tokens), list(snapshot.segment_real),
            list(snapshot.systems), list(snapshot.suspects),
        )
    return SessionState.restored(
        session_id=snapshot.session_id,
        version=snapshot.version,
        profile=snapshot.profile,
        providers=snapshot.providers,
        legacy=snapshot.legacy,
        route=snapshot.route,
        conversation=Window(snapshot.conv_cursor, snapshot.conv_breadcrumb),
        chat=Window(snapshot.chat_cursor, snapshot.chat_breadcrumb),
        leading=snapshot.leading,
        retained=snapshot.retained,
        base=snapshot.base,
        items=snapshot.items,
        lo=lo,
        region=region,
    )
