"""The per-event table (issue 34, ADR-0100): an event class the library has never seen, defined
here at run time, is stored, replayed, verified, counted and shown without a line of the
package changing; each fold decides on its own union's members alone, and a class nobody
registered is still refused everywhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, get_args

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import turnledger as tl
from tests.event_strategies import inferred
from turnledger.audit import timeline, verify, what_if
from turnledger.domain import events as events_module
from turnledger.domain.events import (
    EVENT_TYPES,
    Audited,
    ChangesLogItems,
    ChangesRecord,
    ChangesViews,
    Counted,
    Deciders,
    DomainEvent,
    Drawn,
    Event,
    MovesRoute,
    Removes,
    Replayed,
    TrimReason,
    register_event,
    registered_events,
    unregister_event,
)
from turnledger.domain.messages import ChatMessage
from turnledger.projections.counters import fold_counters
from turnledger.replay.transcripts import record_of
from turnledger.store.codec import EventCodec, default_codec, topic_for


@attrs.frozen
class NoteAdded(DomainEvent):
    """A runtime's own note: changes no view (the dummy event of issue 34)."""

    text: str
    author: str = "runtime"

    timeline: ClassVar[str] = "note by {author}: {text}"


@pytest.fixture
def registered() -> Iterator[type[NoteAdded]]:
    register_event(NoteAdded)
    try:
        yield NoteAdded
    finally:
        unregister_event(NoteAdded)


def _conversation(session: tl.Session) -> None:
    session.append(ChatMessage("system", "You are terse."))
    session.append(ChatMessage("user", "What is 2+2?"))
    session.append(ChatMessage("assistant", "4"))
    session.prepare_request()


def test_i34_a_runtime_event_is_stored_replayed_verified_counted_and_shown(
    registered: type[NoteAdded], tmp_path: Path
) -> None:
    """A class defined at run time, registered, recorded by `Session.record`: a new process's
    view of the store reads it back exactly, restore gives the same views as without it,
    `verify` is clean, the counters count it as an event and nothing else, the timeline
    shows its line, the record and the what-if ignore it."""
    url = f"sqlite:///{tmp_path / 'notes.db'}"
    store = tl.open_store(url)
    plain = store.start_session()
    _conversation(plain)
    noted = store.start_session()
    noted.append(ChatMessage("system", "You are terse."))
    before = noted.version
    recorded = noted.record(registered, text="the user asked twice")
    noted.append(ChatMessage("user", "What is 2+2?"))
    noted.append(ChatMessage("assistant", "4"))
    noted.prepare_request()
    store.close()

    assert [type(e) for e in recorded] == [NoteAdded]
    note = recorded[0]
    assert (note.text, note.author, note.originator_version) == ("the user asked twice",
                                                                 "runtime", before + 1)

    store = tl.open_store(url)
    try:
        # stored: read back exactly, under its own topic
        events = store.events_of(noted.id)
        assert [e for e in events if isinstance(e, NoteAdded)] == [note]
        assert topic_for(NoteAdded) in default_codec().topics
        # replayed: the views are those of the same conversation without the note
        restored, twin = store.restore(noted.id), store.restore(plain.id)
        assert restored.chat_view() == twin.chat_view()
        assert restored.conversation_view() == twin.conversation_view()
        assert restored.version == twin.version + 1
        # verified: the chain and every rule hold with the note in the stream
        report = verify(store.backend)
        assert report.ok, report
        # counted: one more event, every other counter as without it
        counted = fold_counters(events)
        twin_counted = fold_counters(store.events_of(plain.id))
        assert counted.events == twin_counted.events + 1
        assert attrs.evolve(counted, events=twin_counted.events,
                            last_event_at=twin_counted.last_event_at) == twin_counted
        # shown: its timeline line
        lines = [entry.summary for entry in timeline(events)]
        assert "note by runtime: the user asked twice" in lines
        # the record and the what-if carry on as without it
        assert record_of(events) == record_of(store.events_of(plain.id))
        with_note = what_if(events, tl.RuntimeProfile())
        without = what_if(store.events_of(plain.id), tl.RuntimeProfile())
        assert (with_note.recorded, with_note.what_if) == (without.recorded, without.what_if)
        assert [(r.recorded, r.what_if) for r in with_note.requests] == [
            (r.recorded, r.what_if) for r in without.requests]
    finally:
        store.close()


def test_i34_a_runtime_event_without_a_line_is_shown_by_its_fields(
    registered: type[NoteAdded],
) -> None:
    """No `DomainEvent.timeline` line: the class name and its fields."""

    @attrs.frozen
    class Flagged(DomainEvent):
        flag: str

    register_event(Flagged)
    try:
        store = tl.open_store("memory://")
        session = store.start_session()
        session.record(Flagged, flag="reviewed")
        lines = [entry.summary for entry in timeline(session.events())]
        assert "Flagged(flag='reviewed')" in lines
    finally:
        unregister_event(Flagged)


def test_i34_record_refuses_the_library_s_events_and_unregistered_classes(
    registered: type[NoteAdded],
) -> None:
    """`Session.record` records a runtime's event only: a library event has its own command
    (a hand-made HistoryTrimmed would break R32), an unregistered class no reader can decode,
    and the position fields are the session's."""

    @attrs.frozen
    class Unregistered(DomainEvent):
        text: str

    session = tl.open_store("memory://").start_session()
    with pytest.raises(tl.InvalidMessage, match=r"HistoryTrimmed.*its own command"):
        session.record(tl.HistoryTrimmed, dropped_messages=1, kept_turns=1,
                       reason=TrimReason.TURN_LIMIT)
    with pytest.raises(tl.InvalidMessage, match=r"Unregistered.*not registered"):
        session.record(Unregistered, text="x")
    with pytest.raises(tl.InvalidMessage, match="originator_version are the session's"):
        session.record(NoteAdded, text="x", originator_version=9)
    with pytest.raises(tl.InvalidMessage, match=r"NoteAdded.*text"):
        session.record(NoteAdded)
    assert session.version == 2  # nothing recorded after its start and route


def test_i34_register_event_refuses_what_no_reader_could_tell_apart() -> None:
    """Topics are stored in every record and must be prefix-free (E9): a second class of the
    same name, or one whose name starts a registered one's, is refused."""

    @attrs.frozen
    class MessageAppendedAgain(DomainEvent):
        pass

    @attrs.frozen
    class NotAnEvent:
        pass

    with pytest.raises(ValueError, match=r"MessageAppended.*prefix-free"):
        register_event(MessageAppendedAgain)
    with pytest.raises(TypeError, match="not an attrs class derived from DomainEvent"):
        register_event(NotAnEvent)  # type: ignore[type-var]
    with pytest.raises(ValueError, match="member of Event"):
        unregister_event(tl.HistoryTrimmed)
    assert registered_events() == EVENT_TYPES


TABLE = {
    "views": ChangesViews, "log": ChangesLogItems, "record": ChangesRecord, "counted": Counted,
    "route": MovesRoute, "drawn": Drawn, "replayed": Replayed, "audited": Audited,
    "removal": Removes,
}


def test_i34_the_table_in_the_comment_is_the_unions() -> None:
    """The table that opens the unions in `turnledger/domain/events.py` says what they hold:
    a reader can trust it (each row: an event and the columns it is a member of)."""
    source = Path(events_module.__file__).read_text(encoding="utf-8")
    rows = source.split("# --- what each event means to each fold")[1].split("ChangesViews:")[0]
    lines = [line[2:] for line in rows.splitlines() if line.startswith("# ")]
    header = next(line for line in lines if line.split()[:1] == ["views"])
    columns = header.split()
    starts = [header.index(column) for column in columns]
    said: dict[str, set[str]] = {}
    for line in lines:
        name = line.split()[0] if line.strip() else ""
        if name in {cls.__name__ for cls in EVENT_TYPES}:
            said[name] = {column for column, at in zip(columns, starts)
                          if line[at:at + len(column)].strip() == "x"}
    assert set(said) == {cls.__name__ for cls in EVENT_TYPES}
    for column, union in TABLE.items():
        assert {name for name, marked in said.items() if column in marked} == {
            cls.__name__ for cls in get_args(union)}, column


def test_i34_every_union_holds_members_of_event_only() -> None:
    """Each fold's union is a subset of `Event`: nothing a fold decides on is outside the
    classes the codec registers."""
    for union in TABLE.values():
        assert set(get_args(union)) <= set(get_args(Event))


def test_i34_deciders_answer_for_subclasses_and_refuse_strangers() -> None:
    """A subclass of a member is decided on as its member is (as `match` did); a class nobody
    registered raises TypeError naming it."""

    @attrs.frozen
    class LateAppend(tl.MessageAppended):
        pass

    @attrs.frozen
    class Stranger(DomainEvent):
        pass

    views = Deciders(ChangesViews)
    assert views[LateAppend] is True
    assert views[tl.HistoryTrimmed] is False
    with pytest.raises(TypeError, match="Stranger is not a turnledger event"):
        views[Stranger]


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_i34_a_strategy_is_inferred_for_an_event_nobody_wrote_one_for(data: st.DataObject) -> None:
    """The property tests draw a new event class without a hand-written strategy: its fields
    come from their types, and what is drawn survives the codec exactly (E9)."""
    register_event(NoteAdded)
    try:
        event = data.draw(inferred(NoteAdded))
        codec = EventCodec()
        topic, payload = codec.encode_event(event)
        assert codec.decode_event(topic, payload, event.originator_id,
                                  event.originator_version) == event
    finally:
        unregister_event(NoteAdded)
