"""A LangChain chat message history kept in a turnledger session (issue 10, point 3).

Needs ``pip install 'turnledger[langchain]'`` (langchain-core). Re-exported by
`turnledger.integrations.langchain`.

`TurnledgerChatMessageHistory` is a ``BaseChatMessageHistory`` for
``RunnableWithMessageHistory``: ``messages`` is what the model should see now (whole turns
within the budget, the breadcrumb when older turns were cut; the trims are recorded),
``add_messages`` records a step in one transaction, ``clear`` is recorded. `history_factory`
is the ``get_session_history`` to give: each history it builds opens its session at its first
use, so the factory, which LangChain calls on the event loop inside ``ainvoke``, does no I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar, Unpack, cast

from turnledger.integrations import (
    IntegrationOptions,
    OptionKeywords,
    WindowKeywords,
    fit_window,
    missing_extra,
    off_loop,
    options_of,
    session_uuid,
)
from turnledger.integrations.langchain_messages import (
    from_langchain_messages,
    to_langchain_messages,
)
from turnledger.store.session import Session, Store

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import BaseMessage
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise missing_extra("langchain", "langchain-core", "langchain") from error

__all__ = ["TurnledgerChatMessageHistory", "history_factory", "thread_name"]

R = TypeVar("R")


def thread_name(session_id: str | int) -> str:
    """A session id as LangGraph keeps a thread id: an int as its text (``42`` and ``"42"``
    are one thread); anything else as given, checked as a session name (`session_uuid`)."""
    return str(session_id) if type(session_id) is int else cast("str", session_id)


class TurnledgerChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat message history kept in a turnledger session (module doc).

    ``session`` is a `Session`, or a callable that opens one: then nothing is opened, read or
    written until the first call that needs the session, and an async call opens it in a
    worker thread (`lazy`, `history_factory`: ``RunnableWithMessageHistory`` calls its
    factory synchronously inside ``ainvoke``, on the event loop).

    ``options`` (`IntegrationOptions`; its ``summarizer`` and ``conflict_budget_seconds`` also
    as keywords): ``messages`` shows the turns a token-budget trim drops as the summarizer's
    summary in place of the breadcrumb (issue 24; None: the session's own); a call that loses
    a race to another writer is decided again on the newer state within the budget, then
    raises `ConcurrencyConflict`; nothing of a call that raised is recorded (ADR-0065).
    """

    def __init__(
        self, session: Session | Callable[[], Session], *,
        options: IntegrationOptions | None = None, **keywords: Unpack[WindowKeywords],
    ) -> None:
        self.options = options_of(options, keywords, session_given=True)
        self.summarizer = self.options.summarizer
        if isinstance(session, Session):
            self._session: Session | None = session
            self._open: Callable[[], Session] | None = None
        elif callable(session):
            self._session, self._open = None, session
        else:
            raise TypeError("TurnledgerChatMessageHistory takes a turnledger Session or a "
                            f"callable that opens one, got {type(session).__name__}")
        self._opening = threading.Lock()

    @classmethod
    def lazy(
        cls, store: Store, session_id: str | int, *, options: IntegrationOptions | None = None,
        **keywords: Unpack[OptionKeywords],
    ) -> TurnledgerChatMessageHistory:
        """The history of the conversation named ``session_id`` (`session_uuid`), opened at
        its first use (restored, or started with the options' ``profile``, ``providers`` and
        ``route``): building it does no I/O."""
        if not isinstance(store, Store):
            raise TypeError(f"store must be a turnledger Store, got {type(store).__name__}")
        name = thread_name(session_id)
        session_uuid(name)  # a name that is no str is refused now, not at first use
        options = options_of(options, keywords)
        return cls(lambda: options.open(store, name), options=options)

    @property
    def session(self) -> Session:
        """The turnledger session (opened now, once, when the history was built lazily)."""
        if self._session is None:
            with self._opening:
                if self._session is None:
                    assert self._open is not None, "a history without a session has an opener"
                    self._session = self._open()
        return self._session

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """What the model should see now; the trims this takes are recorded (fit_window)."""
        session = self.session
        window = self._retrying(
            session, "messages", lambda: fit_window(session, self.summarizer))
        return to_langchain_messages(window)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Record ``messages`` in one transaction (`Session.extend`)."""
        converted = from_langchain_messages(messages)  # once: a retry only records again
        session = self.session
        self._retrying(session, "add_messages", lambda: session.extend(converted))

    def clear(self) -> None:
        """Remove every message from the views (recorded; the log keeps them)."""
        session = self.session
        self._retrying(session, "clear", session.clear)

    def _retrying(self, session: Session, what: str, write: Callable[[], R]) -> R:
        return self.options.retrying(write, f"{what} of session {session.id}")

    async def aget_messages(self) -> list[BaseMessage]:
        return await off_loop(lambda: self.messages)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await off_loop(self.add_messages, messages)

    async def aclear(self) -> None:
        await off_loop(self.clear)


def history_factory(
    store: Store, *, options: IntegrationOptions | None = None,
    **keywords: Unpack[OptionKeywords],
) -> Callable[[str], TurnledgerChatMessageHistory]:
    """A ``get_session_history`` for ``RunnableWithMessageHistory``: ``session_id`` → its
    `TurnledgerChatMessageHistory.lazy` history (with these options), so the factory never
    blocks the event loop (LangChain calls it synchronously, in ``ainvoke`` too)."""
    options = options_of(options, keywords)  # a bad budget or summarizer is refused here

    def get_session_history(session_id: str) -> TurnledgerChatMessageHistory:
        return TurnledgerChatMessageHistory.lazy(store, session_id, options=options)

    return get_session_history
