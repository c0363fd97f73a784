"""Issue 19 point 2 on real stores: `verify` never passes what `restore` refuses.

The attacker of the issue has write access to the database but not the audit key: they change
one message of a session, re-chain that session's records with turnledger's own unkeyed
SHA-256 chain and delete its snapshots. The audit and the restore run one chain check
(`TurnledgerMapper.check_link`, ADR-0063), so they cannot disagree: an unkeyed record in a
keyed store is an `E2-keyed-chain` finding at the version a restore refuses.
"""

from __future__ import annotations

from uuid import UUID

import attrs
import pytest

import turnledger as tl
from tests.backends import Target
from tests.extras import need
from tests.integration.conftest import RecordEditor
from turnledger.domain.errors import CorruptRecord
from turnledger.domain.events import MessageAppended
from turnledger.errors import StoreChanged
from turnledger.replay.audit import Rule, Violation, verify
from turnledger.store.keys import new_key_text
from turnledger.store.mapper import ZERO_CHAIN, chain_digest

EDITED_VERSION = 4


@pytest.fixture(autouse=True)
def _no_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNLEDGER_KEY", raising=False)
    monkeypatch.delenv("TURNLEDGER_AUDIT_KEY", raising=False)


def _fill(store: tl.Store, turns: int = 5) -> tl.Session:
    session = store.start_session()
    for i in range(turns):
        session.append(tl.ChatMessage.user(f"question {i}"))
        session.append(tl.ChatMessage.assistant(f"answer {i}"))
    return session


def forge(store: tl.Store, records: RecordEditor, session_id: str, *, first: int = 1) -> int:
    """The issue's forgery: message `EDITED_VERSION` rewritten, every record from ``first`` on
    re-chained with the unkeyed sha256 chain (from the stored chain before ``first``), the
    session's snapshots deleted. Returns the session's last version."""
    backend = store.backend
    uuid = UUID(session_id)
    stored = backend.read_records(uuid)
    chain = ZERO_CHAIN if first == 1 else backend.mapper.open_record(stored[first - 2])[0]
    for record in stored[first - 1:]:
        topic, payload = record.topic, backend.mapper.open_record(record)[1]
        if record.originator_version == EDITED_VERSION:
            event = backend.mapper.decode_record(record)[0]
            assert isinstance(event, MessageAppended)
            forged = attrs.evolve(event, message=tl.Chat(tl.ChatMessage.user("FORGED")))
            topic, payload = backend.mapper.codec.encode_event(forged)
        chain = chain_digest(chain, uuid, record.originator_version, topic, payload)
        records.write(uuid, record.originator_version, topic,
                      backend.mapper.transcoder.encode([chain, payload]))
    backend.prune_snapshots(uuid, before_version=stored[-1].originator_version + 1)
    return stored[-1].originator_version


def _refused_at(store: tl.Store, session_id: str) -> int | None:
    """The version a restore refuses the session at; None when it restores."""
    try:
        store.restore(session_id)
    except CorruptRecord as error:
        return error.version
    return None


def _keyed_findings(violations: tuple[Violation, ...], session_id: str) -> list[int]:
    return [v.position for v in violations
            if v.session_id == session_id and v.rule is Rule.KEYED_CHAIN]


def test_i19_p2_a_forgery_rechained_without_the_audit_key_is_named_where_restore_refuses_it(
    target: Target, records: RecordEditor
) -> None:
    """Keyed store, one message changed, the session re-chained unkeyed, its snapshots gone:
    `verify` names session and version 1 (E2-keyed-chain, versions 1 to the last), exactly
    where `restore` refuses; the other session stays clean."""
    need("cryptography")
    audit = new_key_text()
    with tl.open_store(target.url, audit_key=audit, snapshot_interval=4) as store:
        victim, other = _fill(store), _fill(store)
        assert store.backend.load_snapshot(UUID(victim.id)) is not None  # there were some
        last = forge(store, records, victim.id)
        report = verify(store.backend)
        refused = _refused_at(store, victim.id)
        other_refused = _refused_at(store, other.id)
    findings = [(v.session_id, v.position, v.rule) for v in report.violations]
    detail = next(v.detail for v in report.violations if v.rule is Rule.KEYED_CHAIN)
    assert [(victim.id, 1, Rule.KEYED_CHAIN)] == findings
    assert (f"unkeyed: versions 1 to {last}", 1, None) == (
        ": ".join(detail.split(": ")[:2]), refused, other_refused
    )


def test_i19_p2_verify_and_restore_name_the_same_first_unkeyed_version(
    target: Target, records: RecordEditor
) -> None:
    """Re-chained from each version in turn: the first `E2-keyed-chain` finding of `verify` is
    the version `restore` refuses (one check decides both)."""
    need("cryptography")
    audit = new_key_text()
    agreed: list[tuple[int, int | None, int | None]] = []
    for first in range(1, EDITED_VERSION + 1):
        with tl.open_store(target.url, audit_key=audit) as store:
            session = _fill(store, turns=3)
            forge(store, records, session.id, first=first)
            found = _keyed_findings(verify(store.backend, [session.id]).violations, session.id)
            agreed.append((first, found[0] if found else None, _refused_at(store, session.id)))
    assert [(f, f, f) for f in range(1, EDITED_VERSION + 1)] == agreed


def test_i19_p2_records_written_unkeyed_into_a_store_whose_setting_says_keyed_are_findings(
    target: Target,
) -> None:
    """A writer that opened the empty store before another one keyed it writes sha256 records
    into a store whose setting says keyed: each such session is one `E2-keyed-chain` finding
    from version 1, where a restore under the audit key refuses it; the keyed one is clean."""
    need("cryptography")
    audit = new_key_text()
    with tl.open_store(target.url) as early, tl.open_store(target.url, audit_key=audit) as keyed:
        if target.kind != "memory":  # one process: its inserts are not fenced (ADR-0098)
            with pytest.raises(StoreChanged):  # such a writer is refused now
                _fill(early, turns=2)
        early.backend.fence.expect(())  # the writers from before ADR-0098 had no fence
        unkeyed_session = _fill(early, turns=2)
        keyed_session = _fill(keyed, turns=2)
        report = verify(keyed.backend)
        refusals = (_refused_at(keyed, unkeyed_session.id), _refused_at(keyed, keyed_session.id))
    assert [(unkeyed_session.id, 1)] == [
        (v.session_id, v.position) for v in report.violations if v.rule is Rule.KEYED_CHAIN
    ]
    assert ((), (1, None)) == (
        tuple(v for v in report.violations if v.rule is not Rule.KEYED_CHAIN), refusals
    )
