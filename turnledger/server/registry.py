"""The server's own tables: which key owns which conversation, its metadata, and the API keys.

A conversation's items are a turnledger session's log; what the Conversations API adds around
them (``metadata``, ``created_at``, the key or tenant that owns it, whether it was deleted) and
the API keys are not events of the history, so they live beside the store, never in it: the
store's records stay what its codec, `verify` and the CLI read (ADR-0103).

Where (the backend's `side_sql`): for ``postgresql://`` two tables of our own
(``turnledger_server_conversations``, ``turnledger_server_keys``) in the store's database and
schema, so every replica reads the same rows; for ``sqlite:///path.db`` a SQLite file beside
the store, ``path.db.server`` (the store's file is the store's alone, ADR-0062); for
``memory://`` an in-process SQLite database, living as long as the server.

A key is stored as the SHA-256 of its secret: the secret is 32 random bytes, so a hash needs no
salt or stretching to resist guessing (bcrypt and argon2 protect low-entropy passwords, and
would cost milliseconds on every request).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from turnledger.errors import StoreUnavailable

if TYPE_CHECKING:
    from turnledger import Store

__all__ = ["ConversationRecord", "Registry"]

KEY_PREFIX = "tlk_"

_TABLES = (
    "CREATE TABLE IF NOT EXISTS turnledger_server_conversations ("
    " id TEXT PRIMARY KEY, owner TEXT NOT NULL, metadata TEXT NOT NULL,"
    " created_at BIGINT NOT NULL, deleted_at BIGINT)",
    "CREATE TABLE IF NOT EXISTS turnledger_server_keys ("
    " id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, name TEXT NOT NULL, tenant TEXT NOT NULL,"
    " created_at BIGINT NOT NULL, revoked_at BIGINT)",
)


def hash_secret(secret: str) -> str:
    """The stored form of a key's secret: its SHA-256 as hex (module doc: why not bcrypt)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ConversationRecord:
    """A conversation's row: its owner (a key's tenant, or ``""`` without keys)."""

    id: str
    owner: str
    metadata: dict[str, str]
    created_at: int
    deleted: bool


@dataclass(frozen=True)
class ApiKey:
    """One API key as listed: never its secret, which only `Registry.create_key` returns."""

    id: str
    name: str
    tenant: str
    created_at: int
    revoked: bool


class Registry:
    """The server's tables on one database connection, used by one thread at a time.

    Each method is one statement or one transaction; a conversation's row is written after its
    session is stored, so a row always names a session (a crash between the two leaves a
    session no request can reach, never a row without one).
    """

    def __init__(self, connection: Any, *, placeholder: str) -> None:
        self._connection = connection
        self._placeholder = placeholder
        self._lock = threading.Lock()
        with self._cursor() as cursor:
            for statement in _TABLES:
                cursor.execute(statement)

    @classmethod
    def beside(cls, store: Store) -> Registry:
        """The registry of ``store`` (module doc: where it lives), on a connection the store's
        backend opens for it (`side_sql`): no driver is named outside the backends."""
        try:
            sql = store.backend.side_sql()
        except Exception as error:  # the driver's own error: say where, keep nothing open
            raise StoreUnavailable(f"the server's tables beside {store.backend.url} cannot be "
                                   f"opened: {type(error).__name__}: {error}") from error
        return cls(sql.connection, placeholder=sql.dialect.placeholder)

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        with self._lock:
            cursor = self._connection.cursor()
            try:
                yield cursor
            finally:
                cursor.close()

    def _sql(self, statement: str) -> str:
        return statement.replace("?", self._placeholder)

    def _one(self, statement: str, params: Sequence[object]) -> Any:
        with self._cursor() as cursor:
            cursor.execute(self._sql(statement), params)
            return cursor.fetchone()

    def _run(self, statement: str, params: Sequence[object]) -> int:
        with self._cursor() as cursor:
            cursor.execute(self._sql(statement), params)
            return int(cursor.rowcount)

    # -- conversations --

    def add_conversation(self, conversation_id: str, owner: str,
                         metadata: dict[str, str]) -> ConversationRecord:
        created = int(time.time())
        self._run("INSERT INTO turnledger_server_conversations (id, owner, metadata, created_at)"
                  " VALUES (?, ?, ?, ?)",
                  (conversation_id, owner, json.dumps(metadata, sort_keys=True), created))
        return ConversationRecord(conversation_id, owner, metadata, created, False)

    def conversation(self, conversation_id: str) -> ConversationRecord | None:
        row = self._one("SELECT owner, metadata, created_at, deleted_at"
                        " FROM turnledger_server_conversations WHERE id = ?", (conversation_id,))
        if row is None:
            return None
        return ConversationRecord(conversation_id, row[0], json.loads(row[1]), int(row[2]),
                                  row[3] is not None)

    def set_metadata(self, conversation_id: str, metadata: dict[str, str]) -> None:
        self._run("UPDATE turnledger_server_conversations SET metadata = ? WHERE id = ?",
                  (json.dumps(metadata, sort_keys=True), conversation_id))

    def delete_conversation(self, conversation_id: str) -> bool:
        """Mark the conversation deleted; False when it was already."""
        return self._run("UPDATE turnledger_server_conversations SET deleted_at = ?"
                         " WHERE id = ? AND deleted_at IS NULL",
                         (int(time.time()), conversation_id)) == 1

    # -- keys --

    def create_key(self, name: str, tenant: str | None = None) -> tuple[ApiKey, str]:
        """A new key and its secret (shown once; only its hash is kept). Its tenant defaults
        to its own id: the key sees the conversations it created."""
        key_id = "key_" + secrets.token_hex(8)
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        created = int(time.time())
        key = ApiKey(key_id, name, tenant or key_id, created, False)
        self._run("INSERT INTO turnledger_server_keys (id, hash, name, tenant, created_at)"
                  " VALUES (?, ?, ?, ?, ?)", (key_id, hash_secret(secret), name, key.tenant,
                                              created))
        return key, secret

    def revoke_key(self, key_id: str) -> bool:
        """Revoke a key; False when no live key has this id."""
        return self._run("UPDATE turnledger_server_keys SET revoked_at = ?"
                         " WHERE id = ? AND revoked_at IS NULL",
                         (int(time.time()), key_id)) == 1

    def api_keys(self) -> list[ApiKey]:
        with self._cursor() as cursor:
            cursor.execute("SELECT id, name, tenant, created_at, revoked_at"
                           " FROM turnledger_server_keys ORDER BY created_at, id")
            rows = cursor.fetchall()
        return [ApiKey(r[0], r[1], r[2], int(r[3]), r[4] is not None) for r in rows]

    def has_live_keys(self) -> bool:
        return self._one("SELECT 1 FROM turnledger_server_keys WHERE revoked_at IS NULL"
                         " LIMIT 1", ()) is not None

    def key_for(self, secret: str) -> ApiKey | None:
        """The live key whose secret this is, or None (revoked or unknown)."""
        row = self._one("SELECT id, name, tenant, created_at FROM turnledger_server_keys"
                        " WHERE hash = ? AND revoked_at IS NULL", (hash_secret(secret),))
        return None if row is None else ApiKey(row[0], row[1], row[2], int(row[3]), False)
