"""`Store` and `Session`: the event-sourced sessions (docs/api.md).

A `Session` turns each public call into one command and hands it to the store's write
pipeline (`turnledger.store.pipeline`: decide -> record in one transaction with the expected
version (E3) -> snapshot when due -> tell subscribers about `HistoryTrimmed` (R33)). A
`Store` opens backends, starts and restores sessions (E5) and owns the subscribers. Readers
get `SessionView`, a frozen picture of a session, never the mutable state.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from uuid import UUID, uuid4

import attrs

from turnledger.domain.budget import ProviderProfile, ResolvedRoute, Route, RuntimeProfile
from turnledger.domain.decider import (
    AppendMessage,
    Batch,
    ClearHistory,
    Command,
    Extend,
    FitWindow,
    ImportConversation,
    PopMessage,
    PreparedRequest,
    PrepareRequest,
    RecordEvent,
    RecordUsage,
    RecoverFromOverflow,
    SelectRoute,
    SessionState,
    StartSession,
    Summarize,
    SweepOrphans,
    request_digest,
)
from turnledger.domain.errors import (
    ConcurrencyConflict,
    ContextWindowExceeded,
    InvalidMessage,
    InvalidProfile,
    InvalidUsage,
    SessionActive,
    SessionExists,
    SessionNotFound,
    UnansweredToolCalls,
)
from turnledger.domain.events import (
    DomainEvent,
    HistoryTrimmed,
    MessagePopped,
    OverflowRecovered,
    RejectionReason,
    RequestPrepared,
    RequestRejected,
    RouteReason,
    SessionForgotten,
)
from turnledger.domain.messages import ChatMessage, ConversationMessage
from turnledger.domain.overflow import is_context_window_exceeded
from turnledger.domain.usage import Usage
from turnledger.store import DEFAULT_STORE_URL, run_before_erasure
from turnledger.store.backend import (
    EventStoreBackend,
    InvalidStoreURL,
    open_backend,
    retry_on_conflict,
)
from turnledger.store.keys import NotEncrypted, parse_key
from turnledger.store.pipeline import (
    SNAPSHOT_INTERVAL,
    SNAPSHOT_MESSAGES,
    Pipeline,
    Position,
    log_items,
)
from turnledger.store.summaries import (
    Summarizer,
    SummaryFunction,
    as_summarizer,
    summary_outcome,
)

__all__ = ["Session", "SessionView", "Store", "open_store", "parse_session_id"]

log = logging.getLogger("turnledger")


Subscriber = Callable[[DomainEvent], None]
Observer = Callable[[Sequence[DomainEvent]], None]


def _now() -> datetime:
    return datetime.now(UTC)


FUTURE_TOLERANCE = timedelta(minutes=5)
"""How far after now a writer's clock may date an event before retention distrusts it."""


@attrs.frozen
class IdleSession:
    """A session retention may forget (`Store.idle`): its id, when it was last written, the
    version it was judged at, and whose clock said when (``database`` or ``writer``)."""

    session_id: str
    last_written: datetime
    version: int
    clock: str


def summarised_items(
    backend: EventStoreBackend,
    state: SessionState,
    *,
    unrecorded: Sequence[DomainEvent] = (),
    page_size: int = 1000,
) -> dict[int, ConversationMessage | None] | None:
    """The items of ``state``'s conversation view that a compact state does not hold, as the
    log holds them now (None: swept), read in pages (ADR-0030); None when it holds them all.

    ``unrecorded``: events applied to ``state`` in memory only (a read-only sweep), after the
    log's."""
    return log_items(backend, state, state.summarised, unrecorded, page_size)


def parse_session_id(session_id: str | UUID) -> UUID:
    """A session id as a UUID; `SessionNotFound` when it is not one (no such session can exist)."""
    if isinstance(session_id, UUID):
        return session_id
    try:
        return UUID(str(session_id))
    except ValueError:
        raise SessionNotFound(f"session id {session_id!r} is not a UUID") from None


@attrs.frozen
class SessionView:
    """A read-only picture of one session at one version (replay, exports, diagnostics).

    Taken by `Session.state` and `Store.read_state`; later commands do not change it.
    """

    session_id: UUID
    version: int
    legacy: bool
    profile: RuntimeProfile
    providers: tuple[ProviderProfile, ...]
    route: ResolvedRoute
    """The route with its capacity, budget and request window (R19)."""
    window_size: int
    """Items of the log the session keeps in memory (its compact window, ADR-0002)."""
    chat: tuple[ChatMessage, ...]
    conversation: tuple[ConversationMessage, ...]
    tokens: int
    """The estimated tokens of the chat view (R20)."""

    @classmethod
    def of(
        cls, state: SessionState, older: Mapping[int, ConversationMessage | None] | None = None
    ) -> SessionView:
        """The picture of ``state`` now; ``older``: what a compact state summarises
        (`SessionState.conversation_view`), read from the log by `summarised_items`."""
        assert state.session_id is not None, "the session has not been started"
        return cls(
            session_id=state.session_id,
            version=state.version,
            legacy=state.legacy,
            profile=state.profile,
            providers=state.providers,
            route=state.route,
            window_size=len(state.index.items),
            chat=tuple(state.chat_view()),
            conversation=tuple(state.conversation_view(older)),
            tokens=state.chat_tokens(),
        )

    def chat_view(self) -> list[ChatMessage]:
        """The provider-facing working history."""
        return list(self.chat)

    def conversation_view(self) -> list[ConversationMessage]:
        """The structured history after the turn limit (R28-R29)."""
        return list(self.conversation)

    def chat_tokens(self) -> int:
        """The estimated tokens of the chat view (R20)."""
        return self.tokens


def _start_options(
    profile: RuntimeProfile | None, providers: Sequence[ProviderProfile], route: Route | None
) -> tuple[RuntimeProfile, tuple[ProviderProfile, ...], Route]:
    """A new session's profile, providers and route, checked (`InvalidProfile` naming what is
    wrong); the route defaults to the first provider's model, else ``default/default``."""
    profile = RuntimeProfile() if profile is None else profile
    if not isinstance(profile, RuntimeProfile):
        raise InvalidProfile(f"profile must be a RuntimeProfile, got {type(profile).__name__}")
    if isinstance(providers, ProviderProfile):
        raise InvalidProfile("providers must be a sequence of ProviderProfile, got one "
                             "ProviderProfile: pass [provider]")
    providers = tuple(providers)
    for i, p in enumerate(providers):
        if not isinstance(p, ProviderProfile):
            raise InvalidProfile(f"providers[{i}] must be a ProviderProfile, got "
                                 f"{type(p).__name__}")
    if route is None:
        route = Route(providers[0].name, providers[0].model) if providers else Route(
            "default", "default"
        )
    return profile, providers, route


class Session:
    """One conversation's history, recorded event by event (docs/api.md).

    Not meant to be constructed directly: use `Store.start_session` or `Store.restore`. A
    session object is safe to share between threads; two session objects (or processes) on
    the same session id are serialised by the store: the loser of a race gets
    `ConcurrencyConflict`, its object reloads itself, and the caller may retry.

    A command whose outcome the database could not tell (`AppendInDoubt`) is settled before
    the session's next command, through any session object of the same store: the same
    command again is taken for its retry and returns what the first attempt stored; any
    other command goes on after it (ADR-0064).
    """

    def __init__(self, pipeline: Pipeline, position: Position) -> None:
        self._pipeline = pipeline
        self._position = position
        self._lock = threading.RLock()
        self._summarizer: Summarizer | None = None
        self._fitted: _Fitted | None = None  # the window `fit_window` handed out last

    @property
    def summarizer(self) -> Summarizer | None:
        """The runtime's summarizer of the turns a token-budget trim drops (issue 24); None
        (the default): the plain trim and its breadcrumb. Set it to a `Summarizer` or a
        callable ``(turns, previous) -> text``; a restored session object starts without
        one (the summaries recorded are in its log either way)."""
        return self._summarizer

    @summarizer.setter
    def summarizer(self, value: Summarizer | SummaryFunction | None) -> None:
        self._summarizer = as_summarizer(value)

    # -- identity --

    @property
    def id(self) -> str:
        """The session id (UUID text)."""
        return str(self._position.session_id)

    @property
    def version(self) -> int:
        """The number of events recorded for this session so far."""
        return self._stored_state().version

    @property
    def next_position(self) -> int:
        """The log position the next appended message gets: the messages recorded so far
        (popped and cleared ones included, since the log keeps them)."""
        return self._stored_state().next_position

    @property
    def legacy(self) -> bool:
        return self._stored_state().legacy

    @property
    def profile(self) -> RuntimeProfile:
        return self._stored_state().profile

    @property
    def route(self) -> Route:
        return self._stored_state().route.route

    @property
    def state(self) -> SessionView:
        """A read-only picture of the session now (for replay and diagnostics)."""
        with self._lock:
            state = self._stored_state()
            return SessionView.of(state, summarised_items(self._pipeline.backend, state))

    def _stored_state(self) -> SessionState:
        """The state, reloaded first when a failed write left it stale (so only what is
        stored is ever served); `StoreUnavailable` while the store cannot be read."""
        with self._lock:
            return self._pipeline.current(self._position).state

    # -- commands --

    def append(self, message: ConversationMessage | ChatMessage) -> list[DomainEvent]:
        """Record one message (R38: an oversized tool result is truncated first).

        A real user message may cross the turn limit (R27a): the trim, its breadcrumb and
        `HistoryTrimmed` (structured sessions) or a logged warning (legacy, R34) are recorded in
        the same transaction. Returns the events recorded.

        Raises `InvalidMessage` for anything that is not a message; nothing is recorded then.
        Raises `ConcurrencyConflict` when another writer of this session (another session
        object, thread or process) recorded first: nothing of this call was recorded and the
        session reloads itself before its next use. It is not retried here: only the caller
        knows whether its message still makes sense after what the other writer recorded.
        When it does (an append rarely depends on what was read), make the call again:
        ``tl.retry_on_conflict(lambda: session.append(message))`` backs off with jitter and
        gives up after 30 s by default (docs/guide/writers.md; the
        framework integrations do this for every call, ADR-0065).
        Raises `StoreUnavailable` when the database fails; then nothing was recorded, unless
        it is an `AppendInDoubt` (the database did not answer in time to tell): calling again
        with the same message is safe either way — a retry that finds the first attempt
        stored returns its events and records nothing more (ADR-0064).
        """
        return self._run(AppendMessage(message, _now())).events

    def extend(
        self, messages: Iterable[ConversationMessage | ChatMessage]
    ) -> list[DomainEvent]:
        """Record several messages in one transaction (a tool loop's step, or a whole turn).

        Each message is recorded as `append` would record it, with every trim it triggers
        (R27a), so the events and views are those of appending them one by one; but they are
        saved together (E3): all of them or, on any error, none. Returns the events recorded.

        Raises `InvalidMessage` for anything that is not a message; nothing is recorded then.
        Raises `ConcurrencyConflict` when another writer recorded first: none of the messages
        is recorded, and ``tl.retry_on_conflict(lambda: session.extend(messages))`` makes the
        call again on the reloaded session (as for `append`).
        Raises `StoreUnavailable` as `append` does; after an `AppendInDoubt`, calling again
        with the same messages records them once (ADR-0064).
        """
        if isinstance(messages, ChatMessage | str | bytes) or not isinstance(messages, Iterable):
            raise InvalidMessage(
                f"extend takes an iterable of messages, got {type(messages).__name__}"
            )
        return self._run(Extend(tuple(messages), _now())).events

    def fit_window(
        self,
        *,
        summarizer: Summarizer | SummaryFunction | None = None,
        messages: Iterable[ConversationMessage | ChatMessage] = (),
        decided: Callable[[list[ChatMessage]], None] | None = None,
    ) -> list[ChatMessage]:
        """Apply and record the trims a request would (turn limit, token budget, orphan sweep),
        and return the chat view: for a runtime that builds its request itself (an agent
        framework's session). Unlike `prepare_request`, records no request and raises nothing
        about unanswered tool calls or the capacity. ``summarizer``: as `prepare_request`.
        ``messages``: recorded first as `extend` records them, in the same transaction (an
        agent step's new messages and the window for its next call in one commit).

        ``decided``: called with the window once it is decided and its records are about to
        commit (in the calling thread; SQLite and PostgreSQL call it, the in-memory store and
        a call with nothing to write do not), so that a caller running this in a worker may
        build its request from it while the commit waits on the database. That window is
        valid only if `fit_window` returns that very list; a write that fails raises, and a
        retry decides again. An error it raises is logged, not raised (ADR-0093)."""
        if isinstance(messages, ChatMessage | str | bytes) or not isinstance(messages, Iterable):
            raise InvalidMessage(
                f"fit_window takes an iterable of messages, got {type(messages).__name__}"
            )
        with self._lock:
            window: list[ChatMessage] | None = None

            def tell(told: Callable[[list[ChatMessage]], None]) -> None:
                nonlocal window
                window = self._position.state.chat_view()  # the decided state, not written
                told(window)

            # Without a caller to tell, nothing is computed while the write holds its lock.
            self._run(FitWindow(_now(), tuple(messages)), self._summarize(summarizer),
                      None if decided is None else partial(tell, decided))
            # The decided state is the stored one once the write succeeded: its chat view is
            # the one `tell` took (none when nothing was told).
            state = self._stored_state()
            fitted = window if window is not None else state.chat_view()
            self._fitted = _Fitted(fitted, state.chat_tokens())  # what a usage answers
            return fitted

    def pop(self) -> ConversationMessage | None:
        """Remove the newest message of the conversation view from the views and return it
        (`MessagePopped`; the log keeps it). Leading system messages are never popped (R4);
        None when there is nothing else."""
        with self._lock:
            # The pop names what it needs of the log (none while a held item is left).
            state = self._stored_state()
            older = log_items(self._pipeline.backend, state, state.pop_needs())
            events = self._run(PopMessage(_now(), summarised=older)).events
        popped = [e for e in events if isinstance(e, MessagePopped)]
        return popped[0].message if popped else None

    def clear(self) -> list[DomainEvent]:
        """Remove every message from the views (`HistoryCleared`); the log keeps them.
        Returns the events recorded (none when the views were empty)."""
        return self._run(ClearHistory(_now())).events

    def prepare_request(
        self,
        tools: Iterable[object] = (),
        hooks: Iterable[str] = (),
        final_summary: bool = False,
        *,
        summarizer: Summarizer | SummaryFunction | None = None,
    ) -> PreparedRequest:
        """Trim what must be trimmed and return the request to send (R24, R27a, R18).

        ``tools`` are tool schemas (JSON text, or JSON-serialisable objects); ``hooks`` are hook
        texts injected into the request. Both count toward the capacity check.

        Raises `ContextWindowExceeded` (recorded as `RequestRejected`) when the request does
        not fit the resolved model context window, also for ``final_summary=True`` and when
        proactive trimming is disabled; `UnansweredToolCalls` (recorded as `RequestRejected`
        with reason ``unanswered_tool_calls``) when the newest turn has a tool call without its
        result. Orphans a trim or an out-of-order append left are swept first (`OrphansSwept`).

        ``summarizer`` (default: the session's `summarizer`; issue 24, docs/behaviour.md
        C4-C6): when the token-budget trim drops turns, they are shown as its summary in place
        of the breadcrumb (`TurnsSummarized`); a summarizer that raises, times out or returns
        too large a text leaves the plain trim, recorded (`SummaryRefused`). Never raises for
        what the summarizer does.
        """
        for name, given in (("tools", tools), ("hooks", hooks)):
            if isinstance(given, str | bytes | Mapping):  # iterating it would count its parts
                raise InvalidMessage(f"{name} must be a list of {name[:-1]}s, got one "
                                     f"{type(given).__name__}: pass [{name[:-1]}]")
        schemas = tuple(_schema_text(t) for t in tools)
        hook_texts = tuple(hooks)
        for i, hook in enumerate(hook_texts):
            if not isinstance(hook, str):
                raise InvalidMessage(f"hooks[{i}] must be a str, got {type(hook).__name__}")
        with self._lock:
            state = self._stored_state()  # how this session prices its tool schemas (K6)
            batch = self._run(PrepareRequest.from_texts(
                schemas, hook_texts, bool(final_summary), _now(), api=state.route.api,
                pricing=state.pricing), self._summarize(summarizer))
            last = batch.events[-1]
            unanswered = RejectionReason.UNANSWERED_TOOL_CALLS
            if isinstance(last, RequestRejected) and last.reason is unanswered:
                raise UnansweredToolCalls(last.detail, tool_call_ids=last.tool_call_ids)
            if isinstance(last, RequestRejected):
                raise ContextWindowExceeded(
                    last.detail, estimated_tokens=last.estimated_tokens, context_window=last.window
                )
            assert batch.request is not None, "a prepared request carries what it rendered"
            self._fitted = None  # the newest thing handed out is this request
            return batch.request

    def recover_from_overflow(
        self, error: BaseException | str, *,
        summarizer: Summarizer | SummaryFunction | None = None,
    ) -> bool:
        """React to a provider overflow (R25-R26): True when trimmed (retry), else False.

        A non-overflow error returns False and records nothing. An overflow with one turn left
        returns False and records why (`OverflowUnrecoverable`). ``summarizer`` (default: the
        session's `summarizer`; issue 24, docs/behaviour.md C4): the turns the recovery drops
        are shown as its summary in place of the breadcrumb, as for a budget trim.
        """
        if not is_context_window_exceeded(error):
            return False
        events = self._run(RecoverFromOverflow(_error_text(error), _now()),
                           self._summarize(summarizer)).events
        return any(isinstance(e, OverflowRecovered) for e in events)

    def record_usage(
        self, usage: object, request: PreparedRequest | str | None = None
    ) -> list[DomainEvent]:
        """Record what the provider billed for a request this session prepared (issue 35).

        ``usage`` is the usage the provider returned, as its SDK object or dict: OpenAI Chat
        (``completion.usage``), Responses (``response.usage``), Anthropic
        (``message.usage``), Gemini (``usage_metadata``), or a `Usage`
        (`turnledger.providers`). ``request`` is the request it answers: the
        `PreparedRequest` sent, or its ``digest``; None: the newest request this session
        object prepared or window it fitted (`fit_window`, which an agent framework's own
        request is built from), else the newest request in the log (a restored session).
        Recorded as `UsageRecorded`, beside that request's estimate (a fitted window has no
        request record: its ``request_position`` is None, its digest that of the window).

        Raises `InvalidUsage` (an `InvalidMessage`) for a usage of no shape turnledger reads or
        whose counts cannot be what was billed, and when the session handed out no such
        request; nothing is recorded then.
        """
        read = Usage.of(usage)
        digest = request.digest if isinstance(request, PreparedRequest) else request
        if digest is not None and not isinstance(digest, str):
            raise InvalidUsage("request must be a PreparedRequest, its digest (str) or None, "
                               f"got {type(request).__name__}")
        with self._lock:
            position, digest, estimate = self._answered(digest)
            return self._run(RecordUsage(read, position, digest, estimate, _now())).events

    def _answered(self, digest: str | None) -> tuple[int | None, str, int]:
        """The request (position, digest, estimate) a usage answers: the window this object
        fitted last when it is the newest thing handed out (or has ``digest``), else a
        `RequestPrepared` of the log."""
        fitted = self._fitted
        if fitted is not None and (digest is None or digest == fitted.digest()):
            return None, fitted.digest(), fitted.tokens
        prepared = self._prepared(digest)
        return prepared.originator_version, prepared.digest, prepared.estimated_tokens

    def _prepared(self, digest: str | None) -> RequestPrepared:
        """The newest `RequestPrepared` of this session (with ``digest`` when given): read
        back from the tail of the log, the whole log when the tail has none."""
        version = self.version
        tail = _USAGE_TAIL
        found = _newest_request(self.events(after_version=max(0, version - tail)), digest)
        if found is None and version > tail:
            for page in self.event_pages():
                found = _newest_request(page, digest) or found
        if found is None:
            which = "no request" if digest is None else f"no request with digest {digest!r}"
            raise InvalidUsage(f"session {self.id} prepared {which}: there is no request for "
                               "this usage to answer")
        return found

    def select_route(self, route: Route, reason: str = "explicit") -> list[DomainEvent]:
        """Switch the provider/model route; capacity and budget are resolved together (R19)."""
        try:
            why = RouteReason(reason)
        except ValueError:
            allowed = ", ".join(r.value for r in RouteReason if r is not RouteReason.INITIAL)
            raise InvalidProfile(f"reason must be one of {allowed}, got {reason!r}") from None
        if why is RouteReason.INITIAL:
            raise InvalidProfile("reason 'initial' is reserved for the session's first route")
        return self._run(SelectRoute(route, why, _now())).events

    def record(self, kind: type[DomainEvent], **fields: Any) -> list[DomainEvent]:
        """Record an event of the runtime's own (a class given to `register_event`) in the
        session's log, built from ``fields``; the session sets its id, version and time.

        It changes no view and no counter of its own; the timeline shows it (its class's
        `DomainEvent.timeline` line), `verify` checks it in the chain, replay and export
        carry it. `InvalidMessage` for a class of the library's own or one nobody
        registered, or for fields the class does not take."""
        return self._run(RecordEvent(kind, fields, _now())).events

    # -- views --

    def chat_view(self) -> list[ChatMessage]:
        """The provider-facing working history (after `prepare_request`: what was sent)."""
        with self._lock:
            return self._stored_state().chat_view()

    def conversation_view(self) -> list[ConversationMessage]:
        """The structured history after the turn limit (R28-R29)."""
        with self._lock:
            state = self._stored_state()
            return state.conversation_view(summarised_items(self._pipeline.backend, state))

    def events(self, *, after_version: int = 0) -> list[DomainEvent]:
        """The events recorded for this session, in order (reads the store).

        ``after_version`` skips the first events: ``events(after_version=v)`` is what was
        recorded since the session stood at version ``v``.
        """
        return self._pipeline.backend.read(self._position.session_id, after_version=after_version)

    def event_pages(self, *, page_size: int = 1000) -> Iterator[list[DomainEvent]]:
        """The events recorded for this session, in pages of ``page_size`` (reads the store):
        the whole log in O(page) memory, however long the session."""
        return self._pipeline.backend.read_pages(self._position.session_id, page_size=page_size)

    def _summarize(
        self, summarizer: Summarizer | SummaryFunction | None
    ) -> Summarize | None:
        chosen = as_summarizer(summarizer) if summarizer is not None else self._summarizer
        return None if chosen is None else partial(summary_outcome, chosen)

    def _run(
        self, command: Command, summarize: Summarize | None = None,
        decided: Callable[[], None] | None = None,
    ) -> Batch:
        with self._lock:
            return self._pipeline.save(self._position, command, summarize, decided)


class _Fitted:
    """The window `Session.fit_window` handed out last and its estimate: what a usage
    recorded without a request answers. Its digest is computed when a usage asks for it
    (never on the hot path of a fit)."""

    __slots__ = ("_digest", "tokens", "window")

    def __init__(self, window: Sequence[ChatMessage], tokens: int) -> None:
        self.window = tuple(window)  # the caller's list may change
        self.tokens = tokens
        self._digest: str | None = None

    def digest(self) -> str:
        if self._digest is None:
            self._digest = request_digest(self.window)
        return self._digest


_USAGE_TAIL = 256
"""How many of a session's newest events `Session.record_usage` reads for its request before
it reads the whole log (a usage answers a request a few events back)."""


def _newest_request(events: Iterable[DomainEvent], digest: str | None) -> RequestPrepared | None:
    """The last `RequestPrepared` of ``events`` (with ``digest`` when given), or None."""
    found = None
    for event in events:
        if isinstance(event, RequestPrepared) and digest in (None, event.digest):
            found = event
    return found


def _schema_text(tool: object) -> str:
    if isinstance(tool, str):
        return tool
    try:
        return json.dumps(tool, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise InvalidMessage(f"tools: a tool schema is not JSON-serialisable: {error}") from None


def _error_text(error: BaseException | str) -> str:
    if isinstance(error, str):
        return error
    return f"{type(error).__name__}: {error}"


class Store:
    """A turnledger store: sessions in an `eventsourcing` event store (E8).

    Open with `open_store(url)`. Use as a context manager or call `close()`.
    """

    def __init__(
        self,
        backend: EventStoreBackend,
        *,
        snapshot_interval: int = SNAPSHOT_INTERVAL,
        snapshot_messages: int = SNAPSHOT_MESSAGES,
    ):
        for name, value in (("snapshot_interval", snapshot_interval),
                            ("snapshot_messages", snapshot_messages)):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.backend = backend
        self.snapshot_interval = snapshot_interval
        self.snapshot_messages = snapshot_messages
        self._subscribers: list[Subscriber] = []
        self._observers: tuple[Observer, ...] = ()  # replaced whole: read without the lock
        self._lock = threading.Lock()
        self._pipeline = Pipeline(
            backend,
            snapshot_interval=snapshot_interval,
            snapshot_messages=snapshot_messages,
            publish=self._publish,
            observe=self._observe,
        )

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.backend.close()

    # -- sessions --

    def start_session(
        self,
        profile: RuntimeProfile | None = None,
        providers: Sequence[ProviderProfile] = (),
        route: Route | None = None,
        legacy: bool = False,
        session_id: str | UUID | None = None,
    ) -> Session:
        """Start and record a new session.

        ``route`` defaults to the first provider's model; with no provider at all, to
        ``Route("default", "default")`` whose capacity is unknown (R17-R19 fallbacks apply).

        Raises `InvalidProfile` for a route naming an unknown provider, `ConcurrencyConflict`
        when ``session_id`` already exists.
        """
        profile, providers, route = _start_options(profile, providers, route)
        if not isinstance(legacy, bool):
            raise TypeError(f"legacy must be a bool, got {type(legacy).__name__} {legacy!r}")
        uuid = uuid4() if session_id is None else parse_session_id(session_id)
        position = Position()
        start = StartSession(uuid, profile, providers, route, legacy, _now())
        try:
            self._pipeline.save(position, start)
        except ConcurrencyConflict:
            raise SessionExists(f"session {uuid} already exists") from None
        return Session(self._pipeline, position)

    def import_conversation(
        self,
        messages: Iterable[ConversationMessage | ChatMessage],
        profile: RuntimeProfile | None = None,
        providers: Sequence[ProviderProfile] = (),
        route: Route | None = None,
        *,
        as_live: bool = False,
        session_id: str | UUID | None = None,
    ) -> Session:
        """Start a session holding ``messages``, recorded in one transaction (issue 8).

        Nothing is stored when any message cannot be recorded (`InvalidMessage`): a
        conversation is imported whole or not at all. By default the messages are recorded as
        given (no truncation, no turn limit: the profile applies when a request is prepared);
        ``as_live=True`` records them as a live runtime would have. ``session_id`` names the
        new session (default: a random one); `ConcurrencyConflict` when it exists already.
        """
        profile, providers, route = _start_options(profile, providers, route)
        if not isinstance(as_live, bool):
            raise TypeError(f"as_live must be a bool, got {type(as_live).__name__} {as_live!r}")
        position = Position()
        uuid = uuid4() if session_id is None else parse_session_id(session_id)
        start = StartSession(uuid, profile, providers, route, False, _now())
        try:
            self._pipeline.save(position, ImportConversation(start, tuple(messages), as_live))
        except ConcurrencyConflict:
            if session_id is None:
                raise
            raise SessionExists(f"session {uuid} already exists") from None
        return Session(self._pipeline, position)

    def restore(self, session_id: str | UUID) -> Session:
        """Rebuild a session from its snapshot and later events, then sweep orphans (E5, R36).

        Whatever the sweep removes from the views is recorded (`OrphansSwept`); the removed
        messages stay in the log. A writer that appends between the read and the sweep's
        commit makes the sweep catch up and decide again (`retry_on_conflict`): a restore never
        fails because the session moved on. Raises `SessionNotFound`, `CorruptRecord`.
        """
        position = self._pipeline.load(parse_session_id(session_id))
        retry_on_conflict(lambda: self._pipeline.save(position, SweepOrphans(_now())))
        return Session(self._pipeline, position)

    def read_state(self, session_id: str | UUID) -> SessionView:
        """A session rebuilt from the store, orphans swept in memory only; writes nothing.

        For exports and inspection. Raises `SessionNotFound`, `CorruptRecord`.
        """
        position = self._pipeline.load(parse_session_id(session_id))
        swept = self._pipeline.decide(position, SweepOrphans(_now())).events
        older = summarised_items(self.backend, position.state, unrecorded=swept)
        return SessionView.of(position.state, older)

    def events_of(self, session_id: str | UUID) -> list[DomainEvent]:
        """Every recorded event of a session, in order. Raises `SessionNotFound`."""
        uuid = parse_session_id(session_id)
        events = self.backend.read(uuid)
        if not events:
            raise SessionNotFound(f"no session {uuid} in this store")
        return events

    def event_pages(
        self, session_id: str | UUID, *, page_size: int = 1000
    ) -> Iterator[list[DomainEvent]]:
        """Every recorded event of a session, in pages of ``page_size``, in order: O(page)
        memory however long the session (`events_of` reads them all at once)."""
        return self.backend.read_pages(parse_session_id(session_id), page_size=page_size)

    def sessions(
        self, *, after: str | UUID | None = None, limit: int | None = None
    ) -> list[str]:
        """The ids of the sessions in the store, oldest first: every one, or at most ``limit``
        created after the session ``after`` (the last id of the previous page).

        Raises `SessionNotFound` when ``after`` is not a session of this store.
        """
        start = None if after is None else parse_session_id(after)
        return [str(u) for u in self.backend.session_ids(after=start, limit=limit)]

    # -- privacy (issue 11) --

    @property
    def encrypted(self) -> bool:
        """Whether the store is encrypted at rest (opened with its key)."""
        return self.backend.protection.keyring is not None

    def forget(
        self,
        session_id: str | UUID,
        reason: str = "",
        *,
        if_version: int | None = None,
        if_idle_for: timedelta | None = None,
    ) -> bool:
        """Erase a session's content: destroy its data key, record `SessionForgotten` (ADR-0046).

        The analytics tables are brought up to date first, so the session's counters stay.
        The key is destroyed and the event recorded in ONE transaction (ADR-0066): a forget
        that is interrupted leaves the session either intact or forgotten. The old bytes of
        the key are then cleared from the files (`erase_destroyed_keys`). Afterwards nobody
        can read its messages (reads raise `SessionForgottenError`); its id, event count and
        hash chain remain, and `verify` still checks the chain. Other sessions are untouched.

        ``if_version``: forget only while the session's last version is this one — checked
        by that transaction itself (its `SessionForgotten` takes the next version, which an
        append of a running writer would have taken first), so a session written after it
        was judged is never erased (ADR-0098). ``if_idle_for``: judge it here, as
        `idle_sessions` does (by the database's clock where it has one), then forget it
        under ``if_version``. Either raises `SessionActive` when the session was written
        since (nothing is erased).

        Returns False when it was already forgotten (only the clearing of old bytes is done
        again, in case the forget that recorded it was killed before it). A session whose key
        an older version destroyed without recording the event (`unfinished_forgets`) gets
        the event now (True).

        Raises `NotEncrypted` for a store without a key (a plaintext log cannot erase one
        session), `SessionNotFound`.
        """
        uuid = parse_session_id(session_id)
        if if_version is not None and (type(if_version) is not int or if_version < 1):
            raise TypeError(f"if_version must be a version (an int >= 1), got "
                            f"{type(if_version).__name__} {if_version!r}")
        version, _ = self.backend.head(uuid)
        if version == 0:
            raise SessionNotFound(f"no session {uuid} in this store")
        keyring = self.backend.protection.keyring
        if keyring is None:
            raise NotEncrypted(
                f"{self.backend.url} is not encrypted: forgetting a session needs a store "
                "opened with a key (its content is erased by destroying its data key)"
            )
        if keyring.is_forgotten(uuid) and self._ends_forgotten(uuid, version):
            keyring.erase()
            return False
        if_version = self._judged_version(uuid, version, if_version, if_idle_for)
        self._count_before_forgetting()
        self._record_forgotten_unless_written(uuid, str(reason), if_version)
        keyring.destroyed(uuid)
        keyring.erase()
        return True

    def _record_forgotten_unless_written(
        self, uuid: UUID, reason: str, if_version: int | None
    ) -> None:
        """`_record_forgotten`, retried on a conflict when unconditional; under
        ``if_version`` a conflict is a writer that came first: `SessionActive`, nothing
        erased."""
        if if_version is None:
            retry_on_conflict(lambda: self._record_forgotten(uuid, reason))
            return
        try:
            self._record_forgotten(uuid, reason, if_version=if_version)
        except ConcurrencyConflict:
            raise SessionActive(
                f"session {uuid} was written after version {if_version} while it was "
                "being forgotten: not forgotten", session_id=str(uuid),
            ) from None

    def _judged_version(
        self, uuid: UUID, version: int, if_version: int | None, if_idle_for: timedelta | None
    ) -> int | None:
        """The version a conditional `forget` holds the session to (None: unconditional):
        ``if_version``, or the one `idle` finds when ``if_idle_for`` is given. Raises
        `SessionActive` when the session is not idle or is past that version already."""
        if if_idle_for is not None:
            judged = {i.session_id: i for i in self.idle(if_idle_for, sessions=[uuid])}
            if str(uuid) not in judged:
                raise SessionActive(
                    f"session {uuid} is not idle for {if_idle_for}: not forgotten",
                    session_id=str(uuid),
                )
            found = judged[str(uuid)].version
            if_version = found if if_version is None else if_version
            if found != if_version:
                raise SessionActive(f"session {uuid} is at version {found}, not {if_version}: "
                                    "it was written since; not forgotten", session_id=str(uuid))
        if if_version is not None and version != if_version:
            raise SessionActive(
                f"session {uuid} is at version {version}, not {if_version}: it was written "
                "since it was judged; not forgotten", session_id=str(uuid),
            )
        return if_version

    def _record_forgotten(
        self, session_id: UUID, reason: str, *, if_version: int | None = None
    ) -> None:
        """Destroy the data key and record `SessionForgotten`, in one transaction; with
        ``if_version``, that transaction fails on the (session, version) key when any other
        record was appended after it (`ConcurrencyConflict`)."""
        keyring = self.backend.protection.keyring
        assert keyring is not None, "forget checked that the store is encrypted"
        head, chain = self.backend.head(session_id)
        if if_version is not None and head != if_version:
            raise ConcurrencyConflict(f"session {session_id} is at version {head}")
        destroy = keyring.destruction(session_id)
        if self._ends_forgotten(session_id, head):  # recorded, but the key was kept
            keyring.table.write(destroy)
            return
        event = SessionForgotten(session_id, head + 1, _now(), reason=reason)
        self.backend.append(session_id, [event], prev_chain=chain, keys=destroy)

    def unfinished_forgets(self) -> list[str]:
        """The sessions whose data key is destroyed but whose stream does not end with
        `SessionForgotten`, oldest first: a forget of a version before ADR-0066 killed between
        its two steps, or a changed keys table. `forget` finishes each (`turnledger purge
        --yes` does, whatever their age); `verify` reports them until then."""
        keys = self.backend.protection.keys
        if self.backend.protection.keyring is None or keys is None:
            return []
        destroyed = keys.forgotten()
        found: list[str] = []
        for uuid in self.backend.session_ids():
            if uuid in destroyed and not self._ends_forgotten(uuid, self.backend.head(uuid)[0]):
                found.append(str(uuid))
        return found

    def erase_destroyed_keys(self) -> None:
        """Clear the old bytes of destroyed data keys from the store's files (SQLite: the
        write-ahead log is checkpointed and truncated; PostgreSQL: ``VACUUM tl_keys``).
        `forget` does it after each erasure; this redoes it for a forget or a purge killed
        before that last step (`turnledger purge --yes` ends with it). Raises `NotEncrypted`
        for a store without a key."""
        keyring = self.backend.protection.keyring
        if keyring is None:
            raise NotEncrypted(f"{self.backend.url} is not encrypted: it has no data keys")
        keyring.erase()

    def _ends_forgotten(self, session_id: UUID, version: int) -> bool:
        last = self.backend.read_records(session_id, after_version=version - 1)
        topic = self.backend.mapper.codec.topic_of(SessionForgotten)
        return bool(last) and last[-1].topic == topic

    def _count_before_forgetting(self) -> None:
        # What counts the events (the analytics tables) was registered by the package's
        # composition root: the store imports no projection.
        run_before_erasure(self.backend)

    def forgotten(self, session_id: str | UUID) -> bool:
        """Whether the session's content was erased (`forget`)."""
        return self.backend.mapper.is_forgotten(parse_session_id(session_id))

    def idle_sessions(
        self, older_than: timedelta, *, now: datetime | None = None
    ) -> list[tuple[str, datetime]]:
        """(session id, time of its last record) of each session not yet forgotten that
        nobody wrote for ``older_than`` (retention: `turnledger purge`); `idle` says how
        each was judged and at which version."""
        return [(i.session_id, i.last_written) for i in self.idle(older_than, now=now)]

    def idle(
        self,
        older_than: timedelta,
        *,
        now: datetime | None = None,
        sessions: Iterable[UUID] | None = None,
    ) -> list[IdleSession]:
        """The sessions (of ``sessions``, default all) not yet forgotten that nobody wrote
        for ``older_than``, each with the version it was judged at (`forget`'s
        ``if_version``).

        The clock is one no writer's skew can move where the database has one (ADR-0098):
        on PostgreSQL the server's, both for now and for when each record was written (a
        column the server fills); a session last written before the store kept that column
        is judged by its events' own time. On SQLite and memory the writers share the
        machine and its clock, and the events' time is trusted — except one later than now
        plus `FUTURE_TOLERANCE`: such a session is never judged idle (logged), since a clock
        ahead says nothing of when it really wrote.
        """
        if not isinstance(older_than, timedelta):
            raise TypeError(f"older_than must be a datetime.timedelta, got "
                            f"{type(older_than).__name__} {older_than!r}")
        clock = self.backend.database.write_times(self.backend.recorder)
        written: dict[UUID, datetime] = {}
        if clock is not None:
            database_now, written = clock
            now = now or database_now
        now = now or _now()
        limit = now - older_than
        found: list[IdleSession] = []
        for uuid in self.backend.session_ids() if sessions is None else sessions:
            if self.backend.mapper.is_forgotten(uuid):
                continue
            version, _ = self.backend.head(uuid)
            last = self.backend.read_records(uuid, after_version=version - 1)
            if not last:
                continue
            event = self.backend.mapper.to_domain_event(last[-1])
            if isinstance(event, SessionForgotten):
                continue
            when, clock_name = written.get(uuid), "database"
            if when is None:
                when, clock_name = event.timestamp, "writer"
                if when > now + FUTURE_TOLERANCE:
                    log.warning(
                        "session %s: its last event is dated %s, after now (%s) by more than "
                        "%s: a writer's clock is ahead; not judged idle", uuid,
                        when.isoformat(), now.isoformat(), FUTURE_TOLERANCE,
                    )
                    continue
            if when < limit:
                found.append(IdleSession(str(uuid), when, version, clock_name))
        return found

    def rekey(self, new_key: bytes | str, *, earlier: Sequence[bytes | str] = ()) -> int:
        """Rotate the master key: re-wrap every data key under ``new_key`` (no event is
        rewritten); the store is then opened with ``new_key``. Returns how many data keys were
        re-wrapped. One transaction that no session start interleaves with: a writer that
        kept the old key is refused a new session (`StoreChanged`) and reopens with the new
        one (ADR-0098). ``earlier``: older master keys that some data keys are still wrapped
        by (a store re-keyed under running writers before ADR-0098; `verify` names them).
        Raises `NotEncrypted`, `InvalidKey`, `WrongKey` (a data key under a key not given)."""
        keyring = self.backend.protection.keyring
        if keyring is None:
            raise NotEncrypted(f"{self.backend.url} is not encrypted: there is no key to rotate")
        return keyring.rekey(parse_key(new_key, "new key"),
                             [parse_key(k, "earlier key") for k in earlier])

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(event)`` for every new `HistoryTrimmed`, after it commits (R33).

        Returns a function that unsubscribes. A callback that raises is logged and skipped;
        it never undoes what was recorded.
        """
        if not callable(callback):
            raise TypeError("callback must be callable")
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def observe(self, callback: Observer) -> Callable[[], None]:
        """Call ``callback(events)`` with every batch of events this store object commits,
        whole and in order (one command: an append with its trim, a request with its
        sweep, trim and summary), after the commit, in the thread that wrote them, before
        the writing call returns (or raises: a refused request is recorded first).

        For in-process instrumentation (`turnledger.otel`): the callback runs while the
        session's lock is held, so it must be quick and must not write to the session.
        ``events`` is a tuple of the recorded events. Other processes' writes, and a batch
        found stored when an in-doubt append is retried, are not observed. Returns a function
        that stops the calls. A callback that raises is logged and skipped; it never undoes
        what was recorded.
        """
        if not callable(callback):
            raise TypeError("callback must be callable")
        with self._lock:
            self._observers = (*self._observers, callback)

        def unobserve() -> None:
            with self._lock:
                observers = list(self._observers)
                if callback in observers:
                    observers.remove(callback)
                self._observers = tuple(observers)

        return unobserve

    # -- internals --

    def _publish(self, notices: Sequence[HistoryTrimmed]) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for notice in notices:
            for callback in subscribers:
                try:
                    callback(notice)
                except Exception:
                    log.exception("HistoryTrimmed subscriber %r failed", callback)

    def _observe(self, events: Sequence[DomainEvent]) -> None:
        observers = self._observers
        if not observers:
            return
        batch = tuple(events)
        for callback in observers:
            try:
                callback(batch)
            except Exception:
                log.exception("event observer %r failed", callback)


KEY_VARIABLE = "TURNLEDGER_KEY"
"""The environment variable `open_store` takes the encryption key from when none is given."""
AUDIT_KEY_VARIABLE = "TURNLEDGER_AUDIT_KEY"
"""The environment variable `open_store` takes the audit key from when none is given."""


def open_store(
    url: str | None = None,
    *,
    key: bytes | str | None = None,
    audit_key: bytes | str | None = None,
    allow_unkeyed: bool = False,
    **options: Any,
) -> Store:
    """Open a store: ``sqlite:///path.db`` (default ``./turnledger.db``), ``memory://``,
    ``postgresql://user@host:port/dbname``.

    ``key`` encrypts the store at rest (32 bytes, or their base64 or hex text; default: the
    ``TURNLEDGER_KEY`` environment variable, if set): one data key per session, wrapped by this
    master key (ADR-0045). ``audit_key`` (same forms; default ``TURNLEDGER_AUDIT_KEY``) makes
    the hash chain an HMAC-SHA256 (ADR-0047). ``allow_unkeyed`` opens a store whose chain is
    unkeyed although an audit key is given (for `verify`, which reports it).

    Raises `InvalidStoreURL` for a URL that cannot be used, `StoreUnavailable` when the
    database cannot be reached, `InvalidKey`, `KeyRequired`, `WrongKey`, `NotEncrypted`,
    `AuditKeyRequired`, `UnkeyedChain` (`turnledger.store.keys`) for a key that does not fit.
    """
    if key is None:
        key = os.environ.get(KEY_VARIABLE) or None
    if audit_key is None:
        audit_key = os.environ.get(AUDIT_KEY_VARIABLE) or None
    if url is not None and (not isinstance(url, str) or not url.strip()):
        raise InvalidStoreURL(f"a store URL is a non-empty str (None: {DEFAULT_STORE_URL}), got "
                              f"{type(url).__name__} {url!r}")
    backend = open_backend(
        url or DEFAULT_STORE_URL,
        key=None if key is None else parse_key(key, "key"),
        audit_key=None if audit_key is None else parse_key(audit_key, "audit key"),
        allow_unkeyed=allow_unkeyed,
    )
    try:
        return Store(backend, **options)
    except BaseException:  # a bad option: the connections just opened are not leaked
        backend.close()
        raise
