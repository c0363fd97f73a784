"""The counters of a session's events: one fold, one meaning per counter (E7).

`count` folds one event into a `Counters` value; `fold_counters` folds many. Every report that
counts events uses it: the analytics tables (``turnledger stats``), the session list
(``turnledger sessions``), the what-if totals and the per-request trims of ``turnledger what-if``.
Each report shows some of the counters under its own names (see `Counters` for which).

Pure: no I/O, deterministic (E12).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Final, assert_never, cast

import attrs

from turnledger.domain.events import (
    Counted,
    Deciders,
    DomainEvent,
    Event,
    HistoryTrimmed,
    MessageAppended,
    OrphansSwept,
    OverflowRecovered,
    OverflowUnrecoverable,
    RequestPrepared,
    RequestRejected,
    SummaryRefusal,
    SummaryRefused,
    ToolResultsCleared,
    TrimDecided,
    TrimReason,
    TurnsSummarized,
    UsageRecorded,
    unchecked_events,
)

__all__ = ["Counters", "Tally", "count", "event_time", "fold_counters"]


@attrs.frozen
class Counters:
    """What a run of events holds, counted once, each counter with one meaning.

    All counts start at 0 and only grow.

    - ``events``: events folded (a whole session's: its version).
    - ``appends``: messages appended (`MessageAppended`); ``turnledger sessions`` calls them
      ``messages``.
    - ``trims_token_budget``: trim decisions for the token budget (`TrimDecided` with reason
      ``token_budget``): proactive R24 trims and reactive R25 recoveries alike (R32).
    - ``trims_turn_limit``: trim decisions for the turn limit (reason ``turn_limit``, R28-R29),
      legacy trims included although they emit no `HistoryTrimmed` (R34).
    - ``messages_dropped``: real messages those trims dropped (sum of ``dropped_messages``), each
      trim counting what it dropped from its own view.
    - ``tokens_dropped``: estimated tokens those trims removed (sum of ``tokens_before -
      tokens_after``; a breadcrumb the trim inserts counts against it).
    - ``notices``: `HistoryTrimmed` notices sent to clients (R32-R33).
    - ``requests_prepared``: requests that passed the capacity check (`RequestPrepared`, R18);
      ``turnledger sessions`` shows this as ``requests``.
    - ``requests_rejected``: requests refused before sending (`RequestRejected`, R18); the
      what-if totals call them ``rejections`` and their ``requests`` are prepared + rejected.
    - ``overflow_recoveries``: provider overflows recovered by trimming (`OverflowRecovered`,
      R25); ``overflows_unrecoverable``: those with nothing left to trim
      (`OverflowUnrecoverable`).
    - ``orphan_sweeps``: sweeps that removed or rewrote something (`OrphansSwept`, R36, E5);
      ``orphans_removed``: the messages they removed (sum of ``removed``).
    - ``summaries``: summaries shown in place of dropped turns (`TurnsSummarized`, issue 24);
      ``summary_tokens_saved``: what they saved (sum of ``replaced_tokens - tokens``: the
      turns each covers, with the breadcrumb or previous summary it replaces, minus the
      summary's own tokens, C7).
    - ``summary_refusals_<reason>``: summaries not used, per `SummaryRefusal` (``raised``,
      ``timed_out``, ``oversize``, ``does_not_fit``, ``invalid``, ``unpaired``;
      `SummaryRefused`): the plain trim stood.
    - ``tool_result_clearings``: tool-result clearings (`ToolResultsCleared`, issue 24);
      ``tool_results_cleared``: the results they cleared (sum of ``len(tool_call_ids)``);
      ``tool_result_tokens_saved``: what they saved (sum of ``tokens_before -
      tokens_after``, C7).
    - ``usage_records``: provider usages recorded (`UsageRecorded`, issue 35): requests
      whose bill is known; ``billed_input_tokens``, ``cache_read_tokens``,
      ``cache_write_tokens``, ``billed_output_tokens``: the sums of what they billed (input
      counts every input token, cached ones included, `turnledger.domain.usage.Usage`);
      ``billed_estimated_tokens``: the sum of the estimates of the same requests, so
      ``billed_estimated_tokens / billed_input_tokens`` compares estimate and bill over the
      requests billed.
    - ``peak_estimated_tokens``: the largest estimate of any request, prepared or rejected (0
      before the first); ``peak_window``: the window of the first request that reached it
      (None before the first request).
    - ``last_event_at``: time of the latest event, ISO-8601 UTC text with microseconds (sorts
      as text), None before the first.
    """

    events: int = 0
    appends: int = 0
    trims_token_budget: int = 0
    trims_turn_limit: int = 0
    messages_dropped: int = 0
    tokens_dropped: int = 0
    notices: int = 0
    requests_prepared: int = 0
    requests_rejected: int = 0
    overflow_recoveries: int = 0
    overflows_unrecoverable: int = 0
    orphan_sweeps: int = 0
    orphans_removed: int = 0
    summaries: int = 0
    summary_tokens_saved: int = 0
    summary_refusals_raised: int = 0
    summary_refusals_timed_out: int = 0
    summary_refusals_oversize: int = 0
    summary_refusals_does_not_fit: int = 0
    summary_refusals_invalid: int = 0
    summary_refusals_unpaired: int = 0
    tool_result_clearings: int = 0
    tool_results_cleared: int = 0
    tool_result_tokens_saved: int = 0
    usage_records: int = 0
    billed_input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    billed_output_tokens: int = 0
    billed_estimated_tokens: int = 0
    peak_estimated_tokens: int = 0
    peak_window: int | None = None
    last_event_at: str | None = None

    @property
    def trims(self) -> int:
        """Trim decisions of both reasons."""
        return self.trims_token_budget + self.trims_turn_limit

    def trims_by_reason(self) -> dict[str, int]:
        """Trim decisions per `TrimReason` value, every reason present, sorted by reason."""
        return {
            TrimReason.TOKEN_BUDGET.value: self.trims_token_budget,
            TrimReason.TURN_LIMIT.value: self.trims_turn_limit,
        }

    @property
    def summary_refusals(self) -> int:
        """Summaries not used, every reason together."""
        return sum(self.summary_refusals_by_reason().values())

    def summary_refusals_by_reason(self) -> dict[str, int]:
        """Summary refusals per `SummaryRefusal` value, every reason present, sorted."""
        return {reason.value: getattr(self, f"summary_refusals_{reason.value}")
                for reason in sorted(SummaryRefusal, key=lambda r: r.value)}

    @property
    def cache_hit_rate(self) -> float | None:
        """The share of billed input tokens read from the provider's cache (issue 35); None
        before a usage with input was recorded."""
        if not self.billed_input_tokens:
            return None
        return self.cache_read_tokens / self.billed_input_tokens

    @property
    def estimate_ratio(self) -> float | None:
        """The estimate of the billed requests over what they billed as input (1.0: exact;
        above 1: the estimate was high); None before a usage with input was recorded."""
        if not self.billed_input_tokens:
            return None
        return self.billed_estimated_tokens / self.billed_input_tokens

    @property
    def compaction_tokens_saved(self) -> int:
        """Tokens saved by summaries and tool-result clearings together (C7)."""
        return self.summary_tokens_saved + self.tool_result_tokens_saved


def count(counters: Counters, event: Event) -> Counters:
    """``counters`` with ``event`` folded in (see `Counters` for what each event adds)."""
    tally = Tally(counters)
    tally.add(event)
    return tally.counters()


def fold_counters(events: Iterable[DomainEvent], start: Counters | None = None) -> Counters:
    """Fold ``events``, in order, into ``start`` (no counts by default).

    Unchecked per event (a check would cost a fifth of the fold): a class outside `Event`
    raises ``AssertionError`` when it is reached.
    """
    tally = Tally(start)
    for event in unchecked_events(events):
        tally.add(event)
    return tally.counters()


def event_time(timestamp: datetime) -> str:
    """An event's time as the counters keep it (``last_event_at``): ISO-8601 UTC text with
    microseconds, so it sorts as text."""
    return timestamp.astimezone(UTC).isoformat(timespec="microseconds")


_FIELDS: Final = tuple(field.name for field in attrs.fields(Counters))
_COUNTED: Final = Deciders(Counted)


class Tally:
    """`Counters` being folded: the one home of what each event adds (`count` and
    `fold_counters` use it). Mutable, so a long fold (a projection's catch-up) does not
    build a new `Counters` per event; ``counters()`` gives the value so far."""

    __slots__ = (*_FIELDS, "_last")

    def __init__(self, start: Counters | None = None) -> None:
        start = Counters() if start is None else start
        for name in _FIELDS:
            setattr(self, name, getattr(start, name))
        self._last: datetime | None = None  # the newest event's time, as text on demand

    def add(self, event: Event) -> None:
        """Fold one event in; ``TypeError`` for a class nobody registered (`Deciders`).

        Every event counts in ``events``; those with counters of their own (`Counted`) add
        to them."""
        self.events += 1
        self._last = event.timestamp
        if not _COUNTED[event.__class__]:
            return
        counted = cast("Counted", event)
        match counted:
            case MessageAppended():
                self.appends += 1
            case TrimDecided():
                if counted.reason is TrimReason.TOKEN_BUDGET:
                    self.trims_token_budget += 1
                else:
                    self.trims_turn_limit += 1
                self.messages_dropped += counted.dropped_messages
                self.tokens_dropped += counted.tokens_before - counted.tokens_after
            case HistoryTrimmed():
                self.notices += 1
            case RequestPrepared() | RequestRejected():
                self._requested(counted)
            case OverflowRecovered():
                self.overflow_recoveries += 1
            case OverflowUnrecoverable():
                self.overflows_unrecoverable += 1
            case OrphansSwept():
                self.orphan_sweeps += 1
                self.orphans_removed += counted.removed
            case TurnsSummarized() | SummaryRefused() | ToolResultsCleared():
                self._compacted(counted)
            case UsageRecorded():
                self._billed(counted)
            case _:
                assert_never(counted)

    def _compacted(self, event: TurnsSummarized | SummaryRefused | ToolResultsCleared) -> None:
        """The compaction counters (issue 24, C7)."""
        match event:
            case TurnsSummarized():
                self.summaries += 1
                self.summary_tokens_saved += event.replaced_tokens - event.tokens
            case SummaryRefused():
                name = f"summary_refusals_{event.reason.value}"
                setattr(self, name, getattr(self, name) + 1)
            case ToolResultsCleared():
                self.tool_result_clearings += 1
                self.tool_results_cleared += len(event.tool_call_ids)
                self.tool_result_tokens_saved += event.tokens_before - event.tokens_after

    def _billed(self, event: UsageRecorded) -> None:
        """The provider usage counters (issue 35)."""
        self.usage_records += 1
        self.billed_input_tokens += event.input_tokens
        self.cache_read_tokens += event.cache_read_tokens
        self.cache_write_tokens += event.cache_write_tokens
        self.billed_output_tokens += event.output_tokens
        self.billed_estimated_tokens += event.estimated_tokens

    def _requested(self, event: RequestPrepared | RequestRejected) -> None:
        if isinstance(event, RequestPrepared):
            self.requests_prepared += 1
        else:
            self.requests_rejected += 1
        self._peak(event)

    def _peak(self, event: RequestPrepared | RequestRejected) -> None:
        # Strictly greater: the first request to reach the peak names its window.
        if self.peak_window is None or event.estimated_tokens > self.peak_estimated_tokens:
            self.peak_estimated_tokens = event.estimated_tokens
            self.peak_window = event.window

    def counters(self) -> Counters:
        """The counts so far."""
        if self._last is not None:
            self.last_event_at = event_time(self._last)
            self._last = None
        return Counters(**{name: getattr(self, name) for name in _FIELDS})

    # the slots, typed for mypy (see `Counters` for their meaning)
    events: int
    appends: int
    trims_token_budget: int
    trims_turn_limit: int
    messages_dropped: int
    tokens_dropped: int
    notices: int
    requests_prepared: int
    requests_rejected: int
    overflow_recoveries: int
    overflows_unrecoverable: int
    orphan_sweeps: int
    orphans_removed: int
    summaries: int
    summary_tokens_saved: int
    summary_refusals_raised: int
    summary_refusals_timed_out: int
    summary_refusals_oversize: int
    summary_refusals_does_not_fit: int
    summary_refusals_invalid: int
    summary_refusals_unpaired: int
    tool_result_clearings: int
    tool_results_cleared: int
    tool_result_tokens_saved: int
    usage_records: int
    billed_input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    billed_output_tokens: int
    billed_estimated_tokens: int
    peak_estimated_tokens: int
    peak_window: int | None
    last_event_at: str | None
