"""Cost that follows the window (issue 12, ADR-0030, ADR-0031), on every backend.

Only the newest snapshot is kept; with the turn limit off a session's snapshot holds its chat
window, not its history; the full views read from the log in pages equal those of a state
folded from every event; an old (format 2) snapshot is a miss the session restores the same
without, and uncompressed records still load; large payloads are stored compressed and still
verify, and an edit inside one is still found.
"""

from __future__ import annotations

import zlib
from uuid import UUID

import msgpack
import pytest

from tests.backends import Target
from tests.integration.conftest import RecordEditor
from tests.old_snapshots import in_old_format
from tests.reference import WholeState
from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.decider import SessionState, evolve
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.store.backend import EventStoreBackend
from turnledger.store.packing import ZLIB, open_envelope
from turnledger.store.pipeline import Pipeline
from turnledger.store.session import Session, Store, open_store
from turnledger.store.snapshots import encode_snapshot

LIMIT_OFF = RuntimeProfile(max_context_tokens=400, max_history_messages=10**9)


def turn(index: int) -> tuple[ConversationMessage, ...]:
    call = ToolCall(f"call_{index}", "shell", '{"cmd": "ls"}')
    return (
        Chat(ChatMessage.user(f"question {index}: " + "why " * 30)),
        AssistantToolCalls(None, (call,)),
        ToolResults((ToolResult(call.id, f"output {index} " + "file.py " * 60, "shell"),)),
        Chat(ChatMessage.assistant(f"answer {index}")),
    )


def run_turns(session: Session, first: int, count: int) -> None:
    for index in range(first, first + count):
        for item in turn(index):
            session.append(item)
        session.prepare_request()


def folded(backend: EventStoreBackend, session_id: str) -> SessionState:
    """A state that holds every item, folded from every event (the tests' reference)."""
    state = WholeState()
    for event in backend.read(UUID(session_id)):
        evolve(state, event)
    return state


def snapshot_versions(store: Store, session_id: str) -> list[int]:
    records = store.backend.snapshot_recorder.select_events(UUID(session_id))
    return [r.originator_version for r in records]


def test_only_the_newest_snapshot_of_a_session_is_kept(target: Target) -> None:
    """After many snapshots, the store holds one per session: the newest."""
    with open_store(target.url, snapshot_interval=10) as store:
        session = store.start_session(profile=LIMIT_OFF)
        other = store.start_session(profile=LIMIT_OFF)
        run_turns(session, 0, 12)
        run_turns(other, 0, 3)
        versions = snapshot_versions(store, session.id)
        assert 1 == len(versions)
        assert versions[0] > session.version - 10
        assert 1 == len(snapshot_versions(store, other.id))


def test_with_the_turn_limit_off_the_snapshot_holds_the_window_not_the_history(
    target: Target,
) -> None:
    """60 turns against 15: the held items and the snapshot stay about the same size, while
    a state folded from every event holds all of them."""
    with open_store(target.url, snapshot_interval=10) as store:
        session = store.start_session(profile=LIMIT_OFF)
        run_turns(session, 0, 15)
        small = store.backend.load_snapshot(UUID(session.id))
        run_turns(session, 15, 45)
        large = store.backend.load_snapshot(UUID(session.id))
        whole = folded(store.backend, session.id)
        assert small is not None
        assert large is not None
        assert 240 == len(whole.index.items)
        assert session.state.window_size <= 12
        assert len(large[1]) < len(small[1]) + 45 * 8


def test_paged_full_views_equal_those_folded_from_every_event(target: Target) -> None:
    """conversation_view / chat_view / state / read_state of a compact session, restored or
    live, equal the views of a state folded from all its events; event_pages pages them."""
    with open_store(target.url, snapshot_interval=7) as store:
        session = store.start_session(profile=LIMIT_OFF)
        run_turns(session, 0, 20)
        whole = folded(store.backend, session.id)
        restored = store.restore(session.id)
        expected = (whole.conversation_view(), whole.chat_view())
        assert 80 == len(expected[0])
        assert expected == (session.conversation_view(), session.chat_view())
        assert expected == (restored.conversation_view(), restored.chat_view())
        view = store.read_state(session.id)
        assert expected == (list(view.conversation), list(view.chat))
        assert expected[0] == list(session.state.conversation)
        pages = list(store.event_pages(session.id, page_size=25))
        assert [e for page in pages for e in page] == store.events_of(session.id)
        assert {25} == {len(page) for page in pages[:-1]}


def test_i20_p2_a_format_2_snapshot_is_a_miss_and_the_session_restores_the_same(
    target: Target,
) -> None:
    """A snapshot written in the format before ADR-0030 is a miss (ADR-0074): the restore
    replays every event (its position counts from no snapshot) and equals the live session."""
    with open_store(target.url, snapshot_interval=1000) as store:
        session = store.start_session(profile=LIMIT_OFF)
        run_turns(session, 0, 10)
        whole = folded(store.backend, session.id)
        head = store.backend.read_with_chain(UUID(session.id))[-1][1]
        old = in_old_format(encode_snapshot(whole, head), 2)
        assert 2 == msgpack.unpackb(old)[0]
        store.backend.save_snapshot(UUID(session.id), session.version, old)
        restored = store.restore(session.id)
        loaded = Pipeline(store.backend, publish=lambda _: None).load(UUID(session.id))
        assert 0 == loaded.snapshot_version
        assert (session.conversation_view(), session.chat_view()) == (
            restored.conversation_view(), restored.chat_view()
        )
        assert [] == store.backend.check_chain(UUID(session.id))
        run_turns(restored, 10, 2)
        assert folded(store.backend, session.id).chat_view() == restored.chat_view()


def test_large_payloads_are_stored_compressed_and_still_verify(
    target: Target, records: RecordEditor
) -> None:
    """A tool result of 500 bytes is stored zlib'd in its envelope, a short message is not;
    the chain verifies, and an edit of the compressed text is named as an edited record."""
    with open_store(target.url) as store:
        session = store.start_session()
        run_turns(session, 0, 2)
        uuid = UUID(session.id)
        stored = store.backend.read_records(uuid)
        assert {2, 3} == {len(msgpack.unpackb(r.state)) for r in stored}
        assert [] == store.backend.check_chain(uuid)
        big = next(r for r in stored if len(msgpack.unpackb(r.state)) == 3)
        chain, payload = open_envelope(msgpack.unpackb(big.state))
        edited = zlib.compress(payload.replace(b"file", b"FILE"))
        version = big.originator_version
        records.write(uuid, version, big.topic, msgpack.packb([chain, edited, ZLIB]))
        found = store.backend.check_chain(uuid)
        assert [(version, "edited")] == [(p.position, p.kind) for p in found]


def test_e5_a_snapshot_is_due_after_snapshot_messages_messages_whatever_the_profile(
    target: Target,
) -> None:
    """With an event interval too large to fire, the message bound alone takes the snapshots:
    for the default profile (three trim events per turn) and the turn limit off alike, at the
    same message positions, so both restores replay the same messages (ADR-0058)."""
    positions = {}
    for name, profile in (("default", RuntimeProfile(max_history_messages=2)),
                          ("limit off", LIMIT_OFF)):
        with open_store(target.url, snapshot_interval=10**6, snapshot_messages=12) as store:
            session = store.start_session(profile=profile)
            seen = set()
            for index in range(10):
                run_turns(session, index, 1)
                seen.update(snapshot_versions(store, session.id))
            restored = store.restore(session.id)
            assert (session.chat_view(), session.conversation_view()) == (
                restored.chat_view(), restored.conversation_view()
            )
            events = store.backend.read(UUID(session.id))
            positions[name] = sorted(
                sum(1 for e in events[:version] if type(e).__name__ == "MessageAppended")
                for version in seen
            )
    assert [12, 24, 36] == positions["default"]
    assert positions["default"] == positions["limit off"]


def test_e5_the_event_interval_still_bounds_a_tail_without_messages(target: Target) -> None:
    """A session that records requests but no messages is still snapshotted every
    ``snapshot_interval`` events (a tail of requests costs a restore too)."""
    with open_store(target.url, snapshot_interval=5, snapshot_messages=10**6) as store:
        session = store.start_session(profile=LIMIT_OFF)
        run_turns(session, 0, 1)
        for _ in range(12):
            session.prepare_request()
        versions = snapshot_versions(store, session.id)
        assert 1 == len(versions)
        assert session.version - versions[0] < 5


def test_a_store_refuses_a_snapshot_interval_below_one() -> None:
    """0 or a negative interval is a clear error naming the option, not a snapshot per
    command."""
    for option in ("snapshot_interval", "snapshot_messages"):
        with pytest.raises(ValueError, match=f"^{option} must be a positive integer, got 0$"):
            open_store("memory://", **{option: 0})
