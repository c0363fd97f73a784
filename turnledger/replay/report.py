"""The HTML report of a recorded session: one self-contained file, no script (issue 13).

`report(events)` folds a session's events once and draws, as inline SVG and CSS:

1. **Context over time**: one point per request, prepared or rejected (x = request number, y =
   its estimated tokens), the token budget and the model window as step lines, route switches as
   vertical rules, and one lane of markers per kind of decision: token-budget trims, turn-limit
   trims, overflow recoveries, orphan sweeps, and the requests that break the provider's cache
   (`cache_breaks`). Rejected requests are crosses on the line, a run of them labelled once.
   Every point and marker carries its event's position in an SVG ``<title>`` (the hover text)
   and links to the timeline row of that event. Visible labels never overlap and stay inside
   the plot (`_Labels`: a label with no room is left to the hover text); a model window far
   above every request is said, not drawn to scale. A session that recorded no request (an
   imported transcript) is drawn by turns: the estimated tokens recorded by each turn's end.
2. **Turns**: the log's turns as a strip, widths proportional to their estimated tokens, coloured
   by their fate (kept, or dropped by which trim at which event; dropped and shown as a runtime's
   summary, naming its `TurnsSummarized`, issue 24); turns with images, large tool results or
   cleared tool results (`ToolResultsCleared`) are flagged above the strip.
3. **Timeline**: one row per event with its one-line summary (`summarize`, as in ``replay``).
4. **Totals**: the session's `Counters` (the fold behind ``turnledger stats``).
5. With ``what_if``: the chart and strip of the same session re-decided under another profile
   (`replay_what_if`), side by side with the recorded ones, on the same scales; both sides are
   labelled simulated when the session recorded no request, and a route that declared no
   context window is said (`window_note`).

Large sessions stay readable and fast (ADR-0051): past `POINT_BUDGET` requests the chart draws
buckets of consecutive requests (their min-max band and peak), markers closer than `CELL_PX`
in a lane merge into one that shows their count, turns narrower than `MIN_TURN_PX` merge with
their neighbours, and past `TIMELINE_FULL` events runs of plain appends and prepared requests
collapse into one timeline row (decisions always keep their own row).

Everything taken from the store is escaped (ADR-0050): control characters as in the terminal
output (`printable`), then ``html.escape(quote=True)``; the page has no script and a Content
Security Policy that forbids fetching anything, so it reads offline and cannot call out. The
output depends on the events (and profile) only: the same input gives the same bytes (E12).
"""

from __future__ import annotations

import bisect
import html
import math
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Final, assert_never, cast

import attrs

from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.estimate import IMAGE_MARKER_PREFIX, image_count
from turnledger.domain.events import (
    BreadcrumbInserted,
    Deciders,
    DomainEvent,
    Drawn,
    HistoryCleared,
    HistoryTrimmed,
    MessageAppended,
    MessagePopped,
    OrphansSwept,
    OverflowRecovered,
    OverflowReported,
    OverflowUnrecoverable,
    RequestPrepared,
    RequestRejected,
    RouteReason,
    RouteSelected,
    SessionStarted,
    SummaryRefused,
    ToolCallsRestored,
    ToolResultsCleared,
    TrimDecided,
    TrimTrigger,
    TurnsSummarized,
    View,
)
from turnledger.domain.messages import (
    Chat,
    ConversationMessage,
    ToolResults,
    to_chat_messages,
)
from turnledger.domain.turns import is_turn_start_item
from turnledger.files import write_private
from turnledger.projections.counters import Counters, fold_counters
from turnledger.replay.cache_breaks import CacheBreak, cache_breaks
from turnledger.replay.timeline import ReplayError, item_tokens, printable, summarize
from turnledger.replay.whatif import WhatIfReport, replay_what_if, window_note
from turnledger.store.summaries import Summarizer, SummaryFunction

__all__ = ["POINT_BUDGET", "TIMELINE_FULL", "report"]

POINT_BUDGET: Final = 400
"""Requests drawn one by one; more are drawn as that many buckets at most."""
CELL_PX: Final = 6.0
"""Markers of one lane closer than this (in chart pixels) merge into one counted marker."""
MIN_TURN_PX: Final = 2.0
"""Turns narrower than this in the strip merge with their neighbours."""
TIMELINE_FULL: Final = 1_500
"""Sessions with more events collapse runs of plain appends and requests in the timeline."""
TIMELINE_ROWS: Final = 2_000
"""Past this many rows, routine trims collapse too (see `_timeline_rows`)."""
TIMELINE_SEGMENTS: Final = 250
"""A collapsed run covers at most this fraction (1/N) of a large session's events."""
COLLAPSE_RUN: Final = 4
"""The shortest run of plain events that collapses into one timeline row."""
LARGE_RESULT_TOKENS: Final = 1_000
"""A tool result this large (estimated tokens), or one truncated by R38, is flagged."""

_WIDTH: Final = 1000  # SVG user units across one chart; CSS scales them to the page
_SIDE_WIDTH: Final = 660  # across each of two charts side by side: their text stays legible
_LEFT, _RIGHT, _TOP, _PLOT_H, _LANE_H = 122, 16, 26, 230, 20
_PAD: Final = 9.0  # inside the plot, left and right: a marker at either end stays inside it
_PAD_Y: Final = 7.0  # and above its bottom edge: a point at 0 tokens too
_LANES: Final = (
    ("token_budget", "trim: token budget"),
    ("turn_limit", "trim: turn limit"),
    ("overflow", "overflow recovery"),
    ("sweep", "orphan sweep"),
    ("cache", "cache break"),
)
_WINDOW_SCALE: Final = 3
"""A token budget more than this many times the largest request, or a model window more than
this many times that or the budget, is not drawn to scale: the chart says it instead (a
200,000-token window would flatten an 8,000-token budget)."""
_COLUMN_PX: Final = 50.0  # the width of `_Labels`' columns
_EM: Final = 0.62  # a generous average glyph width, in font sizes: labels are kept apart by it
_FATES: Final = {
    "kept": "kept",
    "token_budget": "dropped by a token-budget trim",
    "turn_limit": "dropped by a turn-limit trim",
    "overflow": "dropped by an overflow recovery",
    "cleared": "removed by a clear",
    "summarised": "dropped by a token-budget trim and shown as a summary",
}
_PLAIN: Final = (MessageAppended, RequestPrepared)
_ROUTINE: Final = (*_PLAIN, TrimDecided, BreadcrumbInserted, HistoryTrimmed)
_TITLE_VERSIONS: Final = 12  # event positions listed in a merged marker's hover text
_SWITCH_PX: Final = 20.0  # route switches closer than this share one rule


def _e(text: object) -> str:
    """Stored text made inert: controls escaped (`printable`), then HTML-escaped with quotes."""
    return html.escape(printable(str(text)), quote=True)


def _n(value: int) -> str:
    return f"{value:,}"


# --- the fold ---------------------------------------------------------------------------------

@attrs.frozen
class _Point:
    """One request: prepared, or rejected before it was sent (R18)."""

    number: int
    version: int
    tokens: int
    budget: int
    window: int
    rejected: bool
    event: DomainEvent = attrs.field(repr=False)

    @property
    def summary(self) -> str:
        return summarize(self.event)  # only for the points drawn one by one


@attrs.frozen
class _Mark:
    """One decision drawn in a lane; ``x`` in request units (between two requests: k + 0.5)."""

    kind: str
    x: float
    version: int
    event: DomainEvent = attrs.field(repr=False)
    said: str | None = None
    """The hover text when it is not the event's own summary (a cache break's cause)."""
    turn: float = 0.0
    """Where it sits on a turn axis (a session that recorded no request): after that many
    turns."""

    @property
    def summary(self) -> str:
        # only for the markers drawn one by one
        return summarize(self.event) if self.said is None else self.said


@attrs.define
class _Turn:
    """One turn of the log: a real user message and what followed it (R1)."""

    number: int
    start: int
    tokens: int = 0
    messages: int = 0
    images: int = 0
    large: int = 0
    preview: str = ""
    drops: dict[View, tuple[str, int, str]] = attrs.field(factory=dict)
    swept: int = 0
    popped: int = 0
    summary: tuple[int, str, int, int] | None = None
    """The `TurnsSummarized` whose range holds the turn: its event position, summarizer, and
    first and last log positions (issue 24)."""
    cleared_results: int = 0
    cleared_by: list[int] = attrs.field(factory=list)  # `ToolResultsCleared` positions

    @property
    def fate(self) -> str:
        """``kept``, or the kind of the first trim that dropped the turn from a view
        (``summarised`` when that trim's turns are shown as a summary)."""
        if not self.drops:
            return "kept"
        kind = min(self.drops.values(), key=lambda d: d[1])[0]
        return "summarised" if kind == "token_budget" and self.summary is not None else kind


_DRAWN: Final = Deciders(Drawn)


@attrs.define
class _Session:
    """What the report draws of one event stream."""

    points: list[_Point] = attrs.field(factory=list)
    marks: list[_Mark] = attrs.field(factory=list)
    switches: list[_Mark] = attrs.field(factory=list)
    turns: list[_Turn] = attrs.field(factory=list)
    starts: list[int] = attrs.field(factory=list)  # turns' start positions, kept for bisect
    head_tokens: int = 0
    budget: int = 0
    legacy: bool = False
    context: int = 0
    """The estimated tokens recorded so far (appends less pops; a clear starts again)."""
    turn_tokens: list[int] = attrs.field(factory=list)
    """`context` at the end of each turn, for a session that recorded no request."""
    dropped: dict[View, int] = attrs.field(factory=lambda: {View.CHAT: 0, View.CONVERSATION: 0})

    def mark(self, kind: str, event: DomainEvent) -> _Mark:
        """A decision drawn where it happened: after the requests (and the turns) so far."""
        return _Mark(kind, len(self.points) + 0.5, event.originator_version, event,
                     turn=len(self.turns) + 0.5)

    def cache_marks(self, found: Iterable[CacheBreak]) -> None:
        """The cache lane: a marker at each request that breaks the provider's cache."""
        numbers = {point.version: point for point in self.points}
        for found_break in found:
            point = numbers.get(found_break.position)
            if point is not None:
                self.marks.append(_Mark(
                    "cache", point.number, point.version, point.event,
                    said=(f"cache break: request {_n(point.number)} does not start with the "
                          f"previous request ({found_break.cause} at event "
                          f"{_n(found_break.cause_position)})")))

    def turn_ended(self) -> None:
        """The estimated tokens recorded so far, as the last turn's point (`turn_tokens`)."""
        if self.turns:
            self.turn_tokens.append(max(self.context, 0))

    def on_turn_axis(self) -> _Session:
        """This session drawn by turns (it recorded no request): its decisions at the turn
        they followed."""
        moved = [attrs.evolve(m, x=m.turn) for m in self.marks]
        return attrs.evolve(self, marks=moved,
                            switches=[attrs.evolve(m, x=m.turn) for m in self.switches])

    def fold(self, events: Iterable[DomainEvent]) -> _Session:
        """Draw ``events``; ``TypeError`` for a class nobody registered (`Deciders`)."""
        for event in events:
            if not _DRAWN[event.__class__]:  # TypeError for a class nobody registered
                continue  # drawn as the trim they go with, or as their timeline row alone
            drawn = cast("Drawn", event)
            match drawn:  # the most frequent events first
                case MessageAppended():
                    self.appended(drawn)
                case RequestPrepared() | RequestRejected():
                    self.request(drawn)
                case TrimDecided():
                    self.trimmed(drawn)
                case TurnsSummarized() | ToolResultsCleared() | OrphansSwept():
                    self.marked(drawn)
                case RouteSelected():
                    self.route(drawn)
                case MessagePopped():
                    self.popped(drawn)
                case HistoryCleared():
                    self.cleared(drawn)
                case OverflowUnrecoverable():
                    self.marks.append(self.mark("overflow", drawn))
                case SessionStarted():
                    self.legacy = drawn.legacy
                case _:
                    assert_never(drawn)
        self.turn_ended()
        return self

    def route(self, event: RouteSelected) -> None:
        self.budget = event.budget
        if event.reason is not RouteReason.INITIAL:
            self.switches.append(self.mark("route", event))

    def request(self, event: RequestPrepared | RequestRejected) -> None:
        # A rejection records no budget: the route's budget applied (R18).
        budget = event.budget if isinstance(event, RequestPrepared) else self.budget
        self.points.append(_Point(
            len(self.points) + 1, event.originator_version, event.estimated_tokens, budget,
            event.window, isinstance(event, RequestRejected), event,
        ))

    def appended(self, event: MessageAppended) -> None:
        item = event.message
        if is_turn_start_item(item):
            self.turn_ended()
            self.turns.append(_Turn(len(self.turns) + 1, event.position, preview=_first(item)))
            self.starts.append(event.position)
        tokens = item_tokens(item)
        self.context += tokens
        if not self.turns:
            self.head_tokens += tokens
            return
        turn = self.turns[-1]
        turn.tokens += tokens
        turn.messages += 1
        if _may_hold_images(item):
            turn.images += sum(
                image_count(m, current_turn=True) for m in to_chat_messages((item,))
            )
        if _is_tool_result(item) and (
            tokens >= LARGE_RESULT_TOKENS or event.original_chars is not None
        ):
            turn.large += 1

    def trimmed(self, event: TrimDecided) -> None:
        kind = "overflow" if event.trigger is TrimTrigger.OVERFLOW else event.reason.value
        self.marks.append(self.mark(kind, event))
        # The chat view never shows more than the conversation view (a conversation trim drags
        # it along), and a legacy session has one window for both.
        views = [View.CHAT, View.CONVERSATION] if self.legacy else [event.view]
        if event.view is View.CONVERSATION:
            views.append(View.CHAT)
        how = f"{kind.replace('_', '-')} trim at event {_n(event.originator_version)}"
        for view in dict.fromkeys(views):
            self._drop(view, event.first_kept_position, (kind, event.originator_version, how))

    def _drop(self, view: View, first_kept: int, drop: tuple[str, int, str]) -> None:
        at = self.dropped[view]
        while at < len(self.turns) and self.turns[at].start < first_kept:
            self.turns[at].drops.setdefault(view, drop)
            at += 1
        self.dropped[view] = at

    def swept(self, event: OrphansSwept) -> None:
        self.marks.append(self.mark("sweep", event))
        for position in event.positions:
            at = self._turn_at(position)
            if at >= 0:
                self.turns[at].swept += 1

    def marked(self, event: TurnsSummarized | ToolResultsCleared | OrphansSwept) -> None:
        """An event that marks turns it leaves in the log: a sweep, a summary, a clearing."""
        match event:
            case OrphansSwept():
                self.swept(event)
            case TurnsSummarized():
                self.summarised(event)
            case ToolResultsCleared():
                self.results_cleared(event)

    def summarised(self, event: TurnsSummarized) -> None:
        """The turns of the summary's range are shown as it (the first summary to cover a
        turn names it: a later one rolls it in from ``covers_from``)."""
        at = max(self._turn_at(event.first_position), 0)
        mark = (event.originator_version, event.summarizer, event.first_position,
                event.last_position)
        while at < len(self.turns) and self.turns[at].start <= event.last_position:
            if self.turns[at].start >= event.first_position and self.turns[at].summary is None:
                self.turns[at].summary = mark
            at += 1

    def results_cleared(self, event: ToolResultsCleared) -> None:
        """The turns holding the cleared results are flagged (the log keeps them)."""
        for position in event.positions:
            at = self._turn_at(position)
            if at >= 0:
                turn = self.turns[at]
                turn.cleared_results += 1
                if event.originator_version not in turn.cleared_by:
                    turn.cleared_by.append(event.originator_version)

    def _turn_at(self, position: int) -> int:
        """The index of the turn holding ``position`` (-1: before the first turn)."""
        return bisect.bisect_right(self.starts, position) - 1

    def cleared(self, event: HistoryCleared) -> None:
        """Every turn so far left both views (the log keeps them)."""
        how = f"clear at event {_n(event.originator_version)}"
        self.context = 0
        for view in (View.CHAT, View.CONVERSATION):
            self._drop(view, event.next_position, ("cleared", event.originator_version, how))

    def popped(self, event: MessagePopped) -> None:
        """A popped message leaves its turn's counts (it stays in the log)."""
        at = self._turn_at(event.position)
        self.context -= item_tokens(event.message)
        if at < 0:
            self.head_tokens -= item_tokens(event.message)
            return
        turn = self.turns[at]
        turn.messages -= 1
        turn.tokens -= item_tokens(event.message)
        turn.popped += 1


def _first(item: ConversationMessage) -> str:
    text = item.message.content if isinstance(item, Chat) else ""
    flat = " ".join(text.split())
    return flat if len(flat) <= 80 else flat[:79] + "…"


def _may_hold_images(item: ConversationMessage) -> bool:
    """A cheap pre-check for `image_count`: user markers or tool attachments (R21-R22)."""
    if isinstance(item, ToolResults):
        return any(result.attachments for result in item.results)
    if isinstance(item, Chat):
        return bool(item.message.attachments) or IMAGE_MARKER_PREFIX in item.message.content
    return False


def _is_tool_result(item: ConversationMessage) -> bool:
    return isinstance(item, ToolResults) or (
        isinstance(item, Chat) and item.message.role == "tool"
    )


# --- links ------------------------------------------------------------------------------------

@attrs.frozen
class _Links:
    """Where a chart element links in the timeline (its row's id), if anywhere.

    ``rows`` maps an event position to the position whose row shows it (a collapsed run shows
    many); ``requests`` maps a request number to the recorded event, for the what-if side,
    whose own events have no row; ``events`` says whether this side's events have rows.
    """

    rows: dict[int, int] | None
    requests: tuple[int, ...] | None = None
    events: bool = True
    drawn: dict[int, int] = attrs.field(factory=dict, eq=False)
    """Event position → the position naming the chart element that draws it (``c{N}``), for
    the links back from the timeline; filled while the chart is drawn."""

    def target(self, versions: Iterable[int]) -> str:
        """The ``id`` attribute of the element drawing ``versions`` (the first names it), on
        the side whose events the timeline lists; else nothing."""
        if self.rows is None or not self.events or self.requests is not None:
            return ""
        versions = list(versions)
        for version in versions:
            self.drawn.setdefault(version, versions[0])
        return f' id="c{versions[0]}"'

    def event(self, version: int) -> str | None:
        if self.rows is None or not self.events:
            return None
        return f"e{self.rows.get(version, version)}"

    def point(self, point: _Point) -> str | None:
        if self.requests is None:
            return self.event(point.version)
        if self.rows is None or point.number > len(self.requests):
            return None
        version = self.requests[point.number - 1]
        return f"e{self.rows.get(version, version)}"


def _link(href: str | None, inner: str) -> str:
    return inner if href is None else f'<a href="#{href}">{inner}</a>'


# --- the chart --------------------------------------------------------------------------------

@attrs.frozen
class _Frame:
    """The chart's scales: x in request numbers (0 .. requests + 1), y in tokens."""

    requests: int
    ymax: int
    width: int = _WIDTH

    @property
    def plot_w(self) -> int:
        return self.width - _LEFT - _RIGHT

    @property
    def right(self) -> int:
        return self.width - _RIGHT

    @property
    def lanes_top(self) -> int:
        return _TOP + _PLOT_H + 36

    @property
    def height(self) -> int:
        return self.lanes_top + len(_LANES) * _LANE_H + 6

    def px(self, x: float) -> float:
        return _LEFT + _PAD + x / (self.requests + 1) * (self.plot_w - 2 * _PAD)

    def py(self, y: float) -> float:
        return _TOP + _PLOT_H - _PAD_Y - min(y, self.ymax) / self.ymax * (_PLOT_H - _PAD_Y)


@attrs.define
class _Labels:
    """The visible labels of one chart, placed so that none overlaps another or leaves the
    plot's left and right edges: a label goes right of its anchor, else left of it, else (at
    each of ``rows``, when given) on another row, else it is not drawn — the element's hover
    text still says everything (issue 38 point 3). Placed boxes are kept by columns of
    `_COLUMN_PX`, so that a chart of many labels checks only its neighbours."""

    frame: _Frame
    columns: dict[int, list[tuple[float, float, float, float]]] = attrs.field(factory=dict)

    def reserve(self, box: tuple[float, float, float, float]) -> None:
        """Keep ``box`` (left, top, right, bottom) free of labels."""
        for column in range(int(box[0] // _COLUMN_PX), int(box[2] // _COLUMN_PX) + 1):
            self.columns.setdefault(column, []).append(box)

    def free(self, box: tuple[float, float, float, float]) -> bool:
        return not any(
            box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3]
            for column in range(int(box[0] // _COLUMN_PX), int(box[2] // _COLUMN_PX) + 1)
            for b in self.columns.get(column, ())
        )

    def place(self, x: float, ys: Sequence[float], text: str, size: float, cls: str) -> str:
        """The ``<text>`` of ``text`` (already escaped) near ``x`` on the first row of ``ys``
        (baselines) with room for it, or ``""``."""
        width = len(text) * size * _EM + 2
        for y in ys:
            for left in (x + 4, x - 4 - width):
                box = (left, y - size, left + width, y + size * 0.3)
                if left < _LEFT + 1 or box[2] > self.frame.right - 1 or not self.free(box):
                    continue
                self.reserve(box)
                attr = f' class="{cls}"' if cls else ""
                return f'<text{attr} x="{left:.1f}" y="{y:.1f}">{text}</text>'
        return ""


@attrs.frozen
class _Bucket:
    """Consecutive requests drawn as one: a single one when the chart has room for each."""

    points: tuple[_Point, ...]

    @property
    def x(self) -> float:
        return (self.points[0].number + self.points[-1].number) / 2

    @property
    def high(self) -> int:
        return max(p.tokens for p in self.points)

    @property
    def low(self) -> int:
        return min(p.tokens for p in self.points)

    @property
    def rejected(self) -> list[_Point]:
        return [p for p in self.points if p.rejected]


def _buckets(points: Sequence[_Point]) -> list[_Bucket]:
    size = max(1, math.ceil(len(points) / POINT_BUDGET))
    return [_Bucket(tuple(points[i : i + size])) for i in range(0, len(points), size)]


def _frame(sessions: Sequence[_Session], width: int) -> _Frame:
    """The scales of charts drawn side by side: requests, or turns when none of the sessions
    recorded a request (`_estimated`)."""
    by_turn = not any(s.points for s in sessions)
    top = max([1, *(p.tokens for s in sessions for p in s.points),
               *(t for s in sessions if by_turn for t in s.turn_tokens)])
    # A limit far above every request is said, not drawn to scale (`_limits`, `_estimated`).
    budget = max([0, *(p.budget for s in sessions for p in s.points),
                  *(s.budget for s in sessions if by_turn)])
    if budget <= _WINDOW_SCALE * top:
        top = max(top, budget)
    window = max((p.window for s in sessions for p in s.points), default=0)
    if window <= _WINDOW_SCALE * top:
        top = max(top, window)
    count = max(len(s.turn_tokens if by_turn else s.points) for s in sessions)
    return _Frame(count, math.ceil(top * 1.08), width)


def _ticks(maximum: float, count: int = 5) -> list[int]:
    """Round tick values from 0 up to ``maximum``, about ``count`` of them."""
    if maximum < 1:
        return [0]
    raw = maximum / count
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next(int(m * magnitude) for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return list(range(0, int(maximum) + 1, max(step, 1)))


def _axes(frame: _Frame, x_label: str) -> list[str]:
    bottom = _TOP + _PLOT_H
    out = [f'<rect class="plot" x="{_LEFT}" y="{_TOP}" width="{frame.plot_w}" '
           f'height="{_PLOT_H}"/>']
    for value in _ticks(frame.ymax):
        y = frame.py(value)
        out.append(f'<line class="grid" x1="{_LEFT}" x2="{frame.right}" y1="{y:.1f}" '
                   f'y2="{y:.1f}"/><text class="tick" x="{_LEFT - 6}" y="{y + 4:.1f}" '
                   f'text-anchor="end">{_n(value)}</text>')
    for value in _ticks(frame.requests, frame.plot_w // 90)[1:] or [1]:
        x = frame.px(value)
        out.append(f'<text class="tick" x="{x:.1f}" y="{bottom + 15}" '
                   f'text-anchor="middle">{_n(value)}</text>')
    out.append(f'<text class="axis" x="{frame.right}" y="{bottom + 30}" '
               f'text-anchor="end">{x_label}</text>')
    out.append(f'<text class="axis" x="{_LEFT}" y="{_TOP - 10}">estimated tokens</text>')
    return out


def _step_path(buckets: Sequence[_Bucket], value: Callable[[_Point], int], frame: _Frame) -> str:
    """A step line of ``value`` (the last of each bucket); a 0 (trimming off) or a value above
    the chart's scale breaks it."""
    parts: list[str] = []
    drawing = False
    for bucket in buckets:
        v = value(bucket.points[-1])
        if v <= 0 or v > frame.ymax:
            drawing = False
            continue
        x0, x1 = frame.px(bucket.points[0].number - 0.5), frame.px(bucket.points[-1].number + 0.5)
        parts.append(f"{'L' if drawing else 'M'}{x0:.1f},{frame.py(v):.1f}H{x1:.1f}")
        drawing = True
    return "".join(parts)


def _limits(buckets: Sequence[_Bucket], frame: _Frame, labels: _Labels) -> list[str]:
    """The model window and the token budget as step lines; a window far above every request
    (`_WINDOW_SCALE`) is said in the plot's corner instead of squashing the requests."""
    out = []
    for cls, value in (("window", lambda p: p.window), ("budget", lambda p: p.budget)):
        d = _step_path(buckets, value, frame)
        if d:
            out.append(f'<path class="{cls}" d="{d}"><title>{cls}</title></path>')
    rows = [_TOP + 12, _TOP + 25]
    for what, above in (("model window", max(p.window for b in buckets for p in b.points)),
                        ("token budget", max(p.budget for b in buckets for p in b.points))):
        if above > frame.ymax:
            out.append(_above_scale(what, above, frame, labels, rows))
    return out


def _above_scale(what: str, value: int, frame: _Frame, labels: _Labels,
                 rows: Sequence[float]) -> str:
    """A limit off the chart's scale (`_WINDOW_SCALE`), said in the plot's top right corner."""
    return labels.place(frame.right - 2, rows, f"{what} {_n(value)}: above this scale ↑", 10,
                        "window-label")


def _switches(switches: Sequence[_Mark], frame: _Frame, links: _Links,
              labels: _Labels) -> list[str]:
    """One rule per route switch; switches closer than `_SWITCH_PX` share one, with a count."""
    cells: dict[int, list[_Mark]] = {}
    for mark in switches:
        cells.setdefault(int(frame.px(mark.x) // _SWITCH_PX), []).append(mark)
    return [_switch_group(group, frame, links, labels) for group in cells.values()]


def _switch_group(group: Sequence[_Mark], frame: _Frame, links: _Links, labels: _Labels) -> str:
    first = group[0]
    x = frame.px(first.x)
    if len(group) == 1:
        title, text = f"event {_n(first.version)}: {_e(first.summary)}", _route_of(first.event)
    else:
        shown = ", ".join(_n(m.version) for m in group[:_TITLE_VERSIONS])
        more = ", …" if len(group) > _TITLE_VERSIONS else ""
        title, text = f"{_n(len(group))} route switches: events {shown}{more}", f"×{len(group)}"
    # On the first of three rows with room for it, right of the rule or left of it.
    label = labels.place(x, [_TOP + 11 + row * 12 for row in range(3)], f"→ {_e(text)}", 10,
                         "switch-label")
    inner = (f'<g class="switch"{links.target(m.version for m in group)} '
             f'data-event="{first.version}" data-count="{len(group)}"><title>{title}</title>'
             f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{_TOP}" y2="{_TOP + _PLOT_H}"/>{label}</g>')
    return _link(links.event(first.version), inner)


def _route_of(event: DomainEvent) -> str:
    assert isinstance(event, RouteSelected)
    return f"{event.route.provider}/{event.route.model}"


def _cross(x: float, y: float, size: float = 5.0) -> str:
    return (f"M{x - size:.1f},{y - size:.1f}L{x + size:.1f},{y + size:.1f}"
            f"M{x - size:.1f},{y + size:.1f}L{x + size:.1f},{y - size:.1f}")


def _single_point(point: _Point, frame: _Frame, links: _Links, label: str = "") -> str:
    """A request drawn by itself; a rejected one as a cross, with ``label`` (placed text)."""
    x, y = frame.px(point.number), frame.py(point.tokens)
    title = (f"<title>request {_n(point.number)} · event {_n(point.version)}: "
             f"{_e(point.summary)}</title>")
    if point.rejected:
        inner = (f'<g class="rejected"{links.target([point.version])} '
                 f'data-event="{point.version}" data-count="1">{title}'
                 f'<path d="{_cross(x, y)}"/>{label}</g>')
    else:
        inner = (f'<circle class="pt"{links.target([point.version])} '
                 f'data-event="{point.version}" cx="{x:.1f}" cy="{y:.1f}" '
                 f'r="3.2">{title}</circle>')
    return _link(links.point(point), inner)


def _rejection_labels(points: Sequence[_Point], frame: _Frame, labels: _Labels
                      ) -> dict[int, str]:
    """Request number → the label of the run of consecutive rejected requests it starts
    (``rejected · event N``, or ``K rejected · events N–M``), where there is room for it."""
    runs: list[list[_Point]] = []
    for point in points:
        if not point.rejected:
            continue
        if runs and runs[-1][-1].number == point.number - 1:
            runs[-1].append(point)
        else:
            runs.append([point])
    out = {}
    for run in runs:
        first, last = run[0], run[-1]
        text = (f"rejected · event {_n(first.version)}" if len(run) == 1 else
                f"{_n(len(run))} rejected · events {_n(first.version)}–{_n(last.version)}")
        y = frame.py(max(p.tokens for p in run))
        out[first.number] = labels.place(frame.px(first.number) + 3, [y - 6, y + 16], text,
                                         10, "")
    return out


def _bucket_marks(bucket: _Bucket, frame: _Frame, links: _Links) -> str:
    first, last = bucket.points[0], bucket.points[-1]
    x0, x1 = frame.px(first.number - 0.5), frame.px(last.number + 0.5)
    rejected = bucket.rejected
    title = (f"<title>requests {_n(first.number)}–{_n(last.number)} (events {_n(first.version)}"
             f"–{_n(last.version)}): {_n(bucket.low)}–{_n(bucket.high)} estimated tokens, "
             f"{_n(len(rejected))} rejected</title>")
    out = _link(links.point(first), (
        f'<rect class="hit"{links.target(p.version for p in bucket.points)} '
        f'data-requests="{len(bucket.points)}" x="{x0:.1f}" y="{_TOP}" '
        f'width="{max(x1 - x0, 0.5):.1f}" height="{_PLOT_H}">{title}</rect>'))
    if rejected:
        x, y = frame.px(bucket.x), frame.py(max(p.tokens for p in rejected))
        out += (f'<g class="rejected" data-event="{rejected[0].version}" '
                f'data-count="{len(rejected)}">{title}<path d="{_cross(x, y)}"/></g>')
    return out


def _requests(buckets: Sequence[_Bucket], frame: _Frame, links: _Links,
              labels: _Labels) -> list[str]:
    line = " ".join(f"{frame.px(b.x):.1f},{frame.py(b.high):.1f}" for b in buckets)
    out = []
    aggregated = any(len(b.points) > 1 for b in buckets)
    if aggregated:
        low = " ".join(f"{frame.px(b.x):.1f},{frame.py(b.low):.1f}" for b in reversed(buckets))
        out.append(f'<polygon class="band" points="{line} {low}"/>')
    out.append(f'<polyline class="tokens" points="{line}"/>')
    named = _rejection_labels([b.points[0] for b in buckets if len(b.points) == 1], frame,
                              labels)
    for bucket in buckets:
        if len(bucket.points) == 1:
            point = bucket.points[0]
            out.append(_single_point(point, frame, links, named.get(point.number, "")))
        else:
            out.append(_bucket_marks(bucket, frame, links))
    return out


def _shape(kind: str, x: float, y: float) -> str:
    if kind == "sweep":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4.5"/>'
    if kind == "cache":  # a gap: the prefix the provider had cached does not continue
        return f'<rect x="{x - 3.5:.1f}" y="{y - 4.5:.1f}" width="7" height="9"/>'
    if kind == "token_budget":  # pointing down: the context shrank to the budget
        d = f"M{x - 5:.1f},{y - 4:.1f}L{x + 5:.1f},{y - 4:.1f}L{x:.1f},{y + 5:.1f}Z"
    elif kind == "turn_limit":
        d = f"M{x:.1f},{y - 5:.1f}L{x + 5:.1f},{y:.1f}L{x:.1f},{y + 5:.1f}L{x - 5:.1f},{y:.1f}Z"
    else:  # overflow: pointing up, the provider pushed back
        d = f"M{x - 5:.1f},{y + 4:.1f}L{x + 5:.1f},{y + 4:.1f}L{x:.1f},{y - 5:.1f}Z"
    return f'<path d="{d}"/>'


def _lane_group(kind: str, label: str, group: Sequence[_Mark], y: float, frame: _Frame,
                links: _Links, labels: _Labels) -> str:
    first = group[0]
    x = frame.px(first.x)
    if len(group) == 1:
        title = f"event {_n(first.version)}: {_e(first.summary)}"
        text = _n(first.version)
    else:
        shown = ", ".join(_n(m.version) for m in group[:_TITLE_VERSIONS])
        more = ", …" if len(group) > _TITLE_VERSIONS else ""
        title = f"{_n(len(group))} × {label}: events {shown}{more}"
        text = f"×{_n(len(group))}"
    caption = labels.place(x + 3, [y + 4], text, 9.5, "")
    # A cache break is drawn at its request, whose point the timeline links back to.
    target = "" if kind == "cache" else links.target(m.version for m in group)
    inner = (f'<g class="mark {kind}"{target} '
             f'data-event="{first.version}" data-count="{len(group)}">'
             f"<title>{title}</title>{_shape(kind, x, y)}{caption}</g>")
    return _link(links.event(first.version), inner)


def _lanes(marks: Sequence[_Mark], frame: _Frame, links: _Links, labels: _Labels) -> list[str]:
    out = []
    for n, (kind, label) in enumerate(_LANES):
        y = frame.lanes_top + n * _LANE_H + _LANE_H / 2
        out.append(f'<line class="lane" x1="{_LEFT}" x2="{frame.right}" y1="{y:.1f}" '
                   f'y2="{y:.1f}"/><text class="lane-label" x="{_LEFT - 6}" y="{y + 4:.1f}" '
                   f'text-anchor="end">{label}</text>')
        cells: dict[int, list[_Mark]] = {}
        for mark in marks:
            if mark.kind == kind:
                cells.setdefault(int(frame.px(mark.x) // CELL_PX), []).append(mark)
        # Each marker's shape first, so that no label of a neighbour covers one; then each
        # label where it fits (`_Labels`).
        for group in cells.values():
            x = frame.px(group[0].x)
            labels.reserve((x - 5.5, y - 5.5, x + 5.5, y + 5.5))
        out += [_lane_group(kind, label, g, y, frame, links, labels) for g in cells.values()]
    return out


def _chart(session: _Session, frame: _Frame, links: _Links, caption: str) -> str:
    labels = _Labels(frame)
    if not session.points:
        session = session.on_turn_axis()
        body = [*_estimated(session, frame, labels),
                *_switches(session.switches, frame, links, labels)]
    else:
        buckets = _buckets(session.points)
        body = [*_limits(buckets, frame, labels),
                *_switches(session.switches, frame, links, labels),
                *_requests(buckets, frame, links, labels)]
    aggregated = int(len(session.points) > POINT_BUDGET)
    parts = [
        f'<svg class="chart" data-aggregated="{aggregated}" data-ymax="{frame.ymax}" '
        f'data-requests="{frame.requests}" viewBox="0 0 {frame.width} '
        f'{frame.height}" role="img" aria-label="{_e(caption)}">',
        *_axes(frame, "request number →" if session.points else "turn number →"), *body,
        *_lanes(session.marks, frame, links, labels), "</svg>",
    ]
    return "\n".join(parts)


def _estimated(session: _Session, frame: _Frame, labels: _Labels) -> list[str]:
    """A session that recorded no request (an imported transcript): the estimated tokens of
    what was recorded up to the end of each turn, one point per turn (per bucket of turns past
    `POINT_BUDGET`), under the route's token budget."""
    values = session.turn_tokens
    if not values:
        return [f'<text class="empty" x="{_LEFT + frame.plot_w / 2}" y="{_TOP + _PLOT_H / 2}" '
                'text-anchor="middle">no turn was recorded in this session</text>']
    out = []
    if session.budget > frame.ymax:
        out.append(_above_scale("token budget", session.budget, frame, labels, [_TOP + 12]))
    elif session.budget:
        y = frame.py(session.budget)
        out.append(f'<path class="budget" d="M{frame.px(0.5):.1f},{y:.1f}'
                   f'H{frame.px(frame.requests + 0.5):.1f}"><title>token budget '
                   f"{_n(session.budget)} (the route's, R11-R17)</title></path>")
    size = max(1, math.ceil(len(values) / POINT_BUDGET))
    peaks = [(i + 1, max(values[i:i + size])) for i in range(0, len(values), size)]
    line = " ".join(f"{frame.px(n + (size - 1) / 2):.1f},{frame.py(v):.1f}" for n, v in peaks)
    out.append(f'<polyline class="tokens" points="{line}"/>')
    if size == 1:
        out += [f'<circle class="estimated" data-turn="{n}" cx="{frame.px(n):.1f}" '
                f'cy="{frame.py(v):.1f}" r="2.6"><title>turn {_n(n)}: ~{_n(v)} estimated tokens '
                "recorded up to its end (no request was recorded)</title></circle>"
                for n, v in peaks]
    return out


# --- the turns strip --------------------------------------------------------------------------

def _turn_groups(turns: Sequence[_Turn], scale: float) -> list[list[_Turn]]:
    """Consecutive turns merged until each group is at least `MIN_TURN_PX` wide."""
    groups: list[list[_Turn]] = []
    current: list[_Turn] = []
    width = 0.0
    for turn in turns:
        current.append(turn)
        width += turn.tokens * scale
        if width >= MIN_TURN_PX:
            groups.append(current)
            current, width = [], 0.0
    if current:
        groups.append(current)
    return groups


def _turn_title(turn: _Turn) -> str:
    drops = "; ".join(
        f"dropped from the {view.value} view by the {how}"
        for view, (_, _, how) in sorted(turn.drops.items(), key=lambda kv: kv[1][1])
    ) or "kept in both views"
    extras = [f"{_n(turn.images)} image(s)"] if turn.images else []
    if turn.large:
        extras.append(f"{_n(turn.large)} large tool result(s)")
    if turn.swept:
        extras.append(f"{_n(turn.swept)} message(s) removed by an orphan sweep")
    if turn.popped:
        extras.append(f"{_n(turn.popped)} message(s) popped")
    if turn.summary is not None:
        version, summarizer, first, last = turn.summary
        extras.append(f"summarised by {_e(repr(summarizer))} (TurnsSummarized at event "
                      f"{_n(version)}, log positions {_n(first)}-{_n(last)})")
    if turn.cleared_results:
        at = ", ".join(_n(v) for v in turn.cleared_by)
        extras.append(f"{_n(turn.cleared_results)} tool result(s) cleared "
                      f"(ToolResultsCleared at event {at})")
    extra = "".join(f" · {x}" for x in extras)
    return (f"turn {_n(turn.number)} (log position {_n(turn.start)}, {_n(turn.messages)} "
            f"messages, ~{_n(turn.tokens)} tokens): {drops}{extra} · {_e(repr(turn.preview))}")


def _group_title(group: Sequence[_Turn]) -> str:
    fates = Counter(t.fate for t in group)
    parts = []
    for fate, count in sorted(fates.items()):
        versions = [t.drops[min(t.drops, key=lambda v: t.drops[v][1])][1]
                    for t in group if t.fate == fate and t.drops]
        span = f" (events {_n(min(versions))}–{_n(max(versions))})" if versions else ""
        parts.append(f"{_n(count)} {_FATES[fate]}{span}")
    images, large = sum(t.images for t in group), sum(t.large for t in group)
    summaries = sorted({t.summary for t in group if t.summary is not None})
    summarised = "".join(
        f" · summarised by {_e(repr(name))} (TurnsSummarized at event {_n(version)}, log "
        f"positions {_n(first)}-{_n(last)})" for version, name, first, last in summaries)
    cleared = sum(t.cleared_results for t in group)
    return (f"turns {_n(group[0].number)}–{_n(group[-1].number)} ({_n(len(group))} turns, "
            f"~{_n(sum(t.tokens for t in group))} tokens): {', '.join(parts)}"
            f" · {_n(images)} image(s) · {_n(large)} large tool result(s)"
            f" · {_n(cleared)} tool result(s) cleared{summarised}")


def _group_svg(group: Sequence[_Turn], x: float, width: float, links: _Links) -> str:
    single = len(group) == 1
    tokens = Counter[str]()
    for turn in group:
        tokens[turn.fate] += max(turn.tokens, 1)
    fate = tokens.most_common(1)[0][0]
    title = _turn_title(group[0]) if single else _group_title(group)
    first = group[0]
    drop_versions = sorted(d[1] for d in first.drops.values())
    href = links.event(drop_versions[0]) if drop_versions else None
    out = [_link(href, (
        f'<rect class="turn {fate}" data-turns="{len(group)}" x="{x:.2f}" y="22" '
        f'width="{max(width - 0.4, 0.6):.2f}" height="34"><title>{title}</title></rect>'))]
    if single and width >= 26:
        out.append(f'<text class="turn-label" x="{x + width / 2:.1f}" y="43" '
                   f'text-anchor="middle">T{first.number}</text>')
    images, large = sum(t.images for t in group), sum(t.large for t in group)
    middle = x + width / 2
    if images:
        out.append(f'<circle class="flag image" cx="{middle - 3:.1f}" cy="12" r="3.5">'
                   f"<title>{_n(images)} image(s) in {title}</title></circle>")
    if large:
        out.append(f'<rect class="flag large" x="{middle + 1:.1f}" y="8" width="7" '
                   f'height="8"><title>{_n(large)} large tool result(s) in {title}</title></rect>')
    cleared = sum(t.cleared_results for t in group)
    if cleared:
        out.append(f'<path class="flag results-cleared" d="M{middle - 11:.1f},16 l4,-9 l4,9 z">'
                   f"<title>{_n(cleared)} tool result(s) cleared in {title}</title></path>")
    return "".join(out)


def _strip(session: _Session, links: _Links, scale_tokens: int, chart_width: int) -> str:
    scale = (chart_width - _LEFT - _RIGHT) / max(scale_tokens, 1)
    out = [f'<svg class="strip" viewBox="0 0 {chart_width} 66" role="img" '
           f'aria-label="turns coloured by fate">',
           f'<text class="lane-label" x="{_LEFT - 6}" y="43" text-anchor="end">turns</text>']
    x = float(_LEFT)
    if session.head_tokens:
        width = session.head_tokens * scale
        out.append(f'<rect class="turn head" x="{x:.2f}" y="22" width="{width:.2f}" '
                   f'height="34"><title>leading system messages and preamble, '
                   f'~{_n(session.head_tokens)} tokens: always kept (R4)</title></rect>')
        x += width
    for group in _turn_groups(session.turns, scale):
        width = sum(t.tokens for t in group) * scale
        out.append(_group_svg(group, x, width, links))
        x += width
    if not session.turns:
        out.append(f'<text class="empty" x="{_LEFT + 8}" y="43">no turn was recorded</text>')
    out.append("</svg>")
    return "\n".join(out)


def _session_tokens(session: _Session) -> int:
    return session.head_tokens + sum(t.tokens for t in session.turns)


# --- the timeline -----------------------------------------------------------------------------

def _timeline_rows(events: Sequence[DomainEvent]) -> list[list[DomainEvent]]:
    """The timeline's rows: one per event, or, past `TIMELINE_FULL` events, runs sharing one.

    A large session first collapses runs of plain appends and requests; when that still leaves
    more than `TIMELINE_ROWS` rows, the routine trims (with their breadcrumbs and notices) join
    the runs too, and only the rare decisions (route switches, rejections, overflows, sweeps)
    keep a row each. No run spans more than 1/`TIMELINE_SEGMENTS` of the session.
    """
    if len(events) <= TIMELINE_FULL:
        return [[event] for event in events]
    longest = max(COLLAPSE_RUN, math.ceil(len(events) / TIMELINE_SEGMENTS))
    rows = _collapse(events, _PLAIN, longest)
    if len(rows) > TIMELINE_ROWS:
        rows = _collapse(events, _ROUTINE, longest)
    return rows


def _collapse(
    events: Sequence[DomainEvent], routine: tuple[type[DomainEvent], ...], longest: int
) -> list[list[DomainEvent]]:
    rows: list[list[DomainEvent]] = []
    run: list[DomainEvent] = []
    for event in events:
        if isinstance(event, routine):
            run.append(event)
            if len(run) < longest:
                continue
        rows += _flush(run)
        run = []
        if not isinstance(event, routine):
            rows.append([event])
    return rows + _flush(run)


def _flush(run: list[DomainEvent]) -> list[list[DomainEvent]]:
    return [run] if len(run) >= COLLAPSE_RUN else [[event] for event in run]


def _row_anchors(rows: Sequence[Sequence[DomainEvent]]) -> dict[int, int]:
    """Event position → the position whose row shows it, for the events of collapsed rows."""
    return {
        e.originator_version: row[0].originator_version for row in rows if len(row) > 1 for e in row
    }


_ROW_CLASSES: Final = {
    TrimDecided: "decision trim", BreadcrumbInserted: "decision", HistoryTrimmed: "decision",
    RequestRejected: "decision rejected", RouteSelected: "decision route",
    OrphansSwept: "decision sweep", OverflowReported: "decision overflow",
    OverflowRecovered: "decision overflow", OverflowUnrecoverable: "decision overflow",
    MessagePopped: "decision", HistoryCleared: "decision", ToolResultsCleared: "decision",
    TurnsSummarized: "decision", SummaryRefused: "decision", ToolCallsRestored: "decision",
}


def _kind_of(event: DomainEvent) -> str:
    if isinstance(event, TrimDecided):
        return f"TrimDecided ({event.reason.value})"
    return type(event).__name__


def _row_html(row: Sequence[DomainEvent], drawn: dict[int, int]) -> str:
    first = row[0]
    position = first.originator_version
    time = first.timestamp.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    if len(row) == 1:
        kind = _ROW_CLASSES.get(type(first), "plain")
        number = _n(position)
        if position in drawn:  # back to the point or marker that draws it
            number = f'<a href="#c{drawn[position]}">{number}</a>'
        return (f'<tr id="e{position}" class="ev {kind}"><td class="num">{number}</td>'
                f"<td>{time}</td><td>{type(first).__name__}</td>"
                f"<td>{_e(summarize(first))}</td></tr>")
    counts = Counter(_kind_of(event) for event in row)
    what = ", ".join(f"{_n(n)} × {kind}" for kind, n in sorted(counts.items()))
    return (f'<tr id="e{position}" class="ev run"><td class="num">{_n(position)}'
            f"–{_n(row[-1].originator_version)}</td><td>{time}</td><td>{_n(len(row))} events"
            f"</td><td>{what}</td></tr>")


def _timeline_table(rows: Sequence[Sequence[DomainEvent]], drawn: dict[int, int]) -> str:
    body = "\n".join(_row_html(row, drawn) for row in rows)
    return ('<table class="timeline"><thead><tr><th>#</th><th>time (UTC)</th><th>event</th>'
            f"<th>summary</th></tr></thead><tbody>\n{body}\n</tbody></table>")


# --- totals -----------------------------------------------------------------------------------

def _totals(sides: Sequence[tuple[str, Counters]]) -> str:
    head = "".join(f"<th>{_e(name)}</th>" for name, _ in sides)
    rows = []
    for field in attrs.fields(Counters):
        cells = "".join(f'<td class="num">{_e(_value(getattr(c, field.name)))}</td>'
                        for _, c in sides)
        rows.append(f"<tr><td><code>{field.name}</code></td>{cells}</tr>")
    trims = "".join(f'<td class="num">{_n(c.trims)}</td>' for _, c in sides)
    rows.insert(4, f"<tr><td><code>trims</code> (both reasons)</td>{trims}</tr>")
    return (f'<table class="totals"><thead><tr><th>counter</th>{head}</tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


def _value(value: object) -> str:
    if value is None:
        return "–"
    return _n(value) if isinstance(value, int) else str(value)


# --- the page ---------------------------------------------------------------------------------

_CSP: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
    "form-action 'none'"
)
_CSS: Final = """
:root { --kept: #4c9a6a; --token_budget: #e08a2c; --turn_limit: #7b61c9;
  --overflow: #c23b3b; --sweep: #2f7fc1; --head: #a3a9b0; --cleared: #d5dae0;
  --summarised: #a8d08d; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2329;
  margin: 0 auto; padding: 16px 24px 48px; max-width: 1400px; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
h3 { font-size: 14px; margin: 8px 0 4px; }
.meta { color: #4a535c; margin: 2px 0; } code { font-size: 12px; }
h3 .meta { font-weight: normal; font-size: 12.5px; }
.sides { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 20px; }
svg { width: 100%; height: auto; display: block; font-size: 11px;
  font-family: system-ui, sans-serif; }
svg a { cursor: pointer; }
.plot { fill: #fbfcfd; stroke: #d5dae0; } .grid { stroke: #e8ebef; }
.tick, .axis, .lane-label { fill: #5b646e; } .axis { font-style: italic; }
.tokens { fill: none; stroke: #1f5fa8; stroke-width: 1.6; }
.band { fill: #1f5fa8; fill-opacity: .18; stroke: none; }
.pt { fill: #1f5fa8; } .pt:hover { r: 5; } .hit { fill: transparent; }
.hit:hover { fill: #1f5fa8; fill-opacity: .12; }
.budget { fill: none; stroke: var(--token_budget); stroke-width: 1.4; stroke-dasharray: 6 3; }
.window { fill: none; stroke: #30363d; stroke-width: 1.4; stroke-dasharray: 2 2; }
.switch line { stroke: #2a9d8f; stroke-width: 1.4; stroke-dasharray: 4 3; }
.switch-label { fill: #1f7a6f; font-size: 10px; }
.window-label { fill: #30363d; font-size: 10px; }
.estimated { fill: #1f5fa8; } .mark.cache rect { fill: none; stroke: #6b4f00; stroke-width: 1.5; }
.rejected path { stroke: var(--overflow); stroke-width: 2.4; }
.rejected text { fill: var(--overflow); font-size: 10px; }
.lane { stroke: #e3e6ea; } .mark text { fill: #3a424a; font-size: 9.5px; }
.mark.token_budget path { fill: var(--token_budget); }
.mark.turn_limit path { fill: var(--turn_limit); }
.mark.overflow path { fill: var(--overflow); } .mark.sweep circle { fill: var(--sweep); }
.turn { stroke: #fff; stroke-width: .4; } .turn.kept { fill: var(--kept); }
.turn.token_budget { fill: var(--token_budget); } .turn.turn_limit { fill: var(--turn_limit); }
.turn.overflow { fill: var(--overflow); } .turn.head { fill: var(--head); }
.turn.cleared { fill: var(--cleared); } .sw.cleared { background: var(--cleared); }
.turn.summarised { fill: var(--summarised); } .sw.summarised { background: var(--summarised); }
.flag.results-cleared { fill: #f0b400; stroke: #343a40; stroke-width: .6; }
.sw.results-cleared { background: #f0b400; border: 1px solid #343a40; }
.turn:hover { fill-opacity: .75; } .turn-label { fill: #fff; font-size: 10px; }
.flag.image { fill: #d6336c; } .flag.large { fill: #343a40; }
.empty { fill: #7a838c; font-style: italic; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 16px; margin: 6px 0 0; color: #3a424a;
  font-size: 12.5px; }
.sw { display: inline-block; width: 12px; height: 12px; border-radius: 2px;
  vertical-align: -2px; margin-right: 4px; }
.sw.kept { background: var(--kept); } .sw.token_budget { background: var(--token_budget); }
.sw.turn_limit { background: var(--turn_limit); } .sw.overflow { background: var(--overflow); }
.sw.sweep { background: var(--sweep); } .sw.head { background: var(--head); }
.sw.cache { border: 1.5px solid #6b4f00; }
.sw.image { background: #d6336c; border-radius: 6px; } .sw.large { background: #343a40; }
table { border-collapse: collapse; font-size: 12.5px; }
td, th { padding: 2px 8px; border-bottom: 1px solid #eceff2; text-align: left;
  vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.timeline td:nth-child(2) { white-space: nowrap; color: #5b646e; }
.timeline td:nth-child(4) { word-break: break-word; }
tr.decision { background: #fff8ec; } tr.trim { background: #fdeedd; }
tr.rejected, tr.overflow { background: #fbe4e4; } tr.route { background: #e3f4f1; }
tr.sweep { background: #e4eef9; } tr.run td { color: #6b747d; font-style: italic; }
tr:target { outline: 2px solid #1f5fa8; background: #dbe8f7; }
.note { color: #5b646e; font-size: 12.5px; max-width: 980px; }
"""

_LEGEND: Final = (
    '<div class="legend"><span><span class="sw kept"></span>kept</span>'
    '<span><span class="sw token_budget"></span>token-budget trim (▼)</span>'
    '<span><span class="sw turn_limit"></span>turn-limit trim (◆)</span>'
    '<span><span class="sw overflow"></span>overflow recovery (▲) / rejected request (✕)</span>'
    '<span><span class="sw sweep"></span>orphan sweep (●)</span>'
    '<span><span class="sw cache"></span>cache break: the request does not start with the '
    "previous one (□)</span>"
    '<span><span class="sw cleared"></span>removed by a clear</span>'
    '<span><span class="sw summarised"></span>dropped and shown as a summary</span>'
    '<span><span class="sw head"></span>leading system messages</span>'
    '<span><span class="sw image"></span>images</span>'
    '<span><span class="sw large"></span>large or truncated tool result</span>'
    '<span><span class="sw results-cleared"></span>tool results cleared</span>'
    "<span>— estimated tokens · - - budget · ··· model window · teal: route switch</span></div>"
)


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        '<meta name="referrer" content="no-referrer">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n<style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


# --- the report -------------------------------------------------------------------------------

@attrs.frozen
class _Side:
    """One column of the report: the recorded session, or the what-if one."""

    name: str
    session: _Session
    links: _Links
    counters: Counters


def report(
    events: Sequence[DomainEvent],
    path: str | os.PathLike[str] | None = None,
    *,
    what_if: RuntimeProfile | None = None,
    summarizer: Summarizer | SummaryFunction | None = None,
) -> str:
    """The HTML report of one session's ``events`` (see the module doc); also written to ``path``.

    ``what_if``: another runtime profile; the report then shows the session re-decided under it
    (`turnledger.audit.what_if`) next to the recorded one; ``summarizer``: the what-if's, as
    `turnledger.audit.what_if` takes it (C8; ignored without ``what_if``). Writes nothing to any
    store. Raises
    `ReplayError` when ``events`` do not start with a `SessionStarted` or ``path`` cannot be
    written, and `TurnledgerError` when the decider refuses a recorded command under ``what_if``.
    """
    if not events or not isinstance(events[0], SessionStarted):
        raise ReplayError("a report needs a session's events from its SessionStarted")
    text = _render(events, what_if, summarizer)
    if path is not None:
        try:
            # The report holds the conversation's text: readable by its owner only, like the
            # store's own files (a decrypted copy of an encrypted store must not widen access).
            write_private(path, text)
        except OSError as error:
            reason = error.strerror or type(error).__name__
            raise ReplayError(f"cannot write the report to {os.fspath(path)}: {reason}") from None
    return text


def _render(events: Sequence[DomainEvent], what_if: RuntimeProfile | None,
            summarizer: Summarizer | SummaryFunction | None = None) -> str:
    started = events[0]
    assert isinstance(started, SessionStarted)
    rows = _timeline_rows(events)
    anchors = _row_anchors(rows)
    sides = [_Side("recorded", _Session().fold(events), _Links(anchors), fold_counters(events))]
    compared: WhatIfReport | None = None
    what_if_events: Sequence[DomainEvent] | None = None
    if what_if is not None:
        run = replay_what_if(events, what_if, summarizer=summarizer)
        compared, what_if_events = run.report, run.what_if
        requests: tuple[int, ...] | None = tuple(r.position for r in compared.requests)
        simulated = compared.simulated_requests is not None
        if simulated:  # the recorded side is a re-run too
            requests = None
            sides[0] = _Side("recorded profile, simulated requests",
                             _Session().fold(run.recorded), _Links(None),
                             fold_counters(run.recorded))
        name = "what-if profile, simulated requests" if simulated else "what-if"
        sides.append(_Side(name, _Session().fold(run.what_if),
                           _Links(anchors if requests else None, requests, events=False),
                           fold_counters(run.what_if)))
    title = f"turnledger report: session {_e(started.originator_id)}"
    breaks = [("recorded", cache_breaks(events), anchors)]
    if compared is not None and compared.simulated_requests is not None:
        breaks = [(sides[0].name, cache_breaks(run.recorded), {})]  # the requests simulated
    if what_if_events is not None:
        breaks.append((sides[-1].name, cache_breaks(what_if_events), {}))
    for side, (_, found, _) in zip(sides, breaks, strict=True):
        side.session.cache_marks(found)
    context = _context_section(sides)  # first: it says which chart element draws each event
    body = "\n".join((
        _header(started, events, sides, compared), context, _turns_section(sides),
        _timeline_section(rows, len(events), sides[0].links.drawn),
        _totals_section(sides, compared), _cache_section(sides, breaks),
    ))
    return _page(title, body)


def _cache_section(sides: Sequence[_Side],
                   breaks: Sequence[tuple[str, list[CacheBreak], dict[int, int]]]) -> str:
    """5. The provider's cache (issue 35): the requests that could not reuse the previous
    one's prefix and what caused each (`turnledger.replay.cache_breaks`), and what the
    provider billed when usage was recorded (cache hit rate, estimate against the bill)."""
    rows = []
    for side, (name, found, _) in zip(sides, breaks, strict=False):
        counters = side.counters
        causes = Counter(b.cause for b in found)
        said = ", ".join(f"{_n(n)} {cause}" for cause, n in sorted(causes.items())) or "none"
        hit = counters.cache_hit_rate
        ratio = counters.estimate_ratio
        rows.append(
            f"<tr><td>{_e(name)}</td><td class=\"num\">{_n(counters.requests_prepared)}</td>"
            f"<td class=\"num\">{_n(len(found))}</td><td>{_e(said)}</td>"
            f"<td class=\"num\">{_n(counters.usage_records)}</td>"
            f"<td class=\"num\">{'–' if hit is None else f'{hit:.1%}'}</td>"
            f"<td class=\"num\">{'–' if ratio is None else f'{ratio:.2f}'}</td></tr>")
    recorded_name, recorded, anchors = breaks[0]
    numbers = {point.version: point.number for point in sides[0].session.points}
    linked = sides[0].links.rows is not None  # the simulated requests have no timeline row

    def at(position: int, text: str) -> str:
        return (f'<a href="#e{anchors.get(position, position)}">{text}</a>' if linked
                else text)

    items = "".join(
        f"<li>{at(b.position, f'request {_n(numbers.get(b.position, 0))}')} (event "
        f"{_n(b.position)}): {_e(b.cause)} at "
        f"{at(b.cause_position, 'event ' + _n(b.cause_position))}</li>"
        for b in recorded[:_CACHE_BREAKS_LISTED])
    more = len(recorded) - _CACHE_BREAKS_LISTED
    listed = (f'<p class="note">The {_e(recorded_name)} breaks:</p><ol class="breaks">{items}'
              "</ol>" if items else "")
    if more > 0:
        listed += f'<p class="note">… and {_n(more)} more (<code>turnledger replay</code>).</p>'
    return ('<section id="cache"><h2>5. Provider cache</h2><p class="note">A cache break is '
            "a request that does not start with the whole previous request: something between "
            "them (a trim, a clearing, a summary, a route switch, a sweep, a pop or a clear) "
            "changed its prefix, which a provider's prompt cache can then not serve. The "
            "cache hit rate and the estimate against the bill come from the provider's usage "
            "(<code>Session.record_usage</code>); – when none was recorded.</p>"
            '<table class="totals"><thead><tr><th>side</th><th>requests</th>'
            "<th>cache breaks</th><th>caused by</th><th>billed requests</th>"
            "<th>cache hit rate</th><th>estimate / bill</th></tr></thead><tbody>"
            + "".join(rows) + f"</tbody></table>{listed}</section>")


_CACHE_BREAKS_LISTED: Final = 50
"""The most cache breaks the report lists one by one (the counts cover all)."""


def _header(started: SessionStarted, events: Sequence[DomainEvent], sides: Sequence[_Side],
            compared: WhatIfReport | None) -> str:
    recorded = sides[0].session
    requests = sum(isinstance(e, RequestPrepared | RequestRejected) for e in events)
    if not requests and len(sides) > 1:  # the first side is the simulated re-run: say the log
        recorded = _Session().fold(events)
    decisions = sum(m.kind != "cache" for m in recorded.marks)
    lines = [
        f"<h1>Session <code>{_e(started.originator_id)}</code></h1>",
        f'<p class="meta">{_e(summarize(started))}</p>',
        *(f'<p class="meta">{_e(line)}</p>' for line in _compaction_settings(started.profile)),
        f'<p class="meta">started {_e(started.timestamp.isoformat(timespec="seconds"))} · '
        f"{_n(len(events))} events · {_n(len(recorded.turns))} turns · "
        f"{_n(requests)} requests · {_n(decisions)} decisions drawn</p>",
    ]
    if not requests:
        lines.append('<p class="meta">no request was recorded in this session (an imported '
                     "transcript): its chart shows the estimated tokens recorded up to the end "
                     "of each turn, what a request would have held before any trim</p>")
    note = window_note([("recorded", events)]) if compared is None else compared.window_note
    if note is not None:
        lines.append(f'<p class="meta">{_e(note)}</p>')
    if compared is not None:
        lines.append(f'<p class="meta">what-if profile: {_e(_profile_change(compared))}</p>')
        if compared.summarizer is not None:
            lines.append(f'<p class="meta">what-if summarizer: {_e(repr(compared.summarizer))} '
                         "(asked about the turns no recorded summary covers, C8)</p>")
    lines.append('<p class="note">Hover a point, marker or turn for its event position and '
                 "summary; click it to jump to that event in the timeline. Token counts are "
                 "turnledger's estimate (UTF-8 bytes / 4, 1,600 per image; R20-R23).</p>")
    return "<header>" + "\n".join(lines) + "</header>"


def _compaction_settings(profile: RuntimeProfile) -> list[str]:
    """The opt-in stages the session's profile set (issue 24, issue 35); none for the
    default profile, whose header is as before."""
    compaction = profile.compaction
    stages = []
    if compaction.low_water is not None:
        share = f"{compaction.low_water:.0%}"
        stages.append(f"low water {compaction.low_water!r}: a forced trim drops to {share} of "
                      f"the budget, or to {share} of the turn limit in turns (issue 35)")
    if compaction.clear_tool_results:
        stages.append("tool results cleared outside the newest "
                      f"{compaction.keep_tool_result_turns:,} turns (C1)")
    if compaction.learn_estimate:
        stages.append("the estimate learns from the bill: budget trims count each estimated "
                      "token as the provider billed the newest requests (C10)")
    return [f"compaction: {'; '.join(stages)}"] if stages else []


def _profile_change(compared: WhatIfReport) -> str:
    changes = _changes(compared.recorded_profile, compared.profile)
    return ", ".join(changes) or "the recorded profile (no change)"


def _changes(before: object, after: object, prefix: str = "") -> list[str]:
    """``key before → after`` for each field of two attrs values that differs; a field that
    is itself an attrs value on both sides by its dotted keys (``compaction.low_water unset →
    0.6``), as a profile file and ``--what-if`` name them; None is said ``unset``."""
    out = []
    for field in attrs.fields(type(before)):  # type: ignore[arg-type]  # an attrs class
        old, new = getattr(before, field.name), getattr(after, field.name)
        if old == new:
            continue
        if attrs.has(type(old)) and type(old) is type(new):
            out += _changes(old, new, f"{prefix}{field.name}.")
        else:
            out.append(f"{prefix}{field.name} {_setting(old)} → {_setting(new)}")
    return out


def _setting(value: object) -> str:
    """A profile setting as ``--what-if`` takes it, None said ``unset``."""
    return "unset" if value is None else repr(value)


def _width(sides: Sequence[_Side]) -> int:
    return _WIDTH if len(sides) == 1 else _SIDE_WIDTH


def _context_section(sides: Sequence[_Side]) -> str:
    frame = _frame([side.session for side in sides], _width(sides))
    charts = "".join(
        f'<div class="side"><h3>{_e(side.name)}{_aggregation(side.session)}</h3>'
        f"{_chart(side.session, frame, side.links, 'context of the ' + side.name + ' session')}"
        "</div>"
        for side in sides
    )
    return (f'<section id="context"><h2>1. Context over time</h2><div class="sides">{charts}'
            f"</div>{_LEGEND}</section>")


def _aggregation(session: _Session) -> str:
    size = math.ceil(len(session.points) / POINT_BUDGET)
    if size <= 1:
        return ""
    return (f' <span class="meta">({_n(len(session.points))} requests in buckets of {size}: '
            "the line is each bucket's peak, the band its min-max)</span>")


def _turns_section(sides: Sequence[_Side]) -> str:
    scale, width = max(_session_tokens(side.session) for side in sides), _width(sides)
    strips = "".join(
        f'<div class="side"><h3>{_e(side.name)}</h3>'
        f"{_strip(side.session, side.links, scale, width)}</div>"
        for side in sides
    )
    return ('<section id="turns"><h2>2. Turns</h2><p class="note">Each turn (a user message and '
            "everything until the next one) as wide as its estimated tokens, coloured by its "
            "fate: kept, or the kind of the first trim that dropped it (light green: dropped "
            "and shown as a summary; a yellow triangle: tool results cleared). Turns too "
            "narrow to see "
            f"are merged with their neighbours.</p><div class=\"sides\">{strips}</div></section>")


def _timeline_section(
    rows: Sequence[Sequence[DomainEvent]], events: int, drawn: dict[int, int]
) -> str:
    note = ""
    if any(len(row) > 1 for row in rows):
        note = (f'<p class="note">{_n(events)} events: runs of {COLLAPSE_RUN} or more appends and '
                "prepared requests share one row (and, past "
                f"{_n(TIMELINE_ROWS)} rows, routine trims too); route switches, rejections, "
                "overflows and sweeps always have their own. <code>turnledger replay</code> "
                "lists every event.</p>")
    table = _timeline_table(rows, drawn)
    return f'<section id="timeline"><h2>3. Timeline</h2>{note}{table}</section>'


def _totals_section(sides: Sequence[_Side], compared: WhatIfReport | None) -> str:
    summary = ""
    if compared is not None:
        summary = "".join(f'<p class="meta">{_e(line)}</p>'
                          for line in compared.summary().splitlines())
    table = _totals([(side.name, side.counters) for side in sides])
    return ('<section id="totals"><h2>4. Totals</h2><p class="note">The counters of '
            "<code>turnledger stats</code>, folded from the same events.</p>"
            f"{table}{summary}</section>")
