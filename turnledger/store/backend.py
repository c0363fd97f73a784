"""The low-level event store: one class over the `eventsourcing` recorders (E2, E3, E8).

`open_backend(url)` picks the backend of the URL's scheme from the registry
(`turnledger.store.backends.BACKENDS`) and builds the same `EventStoreBackend` over whatever
recorders it opens — backends differ only in that configuration and in what the port asks
of them (ADR-0007, ADR-0072):

- ``memory://`` and ``memory://NAME`` — `turnledger.store.backends.memory`;
- ``sqlite:///path/to/file.db`` — `turnledger.store.backends.sqlite`;
- ``postgresql://user[:password]@host[:port]/dbname`` — `turnledger.store.backends.postgres`.

Each backend module documents its URL forms and options.

Why a thin class that owns the recorders rather than an ``eventsourcing.application.Application``
subclass: the hash chain (ADR-0004) makes each record depend on its predecessor, so events
cannot go through ``Application.save`` (which maps events one by one); sessions are folded by
the session layer, never by ``Repository.get`` / ``project_aggregate``; snapshots are opaque
bytes, not library ``Snapshot`` aggregates; and ``Application`` reads ``os.environ``, so a stray
``PERSISTENCE_MODULE`` or ``POSTGRES_SCHEMA`` could silently redirect a store away from its URL.
Here the URL (plus the optional ``env`` for compressor/cipher topics) is the whole configuration.

`EventStoreBackend` is the facade of three parts, one module each — the session streams
(`turnledger.store.event_stream`), the snapshots (`turnledger.store.snapshot_table`), the
session index and notification log (`turnledger.store.session_index`) — over their shared
state (`turnledger.store.backend_core`). Every library or driver error is translated at this
boundary: a duplicate (session, version)
becomes `ConcurrencyConflict`, anything else that goes wrong in the database `StoreUnavailable`,
an unusable URL `InvalidStoreURL`, a record that cannot be decoded `CorruptRecord`. Nothing
happens at import time: the database drivers are imported when a store is opened.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Final, TypeVar

from turnledger.domain.errors import ConcurrencyConflict, SessionExists
from turnledger.store.backends import BACKENDS, drop_memory_store
from turnledger.store.backends.port import InvalidStoreURL, StoreUnavailable, redact_url
from turnledger.store.codec import EventCodec, default_codec
from turnledger.store.crypto import protect
from turnledger.store.event_stream import (
    AnchorMismatch,
    AppendInDoubt,
    EventStreams,
    InvalidAppend,
)
from turnledger.store.session_index import SessionIndex
from turnledger.store.snapshot_table import SNAPSHOT_TOPIC, SnapshotTable

__all__ = [
    "RETRY_BUDGET_SECONDS",
    "SNAPSHOT_TOPIC",
    "AnchorMismatch",
    "AppendInDoubt",
    "EventStoreBackend",
    "InvalidAppend",
    "InvalidStoreURL",
    "StoreUnavailable",
    "drop_memory_store",
    "open_backend",
    "require_backend",
    "retry_on_conflict",
]

log = logging.getLogger("turnledger.store")

T = TypeVar("T")

RETRY_BUDGET_SECONDS: Final = 30.0
"""`retry_on_conflict`'s default time budget: no new attempt starts after it."""
RETRY_BASE_DELAY: Final = 0.002
"""`retry_on_conflict`'s default first backoff cap (seconds); it doubles per lost attempt."""
RETRY_MAX_DELAY: Final = 0.25
"""`retry_on_conflict`'s default largest backoff cap (seconds)."""


def retry_on_conflict(
    fn: Callable[[], T],
    attempts: int | None = None,
    *,
    budget_seconds: float | None = RETRY_BUDGET_SECONDS,
    base_delay: float = RETRY_BASE_DELAY,
    max_delay: float = RETRY_MAX_DELAY,
) -> T:
    """Call ``fn()``; call it again after a `ConcurrencyConflict`, backing off (E3, ADR-0022).

    The loser of a race reloads and retries; racing again at once mostly loses again, so
    before attempt ``n + 1`` it sleeps a random time between 0 and
    ``min(max_delay, base_delay * 2 ** (n - 1))`` (exponential backoff with full jitter).
    It stops when ``attempts`` calls were made (None, the default: no count limit) or when
    the next attempt would start more than ``budget_seconds`` after the first (default 30 s;
    None: no time limit) — then the last `ConcurrencyConflict` propagates. Defaults: 2 ms
    first cap, 250 ms largest cap.

    ``fn`` must reload the session state itself on each call (a `Session` does so after a
    conflict). Raises ``ValueError`` for ``attempts`` < 1, a negative budget or delay, and
    for ``attempts`` and ``budget_seconds`` both None (no bound at all).
    """
    _check_retry_bounds(attempts, budget_seconds, base_delay, max_delay)
    started = time.monotonic()
    attempt = 1
    while True:
        try:
            return fn()
        except SessionExists:
            raise  # not a race: the id is taken for good
        except ConcurrencyConflict:
            if attempts is not None and attempt >= attempts:
                raise
            delay = random.uniform(0, min(max_delay, base_delay * 2 ** min(attempt - 1, 60)))
            if budget_seconds is not None and (
                time.monotonic() + delay - started > budget_seconds
            ):
                raise
            log.debug("conflict, retrying in %.3f s (attempt %d)", delay, attempt + 1)
            time.sleep(delay)
            attempt += 1


def _check_retry_bounds(
    attempts: int | None, budget_seconds: float | None, base_delay: float, max_delay: float
) -> None:
    if attempts is not None and attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    if budget_seconds is not None and not budget_seconds >= 0:
        raise ValueError(f"budget_seconds must be >= 0 or None, got {budget_seconds}")
    if attempts is None and budget_seconds is None:
        raise ValueError("retry_on_conflict needs a bound: attempts, budget_seconds or both")
    if not (base_delay >= 0 and max_delay >= 0):
        raise ValueError(
            f"base_delay and max_delay must be >= 0, got {base_delay} and {max_delay}"
        )


# --- the backend --------------------------------------------------------------------------

class EventStoreBackend(EventStreams, SnapshotTable, SessionIndex):
    """One event store: append and read session streams, snapshots, the notification log.

    Built by `open_backend`; safe to share between threads. Every method raises
    `StoreUnavailable` when the database fails and after `close`.

    The methods come from its parts, one module each: `EventStreams` (append, settle, read,
    verify), `SnapshotTable` (save, replace, prune, load) and `SessionIndex` (session lists,
    notification log), over the state and error translation of `BackendCore` (ADR-0072).
    """


# --- opening ---------------------------------------------------------------------------

def open_backend(
    url: str,
    *,
    codec: EventCodec | None = None,
    env: Mapping[str, str] | None = None,
    key: bytes | None = None,
    audit_key: bytes | None = None,
    allow_unkeyed: bool = False,
) -> EventStoreBackend:
    """Open the event store at ``url`` (see the module docstring for the URL forms).

    ``codec`` replaces the default event registry (tests register extra event classes);
    ``env`` passes library settings that are not part of the URL, such as
    ``COMPRESSOR_TOPIC`` (e.g. ``eventsourcing.compressor:ZlibCompressor``), ``CIPHER_TOPIC``
    and ``CIPHER_KEY``; the process environment is never read.

    ``key`` (32 bytes) encrypts the store at rest with one data key per session, ``audit_key``
    (32 bytes) keys its hash chain (`turnledger.store.crypto`, ADR-0045, ADR-0047).

    Raises `InvalidStoreURL` (one-line reason) for an unknown scheme, a bad option or a
    SQLite path that cannot be created, `StoreUnavailable` when the database cannot be reached,
    and the key errors of `turnledger.store.keys` (missing, wrong or needless key).
    """
    if not isinstance(url, str):
        raise InvalidStoreURL(f"a store URL must be a str, got {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise InvalidStoreURL(
            f"{redact_url(url)!r} is not a store URL: use memory://, sqlite:///PATH or "
            "postgresql://USER@HOST:PORT/DBNAME"
        )
    backend = BACKENDS.get(scheme.lower())
    if backend is None:
        raise InvalidStoreURL(
            f"unknown store URL scheme {scheme!r} in {redact_url(url)!r}: use memory://, "
            "sqlite:///PATH or postgresql://USER@HOST:PORT/DBNAME"
        )
    database = backend.from_url(url, rest)
    recorders = database.open(dict(env or {}))
    try:
        protection, mapper = protect(
            database, recorders, codec if codec is not None else default_codec(),
            key=key, audit_key=audit_key, allow_unkeyed=allow_unkeyed,
        )
    except BaseException:
        if recorders.close is not None:
            recorders.close()
        raise
    store = EventStoreBackend(database, recorders, mapper, protection)
    store.fence.expect(protection.expected_settings())
    return store


def require_backend(value: object, what: str) -> None:
    """`TypeError` unless ``value`` is an `EventStoreBackend`, saying where a `Store`'s is
    (``store.backend``) when it was given one; ``what`` names the taker."""
    if not isinstance(value, EventStoreBackend):
        hint = " (a Store's is store.backend)" if hasattr(value, "backend") else ""
        raise TypeError(f"{what} takes an EventStoreBackend{hint}, got {type(value).__name__}")
