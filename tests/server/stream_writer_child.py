"""A writer in a process of its own for the SSE tests (issue 37 point 4): sessions whose turn
limit trims on every append, each append followed by a prepared request, some on a route
whose capacity is known and some on one whose capacity is unknown (R19).

Usage: ``python -m tests.server.stream_writer_child URL SESSIONS APPENDS``; prints ``done``.
"""

from __future__ import annotations

import sys

import turnledger as tl


def write(url: str, sessions: int, appends: int) -> None:
    """Write ``sessions`` sessions of ``appends`` user/assistant pairs each into ``url``."""
    provider = tl.ProviderProfile(name="known", model="m", context_window=8000)
    with tl.open_store(url) as store:
        for number in range(sessions):
            known = number % 2 == 0
            session = store.start_session(
                profile=tl.RuntimeProfile(max_history_messages=1),
                providers=[provider] if known else [],
            )
            for turn in range(appends):
                session.append(tl.ChatMessage.user(f"question {turn}"))
                session.append(tl.ChatMessage.assistant(f"answer {turn}"))
                session.prepare_request()


if __name__ == "__main__":
    write(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    print("done", flush=True)
