"""Keys: the master key, the audit key, and the keys table of a store (issue 11, ADR-0046).

A store encrypted at rest has one *master key* (32 bytes, kept by the operator, never stored)
and one random *data key* per session, stored in the ``tl_keys`` table *wrapped* (AES-256-GCM)
by the master key. Forgetting a session destroys its wrapped data key; rotating the master key
(`KeyTable.rewrap`) re-wraps every data key and rewrites no event. The ``tl_settings`` table
records what a store needs to be opened right: the id (not the bytes) of its master key and
which hash chain its records carry (ADR-0047).

Tables (the store's own database: the SQLite file, the PostgreSQL schema; a memory store keeps
them in an in-memory SQLite database of its own):

- ``tl_keys``: ``session_id`` (text, primary key), ``key_id`` (the id of the master key that
  wrapped it), ``wrapped`` (blob: nonce + AES-GCM of the data key; NULL once forgotten),
  ``created_at``, ``forgotten_at`` (ISO-8601 text; NULL until forgotten).
- ``tl_settings``: ``name`` (text, primary key), ``value`` (text): ``encryption`` (the master
  key's id), ``chain`` (``sha256`` or ``hmac-sha256:<audit key id>``).

Key text: 32 bytes as base64 (44 characters) or as 64 hex digits; a key file holds that text
or the 32 raw bytes. `new_key_text` makes one (``turnledger keygen``). A key's *id* is the
first 8 bytes of HMAC-SHA256(key, purpose): it tells a wrong key from a damaged record and
reveals nothing about the key. ``cryptography`` is imported when a key is used, never before.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from uuid import UUID

import attrs

from turnledger.domain.errors import (
    AuditKeyRequired,
    InvalidKey,
    KeyRequired,
    NotEncrypted,
    StoreChanged,
    UnkeyedChain,
    WrongKey,
)
from turnledger.store.backends.port import (
    SqlConnection,
    SqlDialect,
    SqlStatement,
    StoreUnavailable,
    database_errors,
)

__all__ = [
    "KEY_SIZE",
    "AuditKeyRequired",
    "InvalidKey",
    "KeyRequired",
    "KeyTable",
    "NotEncrypted",
    "UnkeyedChain",
    "WrongKey",
    "key_id",
    "new_key_text",
    "parse_key",
    "read_key_file",
]

log = logging.getLogger("turnledger.store")

KEY_SIZE: Final = 32
"""Bytes of every key: AES-256 for the master and data keys, HMAC-SHA256 for the audit key."""

_NONCE: Final = 12
_WRAP_AAD: Final = b"turnledger data key:"


# --- errors (all exit 2 in the CLI: bad usage, never "corrupt store") -----------------------

# --- key material ---------------------------------------------------------------------------

def new_key_text() -> str:
    """A new random key as base64 text (44 characters)."""
    return base64.b64encode(os.urandom(KEY_SIZE)).decode("ascii")


def parse_key(value: bytes | str, what: str = "key") -> bytes:
    """The 32 key bytes of ``value``: raw bytes, base64 text or 64 hex digits.

    Raises `InvalidKey` naming ``what`` (never showing the value).
    """
    if isinstance(value, bytes) and len(value) == KEY_SIZE:
        return value
    try:
        text = value.decode("ascii") if isinstance(value, bytes) else value
    except UnicodeDecodeError:
        text = ""
    if not isinstance(text, str):
        raise InvalidKey(f"the {what} must be bytes or text, got {type(value).__name__}")
    text = text.strip()
    decoded: bytes | None = None
    if len(text) == 2 * KEY_SIZE:
        with contextlib.suppress(ValueError):
            decoded = bytes.fromhex(text)
    if decoded is None:
        with contextlib.suppress(binascii.Error, ValueError):
            decoded = base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    if decoded is None or len(decoded) != KEY_SIZE:
        raise InvalidKey(
            f"the {what} must be {KEY_SIZE} bytes written as base64 (44 characters) or as "
            f"{2 * KEY_SIZE} hex digits; `turnledger keygen` prints a new one"
        )
    return decoded


def read_key_file(path: str | os.PathLike[str], what: str = "key") -> bytes:
    """The key in the file at ``path`` (its text, or 32 raw bytes); `InvalidKey` otherwise."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise InvalidKey(
            f"cannot read the {what} file {path}: {error.strerror or type(error).__name__}"
        ) from None
    try:
        return parse_key(data if len(data) == KEY_SIZE else data.strip(), what)
    except InvalidKey as error:
        raise InvalidKey(f"{path}: {error}") from None


def key_id(key: bytes, purpose: str) -> str:
    """A short public id of ``key`` for ``purpose`` (16 hex digits; reveals nothing of it)."""
    return hmac.digest(key, b"turnledger key id:" + purpose.encode(), "sha256")[:8].hex()


def _aesgcm(key: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as error:
        raise NotEncrypted(
            f"encryption needs the cryptography package: pip install 'turnledger[encryption]' "
            f"({error})"
        ) from None
    return AESGCM(key)


def data_cipher(data_key: bytes) -> Any:
    """The AES-GCM cipher of a data key."""
    return _aesgcm(data_key)


def wrap(master: bytes, session_id: UUID, data_key: bytes) -> bytes:
    """``data_key`` encrypted under ``master``, bound to ``session_id``: nonce + ciphertext."""
    nonce = os.urandom(_NONCE)
    sealed: bytes = _aesgcm(master).encrypt(nonce, data_key, _WRAP_AAD + session_id.bytes)
    return nonce + sealed


def unwrap(master: bytes, session_id: UUID, wrapped: bytes) -> bytes | None:
    """The data key of ``wrapped``; None when it does not open under ``master`` (damaged)."""
    from cryptography.exceptions import InvalidTag

    try:
        data_key: bytes = _aesgcm(master).decrypt(
            wrapped[:_NONCE], wrapped[_NONCE:], _WRAP_AAD + session_id.bytes
        )
    except (InvalidTag, ValueError):
        return None
    return data_key


# --- the keys table -------------------------------------------------------------------------

@attrs.frozen
class KeyRow:
    """One row of ``tl_keys``: a session's wrapped data key (None once forgotten)."""

    session_id: UUID
    key_id: str
    wrapped: bytes | None
    forgotten_at: str | None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class KeyTable:
    """``tl_keys`` and ``tl_settings`` in a store's database, over one connection.

    ``connect`` opens the connection (`Database.key_sql`); it is opened on first use and
    again after a failure. Safe to share between threads. Database failures raise
    `StoreUnavailable`. Reads of a store that has no such tables find nothing.
    """

    def __init__(self, connect: Callable[[], SqlConnection], where: str) -> None:
        self._connect = connect
        self._where = where
        self._sql: SqlConnection | None = None
        self._lock = threading.RLock()
        self._created = False
        self._settings_created = False

    def close(self) -> None:
        with self._lock:
            if self._sql is not None:
                with contextlib.suppress(*database_errors()):
                    self._sql.connection.close()
                self._sql = None

    @contextlib.contextmanager
    def _cursor(self, action: str, *, write: bool = False) -> Iterator[tuple[Any, str]]:
        """(DB-API cursor, placeholder) inside a transaction when ``write``."""
        with self._lock:
            try:
                if self._sql is None:
                    self._sql = self._connect()
                sql = self._sql
                cursor = sql.connection.cursor()
                if write:
                    cursor.execute(sql.dialect.begin)
                try:
                    yield cursor, sql.dialect.placeholder
                except BaseException:
                    if write:
                        with contextlib.suppress(*database_errors()):
                            cursor.execute("ROLLBACK")
                    raise
                if write:
                    cursor.execute("COMMIT")
            except database_errors() as error:
                self.close()
                raise StoreUnavailable(f"cannot {action} in {self._where}: {error}") from error

    def ensure_tables(self, *, keys: bool = True) -> None:
        """Create ``tl_settings`` and (``keys``) ``tl_keys`` where they are missing (once per
        object). A store written in clear only needs the settings (ADR-0098)."""
        if self._created or (not keys and self._settings_created):
            return
        with self._lock:
            blob = self._dialect().blob
            statements = ["CREATE TABLE IF NOT EXISTS tl_settings (name TEXT PRIMARY KEY, "
                          "value TEXT NOT NULL)"]
            if keys:
                statements.append(
                    "CREATE TABLE IF NOT EXISTS tl_keys (session_id TEXT PRIMARY KEY, "
                    f"key_id TEXT NOT NULL, wrapped {blob}, created_at TEXT NOT NULL, "
                    "forgotten_at TEXT)"
                )
            for attempt in range(3):
                try:
                    with self._cursor("create the keys table", write=True) as (cursor, _):
                        for statement in statements:
                            cursor.execute(statement)
                    break
                except StoreUnavailable:  # two processes creating at once (PostgreSQL)
                    if attempt == 2:
                        raise
            self._settings_created = True
            self._created = keys

    def _dialect(self) -> SqlDialect:
        with self._lock:
            if self._sql is None:
                try:
                    self._sql = self._connect()
                except database_errors() as error:
                    raise StoreUnavailable(f"cannot open {self._where}: {error}") from error
            return self._sql.dialect

    # -- settings --

    def settings(self) -> dict[str, str]:
        """Every setting; ``{}`` for a store that has none (no table)."""
        try:
            with self._cursor("read the settings") as (cursor, _):
                cursor.execute("SELECT name, value FROM tl_settings")
                return {str(name): str(value) for name, value in cursor.fetchall()}
        except StoreUnavailable as error:
            if _no_table(error):
                return {}
            raise

    def claim_setting(self, name: str, value: str) -> str:
        """Set ``name`` to ``value`` unless it is set; the value it has afterwards."""
        self.ensure_tables(keys=name != "chain")
        with self._cursor("write a setting", write=True) as (cursor, mark):
            cursor.execute(
                f"INSERT INTO tl_settings (name, value) VALUES ({mark}, {mark}) "
                "ON CONFLICT (name) DO NOTHING",
                (name, value),
            )
            cursor.execute(f"SELECT value FROM tl_settings WHERE name = {mark}", (name,))
            return str(cursor.fetchone()[0])

    def replace_setting(self, name: str, value: str) -> None:
        """Set ``name`` to ``value`` whatever it was."""
        self.ensure_tables(keys=name != "chain")
        with self._cursor("write a setting", write=True) as (cursor, mark):
            for statement, parameters in _setting_statements(mark, name, value):
                cursor.execute(statement, parameters)

    def setting_statements(self, name: str, value: str) -> list[SqlStatement]:
        """The statements of `replace_setting`, to run in another transaction on the keys'
        database (`rechain` records the chain with the records it rewrites)."""
        return _setting_statements(self._dialect().placeholder, name, value)

    # -- data keys --

    def get(self, session_id: UUID) -> KeyRow | None:
        """The session's row, or None."""
        try:
            with self._cursor("read a data key") as (cursor, mark):
                cursor.execute(
                    "SELECT key_id, wrapped, forgotten_at FROM tl_keys "
                    f"WHERE session_id = {mark}",
                    (str(session_id),),
                )
                found = cursor.fetchone()
        except StoreUnavailable as error:
            if _no_table(error):
                return None
            raise
        if found is None:
            return None
        wrapped = None if found[1] is None else bytes(found[1])
        return KeyRow(session_id, str(found[0]), wrapped, found[2])

    def add(self, session_id: UUID, master_id: str, wrapped: bytes) -> KeyRow:
        """Store a session's wrapped data key unless it has one; the row it has afterwards.

        Stored only while the store's key is still ``master_id``, checked in the insert's own
        transaction: a `rewrap` holds the keys table until it commits, so a key wrapped
        under a master key that was just rotated away is never stored (ADR-0098). Raises
        `StoreChanged` then.
        """
        self.ensure_tables()
        with self._cursor("store a data key", write=True) as (cursor, mark):
            cursor.execute(
                "INSERT INTO tl_keys (session_id, key_id, wrapped, created_at) "
                f"SELECT {mark}, {mark}, {mark}, {mark} WHERE EXISTS (SELECT 1 FROM "
                f"tl_settings WHERE name = {mark} AND value = {mark}) "
                "ON CONFLICT (session_id) DO NOTHING",
                (str(session_id), master_id, wrapped, _now(), "encryption", master_id),
            )
        row = self.get(session_id)
        if row is None:
            current = self.settings().get("encryption", "none")
            raise StoreChanged(
                f"the store was re-keyed since this process opened it (its key has id "
                f"{current}, this process holds {master_id}): session {session_id} was not "
                "started, nothing was stored; open the store again with its current key "
                "(ADR-0098)"
            )
        return row

    def destroy_statements(self, session_id: UUID, master_id: str) -> list[SqlStatement]:
        """The statements that destroy the session's data key (the row stays, saying when it
        was forgotten), to run in the transaction that records `SessionForgotten`
        (`EventStoreBackend.append`'s ``keys``, ADR-0066). SQLite overwrites the freed bytes
        in that transaction (``secure_delete``); `erase` then clears what older versions of
        the pages left in the files."""
        self.ensure_tables()
        dialect = self._dialect()
        mark, now = dialect.placeholder, _now()
        # First what makes the UPDATE overwrite what it frees (SQLite's secure_delete).
        statements: list[SqlStatement] = [(text, ()) for text in dialect.secure_delete]
        statements += [
            (f"INSERT INTO tl_keys (session_id, key_id, wrapped, created_at) VALUES "
             f"({mark}, {mark}, NULL, {mark}) ON CONFLICT (session_id) DO NOTHING",
             (str(session_id), master_id, now)),
            (f"UPDATE tl_keys SET wrapped = NULL, forgotten_at = {mark} "
             f"WHERE session_id = {mark} AND forgotten_at IS NULL", (now, str(session_id))),
        ]
        return statements

    def write(
        self, statements: Sequence[SqlStatement], then: Callable[[], None] = lambda: None
    ) -> None:
        """Run ``statements`` in one transaction of the keys database, then ``then()``, and
        commit; when ``then`` raises, roll back and raise what it raised, untranslated (the
        insert of a store whose keys live apart from its events, `BackendCore._insert_apart`).
        """
        failure: BaseException | None = None
        try:
            with self._cursor("write the keys table", write=True) as (cursor, _):
                for statement, parameters in statements:
                    cursor.execute(statement, parameters)
                try:
                    then()
                except BaseException as error:
                    failure = error
                    raise _Passed from None
        except _Passed:
            pass
        if failure is not None:
            raise failure  # outside the handler: its chain of causes stays as it was

    def forget(self, session_id: UUID, master_id: str) -> None:
        """Destroy the session's data key in a transaction of its own, then `erase`: for a
        stream that records `SessionForgotten` already (`Store.forget` records both at once)."""
        self.write(self.destroy_statements(session_id, master_id))
        self.erase()

    def erase(self) -> None:
        """Clear the old bytes of destroyed data keys from the files (ADR-0046, ADR-0066).

        SQLite: the write-ahead log is checkpointed into the database file and truncated, so
        neither file holds a page from before the erasure (a reader still in a transaction can
        hold the truncation back: logged, and done by the next forget or purge). PostgreSQL:
        the table is vacuumed, so its dead row versions go once no older transaction sees
        them. Safe to repeat: a forget killed before this step is finished by the next one.
        """
        with self._lock:
            erasure = self._dialect().erase
            with self._cursor(erasure.action) as (cursor, _):
                cursor.execute(erasure.statement.format(table="tl_keys"))
                answer = cursor.fetchone() if cursor.description is not None else None
            if answer is not None and answer[0]:
                log.warning("%s: %s", self._where, erasure.held)

    def rewrap(self, old: bytes, new: bytes, earlier: Sequence[bytes] = ()) -> int:
        """Re-wrap every data key under ``new`` and record its id, in one transaction that
        no session start interleaves with (ADR-0098).

        ``earlier``: older master keys, for data keys a writer wrapped under a key the store
        had left (a store re-keyed under running writers before ADR-0098): each row opens
        under the key its ``key_id`` names. Raises `WrongKey` naming the session and the key
        id it needs when a data key opens under none of them (nothing is changed). Returns
        the number of data keys re-wrapped.
        """
        self.ensure_tables()
        keys = {key_id(k, "master"): k for k in (*earlier, old)}
        new_id = key_id(new, "master")
        with self._cursor("re-wrap the data keys", write=True) as (cursor, mark):
            # The only writer of the keys table until it commits, after those under way: a
            # session started meanwhile is re-wrapped too, or waits and finds the new key.
            if self._dialect().exclusive:
                cursor.execute(self._dialect().exclusive.format(table="tl_keys"))
            cursor.execute(
                "SELECT session_id, key_id, wrapped FROM tl_keys WHERE wrapped IS NOT NULL"
            )
            rows = cursor.fetchall()
            for session_text, wrapped_by, wrapped in rows:
                session_id = UUID(str(session_text))
                master = keys.get(str(wrapped_by))
                data_key = None if master is None else unwrap(master, session_id,
                                                              bytes(wrapped))
                if data_key is None:
                    raise WrongKey(
                        f"the data key of session {session_id} is wrapped by the key with id "
                        f"{wrapped_by}, which was not given (the store's key has id "
                        f"{key_id(old, 'master')}); nothing was re-wrapped: give that key "
                        "too (--old-key-file)"
                    )
                cursor.execute(
                    f"UPDATE tl_keys SET key_id = {mark}, wrapped = {mark} "
                    f"WHERE session_id = {mark}",
                    (new_id, wrap(new, session_id, data_key), str(session_text)),
                )
            cursor.execute(f"DELETE FROM tl_settings WHERE name = {mark}", ("encryption",))
            cursor.execute(
                f"INSERT INTO tl_settings (name, value) VALUES ({mark}, {mark})",
                ("encryption", new_id),
            )
        return len(rows)

    def forgotten(self) -> set[UUID]:
        """The sessions whose data key was destroyed."""
        try:
            with self._cursor("read the keys table") as (cursor, _):
                cursor.execute("SELECT session_id FROM tl_keys WHERE forgotten_at IS NOT NULL")
                return {UUID(str(row[0])) for row in cursor.fetchall()}
        except StoreUnavailable as error:
            if _no_table(error):
                return set()
            raise


def _setting_statements(mark: str, name: str, value: str) -> list[SqlStatement]:
    return [
        (f"DELETE FROM tl_settings WHERE name = {mark}", (name,)),
        (f"INSERT INTO tl_settings (name, value) VALUES ({mark}, {mark})", (name, value)),
    ]


class _Passed(Exception):
    """Rolls `KeyTable.write`'s transaction back when its ``then`` raised, past the
    translation of database errors (which would make a conflict a `StoreUnavailable`)."""


def _no_table(error: StoreUnavailable) -> bool:
    text = str(error.__cause__ or error).lower()
    return "no such table" in text or ("relation" in text and "does not exist" in text)
