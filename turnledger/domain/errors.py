"""The turnledger error family: every error a caller can see derives from `TurnledgerError`.

Every error class is defined here, whatever layer raises it (issue 20 point 6): the store's
(`StoreUnavailable`, `AppendInDoubt`, the key errors), the replay's, the transcripts'. The
modules that raise them import them from here (and keep the names importable for their
callers); `turnledger` re-exports the public ones, and docs/api.md lists them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from uuid import UUID

__all__ = [
    "AlreadyKeyed",
    "AnchorMismatch",
    "AppendInDoubt",
    "AppendRefused",
    "AuditKeyRequired",
    "ConcurrencyConflict",
    "ContextWindowExceeded",
    "CorruptRecord",
    "InvalidAnchor",
    "InvalidAppend",
    "InvalidKey",
    "InvalidMessage",
    "InvalidPosition",
    "InvalidProfile",
    "InvalidSessionSettings",
    "InvalidStoreURL",
    "InvalidUsage",
    "KeyRequired",
    "NotEncrypted",
    "ReplayError",
    "SessionActive",
    "SessionClosed",
    "SessionExists",
    "SessionForgottenError",
    "SessionNotFound",
    "SnapshotMismatch",
    "StoreChanged",
    "StoreUnavailable",
    "TranscriptError",
    "TurnledgerError",
    "UnansweredToolCalls",
    "UndecodableRecord",
    "UnkeyedChain",
    "WrongKey",
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


class SessionExists(ConcurrencyConflict):
    """A session was started with an id the store holds already. A `ConcurrencyConflict`
    (two processes starting the same named session race; the loser restores the winner's), but
    not one to retry: `retry_on_conflict` raises it at once."""


class CorruptRecord(TurnledgerError):
    """A stored record cannot be decoded; the text names the session id and the version."""

    def __init__(self, message: str, *, session_id: str = "", version: int | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.version = version


class InvalidStoreURL(TurnledgerError, ValueError):
    """The store URL cannot be used: unknown scheme, bad option, or a path that cannot be
    created. The message is one line with the reason (the CLI's exit 2)."""


class StoreUnavailable(TurnledgerError):
    """The database failed or cannot be reached (connection, lock timeout, closed backend)."""


class AppendInDoubt(StoreUnavailable):
    """An append failed after its insert was sent and the database did not answer again in
    time to tell whether the batch was stored (ADR-0064): the one `StoreUnavailable` of an
    append that may have stored something.

    ``session_id``, ``first`` and ``last`` (its versions) and ``head`` (the chain value its
    last record has if it was stored) name the batch; `EventStoreBackend.resolve_in_doubt`
    tells later whether it was. A `Session` remembers it: retrying the same command finds
    the batch if it was stored and returns it instead of recording it twice.
    """

    def __init__(
        self, message: str, *, session_id: UUID, first: int, last: int, head: bytes
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.first = first
        self.last = last
        self.head = head


class AppendRefused(StoreUnavailable):
    """An append the database refused before anything of it could commit, because a limit
    ran out: a lock or statement timeout, or no connection within the connect or pool wait
    (a busy server, a held lock). Nothing of the batch was stored, so calling again is safe;
    the framework integrations do so within their conflict budget (ADR-0065)."""


class InvalidAppend(TurnledgerError, ValueError):
    """The events of an append do not continue the session's stream (a caller bug: versions
    that skip or repeat, another session's event, a chain head that is not the stored one)."""


class AnchorMismatch(CorruptRecord):
    """The record a checked read starts from is absent or does not carry the expected chain
    (a snapshot ahead of the log or not taken from it); the caller reads from version 1."""


class SnapshotMismatch(CorruptRecord):
    """A snapshot that cannot be trusted (damaged, not the log's): replay instead."""


class UndecodableRecord(CorruptRecord):
    """A `CorruptRecord` raised by the store; ``cause`` is the one-line reason alone."""

    def __init__(self, session_id: UUID | str, version: int, topic: str, cause: str) -> None:
        super().__init__(
            f"corrupt record: session {bounded(str(session_id), 80)} version {version} "
            f"(topic {bounded(repr(topic), 120)}): {bounded(cause)}",
            session_id=str(session_id),
            version=version,
        )
        self.topic = topic
        self.cause = bounded(cause)


class InvalidKey(TurnledgerError, ValueError):
    """A key that is not 32 bytes as base64 or hex (or a key file that cannot be read)."""


class KeyRequired(TurnledgerError):
    """The store is encrypted and no key was given."""


class WrongKey(TurnledgerError):
    """The key given is not the store's key (or the audit key not the store's audit key)."""


class NotEncrypted(TurnledgerError):
    """A key was given for a store that holds unencrypted events, or a key operation
    (forget, rekey) was asked of a store that is not encrypted."""


class AuditKeyRequired(TurnledgerError):
    """The store's chain is keyed (HMAC-SHA256) and no audit key was given."""


class UnkeyedChain(TurnledgerError):
    """An audit key was given for a store whose chain is unkeyed; `turnledger rechain` moves
    it to a keyed chain (ADR-0047)."""


class SessionActive(TurnledgerError):
    """A forget judged on a session's idleness found it written since (`Store.forget`'s
    ``if_version``/``if_idle_for``, `turnledger purge`): nothing was erased (ADR-0098)."""

    def __init__(self, message: str, *, session_id: str = "") -> None:
        super().__init__(message)
        self.session_id = session_id


class StoreChanged(TurnledgerError):
    """An operator changed the store since this process opened it (`rekey`, `rechain`):
    the append or the new session was refused in its own transaction, nothing was stored.
    Open the store again with its current key and audit key (ADR-0098)."""


class AlreadyKeyed(TurnledgerError):
    """The store's chain is keyed already."""


class InvalidUsage(InvalidMessage):
    """A provider usage `Session.record_usage` cannot record as billed (issue 35): no usage
    shape turnledger reads, a count that is no whole number of 0 or more, more cached tokens
    than input, or no request of the session for it to answer."""


class TranscriptError(InvalidMessage):
    """A transcript cannot be converted (E11); the text names the line, message and field.

    ``line`` is the 1-based JSONL line number when the error comes from reading a file, else
    None. ``reason`` is the text without the line prefix.
    """

    def __init__(self, reason: str, *, line: int | None = None) -> None:
        super().__init__(reason if line is None else f"line {line}: {reason}")
        self.reason = reason
        self.line = line


class ReplayError(TurnledgerError, ValueError):
    """The events cannot be replayed as asked (not a session's stream, bad position)."""


class InvalidPosition(ReplayError):
    """An event position outside ``0 .. last recorded version`` (E4)."""


class InvalidAnchor(TurnledgerError, ValueError):
    """An anchor file that cannot be read as one (bad usage: exit 2)."""


class InvalidSessionSettings(TurnledgerError, TypeError):
    """``session_settings`` is neither the SDK's ``SessionSettings`` nor a dict of its fields
    (a ``TypeError``, as the SDK's own sessions raise)."""


class SessionClosed(TurnledgerError, RuntimeError):
    """An OpenAI Agents SDK session (`turnledger.integrations.openai_agents`) was closed;
    open a new one on the store to go on (a ``RuntimeError``, as a closed ``SQLiteSession``
    raises)."""
