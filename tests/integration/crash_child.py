"""A session writer that test_crash.py kills with SIGKILL at random moments (E3, E5).

Usage: ``python crash_child.py STORE SESSION_ID LIFETIME_SECONDS [per-request]``; STORE is a
store URL (``sqlite:///...``, ``postgresql://...``) or a SQLite file path. With
``per-request``, the child also opens and closes another store object on the same URL after
every fifth append, as a web handler that opens a store per request does (issue 19: that open
once dropped the SQLite locks of the store kept open, and commits were lost).

Opens the store, restores the session (or starts it when it is not recorded yet), prints
``READY <seq>`` and then appends forever in turns — user message, prepare, assistant tool call,
tool result, prepare, assistant text — under a tiny turn limit and token budget so that trims
(and their breadcrumbs and ``HistoryTrimmed``) are recorded all the time. Every message carries
a sequence number (``#<seq> ...``); ``APPENDED <seq>`` is written and flushed only after
``append`` returned. On restart the numbering continues from the last *recorded* message, so a
message that was committed but not yet printed is never written twice.

The process exits with status 3 after LIFETIME_SECONDS, so a child whose parent vanished does
not run forever; the test always kills it long before.
"""

from __future__ import annotations

import re
import sys
import time

from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.errors import SessionNotFound
from turnledger.domain.events import MessageAppended
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.store.session import Session, Store, open_store

__all__ = ["PER_REQUEST_EVERY", "PROFILE", "SNAPSHOT_INTERVAL", "main", "message_seq", "store_url"]

PROFILE = RuntimeProfile(
    max_context_tokens=400,  # unknown capacity: 400 is the window of R17/R18 ...
    context_compact_ratio=0.5,  # ... and the proactive budget is 200 tokens (R13, R15)
    max_history_messages=2,  # a turn-limit trim on almost every new user turn (R27a, R29)
)
SNAPSHOT_INTERVAL = 40
"""Small, so that kills also land around snapshot writes and restores start from snapshots."""

_PAD = "x" * 200  # ~55 tokens per padded message: two turns exceed the 200-token budget
_SEQ = re.compile(r"#(\d+) ")
_EXIT_LIFETIME = 3


def store_url(path: str) -> str:
    """The store URL of ``path``: itself when it is a URL, else the SQLite URL of the file."""
    return path if "://" in path else f"sqlite:///{path}"


def message_seq(item: ConversationMessage) -> int:
    """The sequence number the child embedded in a recorded message (ValueError if none)."""
    match item:
        case Chat(message=message):
            text = message.content
        case AssistantToolCalls(text=text):
            text = text or ""
        case ToolResults(results=results):
            text = results[0].content
    found = _SEQ.match(text)
    if found is None:
        raise ValueError(f"no sequence number in {item!r}")
    return int(found.group(1))


def _open_session(store: Store, session_id: str) -> Session:
    try:
        return store.restore(session_id)
    except SessionNotFound:
        # Killed before SessionStarted committed (or never started): start it now.
        return store.start_session(profile=PROFILE, session_id=session_id)


def _next_seq(session: Session) -> int:
    """One past the last recorded message's number, read from the newest events only (a
    restart costs the same at event 100 and at event 10,000)."""
    back = 64
    while True:
        after = max(0, session.version - back)
        appended = [
            e for e in session.events(after_version=after) if isinstance(e, MessageAppended)
        ]
        if appended or after == 0:
            return message_seq(appended[-1].message) + 1 if appended else 0
        back *= 4


PER_REQUEST_EVERY = 5
"""Appends between two stores opened and closed beside the writer's (``per-request``)."""


def main(argv: list[str]) -> int:
    path, session_id, lifetime = argv[1], argv[2], float(argv[3])
    per_request = argv[4:5] == ["per-request"]
    deadline = time.monotonic() + lifetime
    with open_store(store_url(path), snapshot_interval=SNAPSHOT_INTERVAL) as store:
        session = _open_session(store, session_id)
        seq = _next_seq(session)
        out = sys.stdout
        out.write(f"READY {seq}\n")
        out.flush()

        def append(message: ConversationMessage | ChatMessage) -> None:
            nonlocal seq
            session.append(message)
            # One write of one short line: the parent never sees half a number.
            out.write(f"APPENDED {seq}\n")
            out.flush()
            seq += 1
            if per_request and seq % PER_REQUEST_EVERY == 0:
                open_store(store_url(path)).close()

        # A restart always begins a new turn, so an interrupted tool exchange is never
        # "completed" by a result whose call the restore swept away (R36).
        while time.monotonic() < deadline:
            append(ChatMessage.user(f"#{seq} question {_PAD}"))
            session.prepare_request()
            call_id = f"call-{seq}"
            append(AssistantToolCalls(f"#{seq} looking", (ToolCall(call_id, "lookup", "{}"),)))
            append(ToolResults((ToolResult(call_id, f"#{seq} result {_PAD}", "lookup"),)))
            session.prepare_request()
            append(Chat(ChatMessage.assistant(f"#{seq} answer")))
    return _EXIT_LIFETIME


if __name__ == "__main__":
    sys.exit(main(sys.argv))
