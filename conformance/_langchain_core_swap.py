"""pytest plugin of `conformance.langchain_core`: langchain-core's tests on turnledger.

Loaded with ``-p conformance._langchain_core_swap`` into a run of langchain-core's own tests.
Every test module that names ``InMemoryChatMessageHistory`` gets `TurnledgerHistory` under that
name instead: each history is a new conversation in the turnledger store at
``TURNLEDGER_CONFORMANCE_STORE``, opened only at its first use (as `history_factory` opens
them: langchain-core's blocking-call checker fails a test whose event loop waits on I/O;
``TURNLEDGER_CONFORMANCE_EAGER=1`` opens each at construction instead, the control). At the
end, ``TURNLEDGER_CONFORMANCE_REPORT`` gets, per test, how many turnledger histories it built.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

import turnledger as tl
from turnledger.integrations import open_session
from turnledger.integrations.langchain import TurnledgerChatMessageHistory
from turnledger.store.session import Session, Store

_store: Store | None = None
_built: dict[str, int] = {}
_current: list[str] = []


def _the_store() -> Store:
    global _store  # one store for the whole run, opened at first use
    if _store is None:
        _store = tl.open_store(os.environ["TURNLEDGER_CONFORMANCE_STORE"])
    return _store


class TurnledgerHistory(TurnledgerChatMessageHistory):
    """``InMemoryChatMessageHistory(messages=...)``'s constructor on a new turnledger session:
    the messages given are recorded when the session opens, at the first use."""

    def __init__(self, messages: Sequence[BaseMessage] | None = None, **_: Any) -> None:
        initial = list(messages or ())

        def open_new() -> Session:
            session = open_session(_the_store(), str(uuid.uuid4()))
            if initial:
                self._retrying(session, "the initial messages",
                               lambda: session.extend(_converted(initial)))
            return session

        super().__init__(open_new)
        if os.environ.get("TURNLEDGER_CONFORMANCE_EAGER") == "1":
            _ = self.session  # the control run: I/O at construction, as an eager factory does
        if _current:
            _built[_current[-1]] = _built.get(_current[-1], 0) + 1

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BaseChatMessageHistory):
            return NotImplemented
        return self.messages == other.messages

    __hash__ = None  # type: ignore[assignment]  # equal by content, as the pydantic original

    def __repr__(self) -> str:
        return f"TurnledgerHistory(messages={self.messages!r})"


def _converted(messages: list[BaseMessage]) -> list[Any]:
    from turnledger.integrations.langchain import from_langchain_messages

    return from_langchain_messages(messages)


@pytest.fixture(autouse=True)
def _turnledger_history(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    module = request.module
    if hasattr(module, "InMemoryChatMessageHistory"):
        monkeypatch.setattr(module, "InMemoryChatMessageHistory", TurnledgerHistory)
    _current.append(request.node.nodeid)
    _built.setdefault(request.node.nodeid, 0)
    yield
    _current.pop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    report = os.environ.get("TURNLEDGER_CONFORMANCE_REPORT")
    if report:
        with open(report, "w", encoding="utf-8") as out:
            json.dump(_built, out, indent=1, sort_keys=True)
    if _store is not None:
        _store.close()
