"""The wire names of turnledger's sessions: OpenAI-style conversation ids (issue 37).

A conversation is a turnledger session; its id on the wire is ``conv_`` and the session's UUID
as 32 hex digits, so a client of the OpenAI Conversations API sees the id shape it knows and
every replica, the SSE stream and the CLI name the same session without a lookup table (a
mapping kept in a table would be one more write that a crash could separate from the session's
own). The mapping is a pure function both ways.
"""

from __future__ import annotations

from uuid import UUID

from turnledger.errors import SessionNotFound

__all__ = ["MalformedConversationId", "conversation_id", "session_id"]

CONVERSATION_PREFIX = "conv_"
_HEX_DIGITS = 32


class MalformedConversationId(SessionNotFound):
    """A conversation id that no session can have: not ``conv_`` and 32 lowercase hex digits.

    A `SessionNotFound` (a `LookupError`) because no such conversation exists, so a server
    answers it with 404 as OpenAI's API does for an unknown id.
    """


def conversation_id(session_id: str | UUID) -> str:
    """The conversation id of a session: ``conv_`` and its UUID's 32 hex digits.

    Raises `MalformedConversationId` when ``session_id`` is not a UUID.
    """
    if isinstance(session_id, UUID):
        return CONVERSATION_PREFIX + session_id.hex
    try:
        return CONVERSATION_PREFIX + UUID(session_id).hex
    except (ValueError, TypeError, AttributeError):
        raise MalformedConversationId(f"session id {session_id!r} is not a UUID") from None


def session_id(conversation_id: str) -> str:
    """The session id (the canonical UUID text) of a conversation id.

    Raises `MalformedConversationId` for anything but ``conv_`` followed by 32 lowercase hex
    digits: one spelling per conversation, so two ids never name one session.
    """
    if not isinstance(conversation_id, str) or not conversation_id.startswith(CONVERSATION_PREFIX):
        raise MalformedConversationId(
            f"conversation id {conversation_id!r} does not start with {CONVERSATION_PREFIX!r}"
        )
    digits = conversation_id[len(CONVERSATION_PREFIX) :]
    if len(digits) != _HEX_DIGITS or any(c not in "0123456789abcdef" for c in digits):
        raise MalformedConversationId(
            f"conversation id {conversation_id!r} is not {CONVERSATION_PREFIX!r} followed by "
            f"{_HEX_DIGITS} lowercase hex digits"
        )
    return str(UUID(hex=digits))
