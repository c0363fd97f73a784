"""What the integrations' usage tests compare (issue 35 point 3), defined once for the ADK,
pydantic-ai, LangChain and OpenAI Agents tests.

Each test takes, at every model call, the session's log version (the window handed to that call
is the chat view the log rebuilds there) and checks that each `UsageRecorded` answers exactly
that window (its digest and estimate, no request position) with exactly the usage the model
returned; a call whose model returned no usage records none, and a usage that cannot be what
was billed is logged while the loop goes on.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnledger.domain.budget import RuntimeProfile
from turnledger.domain.decider import evolve, request_digest
from turnledger.domain.events import DomainEvent, TrimDecided, UsageRecorded
from turnledger.domain.state import SessionState
from turnledger.store.session import Session

__all__ = ["SMALL", "Row", "expected_usages", "usages"]

Row = tuple[int | None, str, int, str, int, int, int, int]

SMALL = RuntimeProfile(max_context_tokens=900)  # trims between the tool steps


def _window_at(events: Sequence[DomainEvent], version: int) -> tuple[str, int]:
    """The digest and estimate of the chat view the log rebuilds at ``version``."""
    state = SessionState()
    for event in events[:version]:
        evolve(state, event)
    return request_digest(state.chat_view()), state.chat_tokens()


def usages(session: Session) -> list[Row]:
    """The session's recorded usages, one row each."""
    return [(e.request_position, e.digest, e.estimated_tokens, e.api, e.input_tokens,
             e.cache_read_tokens, e.cache_write_tokens, e.output_tokens)
            for e in session.events() if isinstance(e, UsageRecorded)]


def expected_usages(session: Session, versions: list[int], billed: dict[int, tuple[str, int, int,
                    int, int]]) -> list[Row]:
    """The rows of the calls in ``billed`` (call index -> api, input, read, write, output),
    each answering the window of the version taken at that call."""
    events = session.events()
    rows: list[Row] = []
    for call, (api, given, read, write, out) in sorted(billed.items()):
        digest, estimate = _window_at(events, versions[call])
        rows.append((None, digest, estimate, api, given, read, write, out))
    # The loop trimmed between its steps, and every call answered a window of its own.
    assert any(isinstance(e, TrimDecided) for e in events)
    assert len(rows) == len({row[1] for row in rows})
    return rows
