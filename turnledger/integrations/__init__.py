"""Optional doorways into agent frameworks (extras only).

- `turnledger.integrations.openai_agents`: a session for the OpenAI Agents SDK
  (``pip install 'turnledger[openai-agents]'``);
- `turnledger.integrations.langchain`: a chat message history, a trimming step for LangGraph
  and LCEL, and LangChain message conversions (``pip install 'turnledger[langchain]'``).

Nothing here is imported by ``import turnledger``; each module imports its framework only when
it needs it, so the core keeps its four runtime dependencies.

A framework's session calls carry no expected state ("add these items", "what should the model
see"), and its own sessions never refuse one because another worker wrote first; so every call
that records something runs through `retrying`: after a `ConcurrencyConflict` (nothing of the
call was stored, the session reloads itself) it is decided again on the newer state, backing
off, until it lands or the budget is spent (ADR-0065).

`SessionsByName` is what the integration objects that open their own sessions share (the
store, how a session is started, the conflict budget, the summarizer of their windows, and the
sessions opened so far, one per framework name): the Agents SDK session, the LangChain trimmer
(and so the ``create_agent`` middleware) and the ADK callback.

`IntegrationOptions` is the one value of what every integration object is built with (profile,
providers, route, summarizer, conflict budget): ``options=`` takes it, and its fields are also
accepted one by one as keywords (a keyword given wins over the value's field).

`after_recorded` is how every integration tells which of its framework's messages are new: they
follow the newest place where the record lines up with them.

`grouped` (`turnledger.domain.formats`) and `BuiltOnce` are how the frameworks that group a
turn's user side into one message (a pydantic-ai request, a genai ``user`` content) build each
window message once (ADR-0091).

`record_usage` is how every integration records what the provider billed for a model call
(issue 35): against the window `fit_window` handed out for that call, by its digest, so a usage
is never recorded for a window it does not answer; a usage the framework does not have records
nothing, and one that cannot be recorded is logged, never raised into the framework's loop.
`WaitingUsages` holds usages until the integration's next store call in a worker thread (the
frameworks whose replies are recorded by their next call: no thread hop of its own). `Asked`
holds, per model call, the window handed to it until its reply comes: what the reply's usage
answers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, ParamSpec, TypedDict, TypeVar, Unpack
from uuid import NAMESPACE_URL, UUID, uuid5

import attrs

from turnledger.domain.arguments import is_number
from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.decider import request_digest
from turnledger.domain.errors import (
    AppendRefused,
    ConcurrencyConflict,
    InvalidUsage,
    SessionNotFound,
)
from turnledger.domain.formats import (
    Piece,
    conversation_of,
    grouped,
    split_groups,
    user_side,
)
from turnledger.domain.messages import (
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolResult,
    ToolResults,
    from_chat_messages,
)
from turnledger.domain.usage import Usage
from turnledger.store.backend import RETRY_BUDGET_SECONDS, retry_on_conflict
from turnledger.store.session import Session, Store
from turnledger.store.summaries import Summarizer, SummaryFunction, as_summarizer

log = logging.getLogger("turnledger.integrations")

__all__ = [
    "CONFLICT_BUDGET_SECONDS",
    "Asked",
    "BuiltOnce",
    "IntegrationOptions",
    "OptionKeywords",
    "Piece",
    "ReadUsage",
    "SessionsByName",
    "WaitingUsages",
    "WindowKeywords",
    "after_recorded",
    "conflict_budget",
    "conversation_of",
    "fit_then_build",
    "fit_window",
    "fresh_json",
    "grouped",
    "missing_extra",
    "off_loop",
    "open_session",
    "options_of",
    "record_usage",
    "retrying",
    "session_uuid",
    "user_side",
]

P = ParamSpec("P")
R = TypeVar("R")
M = TypeVar("M")
K = TypeVar("K")
T = TypeVar("T")
V = TypeVar("V")

_NAMESPACE = uuid5(NAMESPACE_URL, "https://turnledger/integrations/session")

CONFLICT_BUDGET_SECONDS = RETRY_BUDGET_SECONDS
"""How long an integration's call keeps deciding again after conflicts, by default (30 s)."""


def session_uuid(name: str | UUID) -> UUID:
    """The turnledger session id of a framework's session or thread name.

    A UUID text (or a `UUID`) is taken as it is; any other name maps to the same UUID every
    time (UUID5), so a conversation called ``"user-42"`` is found again by another process.
    Anything but a non-empty str is refused (`TypeError`, `ValueError`): ``None``, ``5`` and
    ``"5"`` would otherwise name one shared conversation, mixing the users that pass them.
    """
    if isinstance(name, UUID):
        return name
    if not isinstance(name, str):
        raise TypeError(f"a session name must be a str, got {type(name).__name__} {name!r}: "
                        "give each conversation its own name")
    if not name.strip():
        raise ValueError("a session name must not be empty: give each conversation its own name")
    try:
        return UUID(name)
    except ValueError:
        return uuid5(_NAMESPACE, name)


def missing_extra(module: str, needs: str, extra: str) -> ImportError:
    """What an integration module raises when its framework is not installed: it names the
    module, what it needs, and the extra that installs it."""
    return ImportError(f"turnledger.integrations.{module} needs {needs}: "
                       f"pip install 'turnledger[{extra}]'")


async def off_loop(function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run a blocking store call in a worker thread, so the event loop never waits on I/O."""
    return await asyncio.to_thread(functools.partial(function, *args, **kwargs))


Decided = Callable[[list[ChatMessage]], None]
"""What a fit calls with the window it decided, right before committing it
(`Session.fit_window`)."""


async def fit_then_build(
    fit: Callable[[Decided], list[ChatMessage]], build: Callable[[list[ChatMessage]], T]
) -> T:
    """``build`` of the window ``fit(decided)`` returns, ``fit`` in a worker thread (it
    writes) and ``build`` in the event loop's thread, while the write waits on the database
    when it can (ADR-0093).

    ``fit`` calls ``decided`` with the window it decided right before committing it: the
    loop builds that one meanwhile (a database call gives the interpreter up). It is used
    only if ``fit`` returns that very list; a retry that decided again, or a fit with nothing
    to write, is built after it returns. A fit that raises raises here; nothing built is
    handed out.
    """
    loop = asyncio.get_running_loop()
    told: asyncio.Future[list[ChatMessage]] = loop.create_future()

    def tell(window: list[ChatMessage]) -> None:  # in the worker
        loop.call_soon_threadsafe(_first, told, window)

    work = asyncio.ensure_future(off_loop(fit, tell))
    try:
        await asyncio.wait((told, work), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        # The write goes on in its thread (it cannot be stopped halfway); its outcome is
        # the store's, and a failure of it is not left unretrieved.
        work.add_done_callback(_retrieved)
        raise
    early: tuple[list[ChatMessage], T] | None = None
    if told.done() and not work.done():
        window = told.result()
        try:
            early = window, build(window)
        except Exception:
            early = None  # built again below, where its error is raised if it comes again
    window = await work
    if early is not None and early[0] is window:
        return early[1]
    return build(window)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Take a finished task's outcome so that asyncio does not report it as never retrieved."""
    if not task.cancelled():
        task.exception()


def _first(future: asyncio.Future[T], value: T) -> None:
    """Resolve ``future`` with ``value`` unless it was (the first decision of a fit wins)."""
    if not future.done():
        future.set_result(value)


def open_session(
    store: Store,
    session_id: str,
    *,
    profile: RuntimeProfile | None = None,
    providers: Sequence[ProviderProfile] = (),
    route: Route | None = None,
) -> Session:
    """The turnledger session named ``session_id`` (`session_uuid`): restored when the store
    has it, else started with ``profile``, ``providers`` and ``route``. A restored session
    keeps the profile it was started with (its record says how it trims); a different
    ``profile`` given for it is logged, not applied."""
    if not isinstance(store, Store):
        raise TypeError(f"store must be a turnledger Store (open_store(url)), got "
                        f"{type(store).__name__} {store!r:.60}")
    uuid = session_uuid(session_id)
    for _ in range(2):
        try:
            return _restored(store.restore(uuid), profile)
        except SessionNotFound:
            pass
        try:
            return store.start_session(profile, providers, route, session_id=uuid)
        except ConcurrencyConflict:
            continue  # another process started it first: restore theirs
    return _restored(store.restore(uuid), profile)


def _restored(session: Session, profile: RuntimeProfile | None) -> Session:
    """``session``, with a warning when the ``profile`` asked for is not the one it keeps."""
    kept = session.profile
    if profile is not None and profile != kept and (
        profile.pricing is not None or attrs.evolve(profile, pricing=kept.pricing) != kept
    ):  # a profile that left its pricing unset takes the recorded one (issue 21)
        log.warning("session %s keeps the profile it was started with; the profile given "
                    "(%r) is not applied to it", session.id, profile)
    return session


def fit_window(
    session: Session, summarizer: Summarizer | None,
    messages: Sequence[ConversationMessage | ChatMessage] = (),
    decided: Decided | None = None,
) -> list[ChatMessage]:
    """The window an integration hands its framework's model: `Session.fit_window`, with the
    integration's ``summarizer`` when it was given one (issue 24), else the session's own;
    ``messages`` (the step's new ones) recorded first in the same transaction; ``decided``
    as `Session.fit_window` takes it (`fit_then_build`)."""
    options: dict[str, Any] = {}
    if summarizer is not None:
        options["summarizer"] = summarizer
    if messages:
        options["messages"] = messages
    if decided is not None:
        options["decided"] = decided
    return session.fit_window(**options)


def _opening(message: ChatMessage, opens: Callable[[str], bool]) -> bool | None:
    """`grouped`'s opening of a window's provider message, read off the message itself (a
    tool message carries its result, whose ``extra`` decides)."""
    if message.role == "assistant":
        return None
    if message.role == "tool":
        assert isinstance(message.item, ToolResult)  # `BuiltOnce._groups` checked
        return opens(message.item.extra)
    return not message.synthetic and opens(message.extra)


def _piece_object(piece: Piece) -> object:
    """The object a window's provider message keeps of ``piece`` (`_piece_of`)."""
    message, index = piece
    if isinstance(message, ToolResults):
        return message.results[index]
    if isinstance(message, Chat):
        return message.message
    return message


def _piece_of(message: ChatMessage) -> object:
    """What a window's provider message holds of its piece: the tool item it carries (a
    result, an assistant's calls), else the message itself (a `Chat`'s own message)."""
    item = message.item
    return item if item is not None else message


class BuiltOnce(Generic[M]):
    """A window's framework messages, each built once per integration object: a step's window
    is the last one plus the step's messages, and building and validating the ~180 messages of
    a window at every model call was most of its cost. ``opens`` groups the window (`grouped`);
    ``build`` makes the messages of the groups not seen yet, in one go; ``fresh`` copies a kept
    message for the caller, so a framework that edits its request in place never edits the
    next window. Thread-safe (the integrations' calls run in worker threads).

    A group is known by the identity of its provider messages (a session hands out the same
    message objects window after window; the cache holds them, so an identity is never
    reused while it is a key): looking a window up hashes a few integers per message and
    converts nothing. A window whose tool messages do not carry their results (provider
    messages from elsewhere: a tool result's name comes from its call in an earlier message)
    is grouped and built whole, as `grouped` does, without the cache.

    `seed` takes messages already built for groups of pieces (a framework message just
    converted and checked to come back, which validated that very message): a window group
    made of those very pieces takes it instead of building it again."""

    def __init__(
        self,
        opens: Callable[[str], bool],
        build: Callable[[list[tuple[Piece, ...]]], list[M]],
        fresh: Callable[[M], M],
    ) -> None:
        self._opens, self._build, self._fresh = opens, build, fresh
        # ids of a group's messages -> (those messages, kept alive; the built message)
        self._built: dict[tuple[int, ...], tuple[tuple[ChatMessage, ...], M]] = {}
        # ids of a group's piece objects -> (those objects, kept alive; the built message)
        self._seeds: dict[tuple[int, ...], tuple[tuple[object, ...], M]] = {}
        self._lock = threading.Lock()

    def seed(self, built: Iterable[tuple[tuple[Piece, ...], M]]) -> None:
        """Take ``built`` (pieces, their message) for the next windows (class doc)."""
        with self._lock:
            if len(self._seeds) > 256:  # never found: their group did not reach a window
                self._seeds.clear()
            for pieces, message in built:
                objects = tuple(_piece_object(piece) for piece in pieces)
                self._seeds[tuple(map(id, objects))] = (objects, message)

    def __call__(self, window: Sequence[ChatMessage]) -> list[M]:
        found = self._groups(window)
        if found is None:
            return [self._fresh(m) for m in self._build(
                grouped(conversation_of(window), self._opens))]
        groups, keys = found
        with self._lock:
            built = self._built
            if len(built) > 2 * len(groups) + 256:  # what trims removed from the window
                self._built = built = {k: built[k] for k in keys if k in built}
            missing = {k: g for k, g in zip(keys, groups, strict=True) if k not in built}
            if missing and self._seeds:
                for key, group in list(missing.items()):
                    seeded = self._seeds.pop(tuple(id(_piece_of(m)) for m in group), None)
                    if seeded is not None:
                        built[key] = (group, seeded[1])
                        del missing[key]
            if missing:
                pieces = [self._pieces(group) for group in missing.values()]
                built.update(zip(missing, zip(missing.values(), self._build(pieces),
                                              strict=True), strict=True))
            return [self._fresh(built[k][1]) for k in keys]

    def _groups(
        self, window: Sequence[ChatMessage]
    ) -> tuple[list[tuple[ChatMessage, ...]], list[tuple[int, ...]]] | None:
        """The window's messages in `grouped`'s groups, and each group's key (the ids of its
        messages); None when a tool message does not carry its result."""
        if any(m.role == "tool" and not isinstance(m.item, ToolResult) for m in window):
            return None
        opens = self._opens
        groups = [tuple(group) for group in split_groups(window, lambda m: _opening(m, opens))]
        return groups, [tuple(map(id, group)) for group in groups]

    def _pieces(self, group: tuple[ChatMessage, ...]) -> tuple[Piece, ...]:
        """The pieces of one group (its tool messages carry their results)."""
        (pieces,) = grouped(from_chat_messages(group), self._opens)
        return pieces


def conflict_budget(seconds: float) -> float:
    """``seconds`` as an integration's conflict budget; ``ValueError`` unless a number >= 0
    (0: decide once, never again; there is no unbounded retry)."""
    if not is_number(seconds) or not seconds >= 0:
        raise ValueError(f"conflict_budget_seconds must be a number >= 0, got {seconds!r}")
    return float(seconds)


def _providers(providers: Iterable[ProviderProfile]) -> tuple[ProviderProfile, ...]:
    return tuple(providers)


@attrs.frozen(kw_only=True)
class IntegrationOptions:
    """What every integration object is built with, as one value: sessions it starts start
    with ``profile``, ``providers`` and ``route`` (`open_session`); each window shows the turns
    a token-budget trim drops as the ``summarizer``'s summary in place of the breadcrumb (a
    `Summarizer` or a bare callable, `as_summarizer`; None: the session's own; issue 24); a
    write that loses a race is decided again for at most ``conflict_budget_seconds`` (default
    30; 0: once; `conflict_budget`, ADR-0065). Checked when built (`TypeError`, `ValueError`).

    Every integration takes it as ``options=``, and each field as a keyword of its own; a
    keyword given wins over the field of ``options`` (`options_of`)."""

    profile: RuntimeProfile | None = None
    providers: tuple[ProviderProfile, ...] = attrs.field(default=(), converter=_providers)
    route: Route | None = None
    summarizer: Summarizer | None = attrs.field(default=None, converter=as_summarizer)
    conflict_budget_seconds: float = attrs.field(
        default=CONFLICT_BUDGET_SECONDS, converter=conflict_budget)

    def open(self, store: Store, session_id: str) -> Session:
        """`open_session` of ``session_id`` with these options (I/O)."""
        return open_session(store, session_id, profile=self.profile, providers=self.providers,
                            route=self.route)

    def retrying(self, write: Callable[[], R], what: str) -> R:
        """`retrying` under these options' conflict budget."""
        return retrying(write, what, self.conflict_budget_seconds)


class WindowKeywords(TypedDict, total=False):
    """The fields of `IntegrationOptions` an integration object given its session takes."""

    summarizer: Summarizer | SummaryFunction | None
    conflict_budget_seconds: float


class OptionKeywords(WindowKeywords, total=False):
    """The fields of `IntegrationOptions`, as the keywords an integration accepts."""

    profile: RuntimeProfile | None
    providers: Sequence[ProviderProfile]
    route: Route | None


def options_of(
    options: IntegrationOptions | None, keywords: WindowKeywords, *, session_given: bool = False
) -> IntegrationOptions:
    """``options`` with the fields ``keywords`` gives replaced (none: the defaults), checked.
    ``session_given``: the object was given its session, so only the fields of
    `WindowKeywords` are keywords of it (`TypeError` for another, as before the value)."""
    if session_given:
        for name in keywords.keys() - WindowKeywords.__annotations__.keys():
            raise TypeError(f"got an unexpected keyword argument {name!r}")
    if options is None:
        return IntegrationOptions(**keywords)
    if not isinstance(options, IntegrationOptions):
        raise TypeError(f"options must be IntegrationOptions, got {type(options).__name__}")
    return attrs.evolve(options, **keywords) if keywords else options


def after_recorded(
    given: Sequence[T],
    recorded: Sequence[K],
    *,
    same: Callable[[T, K], bool] | None = None,
    key: Callable[[T], K] | None = None,
    most: int | None = None,
    whole: bool = False,
) -> int | None:
    """Where the items of ``given`` that are not recorded begin: the index after the newest
    place in ``given`` where the newest ``recorded`` items line up with the items before it.
    Every integration tells its framework's new messages by it.

    ``same(item, recorded_item)`` says a given item is a recorded one (default ``==``; with
    ``key``, ``key(item) == recorded_item``, each key computed once); ``most`` bounds how many
    recorded items are compared (default all). ``whole``: a place counts only where all
    compared items line up, or all the given items before it do (the given items begin inside
    the record); else the place where the most line up wins, the newest of equals. None: no
    place (or nothing recorded)."""
    if not recorded:
        return None
    cap = len(recorded) if most is None else min(most, len(recorded))
    if same is None and key is None and whole:  # a slice at a time (a window: no new items)
        tail = list(recorded[len(recorded) - cap:])
        return next((end for end in range(len(given), 0, -1)
                     if list(given[end - min(cap, end):end]) == tail[cap - min(cap, end):]),
                    None)
    lines_up = _lines_up(given, same, key)
    best: tuple[int, int] | None = None  # (recorded items lined up, the index after them)
    for end in range(len(given), 0, -1):
        size = min(cap, end)
        lined = 0
        while lined < size and lines_up(end - 1 - lined, recorded[-1 - lined]):
            lined += 1
        if whole:
            if lined == size:
                return end
        elif lined and (best is None or lined > best[0]):
            best = (lined, end)
            if lined == cap:
                break  # no older place lines up more
    return None if best is None else best[1]


def _lines_up(
    given: Sequence[T], same: Callable[[T, K], bool] | None, key: Callable[[T], K] | None
) -> Callable[[int, K], bool]:
    """`after_recorded`'s test of ``given[index]`` against a recorded item."""
    if key is not None:
        keys: dict[int, K] = {}

        def keyed(index: int, kept: K) -> bool:
            if index not in keys:
                keys[index] = key(given[index])
            return keys[index] == kept

        return keyed
    if same is not None:
        return lambda index, kept: same(given[index], kept)
    return lambda index, kept: given[index] == kept


def fresh_json(value: Any) -> Any:
    """A copy of a JSON value (dicts and lists copied, leaves shared: they are immutable), for
    a converted message an integration keeps and hands out."""
    if type(value) is dict:
        return {key: fresh_json(inner) for key, inner in value.items()}
    if type(value) is list:
        return [fresh_json(inner) for inner in value]
    return value


class _Refused(ConcurrencyConflict):
    """An `AppendRefused` carried through `retry_on_conflict`'s backoff like a conflict."""

    def __init__(self, refused: AppendRefused) -> None:
        super().__init__(str(refused))
        self.refused = refused


def retrying(write: Callable[[], R], what: str, budget_seconds: float) -> R:
    """``write()``; after a `ConcurrencyConflict` or an `AppendRefused`, ``write()`` again on
    the reloaded session, backing off (`retry_on_conflict`), until it returns or
    ``budget_seconds`` are spent.

    Safe because either means nothing of that attempt was stored (one transaction, E3; a
    refusal came before anything could commit) and ``write`` decides afresh on each call.
    When the budget is spent, the last error is raised again, saying so and naming ``what``,
    the attempts and the time; nothing of the call was recorded. No store round trip is added
    when the first attempt lands (ADR-0065).
    """
    attempts = 0
    started = time.monotonic()

    def attempt() -> R:
        nonlocal attempts
        attempts += 1
        try:
            return write()
        except AppendRefused as refused:  # a busy store: as safe to retry as a conflict
            raise _Refused(refused) from refused

    def gave_up() -> str:
        return (f"{what}: gave up after {attempts} attempt(s) in "
                f"{time.monotonic() - started:.1f} s (conflict budget {budget_seconds:g} s)")

    try:
        return retry_on_conflict(attempt, budget_seconds=budget_seconds)
    except _Refused as error:
        raise AppendRefused(
            f"{gave_up()}: the store refused the last attempt before anything was stored, "
            f"and nothing of this call was recorded; last: {error.refused}"
        ) from error.refused
    except ConcurrencyConflict as error:
        raise ConcurrencyConflict(
            f"{gave_up()}: other writers of this conversation recorded first each time, and "
            f"nothing of this call was recorded; last: {error}"
        ) from error


ReadUsage = Callable[[], Usage | None]
"""What reads a framework's usage of one model call into a `Usage` (None: the framework has
none for it); it raises `InvalidUsage` for one that cannot be what was billed."""


def record_usage(
    session: Session, window: Sequence[ChatMessage], read: ReadUsage, budget_seconds: float,
) -> bool:
    """Record what the provider billed for the model call whose input was ``window``, the
    window `fit_window` handed out for it (issue 35): `Session.record_usage` with the
    window's digest, so it answers that window or nothing (another fit of the session since:
    not recorded). ``read()`` gives the usage (None: nothing to record). A write that loses a
    race is decided again within ``budget_seconds`` (`retrying`).

    Never raises: a usage that cannot be read or recorded is logged (a warning for an
    `InvalidUsage`, the traceback for anything else, as the store's subscribers are) and the
    framework's loop goes on; what it billed is then not in the log. Returns whether it was
    recorded. Blocking: call it off the event loop."""
    try:
        usage = read()
        if usage is None:
            return False
        digest = request_digest(window)
        retrying(lambda: session.record_usage(usage, digest),
                 f"recording the usage of a model call of session {session.id}", budget_seconds)
    except InvalidUsage as error:
        log.warning("session %s: the usage of a model call was not recorded: %s",
                    session.id, error)
        return False
    except Exception:
        log.exception("session %s: recording the usage of a model call failed", session.id)
        return False
    return True


class WaitingUsages:
    """Usages of model calls waiting for their integration's next store call, which records
    them (`record_usage`) in its worker thread before its own write: before any new fit of the
    session, so each still answers its window. Thread-safe; at most `MOST` wait (the oldest
    is dropped, logged, past it: a framework that never writes again)."""

    MOST = 256

    def __init__(self) -> None:
        self._waiting: list[tuple[Session, Sequence[ChatMessage], ReadUsage]] = []
        self._lock = threading.Lock()

    def add(self, session: Session, window: Sequence[ChatMessage], read: ReadUsage) -> None:
        """Hold the usage ``read`` gives of the model call whose input was ``window``."""
        with self._lock:
            if len(self._waiting) >= self.MOST:
                dropped = self._waiting.pop(0)[0]
                log.warning("session %s: the usage of a model call was not recorded: more "
                            "than %d waited for a store call", dropped.id, self.MOST)
            self._waiting.append((session, window, read))

    def record(self, budget_seconds: float) -> None:
        """Record every waiting usage, oldest first (blocking: off the event loop)."""
        if not self._waiting:  # the common case, without the lock
            return
        with self._lock:
            waiting, self._waiting = self._waiting, []
        for session, window, read in waiting:
            record_usage(session, window, read, budget_seconds)


class Asked(Generic[K, V]):
    """What an integration handed to the model calls whose replies have not come yet (the
    window, or what it needs of it), by the call's key (a run, a thread, an agent's call):
    what each reply's usage answers (issue 35). Past ``most`` held, all are dropped first (the
    calls whose reply never came: the model raised); None: no bound. Thread-safe."""

    def __init__(self, most: int | None = 256) -> None:
        self._most = most
        self._held: dict[K, V] = {}
        self._lock = threading.Lock()

    def hold(self, key: K, value: V) -> None:
        """Hold ``value`` for the call ``key`` (in place of what was held for it)."""
        with self._lock:
            if self._most is not None and len(self._held) > self._most:
                self._held.clear()
            self._held[key] = value

    def get(self, key: K) -> V | None:
        """What is held for the call ``key`` (None: nothing)."""
        return self._held.get(key)

    def take(self, key: K) -> V | None:
        """What is held for the call ``key``, no longer held (None: nothing)."""
        with self._lock:
            return self._held.pop(key, None)


class SessionsByName:
    """The part every integration object that opens its own sessions holds (not a framework
    type): ``store``; its `IntegrationOptions` (``options=`` and the keywords of its fields,
    `options_of`: how a session it serves is opened, its summarizer and conflict budget);
    ``session_id``, the one conversation it serves when given (None: the framework's name of
    each call decides); and the sessions opened so far, one per name, each opened once at its
    first use (`_session_named`, thread-safe).
    """

    def __init__(
        self,
        store: Store,
        *,
        session_id: str | None = None,
        options: IntegrationOptions | None = None,
        **keywords: Unpack[OptionKeywords],
    ) -> None:
        if not isinstance(store, Store):
            raise TypeError(f"store must be a turnledger Store (open_store(url)), got "
                            f"{type(store).__name__} {store!r:.60}")
        if session_id is not None:
            session_uuid(session_id)  # refused now, not at the first call
        self.store = store
        self.session_id = session_id
        self.options = options_of(options, keywords)
        self.summarizer = self.options.summarizer
        self._sessions: dict[str, Session] = {}
        # Reentrant: a subclass may hold it around `_session_named` (and its own caches).
        self._lock = threading.RLock()

    def _session_named(self, name: str) -> Session:
        """The turnledger session of the framework's ``name`` (`session_uuid`), opened once."""
        with self._lock:
            session = self._sessions.get(name)
            if session is None:
                session = self._sessions[name] = self.options.open(self.store, name)
            return session

    def _window(
        self, session: Session, messages: Sequence[ConversationMessage | ChatMessage] = (),
        decided: Decided | None = None,
    ) -> list[ChatMessage]:
        """The window for the framework's model (`fit_window` with this object's summarizer),
        ``messages`` recorded first in the same transaction (``decided``: `fit_then_build`)."""
        return fit_window(session, self.summarizer, messages, decided)

    def _retrying(self, session: Session, what: str, write: Callable[[], R]) -> R:
        """``write()`` under this object's conflict budget (`retrying`), named by ``what``."""
        return self.options.retrying(write, f"{what} of session {session.id}")
