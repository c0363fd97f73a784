"""pytest plugin for `conformance.openai_agents`: the SDK's ``SQLiteSession`` becomes a
`TurnledgerSession` in the SDK's own tests.

Loaded with ``-p conformance._openai_agents_plugin`` inside the SDK's extracted source tree.
Every test module's ``SQLiteSession`` name (and ``agents.SQLiteSession``,
``agents.memory.SQLiteSession``) is replaced, for the test's duration, by `SQLiteSessionSwap`:
a `TurnledgerSession` with ``SQLiteSession``'s constructor. An in-memory database
(``":memory:"``, the default) is a private turnledger memory store per object, as each
in-memory ``SQLiteSession`` has its own database; a file path and its table names name one
turnledger SQLite store next to that file, shared by the objects of that test that name it.
The SDK's internals keep the real class (they bound it at import). Each test reports how
many were built (``turnledger_sessions`` in the junit report).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from turnledger.integrations.openai_agents import TurnledgerSession
from turnledger.store.session import Store, open_store

__all__ = ["SQLiteSessionSwap"]

_stores: dict[tuple[str, str, str], Store] = {}
_built = [0]  # SQLiteSessionSwap objects built in the running test
_private: list[Store] = []
_guard = threading.Lock()


def _store_for(db_path: str | Path, sessions_table: str, messages_table: str) -> Store:
    with _guard:
        if str(db_path) == ":memory:":
            store = open_store("memory://")
            _private.append(store)
            return store
        path = Path(db_path).expanduser().resolve()
        key = (str(path), sessions_table, messages_table)
        if key not in _stores:
            target = path.with_name(f"{path.name}.turnledger-{sessions_table}-{messages_table}.db")
            _stores[key] = open_store(f"sqlite:///{target}")
        return _stores[key]


class SQLiteSessionSwap(TurnledgerSession):
    """A `TurnledgerSession` built with ``SQLiteSession``'s arguments (module doc)."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        _built[0] += 1
        super().__init__(
            session_id,
            _store_for(db_path, sessions_table, messages_table),
            session_settings=session_settings,
        )
        self.db_path = db_path
        self.sessions_table = sessions_table
        self.messages_table = messages_table


@pytest.fixture(autouse=True)
def _turnledger_sqlite_session(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    import agents
    import agents.memory

    module = request.module
    if getattr(module, "SQLiteSession", None) is not None:
        monkeypatch.setattr(module, "SQLiteSession", SQLiteSessionSwap)
    monkeypatch.setattr(agents, "SQLiteSession", SQLiteSessionSwap)
    monkeypatch.setattr(agents.memory, "SQLiteSession", SQLiteSessionSwap)
    _built[0] = 0
    try:
        yield
    finally:
        # In the junit report: the runner counts the tests that ran on TurnledgerSession.
        request.node.user_properties.append(("turnledger_sessions", _built[0]))
        with _guard:
            stores = [*_stores.values(), *_private]
            _stores.clear()
            _private.clear()
        for store in stores:
            store.close()
