"""A session of the OpenAI Agents SDK whose history is a turnledger session (issue 10).

`TurnledgerSession` implements the SDK's ``Session`` protocol (``session_id``,
``session_settings``, async ``get_items(limit)``, ``add_items``, ``pop_item``,
``clear_session``), so ``Runner.run(agent, text, session=TurnledgerSession("user-42", store))``
keeps its history in a turnledger store:

- ``add_items`` records the items of one call in one transaction (`Session.extend`), each
  Responses item as one message (`from_openai_responses_item`), refusing an item that would not come
  back exactly as it was given (`InvalidMessage`, nothing recorded);
- ``get_items`` returns what the model should see: the trims a request would make are decided
  and recorded (turn limit, token budget, orphan sweep: `Session.fit_window`), then the kept
  whole turns come back as the items that were added — reasoning items, function calls and
  their outputs untouched — after a breadcrumb user message when older turns were cut (or,
  with a ``summarizer``, the summary of those turns in its place, issue 24). ``limit``
  keeps the SDK's meaning: the newest ``limit`` items of that list (``0``: none; negative or
  None: all, unless ``session_settings.limit`` says otherwise);
- ``pop_item`` and ``clear_session`` are recorded (`MessagePopped`, `HistoryCleared`); the log
  keeps what they removed from the views.

A call cancelled while it records waits for its outcome before the cancellation is raised,
as with the SDK's own sessions (the SDK's recovery of an interrupted write relies on it).

Many objects (one per request, several workers or processes) may serve one conversation, as
with the SDK's own sessions: a call that loses a race to another writer is decided again on the
newer state until it lands (`retrying`, within ``conflict_budget_seconds``, ADR-0065), so the
SDK never sees a `ConcurrencyConflict` unless that budget is spent.

The SDK reads the session once per ``Runner.run`` (it holds the items of the run it is in),
so a session alone trims between runs. For the tool loop inside one run, R24 asks for a trim
at every model call: `TurnledgerSession.call_model_input_filter` is a
``RunConfig.call_model_input_filter`` that records the step's new items and returns the window
for the next model call (ADR-0077). Every store call runs in a worker thread (`off_loop`): the
event loop never blocks on the database. `HistoryTrimmed` reaches ``store.subscribe``
callbacks. The SDK is imported only where its own types are needed (``SessionSettings``,
``ModelInputData``): the protocol is structural.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.errors import (
    InvalidMessage,
    InvalidSessionSettings,
    SessionClosed,
    TurnledgerError,
)
from turnledger.domain.messages import (
    BREADCRUMB_TEXT,
    SUMMARY_PREFIX,
    ChatMessage,
    ConversationMessage,
    check_appended,
    is_breadcrumb,
)
from turnledger.domain.providers import (
    exact_openai_responses_item,
    from_openai_responses_item,
    plain,
    to_openai_responses,
)
from turnledger.integrations import (
    CONFLICT_BUDGET_SECONDS,
    SessionsByName,
    off_loop,
    open_session,
    retrying,
    session_uuid,
)
from turnledger.store.session import Session, Store
from turnledger.store.summaries import Summarizer, SummaryFunction

__all__ = [
    "InvalidSessionSettings",
    "SessionClosed",
    "TurnledgerSession",
    "from_responses_items",
    "open_session",
]

Item = dict[str, Any]
R = TypeVar("R")



def _opens_window(item: Item) -> bool:
    """The breadcrumb's item, or that of the summary shown in its place (issue 24)."""
    content = item.get("content")
    return (item.keys() == {"role", "content"} and item["role"] == "user"
            and isinstance(content, str)
            and (content == BREADCRUMB_TEXT or content.startswith(SUMMARY_PREFIX)))


class _Closed:
    """What `TurnledgerSession.close` returns: nothing to wait for, but awaitable, so both
    ``session.close()`` (``SQLiteSession``) and ``await session.close()`` (the SDK's async
    sessions) are right."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        return
        yield  # pragma: no cover - makes this a generator that finishes at once


async def _settled(function: Callable[..., R], *args: Any) -> R:
    """``function(*args)`` in a worker thread (`off_loop`), its outcome awaited even when the
    caller is cancelled meanwhile; the cancellation is raised once the outcome is known.

    As the SDK's own sessions do: a cancelled call that records is never still in flight, so
    the SDK's recovery of an interrupted write reads a settled history."""
    task = asyncio.ensure_future(off_loop(function, *args))
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as error:
            cancelled = cancelled or error
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller gets
        raise cancelled
    return task.result()


def _session_settings(session_id: str, value: object) -> Any:
    """``value`` as the SDK's ``SessionSettings`` (None: the defaults; a dict: its fields),
    as the SDK's own sessions coerce it; `InvalidSessionSettings` names a mistyped key."""
    from agents.memory.session_settings import SessionSettings, coerce_session_settings

    if value is None:
        return SessionSettings()
    try:
        return coerce_session_settings(value)  # type: ignore[arg-type]  # checked by the SDK
    except (TypeError, ValueError) as error:
        fields = ", ".join(f.name for f in dataclasses.fields(SessionSettings))
        raise InvalidSessionSettings(
            f"session_settings of session {session_id!r}: {' '.join(str(error).split())} "
            f"(give a SessionSettings or a dict of: {fields})"
        ) from None


def from_responses_items(items: Iterable[object]) -> list[ConversationMessage]:
    """One turnledger message per Responses item, each checked to come back exactly.

    An item of a shape whose conversion is exact by construction needs no check
    (`exact_openai_responses_item`); any other is converted, exported again and compared.
    Raises `InvalidMessage` naming the item when one is not a Responses input item or would
    not be returned as it was given.
    """
    messages: list[ConversationMessage] = []
    for i, raw in enumerate(items):
        item = raw if type(raw) is dict else plain(raw)
        converted = exact_openai_responses_item(item)
        if converted is None:
            messages.append(_checked(i, item))
        else:
            _appendable(i, converted)  # e.g. arguments of NaN, which the exact path keeps
            messages.append(converted)
    return messages


def _appendable(index: int, message: ConversationMessage) -> None:
    """What the append will check (`check_appended`), said here with the item's index."""
    try:
        check_appended(message)
    except InvalidMessage as error:
        raise InvalidMessage(f"items[{index}]: {error}") from None


def _checked(index: int, item: Any) -> ConversationMessage:
    """``item`` converted, or `InvalidMessage` when it does not come back exactly or holds
    what no message may (a value that is no JSON, NaN, an infinity: issue 33, ADR-0099),
    named with the item's index."""
    try:
        converted = from_openai_responses_item(item)
    except InvalidMessage as error:
        raise InvalidMessage(f"items[{index}]: {error}") from None
    _appendable(index, converted)
    if to_openai_responses((converted,)) != [item]:
        raise InvalidMessage(
            f"items[{index}] (type {item.get('type', 'message')!r}) would not be returned "
            "exactly as it was added; it was not recorded"
        )
    return converted


def _to_item(message: ConversationMessage) -> Item:
    (item,) = to_openai_responses([message])
    return item


def _newest_items(items: list[list[Item]], limit: int | None) -> list[Item]:
    """The SDK's ``limit`` over the items of a window (given per message): the newest
    ``limit`` items; 0 none; None or negative all."""
    if limit is None or limit < 0:
        return [item for chunk in items for item in chunk]
    chunks: list[list[Item]] = []
    count = 0
    for chunk in reversed(items):
        if count >= limit:
            break
        chunks.append(chunk)
        count += len(chunk)
    newest = [item for chunk in reversed(chunks) for item in chunk]
    # ``newest[-limit:]``, not ``newest[len(newest) - limit:]``: with fewer items than
    # ``limit`` the latter starts at a negative index and drops the oldest ones (issue 22).
    return newest[-limit:] if limit else []


def _fresh(value: Any) -> Any:
    """A copy of a JSON value (dicts and lists copied, leaves shared: they are immutable)."""
    if type(value) is dict:
        return {key: _fresh(inner) for key, inner in value.items()}
    if type(value) is list:
        return [_fresh(inner) for inner in value]
    return value


class TurnledgerSession(SessionsByName):
    """The OpenAI Agents SDK ``Session`` protocol over a turnledger session (module doc).

    ``TurnledgerSession("user-42", store)`` names its conversation like the SDK's own sessions
    (any string; a UUID text is used as the turnledger session id as it is). The turnledger
    session is opened (restored, or started with ``profile``/``providers``/``route``) on first
    use, in a worker thread. ``session`` is that turnledger session.

    ``session_settings`` is the SDK's ``SessionSettings`` (a dict of its fields is coerced and
    a mistyped key refused, `InvalidSessionSettings`, as the SDK's sessions do; None: the
    defaults). Its ``limit`` applies when ``get_items`` is given none.

    A call that records (every method but a read of ``session``) and loses a race to another
    writer of the conversation is decided again on the newer state, for at most
    ``conflict_budget_seconds`` (default 30; 0: once), then raises `ConcurrencyConflict`
    saying so; nothing of a call that raised is recorded (ADR-0065).

    ``summarizer`` (a `Summarizer` or a bare callable, `as_summarizer`; issue 24): every
    window this object builds (``get_items`` and the filter between tool steps) shows the
    turns a token-budget trim drops as its summary in place of the breadcrumb, recorded
    (`TurnsSummarized`); when it fails the plain trim is recorded (`SummaryRefused`) and the
    window still comes back. None: the turnledger session's own `Session.summarizer`.

    `close` ends this object, as ``SQLiteSession.close`` does (the store stays open: it is the
    caller's); any use after it raises `SessionClosed`.
    """

    def __init__(
        self,
        session_id: str,
        store: Store,
        *,
        profile: RuntimeProfile | None = None,
        providers: Sequence[ProviderProfile] = (),
        route: Route | None = None,
        session_settings: Any = None,
        conflict_budget_seconds: float = CONFLICT_BUDGET_SECONDS,
        summarizer: Summarizer | SummaryFunction | None = None,
    ) -> None:
        session_uuid(session_id)  # its name first: TurnledgerSession(store, name) is refused
        super().__init__(store, profile=profile, providers=providers, route=route,
                         session_id=session_id, conflict_budget_seconds=conflict_budget_seconds,
                         summarizer=summarizer)
        self.session_id: str = session_id
        self.session_settings = _session_settings(session_id, session_settings)
        self._closed = False
        # Each window message's items, converted once (messages are immutable values); these
        # dicts never leave the object: what is handed out is a copy (`_fresh`).
        self._converted: dict[ChatMessage, list[Item]] = {}

    @property
    def session(self) -> Session:
        """The turnledger session (opened on first use: I/O, call it off the event loop).

        Raises `SessionClosed` after `close`."""
        with self._lock:
            self._check_open()
            return self._session_named(self.session_id)

    def close(self) -> _Closed:
        """End this object (idempotent); the store and the recorded history stay.

        Like ``SQLiteSession.close`` it needs no ``await``; the result may be awaited, as the
        SDK's async sessions' ``close`` is. Any later call raises `SessionClosed`."""
        with self._lock:
            self._closed = True
            self._sessions.clear()
        return _Closed()

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed(
                f"TurnledgerSession {self.session_id!r} is closed: make a new "
                "TurnledgerSession on the store to use this conversation again"
            )

    # -- the SDK protocol --

    async def get_items(self, limit: int | None = None) -> list[Item]:
        """What the model should see (module doc); the newest ``limit`` items of it
        (None: ``session_settings.limit``)."""
        self._check_open()
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
            raise TypeError(f"limit must be an int or None, got {type(limit).__name__} "
                            f"{limit!r}")
        if limit is None:
            limit = self.session_settings.limit
        return await _settled(self.items, limit)

    async def add_items(self, items: list[Any]) -> None:
        """Record ``items`` in one transaction; `InvalidMessage` records none of them."""
        self._check_open()  # before the empty-list fast path, as SQLiteSession does
        if isinstance(items, Mapping | str | bytes):  # iterating it would record its keys
            raise TypeError(f"add_items takes a list of items, got one {type(items).__name__}: "
                            "pass [item]")
        if items:
            await _settled(self.add, items)

    async def pop_item(self) -> Item | None:
        """Remove the newest item from the views and return it (None: nothing to pop)."""
        self._check_open()
        return await _settled(self.pop)

    async def clear_session(self) -> None:
        """Remove every item from the views (recorded; the log keeps them)."""
        self._check_open()
        await _settled(self.clear)

    # -- trims between the model calls of one run (R24) --

    async def call_model_input_filter(self, data: Any) -> Any:
        """A ``RunConfig.call_model_input_filter``: record the step's new items and return the
        window for the next model call (`window`), with the SDK's instructions unchanged.

        ``Runner.run(agent, text, session=s,
        run_config=RunConfig(call_model_input_filter=s.call_model_input_filter))``."""
        from agents.run_config import ModelInputData

        self._check_open()
        model_data = data.model_data
        window = await _settled(self.window, model_data.input)
        return ModelInputData(input=cast(Any, window), instructions=model_data.instructions)

    def window(self, items: Sequence[object]) -> list[Item]:
        """Blocking: record what of ``items`` is not recorded yet, then decide and record the
        trims a request would make (`Session.fit_window`) and return the kept items.

        ``items`` is the SDK's whole input for a model call: the history it read from this
        conversation, then the items of the run so far. What is new is what follows the
        newest recorded items (the view after its breadcrumb, ADR-0077): with ``session=``
        this session, the SDK has saved each step before the next call and nothing is new;
        without it, the step's items are recorded here, in one transaction. Raises
        `TurnledgerError` when ``items`` does not contain this conversation's newest items
        (another conversation's input, or history edited): nothing is recorded then."""
        given = [item if type(item) is dict else plain(item) for item in items]
        return self._writing("call_model_input_filter", lambda: self._record_new(given))

    def _record_new(self, given: list[Item]) -> list[Item]:
        # Judged on each attempt: after a conflict another writer may have recorded them.
        session = self.session
        view = session.chat_view()
        new = _unrecorded(given, view, self._items_of(view), self.session_id)
        if new:
            session.extend(from_responses_items(new))
        window = self._window(session)
        return [_fresh(item) for chunk in self._items_of(window) for item in chunk]

    def _items_of(self, messages: Sequence[ChatMessage]) -> list[list[Item]]:
        """The items of each of ``messages`` (shared: copy what leaves the object)."""
        cache = self._converted
        if len(cache) > 2 * len(messages) + 256:
            cache.clear()  # what trims and pops removed from the window
        out = []
        for message in messages:
            items = cache.get(message)
            if items is None:
                items = cache[message] = to_openai_responses([message])
            out.append(items)
        return out

    # -- the same, blocking (for threads and scripts) --

    def items(self, limit: int | None = None) -> list[Item]:
        """Blocking `get_items` (without ``session_settings``)."""
        window = self._writing("get_items", lambda: self._window(self.session))
        return [_fresh(item) for item in _newest_items(self._items_of(window), limit)]

    def add(self, items: Iterable[object]) -> None:
        """Blocking `add_items`."""
        messages = from_responses_items(items)  # converted once: a retry only records again
        self._writing("add_items", lambda: self.session.extend(messages))

    def pop(self) -> Item | None:
        """Blocking `pop_item`."""
        popped = self._writing("pop_item", lambda: self.session.pop())
        return None if popped is None else _to_item(popped)

    def clear(self) -> None:
        """Blocking `clear_session`."""
        self._writing("clear_session", lambda: self.session.clear())

    def _writing(self, what: str, write: Callable[[], R]) -> R:
        return retrying(write, f"{what} of session {self.session_id!r}", self._budget)


def _unrecorded(
    given: list[Item], view: Sequence[ChatMessage], items: list[list[Item]], name: str
) -> list[Item]:
    """The items of ``given`` after the newest recorded ones (ADR-0077).

    The recorded items are the view's after its breadcrumb (or summary). ``given`` holds them
    at its end (before what is new) in one of two forms: whole, after older items the view has
    trimmed since the SDK read them; or, when the SDK read the newest ``limit`` items only, as
    a suffix of them that is all of ``given`` before what is new (after a leading breadcrumb
    or summary).
    The shortest unrecorded tail wins, so with the SDK's session saves (nothing new) one
    comparison decides. An empty view: everything is new. ``items``: those of each message of
    ``view``."""
    start = next((i + 1 for i, m in enumerate(view) if is_breadcrumb(m)), 0)
    recorded = [item for chunk in items[start:] for item in chunk]
    if not recorded:
        return given
    body = given[1:] if given and _opens_window(given[0]) else given
    size = len(recorded)
    for end in range(len(body), 0, -1):
        overlap = min(end, size)
        if body[end - overlap : end] == recorded[size - overlap :]:
            return body[end:]
    if not body:
        return []
    raise TurnledgerError(
        f"call_model_input_filter of session {name!r}: the model input ({len(given)} items) "
        "does not continue this conversation's newest recorded items, so what is new in it "
        "cannot be told; nothing was recorded. Run with session= this TurnledgerSession, or "
        "give the items its get_items returned followed by the new ones"
    )
