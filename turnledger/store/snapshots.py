"""Snapshots of a session's compact state, so a restore costs O(window) (ADR-0002, ADR-0030).

A snapshot is a cache. It holds what cannot be derived cheaply: the leading and retained system
messages, the chat window's items, the summary of the rest of the conversation window
(`Region`: turn starts as gaps, per-turn token and message sums, system items, sweep
suspects), the cursors and breadcrumb flags, the profile/providers/route, the version and the
hash-chain head. Estimates, prefix sums and turn starts are recomputed from it on load
(O(window)), so they can never disagree with the items.

One format is written and read (ADR-0074): ``msgpack([4, sha256(z), z])``, ``z`` the zlib'd
msgpack map of `_Snapshot`, the state's one form (ADR-0076), its integer columns packed
(`IntColumn`, ADR-0060). The digest refuses changed bytes before anything in them is believed.

- An intact snapshot of **another format** (its digest holds; format 1, which has none: its
  keys) is a miss, not damage: `decode_snapshot` returns None, the restore replays every
  event, and the next snapshot due replaces it. `verify` notes one of the formats older
  versions wrote (`OLD_FORMATS`) as not compared, and reports any other number (no version
  wrote it: one flipped bit turns 4 into 0, 5, 6, … never into 1-3).
- A format 4 snapshot that fails its digest or any check after it is `SnapshotMismatch` on
  restore (a warning, then the replay) and `CorruptRecord` for `verify`.

The body is structured by one function generated from `_Snapshot`'s fields
(`codec.generated_decoder`, ADR-0052), which decides: what it refuses is refused. A converter
with detailed validation is built to explain a refusal (the path of the field), nothing else.
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
from typing import Any, NewType
from uuid import UUID

import attrs
import cattrs
import msgpack
from cattrs.gen import make_dict_unstructure_fn, override

from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.decider import SessionState
from turnledger.domain.errors import CorruptRecord, SnapshotMismatch
from turnledger.domain.messages import ConversationMessage
from turnledger.domain.state import Summary
from turnledger.domain.window import Region, Window
from turnledger.store.codec import describe_error, generated_decoder, make_converter

__all__ = [
    "OLD_FORMATS",
    "SNAPSHOT_FORMAT",
    "SnapshotMismatch",
    "compare_snapshot",
    "decode_snapshot",
    "encode_snapshot",
    "snapshot_format",
]

SNAPSHOT_FORMAT = 4
"""The one format written and read (ADR-0060, ADR-0074). Its ``summary`` (issue 24,
ADR-0086) is left out while None: a snapshot without it is one of a state without a summary,
which is every state an older version wrote, so the bytes they wrote still read."""
OLD_FORMATS = frozenset({1, 2, 3})
"""The formats older versions wrote (1: undigested; 2: ADR-0023; 3: ADR-0030): misses now."""
_UNDIGESTED_KEYS = frozenset({
    "format", "session_id", "version", "chain", "profile", "providers", "legacy", "route",
    "leading", "retained", "base", "items", "conv_cursor", "chat_cursor", "conv_breadcrumb",
    "chat_breadcrumb",
})
"""The keys of a format 1 snapshot, which has no digest: what tells one from a map that only
says ``format: 1`` (damage, or an edit)."""


IntColumn = NewType("IntColumn", list[int])
"""A column of the region (a number per turn of the conversation window), stored as one type
code byte and a little-endian array (`_pack_ints`): msgpack arrays cost a decode and a type
check per integer (ADR-0060). The converter's hooks for this type pack and unpack it.

A list, not a tuple: a restore hands the columns it decoded to the state's `Region` as they
are, where a tuple would cost a copy of each (20,000 numbers at 10,000 turns with the turn
limit off, 1 % of the restore, ADR-0074)."""


@attrs.frozen
class _Summary:
    """`Summary` as a snapshot holds it (its message is rebuilt from its text)."""

    covers_from: int
    last_position: int
    text: str
    summarizer: str
    tokens: int


@attrs.frozen
class _Snapshot:
    """A snapshot: a state in its one form (`_snapshot_of`, ADR-0076), in the order its
    bytes hold the fields; what a restore rebuilds from and `verify` compares field by field."""

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
    turn_gaps: IntColumn
    """The region's turn starts as gaps from ``lo`` (then from the previous one)."""
    segment_tokens: IntColumn
    segment_real: IntColumn
    systems: tuple[tuple[int, ConversationMessage], ...]
    suspects: tuple[tuple[int, ConversationMessage], ...]
    conv_cursor: int
    chat_cursor: int
    conv_breadcrumb: bool
    chat_breadcrumb: bool
    summary: _Summary | None = None
    """The summary the chat view shows in place of its breadcrumb (issue 24), or None: then
    not in the bytes (`_with_columns`), which are those of a snapshot before issue 24."""
    restorable: tuple[tuple[int, ConversationMessage], ...] = ()
    """What sweeps took from the newest turn that a result may bring back (E5),
    as `SessionState.restorable`; empty: not in the bytes, which are then those of a
    snapshot before it (no sweep recorded before it marked anything restorable)."""
    billed: tuple[tuple[int, int], ...] = ()
    """The newest usages an estimate learns from (issue 35), as `SessionState.billed`; empty:
    not in the bytes, which are then those of a snapshot before it (no usage recorded)."""


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


def _structure_column(value: object, _: object) -> IntColumn:
    if not isinstance(value, bytes):
        raise TypeError(f"expected a packed integer column, got {type(value).__name__}")
    return IntColumn(_unpack_ints(value))


def _with_columns(converter: cattrs.Converter) -> cattrs.Converter:
    converter.register_unstructure_hook(IntColumn, _pack_ints)
    converter.register_structure_hook(IntColumn, _structure_column)
    converter.register_unstructure_hook(_Snapshot, make_dict_unstructure_fn(
        _Snapshot, converter, summary=override(omit_if_default=True),
        restorable=override(omit_if_default=True), billed=override(omit_if_default=True)))
    return converter


@cache
def _converter() -> cattrs.Converter:
    """The converter that encodes snapshots, and whose hooks `_decoder` calls for the types
    it does not check inline."""
    return _with_columns(make_converter())


@cache
def _explainer() -> cattrs.Converter:
    """The converter that explains a body `_decoder` refused, with the path of the field:
    built on the first refusal only (detailed validation costs 3.5 ms more to build, on the
    first restore of every process)."""
    return _with_columns(make_converter(detailed_validation=True))


@cache
def _decoder() -> Callable[[Any], _Snapshot]:
    """The generated function that structures a snapshot's body: the one decoder."""
    return generated_decoder(_Snapshot, _converter())


def encode_snapshot(state: SessionState, chain: bytes) -> bytes:
    """The snapshot bytes of ``state`` whose last record has chain value ``chain``.

    Reads ``state`` only: a state has one form (ADR-0076), and that form is encoded as it is.
    """
    packed = msgpack.packb(_converter().unstructure(_snapshot_of(state, chain)), datetime=True)
    body = zlib.compress(packed, _LEVEL)
    wrapped: bytes = msgpack.packb([SNAPSHOT_FORMAT, hashlib.sha256(body).digest(), body])
    return wrapped


def _snapshot_of(state: SessionState, chain: bytes) -> _Snapshot:
    """``state`` as it is: its one form is the snapshot's (ADR-0076)."""
    assert state.session_id is not None
    chat, index = state.chat, state.index
    region = index.region
    turns = region.turns
    return _Snapshot(
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
        turn_gaps=IntColumn(list(map(sub, turns, [index.lo, *turns]))),
        segment_tokens=IntColumn(list(region.tokens)),
        segment_real=IntColumn(list(region.real)),
        systems=tuple(region.systems),
        suspects=tuple(region.suspects),
        conv_cursor=state.conversation.start,
        chat_cursor=chat.start,
        conv_breadcrumb=state.conversation.breadcrumb,
        chat_breadcrumb=chat.breadcrumb,
        summary=None if (summary := state.summary) is None else _Summary(
            summary.covers_from, summary.last_position, summary.text, summary.summarizer,
            summary.tokens,
        ),
        restorable=state.restorable,
        billed=state.billed,
    )


def snapshot_format(payload: bytes) -> int | None:
    """The format number of the snapshot bytes ``payload``; None when they are no intact
    snapshot of any format (`_format_of`)."""
    try:
        return _format_of(msgpack.unpackb(payload, timestamp=3))
    except Exception:  # damaged bytes: no format
        return None


def _format_of(raw: object) -> int:
    """The format number of the unpacked snapshot ``raw`` when it is intact in its format's
    own terms: ``[format, digest, body]`` whose digest holds (formats 2 on), or format 1's map
    of its keys; ``ValueError`` otherwise. Only an intact snapshot of another format is a
    miss: anything else is damage, which a restore warns of and `verify` reports."""
    if isinstance(raw, list) and len(raw) == 3 and raw[0].__class__ is int:
        form, digest, body = raw
        if not isinstance(body, bytes) or hashlib.sha256(body).digest() != digest:
            raise ValueError("its digest does not match its bytes")
        return int(form)
    if isinstance(raw, dict) and raw.get("format") == 1 and raw.keys() == _UNDIGESTED_KEYS:
        return 1
    raise ValueError("not a snapshot of any format")


def _read(payload: bytes) -> _Snapshot | int:
    """The snapshot in ``payload``, or the number of the other format it is in (a miss);
    raises (``ValueError``, a msgpack, zlib or cattrs error) when its bytes cannot be trusted."""
    raw = msgpack.unpackb(payload, timestamp=3)
    form = _format_of(raw)
    if form != SNAPSHOT_FORMAT:
        return form
    snapshot = _structure(msgpack.unpackb(zlib.decompress(raw[2]), timestamp=3))
    if snapshot.format != SNAPSHOT_FORMAT:
        raise ValueError(f"the body says format {snapshot.format}")
    if len(snapshot.segment_tokens) != len(snapshot.segment_real):
        raise ValueError("the region's token and message columns differ in length")
    return snapshot


def _structure(raw: object) -> _Snapshot:
    """The body ``raw`` as `_decoder` structures it. What it refuses is refused: the error
    raised is the converter's, which names the path of the field, caused by the decoder's,
    whose traceback shows the generated line that refused (ADR-0074)."""
    try:
        return _decoder()(raw)
    except Exception as refusal:
        try:
            _explainer().structure(raw, _Snapshot)
        except Exception as explained:
            raise explained from refusal
        # Stricter than the converter (no encoder writes such a body): its own words.
        raise ValueError(f"a body no encoder writes ({describe_error(refusal)})") from refusal


def compare_snapshot(payload: bytes, state: SessionState, chain: bytes) -> list[str] | None:
    """The fields of the snapshot ``payload`` that differ from ``state`` and its ``chain``;
    None when ``payload`` is in one of the `OLD_FORMATS`: not compared (ADR-0074).

    Every field is compared: profile, providers, route, legacy flag, chain, and the window
    (leading, retained, base, items, cursors, breadcrumbs, the region's summary). Raises
    `CorruptRecord` when the payload cannot be decoded, or says a format no version wrote.
    """
    assert state.session_id is not None
    try:
        stored = _read(payload)
        if isinstance(stored, int) and stored not in OLD_FORMATS:
            raise ValueError(f"format {stored} is none that turnledger writes or wrote")
    except Exception as error:
        raise CorruptRecord(
            f"session {state.session_id}: snapshot at version {state.version} cannot be "
            f"decoded: {describe_error(error)}",
            session_id=str(state.session_id),
            version=state.version,
        ) from error
    if isinstance(stored, int):
        return None
    replayed = _snapshot_of(state, chain)
    return [
        field.name
        for field in attrs.fields(_Snapshot)
        if getattr(stored, field.name) != getattr(replayed, field.name)
    ]


def decode_snapshot(
    payload: bytes, *, session_id: UUID, version: int
) -> tuple[SessionState, bytes] | None:
    """Rebuild (state, chain head) from snapshot bytes; None for a snapshot of another format
    (a miss: replay, ADR-0074).

    Raises `SnapshotMismatch` (a `CorruptRecord`) when the bytes are no snapshot, or a format 4
    one that is unreadable, fails its digest or belongs to another session or version. The
    chain head is checked against the log by the caller.
    """
    try:
        snapshot = _read(payload)
        if isinstance(snapshot, _Snapshot) and (
            snapshot.session_id != session_id or snapshot.version != version
        ):
            raise ValueError("snapshot belongs to another session or version")
    except Exception as error:
        raise SnapshotMismatch(
            f"session {session_id}: snapshot at version {version} cannot be trusted: "
            f"{describe_error(error)}",
            session_id=str(session_id),
            version=version,
        ) from error
    if isinstance(snapshot, int):
        return None
    return _state_of(snapshot), snapshot.chain


def _state_of(snapshot: _Snapshot) -> SessionState:
    """The state of a snapshot just decoded, which it then owns: its columns become the
    region's lists without a copy (`IntColumn`), so nothing else may keep the snapshot."""
    starts = accumulate(snapshot.turn_gaps, initial=snapshot.lo)
    next(starts)  # lo itself
    region = Region(
        list(starts), snapshot.segment_tokens, snapshot.segment_real,
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
        lo=snapshot.lo,
        region=region,
        summary=None if (held := snapshot.summary) is None else Summary(
            held.covers_from, held.last_position, held.text, held.summarizer, held.tokens,
        ),
        restorable=snapshot.restorable,
        billed=snapshot.billed,
    )
