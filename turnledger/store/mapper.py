"""Stored records: turnledger's eventsourcing `Mapper` and the hash chain (E2, E10, E11).

A record's ``state`` column holds ``msgpack([chain, payload])`` (a large payload may be zlib'd
inside it: `turnledger.store.packing`, ADR-0031), compressed and then encrypted
when the store is configured with a compressor or a cipher (decrypt, then decompress, on the
way back — the library's order). ``payload`` is the codec's encoding of the event
(`turnledger.store.codec`); ``chain`` links the record to its predecessor (ADR-0004)::

    chain(v) = sha256(chain(v-1) || originator_id.bytes || v.to_bytes(8, "big")
                      || topic.encode() || payload)            with chain(0) = 32 zero bytes

`verify_chain` recomputes it over a session's raw records and reports edited, missing,
reordered and undecodable records. Without a secret the chain is tamper *evidence*, not a
signature: whoever rewrites a record and every later one can forge it, and deleting the newest
records is only visible against an external anchor (``expected_version``, e.g. a snapshot's).

Issue 11 adds hooks, used by `turnledger.store.crypto`: the chained bytes are what `conceal`
returns (the payload here; its ciphertext in an encrypted store, ADR-0045) and `reveal` gives
the payload back; with an audit key the chain is `keyed_chain_digest`, an HMAC (ADR-0047).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import hmac
import itertools
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, TypeAlias
from uuid import UUID

import attrs
import msgpack
from eventsourcing.persistence import Cipher, Compressor, Mapper, StoredEvent, Transcoder

from turnledger.domain.errors import bounded
from turnledger.domain.events import DomainEvent
from turnledger.domain.findings import Finding, ProblemKind
from turnledger.store.codec import (
    EventCodec,
    UndecodableRecord,
    default_codec,
    describe_error,
)
from turnledger.store.packing import envelope_of, open_envelope

__all__ = [
    "ZERO_CHAIN",
    "Row",
    "TurnledgerMapper",
    "UndecodableRecord",
    "chain_digest",
    "keyed_chain_digest",
    "paused_gc",
    "verify_chain",
]

CHAIN_SIZE: Final = 32
ZERO_CHAIN: Final = bytes(CHAIN_SIZE)
"""The chain value before version 1 of every session."""

# Classifying a mismatch as a move costs one hash per (mismatch, known record); beyond this
# many mismatches the session is plainly rewritten and each one is reported as edited.
_MAX_REORDER_CANDIDATES: Final = 32

Row: TypeAlias = tuple[int, str, bytes]
"""One record of a session as a bulk read selects it: ``(version, topic, state)``."""


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection while a bulk read decodes (ADR-0053).

    Decoding allocates many objects that all stay alive (the events), so every collection
    the allocations trigger finds nothing to free and only re-walks what was built. Reference
    counting still frees everything else at once; the collector runs again afterwards. A
    no-op when the collector is already off (nested reads, or the caller turned it off).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def chain_digest(
    prev_chain: bytes, originator_id: UUID, version: int, topic: str, payload: bytes
) -> bytes:
    """The chain value of one record (ADR-0004): SHA-256 over its predecessor and its content."""
    # One call over the joined bytes: the same digest as four updates, for less per record.
    content = (prev_chain, originator_id.bytes, version.to_bytes(8, "big"), topic.encode(), payload)
    return hashlib.sha256(b"".join(content)).digest()


def keyed_chain_digest(
    audit_key: bytes,
    prev_chain: bytes,
    originator_id: UUID,
    version: int,
    topic: str,
    payload: bytes,
) -> bytes:
    """The keyed chain value of one record (ADR-0047): HMAC-SHA256 under the audit key over
    the same bytes `chain_digest` hashes, so nobody without the key can recompute it."""
    message = b"".join(
        (prev_chain, originator_id.bytes, version.to_bytes(8, "big"), topic.encode(), payload)
    )
    return hmac.digest(audit_key, message, "sha256")


class EnvelopeTranscoder(Transcoder):
    """msgpack for the ``[chain, payload]`` envelope (the library's Mapper wants a transcoder)."""

    def encode(self, obj: Any) -> bytes:
        packed: bytes = msgpack.packb(obj)
        return packed

    def decode(self, data: bytes) -> Any:
        return msgpack.unpackb(data)


class TurnledgerMapper(Mapper[UUID]):
    """Maps turnledger events to the library's `StoredEvent` and back, with the hash chain.

    Keeps the library's compressor -> cipher order and its ``class_version`` / upcast loop
    (done by the codec, which also runs the attrs validators the default Mapper skips).
    ``to_stored_event`` (one event, no predecessor) is refused: use `to_stored_events`.
    """

    compress_envelope: bool = True
    """Whether a record's payload may be zlib'd in its envelope (not when it is a ciphertext)."""

    def __init__(
        self,
        transcoder: Transcoder | None = None,
        compressor: Compressor | None = None,
        cipher: Cipher | None = None,
        *,
        codec: EventCodec | None = None,
        audit_key: bytes | None = None,
    ) -> None:
        super().__init__(
            transcoder=transcoder if transcoder is not None else EnvelopeTranscoder(),
            compressor=compressor,
            cipher=cipher,
        )
        self.codec = codec if codec is not None else default_codec()
        self.audit_key = audit_key
        """With an audit key the chain is `keyed_chain_digest` (ADR-0047), else `chain_digest`."""

    # --- hooks of the per-session encryption (turnledger.store.crypto, ADR-0045) ---------------

    def chain_of(
        self, prev_chain: bytes, originator_id: UUID, version: int, topic: str, body: bytes
    ) -> bytes:
        """The chain value of a record whose chained bytes are ``body``."""
        if self.audit_key is None:
            return chain_digest(prev_chain, originator_id, version, topic, body)
        return keyed_chain_digest(self.audit_key, prev_chain, originator_id, version, topic, body)

    def check_link(
        self,
        prev_chain: bytes,
        session_id: UUID,
        version: int,
        topic: str,
        body: bytes,
        chain: bytes,
    ) -> ProblemKind | None:
        """THE chain check of one record, for every read, restore and audit (ADR-0063).

        None when ``chain`` (the stored chain value) is `chain_of` the record after
        ``prev_chain``. Otherwise what is wrong: `ProblemKind.UNKEYED` when the store is keyed
        but ``chain`` is the unkeyed sha256 value (written by someone or something without the
        audit key: a forgery, or a writer that opened the store before it was keyed), else
        `ProblemKind.EDITED`. `LINK_DETAIL` says each in words.
        """
        if chain == self.chain_of(prev_chain, session_id, version, topic, body):
            return None
        if self.audit_key is not None and chain == chain_digest(
            prev_chain, session_id, version, topic, body
        ):
            return ProblemKind.UNKEYED
        return ProblemKind.EDITED

    def conceal(self, event: DomainEvent, topic: str, payload: bytes) -> bytes:
        """The bytes stored (and chained) for an event's payload: the payload itself here."""
        return payload

    def reveal(self, session_id: UUID, version: int, topic: str, body: bytes) -> bytes:
        """The payload of a record's chained bytes (the inverse of `conceal`)."""
        return body

    def is_forgotten(self, session_id: UUID) -> bool:
        """Whether the session's content was erased (never, without per-session keys)."""
        return False

    def seal_snapshot(self, session_id: UUID, version: int, payload: bytes) -> bytes:
        """The stored bytes of a snapshot (sealed like the store's records, MAC'd under the
        audit key when there is one)."""
        return self.mac_snapshot(session_id, version, self.seal(payload))

    def unseal_snapshot(self, session_id: UUID, version: int, data: bytes) -> bytes:
        """The inverse of `seal_snapshot`; ``ValueError`` when its MAC does not match."""
        return self.unseal(self.check_snapshot_mac(session_id, version, data))

    def mac_snapshot(self, session_id: UUID, version: int, data: bytes) -> bytes:
        """``data`` followed by its HMAC under the audit key (``data`` alone without one): a
        snapshot's own SHA-256 digest (ADR-0023) can be recomputed by whoever rewrites it."""
        if self.audit_key is None:
            return data
        return data + self._snapshot_tag(session_id, version, data)

    def check_snapshot_mac(self, session_id: UUID, version: int, data: bytes) -> bytes:
        """The inverse of `mac_snapshot`; ``ValueError`` when the MAC does not match."""
        if self.audit_key is None:
            return data
        body, tag = data[:-CHAIN_SIZE], data[-CHAIN_SIZE:]
        if not hmac.compare_digest(tag, self._snapshot_tag(session_id, version, body)):
            raise ValueError("its MAC under the audit key does not match (rewritten without "
                             "the key, or written by another store)")
        return body

    def _snapshot_tag(self, session_id: UUID, version: int, data: bytes) -> bytes:
        assert self.audit_key is not None
        message = b"turnledger:snapshot" + session_id.bytes + version.to_bytes(8, "big") + data
        return hmac.digest(self.audit_key, message, "sha256")

    # --- bytes at rest ------------------------------------------------------------------------

    def seal(self, data: bytes) -> bytes:
        """Compress, then encrypt (when configured): the bytes to store."""
        if self.compressor:
            data = self.compressor.compress(data)
        if self.cipher:
            data = self.cipher.encrypt(data)
        return data

    def unseal(self, data: bytes) -> bytes:
        """Decrypt, then decompress (when configured): the inverse of `seal`."""
        if self.cipher:
            data = self.cipher.decrypt(data)
        if self.compressor:
            data = self.compressor.decompress(data)
        return data

    # --- events -> records --------------------------------------------------------------------

    def to_stored_events(
        self, events: Sequence[DomainEvent], prev_chain: bytes
    ) -> tuple[list[StoredEvent], bytes]:
        """Records of ``events`` chained from ``prev_chain``, and the chain of the last one.

        ``prev_chain`` is the chain of the record before the first event (`ZERO_CHAIN` before
        version 1). Raises ``ValueError`` for a chain that is not 32 bytes, ``TypeError`` for an
        unregistered event class, ``ValueError`` for a naive datetime.
        """
        if not isinstance(prev_chain, bytes) or len(prev_chain) != CHAIN_SIZE:
            raise ValueError(f"prev_chain must be {CHAIN_SIZE} bytes")
        chain = prev_chain
        stored: list[StoredEvent] = []
        # Per batch, not per event: one packer for the payloads (`encode_events`), one for the
        # envelopes when the transcoder is ours; the bytes are those of one by one.
        encoded = self.codec.encode_events(events)
        transcode = (
            msgpack.Packer().pack if type(self.transcoder) is EnvelopeTranscoder
            else self.transcoder.encode
        )
        compress = self.compress_envelope
        for event, (topic, payload) in zip(events, encoded, strict=True):
            body = self.conceal(event, topic, payload)
            chain = self.chain_of(chain, event.originator_id, event.originator_version, topic, body)
            state = self.seal(transcode(envelope_of(chain, body, compress=compress)))
            stored.append(
                StoredEvent(
                    originator_id=event.originator_id,
                    originator_version=event.originator_version,
                    topic=topic,
                    state=state,
                )
            )
        return stored, chain

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        """Refused: a record's chain needs its predecessor's; use `to_stored_events`."""
        raise TypeError(
            "TurnledgerMapper.to_stored_event cannot chain a lone event; "
            "use to_stored_events(events, prev_chain)"
        )

    # --- records -> events --------------------------------------------------------------------

    def open_record(self, stored: StoredEvent) -> tuple[bytes, bytes]:
        """(chain, payload) of a record, without decoding the event.

        Raises `UndecodableRecord` (a `CorruptRecord`) naming the session and the version.
        """
        return self.open_row(
            stored.originator_id, stored.originator_version, stored.topic, stored.state
        )

    def open_row(
        self, session_id: UUID | str, version: int, topic: str, state: bytes
    ) -> tuple[bytes, bytes]:
        """`open_record` of a record given by its columns (`Row`, for bulk reads)."""
        # A damaged column type: SQLite hands back what the record's header says it holds.
        if not isinstance(topic, str):
            raise UndecodableRecord(
                session_id, version, str(topic),
                f"its topic is stored as {type(topic).__name__}, not text")
        try:
            chain, payload = open_envelope(self.transcoder.decode(self.unseal(state)))
            if not isinstance(chain, bytes) or len(chain) != CHAIN_SIZE:
                raise ValueError(f"the chain is not {CHAIN_SIZE} bytes")
            if not isinstance(payload, bytes):
                raise ValueError("the payload is not bytes")
        except Exception as error:  # cipher, compressor and msgpack errors alike (E11)
            raise UndecodableRecord(session_id, version, topic, describe_error(error)) from error
        return chain, payload

    def decode_record(self, stored: StoredEvent) -> tuple[DomainEvent, bytes]:
        """(event, chain) of a record; raises `UndecodableRecord` naming session and version."""
        chain, body = self.open_record(stored)
        session_id, version = _as_uuid(stored), stored.originator_version
        payload = self.reveal(session_id, version, stored.topic, body)
        event = self.codec.decode_event(stored.topic, payload, session_id, version)
        return event, chain

    def decode_chained(
        self, records: Iterable[StoredEvent], first_version: int, prev_chain: bytes
    ) -> list[tuple[DomainEvent, bytes]]:
        """(event, chain) of records that must continue a chain, checking as it decodes.

        The records must carry versions ``first_version``, ``first_version + 1``, … without a
        gap, and each one's stored chain must be `chain_digest` of ``prev_chain`` (then of its
        predecessor's) and its own content (ADR-0004, ADR-0024). Raises `CorruptRecord` naming
        the session and the version of the first record that is missing, edited or undecodable.
        """
        decoded: list[tuple[DomainEvent, bytes]] = []
        expected = first_version
        # One session per run of records: its id is converted once, not per record.
        for _, run in itertools.groupby(records, key=lambda r: r.originator_id):
            same = list(run)
            rows = [(r.originator_version, r.topic, r.state) for r in same]
            decoded.extend(self.decode_rows(_as_uuid(same[0]), rows, expected, prev_chain))
            prev_chain, expected = decoded[-1][1], expected + len(rows)
        return decoded

    def decode_rows(
        self, session_id: UUID, rows: Iterable[Row], first_version: int, prev_chain: bytes
    ) -> list[tuple[DomainEvent, bytes]]:
        """`decode_chained` of one session's records given as ``(version, topic, state)``
        rows: the bulk read path (ADR-0053), with the same checks and errors."""
        decoded: list[tuple[DomainEvent, bytes]] = []
        expected = first_version
        decode, open_row, reveal = self.codec.decode_event, self.open_row, self.reveal
        check_link = self.check_link
        with paused_gc():
            for version, topic, state in rows:
                if version != expected:
                    raise UndecodableRecord(
                        session_id, expected, topic, _out_of_sequence(expected, version)
                    )
                chain, body = open_row(session_id, version, topic, state)
                # Decode first: an undecodable record is named by its own cause (unknown
                # topic, invalid field) rather than by the chain it also breaks.
                event = decode(topic, reveal(session_id, version, topic, body), session_id,
                               version)
                fault = check_link(prev_chain, session_id, version, topic, body, chain)
                if fault is not None:
                    raise UndecodableRecord(
                        session_id, version, topic,
                        f"{LINK_DETAIL[fault]}; `turnledger verify` tells more",
                    )
                decoded.append((event, chain))
                prev_chain, expected = chain, expected + 1
        return decoded

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEvent:
        """The event of a record (the library's Mapper API); see `decode_record`."""
        return self.decode_record(stored_event)[0]

    # --- audit --------------------------------------------------------------------------------

    def verify_chain(
        self,
        stored_records: Iterable[StoredEvent],
        *,
        expected_version: int | None = None,
        decode_events: bool = True,
    ) -> list[Finding]:
        """Recompute the chain over raw records; see the module function `verify_chain`."""
        by_session: dict[UUID | str, list[StoredEvent]] = defaultdict(list)
        for record in stored_records:
            by_session[record.originator_id].append(record)
        problems: list[Finding] = []
        for records in by_session.values():
            problems.extend(self.audit_session(
                records, expected_version=expected_version, decode_events=decode_events
            )[0])
        return problems

    def audit_session(
        self,
        records: Iterable[StoredEvent],
        *,
        expected_version: int | None = None,
        decode_events: bool = True,
    ) -> tuple[list[Finding], dict[int, tuple[DomainEvent, bytes]]]:
        """`verify_chain` of ONE session's records, with what it decoded on the way:
        ``(problems, decoded)``, ``decoded`` mapping ``id(record)`` to (event, stored chain)
        for each record that opened, chained and decoded, so an audit that folds the events
        next decodes each record once."""
        ordered = sorted(records, key=lambda r: r.originator_version)
        if not ordered:
            return [], {}
        audit = _SessionAudit(self, ordered[0].originator_id, decode_events)
        with paused_gc():
            problems = audit.run(ordered, expected_version)
        return problems, audit.decoded


def _as_uuid(stored: StoredEvent) -> UUID:
    originator_id = stored.originator_id
    if isinstance(originator_id, UUID):
        return originator_id
    try:
        return UUID(originator_id)
    except ValueError:
        raise UndecodableRecord(
            originator_id, stored.originator_version, stored.topic, "originator_id is not a UUID"
        ) from None


def _out_of_sequence(expected: int, version: int) -> str:
    if version < 1:
        return (f"a record carries the invalid version {version} (versions start at 1): its "
                "version column is damaged")
    what = "repeated" if version < expected else "missing"
    return f"version {expected} is {what} (the next record is version {version})"


LINK_DETAIL: Final = {
    ProblemKind.EDITED: (
        "its hash chain does not match its bytes or its predecessor's (edited, moved or "
        "re-chained)"
    ),
    ProblemKind.UNKEYED: (
        "chained with the unkeyed sha256 chain in a store keyed under an audit key: written "
        "or re-chained without the audit key (a forgery, or a writer that opened the store "
        "before it was keyed)"
    ),
}
"""What `TurnledgerMapper.check_link` found, in words: the same text for reads and audits."""


@attrs.define
class _Mismatch:
    record: StoredEvent
    chain: bytes
    payload: bytes


class _SessionAudit:
    """Recomputes one session's chain, then explains each mismatch (edited or moved)."""

    def __init__(self, mapper: TurnledgerMapper, session_id: UUID | str, decode: bool) -> None:
        self.mapper = mapper
        self.session_id = session_id
        self.decode = decode
        self.problems: list[Finding] = []
        self.uuid: UUID | None = None  # the session's, converted once per run
        self.decoded: dict[int, tuple[DomainEvent, bytes]] = {}
        """(event, stored chain) of each record that decoded, by ``id(record)``."""
        self.unkeyed_runs: list[tuple[int, int]] = []
        """(first, last) version of each run of records chained without the audit key."""

    def report(self, version: int, kind: ProblemKind, detail: str) -> None:
        self.problems.append(Finding.of_record(self.session_id, version, kind, detail))

    def run(
        self, records: Sequence[StoredEvent], expected_version: int | None
    ) -> list[Finding]:
        # Each record is checked against the *stored* chain of its predecessor, so one edited
        # record yields one finding instead of breaking every later one.
        known: dict[bytes, int] = {ZERO_CHAIN: 0}  # chain -> version it was written as
        self.uuid = _as_uuid(records[0]) if records else None
        mismatches: list[_Mismatch] = []
        prev_version = 0
        prev_chain: bytes | None = ZERO_CHAIN  # None: unknown (after a gap or bad record)
        for record in records:
            stored: object = record.originator_version  # as the database hands it back
            if not isinstance(stored, int):  # a damaged column type (a float, a text)
                self.report(prev_version + 1, ProblemKind.UNDECODABLE,
                            f"a record after version {prev_version} has its version stored "
                            f"as {type(stored).__name__} {bounded(repr(stored), 40)}, "
                            "not an integer")
                prev_chain = None
                continue
            version = stored
            if version < 1:  # a damaged version column; no chain can be computed for it
                self.report(version, ProblemKind.UNDECODABLE, _out_of_sequence(1, version))
                continue
            if version == prev_version:
                self.report(version, ProblemKind.REORDERED, "two records claim this version")
                continue
            if version > prev_version + 1:
                self.report_missing(prev_version + 1, version - 1, "")
                prev_chain = None
            prev_version = version
            prev_chain = self.check_record(record, prev_chain, known, mismatches)
        if expected_version is not None and expected_version > prev_version:
            self.report_missing(
                prev_version + 1,
                expected_version,
                f" (the session ends at version {prev_version}, its anchor says "
                f"{expected_version})",
            )
        self.report_unkeyed()
        self.explain(mismatches, known)
        self.problems.sort(key=lambda p: p.position)
        return self.problems

    def check_record(
        self,
        record: StoredEvent,
        prev_chain: bytes | None,
        known: dict[bytes, int],
        mismatches: list[_Mismatch],
    ) -> bytes | None:
        """Check one record against its predecessor's stored chain (`check_link`, the check
        every read makes); the chain the next record continues, None when it is unknown."""
        version = record.originator_version
        try:
            chain, payload = self.mapper.open_record(record)
        except UndecodableRecord as error:
            self.report(version, ProblemKind.UNDECODABLE, error.cause)
            return None
        fault = None if prev_chain is None else self.mapper.check_link(
            prev_chain, self.uuid or _as_uuid(record), version, record.topic, payload, chain
        )
        if fault is ProblemKind.EDITED:
            mismatches.append(_Mismatch(record, chain, payload))
            return chain
        if fault is ProblemKind.UNKEYED:
            self.unkeyed(version)
        else:
            known[chain] = version
        if self.decode:
            self.check_decodes(record, chain, payload)
        return chain

    def unkeyed(self, version: int) -> None:
        """Note an unkeyed record; consecutive ones are one finding (`report_unkeyed`)."""
        runs = self.unkeyed_runs
        if runs and runs[-1][1] == version - 1:
            runs[-1] = (runs[-1][0], version)
        else:
            runs.append((version, version))

    def report_unkeyed(self) -> None:
        for first, last in self.unkeyed_runs:
            what = f"version {first}" if first == last else f"versions {first} to {last}"
            detail = LINK_DETAIL[ProblemKind.UNKEYED]
            self.report(first, ProblemKind.UNKEYED, f"{what}: {detail}")

    def report_missing(self, first: int, last: int, why: str) -> None:
        what = f"version {first} is" if first == last else f"versions {first} to {last} are"
        self.report(first, ProblemKind.MISSING, f"{what} missing{why}")

    def check_decodes(self, record: StoredEvent, chain: bytes, payload: bytes) -> None:
        """Decode the record; keep the event (`decoded`) or report why it does not decode."""
        session_id = self.uuid or _as_uuid(record)
        version = record.originator_version
        try:
            event = self.mapper.codec.decode_event(
                record.topic,
                self.mapper.reveal(session_id, version, record.topic, payload),
                session_id,
                version,
            )
        except UndecodableRecord as error:
            self.report(version, ProblemKind.UNDECODABLE, error.cause)
        else:
            self.decoded[id(record)] = (event, chain)

    def explain(self, mismatches: list[_Mismatch], known: dict[bytes, int]) -> None:
        """A mismatch whose chain verifies as another version was moved; otherwise edited."""
        unresolved = list(mismatches) if len(mismatches) <= _MAX_REORDER_CANDIDATES else []
        pending = list(known.items())
        while pending and unresolved:
            newly: list[tuple[bytes, int]] = []
            for prev_chain, prev_version in pending:
                for mismatch in list(unresolved):
                    record = mismatch.record
                    if self.mapper.check_link(
                        prev_chain, _as_uuid(record), prev_version + 1, record.topic,
                        mismatch.payload, mismatch.chain,
                    ) is not None:
                        continue
                    unresolved.remove(mismatch)
                    written_as = prev_version + 1
                    newly.append((mismatch.chain, written_as))
                    if written_as != record.originator_version:
                        self.report(
                            record.originator_version,
                            ProblemKind.REORDERED,
                            f"holds the record written as version {written_as}",
                        )
                    # else: in place; only its predecessor moved (reported there).
            pending = newly
        resolved = {id(m) for m in mismatches} - {id(m) for m in unresolved}
        for mismatch in mismatches:
            if id(mismatch) not in resolved:
                self.report(
                    mismatch.record.originator_version,
                    ProblemKind.EDITED,
                    "the stored chain does not match the recomputed one: its payload or "
                    "topic was edited, or the record before it was rewritten and re-chained",
                )


def verify_chain(
    stored_records: Iterable[StoredEvent],
    mapper: TurnledgerMapper | None = None,
    *,
    expected_version: int | None = None,
    decode_events: bool = True,
) -> list[Finding]:
    """Recompute the hash chain over raw records; one `Finding` per finding, in order.

    Records are grouped per session and taken in version order. Findings: ``edited`` (the
    recomputed chain differs from the stored one), ``missing`` (a version gap, or fewer versions
    than ``expected_version`` — the external anchor that makes deleting the newest records
    visible), ``reordered`` (the record verifies as another version: it was moved),
    ``undecodable`` (the envelope or, with ``decode_events``, the event cannot be decoded).
    The record right after a gap or an unreadable record cannot be checked (its predecessor's
    chain is unknown); ADR-0004 lists these limits. ``mapper`` defaults to one without
    compressor or cipher.
    """
    mapper = mapper if mapper is not None else TurnledgerMapper()
    return mapper.verify_chain(
        stored_records, expected_version=expected_version, decode_events=decode_events
    )
