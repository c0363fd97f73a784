"""`verify`: audit a store — tamper evidence, decodability, and the invariants of every session.

For each session, from its raw records (E2, E4, E6, E11, R18, R31-R34, R37):

1. the hash chain (ADR-0004, `turnledger.store.mapper.verify_chain`): edited, reordered,
   missing (versions must run 1, 2, 3, … without a gap), undecodable records, and in a keyed
   store records chained without the audit key — each record judged by the very check every
   read and restore makes (`TurnledgerMapper.check_link`, ADR-0063);
2. every record decodes (a `CorruptRecord` is a violation, never a crash); the fold stops at the
   first record that does not, since what follows it cannot be trusted;
3. the stream starts with `SessionStarted`, and folding it with the decider's `evolve` works;
4. every `RequestPrepared`: its messages, re-derived from the log (R27a), hash to the recorded
   digest (E6), have no split tool exchange and no orphan (the orphan sweep finds nothing, R37),
   hold at most one breadcrumb, right after the system messages (R31), and its estimate fits
   its window (R18);
5. every `TrimDecided` is followed, in the same decision, by `BreadcrumbInserted` +
   `HistoryTrimmed` that agree with it — except a legacy session's turn-limit trim, followed by
   neither (R31-R34); neither notice appears without its trim;
6. the latest snapshot is not past the last record (a snapshot ahead of the records means the
   newest records were deleted: the chain alone cannot show that), its chain value is the
   record's, and its whole state (profile, providers, route, legacy flag, window) equals the
   state folded from the records at its version (ADR-0023; a restore
   starts from it, E5) — a snapshot of a format older versions wrote is a miss a restore does
   not read, noted as not compared (ADR-0074);
7. the final views hold at most one breadcrumb, right after the system messages (R31).

Each finding is a `Finding` naming the session, the event position and the rule, its detail
bounded (`turnledger.domain.errors.bounded`); what was not checked, and why, is a finding too,
in the report's ``notes``, which do not fail the audit. The whole store is checked by the
database first (SQLite's integrity check) and, when damaged, audited from a salvage (`verify`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, assert_never, cast
from uuid import UUID

import attrs
from eventsourcing.persistence import StoredEvent

from turnledger.domain.compaction import cleared_item
from turnledger.domain.decider import SessionState, request_digest, summary_tokens
from turnledger.domain.errors import CorruptRecord, SessionNotFound, WrongKey, bounded
from turnledger.domain.events import (
    Audited,
    BreadcrumbInserted,
    Deciders,
    DomainEvent,
    Event,
    HistoryCleared,
    HistoryTrimmed,
    MessageAppended,
    MessagePopped,
    Removes,
    RequestPrepared,
    SessionForgotten,
    SessionStarted,
    ToolCallsRestored,
    ToolResultsCleared,
    TrimDecided,
    TurnsSummarized,
    UsageRecorded,
    View,
    unchecked_events,
)
from turnledger.domain.findings import Finding, ProblemKind, Rule, Violation
from turnledger.domain.messages import (
    ChatMessage,
    is_real_user_message,
    parse_tool_envelope,
    to_chat_messages,
)
from turnledger.domain.state import Summary
from turnledger.domain.sweep import (
    SweepResult,
    answered_ids,
    called_ids,
    pairs_among_themselves,
    sweep_orphans,
    with_calls,
)
from turnledger.domain.turns import is_system_item
from turnledger.domain.window import chat_messages_of
from turnledger.replay.timeline import FoldedState, audit_request, dumps
from turnledger.store.backend import EventStoreBackend, require_backend
from turnledger.store.codec import describe_error
from turnledger.store.mapper import paused_gc, verify_chain
from turnledger.store.salvage import STORE_WIDE, is_damage, salvage_sqlite
from turnledger.store.session import parse_session_id
from turnledger.store.snapshots import compare_snapshot, snapshot_format

__all__ = ["Rule", "VerifyReport", "Violation", "verify", "verify_salvaged"]

_INTEGRITY_LINES = 5  # lines of a database's own integrity check reported

Progress = Callable[[int, int | None], None]
"""``progress(done_events, total_events_or_None)``, called as sessions are checked."""




def _jsonable(finding: Finding) -> dict[str, Any]:
    return {"session_id": finding.session_id, "position": finding.position,
            "rule": finding.rule.value, "detail": finding.detail}


@attrs.frozen
class VerifyReport:
    """What `verify` checked and found; ``ok`` when nothing was found. ``notes``: what it did
    not check and why (an old-format snapshot, ADR-0074), whatever ``ok`` says."""

    sessions_checked: int
    events_checked: int
    violations: tuple[Finding, ...]
    seconds: float
    notes: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_jsonable(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "sessions_checked": self.sessions_checked,
            "events_checked": self.events_checked,
            "seconds": round(self.seconds, 3),
            "violations": [_jsonable(v) for v in self.violations],
            "notes": [_jsonable(n) for n in self.notes],
        }

    def to_json(self) -> str:
        """Canonical JSON (sorted keys); only ``seconds`` differs between two runs."""
        return dumps(self.to_jsonable())


def verify(
    backend: EventStoreBackend,
    session_ids: Iterable[UUID | str] | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """Audit every session of ``backend`` (or the given ones); see the module docstring.

    Never raises for what it finds in the data: damaged records are violations. An audit of
    the whole store (no ``session_ids``) first asks the database's own check
    (`EventStoreBackend.integrity_problems`, SQLite's ``integrity_check``); when that finds
    damage, or the library cannot even list or read the store (a damaged column or page),
    what can be read is salvaged (`turnledger.store.salvage`, a scan of the tables that
    trusts no index) and verified, and each unreadable row or region is a violation too.
    Sessions whose start record is damaged or gone are audited all the same.
    Raises `SessionNotFound` for a given id that is not a UUID or has no records,
    `StoreUnavailable` when the database fails.
    """
    require_backend(backend, "verify")
    if isinstance(session_ids, str | bytes | UUID):
        raise TypeError("session_ids must be a list of session ids, got one: pass [session_id]")
    began = time.perf_counter()
    path = backend.database.file_path  # a file can be salvaged row by row (SQLite)
    error: BaseException
    try:
        # The whole file's check, for an audit of the whole store: checking a few sessions
        # reads what their restore reads (O(those sessions), not O(store)).
        damaged = [] if session_ids is not None else backend.integrity_problems(_INTEGRITY_LINES)
        if not damaged or path is None:
            report = _verify(backend, session_ids, progress, began)
            found = [Finding(STORE_WIDE, 0, Rule.CORRUPT_RECORD,
                               f"the database's integrity check: {line}") for line in damaged]
            return attrs.evolve(report, violations=(*found, *report.violations))
        # Reads through a damaged index can miss rows without an error: trust no index.
        error = CorruptRecord(f"SQLite's integrity check finds damage below the records "
                              f"({damaged[0]})")
    except Exception as failure:
        if path is None or not is_damage(failure):
            raise
        error = failure
    keyring = backend.protection.keyring
    return verify_salvaged(
        path, error, session_ids, progress,
        key=None if keyring is None else keyring.master,
        audit_key=backend.protection.audit_key,
    )


def verify_salvaged(
    path: str,
    error: BaseException,
    session_ids: Iterable[UUID | str] | None = None,
    progress: Progress | None = None,
    *,
    key: bytes | None = None,
    audit_key: bytes | None = None,
) -> VerifyReport:
    """Verify what `salvage_sqlite` can read of the damaged SQLite file at ``path`` (with the
    store's ``key`` and ``audit_key`` when it is encrypted or keyed).

    ``error`` is why the store could not be read whole; it is the first violation, followed by
    one per unreadable row or region, then the findings on the salvaged sessions (a session
    that cannot be audited to its end is a finding too, never an exception).
    """
    began = time.perf_counter()
    with salvage_sqlite(path, key=key, audit_key=audit_key) as salvage:
        report = _verify(salvage.backend, session_ids, progress, began, salvaged=True)
    found = [
        Finding(STORE_WIDE, 0, Rule.CORRUPT_RECORD,
                  f"the store cannot be read whole ({_one_line(error)}); verified what could "
                  "be salvaged"),
        *(Finding(d.session_id, d.version, Rule.CORRUPT_RECORD, d.detail)
          for d in salvage.damage),
    ]
    return attrs.evolve(report, violations=(*found, *report.violations))


def _one_line(error: BaseException) -> str:
    return bounded(" ".join(str(error).split()) or type(error).__name__)


def _verify(
    backend: EventStoreBackend,
    session_ids: Iterable[UUID | str] | None,
    progress: Progress | None,
    began: float,
    *,
    salvaged: bool = False,
) -> VerifyReport:
    violations: list[Finding] = []
    notes: list[Finding] = []
    if session_ids is None:
        ids = list(backend.session_ids())
        total: int | None = backend.max_notification_id()
        for stray in backend.unlisted_sessions(ids):
            if isinstance(stray, UUID):
                ids.append(stray)  # its start record is damaged or gone: audited all the same
            else:
                violations.append(Finding(stray, 0, Rule.CORRUPT_RECORD, (
                    f"records whose session id {stray!r} is not a UUID: they belong to no "
                    "session (a damaged or edited originator_id)")))
        violations.extend(
            Finding(session, version, Rule.SNAPSHOT, detail)
            for session, version, detail in backend.stray_snapshots(ids)
        )
    else:
        ids = [parse_session_id(s) for s in session_ids]
        total = None
    if backend.protection.unkeyed_despite_audit_key:
        violations.append(Finding(
            STORE_WIDE, 0, Rule.KEYED_CHAIN,
            "an audit key was given but the store keeps an unkeyed sha256 chain: whoever can "
            "write the database can rewrite it unseen (a downgrade, or a store never moved to "
            "a keyed chain: `turnledger rechain --yes`)",
        ))
    done = 0
    for session_id in ids:
        audit = _audit_session(
            backend, session_id, asked=session_ids is not None, salvaged=salvaged
        )
        violations.extend(audit.violations)
        notes.extend(audit.notes)
        done += len(audit.records)
        if progress is not None:
            progress(done, total)
    return VerifyReport(
        sessions_checked=len(ids),
        events_checked=done,
        violations=tuple(violations),
        seconds=time.perf_counter() - began,
        notes=tuple(notes),
    )


def _audit_session(
    backend: EventStoreBackend, session_id: UUID, *, asked: bool, salvaged: bool
) -> _SessionVerifier:
    """The audit of one session, run: its findings, notes and records. In a salvaged copy,
    whatever stops the audit (a damaged keys table, a record no check foresaw) is one more
    finding."""
    records = backend.read_records(session_id)
    audit = _SessionVerifier(backend, session_id, records)
    if not records and asked:
        if not salvaged:
            raise SessionNotFound(f"no session {session_id} in this store")
        audit.report(0, Rule.CORRUPT_RECORD, "no record of this session could be salvaged")
        return audit
    try:
        with paused_gc():  # the fold keeps what it builds: collecting would free nothing
            audit.run()
    except WrongKey as error:  # mixed keys: a finding, never a crash of the audit
        audit.report(1, Rule.DATA_KEY, f"{error}; `turnledger rekey --old-key-file` with the "
                                       "key that wrapped it re-wraps it under the store's key")
    except Exception as error:
        if not salvaged:
            raise
        audit.report(0, Rule.CORRUPT_RECORD, f"the audit of this session stops: "
                                             f"{describe_error(error)}")
    return audit


def _describe_orphans(messages: Sequence[ChatMessage], swept: SweepResult[ChatMessage]) -> str:
    """Which orphans the sweep found: results without their call, calls without a result."""
    result_ids = {
        parsed[0]
        for m in messages
        if m.role == "tool" and (parsed := parse_tool_envelope(m.content)) is not None
    }
    results = [i for i in swept.orphan_tool_call_ids if i in result_ids]
    calls = [i for i in swept.orphan_tool_call_ids if i not in result_ids]
    parts = []
    if results:
        parts.append(f"tool results without their call: {', '.join(results)}")
    if calls:
        parts.append(f"tool calls without a result: {', '.join(calls)}")
    if len(results) + len(calls) < swept.removed:
        parts.append("duplicate or id-less tool messages")
    return "; ".join(parts)


@attrs.frozen
class _Expected:
    """A notice a trim calls for: ``kind`` at ``position`` (R31-R33)."""

    position: int
    kind: type[BreadcrumbInserted] | type[HistoryTrimmed]
    trim: TrimDecided


def _expected_followers(state: SessionState, trim: TrimDecided) -> list[_Expected]:
    if not state.loop.announces(trim.reason):
        return []  # R34: the legacy loop reports the turn limit in its logs only
    at = trim.originator_version
    return [_Expected(at + 1, BreadcrumbInserted, trim), _Expected(at + 2, HistoryTrimmed, trim)]




_AUDITED: Final = Deciders(Audited)
_REMOVES: Final = Deciders(Removes)


class _SessionVerifier:
    """The checks of one session, in one pass over its records."""

    def __init__(
        self, backend: EventStoreBackend, session_id: UUID, records: Sequence[StoredEvent]
    ) -> None:
        self.backend = backend
        self.session_id = session_id
        self.records = records
        self.violations: list[Finding] = []
        self.notes: list[Finding] = []
        self._seen: set[tuple[int, Rule]] = set()
        # The chat window's start and summary before the last trim (`_check_summarized`).
        self._before_trim: tuple[int, Summary | None] = (0, None)
        # Each prepared request's digest and estimate, by position (`_check_usage`).
        self._requests: dict[int, tuple[str, int]] = {}

    def report(self, position: int, rule: Rule, detail: str) -> None:
        self.violations.append(Finding(str(self.session_id), position, rule, detail))
        self._seen.add((position, rule))

    def run(self) -> None:
        mapper = self.backend.mapper
        if mapper.is_forgotten(self.session_id):
            # Erased content (ADR-0046): the chain over the ciphertext is all that can be
            # checked, and it must still hold.
            for problem in verify_chain(self.records, mapper, decode_events=False):
                self._chain_problem(problem)
            self._check_forget_recorded()
            return
        # One pass decodes every record the chain vouches for; the fold reuses those events.
        problems, decoded = mapper.audit_session(self.records)
        for problem in problems:
            self._chain_problem(problem)
        events, chains = self._decode(decoded)
        snapshot = self._snapshot()
        if not events:
            return
        first = events[0]
        if not isinstance(first, SessionStarted) or first.originator_version != 1:
            self.report(
                first.originator_version,
                Rule.SESSION_START,
                f"the stream starts with {type(first).__name__} at version "
                f"{first.originator_version}, not SessionStarted at version 1",
            )
            return
        state = self._fold(events, chains, snapshot)
        if state is not None:
            self._check_breadcrumb(
                state.version, to_chat_messages(state.conversation_view()), "conversation view"
            )
            self._check_breadcrumb(state.version, state.chat_view(), "chat view")

    def _check_forget_recorded(self) -> None:
        """A destroyed data key must be followed by `SessionForgotten` at the stream's end."""
        topic = self.backend.mapper.codec.topic_of(SessionForgotten)
        if self.records and self.records[-1].topic != topic:
            last = self.records[-1].originator_version
            self.report(
                last + 1, Rule.MISSING_RECORD,
                "the session's data key was destroyed but its stream does not end with "
                "SessionForgotten: an interrupted forget (run `turnledger forget` again, or "
                "`purge --yes`) or a changed keys table",
            )

    # -- records --

    def _chain_problem(self, problem: Finding) -> None:
        detail = problem.detail
        if problem.kind is ProblemKind.UNDECODABLE:
            detail = f"the record cannot be decoded ({detail})"
        if problem.kind in (ProblemKind.UNDECODABLE, ProblemKind.MISSING):
            detail += "; the events after it are not replayed"
        self.report(problem.position, problem.rule, f"{problem.kind}: {detail}")

    def _decode(
        self, decoded: Mapping[int, tuple[DomainEvent, bytes]]
    ) -> tuple[list[DomainEvent], list[bytes]]:
        """The events up to the first gap or the first record that does not decode (reported
        if the chain check did not already), with each record's stored chain value.

        ``decoded`` holds what the chain check decoded already (by ``id(record)``); only the
        other records are decoded here. What follows a missing or unreadable record cannot be
        folded meaningfully: every later view would be wrong, and reporting each consequence
        would bury the cause.
        """
        events: list[DomainEvent] = []
        chains: list[bytes] = []
        decode = self.backend.mapper.decode_record
        # A version below 1 was reported by the chain check; it is no position to fold at.
        numbered = [r for r in self.records if r.originator_version >= 1]
        for expected, record in enumerate(numbered, start=1):
            if record.originator_version != expected:
                if (expected, Rule.MISSING_RECORD) not in self._seen:
                    self.report(expected, Rule.MISSING_RECORD, f"version {expected} is missing")
                break
            found = decoded.get(id(record))
            if found is not None:
                events.append(found[0])
                chains.append(found[1])
                continue
            try:
                event, chain = decode(record)
            except CorruptRecord as error:
                version = record.originator_version
                if (version, Rule.CORRUPT_RECORD) not in self._seen:
                    self.report(version, Rule.CORRUPT_RECORD, str(error))
                break
            events.append(event)
            chains.append(chain)
        return events, chains

    def _snapshot(self) -> tuple[int, bytes] | None:
        try:
            snapshot = self.backend.load_snapshot(self.session_id)
        except CorruptRecord as error:
            self.report(error.version or 0, Rule.SNAPSHOT, f"unreadable snapshot: {error}")
            return None
        if snapshot is None:
            return None
        last = self.records[-1].originator_version if self.records else 0
        if snapshot[0] > last:
            self.report(
                last + 1,
                Rule.SNAPSHOT,
                f"the latest snapshot is at version {snapshot[0]} but the records end at "
                f"version {last}: the newest records were deleted",
            )
            return None
        return snapshot

    # -- the fold --

    def _fold(
        self,
        events: Sequence[DomainEvent],
        chains: Sequence[bytes],
        snapshot: tuple[int, bytes] | None,
    ) -> FoldedState | None:
        state = FoldedState()
        pending: list[_Expected] = []  # the notices the last trim still calls for
        for index, event in enumerate(unchecked_events(events)):  # the store's codec decoded them
            position = event.originator_version
            pending = self._check_follower(event, pending)
            self._check_removal(state, event)
            try:
                state.fold(event)
            except Exception as error:  # a verifier reports what breaks the fold, never dies
                self.report(
                    position,
                    Rule.REPLAY,
                    f"{type(event).__name__} cannot be applied: {type(error).__name__}: {error}",
                )
                return None
            if _AUDITED[event.__class__]:  # the others: no rule reads them alone
                pending = self._check_alone(state, cast("Audited", event), pending)
            if snapshot is not None and position == snapshot[0]:
                self._check_snapshot(state, chains[index], snapshot[1])
        for expected in pending:
            self.report(
                expected.position,
                Rule.TRIM_NOTICE,
                f"the trim at position {expected.trim.originator_version} must be followed by "
                f"{expected.kind.__name__}: the stream ends first",
            )
        return state

    def _check_alone(
        self, state: FoldedState, event: Audited, pending: list[_Expected]
    ) -> list[_Expected]:
        """The rules that read one event after the fold; returns the notices still expected.
        (A trim's notices, a pop and a clear are checked before the fold: `_check_follower`,
        `_check_removal`; `run` checks the start.)"""
        match event:
            case MessageAppended():
                pass  # checked with the request that sends it (`_check_request`)
            case RequestPrepared():
                self._check_request(state, event)
                self._requests[event.originator_version] = (event.digest, event.estimated_tokens)
            case TrimDecided():
                return _expected_followers(state, event)
            case UsageRecorded():
                self._check_usage(event)
            case _:
                assert_never(event)
        return pending

    def _check_usage(self, event: UsageRecorded) -> None:
        """A usage answers a request recorded before it: its position, digest and estimate
        are that request's (issue 35)."""
        if event.request_position is None:
            return  # a window an agent framework built its own request from: none recorded
        request = self._requests.get(event.request_position)
        said = (event.digest, event.estimated_tokens)
        if request == said:
            return
        what = ("no request" if request is None else
                f"a request with digest {request[0][:16]}… estimated at {request[1]} tokens")
        self.report(event.originator_version, Rule.DIGEST,
                    f"UsageRecorded answers the request at position {event.request_position} "
                    f"(digest {event.digest[:16]}…, estimated at {event.estimated_tokens} "
                    f"tokens); the log has {what} there")

    def _check_removal(self, state: FoldedState, event: Event) -> None:
        """A pop names the newest message the view showed; a clear, the log's next position.
        Only the events that remove, rewrite or bring back an item (`Removes`) are checked;
        a sweep's removals are the fold's (R36)."""
        if not _REMOVES[event.__class__]:
            return
        removes = cast("Removes", event)
        position = removes.originator_version
        match removes:
            case MessageAppended() | RequestPrepared():
                pass  # the most frequent events first: none of them removes a message
            case TrimDecided():  # removes none; what a summary after it must name (C6)
                self._before_trim = (state.chat.start, state.summary)
            case MessagePopped(position=popped, message=message):
                if state.newest_in_view(state.log) != (popped, message):
                    self.report(position, Rule.REPLAY, f"MessagePopped names log position "
                                f"{popped}, which is not the newest message the view showed")
            case ToolResultsCleared():
                self._check_cleared(state, removes)
            case ToolCallsRestored():
                self._check_restored(state, removes)
            case TurnsSummarized():
                self._check_summarized(state, removes)
            case HistoryCleared(next_position=next_position):
                if next_position != state.next_position:
                    self.report(position, Rule.REPLAY, f"HistoryCleared says the log goes on "
                                f"at {next_position}, the log is at {state.next_position}")
            case _:
                assert_never(removes)

    def _check_cleared(self, state: FoldedState, event: ToolResultsCleared) -> None:
        """Each cleared item is the log's item with its results replaced by placeholders
        (`cleared_item`), at a position the chat view shows (issue 24)."""
        positions = tuple(p for p, _ in event.rewritten)
        if positions != event.positions:
            self.report(event.originator_version, Rule.REPLAY, "ToolResultsCleared names "
                        f"positions {event.positions} but rewrites {positions}")
        for position, item in event.rewritten:
            held = state.log.get(position)
            if position < state.chat.start or held is None or cleared_item(held) != item:
                self.report(event.originator_version, Rule.REPLAY, "ToolResultsCleared at "
                            f"log position {position} is not the log's item with its tool "
                            "results cleared")

    def _check_restored(self, state: FoldedState, event: ToolCallsRestored) -> None:
        """Each item brought back is one a sweep took from the newest turn (the state's
        ``restorable``), whole or with some of its calls left out; the result it follows
        was just appended and answers one of the calls (E5)."""
        version = event.originator_version
        answers = state.log.get(event.result_position)
        if event.result_position != state.next_position - 1 or not (
            set(answered_ids(answers)) & set(event.tool_call_ids)
        ):
            self.report(version, Rule.REPLAY, f"ToolCallsRestored names the result at log "
                        f"position {event.result_position}, which is not the message just "
                        f"appended or answers none of {', '.join(event.tool_call_ids)}")
        taken = dict(state.restorable)
        for position, item in event.restored:
            held = taken.get(position)
            if held is None or (
                item != held and with_calls(held, frozenset(called_ids(item))) != item
            ):
                self.report(version, Rule.REPLAY, f"ToolCallsRestored at log position "
                            f"{position} is not the log's item, whole or with calls left out")

    def _check_summarized(self, state: FoldedState, event: TurnsSummarized) -> None:
        """A summary names the whole turns the trim it follows dropped, pairing among
        themselves, and the digest of their messages as the log holds them (issue 24)."""
        version = event.originator_version
        start, previous = self._before_trim
        first, last = event.first_position, event.last_position
        covers = start if previous is None else previous.covers_from
        if (event.view is not View.CHAT or not state.chat.breadcrumb or first != start
                or last + 1 != state.chat.start or first > last or event.covers_from != covers):
            self.report(version, Rule.REPLAY, f"TurnsSummarized names log positions {first}-"
                        f"{last} (covering from {event.covers_from}), but the trim before it "
                        f"dropped {start}-{state.chat.start - 1} of the chat view (covering "
                        f"from {covers})")
            return
        items = [item for p in range(first, last + 1)
                 if (item := state.log.get(p)) is not None and not is_system_item(item)]
        digest = request_digest(chat_messages_of(items))
        if digest != event.digest:
            self.report(version, Rule.DIGEST, f"TurnsSummarized of log positions {first}-{last}"
                        f" says digest {event.digest[:16]}…, the log's messages hash to "
                        f"{digest[:16]}…")
        if not pairs_among_themselves(items):
            self.report(version, Rule.TOOL_PAIRING, f"TurnsSummarized covers log positions "
                        f"{first}-{last}, whose tool calls and results do not pair among "
                        "themselves")
        if event.tokens != summary_tokens(state, event.text):
            self.report(version, Rule.REPLAY, f"TurnsSummarized prices its summary at "
                        f"{event.tokens:,} tokens, the estimate is "
                        f"{summary_tokens(state, event.text):,}")

    # -- R31-R34: each trim and its notices --

    def _check_follower(self, event: Event, pending: list[_Expected]) -> list[_Expected]:
        """Check ``event`` against the notices a trim still expects; return those left."""
        position = event.originator_version
        if pending and pending[0].position == position:
            expected, rest = pending[0], pending[1:]
            if isinstance(event, expected.kind):
                self._check_agreement(event, expected.trim)
                return rest
            self.report(
                position,
                Rule.TRIM_NOTICE,
                f"the trim at position {expected.trim.originator_version} must be followed by "
                f"{expected.kind.__name__}, found {type(event).__name__}",
            )
            return []
        if isinstance(event, BreadcrumbInserted | HistoryTrimmed):
            self.report(
                position,
                Rule.TRIM_NOTICE,
                f"{type(event).__name__} does not follow a trim that calls for it (R31-R34)",
            )
        return []

    def _check_agreement(
        self, event: BreadcrumbInserted | HistoryTrimmed, trim: TrimDecided
    ) -> None:
        position = event.originator_version
        match event:
            case BreadcrumbInserted(view=view, before_position=before):
                if view is not trim.view or before != trim.first_kept_position:
                    self.report(
                        position,
                        Rule.TRIM_NOTICE,
                        f"breadcrumb before log position {before} of the {view.value} view, "
                        f"but the trim kept from {trim.first_kept_position} of the "
                        f"{trim.view.value} view",
                    )
            case HistoryTrimmed(dropped_messages=dropped, kept_turns=kept, reason=reason):
                if (dropped, kept, reason) != (
                    trim.dropped_messages, trim.kept_turns, trim.reason
                ):
                    self.report(
                        position,
                        Rule.TRIM_NOTICE,
                        f"HistoryTrimmed says {dropped} dropped, {kept} kept, {reason.value}; "
                        f"the trim decided {trim.dropped_messages} dropped, "
                        f"{trim.kept_turns} kept, {trim.reason.value}",
                    )
                said = (event.tokens_before, event.tokens_after, event.budget)
                decided = (trim.tokens_before, trim.tokens_after, trim.budget)
                if event.budget is not None and said != decided:  # None: a version 1 notice
                    self.report(
                        position,
                        Rule.TRIM_NOTICE,
                        "HistoryTrimmed says tokens {} -> {} of budget {}; the trim decided "
                        "{} -> {} of budget {}".format(*said, *decided),
                    )
            case _:
                assert_never(event)

    # -- E6, R18, R31, R37: each request --

    def _check_request(self, state: SessionState, event: RequestPrepared) -> None:
        position = event.originator_version
        audited = audit_request(state, event)
        if not audited.matches:
            self.report(
                position,
                Rule.DIGEST,
                f"the messages re-derived from the log hash to {audited.digest[:16]}…, the "
                f"request recorded {event.digest[:16]}… ({len(audited.messages)} messages "
                f"re-derived, {event.message_count} recorded)",
            )
        if event.estimated_tokens > event.window:
            self.report(
                position,
                Rule.CAPACITY,
                f"the request was prepared at ~{event.estimated_tokens:,} tokens, over its "
                f"window of {event.window:,}: it should have been rejected",
            )
        swept = sweep_orphans(audited.messages)
        if swept.removed or swept.orphan_tool_call_ids:
            self.report(
                position,
                Rule.TOOL_PAIRING,
                f"the request splits a tool exchange ({_describe_orphans(audited.messages, swept)}"
                "); the orphan sweep must find nothing in a request",
            )
        self._check_breadcrumb(position, audited.messages, "request")

    def _check_breadcrumb(
        self, position: int, messages: Sequence[ChatMessage], where: str
    ) -> None:
        crumbs = [i for i, m in enumerate(messages) if m.synthetic]
        if len(crumbs) > 1:
            self.report(
                position, Rule.BREADCRUMB, f"the {where} holds {len(crumbs)} breadcrumbs"
            )
            return
        if not crumbs:
            return
        at = crumbs[0]
        # Last is allowed: `MessagePopped` may have removed every kept turn after it.
        misplaced = any(m.role != "system" for m in messages[:at]) or not (
            at + 1 == len(messages) or is_real_user_message(messages[at + 1])
        )
        if misplaced:
            self.report(
                position,
                Rule.BREADCRUMB,
                f"the breadcrumb of the {where} is at index {at}: it must follow the system "
                "messages and precede the first kept turn",
            )

    # -- E5: the snapshot a restore starts from --

    def _check_snapshot(self, state: SessionState, chain: bytes, payload: bytes) -> None:
        """The snapshot's whole state (profile, providers, route, legacy flag, chain, window)
        must equal the state folded from the records at its version (ADR-0023); one of an
        old format is a miss no restore reads: noted, not compared (ADR-0074)."""
        position = state.version
        try:
            differing = compare_snapshot(payload, state, chain)
        except CorruptRecord as error:
            self.report(position, Rule.SNAPSHOT, str(error))
            return
        if differing is None:
            self.notes.append(Finding(
                str(self.session_id), position, Rule.SNAPSHOT,
                f"the snapshot is in format {snapshot_format(payload)}: old format, not "
                "compared (a restore replays the events instead; the next snapshot replaces it)",
            ))
            return
        if differing:
            self.report(
                position,
                Rule.SNAPSHOT,
                f"the snapshot differs from the state folded from the records in: "
                f"{', '.join(differing)}",
            )
