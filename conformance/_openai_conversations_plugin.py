"""pytest plugin for `conformance.openai_conversations`: the SDK's ``SQLiteSession`` becomes
the SDK's own, unmodified ``OpenAIConversationsSession`` talking to a live turnledger server.

Loaded with ``-p conformance._openai_conversations_plugin`` inside the SDK's extracted source
tree. One server (``turnledger serve`` in a process of its own, 127.0.0.1, a free port, a memory
store) serves the whole run. Every test module's ``SQLiteSession`` name (and
``agents.SQLiteSession``, ``agents.memory.SQLiteSession``) is replaced, for the test's duration, by
`SQLiteSessionSwap`: an ``OpenAIConversationsSession`` with ``SQLiteSession``'s constructor,
whose conversation is the one its ``(db_path, session_id)`` names (created on first use; an
in-memory database is private to the object, as an in-memory ``SQLiteSession``'s is). Each test
reports how many were built (``turnledger_sessions`` in the junit report).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import OpenAIConversationsSession
from httpx2 import Limits  # the HTTP library of the installed openai client
from openai import AsyncOpenAI, DefaultAsyncHttpxClient

__all__ = ["SQLiteSessionSwap"]

_server: dict[str, str] = {}
_conversations: dict[tuple[str, str], str] = {}
_built = [0]
_guard = threading.Lock()


def _base() -> str:
    return _server["base"]


def _conversation_for(db_path: str | Path, name: str, owner: object) -> str:
    key = (f"memory:{id(owner)}" if str(db_path) == ":memory:"
           else str(Path(db_path).expanduser().resolve()), name)
    with _guard:
        if key not in _conversations:
            answer = httpx.post(_base() + "/v1/conversations", json={}, timeout=30)
            answer.raise_for_status()
            _conversations[key] = answer.json()["id"]
        return _conversations[key]


class SQLiteSessionSwap(OpenAIConversationsSession):
    """An ``OpenAIConversationsSession`` on the live server, built with ``SQLiteSession``'s
    arguments (module doc)."""

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
            conversation_id=_conversation_for(db_path, session_id, self),
            openai_client=AsyncOpenAI(
                base_url=_base() + "/v1", api_key="unused", max_retries=0,
                # No kept-alive connection: the SDK's run_sync tests use the session from
                # more than one event loop, and a pooled connection belongs to the loop that
                # opened it.
                http_client=DefaultAsyncHttpxClient(limits=Limits(max_keepalive_connections=0))),
            session_settings=session_settings,
        )
        self.db_path = db_path
        self.sessions_table = sessions_table
        self.messages_table = messages_table

    def close(self) -> None:
        """``SQLiteSession.close``: nothing to release here (the client closes with its
        loop; the conversation stays on the server)."""


@pytest.fixture(scope="session", autouse=True)
def _live_server() -> Iterator[None]:
    """``turnledger serve`` in a process of its own, so no test's monkeypatching (of sqlite3,
    threads, event loops) reaches the server."""
    process = subprocess.Popen(
        [sys.executable, "-m", "turnledger", "--store", "memory://conformance", "serve",
         "--port", "0"], stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
        if found:
            _server["base"] = found.group(1)
            break
    else:
        raise RuntimeError("the turnledger server did not start")
    threading.Thread(target=process.stderr.read, daemon=True).start()
    try:
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(autouse=True)
def _conversations_session(
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
        request.node.user_properties.append(("turnledger_sessions", _built[0]))
        with _guard:
            _conversations.clear()
