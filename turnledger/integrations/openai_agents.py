"""A session of the OpenAI Agents SDK whose history is a turnledger session (issue 10).

`TurnledgerSession` implements the SDK's ``Session`` protocol (``session_id``,
``session_settings``, async ``get_items(limit)``, ``add_items``, ``pop_item``,
``clear_session``), so ``Runner.run(agent, text, session=TurnledgerSession("user-42", store))``
keeps its history in a turnledger store:

- ``add_items`` records the items of one call in one transaction, each Responses item as one
  message, refusing one that would not come back exactly as it was given (`InvalidMessage`,
  nothing recorded; `turnledger.domain.formats.responses`);
- ``get_items`` returns what the model should see: the trims a request would make are decided
  and recorded (`Session.fit_window`), then the kept whole turns come back as the items that
  were added, after a breadcrumb user message when older turns were cut (or the summary of
  those turns, issue 24). ``limit`` keeps the SDK's meaning: the newest ``limit`` items (``0``:
  none; negative or None: all, unless ``session_settings.limit`` says otherwise);
- ``pop_item`` and ``clear_session`` are recorded; the log keeps what they removed.

A call cancelled while it records waits for its outcome before the cancellation is raised, as
with the SDK's own sessions. Many objects may serve one conversation: a call that loses a race
to another writer is decided again on the newer state within the conflict budget
(`retrying`, ADR-0065).

The SDK reads the session once per ``Runner.run``, so a session alone trims between runs; for
the tool loop inside one run (R24), `TurnledgerSession.call_model_input_filter` is a
``RunConfig.call_model_input_filter`` that records the step's new items and returns the window
for the next model call (ADR-0077). Every store call runs in a worker thread (`off_loop`). The
SDK is imported only where its own types are needed: the protocol is structural.

The Session protocol sees no usage; `TurnledgerSession.run_hooks` is a ``RunHooks`` (or call
`TurnledgerSession.on_llm_start` and `TurnledgerSession.on_llm_end` from your own) that records
each model call's ``response.usage`` (issue 35) as answering the window the filter handed to
that call: a call whose input was not that window (no filter, or items the SDK left out)
records none, nor does a response without usage (`record_usage`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any, TypeVar, Unpack, cast

from turnledger.domain.arguments import is_int
from turnledger.domain.errors import InvalidSessionSettings, SessionClosed
from turnledger.domain.formats.responses import from_responses_items
from turnledger.domain.messages import ChatMessage
from turnledger.domain.providers import plain
from turnledger.integrations import (
    Asked,
    IntegrationOptions,
    OptionKeywords,
    SessionsByName,
    fresh_json,
    off_loop,
    open_session,
    record_usage,
    session_uuid,
)
from turnledger.integrations.openai_agents_items import (
    Item,
    ItemsOnce,
    new_items,
    newest_items,
    same_items,
    to_item,
    usage_of,
)
from turnledger.store.session import Session, Store

__all__ = [
    "InvalidSessionSettings",
    "SessionClosed",
    "TurnledgerSession",
    "from_responses_items",
    "open_session",
]

R = TypeVar("R")


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


class TurnledgerSession(SessionsByName):
    """The OpenAI Agents SDK ``Session`` protocol over a turnledger session (module doc).

    ``TurnledgerSession("user-42", store)`` names its conversation like the SDK's own sessions
    (a UUID text is the turnledger session id as it is); the turnledger session (``session``)
    is opened on first use, in a worker thread. ``session_settings``: the SDK's
    ``SessionSettings`` (a dict of its fields is coerced, a mistyped key refused,
    `InvalidSessionSettings`); its ``limit`` applies when ``get_items`` is given none.
    ``options`` (`IntegrationOptions`, or its fields as keywords): how the session starts, the
    summarizer of every window this object builds (issue 24) and the conflict budget of every
    call that records (ADR-0065; nothing of a call that raised is recorded). `close` ends this
    object, as ``SQLiteSession.close`` does (the store stays open); any later use raises
    `SessionClosed`.
    """

    def __init__(
        self, session_id: str, store: Store, *, session_settings: Any = None,
        options: IntegrationOptions | None = None, **keywords: Unpack[OptionKeywords],
    ) -> None:
        session_uuid(session_id)  # its name first: TurnledgerSession(store, name) is refused
        super().__init__(store, session_id=session_id, options=options, **keywords)
        self.session_id: str = session_id
        self.session_settings = _session_settings(session_id, session_settings)
        self._closed = False
        # Each window message's items, converted once; these dicts never leave the object:
        # what is handed out is a copy (`fresh_json`).
        self._items_of = ItemsOnce()
        # The windows the filter handed out lately (its items, its turnledger session and
        # messages), and per run (its context's id) the one its model call was sent: what
        # the call's usage answers (issue 35).
        self._handed: list[tuple[list[Item], Session, list[ChatMessage]]] = []
        self._sent: Asked[int, tuple[Session, list[ChatMessage]]] = Asked(most=_HANDED)

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
        if limit is not None and not is_int(limit):
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
        session, window, out = self._writing("call_model_input_filter",
                                             lambda: self._record_new(given))
        with self._lock:
            del self._handed[:-_HANDED]
            self._handed.append((out, session, window))
        return out

    def _record_new(self, given: list[Item]) -> tuple[Session, list[ChatMessage], list[Item]]:
        # Judged on each attempt: after a conflict another writer may have recorded them.
        session = self.session
        view = session.chat_view()
        new = new_items(given, view, self._items_of(view), self.session_id)
        if new:
            session.extend(from_responses_items(new))
        window = self._window(session)
        items = [fresh_json(item) for chunk in self._items_of(window) for item in chunk]
        return session, window, items

    # -- the usage of each model call (issue 35) --

    def run_hooks(self) -> Any:
        """A ``RunHooks`` recording each model call's usage (module doc):
        ``Runner.run(agent, text, session=s, hooks=s.run_hooks(),
        run_config=RunConfig(call_model_input_filter=s.call_model_input_filter))``."""
        return _usage_hooks()(self)

    async def on_llm_start(
        self, context: Any, agent: Any, system_prompt: str | None, input_items: list[Any],
    ) -> None:
        """``RunHooks.on_llm_start``: note whether ``input_items`` (what the SDK sends) are
        the very items of a window the filter handed out."""
        with self._lock:
            found = next((i for i, (items, _, _) in enumerate(self._handed)
                          if same_items(input_items, items)), None)
            if found is None:
                self._sent.take(id(context))
                return
            _, session, window = self._handed.pop(found)
            self._sent.hold(id(context), (session, window))  # past _HANDED: runs that raised

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        """``RunHooks.on_llm_end``: record ``response.usage`` as answering the window this
        run's model call was sent (none: nothing; in a worker thread, never raising:
        `record_usage`)."""
        sent = self._sent.take(id(context))
        if sent is not None:
            session, window = sent
            await _settled(record_usage, session, window,
                           functools.partial(usage_of, getattr(response, "usage", None)),
                           self.options.conflict_budget_seconds)

    # -- the same, blocking (for threads and scripts) --

    def items(self, limit: int | None = None) -> list[Item]:
        """Blocking `get_items` (without ``session_settings``)."""
        window = self._writing("get_items", lambda: self._window(self.session))
        return [fresh_json(item) for item in newest_items(self._items_of(window), limit)]

    def add(self, items: Iterable[object]) -> None:
        """Blocking `add_items`."""
        messages = from_responses_items(items)  # converted once: a retry only records again
        self._writing("add_items", lambda: self.session.extend(messages))

    def pop(self) -> Item | None:
        """Blocking `pop_item`."""
        popped = self._writing("pop_item", lambda: self.session.pop())
        return None if popped is None else to_item(popped)

    def clear(self) -> None:
        """Blocking `clear_session`."""
        self._writing("clear_session", lambda: self.session.clear())

    def _writing(self, what: str, write: Callable[[], R]) -> R:
        return self.options.retrying(write, f"{what} of session {self.session_id!r}")


_HANDED = 16  # windows handed out and not yet sent that are kept (concurrent runs)


@functools.cache
def _usage_hooks() -> type[Any]:
    """The ``RunHooks`` class of `TurnledgerSession.run_hooks` (made at first use: the SDK
    is imported only where its own types are needed)."""
    from agents.lifecycle import RunHooks

    class TurnledgerRunHooks(RunHooks[Any]):
        """Records each model call's usage through its `TurnledgerSession`."""

        def __init__(self, session: TurnledgerSession) -> None:
            super().__init__()
            self.session = session

        async def on_llm_start(self, context: Any, agent: Any, system_prompt: str | None,
                               input_items: list[Any]) -> None:
            await self.session.on_llm_start(context, agent, system_prompt, input_items)

        async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
            await self.session.on_llm_end(context, agent, response)

    return TurnledgerRunHooks
