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
"""

from __future__ import annotations

import hashlib
from functools import cache
from uuid import UUID

import attrs
import cattrs
import msgpack

from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.decider import SessionState
from turnledger.domain.errors import CorruptRecord
from turnledger.domain.messages import ConversationMessage
from turnledger.domain.window import Window
from turnledger.store.codec import describe_error, make_converter

__all__ = [
    "SNAPSHOT_FORMAT",
    "SnapshotMismatch",
    "compare_snapshot",
    "decode_snapshot",
    "encode_snapshot",
]

SNAPSHOT_FORMAT = 2
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


@cache
def _converter() -> cattrs.Converter:
    return make_converter()


def encode_snapshot(state: SessionState, chain: bytes) -> bytes:
    """The snapshot bytes of ``state`` whose last record has chain value ``chain``."""
    snapshot = _snapshot_of(state, chain)
    body: bytes = msgpack.packb(_converter().unstructure(snapshot), datetime=True)
    wrapped: bytes = msgpack.packb([SNAPSHOT_FORMAT, hashlib.sha256(body).digest(), body])
    return wrapped


def _snapshot_of(state: SessionState, chain: bytes) -> _Snapshot:
    assert state.session_id is not None
    return _Snapshot(
        format=SNAPSHOT_FORMAT,
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


def _unwrap(payload: bytes, trust_undigested: bool) -> _Snapshot:
    """The snapshot in ``payload``; ``ValueError`` (or a msgpack/cattrs error) if untrusted."""
    raw = msgpack.unpackb(payload, timestamp=3)
    if isinstance(raw, list) and len(raw) == 3 and raw[0] == SNAPSHOT_FORMAT:
        _, digest, body = raw
        if not isinstance(body, bytes) or hashlib.sha256(body).digest() != digest:
            raise ValueError("its digest does not match its bytes")
        snapshot = _converter().structure(msgpack.unpackb(body, timestamp=3), _Snapshot)
        if snapshot.format != SNAPSHOT_FORMAT:
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
    replayed = _snapshot_of(state, chain)
    return [
        field.name
        for field in attrs.fields(_Snapshot)
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
    state = SessionState.restored(
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
    )
    return state, snapshot.chain
