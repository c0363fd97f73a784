"""What-if replay: the recorded session re-decided under another runtime profile.

`what_if` takes a session's recorded events and re-runs what the runtime *asked for* — the
appends, the route selections, the request preparations and the overflow recoveries — through the
same decider (`execute`, ADR-0005) on a fresh in-memory `SessionState` whose `SessionStarted`
carries the other profile. The decisions (trims, breadcrumbs, notices, requests, rejections) are
made anew; the recorded ones only serve for the side-by-side report. Nothing is written anywhere.

How each recorded event is replayed:

- `SessionStarted` → `StartSession` with the what-if profile (same id, providers, route, kind);
  its own initial `RouteSelected` replaces the recorded one.
- `MessageAppended` → `AppendMessage` of the recorded message; the what-if
  ``max_tool_result_chars`` bounds the tool results the recording kept whole. A tool result the
  recording truncated (R38) is replayed as recorded, not truncated again: the original text is
  not in the log, and truncating the truncated text would only add a second marker.
- `RouteSelected` (not the initial one) → `SelectRoute` with the recorded reason.
- `RequestPrepared` / `RequestRejected` → `PrepareRequest` with the recorded purpose and the
  recorded tool and hook token overheads (R18); a rejection records only its total, whose
  overhead is the recorded estimate minus the recorded chat view's.
- `OverflowReported` → `RecoverFromOverflow` with the recorded error, but only when the what-if
  chat view is at least as large as the one the provider refused; a smaller one is counted as an
  avoided overflow (the provider is assumed to accept fewer tokens than it refused). It is
  replayed where its recorded batch ends, so that its trim reuses the summary (or refusal)
  the batch recorded (issue 24).
- `OrphansSwept` → `SweepOrphans`; `MessagePopped` → `PopMessage`; `HistoryCleared` →
  `ClearHistory`. Decision events (trims, breadcrumbs, notices, recoveries) are
  not replayed: they are what is being re-decided.

Summaries (issue 24, C8): where a what-if budget trim drops the same turns a recorded one
summarised (or refused to), the recorded outcome is reused and no summarizer is called. Where it
drops other turns, the ``summarizer`` passed to `what_if` (a `Summarizer` or a plain callable) is
called, under its time limit, exactly as a live session calls it: a failure is recorded as a
`SummaryRefused` of the what-if run, and the request still goes out. Without one, those trims
are the plain ones. Each request's row says which summaries were reused from the log and which
the passed summarizer made (`CompactionNote`).

Every command runs with its recorded timestamp, so the report is deterministic (E12) as long as
the passed summarizer, if any, answers the same turns with the same text.

A low water (`Compaction.low_water`, issue 35; the CLI's ``--low-water`` and
``compaction.low_water``) is re-decided like every other setting: the what-if requests are
prepared by the same steps, so its trims drop the same chunks as a live session's, and its
clearings wait for them. Comparing the trims per request of both sides shows how often each
profile changes the prefix a provider caches.

A session that recorded no request (an imported transcript, issue 8) has nothing to compare: a
model call is then simulated before every assistant message, where the runtime called the model.
The session is first re-run under its own profile with those requests added (the *recorded*
side), then under the other profile; the report says how many calls were simulated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Final, assert_never, cast

import attrs

from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.decider import (
    AppendMessage,
    ClearHistory,
    Command,
    PopMessage,
    PrepareRequest,
    RecordUsage,
    RecoverFromOverflow,
    SelectRoute,
    SessionState,
    StartSession,
    SummaryOutcome,
    SummaryPlan,
    SweepOrphans,
    plan_summary,
)
from turnledger.domain.decider import run as run_command
from turnledger.domain.events import (
    Deciders,
    DomainEvent,
    Event,
    HistoryCleared,
    MessageAppended,
    MessagePopped,
    OrphansSwept,
    OverflowRecovered,
    OverflowReported,
    OverflowUnrecoverable,
    Purpose,
    Replayed,
    RequestPrepared,
    RequestRejected,
    RouteReason,
    RouteSelected,
    SessionStarted,
    SummaryRefused,
    ToolResultsCleared,
    TurnsSummarized,
    UsageRecorded,
    as_event,
    unchecked_events,
)
from turnledger.domain.messages import AssistantToolCalls, Chat, ConversationMessage
from turnledger.domain.state import collect_summarised
from turnledger.domain.usage import Usage
from turnledger.projections.counters import Counters, count, fold_counters
from turnledger.replay.timeline import FoldedState, ReplayError, dumps, to_jsonable
from turnledger.store.summaries import Summarizer, SummaryFunction, as_summarizer, summary_outcome

__all__ = ["WhatIfReport", "replay_what_if", "what_if"]

FROM_LOG: Final = "log"
"""`CompactionNote.source`: a recorded summary or refusal, reused (no summarizer called)."""
FROM_SUMMARIZER: Final = "summarizer"
"""`CompactionNote.source`: made by the summarizer passed to the what-if."""
FROM_PROFILE: Final = "profile"
"""`CompactionNote.source`: decided without a summarizer (a tool-result clearing, or a range
with an unanswered call, which no summary may cover)."""


@attrs.frozen
class CompactionNote:
    """One compaction the what-if run decided for a request (issue 24).

    ``kind``: ``summary`` (`TurnsSummarized`), ``refused`` (`SummaryRefused`, ``reason``
    says why) or ``cleared`` (`ToolResultsCleared`, ``items`` results). ``source``: where the
    outcome came from (``log``, ``summarizer`` or ``profile``). ``first_position`` /
    ``last_position``: the log range it covers (a clearing: its first and last cleared
    result). ``tokens``: the summary's tokens, or the chat view's after a clearing;
    ``replaced_tokens``: what the summary replaces, or the view's before the clearing;
    ``saved``: the difference (0 for a refusal). ``event``: its position in the what-if run.
    """

    kind: str
    source: str
    event: int
    first_position: int
    last_position: int
    summarizer: str = ""
    tokens: int = 0
    replaced_tokens: int = 0
    items: int = 0
    reason: str = ""

    @property
    def saved(self) -> int:
        """Tokens the compaction saved (0 for a refusal)."""
        return 0 if self.kind == "refused" else self.replaced_tokens - self.tokens

    def describe(self) -> str:
        """One line, e.g. ``summary of log positions 2-17 reused from the log ('v1'), 40
        tokens for 812``."""
        span = f"log positions {self.first_position:,}-{self.last_position:,}"
        origin = {
            FROM_LOG: "reused from the log",
            FROM_SUMMARIZER: "made by the passed summarizer",
            FROM_PROFILE: "decided by the profile",
        }[self.source]
        if self.kind == "cleared":
            if self.first_position == self.last_position:
                span = f"log position {self.first_position:,}"
            return (f"{self.items:,} tool result(s) cleared at {span}, "
                    f"{self.replaced_tokens:,} -> {self.tokens:,} tokens")
        if self.kind == "refused":
            by = f" ({self.summarizer!r})" if self.summarizer else ""
            return f"summary of {span} refused ({self.reason}), {origin}{by}"
        return (f"summary of {span} {origin} ({self.summarizer!r}), {self.tokens:,} tokens "
                f"for {self.replaced_tokens:,}")


@attrs.frozen
class RequestOutcome:
    """One side (recorded or what-if) of one request.

    ``trims`` / ``dropped_messages``: the `TrimDecided` events (and the messages they dropped)
    since the previous request, this request's own preparation included. ``rejected``: the
    request did not fit the window and was not sent (R18).
    """

    message_count: int
    estimated_tokens: int
    window: int
    rejected: bool
    trims: int
    dropped_messages: int

    @property
    def outcome(self) -> str:
        """``"rejected"`` or ``"sent"``."""
        return "rejected" if self.rejected else "sent"


@attrs.frozen
class WhatIfRow:
    """One recorded request and what the other profile would have made of it."""

    index: int
    position: int
    purpose: Purpose
    recorded: RequestOutcome
    what_if: RequestOutcome
    same_messages: bool
    compactions: tuple[CompactionNote, ...] = ()
    """The what-if run's compactions since the previous request, this one's included."""


@attrs.frozen
class SideTotals:
    """The totals of one side: trims per reason, messages dropped, rejections, overflows.

    Folded by `turnledger.projections.counters` (see `Counters` for each meaning); ``requests``
    are the prepared and the rejected ones together, ``rejections`` the rejected ones.
    """

    requests: int
    trims_by_reason: dict[str, int] = attrs.field(hash=False)
    dropped_messages: int
    notices: int
    rejections: int
    overflow_recoveries: int
    overflows_unrecoverable: int
    summaries: int = attrs.field(default=0, kw_only=True)
    summary_refusals: int = attrs.field(default=0, kw_only=True)
    tool_result_clearings: int = attrs.field(default=0, kw_only=True)
    compaction_tokens_saved: int = attrs.field(default=0, kw_only=True)
    """Issue 24: see `Counters` (``summary_refusals``: every reason together,
    ``compaction_tokens_saved``: summaries and clearings together, C7)."""

    @classmethod
    def of(cls, counters: Counters) -> SideTotals:
        """The totals of one side's `Counters`: ``requests`` counts the prepared and the
        rejected ones, ``rejections`` the rejected ones."""
        return cls(
            requests=counters.requests_prepared + counters.requests_rejected,
            trims_by_reason=counters.trims_by_reason(),
            dropped_messages=counters.messages_dropped,
            notices=counters.notices,
            rejections=counters.requests_rejected,
            overflow_recoveries=counters.overflow_recoveries,
            overflows_unrecoverable=counters.overflows_unrecoverable,
            summaries=counters.summaries,
            summary_refusals=counters.summary_refusals,
            tool_result_clearings=counters.tool_result_clearings,
            compaction_tokens_saved=counters.compaction_tokens_saved,
        )

    @property
    def trims(self) -> int:
        return sum(self.trims_by_reason.values())

    def describe(self) -> str:
        """One line: ``5 trims (3 token_budget, 2 turn_limit), 120 messages dropped, …``."""
        reasons = ", ".join(f"{n:,} {r}" for r, n in sorted(self.trims_by_reason.items()) if n)
        trims = f"{self.trims:,} trims" + (f" ({reasons})" if reasons else "")
        compacted = ""
        if self.summaries or self.summary_refusals or self.tool_result_clearings:
            compacted = (
                f", {self.summaries:,} summaries, {self.summary_refusals:,} refused, "
                f"{self.tool_result_clearings:,} tool-result clearings, "
                f"{self.compaction_tokens_saved:,} tokens saved by compaction"
            )
        return (
            f"{trims}, {self.dropped_messages:,} messages dropped, "
            f"{self.rejections:,} of {self.requests:,} requests rejected, "
            f"{self.overflow_recoveries:,} overflow recoveries{compacted}"
        )


@attrs.frozen
class WhatIfReport:
    """Recorded vs what-if, request by request, with totals (E6 applied to another profile)."""

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "#",
        "position",
        "purpose",
        "recorded msgs",
        "recorded tokens",
        "recorded trims",
        "recorded",
        "what-if msgs",
        "what-if tokens",
        "what-if trims",
        "what-if",
    )

    session_id: str
    recorded_profile: RuntimeProfile
    profile: RuntimeProfile
    requests: tuple[WhatIfRow, ...]
    recorded: SideTotals
    what_if: SideTotals
    overflows_avoided: int
    simulated_requests: int | None = attrs.field(default=None, kw_only=True)
    """None: the requests are the recorded ones; a count: none was recorded, and a model call
    was simulated before each of that many assistant messages."""
    summarizer: str | None = attrs.field(default=None, kw_only=True)
    """The name of the summarizer passed to the what-if (None: recorded summaries only)."""
    window_note: str | None = attrs.field(default=None, kw_only=True)
    """When a route of either side declared no context window: which window its requests
    were judged against instead (`window_note`), else None."""

    @property
    def columns(self) -> tuple[str, ...]:
        """`COLUMNS`, the recorded side named ``simulated`` when no request was recorded (its
        requests are then the simulated ones under the recorded profile, issue 38)."""
        if self.simulated_requests is None:
            return self.COLUMNS
        return tuple(c.replace("recorded", "simulated") for c in self.COLUMNS)

    def rows(self) -> list[dict[str, str]]:
        """One row of display strings per request, keyed by `columns` in that order."""
        return [
            dict(zip(self.columns, (
                str(row.index),
                str(row.position),
                row.purpose.value,
                f"{row.recorded.message_count:,}",
                f"{row.recorded.estimated_tokens:,}",
                str(row.recorded.trims),
                row.recorded.outcome,
                f"{row.what_if.message_count:,}",
                f"{row.what_if.estimated_tokens:,}",
                str(row.what_if.trims),
                row.what_if.outcome,
            )))
            for row in self.requests
        ]

    def summary(self) -> str:
        """Two or three lines of totals: recorded, what-if, and avoided overflows if any."""
        lines = [f"recorded: {self.recorded.describe()}", f"what-if:  {self.what_if.describe()}"]
        if self.simulated_requests is not None:
            lines = [
                "no request was recorded in this session: a model call was simulated before "
                f"each of its {self.simulated_requests:,} assistant messages (where the runtime "
                "called the model), under the recorded profile and under the what-if one",
                f"simulated, recorded profile: {self.recorded.describe()}",
                f"simulated, what-if profile:  {self.what_if.describe()}",
            ]
        if self.window_note is not None:
            lines.append(self.window_note)
        if self.overflows_avoided:
            lines.append(
                f"{self.overflows_avoided:,} provider overflows would have been avoided "
                "(the what-if view stayed below the size the provider refused)"
            )
        notes = [note for row in self.requests for note in row.compactions
                 if note.kind != "cleared"]
        if notes or self.summarizer is not None:
            tally = Counter((note.kind, note.source) for note in notes)
            made = ("no summarizer passed" if self.summarizer is None else
                    f"{tally['summary', FROM_SUMMARIZER]:,} made by the passed summarizer "
                    f"{self.summarizer!r}")
            refused = sum(n for (kind, _), n in tally.items() if kind == "refused")
            lines.append(
                f"what-if summaries: {tally['summary', FROM_LOG]:,} reused from the log, "
                f"{made}; {refused:,} refused ({tally['refused', FROM_LOG]:,} refusal(s) "
                f"reused from the log)")
        return "\n".join(lines)

    def compaction_lines(self) -> list[str]:
        """One line per compaction of the what-if run, under the request it went with."""
        return [
            f"#{row.index} (position {row.position:,}): {note.describe()}"
            for row in self.requests
            for note in row.compactions
        ]

    def to_jsonable(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        simulated = {} if self.simulated_requests is None else {
            "simulated_requests": self.simulated_requests
        }
        passed = {} if self.summarizer is None else {"summarizer": self.summarizer}
        note = {} if self.window_note is None else {"window_note": self.window_note}
        return {
            **simulated,
            **passed,
            **note,
            "session_id": self.session_id,
            "recorded_profile": to_jsonable(self.recorded_profile),
            "profile": to_jsonable(self.profile),
            "requests": [to_jsonable(row) for row in self.requests],
            "totals": {
                "recorded": to_jsonable(self.recorded),
                "what_if": to_jsonable(self.what_if),
                "overflows_avoided": self.overflows_avoided,
            },
        }

    def to_json(self) -> str:
        """Canonical JSON of the report: the same events and profile give the same bytes (E12)."""
        return dumps(self.to_jsonable())


# --- replay -----------------------------------------------------------------------------------

def what_if(
    events: Sequence[DomainEvent],
    profile: RuntimeProfile,
    *,
    summarizer: Summarizer | SummaryFunction | None = None,
) -> WhatIfReport:
    """Re-decide a recorded session under ``profile``, in memory, and compare (see module doc).

    ``events`` are one session's recorded events, in order, from its `SessionStarted`.
    ``summarizer``: called for the turns a what-if budget trim drops that no recorded summary
    covers (C8; a plain callable is named as `Session.summarizer` names it); None: recorded
    summaries only. Writes nothing. Raises `ReplayError` when the events do not start with
    `SessionStarted`, and `TurnledgerError` if the decider refuses a recorded command under
    ``profile``; ``TypeError`` for a summarizer that is not callable.
    """
    return replay_what_if(events, profile, summarizer=summarizer).report


def _require_profile(profile: object) -> None:
    if not isinstance(profile, RuntimeProfile):
        raise TypeError(f"the what-if profile must be a RuntimeProfile, got "
                        f"{type(profile).__name__} (attrs.evolve(recorded_profile, ...) makes one)")


@attrs.frozen
class WhatIfRun:
    """A what-if replay with the two event streams it compared (the HTML report draws both).

    ``recorded`` are the recorded events, or, when the session recorded no request, the re-run
    under its own profile with the simulated requests; ``what_if`` are the events the other
    profile would have recorded. Both start with their `SessionStarted`.
    """

    report: WhatIfReport
    recorded: tuple[DomainEvent, ...] = attrs.field(repr=False)
    what_if: tuple[DomainEvent, ...] = attrs.field(repr=False)


def replay_what_if(
    events: Sequence[DomainEvent],
    profile: RuntimeProfile,
    *,
    summarizer: Summarizer | SummaryFunction | None = None,
) -> WhatIfRun:
    """`what_if`, keeping both sides' events; raises like `what_if`."""
    _require_profile(profile)
    passed = as_summarizer(summarizer)
    if not events or not isinstance(events[0], SessionStarted):
        raise ReplayError("a what-if replay needs a session's events from its SessionStarted")
    started = events[0]
    if profile.pricing is None:  # not chosen: the session prices as it was recorded (issue 21)
        profile = attrs.evolve(profile, pricing=started.profile.pricing)
    recorded = [as_event(event) for event in events]  # TypeError for a class nobody registered
    simulated: int | None = None
    if not any(isinstance(e, RequestPrepared | RequestRejected) for e in recorded):
        recorded, simulated = _with_simulated_requests(recorded, started)
    replay = _Replay(profile, passed)
    for event in recorded:  # every recorded outcome, also one recorded after the request
        if isinstance(event, TurnsSummarized | SummaryRefused):  # whose trim matches it
            replay.summaries.setdefault(event.first_position, event)
    for event in recorded:
        replay.replay(event)
    report = WhatIfReport(
        session_id=str(started.originator_id),
        recorded_profile=started.profile,
        profile=profile,
        requests=tuple(replay.rows),
        recorded=SideTotals.of(replay.recorded.counters),
        what_if=SideTotals.of(replay.what_if.counters),
        overflows_avoided=replay.avoided,
        simulated_requests=simulated,
        summarizer=None if passed is None else passed.name,
        window_note=window_note((("recorded", recorded), ("what-if", replay.events))),
    )
    return WhatIfRun(report, tuple(recorded), tuple(replay.events))


def window_note(sides: Iterable[tuple[str, Iterable[DomainEvent]]]) -> str | None:
    """What the requests of a route that declared no context window (R19) were judged
    against (R17's stand-in: ``max_context_tokens``, else 32,000), per side; None when every
    route selected declared one. Said by `what-if` and the report (issue 38)."""
    routes: dict[str, None] = {}
    windows: dict[str, dict[int, None]] = {}
    for name, events in sides:
        for event in events:
            if isinstance(event, RouteSelected) and event.capacity is None:
                routes[f"{event.route.provider}/{event.route.model}"] = None
                windows.setdefault(name, {})[event.window] = None
    if not routes:
        return None
    judged = "; ".join(f"{' or '.join(f'{w:,}' for w in found)} tokens under the {name} profile"
                       for name, found in windows.items())
    return (f"no context window was declared for {', '.join(routes)}: a request is judged "
            f"against the profile's max_context_tokens, else 32,000 (R17): {judged}")


def _is_assistant(item: ConversationMessage) -> bool:
    return isinstance(item, AssistantToolCalls) or (
        isinstance(item, Chat) and item.message.role == "assistant"
    )


def _with_simulated_requests(
    events: Sequence[Event], started: SessionStarted
) -> tuple[list[Event], int]:
    """The session re-run under its own profile with a request before each assistant message.

    Returns the events that run records and the number of requests it simulated.
    """
    replay = _Replay(started.profile)
    out: list[Event] = []
    simulated = 0
    for event in events:
        if isinstance(event, MessageAppended) and _is_assistant(event.message):
            out += unchecked_events(replay.run(PrepareRequest(0, 0, False, event.timestamp)))
            simulated += 1
        command = replay.command_for(event)
        if command is not None:
            out += [_as_recorded(e, event) for e in unchecked_events(replay.run(command))]
    return out, simulated


def _as_recorded(new: Event, recorded: Event) -> Event:
    """``new``, re-recorded from ``recorded``, keeping that a result was truncated (R38).

    Replaying a truncated result records it as given (no second truncation), which would
    otherwise lose ``original_chars`` and let the what-if side truncate it again.
    """
    if isinstance(new, MessageAppended) and isinstance(recorded, MessageAppended):
        return attrs.evolve(new, original_chars=recorded.original_chars)
    return new


@attrs.define
class _Side:
    """One side's counters, and their value at the previous request (for per-request trims)."""

    counters: Counters = attrs.field(factory=Counters)
    at_last_request: Counters = attrs.field(factory=Counters)

    def outcome(self, event: RequestPrepared | RequestRejected) -> RequestOutcome:
        """``event`` with the trims since the previous request; starts the next interval."""
        before, self.at_last_request = self.at_last_request, self.counters
        return RequestOutcome(
            message_count=event.message_count,
            estimated_tokens=event.estimated_tokens,
            window=event.window,
            rejected=isinstance(event, RequestRejected),
            trims=self.counters.trims - before.trims,
            dropped_messages=self.counters.messages_dropped - before.messages_dropped,
        )


_REPLAYED: Final = Deciders(Replayed)


class _Replay:
    """The recorded session and the what-if one, folded side by side, one event at a time."""

    def __init__(self, profile: RuntimeProfile, summarizer: Summarizer | None = None) -> None:
        self.profile = profile
        self.summarizer = summarizer  # asked where no recorded outcome matches (C8)
        # Where each summary outcome of the what-if run came from, by its range.
        self.origins: dict[tuple[int, int], str] = {}
        self.notes: list[CompactionNote] = []  # the compactions since the previous request
        self.recorded_state = FoldedState()
        self.state = SessionState()  # the what-if session
        self.recorded = _Side()
        self.what_if = _Side()
        self.rows: list[WhatIfRow] = []
        self.avoided = 0
        self.overflow: OverflowReported | None = None  # reported, its outcome not yet read
        self.events: list[DomainEvent] = []  # what the what-if session records
        self.log: dict[int, ConversationMessage | None] = {}  # its log's items, for its pops
        # The recorded summaries and refusals by their first position (issue 24): reused
        # where a what-if trim drops the same turns, also earlier than they were recorded
        # (the same turns, the same digest); no summarizer is called for them.
        self.summaries: dict[int, TurnsSummarized | SummaryRefused] = {}

    def replay(self, event: Event) -> None:
        """Run the command ``event`` records on the what-if side, then fold ``event`` itself."""
        if isinstance(event, RequestPrepared | RequestRejected):
            self.request(event)
        else:
            command = self.command_for(event)
            if command is not None:
                self.run(command)
        if isinstance(event, TurnsSummarized | SummaryRefused):
            self.summaries.setdefault(event.first_position, event)
        self.recorded.counters = count(self.recorded.counters, event)
        self.recorded_state.fold(event)

    def recorded_summary(self, plan: SummaryPlan) -> SummaryOutcome | None:
        """The recorded outcome of the trim that drops the same turns: a summary (same range
        and digest) or a refusal. A recorded range wider than ``plan`` (the recording's
        summary did not fit and it dropped more) is the plan of the outcome."""
        found = self.summaries.get(plan.first_position)
        if found is None or found.last_position < plan.last_position:
            return None
        if found.last_position > plan.last_position:
            wider = plan_summary(self.state, plan.target, kept_start=found.last_position + 1)
            if wider is None:
                return None
            plan = wider
        match found:
            case TurnsSummarized(digest=digest, text=text) if digest == plan.digest:
                return SummaryOutcome(plan, found.summarizer, text=text)
            case SummaryRefused(reason=reason, detail=detail):
                return SummaryOutcome(plan, found.summarizer, refusal=reason, detail=detail)
        return None

    def summarize(self, plan: SummaryPlan) -> SummaryOutcome | None:
        """The recorded outcome for ``plan``, else the passed summarizer's (C8), else None."""
        outcome = self.recorded_summary(plan) if self.summaries else None
        if outcome is not None:
            self.origins[outcome.plan.first_position, outcome.plan.last_position] = FROM_LOG
            return outcome
        if self.summarizer is None:
            return None
        self.origins[plan.first_position, plan.last_position] = FROM_SUMMARIZER
        return summary_outcome(self.summarizer, plan)  # under its limit; failures refuse

    def run(self, command: Command) -> list[DomainEvent]:
        asks = self.summaries or self.summarizer is not None
        self.origins = {}
        new = run_command(self.state, command, self.summarize if asks else None).events
        self.events += new
        collect_summarised(self.log, new)
        self.what_if.counters = fold_counters(new, self.what_if.counters)
        self.notes += [n for n in map(self.note, unchecked_events(new)) if n is not None]
        return new

    def note(self, event: Event) -> CompactionNote | None:
        """The `CompactionNote` of a compaction event of the what-if run (None: not one)."""
        at = event.originator_version
        match event:
            case TurnsSummarized():
                return CompactionNote(
                    "summary", self.origin(event), at, event.first_position,
                    event.last_position, event.summarizer, event.tokens,
                    event.replaced_tokens)
            case SummaryRefused():
                return CompactionNote(
                    "refused", self.origin(event), at, event.first_position,
                    event.last_position, event.summarizer, reason=event.reason.value)
            case ToolResultsCleared():
                return CompactionNote(
                    "cleared", FROM_PROFILE, at, min(event.positions, default=0),
                    max(event.positions, default=0), tokens=event.tokens_after,
                    replaced_tokens=event.tokens_before, items=len(event.tool_call_ids))
        return None

    def origin(self, event: TurnsSummarized | SummaryRefused) -> str:
        return self.origins.get((event.first_position, event.last_position), FROM_PROFILE)

    def overflow_recovery(self) -> RecoverFromOverflow | None:
        """The recovery of the overflow reported last, when the what-if chat view is at least
        as large as the one the provider refused; otherwise an avoided overflow."""
        reported, self.overflow = self.overflow, None
        if reported is None:
            return None  # a log without its report: nothing to re-decide
        if self.state.chat_tokens() >= reported.estimated_tokens:
            return RecoverFromOverflow(reported.error, reported.timestamp)
        self.avoided += 1
        return None

    def command_for(self, event: Event) -> Command | None:
        """The command a recorded non-request event stands for (None: nothing to replay).

        Only the events a what-if replays (`Replayed`) stand for one; the others are
        outcomes (of a command, of `Store.forget`) the what-if side decides on its own, or
        change nothing a request carries."""
        if not _REPLAYED[event.__class__]:
            return None
        replayed = cast("Replayed", event)
        match replayed:
            case MessageAppended(message=message, original_chars=original):
                # A result the recording truncated is replayed as recorded (R38): the original
                # text is not in the log.
                return AppendMessage(message, replayed.timestamp, truncate=original is None)
            case OrphansSwept():
                return SweepOrphans(replayed.timestamp)
            case RouteSelected(reason=reason) if reason is not RouteReason.INITIAL:
                return SelectRoute(replayed.route, reason, replayed.timestamp)
            case RouteSelected():
                pass  # the initial route: `StartSession` selects it
            case OverflowReported():
                # Replayed at the end of its recorded batch (`OverflowRecovered` or
                # `OverflowUnrecoverable`), once the summary or refusal that batch recorded
                # is known (issue 24): its trim reuses it as a budget trim's does.
                self.overflow = replayed
            case OverflowRecovered() | OverflowUnrecoverable():
                return self.overflow_recovery()
            case MessagePopped():
                return PopMessage(replayed.timestamp, summarised=self.log)
            case HistoryCleared():
                return ClearHistory(replayed.timestamp)
            case SessionStarted():
                return StartSession(
                    replayed.originator_id, self.profile, tuple(replayed.providers),
                    replayed.route, replayed.legacy, replayed.timestamp, recorded=True,
                )
            case UsageRecorded():
                # The provider's bill of a recorded request, as recorded: what an estimate
                # learns from on either side (issue 35, `Compaction.learn_estimate`).
                usage = Usage(replayed.api, replayed.input_tokens, replayed.output_tokens,
                              replayed.cache_read_tokens, replayed.cache_write_tokens)
                return RecordUsage(usage, replayed.request_position, replayed.digest,
                                   replayed.estimated_tokens, replayed.timestamp)
            case _:
                assert_never(replayed)
        return None

    def request(self, event: RequestPrepared | RequestRejected) -> None:
        """Prepare the recorded request on the what-if side and add the row comparing both."""
        if isinstance(event, RequestPrepared):
            tool_tokens, hook_tokens = event.tool_tokens, event.hook_tokens
        else:  # a rejection records only its total: the rest is overhead
            tool_tokens = max(event.estimated_tokens - self.recorded_state.chat_tokens(), 0)
            hook_tokens = 0
        final = event.purpose is Purpose.FINAL_SUMMARY
        decided = self.run(PrepareRequest(tool_tokens, hook_tokens, final, event.timestamp))[-1]
        assert isinstance(decided, RequestPrepared | RequestRejected)
        self.rows.append(
            WhatIfRow(
                index=len(self.rows) + 1,
                position=event.originator_version,
                purpose=event.purpose,
                recorded=self.recorded.outcome(event),
                what_if=self.what_if.outcome(decided),
                same_messages=self.recorded_state.chat_view() == self.state.chat_view(),
                compactions=tuple(self.notes),
            )
        )
        self.notes = []
