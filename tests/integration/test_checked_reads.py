"""Checked snapshots and checked reads (issue 9, points 4 and 5; E2, E5, E11; ADR-0023/0024).

A restore trusts a snapshot only when its digest holds and the record at its version carries its
chain value, else it replays the events (a warning, nothing lost); every read checks version
contiguity and the hash chain, and names the session and version of a damaged record. The
records and snapshots are damaged with sqlite3 behind the store's back.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import zlib
from pathlib import Path
from typing import Any
from uuid import UUID

import msgpack
import pytest

from tests.integration.test_replay import open_sqlite, record_agent
from tests.old_snapshots import in_old_format
from turnledger.domain.decider import SessionState, evolve
from turnledger.domain.errors import CorruptRecord
from turnledger.replay.audit import Rule, verify
from turnledger.store.backend import EventStoreBackend
from turnledger.store.codec import default_codec
from turnledger.store.mapper import ZERO_CHAIN
from turnledger.store.packing import open_envelope
from turnledger.store.pipeline import Pipeline, Position
from turnledger.store.snapshots import compare_snapshot, encode_snapshot

FLIP_SAMPLE = 512  # bits of one snapshot flipped by the test (benchmarks/snapshot_flips.py: all)
VERIFY_EVERY = 8  # whole `verify` runs on every 8th flip; its snapshot check on every flip


def sql(path: Path, statement: str, *params: object) -> list[Any]:
    connection = sqlite3.connect(path)
    try:
        with connection:
            return connection.execute(statement, params).fetchall()
    finally:
        connection.close()


def replayed(
    backend: EventStoreBackend, session_id: UUID, upto_version: int | None = None
) -> tuple[SessionState, bytes]:
    """The state folded from the events, and the chain head, without any snapshot."""
    state, chain = SessionState(), ZERO_CHAIN
    for event, event_chain in backend.read_with_chain(session_id, upto_version=upto_version):
        evolve(state, event)
        chain = event_chain
    return state, chain


def differences(position: Position, state: SessionState, chain: bytes) -> list[str]:
    """The fields in which a loaded position differs from a replayed state (all compared).

    Both are put in the snapshot's canonical form (ADR-0030: the chat window held, the rest
    of the conversation window summarised), whatever their amortised history, and every field
    of that form is compared, the facts, chain, window and summary alike.
    """
    return compare_snapshot(encode_snapshot(position.state, position.chain), state, chain)


def load(backend: EventStoreBackend, session_id: UUID) -> Position:
    return Pipeline(backend, snapshot_interval=10, publish=lambda _: None).load(session_id)


def snapshot_row(path: Path, session_id: UUID) -> tuple[int, bytes]:
    ((version, state),) = sql(
        path,
        "SELECT originator_version, state FROM stored_snapshots WHERE originator_id=? "
        "ORDER BY originator_version DESC LIMIT 1",
        session_id.hex,
    )
    return version, bytes(state)


def set_snapshot(path: Path, session_id: UUID, version: int, state: bytes) -> None:
    sql(
        path,
        "UPDATE stored_snapshots SET state=? WHERE originator_id=? AND originator_version=?",
        state, session_id.hex, version,
    )


def snapshot_reported(backend: EventStoreBackend, session_id: UUID, version: int, bit: int) -> bool:
    """Whether verify's snapshot check (the whole `verify` on every 8th bit) flags the snapshot."""
    if bit % VERIFY_EVERY == 0:
        report = verify(backend, [session_id])
        return (version, Rule.SNAPSHOT) in {(v.position, v.rule) for v in report.violations}
    state, chain = replayed(backend, session_id, upto_version=version)
    loaded = backend.load_snapshot(session_id)
    assert loaded is not None
    try:
        return bool(compare_snapshot(loaded[1], state, chain))
    except CorruptRecord:
        return True


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, UUID]:
    """A SQLite store with one agent session snapshotted every 10 events."""
    path = tmp_path / "x.db"
    with open_sqlite(path, snapshot_interval=10) as store:
        session_id = UUID(record_agent(store).session.id)
    return path, session_id


# --- point 4: checked snapshots -----------------------------------------------------------------


def test_e5_every_flipped_snapshot_bit_restores_the_replayed_state_and_verify_reports_it(
    recorded: tuple[Path, UUID],
) -> None:
    """Flipping any one of a deterministic sample of >= 500 snapshot bits never changes a restore;
    verify reports every flip."""
    path, session_id = recorded
    version, original = snapshot_row(path, session_id)
    bits = len(original) * 8
    sample = sorted({bits * k // FLIP_SAMPLE for k in range(FLIP_SAMPLE)})
    wrong_restores: list[tuple[int, list[str]]] = []
    unreported: list[int] = []
    with open_sqlite(path) as store:
        state, chain = replayed(store.backend, session_id)
        for bit in sample:
            flipped = bytearray(original)
            flipped[bit // 8] ^= 1 << (bit % 8)
            set_snapshot(path, session_id, version, bytes(flipped))
            found = differences(load(store.backend, session_id), state, chain)
            if found:
                wrong_restores.append((bit, found))
            if not snapshot_reported(store.backend, session_id, version, bit):
                unreported.append(bit)
    assert len(sample) >= 500
    assert ([], []) == (wrong_restores, unreported)


def test_e5_a_snapshot_ahead_of_the_log_is_replayed_with_a_warning(
    recorded: tuple[Path, UUID], caplog: pytest.LogCaptureFixture
) -> None:
    """Newest records deleted below the snapshot: restore replays the log, warns, appends go on."""
    path, session_id = recorded
    version, _ = snapshot_row(path, session_id)
    sql(path, "DELETE FROM stored_events WHERE originator_id=? AND originator_version>?",
        session_id.hex, version - 2)
    with open_sqlite(path) as store, caplog.at_level(logging.WARNING, "turnledger"):
        state, chain = replayed(store.backend, session_id)
        position = load(store.backend, session_id)
        session = store.restore(str(session_id))
        session.select_route(session.route, reason="explicit")
        after = session.version
    assert (version - 2, [], True) == (
        position.state.version,
        differences(position, state, chain),
        any("snapshot not used" in r.getMessage() for r in caplog.records),
    )
    assert after >= version - 2


def test_e5_an_undecodable_snapshot_is_replayed_with_a_warning(
    recorded: tuple[Path, UUID], caplog: pytest.LogCaptureFixture
) -> None:
    """Garbage snapshot bytes: restore replays every event (nothing lost) and warns."""
    path, session_id = recorded
    version, _ = snapshot_row(path, session_id)
    set_snapshot(path, session_id, version, b"\xc1 not msgpack")
    with open_sqlite(path) as store, caplog.at_level(logging.WARNING, "turnledger"):
        state, chain = replayed(store.backend, session_id)
        position = load(store.backend, session_id)
    assert ([], True) == (
        differences(position, state, chain),
        any(str(session_id) in r.getMessage() for r in caplog.records),
    )


def test_i20_p2_a_format_1_snapshot_is_a_miss_on_restore_and_noted_by_verify(
    recorded: tuple[Path, UUID], caplog: pytest.LogCaptureFixture
) -> None:
    """An intact snapshot of the undigested format 1: restore replays it as a miss (logged at
    INFO, no warning: no damage); verify passes and notes it as not compared."""
    path, session_id = recorded
    version, _ = snapshot_row(path, session_id)
    with open_sqlite(path) as store:
        folded, folded_chain = replayed(store.backend, session_id, upto_version=version)
    old = in_old_format(encode_snapshot(folded, folded_chain), 1)
    set_snapshot(path, session_id, version, old)
    with open_sqlite(path) as store, caplog.at_level(logging.INFO, "turnledger"):
        state, chain = replayed(store.backend, session_id)
        position = load(store.backend, session_id)
        report = verify(store.backend)
    levels = {r.levelname for r in caplog.records if "format 1" in r.getMessage()}
    assert ([], 0, {"INFO"}, ()) == (
        differences(position, state, chain), position.snapshot_version, levels,
        report.violations,
    )
    assert [(str(session_id), version, Rule.SNAPSHOT, True)] == [
        (n.session_id, n.position, n.rule, "old format, not compared" in n.detail)
        for n in report.notes
    ]


def test_e5_verify_names_the_snapshot_field_that_differs_from_the_log(
    recorded: tuple[Path, UUID],
) -> None:
    """A well-formed snapshot whose profile differs from the log is reported by field name."""
    path, session_id = recorded
    version, _ = snapshot_row(path, session_id)
    with open_sqlite(path) as store:
        folded, folded_chain = replayed(store.backend, session_id, upto_version=version)
    _, _, z = msgpack.unpackb(encode_snapshot(folded, folded_chain))
    body = msgpack.unpackb(zlib.decompress(z), timestamp=3)
    body["profile"]["max_context_tokens"] = 1456
    z = zlib.compress(msgpack.packb(body, datetime=True))
    set_snapshot(path, session_id, version, msgpack.packb([4, hashlib.sha256(z).digest(), z]))
    with open_sqlite(path) as store:
        report = verify(store.backend)
    details = [v.detail for v in report.violations if v.rule is Rule.SNAPSHOT]
    assert 1 == len(details)
    assert details[0].endswith("in: profile"), details


# --- point 5: checked reads ---------------------------------------------------------------------


def edit_record(path: Path, session_id: UUID, version: int) -> None:
    """Change a message's bytes in place; the envelope still decodes."""
    ((topic, state),) = sql(
        path,
        "SELECT topic, state FROM stored_events WHERE originator_id=? AND originator_version=?",
        session_id.hex, version,
    )
    chain, payload = open_envelope(msgpack.unpackb(state))
    edited = decodable_edit(topic, payload, session_id, version)
    sql(path, "UPDATE stored_events SET state=? WHERE originator_id=? AND originator_version=?",
        msgpack.packb([chain, edited]), session_id.hex, version)


def decodable_edit(topic: str, payload: bytes, session_id: UUID, version: int) -> bytes:
    """``payload`` with the case of one letter changed (from the end) where it still decodes."""
    codec = default_codec()
    for at in range(len(payload) - 1, -1, -1):
        if not payload[at : at + 1].islower():
            continue
        edited = payload[:at] + payload[at : at + 1].upper() + payload[at + 1 :]
        try:
            codec.decode_event(topic, edited, session_id, version)
        except CorruptRecord:
            continue
        return edited
    raise AssertionError("no decodable edit")


def read_everything(path: Path, session_id: UUID) -> dict[str, str]:
    """What restore, replay (events_of) and export (read_state) raise, by reader."""
    raised: dict[str, str] = {}
    with open_sqlite(path) as store:
        for name, read in (
            ("restore", lambda: store.restore(str(session_id))),
            ("replay", lambda: store.events_of(str(session_id))),
            ("export", lambda: store.read_state(str(session_id))),
        ):
            try:
                read()
            except CorruptRecord as error:
                raised[name] = str(error)
    return raised


def tool_result_version(path: Path, session_id: UUID) -> int:
    return min(  # type: ignore[no-any-return]  # sqlite3 rows are untyped
        v for (v,) in sql(
            path, "SELECT originator_version FROM stored_events WHERE originator_id=? AND "
            "topic LIKE '%MessageAppended' AND originator_version > 12", session_id.hex,
        )
    )


def test_e11_restore_replay_and_export_refuse_an_edited_record(tmp_path: Path) -> None:
    """A record whose bytes were edited but still decode: every reader names session and version."""
    path = tmp_path / "x.db"
    with open_sqlite(path) as store:
        session_id = UUID(record_agent(store).session.id)
    version = tool_result_version(path, session_id)
    edit_record(path, session_id, version)
    raised = read_everything(path, session_id)
    where = f"session {session_id} version {version}"
    assert (["export", "replay", "restore"], [True] * 3) == (
        sorted(raised), [where in text for text in raised.values()]
    )


def test_e11_restore_replay_and_export_refuse_a_deleted_middle_record(tmp_path: Path) -> None:
    """A record deleted from the middle: every reader names the missing version."""
    path = tmp_path / "x.db"
    with open_sqlite(path) as store:
        session_id = UUID(record_agent(store).session.id)
    sql(path, "DELETE FROM stored_events WHERE originator_id=? AND originator_version=?",
        session_id.hex, 12)
    raised = read_everything(path, session_id)
    where = f"session {session_id} version 12"
    assert (["export", "replay", "restore"], [True] * 3) == (
        sorted(raised), [where in text and "missing" in text for text in raised.values()]
    )


def test_e11_a_restore_from_a_snapshot_checks_the_records_after_it(
    recorded: tuple[Path, UUID],
) -> None:
    """An edited record after the snapshot is refused by a restore that starts at the snapshot."""
    path, session_id = recorded
    version, _ = snapshot_row(path, session_id)
    (last,) = sql(path, "SELECT max(originator_version) FROM stored_events WHERE originator_id=?",
                  session_id.hex)[0]
    assert last > version + 1
    ((target, topic, payload),) = sql(
        path, "SELECT originator_version, topic, state FROM stored_events WHERE originator_id=? "
        "AND originator_version = ?", session_id.hex, last,
    )
    chain, body = open_envelope(msgpack.unpackb(payload))
    sql(path, "UPDATE stored_events SET state=? WHERE originator_id=? AND originator_version=?",
        msgpack.packb([chain, decodable_edit(topic, body, session_id, target)]),
        session_id.hex, target)
    with open_sqlite(path) as store, pytest.raises(CorruptRecord) as raised:
        store.restore(str(session_id))
    assert f"session {session_id} version {target}" in str(raised.value)
