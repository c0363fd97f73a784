"""Move a store from the unkeyed sha256 chain to the keyed HMAC-SHA256 chain (ADR-0047).

`rechain` first checks the whole unkeyed chain (it refuses a store whose chain does not
verify: re-chaining would launder an edit), then computes every record's keyed chain value
over the same stored bytes and writes the records back with it, drops the snapshots (they
carry chain values; they are caches) and records the store's ``chain`` setting — in one
transaction on SQLite and PostgreSQL. The events' payloads are not touched. From then on the
store is opened with its audit key, and an edit by anyone without it is detected.
"""

from __future__ import annotations

from eventsourcing.persistence import StoredEvent

from turnledger.domain.errors import AlreadyKeyed, CorruptRecord
from turnledger.store.backend import EventStoreBackend
from turnledger.store.backends.port import SqlStatement, StoreUnavailable, database_errors
from turnledger.store.crypto import UNKEYED_CHAIN, keyed_chain_setting
from turnledger.store.keys import parse_key
from turnledger.store.mapper import ZERO_CHAIN, keyed_chain_digest, verify_chain

__all__ = ["chained_under", "rechain"]


def chained_under(backend: EventStoreBackend, audit_key: bytes | str) -> bool:
    """Whether ``backend`` keeps the keyed chain of ``audit_key`` (a rechain under it is done)."""
    return backend.protection.chain == keyed_chain_setting(parse_key(audit_key, "audit key"))


def rechain(backend: EventStoreBackend, audit_key: bytes | str) -> int:
    """Re-chain every record of ``backend`` under ``audit_key``; the number of records.

    ``audit_key``: 32 bytes or their text. Reopen the store with the audit key afterwards.
    One transaction on SQLite and PostgreSQL: a rechain that is interrupted leaves the store
    whole under its old chain. A store already under this audit key's chain is left as it is
    (0: a rechain run again after one that committed, ADR-0066). Raises `AlreadyKeyed` (keyed
    under another audit key), `CorruptRecord` (the unkeyed chain does not verify: nothing is
    written), `StoreUnavailable`.
    """
    audit_key = parse_key(audit_key, "audit key")
    if chained_under(backend, audit_key):
        return 0
    if backend.protection.chain != UNKEYED_CHAIN:
        raise AlreadyKeyed(f"{backend.url} already keeps a keyed chain under another audit key")
    rewritten = _rechained(backend, audit_key)
    setting = keyed_chain_setting(audit_key)
    keys = backend.protection.keys
    statements: list[SqlStatement] = []
    if keys is not None:
        keys.claim_setting("chain", UNKEYED_CHAIN)  # creates the table the statements write
        statements = keys.setting_statements("chain", setting)
    try:
        # The backend's SQL and its forms of ids and bytes (ADR-0072).
        backend.database.rewrite_states(
            backend.recorder, backend.snapshot_recorder, rewritten, statements
        )
    except database_errors() as error:
        raise StoreUnavailable(f"cannot re-chain {backend.url}: {error}") from error
    if keys is not None:
        keys.replace_setting("chain", setting)
    return len(rewritten)


def _rechained(backend: EventStoreBackend, audit_key: bytes) -> list[StoredEvent]:
    mapper = backend.mapper
    rewritten: list[StoredEvent] = []
    for session_id in backend.session_ids():
        records = backend.read_records(session_id)
        problems = verify_chain(records, mapper, decode_events=False)
        if problems:
            raise CorruptRecord(
                f"the unkeyed chain does not verify ({problems[0]}); nothing was re-chained: "
                "run `turnledger verify` and settle what it finds first",
                session_id=str(session_id), version=problems[0].position,
            )
        chain = ZERO_CHAIN
        for record in records:
            _, body = mapper.open_record(record)
            chain = keyed_chain_digest(
                audit_key, chain, session_id, record.originator_version, record.topic, body
            )
            state = mapper.seal(mapper.transcoder.encode([chain, body]))
            rewritten.append(StoredEvent(
                record.originator_id, record.originator_version, record.topic, state
            ))
    return rewritten
