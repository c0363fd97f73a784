"""Where a session's requests stopped sharing their prefix, and what caused it (issue 35).

A provider serves from its cache the longest prefix a request shares with an earlier one. A
request of a session shares all of the previous request's messages unless something between
the two changed the front or the middle of the window: a trim dropped the oldest turns, a
clearing rewrote older tool results, a summary replaced the breadcrumb, a route switch moved
the session to another model (another cache), a sweep, a pop or a clear removed messages.
Each such request is a **cache break**, named by the first event that caused it; everything
else that happened between (appends) only extends the prefix.

`cache_breaks` reads it from the log, per session: a fold over one session's events, pure.
Recorded usages (`UsageRecorded`) say what the provider actually served; this says why it
could not serve more.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import attrs

from turnledger.domain.events import (
    DomainEvent,
    HistoryCleared,
    MessagePopped,
    OrphansSwept,
    RequestPrepared,
    RouteReason,
    RouteSelected,
    ToolResultsCleared,
    TrimDecided,
    TurnsSummarized,
)

__all__ = ["CAUSES", "CacheBreak", "cache_breaks"]

CAUSES: Final = ("trim", "clearing", "summary", "route", "sweep", "pop", "clear")
"""What can break the prefix, in the words `CacheBreak.cause` uses."""


@attrs.frozen
class CacheBreak:
    """The request at ``position`` does not share the previous request's whole prefix:
    ``cause`` (one of `CAUSES`) at ``cause_position`` changed it first."""

    position: int
    cause: str
    cause_position: int


def _cause(event: DomainEvent) -> str | None:
    match event:
        case TrimDecided():
            return "trim"
        case ToolResultsCleared():
            return "clearing"
        case TurnsSummarized():
            return "summary"
        case RouteSelected(reason=reason) if reason is not RouteReason.INITIAL:
            return "route"
        case OrphansSwept():
            return "sweep"
        case MessagePopped():
            return "pop"
        case HistoryCleared():
            return "clear"
    return None


def cache_breaks(events: Iterable[DomainEvent]) -> list[CacheBreak]:
    """The cache breaks of one session's events, in order (the first request breaks
    nothing: there is no earlier request to share with)."""
    found: list[CacheBreak] = []
    requested = False
    pending: tuple[str, int] | None = None
    for event in events:
        if isinstance(event, RequestPrepared):
            if requested and pending is not None:
                found.append(CacheBreak(event.originator_version, *pending))
            requested, pending = True, None
            continue
        if pending is None:
            cause = _cause(event)
            if cause is not None:
                pending = (cause, event.originator_version)
    return found
