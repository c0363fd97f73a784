"""One writer process of the PostgreSQL multi-process tests (test_postgres_processes.py; E3, E8).

Usage: ``python pg_writer_child.py URL SESSION_ID WRITER COUNT MODE READY_FILE GO_FILE ATTEMPTS``.

Opens the store, then either starts its own session (MODE ``own``: the only writer of that
session, so a conflict would be a bug and ends the process with an error) or restores a session
that other processes write too (MODE ``shared``: every command goes through
`retry_on_conflict`, the documented helper; the session reloads itself after a conflict). It
touches READY_FILE, waits for GO_FILE (so that all writers start together), appends COUNT
messages, each carrying ``#WRITER:SEQ``, and prints ``APPENDED WRITER SEQ`` (flushed) after
each append returned, then ``DONE commands=N attempts=M``. Exits 4 when GO_FILE does not appear
within 30 s.
"""

from __future__ import annotations

import functools
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.store.backend import retry_on_conflict
from turnledger.store.session import Session, open_store

__all__ = [
    "OWN_PROFILE",
    "SHARED_PROFILE",
    "SNAPSHOT_INTERVAL",
    "commands_per_writer",
    "main",
    "message_identity",
]

OWN_PROFILE = RuntimeProfile(
    max_context_tokens=400, context_compact_ratio=0.5, max_history_messages=2
)
"""Tiny limits: turn-limit trims on append and token-budget trims on prepare (multi-event saves)."""
SHARED_PROFILE = RuntimeProfile(max_history_messages=3)
"""Turn-limit trims on append, so some contended batches hold four events."""
SNAPSHOT_INTERVAL = 25
"""Small, so writers also race on snapshots and reload from them after conflicts."""

_PAD = "x" * 200
_IDENTITY = re.compile(r"#(\w+):(\d+) ")
_GO_TIMEOUT = 30.0
_EXIT_NO_GO = 4

T = TypeVar("T")


def message_identity(item: ConversationMessage) -> tuple[str, int]:
    """(writer, seq) embedded in a recorded message (ValueError if none)."""
    match item:
        case Chat(message=message):
            text = message.content
        case AssistantToolCalls(text=text):
            text = text or ""
        case ToolResults(results=results):
            text = results[0].content
    found = _IDENTITY.match(text)
    if found is None:
        raise ValueError(f"no writer identity in {item!r}")
    return found.group(1), int(found.group(2))


def commands_per_writer(count: int) -> int:
    """How many commands (appends + prepares, each one saved batch) a writer runs for
    ``count`` appends: a prepare follows every message whose ``seq % 4 == 2``."""
    return count + (count + 1) // 4


def _own_message(writer: str, seq: int) -> ConversationMessage | ChatMessage:
    # A full turn every four messages: user, tool call, its result, answer.
    tag = f"#{writer}:{seq}"
    call_id = f"call-{writer}-{seq - 1}"
    return (
        ChatMessage.user(f"{tag} question {_PAD}"),
        AssistantToolCalls(f"{tag} looking", (ToolCall(f"call-{writer}-{seq}", "lookup", "{}"),)),
        ToolResults((ToolResult(call_id, f"{tag} result {_PAD}", "lookup"),)),
        Chat(ChatMessage.assistant(f"{tag} answer")),
    )[seq % 4]


def _shared_message(writer: str, seq: int) -> ChatMessage:
    # Plain chat only: interleaved writers must not split someone else's tool exchange.
    tag = f"#{writer}:{seq}"
    if seq % 2 == 0:
        return ChatMessage.user(f"{tag} question")
    return ChatMessage.assistant(f"{tag} answer")


def _wait_for(path: Path) -> bool:
    deadline = time.monotonic() + _GO_TIMEOUT
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def main(argv: list[str]) -> int:
    url, session_id, writer, count, mode, ready, go, attempts = argv[1:9]
    total, max_attempts = int(count), int(attempts)
    calls = 0

    def counted(fn: Callable[[], T]) -> Callable[[], T]:
        def call() -> T:
            nonlocal calls
            calls += 1
            return fn()

        return call

    with open_store(url, snapshot_interval=SNAPSHOT_INTERVAL) as store:
        session: Session
        if mode == "own":
            session = store.start_session(profile=OWN_PROFILE, session_id=session_id)
        else:
            session = store.restore(session_id)
        Path(ready).touch()
        if not _wait_for(Path(go)):
            return _EXIT_NO_GO
        commands = 0
        for seq in range(total):
            if mode == "own":
                session.append(_own_message(writer, seq))
            else:
                message = _shared_message(writer, seq)
                retry_on_conflict(counted(functools.partial(session.append, message)), max_attempts)
            commands += 1
            sys.stdout.write(f"APPENDED {writer} {seq}\n")
            sys.stdout.flush()
            if seq % 4 == 2:
                if mode == "own":
                    session.prepare_request()
                else:
                    retry_on_conflict(counted(session.prepare_request), max_attempts)
                commands += 1
        sys.stdout.write(f"DONE commands={commands} attempts={calls}\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
