"""The turnledger error family: every error a caller can see derives from `TurnledgerError`."""

from __future__ import annotations

from typing import Final

__all__ = [
    "DETAIL_LIMIT",
    "ConcurrencyConflict",
    "ContextWindowExceeded",
    "CorruptRecord",
    "InvalidMessage",
    "InvalidProfile",
    "SessionForgottenError",
    "SessionNotFound",
    "TurnledgerError",
    "UnansweredToolCalls",
    "bounded",
]

DETAIL_LIMIT: Final = 600
"""The most characters of one error detail or finding (`bounded`)."""


def bounded(text: str, limit: int = DETAIL_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out.

    Every error detail and audit finding goes through it: a detail can quote stored data (a
    damaged field, a library's text listing records), and a damaged store must never turn one
    message into megabytes (issue 19).
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


class TurnledgerError(Exception):
    """Base class of every error turnledger raises on purpose."""


class InvalidMessage(TurnledgerError, ValueError):
    """A message value is malformed; the text names the offending field."""


class InvalidProfile(TurnledgerError, ValueError):
    """A runtime or provider profile is malformed; the text names the offending key."""


class ContextWindowExceeded(TurnledgerError):
    """A prepared request does not fit the resolved model context window (R18).

    Raised before anything is sent to the provider. ``estimated_tokens`` and
    ``context_window`` are the two numbers the message names.
    """

    def __init__(self, message: str, *, estimated_tokens: int, context_window: int) -> None:
        super().__init__(message)
        self.estimated_tokens = estimated_tokens
        self.context_window = context_window


class UnansweredToolCalls(TurnledgerError):
    """The newest turn has tool calls without their results: the request was not prepared.

    Raised by `prepare_request` before anything is sent (recorded as a `RequestRejected` with
    reason ``unanswered_tool_calls``); ``tool_call_ids`` are the unanswered ids, in call order.
    Append the results, then prepare again.
    """

    def __init__(self, message: str, *, tool_call_ids: tuple[str, ...]) -> None:
        super().__init__(message)
        self.tool_call_ids = tool_call_ids


class SessionNotFound(TurnledgerError, LookupError):
    """No session with this id exists in the store."""


class SessionForgottenError(TurnledgerError):
    """The session was forgotten (`SessionForgotten`): its content can no longer be read.

    Its id, its event count and its analytics counters remain; its messages do not.
    """

    def __init__(self, message: str, *, session_id: str = "") -> None:
        super().__init__(message)
        self.session_id = session_id


class ConcurrencyConflict(TurnledgerError):
    """Another writer appended to the session first (E3); reload and retry."""


class CorruptRecord(TurnledgerError):
    """A stored record cannot be decoded; the text names the session id and the version."""

    def __init__(self, message: str, *, session_id: str = "", version: int | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.version = version
