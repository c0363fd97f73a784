"""Anchors: head digests an operator keeps outside the store, so deletions show (ADR-0048).

A hash chain proves that what remains was not edited; it cannot show that the newest records
of a session, or a whole session, were deleted. `take_anchor` records, for every session, its
last version and that record's chain value, and for the whole log its last notification id
and that record's chain value, MAC'd with HMAC-SHA256 under the audit key (a plain SHA-256
without one: then the file itself must be kept where nobody can rewrite it). `check_anchor`
compares a store with such a file: a session missing, shorter than anchored, or whose anchored
record carries another chain value, and a log that ends before the anchored notification, are
violations. Sessions and records added after the anchor are not judged by it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

from turnledger.domain.errors import InvalidAnchor
from turnledger.domain.findings import Rule, Violation
from turnledger.store.backend import EventStoreBackend
from turnledger.store.keys import AuditKeyRequired, parse_key
from turnledger.store.salvage import STORE_WIDE

__all__ = ["check_anchor", "take_anchor"]

ANCHOR_FORMAT: Final = 1


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _mac(body: dict[str, Any], audit_key: bytes | None) -> dict[str, str]:
    data = _canonical(body)
    if audit_key is None:
        return {"kind": "sha256", "value": hashlib.sha256(data).hexdigest()}
    return {"kind": "hmac-sha256", "value": hmac.digest(audit_key, data, "sha256").hex()}


def _log_head(backend: EventStoreBackend) -> dict[str, Any]:
    last = backend.max_notification_id()
    chain = _chain_at(backend, last) if last else None
    return {"notification_id": last, "chain": chain.hex() if chain else ""}


def _chain_at(backend: EventStoreBackend, notification_id: int) -> bytes | None:
    """The chain value of the record at ``notification_id``, None when there is none."""
    page = backend.recorder.select_notifications(notification_id, 1)
    if not page or page[0].id != notification_id:
        return None
    return backend.mapper.open_record(page[0])[0]


def _audit_bytes(audit_key: bytes | str | None) -> bytes | None:
    return None if audit_key is None else parse_key(audit_key, "audit key")


def take_anchor(backend: EventStoreBackend, audit_key: bytes | str | None) -> dict[str, Any]:
    """The anchor of ``backend`` now (JSON-ready): every session's head and the log's.

    ``audit_key`` (32 bytes or their text) MACs it; without one it carries a plain SHA-256.
    """
    audit_key = _audit_bytes(audit_key)
    log = _log_head(backend)  # first: sessions read later may only be newer
    sessions: dict[str, dict[str, Any]] = {}
    for session_id in backend.session_ids():
        version, chain = backend.head(session_id)
        sessions[str(session_id)] = {"version": version, "chain": chain.hex()}
    body = {
        "format": ANCHOR_FORMAT,
        "taken_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "log": log,
        "sessions": sessions,
    }
    return {**body, "mac": _mac(body, audit_key)}


def load_anchor(text: str) -> dict[str, Any]:
    """The anchor in ``text``; `InvalidAnchor` naming what is wrong."""
    try:
        anchor = json.loads(text)
    except ValueError as error:
        raise InvalidAnchor(f"the anchor is not JSON: {error}") from None
    if not isinstance(anchor, dict) or anchor.get("format") != ANCHOR_FORMAT:
        raise InvalidAnchor(f"the anchor is not a turnledger anchor of format {ANCHOR_FORMAT}")
    for field in ("log", "sessions", "mac"):
        if not isinstance(anchor.get(field), dict):
            raise InvalidAnchor(f"the anchor has no {field!r} object")
    return anchor


def check_anchor(
    backend: EventStoreBackend, anchor: dict[str, Any], audit_key: bytes | str | None
) -> list[Violation]:
    """The violations of ``backend`` against ``anchor`` (see the module docstring).

    Raises `AuditKeyRequired` for an anchor MAC'd under an audit key when none is given.
    """
    audit_key = _audit_bytes(audit_key)
    body = {k: v for k, v in anchor.items() if k != "mac"}
    kind = anchor["mac"].get("kind")
    if kind == "hmac-sha256" and audit_key is None:
        raise AuditKeyRequired(
            "the anchor is MAC'd under an audit key: give it (TURNLEDGER_AUDIT_KEY or "
            "--audit-key-file) to check it"
        )
    expected = _mac(body, audit_key if kind == "hmac-sha256" else None)
    if not hmac.compare_digest(str(anchor["mac"].get("value", "")), expected["value"]):
        return [Violation(STORE_WIDE, 0, Rule.ANCHOR,
                          "the anchor's MAC does not match its content: the anchor file was "
                          "altered (or MAC'd under another audit key); nothing was checked "
                          "against it")]
    found = _check_log(backend, body["log"])
    for text, head in sorted(body["sessions"].items()):
        found.extend(_check_session(backend, UUID(text), int(head["version"]), head["chain"]))
    return found


def _check_log(backend: EventStoreBackend, log: dict[str, Any]) -> list[Violation]:
    anchored = int(log.get("notification_id", 0))
    if not anchored:
        return []
    last = backend.max_notification_id()
    if last < anchored:
        return [Violation(STORE_WIDE, anchored, Rule.ANCHOR,
                          f"the log ends at notification {last} but the anchor saw it at "
                          f"{anchored}: its newest records were deleted")]
    chain = _chain_at(backend, anchored)
    if chain is None or chain.hex() != log.get("chain"):
        return [Violation(STORE_WIDE, anchored, Rule.ANCHOR,
                          f"notification {anchored} is missing or carries another chain value "
                          "than the anchor recorded: the log was rewritten")]
    return []


def _check_session(
    backend: EventStoreBackend, session_id: UUID, version: int, chain_hex: str
) -> list[Violation]:
    sid = str(session_id)
    current, _ = backend.head(session_id)
    if current == 0:
        return [Violation(sid, 0, Rule.ANCHOR,
                          f"the session is missing: the anchor saw it at version {version} "
                          "(deleted)")]
    if current < version:
        return [Violation(sid, current + 1, Rule.ANCHOR,
                          f"the session ends at version {current} but the anchor saw version "
                          f"{version}: its newest records were deleted")]
    records = backend.read_records(session_id, after_version=version - 1, upto_version=version)
    stored = backend.mapper.open_record(records[0])[0].hex() if records else ""
    if stored != chain_hex:
        return [Violation(sid, version, Rule.ANCHOR,
                          f"version {version} carries another chain value than the anchor "
                          "recorded: the session was rewritten up to it")]
    return []
