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
  their outputs untouched — after a breadcrumb user message when older turns were cut. ``limit``
  keeps the SDK's meaning: the newest ``limit`` items of that list (``0``: none; negative or
  None: all, unless ``session_settings.limit`` says otherwise);
- ``pop_item`` and ``clear_session`` are recorded (`MessagePopped`, `HistoryCleared`); the log
  keeps what they removed from the views.

Many objects (one per request, several workers or processes) may serve one conversation, as
with the SDK's own sessions: a call that loses a race to another writer is decided again on the
newer state until it lands (`retrying`, within ``conflict_budget_seconds``, ADR-0065), so the
SDK never sees a `ConcurrencyConflict` unless that budget is spent.

The SDK reads the session once per ``Runner.run`` (the SDK holds the items of the run it is in),
so trims happen between runs. Every store call runs in a worker thread (`off_loop`): the event
loop never blocks on the database. `HistoryTrimmed` reaches ``store.subscribe`` callbacks.
The SDK itself is not imported: the protocol is structural.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.messages import ChatMessage, ConversationMessage
from turnledger.domain.providers import (
    exact_openai_responses_item,
    from_openai_responses_item,
    plain,
    to_openai_responses,
)
from turnledger.integrations import (
    CONFLICT_BUDGET_SECONDS,
    conflict_budget,
    off_loop,
    open_session,
    retrying,
)
from turnledger.store.session import Session, Store

__all__ = ["TurnledgerSession", "from_responses_items", "open_session"]

Item = dict[str, Any]
R = TypeVar("R")


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
        messages.append(_checked(i, item) if converted is None else converted)
    return messages


def _checked(index: int, item: Any) -> ConversationMessage:
    """``item`` converted, or `InvalidMessage` when it does not come back exactly."""
    try:
        converted = from_openai_responses_item(item)
    except InvalidMessage as error:
        raise InvalidMessage(f"items[{index}]: {error}") from None
    if to_openai_responses((converted,)) != [item]:
        raise InvalidMessage(
            f"items[{index}] (type {item.get('type', 'message')!r}) would not be returned "
            "exactly as it was added; it was not recorded"
        )
    return converted


def _to_item(message: ConversationMessage) -> Item:
    (item,) = to_openai_responses([message])
    return item


def _newest_items(window: Sequence[ChatMessage], limit: int | None) -> list[Item]:
    """The SDK's ``limit`` over the items of ``window``: the newest ``limit`` items; 0 none;
    None or negative all. Converts only the messages those items come from."""
    if limit is None or limit < 0:
        return to_openai_responses(window)
    chunks: list[list[Item]] = []
    count = 0
    for message in reversed(window):
        if count >= limit:
            break
        chunks.append(to_openai_responses([message]))
        count += len(chunks[-1])
    items = [item for chunk in reversed(chunks) for item in chunk]
    return items[len(items) - limit :] if limit else []


class TurnledgerSession:
    """The OpenAI Agents SDK ``Session`` protocol over a turnledger session (module doc).

    ``TurnledgerSession("user-42", store)`` names its conversation like the SDK's own sessions
    (any string; a UUID text is used as the turnledger session id as it is). The turnledger
    session is opened (restored, or started with ``profile``/``providers``/``route``) on first
    use, in a worker thread. ``session`` is that turnledger session.

    A call that records (every method but a read of ``session``) and loses a race to another
    writer of the conversation is decided again on the newer state, for at most
    ``conflict_budget_seconds`` (default 30; 0: once), then raises `ConcurrencyConflict`
    saying so; nothing of a call that raised is recorded (ADR-0065).
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
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self.store = store
        self._options = (profile, tuple(providers), route)
        self._budget = conflict_budget(conflict_budget_seconds)
        self._session: Session | None = None
        self._lock = threading.Lock()

    @property
    def session(self) -> Session:
        """The turnledger session (opened on first use: I/O, call it off the event loop)."""
        with self._lock:
            if self._session is None:
                profile, providers, route = self._options
                self._session = open_session(
                    self.store, self.session_id, profile=profile, providers=providers,
                    route=route,
                )
            return self._session

    # -- the SDK protocol --

    async def get_items(self, limit: int | None = None) -> list[Item]:
        """What the model should see (module doc); the newest ``limit`` items of it."""
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        return await off_loop(self.items, limit)

    async def add_items(self, items: list[Any]) -> None:
        """Record ``items`` in one transaction; `InvalidMessage` records none of them."""
        if items:
            await off_loop(self.add, items)

    async def pop_item(self) -> Item | None:
        """Remove the newest item from the views and return it (None: nothing to pop)."""
        return await off_loop(self.pop)

    async def clear_session(self) -> None:
        """Remove every item from the views (recorded; the log keeps them)."""
        await off_loop(self.clear)

    # -- the same, blocking (for threads and scripts) --

    def items(self, limit: int | None = None) -> list[Item]:
        """Blocking `get_items` (without ``session_settings``)."""
        window = self._retrying("get_items", lambda: self.session.fit_window())
        return _newest_items(window, limit)

    def add(self, items: Iterable[object]) -> None:
        """Blocking `add_items`."""
        messages = from_responses_items(items)  # converted once: a retry only records again
        self._retrying("add_items", lambda: self.session.extend(messages))

    def pop(self) -> Item | None:
        """Blocking `pop_item`."""
        popped = self._retrying("pop_item", lambda: self.session.pop())
        return None if popped is None else _to_item(popped)

    def clear(self) -> None:
        """Blocking `clear_session`."""
        self._retrying("clear_session", lambda: self.session.clear())

    def _retrying(self, what: str, write: Callable[[], R]) -> R:
        return retrying(write, f"{what} of session {self.session_id!r}", self._budget)
