"""Snapshots of a session's *compact* state, so a restore costs O(window) (ADR-0002).

A snapshot holds what cannot be derived cheaply: the leading and retained system messages, the
window of the log from the earliest cursor (with swept positions as gaps), the cursors and
breadcrumb flags, the profile/providers/route, the version and the hash-chain head. Estimates,
prefix sums and turn starts are recomputed from the window on load (O(window)), so they can
never disagree with the items. Snapshots are caches: a missing or unreadable one only costs a
longer replay; an unreadable one is reported as `CorruptRecord`, never silently ignored.
"""

from __future__ import annotations

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

__all__ = ["SNAPSHOT_FORMAT", "decode_snapshot", "encode_snapshot"]

SNAPSHOT_FORMAT = 1


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
    assert state.session_id is not None
    snapshot = _Snapshot(
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
    return msgpack.packb(_converter().unstructure(snapshot), datetime=True)  # type: ignore[no-any-return]


def decode_snapshot(
    payload: bytes, *, session_id: UUID, version: int
) -> tuple[SessionState, bytes]:
    """Rebuild (state, chain head) from snapshot bytes; `CorruptRecord` if they are unreadable."""
    try:
        raw = msgpack.unpackb(payload, timestamp=3)
        snapshot = _converter().structure(raw, _Snapshot)
        if snapshot.format != SNAPSHOT_FORMAT:
            raise ValueError(f"unknown snapshot format {snapshot.format}")
        if snapshot.session_id != session_id or snapshot.version != version:
            raise ValueError("snapshot belongs to another session or version")
    except Exception as error:
        raise CorruptRecord(
            f"session {session_id}: snapshot at version {version} cannot be decoded: "
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
