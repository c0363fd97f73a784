"""Issue 11 on real stores: encryption at rest, erasure, re-keying, the keyed chain, anchors.

Each test names the capability it proves. The attacker edits rows behind the store's back
(`records`, `Target.query`), as the issue's attacker did.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any
from uuid import UUID

import attrs
import pytest

import turnledger as tl
from tests.backends import Target, fresh_target
from tests.extras import need
from tests.integration.conftest import RecordEditor
from turnledger.domain.errors import CorruptRecord, SessionForgottenError
from turnledger.domain.events import MessageAppended
from turnledger.errors import StoreUnavailable
from turnledger.events import SessionForgotten
from turnledger.projections.analytics import TABLES, Analytics
from turnledger.replay.anchor import check_anchor, take_anchor
from turnledger.replay.audit import Rule, verify
from turnledger.store.keys import (
    AuditKeyRequired,
    InvalidKey,
    KeyRequired,
    NotEncrypted,
    UnkeyedChain,
    WrongKey,
    new_key_text,
)
from turnledger.store.mapper import chain_digest
from turnledger.store.rechain import rechain

MARKER = "PLAINTEXT-MARKER-7f3a9c"
SQL_KINDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(autouse=True)
def _cryptography() -> None:
    need("cryptography")


@pytest.fixture(autouse=True)
def _no_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNLEDGER_KEY", raising=False)
    monkeypatch.delenv("TURNLEDGER_AUDIT_KEY", raising=False)


def _fill(store: tl.Store, turns: int = 4, marker: str = MARKER) -> tl.Session:
    session = store.start_session()
    for i in range(turns):
        session.append(tl.ChatMessage.user(f"{marker} question {i}"))
        session.append(tl.ChatMessage.assistant(f"{marker} answer {i}"))
    return session


def _raw_sqlite_bytes(path: Path) -> bytes:
    return b"".join(
        Path(f"{path}{suffix}").read_bytes()
        for suffix in ("", "-wal")
        if Path(f"{path}{suffix}").exists()
    )


def _pg_bytes(target: Target) -> bytes:
    """Every cell of every table of the store's schema, as bytes."""
    tables = [row[0] for row in target.query(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        target.pg_schema,
    )]
    cells: list[bytes] = []
    for table in tables:
        for row in target.query(f'SELECT * FROM "{table}"'):
            cells += [bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode()
                      for v in row]
    return b"\x00".join(cells)


def _stored_bytes(target: Target) -> bytes:
    if target.sqlite_path is not None:
        return _raw_sqlite_bytes(target.sqlite_path)
    return _pg_bytes(target)


# --- encryption at rest -----------------------------------------------------------------------

@pytest.mark.parametrize("kind", SQL_KINDS)
def test_encrypted_store_holds_no_plaintext_marker_in_events_snapshots_wal_or_rows(
    kind: str, tmp_path: Path
) -> None:
    """Events, snapshots, analytics and keys of an encrypted store (the .db and -wal bytes,
    every PostgreSQL row) never hold a message's text; a plain store does (the control)."""
    found = {}
    for encrypted in (False, True):
        with fresh_target(kind, tmp_path / str(encrypted)) as target:
            key = new_key_text() if encrypted else None
            store = tl.open_store(target.url, key=key, snapshot_interval=3)
            session = _fill(store)
            with Analytics(store.backend) as analytics:
                analytics.catch_up()
            assert store.backend.load_snapshot(UUID(session.id)) is not None
            found[encrypted] = MARKER.encode() in _stored_bytes(target)  # WAL still open
            store.close()
            found[encrypted] |= MARKER.encode() in _stored_bytes(target)
    assert {False: True, True: False} == found


def test_encrypted_store_compresses_before_it_encrypts(tmp_path: Path) -> None:
    """A large compressible message costs an encrypted store about what it costs a plain one
    (ADR-0031): compressed before encryption, since a ciphertext no longer shrinks."""
    text = "the same long tool output line, over and over\n" * 200  # 9,600 bytes
    sizes = {}
    for encrypted in (False, True):
        key = new_key_text() if encrypted else None
        with tl.open_store(f"sqlite:///{tmp_path / f'{encrypted}.db'}", key=key) as store:
            session = store.start_session()
            session.append(tl.ChatMessage.user(text))
            records = store.backend.read_records(UUID(session.id))
            sizes[encrypted] = len(records[-1].state)
            assert [tl.ChatMessage.user(text)] == [
                m for m in session.chat_view() if m.role == "user"
            ]
    assert sizes[False] < 1_000
    assert sizes[True] < sizes[False] + 100  # nonce, tag and marker, not 9 KB of ciphertext


@pytest.mark.parametrize("kind", SQL_KINDS)
def test_analytics_tables_hold_counters_never_content(kind: str, tmp_path: Path) -> None:
    """Even in a plain store, whose events hold the text, no analytics cell holds it."""
    with fresh_target(kind, tmp_path) as target:
        _check_analytics_cells(target)


def _check_analytics_cells(target: Target) -> None:
    store = tl.open_store(target.url)
    _fill(store)
    with Analytics(store.backend) as analytics:
        analytics.catch_up()
        cells = [str(v) for table in TABLES for row in target.query(f"SELECT * FROM {table}")
                 for v in row]
    store.close()
    in_events = any(MARKER.encode() in bytes(r[0])
                    for r in target.query("SELECT state FROM stored_events"))
    assert (True, []) == (in_events, [c for c in cells if MARKER in c])


def test_wrong_missing_or_needless_key_is_a_key_error_never_a_corrupt_record(
    target: Target,
) -> None:
    """No key, another key, a malformed key, or a key for a plain store with events: each is
    its own error naming the problem, not `CorruptRecord`; the right key reads everything."""
    key = new_key_text()
    with tl.open_store(target.url, key=key) as store:
        session_id = _fill(store).id
        errors: list[type[Exception]] = []
        for attempt in ({}, {"key": new_key_text()}, {"key": "not-a-key"}):
            with pytest.raises(tl.TurnledgerError) as caught:
                tl.open_store(target.url, **attempt).close()
            assert not isinstance(caught.value, CorruptRecord)
            errors.append(type(caught.value))
        with tl.open_store(target.url, key=key) as again:
            assert 10 == len(again.events_of(session_id))
    assert [KeyRequired, WrongKey, InvalidKey] == errors


def test_a_key_cannot_encrypt_a_plain_store_in_place(tmp_path: Path) -> None:
    """A plain store with events refuses a key (`NotEncrypted`) instead of mixing formats."""
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    with tl.open_store(url) as store:
        _fill(store, 1)
    with pytest.raises(NotEncrypted):
        tl.open_store(url, key=new_key_text())


def test_new_sqlite_files_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    """A new store's file, its -wal and its -shm are created with mode 0600."""
    path = tmp_path / "private.db"
    with tl.open_store(f"sqlite:///{path}") as store:
        _fill(store, 1)
        modes = {
            suffix: stat.S_IMODE(os.stat(f"{path}{suffix}").st_mode)
            for suffix in ("", "-wal", "-shm")
        }
    assert {"": 0o600, "-wal": 0o600, "-shm": 0o600} == modes


# --- forget -----------------------------------------------------------------------------------

def test_forget_erases_one_session_while_verify_analytics_and_others_stay(target: Target) -> None:
    """After `forget`: the session's events, restore and snapshot are unreadable (also for a
    new process), its chain verifies, its counters stay, the other session is untouched."""
    key = new_key_text()
    store = tl.open_store(target.url, key=key, snapshot_interval=4)
    gone, kept = _fill(store), _fill(store, 2)
    with Analytics(store.backend) as analytics:
        analytics.catch_up()
        before = {r["session_id"]: r["appends"] for r in analytics.session_stats()}
    assert store.forget(gone.id, reason="erasure request") is True
    # This session object still holds the state: it learns of the forget (a conflict, or the
    # refusal at once), and its next append is refused.
    with pytest.raises((SessionForgottenError, tl.ConcurrencyConflict)):
        gone.append(tl.ChatMessage.user("more"))
    with pytest.raises(SessionForgottenError):
        gone.append(tl.ChatMessage.user("more"))
    store.close()
    store = tl.open_store(target.url, key=key)
    refused = []
    for read in (store.events_of, store.restore, store.read_state):
        with pytest.raises(SessionForgottenError) as caught:
            read(gone.id)
        refused.append(gone.id in str(caught.value))
    with Analytics(store.backend) as analytics:
        analytics.catch_up()
        after = {r["session_id"]: r["appends"] for r in analytics.session_stats()}
    report = verify(store.backend)
    result = (
        refused, report.ok, report.events_checked, store.sessions(),
        len(store.restore(kept.id).chat_view()), store.forget(gone.id),
    )
    store.close()
    assert ([True] * 3, True, 10 + 1 + 6, [gone.id, kept.id], 4, False) == result
    if target.kind != "memory":  # a memory store's analytics are not kept between readers
        assert before == after


def test_forget_needs_an_encrypted_store(target: Target) -> None:
    """A plain store cannot erase one session: `NotEncrypted`, nothing recorded."""
    with tl.open_store(target.url) as store:
        session = _fill(store, 1)
        with pytest.raises(NotEncrypted):
            store.forget(session.id)
        assert 4 == len(store.events_of(session.id))


def test_forget_leaves_no_wrapped_key_bytes_in_the_sqlite_files(tmp_path: Path) -> None:
    """`secure_delete` and the truncated WAL: the destroyed wrapped key is in no file."""
    path = tmp_path / "erase.db"
    with tl.open_store(f"sqlite:///{path}", key=new_key_text()) as store:
        session = _fill(store, 1)
        keys = store.backend.protection.keys
        row = None if keys is None else keys.get(UUID(session.id))
        wrapped = None if row is None else row.wrapped
        assert wrapped is not None
        assert wrapped in _raw_sqlite_bytes(path)
        store.forget(session.id)
        assert wrapped not in _raw_sqlite_bytes(path)


def test_idle_sessions_lists_only_sessions_older_than_the_age(tmp_path: Path) -> None:
    """Retention: a session whose last event is older than the age is listed; a forgotten
    one never is."""
    from datetime import timedelta

    with tl.open_store(f"sqlite:///{tmp_path / 'r.db'}", key=new_key_text()) as store:
        old, fresh = _fill(store, 1), _fill(store, 1)
        last = store.events_of(old.id)[-1].timestamp
        later = last + timedelta(days=100)
        assert {old.id, fresh.id} == {s for s, _ in store.idle_sessions(
            timedelta(days=90), now=later)}
        assert [] == store.idle_sessions(timedelta(days=90))
        store.forget(old.id)
        assert [fresh.id] == [s for s, _ in store.idle_sessions(timedelta(days=90), now=later)]


# --- rekey ------------------------------------------------------------------------------------

def test_rekey_rewraps_data_keys_without_rewriting_events(target: Target) -> None:
    """After `rekey` the old key is refused, the new one reads everything, and every stored
    event record is byte for byte what it was."""
    old, new = new_key_text(), new_key_text()
    with tl.open_store(target.url, key=old) as store:
        session = _fill(store, 2)
        before = store.backend.read_records(UUID(session.id))
        assert 1 == store.rekey(new)
    with pytest.raises(WrongKey):
        tl.open_store(target.url, key=old)
    with tl.open_store(target.url, key=new) as store:
        after = store.backend.read_records(UUID(session.id))
        texts = [m.content for m in store.restore(session.id).chat_view()]
    assert ([r.state for r in before], 4) == ([r.state for r in after], len(texts))


# --- keyed chain ------------------------------------------------------------------------------

def _forge(store: tl.Store, records: RecordEditor, session_id: str, version: int) -> None:
    """Rewrite one message as the issue's attacker did: new payload, every later chain value
    recomputed with turnledger's own (unkeyed) function."""
    backend = store.backend
    uuid = UUID(session_id)
    stored = backend.read_records(uuid)
    chain = backend.mapper.open_record(stored[version - 2])[0]
    for record in stored[version - 1:]:
        topic, payload = record.topic, backend.mapper.open_record(record)[1]
        if record.originator_version == version:
            event = backend.mapper.decode_record(record)[0]
            assert isinstance(event, MessageAppended)
            forged = attrs.evolve(event, message=tl.Chat(tl.ChatMessage.user("FORGED")))
            topic, payload = backend.mapper.codec.encode_event(forged)
        chain = chain_digest(chain, uuid, record.originator_version, topic, payload)
        records.write(uuid, record.originator_version, topic,
                      backend.mapper.transcoder.encode([chain, payload]))


def test_forgery_with_recomputed_unkeyed_chain_passes_a_store_without_audit_key(
    target: Target, records: RecordEditor
) -> None:
    """The baseline the keyed chain exists for: the forged message (`_forge`) is read back and
    `verify` finds nothing on an unkeyed store (ADR-0004's limit)."""
    with tl.open_store(target.url) as store:
        session = _fill(store, 3)
        _forge(store, records, session.id, 4)
        report = verify(store.backend, [session.id])
        text = store.events_of(session.id)[3]
    assert isinstance(text, MessageAppended)
    assert ((), "FORGED") == (report.violations, text.message.message.content)  # type: ignore[union-attr]


def test_keyed_chain_flags_a_forgery_and_a_downgrade(target: Target, records: RecordEditor) -> None:
    """Under an audit key: an edit with recomputed sha256 chain values is an unkeyed record
    (`E2-keyed-chain`) at its version; flipping the store back to an unkeyed chain is refused
    on open and reported by `verify` (mixing is never silently accepted)."""
    audit = new_key_text()
    with tl.open_store(target.url, audit_key=audit) as store:
        session = _fill(store, 3)
        _forge(store, records, session.id, 4)
        report = verify(store.backend, [session.id])
        found = sorted({(v.position, v.rule) for v in report.violations})
        keys = store.backend.protection.keys
        assert keys is not None
        keys.replace_setting("chain", "sha256")  # the attacker's downgrade
    with pytest.raises(UnkeyedChain):
        tl.open_store(target.url, audit_key=audit)
    with tl.open_store(target.url, audit_key=audit, allow_unkeyed=True) as store:
        rules = {v.rule for v in verify(store.backend).violations}
    assert (4, Rule.KEYED_CHAIN) in found
    assert Rule.KEYED_CHAIN in rules


def test_a_keyed_store_needs_its_audit_key(target: Target) -> None:
    """No audit key, or another one, for a keyed store: refused before anything is read."""
    with tl.open_store(target.url, audit_key=new_key_text()) as store:
        _fill(store, 1)
    errors = []
    for attempt in ({}, {"audit_key": new_key_text()}):
        with pytest.raises(tl.TurnledgerError) as caught:
            tl.open_store(target.url, **attempt)
        errors.append(type(caught.value))
    assert [AuditKeyRequired, WrongKey] == errors


def test_rechain_moves_an_existing_store_to_a_keyed_chain(target: Target) -> None:
    """`rechain` keeps every payload, makes the chain keyed (the store now needs its audit
    key) and the store verifies under it."""
    audit = new_key_text()
    with tl.open_store(target.url, snapshot_interval=3) as store:
        session = _fill(store, 2)
    with tl.open_store(target.url, audit_key=audit, allow_unkeyed=True) as store:
        assert 6 == rechain(store.backend, audit)
    with pytest.raises(AuditKeyRequired):
        tl.open_store(target.url)
    with tl.open_store(target.url, audit_key=audit) as store:
        report = verify(store.backend)
        texts = [m.content for m in store.restore(session.id).chat_view()]
    assert ((), 4) == (report.violations, len(texts))


# --- anchors ----------------------------------------------------------------------------------

def test_anchor_detects_deleted_newest_records_and_a_deleted_session(
    target: Target, records: RecordEditor
) -> None:
    """Deleting a session's newest records or a whole session passes `verify` alone but not
    against an anchor taken before; an altered anchor is reported as such."""
    audit = new_key_text()
    with tl.open_store(target.url, audit_key=audit) as store:
        cut, deleted = _fill(store, 2), _fill(store, 1)
        anchor = take_anchor(store.backend, audit)
        assert [] == check_anchor(store.backend, anchor, audit)
        for version in (5, 6):
            records.delete(UUID(cut.id), version)
        for version in (1, 2, 3, 4):
            records.delete(UUID(deleted.id), version)
        alone = verify(store.backend, [cut.id]).ok
        found = {(v.session_id, v.position) for v in check_anchor(store.backend, anchor, audit)}
        altered: dict[str, Any] = {**anchor, "taken_at": "2000-01-01T00:00:00+00:00"}
        tampered = check_anchor(store.backend, altered, audit)
    assert alone
    assert {(cut.id, 5), (deleted.id, 0)} <= found
    assert ["the anchor's MAC"] == [v.detail[:16] for v in tampered]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_snapshot_forged_without_the_audit_key_is_not_served(kind: str, tmp_path: Path) -> None:
    """A snapshot rebuilt with a rewritten message, its digest and the real chain value
    recomputed (the issue's attacker), is served by an unkeyed store's restore; a keyed store
    refuses it (no MAC under the audit key) and replays the log instead."""
    from eventsourcing.persistence import StoredEvent

    from turnledger.replay.timeline import fold
    from turnledger.store.backend import SNAPSHOT_TOPIC
    from turnledger.store.snapshots import encode_snapshot

    served = {}
    for keyed in (False, True):
        with fresh_target(kind, tmp_path / str(keyed)) as target, tl.open_store(
            target.url, audit_key=new_key_text() if keyed else None
        ) as store:
            session = _fill(store, 2)
            events = store.events_of(session.id)
            forged = [attrs.evolve(e, message=tl.Chat(tl.ChatMessage.user("FORGED")))
                      if isinstance(e, MessageAppended) and e.originator_version == 5 else e
                      for e in events]
            uuid = UUID(session.id)
            version, chain = store.backend.head(uuid)
            payload = store.backend.mapper.seal(encode_snapshot(fold(forged), chain))
            store.backend.snapshot_recorder.insert_events(
                [StoredEvent(uuid, version, SNAPSHOT_TOPIC, payload)]
            )
            served[keyed] = [m.content for m in store.restore(session.id).chat_view()]
    assert ("FORGED" in served[False], "FORGED" in served[True]) == (True, False)
    assert 4 == len(served[True])


def test_an_interrupted_forget_is_reported_and_completed_by_forgetting_again(
    target: Target,
) -> None:
    """A data key destroyed without `SessionForgotten` (a crash between the two steps of a
    forget before ADR-0066) is a `verify` finding; `forget` again records the event and
    `verify` passes."""
    with tl.open_store(target.url, key=new_key_text()) as store:
        session = _fill(store, 1)
        keyring = store.backend.protection.keyring
        assert keyring is not None
        # The old first step only: the key destroyed in the table and in memory.
        keyring.table.forget(UUID(session.id), keyring.master_id)
        keyring.destroyed(UUID(session.id))
        before = [(v.position, v.rule) for v in verify(store.backend).violations]
        assert store.forget(session.id) is True
        after = verify(store.backend).violations
    assert ([(5, Rule.MISSING_RECORD)], ()) == (before, after)


def _refuse_forgotten_inserts(target: Target, topic: str) -> None:
    """Make the database fail every insert of a `SessionForgotten` record (a database error,
    not a conflict), as a crash or a lost server would at that moment."""
    literal = "'" + topic.replace("'", "''") + "'"
    if target.sqlite_path is not None:  # json('{') is a runtime error: "malformed JSON"
        target.query(f"CREATE TRIGGER refuse_forget BEFORE INSERT ON stored_events "
                     f"WHEN NEW.topic = {literal} BEGIN SELECT json('{{'); END")
        return
    target.query(f"CREATE FUNCTION refuse_forget() RETURNS trigger LANGUAGE plpgsql AS $$ "
                 f"BEGIN IF NEW.topic = {literal} THEN RAISE EXCEPTION 'refused by the test'; "
                 "END IF; RETURN NEW; END $$")
    target.query("CREATE TRIGGER refuse_forget BEFORE INSERT ON stored_events "
                 "FOR EACH ROW EXECUTE FUNCTION refuse_forget()")


def _erasure_state(store: tl.Store, session_id: str) -> tuple[bool, bool]:
    """(data key destroyed, stream ends with `SessionForgotten`) of a session."""
    keys = store.backend.protection.keys
    assert keys is not None
    row = keys.get(UUID(session_id))
    uuid = UUID(session_id)
    version, _ = store.backend.head(uuid)
    last = store.backend.read_records(uuid, after_version=version - 1)
    topic = store.backend.mapper.codec.topic_of(SessionForgotten)
    return (row is not None and row.wrapped is None), last[-1].topic == topic


@pytest.mark.parametrize("kind", SQL_KINDS)
def test_i19_p5_forget_destroys_the_key_only_together_with_its_record(
    kind: str, tmp_path: Path
) -> None:
    """When recording `SessionForgotten` fails, the data key is not destroyed either (one
    transaction): the session stays readable and verifies; forgetting again then works."""
    key = new_key_text()
    with fresh_target(kind, tmp_path) as target:
        with tl.open_store(target.url, key=key) as store:
            session = _fill(store, 1)
            _refuse_forgotten_inserts(target, store.backend.mapper.codec.topic_of(
                SessionForgotten))
            with pytest.raises(StoreUnavailable):
                store.forget(session.id)
        target.query("DROP TRIGGER refuse_forget" + ("" if kind == "sqlite" else
                                                     " ON stored_events"))
        with tl.open_store(target.url, key=key) as store:  # a new reader
            failed = (_erasure_state(store, session.id), verify(store.backend).ok,
                      len(store.events_of(session.id)))
            forgot = store.forget(session.id)
            done = (_erasure_state(store, session.id), verify(store.backend).ok)
    assert (((False, False), True, 4), True, ((True, True), True)) == (failed, forgot, done)


def test_i19_p5_a_conflicting_forget_record_destroys_no_key(target: Target) -> None:
    """An append carrying the key's destruction that loses to another writer's record rolls
    the destruction back with it, on every backend (memory: the keys database's transaction
    around the insert)."""
    from datetime import UTC, datetime

    key = new_key_text()
    with tl.open_store(target.url, key=key) as store:
        session = _fill(store, 1)
        uuid = UUID(session.id)
        keyring = store.backend.protection.keyring
        assert keyring is not None
        pairs = store.backend.read_with_chain(uuid)
        stale = SessionForgotten(uuid, len(pairs), datetime.now(UTC), reason="")
        with pytest.raises(tl.ConcurrencyConflict):
            store.backend.append(uuid, [stale], prev_chain=pairs[-2][1], head_known=True,
                                 keys=keyring.destruction(uuid))
        state = _erasure_state(store, session.id)
    with tl.open_store(target.url, key=key) as reopened:
        texts = [m.content for m in reopened.restore(session.id).chat_view()]
    assert ((False, False), 2) == (state, len(texts))
