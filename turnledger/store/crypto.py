"""Encryption at rest with one data key per session, and which chain a store keeps (issue 11).

`SealedMapper` is turnledger's mapper (`turnledger.store.mapper`) with each record's payload
encrypted under its session's data key (ADR-0045): encode -> compress (when configured) ->
encrypt with AES-256-GCM, the associated data binding the ciphertext to its session, version
and topic. The hash chain covers the *stored* bytes, the ciphertext, so `verify` checks the
chain of a session whose key was destroyed (`SessionForgotten`, stored unencrypted: it holds no
content). Snapshots are encrypted under the same data key, so forgetting a session erases them
too.

`protect` decides, when a store is opened, how its records are read and written, from the
keys given and the store's settings (`turnledger.store.keys`): encrypted or not, and its chain
(sha256, or HMAC-SHA256 under the audit key, ADR-0047). A wrong or missing key fails here,
before anything is read, with an error of its own (the CLI's exit 2), never as a corrupt record.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final
from uuid import UUID

import attrs
from eventsourcing.persistence import Compressor

from turnledger.domain.errors import CorruptRecord, SessionForgottenError
from turnledger.domain.events import DomainEvent, SessionForgotten
from turnledger.store.backends.port import Database, Recorders, SqlStatement
from turnledger.store.codec import EventCodec, UndecodableRecord
from turnledger.store.keys import (
    KEY_SIZE,
    AuditKeyRequired,
    KeyRequired,
    KeyTable,
    NotEncrypted,
    UnkeyedChain,
    WrongKey,
    data_cipher,
    key_id,
    unwrap,
    wrap,
)
from turnledger.store.mapper import TurnledgerMapper
from turnledger.store.packing import pack_body, unpack_body

__all__ = ["Keyring", "Protection", "SealedMapper", "protect"]

SNAPSHOT_AAD_TOPIC: Final = "turnledger:snapshot"
UNKEYED_CHAIN: Final = "sha256"
_NONCE: Final = 12


def keyed_chain_setting(audit_key: bytes) -> str:
    """The ``chain`` setting of a store chained under ``audit_key``."""
    return "hmac-sha256:" + key_id(audit_key, "audit")


def _aad(session_id: UUID, version: int, topic: str) -> bytes:
    return session_id.bytes + version.to_bytes(8, "big") + topic.encode()


class Keyring:
    """The data keys of one encrypted store: unwrapped on first use, kept in memory.

    A key destroyed by another process is still known to a process that unwrapped it before
    (until it closes the store); every process that reads it afterwards finds it destroyed.
    """

    def __init__(self, table: KeyTable, master: bytes) -> None:
        self.table = table
        self.master = master
        self.master_id = key_id(master, "master")
        self._ciphers: dict[UUID, Any] = {}
        self._forgotten: dict[UUID, str] = {}
        self._lock = threading.Lock()

    def cipher(self, session_id: UUID, *, create: bool = False) -> Any | None:
        """The session's AES-GCM cipher; a new data key when ``create`` and it has none.

        None when the session has no data key (and ``create`` is false). Raises
        `SessionForgottenError` when it was destroyed, `WrongKey` when it was wrapped by
        another master key (the store was re-keyed since it was opened).
        """
        cipher = self._ciphers.get(session_id)
        if cipher is not None:
            return cipher
        with self._lock:
            self._raise_if_forgotten(session_id)
            row = self.table.get(session_id)
            if row is None:
                if not create:
                    return None
                wrapped = wrap(self.master, session_id, os.urandom(KEY_SIZE))
                row = self.table.add(session_id, self.master_id, wrapped)  # or a racer's
            if row.wrapped is None:
                self._forgotten[session_id] = row.forgotten_at or "an unknown time"
                self._raise_if_forgotten(session_id)
            assert row.wrapped is not None
            data_key_found = unwrap(self.master, session_id, row.wrapped)
            if data_key_found is None or row.key_id != self.master_id:
                raise WrongKey(
                    f"session {session_id}: its data key is wrapped by the key with id "
                    f"{row.key_id}, not by this key (id {self.master_id}): the store was "
                    "re-keyed since it was opened, or the keys table was changed"
                )
            cipher = data_cipher(data_key_found)
            self._ciphers[session_id] = cipher
            return cipher

    def _raise_if_forgotten(self, session_id: UUID) -> None:
        when = self._forgotten.get(session_id)
        if when is not None:
            raise SessionForgottenError(
                f"session {session_id} was forgotten at {when}: its content was erased and "
                "cannot be read (its id, event count, chain and analytics counters remain)",
                session_id=str(session_id),
            )

    def is_forgotten(self, session_id: UUID) -> bool:
        """Whether the session's data key was destroyed (reads the keys table once)."""
        if session_id in self._forgotten:
            return True
        if session_id in self._ciphers:
            return False
        row = self.table.get(session_id)
        if row is not None and row.wrapped is None:
            self._forgotten[session_id] = row.forgotten_at or "an unknown time"
            return True
        return False

    def drop(self, session_id: UUID) -> None:
        """Forget the cached data key of a session read as forgotten (no table access)."""
        self._ciphers.pop(session_id, None)
        self._forgotten.setdefault(session_id, "an earlier time")

    def destruction(self, session_id: UUID) -> list[SqlStatement]:
        """The statements that destroy the session's data key, for the transaction that
        records `SessionForgotten` (`Store.forget`); `destroyed` once it committed."""
        return self.table.destroy_statements(session_id, self.master_id)

    def destroyed(self, session_id: UUID) -> None:
        """Drop the session's data key from memory: its destruction was committed."""
        with self._lock:
            self._ciphers.pop(session_id, None)
            row = self.table.get(session_id)
            self._forgotten[session_id] = (row.forgotten_at if row else None) or "now"

    def erase(self) -> None:
        """Clear the old bytes of destroyed data keys from the files (`KeyTable.erase`)."""
        self.table.erase()

    def rekey(self, new_master: bytes, earlier: Sequence[bytes] = ()) -> int:
        """Re-wrap every data key under ``new_master`` (one transaction); how many.
        ``earlier``: older master keys some data keys may still be wrapped by."""
        with self._lock:
            count = self.table.rewrap(self.master, new_master, earlier)
            self.master, self.master_id = new_master, key_id(new_master, "master")
            return count


class SealedMapper(TurnledgerMapper):
    """The mapper of an encrypted store: each payload encrypted under its session's key.

    A payload is compressed before it is encrypted (`pack_body`, the same rule as a plain
    store's envelope, ADR-0031); the ciphertext's envelope is not compressed.
    """

    compress_envelope = False

    def __init__(
        self,
        keyring: Keyring,
        *,
        compressor: Compressor | None = None,
        codec: EventCodec | None = None,
        audit_key: bytes | None = None,
    ) -> None:
        from cryptography.exceptions import InvalidTag  # the extra is there: a key was given

        super().__init__(codec=codec, audit_key=audit_key)
        self._decrypt_errors: tuple[type[Exception], ...] = (InvalidTag, ValueError)
        self.keyring = keyring
        self.payload_compressor = compressor
        self._plain_topic = self.codec.topic_of(SessionForgotten)

    def conceal(self, event: DomainEvent, topic: str, payload: bytes) -> bytes:
        if topic == self._plain_topic:
            return payload  # holds no content; readable once the data key is gone
        session_id, version = event.originator_id, event.originator_version
        if self.payload_compressor is not None:
            payload = self.payload_compressor.compress(payload)
        cipher = self.keyring.cipher(session_id, create=version == 1)
        if cipher is None:
            raise CorruptRecord(
                f"session {session_id}: no data key in the keys table for version {version}",
                session_id=str(session_id), version=version,
            )
        nonce = os.urandom(_NONCE)
        plain = pack_body(payload)
        sealed: bytes = cipher.encrypt(nonce, plain, _aad(session_id, version, topic))
        return nonce + sealed

    def reveal(self, session_id: UUID, version: int, topic: str, body: bytes) -> bytes:
        if topic == self._plain_topic:
            # Whoever reads that the session was forgotten drops the data key it may still
            # hold, so no process writes under a destroyed key.
            self.keyring.drop(session_id)
            return body
        plain = self._open(session_id, version, topic, body)
        try:
            payload = unpack_body(plain)
        except ValueError as error:
            raise UndecodableRecord(
                session_id, version, topic, f"cannot unpack the decrypted payload: {error}"
            ) from error
        if self.payload_compressor is not None:
            try:
                payload = self.payload_compressor.decompress(payload)
            except Exception as error:
                raise UndecodableRecord(
                    session_id, version, topic, f"cannot decompress: {error}"
                ) from error
        return payload

    def _open(self, session_id: UUID, version: int, topic: str, body: bytes) -> bytes:
        cipher = self.keyring.cipher(session_id)
        if cipher is None:
            raise UndecodableRecord(
                session_id, version, topic, "its session has no data key in the keys table"
            )
        view = memoryview(body)  # no copy of the ciphertext
        try:
            plain: bytes = cipher.decrypt(
                view[:_NONCE], view[_NONCE:], _aad(session_id, version, topic)
            )
        except self._decrypt_errors:
            raise UndecodableRecord(
                session_id, version, topic,
                "it does not decrypt under its session's data key: its bytes, version or "
                "topic were changed",
            ) from None
        return plain

    def is_forgotten(self, session_id: UUID) -> bool:
        return self.keyring.is_forgotten(session_id)

    def seal_snapshot(self, session_id: UUID, version: int, payload: bytes) -> bytes:
        cipher = self.keyring.cipher(session_id)
        if cipher is None:
            raise CorruptRecord(f"session {session_id}: no data key for its snapshot",
                                session_id=str(session_id), version=version)
        nonce = os.urandom(_NONCE)
        sealed: bytes = cipher.encrypt(nonce, payload, _aad(session_id, version,
                                                            SNAPSHOT_AAD_TOPIC))
        return self.mac_snapshot(session_id, version, nonce + sealed)

    def unseal_snapshot(self, session_id: UUID, version: int, data: bytes) -> bytes:
        body = self.check_snapshot_mac(session_id, version, data)
        return self._open(session_id, version, SNAPSHOT_AAD_TOPIC, body)


@attrs.define
class Protection:
    """How a store opened: its keys table, its keyring (encrypted stores) and its chain."""

    keys: KeyTable | None = None
    keyring: Keyring | None = None
    chain: str = UNKEYED_CHAIN
    """The store's ``chain`` setting: ``sha256`` or ``hmac-sha256:<audit key id>``."""
    audit_key: bytes | None = None
    unkeyed_despite_audit_key: bool = False
    """An audit key was given but the store's chain is unkeyed (`verify` reports it)."""

    def close(self) -> None:
        if self.keys is not None:
            self.keys.close()

    def expected_settings(self) -> list[tuple[str, str | None, bool]]:
        """The settings an append of this store must find in its own transaction (the
        `Fence`, ADR-0098): the chain it writes, and no key when it writes in clear. An
        encrypted store's appends need no check of the key: a session's data key stays the
        same across a rekey; a new session's key is checked where it is stored
        (`KeyTable.add`)."""
        # An unkeyed chain may have no row yet: a new store is unkeyed until a first writer
        # opened with an audit key claims it (ADR-0047).
        expected: list[tuple[str, str | None, bool]] = [
            ("chain", self.chain, self.chain == UNKEYED_CHAIN)
        ]
        if self.keyring is None:
            expected.append(("encryption", None, False))
        return expected


def protect(
    database: Database,
    recorders: Recorders,
    codec: EventCodec,
    *,
    key: bytes | None,
    audit_key: bytes | None,
    allow_unkeyed: bool = False,
) -> tuple[Protection, TurnledgerMapper]:
    """The protection and the mapper of a store opened with these keys (see module doc).

    Raises `KeyRequired`, `WrongKey`, `NotEncrypted`, `AuditKeyRequired`, and `UnkeyedChain`
    (an audit key for a store chained without one; not when ``allow_unkeyed``, for `verify`).
    """
    table = KeyTable(database.key_sql, database.url)
    try:
        settings = recorders.settings() if recorders.settings is not None else table.settings()

        def empty() -> bool:  # asked only when a key is given that the settings lack
            return not recorders.events.max_notification_id()

        protection = Protection(keys=table, audit_key=audit_key)
        keyring = _keyring(table, settings, key, empty, database.url)
        protection.keyring = keyring
        protection.chain = _chain(table, settings, audit_key, empty, allow_unkeyed, database.url)
        protection.unkeyed_despite_audit_key = (
            audit_key is not None and protection.chain == UNKEYED_CHAIN
        )
        if ("chain" not in settings and database.settings_table_required
                and not getattr(database, "read_only", False)):
            # Every append checks the settings table in its own transaction (ADR-0098): it
            # must be there. Recorded once, so later opens find the row and create nothing.
            table.claim_setting("chain", protection.chain)
        chain_key = None if protection.chain == UNKEYED_CHAIN else audit_key
        mapper: TurnledgerMapper
        if keyring is None:
            mapper = TurnledgerMapper(
                compressor=recorders.compressor, cipher=recorders.cipher, codec=codec,
                audit_key=chain_key,
            )
        else:
            mapper = SealedMapper(
                keyring, compressor=recorders.compressor, codec=codec, audit_key=chain_key
            )
    except BaseException:
        table.close()
        raise
    return protection, mapper


def _keyring(
    table: KeyTable,
    settings: dict[str, str],
    key: bytes | None,
    empty: Callable[[], bool],
    where: str,
) -> Keyring | None:
    stored = settings.get("encryption")
    if key is None:
        if stored is not None:
            raise KeyRequired(
                f"{where} is encrypted: give its key (--key-file FILE, the TURNLEDGER_KEY "
                "environment variable, or open_store(url, key=...))"
            )
        return None
    given = key_id(key, "master")
    if stored is None:
        if not empty():
            raise NotEncrypted(
                f"{where} holds unencrypted events: a key cannot encrypt them in place; "
                "open it without a key, or import its sessions into a new encrypted store"
            )
        stored = table.claim_setting("encryption", given)
    if stored != given:
        raise WrongKey(
            f"wrong key for {where}: the store's key has id {stored}, the key given has id "
            f"{given}"
        )
    return Keyring(table, key)


def _chain(
    table: KeyTable,
    settings: dict[str, str],
    audit_key: bytes | None,
    empty: Callable[[], bool],
    allow_unkeyed: bool,
    where: str,
) -> str:
    stored = settings.get("chain", UNKEYED_CHAIN)
    if audit_key is None:
        if stored != UNKEYED_CHAIN:
            raise AuditKeyRequired(
                f"{where} keeps a keyed hash chain: give its audit key (the "
                "TURNLEDGER_AUDIT_KEY environment variable, --audit-key-file FILE, or "
                "open_store(url, audit_key=...))"
            )
        return stored
    wanted = keyed_chain_setting(audit_key)
    if "chain" not in settings and empty():
        stored = table.claim_setting("chain", wanted)
    elif stored == UNKEYED_CHAIN and not allow_unkeyed and empty():
        # An empty store holds no chain yet: the first open with an audit key keys it (a
        # writer opened without one is then refused at its first append, ADR-0098).
        table.replace_setting("chain", wanted)
        stored = wanted
    if stored == UNKEYED_CHAIN:
        if allow_unkeyed:
            return stored
        raise UnkeyedChain(
            f"{where} keeps an unkeyed hash chain but an audit key was given: run "
            "`turnledger rechain --yes` to move it to a keyed chain (ADR-0047), or unset "
            "TURNLEDGER_AUDIT_KEY"
        )
    if stored != wanted:
        raise WrongKey(
            f"wrong audit key for {where}: the store's chain is {stored}, the audit key "
            f"given is {wanted}"
        )
    return stored
