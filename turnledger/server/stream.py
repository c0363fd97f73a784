"""Every decision to every subscriber, across processes: the Server-Sent Events stream (issue 37).

``GET /v1/conversations/{conversation_id}/events`` streams one conversation's decisions,
``GET /v1/events`` the whole store's. Each event is one SSE frame::

    id: 0-42
    event: HistoryTrimmed
    data: {"conversation_id": "conv_…", "position": 7, "type": "HistoryTrimmed", …}

``data`` is the audit timeline's JSON of the event (`turnledger.audit.TimelineEntry.to_json`:
position, timestamp, type, summary, data) with the conversation id added, so a dashboard reads
one form whether it follows the stream or replays the log. After each `RequestPrepared` comes
its context gauge (``event: context``): the estimated tokens and the budget, and
``model_context_window`` only when the route's capacity is known (R19: a client is never told
the 32,000 fallback as if it were the model's). `MessageAppended` is not streamed: the stream
carries decisions, and a message's content is the Conversations API's to give, under its access
rules.

Why it reaches across processes: the events come from the store's notification log, not from
this process's own calls. One follower per `EventHub` (one per server process) reads the log
with the cursor the analytics projection follows (``store.backend.follow_notifications``,
ADR-0083), so an event written by a CLI import, another replica or a plain script reaches
every subscriber; SQLite and PostgreSQL are followed the same way (PostgreSQL NOTIFYs only
under ``log_order=lock``, so polling is the one behaviour for both). The follower polls once
per ``poll_interval`` whatever the number of subscribers.

Why ``id`` is a log position: ``<horizon key>-<notification id>`` is the follower's cursor
(the key is 0 on SQLite, the writing transaction's id on PostgreSQL), and ``-1`` after it
names the gauge that follows a `RequestPrepared`. Positions are totally ordered, the same in
every process on one store, and no event can commit before one already followed, so a client
that reconnects with ``Last-Event-ID`` (or ``?last_event_id=`` where a client cannot set
headers) gets every later event exactly once, in order, from this replica or another; from
the hub's memory when it still holds them, else read back from the log. ``0-0`` asks for the
whole log; without an id a stream starts at the present.

Why a slow subscriber cannot stall the others: the follower never waits for a subscriber. The
store-wide subscribers read a shared ring of the newest ``max_lag`` frames (each event encoded
once, for every subscriber), a conversation's subscribers a bounded queue of their own; one
that falls ``max_lag`` events behind is sent a final ``event: lagged`` frame (without an id, so
its ``Last-Event-ID`` stays the last event it got) and disconnected, and resumes from there.
Comments (``: keepalive``) every ``heartbeat`` seconds keep proxies from closing an idle
stream; `EventHub.close` ends every stream with a final ``event: shutdown`` frame, so a server
that calls it when shutdown begins is not held open by its subscribers.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from turnledger.audit import timeline
from turnledger.errors import CorruptRecord, SessionNotFound, StoreUnavailable
from turnledger.events import MessageAppended, RequestPrepared
from turnledger.server.ids import MalformedConversationId, conversation_id, session_id

if TYPE_CHECKING:
    from turnledger import Store
    from turnledger.events import DomainEvent

__all__ = ["EventHub", "stream_routes"]

log = logging.getLogger(__name__)

Position = tuple[int, int, int]
"""Where a stream stands: ``(horizon key, notification id, part)``; part 0 is the event, 1 its
context gauge. Compared as tuples: the order of the store's follower (ADR-0083)."""

Visibility = Callable[[Request], Awaitable[Callable[[str], bool]]]
"""What a request may see: given the request, a predicate over conversation ids (the access
layer's scoping, issue 37 point 5). A conversation it may not see is a 404; the store-wide
stream leaves its events out."""

START: Final[Position] = (0, 0, 1)
"""Before the first event: ``Last-Event-ID: 0-0`` streams the whole log."""

_ID: Final = re.compile(r"(\d{1,20})-(\d{1,20})(?:-([01]))?")
_GAUGE_PART: Final = 1
_HORIZON_PARTS: Final = _GAUGE_PART  # a cursor read whole has delivered every part of it
_STARTUP_PAGE: Final = 5000


def format_event_id(position: Position) -> str:
    """The SSE ``id`` of a position: ``key-id`` for an event, ``key-id-1`` for its gauge."""
    key, notification, part = position
    return f"{key}-{notification}" + (f"-{part}" if part else "")


def parse_event_id(text: str) -> Position:
    """The position a ``Last-Event-ID`` names; ``ValueError`` for anything that is not one.

    ``0-0`` is the start of the log; ``key-id`` an event; ``key-id-1`` its gauge.
    """
    match = _ID.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not an event id (<horizon key>-<notification id>)")
    key, notification, part = match.groups()
    if int(notification) == 0:
        return START
    return int(key), int(notification), int(part or 0)


@attrs.frozen
class _Entry:
    """One frame as every subscriber receives it, encoded once."""

    position: Position
    session: str
    frame: bytes


def _frame(position: Position, kind: str, payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return f"id: {format_event_id(position)}\nevent: {kind}\ndata: {data}\n\n".encode()


def _control(kind: str, payload: dict[str, Any]) -> bytes:
    """A frame without an id: the client's ``Last-Event-ID`` stays its last event's."""
    data = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return f"event: {kind}\ndata: {data}\n\n".encode()


def _entries(cursor: tuple[int, int], event: DomainEvent) -> list[_Entry]:
    """The frames of one followed event: none for a message (content is not a decision), the
    event's timeline JSON, and after a `RequestPrepared` its context gauge (R19)."""
    if isinstance(event, MessageAppended):
        return []
    session = str(event.originator_id)
    wire_id = conversation_id(event.originator_id)
    entry = timeline([event])[0]
    payload = entry.to_jsonable() | {"conversation_id": wire_id}
    position = (cursor[0], cursor[1], 0)
    found = [_Entry(position, session, _frame(position, entry.type, payload))]
    if isinstance(event, RequestPrepared):
        data = entry.data
        gauge: dict[str, Any] = {
            "conversation_id": wire_id,
            "position": entry.position,
            "timestamp": payload["timestamp"],
            "route": data["route"],
            "estimated_tokens": event.estimated_tokens,
            "budget": event.budget,
        }
        if event.capacity is not None:  # R19: nothing when the capacity is unknown
            gauge["model_context_window"] = event.capacity
        gauge_at = (cursor[0], cursor[1], _GAUGE_PART)
        found.append(_Entry(gauge_at, session, _frame(gauge_at, "context", gauge)))
    return found


class _Lagged(Exception):
    """The subscriber fell ``max_lag`` events behind: its frames are gone from memory."""


class _Queue:
    """A conversation subscriber's bounded queue; the follower appends and never waits."""

    __slots__ = ("entries", "lagged", "limit", "wake")

    def __init__(self, limit: int) -> None:
        self.entries: collections.deque[_Entry] = collections.deque()
        self.limit = limit
        self.lagged = False
        self.wake = asyncio.Event()

    def offer(self, entry: _Entry) -> None:
        if len(self.entries) >= self.limit:
            self.lagged = True
            self.entries.clear()  # nothing of it will be sent: the client resumes from the log
        elif not self.lagged:
            self.entries.append(entry)
        self.wake.set()



class _Scope:
    """One stream's view of the access layer's predicate: each conversation is asked about
    once (a database read), off the event loop."""

    def __init__(self, visible: Callable[[str], bool]) -> None:
        self._visible = visible
        self._known: dict[str, bool] = {}

    async def allows(self, session: str) -> bool:
        known = self._known.get(session)
        if known is None:
            known = self._known[session] = await asyncio.to_thread(
                self._visible, conversation_id(session))
        return known

class EventHub:
    """One follower of a store's log and its fan-out to every subscriber of one server process.

    Starts on its first subscriber (in that subscriber's event loop: one hub per loop) and
    follows until `close`. ``poll_interval``: seconds between reads of the log when nothing is
    new; ``page_size``: events per read; ``max_lag``: events a subscriber may fall behind (the
    shared ring's length and each queue's bound); ``heartbeat``: seconds between keepalive
    comments on an idle stream.
    """

    def __init__(
        self,
        store: Store,
        *,
        poll_interval: float = 0.05,
        page_size: int = 500,
        max_lag: int = 10_000,
        heartbeat: float = 15.0,
    ) -> None:
        for name, value in (("poll_interval", poll_interval), ("heartbeat", heartbeat)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        for name, count in (("page_size", page_size), ("max_lag", max_lag)):
            if type(count) is not int or count < 1:
                raise ValueError(f"{name} must be a positive integer, got {count!r}")
        if max_lag < page_size:
            raise ValueError(
                f"max_lag ({max_lag}) must be at least page_size ({page_size}): one read of the "
                "log must not put a subscriber that keeps up behind"
            )
        self.store = store
        self.poll_interval = poll_interval
        self.page_size = page_size
        self.max_lag = max_lag
        self.heartbeat = heartbeat
        self._ring: collections.deque[_Entry] = collections.deque()
        self._ring_end = 0  # sequence number of the next frame the ring takes
        self._floor: Position = START  # the ring holds every frame after it
        self._head: Position = START  # the follower has read the log through it
        self._cursor: tuple[int, int] = (0, 0)
        self._queues: dict[str, set[_Queue]] = {}
        self._subscribers = 0
        self._task: asyncio.Task[None] | None = None
        # asyncio's primitives bind to the loop that first waits on them (Python 3.10+).
        self._ready = asyncio.Event()
        self._tick = asyncio.Event()
        self._closing = asyncio.Event()

    # -- lifecycle --

    @property
    def subscribers(self) -> int:
        """How many streams are open now."""
        return self._subscribers

    @property
    def head(self) -> Position:
        """The position the follower has read the log through (a stream without an id starts
        here)."""
        return self._head

    async def start(self) -> None:
        """Find the end of the log and start following it; idempotent."""
        if self._task is not None:
            await self._wait_ready()
            return
        self._task = asyncio.get_running_loop().create_task(self._follow(), name="turnledger-sse")
        await self._wait_ready()

    async def close(self) -> None:
        """End every stream (each gets a final ``event: shutdown`` frame) and stop following.

        Call it when shutdown begins: a server waits for its open responses, and a stream
        never ends on its own."""
        if self._task is None:
            return
        self._closing.set()
        self._wake_all()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _wait_ready(self) -> None:
        if not self._ready.is_set():
            closing = asyncio.ensure_future(self._closing.wait())
            ready = asyncio.ensure_future(self._ready.wait())
            await asyncio.wait((closing, ready), return_when=asyncio.FIRST_COMPLETED)
            closing.cancel()
            ready.cancel()

    def _wake_all(self) -> None:
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()
        for queues in self._queues.values():
            for queue in queues:
                queue.wake.set()

    # -- the follower --

    async def _follow(self) -> None:
        backend = self.store.backend
        while not self._closing.is_set():
            try:
                self._cursor = await asyncio.to_thread(self._end_of_log)
                break
            except (StoreUnavailable, CorruptRecord) as error:
                log.warning("event stream: cannot find the end of the log: %s", error)
                await self._pause()
        self._head = self._floor = (*self._cursor, _HORIZON_PARTS)
        self._ready.set()
        while not self._closing.is_set():
            try:
                page, cursor = await asyncio.to_thread(
                    backend.follow_notifications, self._cursor, self.page_size
                )
            except (StoreUnavailable, CorruptRecord) as error:
                if backend.closed:
                    log.info("event stream: the store is closed; streams end")
                    self._closing.set()
                    self._wake_all()
                    return
                log.warning("event stream: %s; retrying in %.2f s", error, self.poll_interval)
                await self._pause()
                continue
            if cursor != self._cursor:
                self._publish(page, cursor)
            if len(page) < self.page_size:  # a full page: more is waiting, read on at once
                await self._pause()

    def _end_of_log(self) -> tuple[int, int]:
        """The follower's cursor at the end of the log now: read directly where notification
        ids commit in order (nothing follows ``(0, newest id)``), else by following the log
        to its end once."""
        backend = self.store.backend
        newest = (0, backend.max_notification_id())
        if not backend.follows_after(newest):
            return newest
        cursor = (0, 0)
        while True:
            page, after = backend.follow_notifications(cursor, _STARTUP_PAGE)
            if after == cursor:
                return cursor
            cursor = after
            if len(page) < _STARTUP_PAGE and not backend.follows_after(cursor):
                return cursor

    async def _pause(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.poll_interval):
                await self._closing.wait()

    def _publish(
        self, page: Sequence[tuple[tuple[int, int], DomainEvent]], cursor: tuple[int, int]
    ) -> None:
        for at, event in page:
            for entry in _entries(at, event):
                if len(self._ring) >= self.max_lag:
                    self._floor = self._ring.popleft().position
                self._ring.append(entry)
                self._ring_end += 1
                for queue in self._queues.get(entry.session, ()):
                    queue.offer(entry)
        self._cursor = cursor
        self._head = (*cursor, _HORIZON_PARTS)
        self._wake_all()

    # -- reading back what the hub no longer holds --

    async def _read_log(
        self, after: Position, upto: Position, session: str | None
    ) -> AsyncIterator[list[_Entry]]:
        """The frames after ``after`` through ``upto``, read from the log (a resume from
        before what the ring holds), page by page."""
        key, notification, part = after
        # An event whose gauge was not sent yet is read again (only its gauge passes).
        cursor = (key, notification - 1) if part == 0 and notification > 0 else (key, notification)
        backend = self.store.backend
        while cursor < upto[:2]:
            page, moved = await asyncio.to_thread(
                backend.follow_notifications, cursor, self.page_size
            )
            if moved == cursor:
                return
            cursor = moved
            yield [
                entry
                for at, event in page
                for entry in _entries(at, event)
                if after < entry.position <= upto
                and (session is None or entry.session == session)
            ]

    # -- one stream --

    async def stream(
        self,
        session: str | None,
        after: Position | None,
        visible: Callable[[str], bool] | None = None,
    ) -> AsyncIterator[bytes]:
        """The frames of one subscriber: of ``session`` (a session id) or of every session,
        after ``after`` (None: from now), those whose conversation ``visible`` accepts."""
        await self.start()
        self._subscribers += 1
        queue: _Queue | None = None
        scope = None if visible is None else _Scope(visible)
        try:
            last = self._head if after is None else after
            if session is not None:
                queue = _Queue(self.max_lag)
                self._queues.setdefault(session, set()).add(queue)
            sequence = self._ring_end
            upto = self._head
            yield b"retry: 1000\n: ready\n\n"
            if last < self._floor:
                async for entries in self._read_log(last, upto, session):
                    if entries:
                        last = entries[-1].position
                        yield await self._join(entries, scope)
                last = max(last, upto)
            else:
                backlog = [
                    e for e in self._ring
                    if e.position > last and (session is None or e.session == session)
                ]
                if backlog:
                    last = backlog[-1].position
                    yield await self._join(backlog, scope)
            if queue is not None:
                frames = self._queued(queue, last, scope)
            else:
                frames = self._shared(sequence, last, scope)
            async for chunk in frames:
                yield chunk
        except _Lagged:
            yield _control("lagged", {
                "reason": f"fell more than {self.max_lag} events behind; "
                          "reconnect with Last-Event-ID to resume",
            })
        finally:
            self._subscribers -= 1
            if queue is not None and session is not None:
                queues = self._queues.get(session)
                if queues is not None:
                    queues.discard(queue)
                    if not queues:
                        del self._queues[session]

    async def _shared(
        self, sequence: int, last: Position, scope: _Scope | None
    ) -> AsyncIterator[bytes]:
        """A store-wide subscriber's frames from the shared ring, from ``sequence`` on."""
        while True:
            tick = self._tick
            start = self._ring_end - len(self._ring)
            if sequence < start:
                raise _Lagged
            fresh = [
                e for e in itertools.islice(self._ring, sequence - start, None)
                if e.position > last
            ]
            sequence = self._ring_end
            if fresh:
                last = fresh[-1].position
                chunk = await self._join(fresh, scope)
                if chunk:
                    yield chunk
                continue
            if self._closing.is_set():
                yield _control("shutdown", {"reason": "the server is shutting down"})
                return
            if not await self._wait(tick):
                yield b": keepalive\n\n"

    async def _queued(
        self, queue: _Queue, last: Position, scope: _Scope | None
    ) -> AsyncIterator[bytes]:
        """A conversation subscriber's frames from its own bounded queue."""
        while True:
            queue.wake.clear()
            if queue.lagged:
                raise _Lagged
            fresh = [e for e in queue.entries if e.position > last]
            queue.entries.clear()
            if fresh:
                last = fresh[-1].position
                chunk = await self._join(fresh, scope)
                if chunk:
                    yield chunk
                continue
            if self._closing.is_set():
                yield _control("shutdown", {"reason": "the server is shutting down"})
                return
            if not await self._wait(queue.wake):
                yield b": keepalive\n\n"

    async def _wait(self, event: asyncio.Event) -> bool:
        """Wait for ``event`` up to one heartbeat; False when the heartbeat is due."""
        try:
            async with asyncio.timeout(self.heartbeat):
                await event.wait()
        except TimeoutError:
            return False
        return True

    @staticmethod
    async def _join(entries: Iterable[_Entry], scope: _Scope | None) -> bytes:
        if scope is None:
            return b"".join(e.frame for e in entries)
        return b"".join([e.frame for e in entries if await scope.allows(e.session)])


# -- the routes --

_HEADERS: Final = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx would otherwise buffer the stream
}


def _error(status: int, message: str, param: str | None, code: str | None) -> Response:
    """OpenAI's error envelope, as the Conversations API answers."""
    kind = "invalid_request_error"
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": code}},
        status_code=status,
    )


def _after(request: Request) -> Position | Response | None:
    text = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    if not text:
        return None
    try:
        return parse_event_id(text)
    except ValueError as error:
        return _error(400, str(error), "last_event_id", "invalid_event_id")


def stream_routes(
    store: Store, *, hub: EventHub | None = None, visibility: Visibility | None = None
) -> list[BaseRoute]:
    """The SSE routes on ``store``: ``GET /v1/conversations/{conversation_id}/events`` and
    ``GET /v1/events``.

    ``hub``: the follower to fan out from (default: a new `EventHub` of ``store``; pass your
    own to `EventHub.close` it when the server shuts down). ``visibility``: the access layer's
    scoping of a request (default: every conversation).
    """
    events = EventHub(store) if hub is None else hub

    async def scope_of(request: Request) -> Callable[[str], bool] | None:
        return None if visibility is None else await visibility(request)

    async def conversation_events(request: Request) -> Response:
        wire_id = request.path_params["conversation_id"]
        visible = await scope_of(request)
        try:
            session = session_id(wire_id)
            if visible is not None and not await asyncio.to_thread(visible, wire_id):
                raise SessionNotFound(wire_id)
            await asyncio.to_thread(store.sessions, after=session, limit=1)
        except (MalformedConversationId, SessionNotFound):
            return _error(404, f"No conversation found with id '{wire_id}'.", None, "not_found")
        after = _after(request)
        if isinstance(after, Response):
            return after
        return StreamingResponse(
            events.stream(session, after), media_type="text/event-stream", headers=_HEADERS
        )

    async def store_events(request: Request) -> Response:
        visible = await scope_of(request)
        after = _after(request)
        if isinstance(after, Response):
            return after
        return StreamingResponse(
            events.stream(None, after, visible), media_type="text/event-stream", headers=_HEADERS
        )

    return [
        Route("/v1/conversations/{conversation_id}/events", conversation_events, methods=["GET"]),
        Route("/v1/events", store_events, methods=["GET"]),
    ]
