"""Move a store from the unkeyed sha256 chain to the keyed HMAC-SHA256 chain (ADR-0047).

`rechain` first checks the whole unkeyed chain (it refuses a store whose chain does not
verify: re-chaining would launder an edit), then computes every record's keyed chain value
over the same stored bytes and writes the records back with it, drops the snapshots (they
carry chain values; they are caches) and records the store's ``chain`` setting — in one
transaction on SQLite and PostgreSQL that holds the write lock from its first read to its
commit, so no append of a running writer falls between them (ADR-0098). The events'
payloads are not touched. From then on the store is opened with its audit key, and an edit
by anyone without it is detected.
"""

from __future__ import annotations

import itertools

from eventsourcing.persistence import StoredEvent

from turnledger.domain.errors import AlreadyKeyed, CorruptRecord
from turnledger.store.backend import EventStoreBackend
from turnledger.store.backends.port import SqlStatement, StoreUnavailable, database_errors
from turnledger.store.crypto import UNKEYED_CHAIN, keyed_chain_setting
from turnledger.store.keys import parse_key
from turnledger.store.mapper import (
    ZERO_CHAIN,
    TurnledgerMapper,
    keyed_chain_digest,
    verify_chain,
)

__all__ = ["chained_under", "rechain"]


def chained_under(backend: EventStoreBackend, audit_key: bytes | str) -> bool:
    """Whether ``backend`` keeps the keyed chain of ``audit_key`` (a rechain under it is done)."""
    return backend.protection.chain == keyed_chain_setting(parse_key(audit_key, "audit key"))


def rechain(backend: EventStoreBackend, audit_key: bytes | str) -> int:
    """Re-chain every record of ``backend`` under ``audit_key``; the number of records.

    ``audit_key``: 32 bytes or their text. Reopen the store with the audit key afterwards.
    ONE transaction that no writer can interleave with (ADR-0098): it waits for the appends
    under way, then reads every record, checks and re-chains them, drops the snapshots and
    records the ``chain`` setting; appends wait for it, and afterwards every writer opened
    before it is refused (`StoreChanged`) instead of extending the old chain. A rechain that
    is interrupted leaves the store whole under its old chain. A store already under this
    audit key's chain is left as it is (0: a rechain run again after one that committed,
    ADR-0066). Raises `AlreadyKeyed` (keyed under another audit key), `CorruptRecord` (the
    unkeyed chain does not verify: nothing is written), `StoreUnavailable`.
    """
    audit_key = parse_key(audit_key, "audit key")
    if chained_under(backend, audit_key):
        return 0
    if backend.protection.chain != UNKEYED_CHAIN:
        raise AlreadyKeyed(f"{backend.url} already keeps a keyed chain under another audit key")
    setting = keyed_chain_setting(audit_key)
    keys = backend.protection.keys
    statements: list[SqlStatement] = []
    if keys is not None:
        keys.claim_setting("chain", UNKEYED_CHAIN)  # creates the table the statements write
        statements = keys.setting_statements("chain", setting)

    def rewrite(records: list[StoredEvent], settings: dict[str, str]) -> list[StoredEvent]:
        chain = settings.get("chain", UNKEYED_CHAIN)
        if chain == setting:
            return []  # another rechain under this key committed first
        if chain != UNKEYED_CHAIN:
            raise AlreadyKeyed(f"{backend.url} was re-chained under another audit key "
                               "meanwhile; nothing was re-chained")
        return _rechained(backend.mapper, records, audit_key)

    try:
        # The backend's SQL and its forms of ids and bytes (ADR-0072), under its write lock.
        count = backend.database.rewrite_all(
            backend.recorder, backend.snapshot_recorder, rewrite, statements
        )
    except database_errors() as error:
        raise StoreUnavailable(
            f"cannot re-chain {backend.url}: {backend.database.describe_failure(error)}"
        ) from error
    return count


def _rechained(
    mapper: TurnledgerMapper, records: list[StoredEvent], audit_key: bytes
) -> list[StoredEvent]:
    """``records`` (every session's, each in version order) with their keyed chain values;
    `CorruptRecord` when a session's unkeyed chain does not verify."""
    rewritten: list[StoredEvent] = []
    for session_id, group in itertools.groupby(records, key=lambda r: r.originator_id):
        session = list(group)
        problems = verify_chain(session, mapper, decode_events=False)
        if problems:
            raise CorruptRecord(
                f"the unkeyed chain does not verify ({problems[0]}); nothing was re-chained: "
                "run `turnledger verify` and settle what it finds first",
                session_id=str(session_id), version=problems[0].position,
            )
        chain = ZERO_CHAIN
        for record in session:
            _, body = mapper.open_record(record)
            chain = keyed_chain_digest(
                audit_key, chain, session_id, record.originator_version, record.topic, body
            )
            state = mapper.seal(mapper.transcoder.encode([chain, body]))
            rewritten.append(StoredEvent(
                record.originator_id, record.originator_version, record.topic, state
            ))
    return rewritten
