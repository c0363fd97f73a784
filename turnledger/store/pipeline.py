"""The write path of a session, top to bottom: decide -> record -> snapshot when due -> notify.

One command goes through `Pipeline.save` (in the spirit of eventsourcing's
``Application.save``: ``_record``, ``_take_snapshots``, ``_notify``):

1. **decide** — the pure decider runs the command on the session's state (`run`: decide
   a step, evolve it, decide the next) and returns the numbered `Batch` (with the prepared
   request, rendered once); nothing is stored yet;
2. **record** — the events go to the backend in ONE transaction, the first event's version
   being the expected version (E3); the store's head is not read first (the position knows
   it): the (session, version) key refuses a version another writer recorded first, and a
   conflict or a failure reloads the state from the store (ADR-0035);
3. **snapshot when due** — after ``snapshot_messages`` appended messages or
   ``snapshot_interval`` events, whichever comes first, the compact state is saved (a cache: a
   failure is logged, never raised; ADR-0058);
4. **notify** — after the commit: R34's log line for a legacy turn-limit trim, then the
   store's subscribers get each `HistoryTrimmed` (R33), then its observers the whole batch
   (`Store.observe`).

A `Position` is where one session stands (state, chain head, latest snapshot); the `Session`
that owns it holds its lock around `save`. `load` rebuilds a position from the latest snapshot
and the events after it, so a restore costs O(window).

The state is evolved in place (copying the large window index per command would make an
append O(window)); so when a command fails after its events were applied in memory, the
position is reloaded from the store. When that reload fails too, the position is marked
*stale* and `current` reloads it before its next use — a reader or writer never sees events
that are not stored (ADR-0022).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import cast
from uuid import UUID

import attrs

from turnledger.domain.decider import (
    Batch,
    Command,
    ImportConversation,
    SessionState,
    StartSession,
    Summarize,
    evolve,
    run,
)
from turnledger.domain.errors import (
    ConcurrencyConflict,
    CorruptRecord,
    SessionNotFound,
    TurnledgerError,
)
from turnledger.domain.events import (
    DomainEvent,
    Event,
    HistoryTrimmed,
    MessagePopped,
    TrimDecided,
)
from turnledger.domain.messages import ConversationMessage
from turnledger.domain.state import collect_summarised
from turnledger.store.backend import (
    AnchorMismatch,
    AppendInDoubt,
    EventStoreBackend,
    StoreUnavailable,
)
from turnledger.store.mapper import ZERO_CHAIN, paused_gc
from turnledger.store.snapshots import (
    SNAPSHOT_FORMAT,
    SnapshotMismatch,
    decode_snapshot,
    encode_snapshot,
    snapshot_format,
)

__all__ = ["SNAPSHOT_INTERVAL", "SNAPSHOT_MESSAGES", "Pipeline", "Position"]

log = logging.getLogger("turnledger")

SNAPSHOT_INTERVAL = 500
"""Events between two snapshots of a session's compact state, at most."""
SNAPSHOT_MESSAGES = 256
"""Appended messages between two snapshots, at most: what a restore replays (ADR-0058)."""

CONTENDED_HEAD_CHECKS = 32
"""Commands of a session object that read the stored head first after it lost a race."""

IN_DOUBT_KEPT = 256
"""In-doubt commands a pipeline remembers for other session objects (the oldest go first)."""

Publish = Callable[[Sequence[HistoryTrimmed]], None]
"""Delivers committed `HistoryTrimmed` notices to the store's subscribers."""

Observe = Callable[[Sequence[DomainEvent]], None]
"""Delivers each committed batch, whole, to the store's observers (`Store.observe`)."""

_NO_TIME = datetime(1970, 1, 1, tzinfo=UTC)


def log_items(
    backend: EventStoreBackend,
    state: SessionState,
    span: range,
    unrecorded: Sequence[DomainEvent] = (),
    page_size: int = 1000,
) -> dict[int, ConversationMessage | None] | None:
    """The log's items at the positions ``span`` as ``state``'s events leave them (None:
    swept or popped), read in pages; None for an empty span. ``unrecorded``: events applied
    to ``state`` in memory only (a read-only sweep), after the log's."""
    if not span or state.session_id is None:
        return None
    older: dict[int, ConversationMessage | None] = {}
    pages = backend.read_pages(state.session_id, page_size=page_size, upto_version=state.version)
    for page in pages:
        collect_summarised(older, page, span)
    collect_summarised(older, unrecorded, span)
    return older


def _retry_key(command: Command) -> Command | None:
    """What a retry of ``command`` has in common with it: everything but its time; None for
    a command that starts a session (its retry is a new session object, nothing to match)."""
    if isinstance(command, StartSession | ImportConversation):
        return None
    return attrs.evolve(command, now=_NO_TIME)


@attrs.define
class InDoubt:
    """A command whose append raised `AppendInDoubt`: its batch may or may not be stored."""

    error: AppendInDoubt
    key: Command
    """The command without its time (`_retry_key`): a retry has the same."""
    batch: Batch
    stored: bool | None = None
    """What the store said once it answered (None: not asked yet)."""


@attrs.define
class Position:
    """Where one session stands: its state, the chain head of its last record, and the version
    of its latest snapshot (0: none) with the log position of the next message then."""

    state: SessionState = attrs.field(factory=SessionState)
    chain: bytes = ZERO_CHAIN
    snapshot_version: int = 0
    snapshot_position: int = 0
    stale: bool = False
    """The state may hold events that are not stored: reload before any use (`current`)."""
    behind: bool = False
    """The state is stored but another writer recorded more: catch up before any use."""
    head_checks: int = 0
    """Commands that still read the stored head before deciding: set after a conflict, when
    another writer is active (a cheap catch-up beats deciding on an old state, failing the
    insert and reloading in full); 0 otherwise: the position knows its head (ADR-0035)."""
    in_doubt: InDoubt | None = None
    """This position's last command, if its append raised `AppendInDoubt` (ADR-0064)."""

    @property
    def session_id(self) -> UUID:
        assert self.state.session_id is not None, "the session has not been started"
        return self.state.session_id

    def move_to(self, other: Position) -> None:
        """Stand where ``other`` stands (after a reload)."""
        self.state, self.chain = other.state, other.chain
        self.snapshot_version, self.snapshot_position = (
            other.snapshot_version, other.snapshot_position
        )
        self.stale, self.behind = other.stale, other.behind


class Recovery:
    """What a save that failed, or may have failed, leaves behind, and what the next save on
    the session does about it, in one place (`docs/concurrency.md` explains it whole).

    A save (`Pipeline.save`) decides on a clone of the stored state and appends its batch.
    When the append fails, `failed` leaves the position in one of three conditions:

    - **nothing stored** (`ConcurrencyConflict`: another writer recorded these versions
      first; `StoreUnavailable`: the store refused or could not be reached and nothing
      committed): the position keeps the stored state, marked *behind* (caught up before
      its next use, not now: the caller may back off first, and a second wait on the same
      lock would double the caller's wait); after a conflict the next
      `CONTENDED_HEAD_CHECKS` saves read the stored head first (ADR-0021, ADR-0022,
      ADR-0035, ADR-0094);
    - **in doubt** (`AppendInDoubt`: the store could not tell whether the batch committed):
      the position is *stale* (reloaded before its next use) and the command is remembered,
      for this session object and for the others of the pipeline (ADR-0020, ADR-0064);
    - **interrupted** (anything else raised inside the append, a ``KeyboardInterrupt``
      among them: stored or not): reloaded now; when the reload fails too, left stale.

    `before` runs first in every save: it settles a remembered doubt (a retry of the same
    command whose batch was stored returns that batch, recorded once), reloads a stale
    position, catches up one that is behind, and reads the head when a recent conflict asks
    for it. Nothing of a failed command is ever served.
    """

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline
        self._doubts: dict[UUID, InDoubt] = {}
        """The last in-doubt command of each session, for every session object (ADR-0064)."""
        self._doubts_lock = threading.Lock()

    def before(self, position: Position, command: Command) -> Batch | None:
        """Bring ``position`` to where the store stands before ``command`` is decided; the
        batch already stored for ``command`` when it retries an in-doubt one (then nothing
        else is to be done), else None. Raises what settling, reloading or the head check
        raises (`AppendInDoubt`, `StoreUnavailable`, `ConcurrencyConflict`)."""
        if position.in_doubt is not None or self._doubts:
            settled = self._settle(position, command)
            if settled is not None:
                return settled
        self._pipeline.current(position)
        if position.head_checks > 0 and position.state.session_id is not None:
            position.head_checks -= 1
            self._check_head(position)
        return None

    def failed(
        self, position: Position, command: Command, batch: Batch, kept: SessionState,
        error: BaseException,
    ) -> None:
        """Leave ``position`` where the store may be after the append of ``batch`` (decided
        on a clone of ``kept``, the stored state) raised ``error``; the caller raises it."""
        if isinstance(error, AppendInDoubt):
            # The batch may be stored: reload before the next use (ADR-0064).
            position.stale = True
            self._remember(position, command, batch, error)
        elif isinstance(error, StoreUnavailable | ConcurrencyConflict):
            # Nothing stored: back to the stored state, caught up before the next use, not
            # now: after a database failure a second wait on the same lock or timeout would
            # double what the caller waits (ADR-0021); after a conflict the caller may back
            # off first, and a state caught up before that sleep would be behind again when
            # it retries (ADR-0022).
            # (A session that failed to start stays blank: nothing of it to catch up.)
            position.state, position.behind = kept, kept.session_id is not None
            if isinstance(error, ConcurrencyConflict):  # another writer is active
                position.head_checks = CONTENDED_HEAD_CHECKS
        else:
            self._reload_after(position)  # interrupted inside the append: stored or not

    def _settle(self, position: Position, command: Command) -> Batch | None:
        """Settle the session's in-doubt command before ``command`` (ADR-0064); the batch
        stored for it when ``command`` is its retry, else None (``command`` goes on).

        A retry is the same command (`_retry_key`) from the session object that issued it,
        or from another one standing right after the batch (nothing recorded since). The
        doubt is forgotten once it is known to be unstored, once it was retried, and once
        the session has moved past it. Raises `AppendInDoubt` (everything kept) while the
        store still cannot tell.
        """
        session_id = position.state.session_id
        if session_id is None:
            return None
        with self._doubts_lock:
            doubt = position.in_doubt or self._doubts.get(session_id)
        if doubt is None:
            return None
        own = doubt is position.in_doubt
        if doubt.stored is None:
            doubt.stored = self._pipeline.backend.resolve_in_doubt(doubt.error)
        self._pipeline.current(position)
        position.in_doubt = None
        version = position.state.version
        retry = doubt.stored and doubt.key == _retry_key(command) and (
            own or version == doubt.error.last
        )
        if retry or not doubt.stored or version > doubt.error.last:
            with self._doubts_lock:
                if self._doubts.get(session_id) is doubt:
                    del self._doubts[session_id]
        if not retry:
            return None
        log.warning("session %s: the retried command was recorded by its first attempt "
                    "(versions %d to %d); not recorded again", session_id, doubt.error.first,
                    doubt.error.last)
        return doubt.batch

    def _remember(self, position: Position, command: Command, batch: Batch,
                  error: AppendInDoubt) -> None:
        """Keep ``command`` until its doubt is settled (`_settle`)."""
        key = _retry_key(command)
        if key is None:
            return
        doubt = InDoubt(error, key, batch)
        position.in_doubt = doubt
        with self._doubts_lock:
            self._doubts.pop(position.session_id, None)
            self._doubts[position.session_id] = doubt
            while len(self._doubts) > IN_DOUBT_KEPT:
                del self._doubts[next(iter(self._doubts))]

    def _check_head(self, position: Position) -> None:
        """`ConcurrencyConflict` when the store holds events after the position (E3)."""
        version = position.state.version
        stored, _ = self._pipeline.backend.head(position.session_id)
        if stored > version:
            position.behind = True
            position.head_checks = CONTENDED_HEAD_CHECKS
            raise ConcurrencyConflict(
                f"session {position.session_id}: versions {version + 1} to {stored} were "
                f"recorded by another writer (this session object was at version {version}); "
                "it catches up before its next use; retry"
            )

    def _reload_after(self, position: Position) -> None:
        """Reload after a failed command; when the store cannot be read either, the position
        stays stale (`current` retries) and the command's own error is the one raised."""
        try:
            self._pipeline.reload(position)
        except TurnledgerError as error:
            log.warning("session %s: cannot reload after a failed command (%s); it will be "
                        "reloaded before its next use", position.state.session_id, error)


class Pipeline:
    """Loads sessions and saves their commands, for one store (see the module docstring)."""

    def __init__(
        self,
        backend: EventStoreBackend,
        *,
        snapshot_interval: int = SNAPSHOT_INTERVAL,
        snapshot_messages: int = SNAPSHOT_MESSAGES,
        publish: Publish,
        observe: Observe | None = None,
    ) -> None:
        self.backend = backend
        self.snapshot_interval = snapshot_interval
        self.snapshot_messages = snapshot_messages
        self._publish = publish
        self._observe = observe
        self.recovery = Recovery(self)
        """What a failed (or maybe failed) save leaves, and what the next one does about it."""

    def load(self, session_id: UUID) -> Position:
        """The position of a recorded session: latest snapshot + later events (E5).

        The snapshot is used only when its digest holds and the record at its version carries
        its chain value (ADR-0023); otherwise a warning is logged and the session is replayed
        from its first event — a snapshot is a cache, nothing is lost. A snapshot of another
        format is a miss, not damage (ADR-0074): replayed likewise, logged at INFO; the
        position then counts from version 0, so the next command past a due point replaces
        it. Every record read is checked (ADR-0024). Raises `SessionNotFound`,
        `CorruptRecord` (a damaged record).
        """
        # What a load builds stays alive (the state): a collection the allocations trigger
        # would only re-walk it (`paused_gc`).
        with paused_gc():
            try:
                position = self._load_from_snapshot(session_id)
            except (SnapshotMismatch, AnchorMismatch) as error:
                log.warning("session %s: snapshot not used, replaying every event: %s",
                            session_id, error)
                position = None
            if position is None:
                position = Position()
                self._catch_up(position, session_id, ZERO_CHAIN)
        if position.state.version == 0:
            raise SessionNotFound(f"no session {session_id} in this store")
        return position

    def _load_from_snapshot(self, session_id: UUID) -> Position | None:
        """The position from the latest snapshot and the events after it; None: no snapshot,
        or one of another format (a miss)."""
        try:
            snapshot = self.backend.load_snapshot(session_id)
        except CorruptRecord as error:  # unsealing failed: the snapshot bytes are damaged
            raise SnapshotMismatch(str(error), session_id=str(session_id)) from error
        if snapshot is None:
            return None
        version, payload = snapshot
        decoded = decode_snapshot(payload, session_id=session_id, version=version)
        if decoded is None:
            log.info("session %s: the snapshot at version %d is in format %s, not %d (a miss): "
                     "replaying every event; the next snapshot due replaces it", session_id,
                     version, snapshot_format(payload), SNAPSHOT_FORMAT)
            return None
        state, chain = decoded
        position = Position(state, chain, version, state.next_position)
        self._catch_up(position, session_id, chain)
        return position

    def _catch_up(self, position: Position, session_id: UUID, anchor: bytes) -> None:
        """Evolve ``position`` with the checked events after its version."""
        state = position.state
        read = self.backend.read_with_chain(
            session_id, after_version=state.version, prev_chain=anchor
        )
        # Decoded by the store's codec: `Event`s alone, unchecked as in `unchecked_events`.
        for event, event_chain in cast("list[tuple[Event, bytes]]", read):
            older = None
            if isinstance(event, MessagePopped) and event.position < state.index.base:
                # A pop of a summarised message reads its turn from the log (rare: the
                # whole chat window was popped first).
                older = log_items(self.backend, state, state.region_span)
            evolve(state, event, older)
            position.chain = event_chain

    def current(self, position: Position) -> Position:
        """``position``, reloaded first when it is stale, caught up when it is behind (reloaded
        when its last record is no longer what it read); raises what the reload raises
        (`StoreUnavailable` while the store cannot be read: nothing unstored is served)."""
        if position.stale:
            self.reload(position)
        elif position.behind:
            try:
                self._catch_up(position, position.session_id, position.chain)
            except AnchorMismatch:
                # The record the position ends at no longer carries its chain (the log was
                # re-chained, or edited): stand where a load says (it checks what it reads).
                self.reload(position)
            position.behind = False
        return position

    def save(
        self, position: Position, command: Command, summarize: Summarize | None = None,
        decided: Callable[[], None] | None = None,
    ) -> Batch:
        """Run ``command`` and record what it decided; the batch recorded (maybe empty).

        ``decided``: called once the command is decided and its batch is ready to commit
        (when the backend says so, `BeforeCommit.committing`), the position's state already the
        decided one; a caller may start work on that state while the database commits
        (ADR-0093). What it starts is valid only when `save` returns: a failed write leaves
        the state to reload.

        The store's head is not read first: the position knows it (the chain returned by its
        own last append or by its load), and a record another writer made at the same version
        fails the insert on the (session, version) key -> `ConcurrencyConflict` (ADR-0035).
        After a conflict, the next `CONTENDED_HEAD_CHECKS` commands do read the head first: a
        session another writer moved on then raises `ConcurrencyConflict` before anything is
        decided and only catches up before its next use.

        The command is decided on a clone of the state (`SessionState.clone`, ADR-0094), which
        becomes the position's state once its batch is recorded. When the decision fails, or
        the append fails with nothing stored (`ConcurrencyConflict`, `StoreUnavailable`), the
        position keeps its state as it was, the stored one: it only catches up on what
        others recorded before its next use, instead of reloading its snapshot and tail. An
        append whose outcome is unknown (`AppendInDoubt`, or an interruption inside it) marks
        the position to be reloaded. Either way nothing of a failed command is served, and a
        retry decides on the newest state.

        After an `AppendInDoubt` the next command settles the doubt first (`Recovery.before`): a
        retry of the same command whose batch was stored returns that batch, recorded once.
        """
        settled = self.recovery.before(position, command)
        if settled is not None:
            return settled
        kept = position.state
        position.state = kept.clone()
        try:
            batch = run(position.state, command, summarize)
        except BaseException:
            position.state = kept  # nothing was written: the stored state stands
            raise
        if not batch.events:
            position.state = kept  # nothing decided: the clone equals it
            return batch
        try:
            position.chain = self.backend.append(
                position.session_id, batch.events, prev_chain=position.chain, head_known=True,
                told=decided,
            )
        except BaseException as error:
            self.recovery.failed(position, command, batch, kept, error)
            raise
        self._take_snapshot(position)
        self._notify(position, batch.events)
        return batch

    def decide(
        self, position: Position, command: Command, summarize: Summarize | None = None
    ) -> Batch:
        """Apply ``command`` to the position's state in memory only; the batch it produced
        (`Store.read_state`: a position of its own, dropped when this raises; `save` decides
        on a clone instead). ``summarize``: the runtime's summarizer, asked between two
        decisions (`run`)."""
        return run(position.state, command, summarize)

    def _take_snapshot(self, position: Position) -> None:
        state = position.state
        # A restore replays the tail after the snapshot, and its messages are what it pays
        # for (decoding them, indexing their tokens): bound them, and the events too, since a
        # tail of requests and trims costs something as well (ADR-0058).
        events = state.version - position.snapshot_version
        messages = state.next_position - position.snapshot_position
        if events < self.snapshot_interval and messages < self.snapshot_messages:
            return
        try:
            payload = encode_snapshot(state, position.chain)
            # Only the newest snapshot is ever read (ADR-0030): the older ones are dead bytes,
            # deleted in the transaction that saves it (one commit, ADR-0060).
            self.backend.replace_snapshot(position.session_id, state.version, payload)
        except TurnledgerError as error:  # a snapshot is a cache: losing one loses nothing
            log.warning("snapshot of session %s at version %d failed: %s",
                        position.session_id, state.version, error)
            return
        position.snapshot_version, position.snapshot_position = state.version, state.next_position

    def _notify(self, position: Position, events: Sequence[DomainEvent]) -> None:
        loop = position.state.loop
        for e in events:
            if isinstance(e, TrimDecided) and not loop.announces(e.reason):
                # R34: the legacy loop reports the turn limit in the logs only.
                log.warning(
                    "session %s: turn limit %d dropped %d messages (%d turns), %d turns kept",
                    position.session_id, e.limit, e.dropped_messages, e.dropped_turns,
                    e.kept_turns,
                )
        notices = [e for e in events if isinstance(e, HistoryTrimmed)]
        if notices:
            self._publish(notices)
        if self._observe is not None:
            self._observe(events)

    def reload(self, position: Position) -> None:
        """Stand where the store says; the position stays stale when this raises."""
        position.stale = True
        session_id = position.state.session_id
        if session_id is None or not self.backend.read(session_id, upto_version=1):
            # Nothing of this session is recorded (a failed start): back to a blank state.
            position.move_to(Position())
            return
        position.move_to(self.load(session_id))
