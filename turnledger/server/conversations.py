"""The Conversations API's operations on a store, blocking (the app runs them in worker threads).

One `Conversations` object serves one process: it keeps a `Session` per conversation it has
written to (the session catches up after a `ConcurrencyConflict`, so another replica's writes
cost a retry, never a wrong decision: `retry_on_conflict`, E3), and reads items from the log
itself, so any replica answers a read with what is committed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar
from uuid import UUID

import attrs

import turnledger as tl
from turnledger.errors import InvalidUsage
from turnledger.events import HistoryTrimmed
from turnledger.providers import Usage, to_openai_responses
from turnledger.replay.timeline import to_jsonable
from turnledger.server.ids import conversation_id, session_id
from turnledger.server.items import (
    DUPLICATE_ID,
    ItemError,
    ItemFold,
    StoredItem,
    prepare_items,
)
from turnledger.server.registry import ConversationRecord, Registry

__all__ = ["Conversations", "NotFound", "Refused"]

T = TypeVar("T")
Item = dict[str, Any]
_CACHED_SESSIONS = 1024


class NotFound(LookupError):
    """No conversation or item of this id that the caller may see (404)."""


class Refused(ValueError):
    """A request the record cannot honour (400); ``param`` and ``code`` as OpenAI's errors."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def event_json(event: tl.DomainEvent) -> dict[str, Any]:
    """An event as JSON: its class, position, time and its plain fields."""
    out: dict[str, Any] = {"type": type(event).__name__, "position": event.originator_version,
                           "timestamp": to_jsonable(event.timestamp)}  # as the stream says it
    for field in attrs.fields(type(event)):
        if field.name in ("originator_id", "originator_version", "timestamp"):
            continue
        value = getattr(event, field.name)
        if hasattr(value, "value") and isinstance(value.value, str | int):  # an enum
            value = value.value
        if isinstance(value, str | int | float | bool) or value is None:
            out[field.name] = value
        elif isinstance(value, tuple) and all(isinstance(v, str | int) for v in value):
            out[field.name] = list(value)
    return out


_BODY_APIS: Final = frozenset({"openai_responses", "openai_chat", "anthropic"})
"""The request bodies a window answers with (``api``)."""
WINDOW_INCLUDES: Final = frozenset({"items", "events"})
"""What a window answers with only when asked (``include``): the kept items in Responses
form and every event the call recorded. A runtime that sends the body needs neither, and
they were half of the answer's bytes and a third of its cost (benchmarks/server.py)."""


def _window_answer(conversation: str, prepared: tl.PreparedRequest,
                   caused: Sequence[tl.DomainEvent], api: str, include: frozenset[str],
                   stored: list[Item]) -> dict[str, Any]:
    """The window's answer (`Conversations.window`): ``caused`` holds every event the call
    recorded when it trimmed or ``include`` asks for them, else nothing."""
    bodies: dict[str, Callable[[], Any]] = {
        "openai_responses": prepared.to_openai_responses,
        "openai_chat": prepared.to_openai_chat,
        "anthropic": prepared.to_anthropic}
    answer: dict[str, Any] = {
        "object": "conversation.window",
        "conversation_id": conversation,
        "capacity": {"fits": True, "estimated_tokens": prepared.estimated_tokens,
                     "model_context_window": prepared.model_context_window,
                     "budget": prepared.budget, "window": prepared.window},
        "body": bodies[api](),
        "prompt_cache_key": prepared.cache_key,
        "request_digest": prepared.digest,
        "history_trimmed": [event_json(e) for e in caused if isinstance(e, HistoryTrimmed)],
    }
    if stored:
        answer["added_items"] = stored
    if "items" in include:
        answer["items"] = to_openai_responses(prepared.messages)
    if "events" in include:
        answer["events"] = [event_json(e) for e in caused]
    return answer


class Conversations:
    """The operations of the API (module doc); ``owner`` is the caller's tenant.

    ``audit_any_session``: the audit endpoints (timeline, verify, what-if, report) also read a
    session of the store that no conversation names (one the library, an integration or an
    import wrote), as the store-wide stream shows them. For a server without keys, whose every
    caller is its operator; with keys a conversation is its creator's alone.
    """

    def __init__(self, store: tl.Store, registry: Registry,
                 profile: tl.RuntimeProfile | None = None,
                 providers: tuple[tl.ProviderProfile, ...] = (), *,
                 audit_any_session: bool = False) -> None:
        self.store = store
        self.registry = registry
        self.audit_any_session = audit_any_session
        self.profile = profile or tl.RuntimeProfile()
        self.providers = providers
        self._sessions: OrderedDict[str, tl.Session] = OrderedDict()
        self._locks: dict[str, threading.Lock] = {}
        self._folds: OrderedDict[str, ItemFold] = OrderedDict()
        self._lock = threading.Lock()

    # -- helpers --

    def record(self, conversation: str, owner: str) -> ConversationRecord:
        """The conversation's row, or `NotFound` (a malformed id, another tenant's, deleted)."""
        try:
            session_id(conversation)
        except LookupError:
            raise NotFound(f"Conversation with id '{conversation}' not found.") from None
        found = self.registry.conversation(conversation)
        if found is None or found.deleted or found.owner != owner:
            raise NotFound(f"Conversation with id '{conversation}' not found.")
        return found

    def _writing(self, conversation: str, write: Callable[[tl.Session], T], *,
                 fresh: bool = False) -> T:
        """``write`` on the conversation's session, serialized in this process and retried on
        another replica's conflicting write. ``fresh``: restore the session first, for a
        write that decides on what it reads before it records (a cached session catches up
        only when its own append conflicts)."""
        with self._lock:
            lock = self._locks.setdefault(conversation, threading.Lock())
        with lock:
            with self._lock:
                session = self._sessions.get(conversation)
            if session is None or fresh:
                session = self.store.restore(session_id(conversation))
            with self._lock:
                self._sessions[conversation] = session
                self._sessions.move_to_end(conversation)
                while len(self._sessions) > _CACHED_SESSIONS:
                    self._sessions.popitem(last=False)
            return tl.retry_on_conflict(lambda: write(session))

    def _fold(self, conversation: str) -> ItemFold:
        with self._lock:
            fold = self._folds.get(conversation)
            if fold is None:
                fold = self._folds[conversation] = ItemFold()
            self._folds.move_to_end(conversation)
            while len(self._folds) > _CACHED_SESSIONS:
                self._folds.popitem(last=False)
            return fold

    def items(self, conversation: str) -> list[StoredItem]:
        """The conversation's items as committed now (`ItemFold`: this process keeps them
        folded, given the events of its own writes, and reads only the events recorded since
        by another process)."""
        return self._fold(conversation).current(self._reader(conversation))

    def _reader(self, conversation: str) -> Callable[[int], list[tl.DomainEvent]]:
        sid = UUID(session_id(conversation))
        return lambda after: self.store.backend.read(sid, after_version=after)

    def _prepare(self, items: object) -> tuple[list[Item], list[tl.ConversationMessage]]:
        try:
            return prepare_items(items, (), self.profile.max_tool_result_chars)
        except ItemError as error:
            raise Refused(str(error), error.param, error.code) from None

    # -- conversations --

    def create(self, owner: str, items: object, metadata: dict[str, str],
               ) -> ConversationRecord:
        """A new session holding ``items`` in one transaction, then its row."""
        _, messages = self._prepare(items if items is not None else [])
        session = self.store.import_conversation(messages, self.profile, self.providers)
        return self.registry.add_conversation(conversation_id(session.id), owner, metadata)

    def update(self, conversation: str, owner: str, metadata: dict[str, str],
               ) -> ConversationRecord:
        self.record(conversation, owner)
        self.registry.set_metadata(conversation, metadata)
        return self.record(conversation, owner)

    def delete(self, conversation: str, owner: str) -> None:
        """Hide the conversation: its row is marked deleted and its views cleared (recorded);
        on an encrypted store its content is erased too (`Store.forget`). A plain store's log
        keeps the items: it is append-only, and erasure is what encryption is for (ADR-0103)."""
        self.record(conversation, owner)
        self._writing(conversation, lambda s: s.clear())
        self.registry.delete_conversation(conversation)
        with self._lock:
            self._sessions.pop(conversation, None)
        if self.store.encrypted:
            self.store.forget(session_id(conversation), "conversation deleted")

    # -- items --

    def add_items(self, conversation: str, owner: str, items: object) -> list[Item]:
        """Record the items in one transaction (`_extend`)."""
        self.record(conversation, owner)
        stored, messages = self._prepare(items)
        if messages:
            self._writing(conversation, lambda s: self._extend(conversation, s, stored,
                                                               messages))
        return stored

    def _extend(self, conversation: str, session: tl.Session, stored: list[Item],
                messages: list[tl.ConversationMessage]) -> None:
        """Append inside the retried write, the ids checked first: the append is conditional
        on the version the check read, so another replica's item of the same id makes it
        conflict and check again, never store a duplicate."""
        # At least as new as the session: a newer item of another replica is refused here
        # or makes this append conflict and check again. A fold as new as the session (this
        # process wrote last) needs no read of the log.
        before = session.version
        fold = self._fold(conversation)
        held = fold.ids(before, self._reader(conversation))
        for index, item in enumerate(stored):
            if item["id"] in held:
                raise Refused(f"items[{index}]: an item with id {item['id']!r} is already "
                              "in this conversation", f"items[{index}].id", DUPLICATE_ID)
        fold.recorded(before, session.extend(messages))

    def item(self, conversation: str, owner: str, item: str) -> Item:
        self.record(conversation, owner)
        for stored in self.items(conversation):
            if stored.item.get("id") == item:
                return stored.item
        raise NotFound(f"Item with id '{item}' not found.")

    def delete_item(self, conversation: str, owner: str, item: str) -> None:
        """Pop the item when it is the newest (recorded as `MessagePopped`); an older one is
        refused: the log is append-only, and a pop is the one removal the views record."""
        self.item(conversation, owner, item)

        def pop(session: tl.Session) -> None:
            # The items as of the session's version or later: an item another replica added
            # since makes this one not the newest, or the pop conflict and check again.
            items = self.items(conversation)
            if not items or items[-1].item.get("id") != item:
                raise Refused(
                    f"Item '{item}' is not the newest item of the conversation: turnledger's "
                    "log is append-only and only the newest item can be removed (recorded as "
                    "MessagePopped)", "item_id", "item_not_newest")
            shared = [s for s in items if s.position == items[-1].position]
            if len(shared) > 1:
                raise Refused(
                    f"Item '{item}' was recorded as one message with {len(shared) - 1} other "
                    "item(s) (a tool step written without this API); removing it would remove "
                    "them too, so nothing was removed", "item_id", "item_not_newest")
            session.pop()

        self._writing(conversation, pop, fresh=True)

    # -- what only turnledger answers --

    def window(self, conversation: str, owner: str, tools: list[Any], api: str,
               include: frozenset[str] = frozenset(), items: object = None,
               ) -> dict[str, Any]:
        """Prepare the next model call (`Session.prepare_request`): the capacity verdict with
        both numbers, the body for ``api`` and the trims it recorded; with ``include``, the
        kept items (``"items"``) and every event it recorded (``"events"``). ``items``: new
        items recorded first, as `add_items` does, in the same write (one request for a
        model call's new input and its window; ``added_items`` answers with them). A bad
        ``api``, ``include`` or item is refused before anything is recorded; a window refused
        after the items were recorded says so (the log is append-only)."""
        if api not in _BODY_APIS:
            raise Refused(f"api must be one of {sorted(_BODY_APIS)}", "api", "invalid_value")
        if not include <= WINDOW_INCLUDES:
            raise Refused(f"include may name only {sorted(WINDOW_INCLUDES)}, got "
                          f"{sorted(include - WINDOW_INCLUDES)}", "include", "invalid_value")
        self.record(conversation, owner)
        stored, messages = self._prepare(items) if items is not None else ([], [])
        appended = False

        def prepare(session: tl.Session) -> dict[str, Any]:
            nonlocal appended
            if messages and not appended:  # a retry after a conflict does not add them again
                self._extend(conversation, session, stored, messages)
                appended = True
            recorded = (f" (the request's {len(stored)} items were recorded first)"
                        if stored else "")
            before = session.version
            try:
                prepared = session.prepare_request(tools=tools)
            except tl.ContextWindowExceeded as error:
                raise Refused(f"{error}{recorded}", None, "context_length_exceeded") from None
            except tl.UnansweredToolCalls as error:
                raise Refused(f"{error}{recorded}", None, "unanswered_tool_calls") from None
            # One new event is the RequestPrepared alone: nothing was trimmed, nothing to read.
            caused = (session.events(after_version=before)
                      if session.version - before > 1 or "events" in include else [])
            if caused:
                self._fold(conversation).recorded(before, caused)
            else:
                self._fold(conversation).passed(before, session.version)
            return _window_answer(conversation, prepared, caused, api, include, stored)

        return self._writing(conversation, prepare)

    def usage(self, conversation: str, owner: str, usage: object, digest: str | None
              ) -> dict[str, Any]:
        """Record what the provider billed for a window this conversation answered
        (`Session.record_usage`, issue 35): ``digest`` is the window answer's
        ``request_digest``; None: the conversation's newest window. A usage of no known
        shape, or a digest of no window, is refused (400) with nothing recorded."""
        self.record(conversation, owner)
        try:
            read = Usage.of(usage)  # the usage's own faults, before any request is looked up
        except InvalidUsage as error:
            raise Refused(str(error), "usage", "invalid_value") from None

        def record(session: tl.Session) -> dict[str, Any]:
            try:
                (event,) = session.record_usage(read, digest)
            except InvalidUsage as error:  # a usage read already: no such request
                raise Refused(str(error), "request_digest", "invalid_value") from None
            return {"object": "conversation.usage", "event": event_json(event)}

        return self._writing(conversation, record)

    def recover(self, conversation: str, owner: str, error: str) -> dict[str, Any]:
        """Overflow recovery (R25, R26) from the provider's error text."""
        self.record(conversation, owner)

        def recover(session: tl.Session) -> dict[str, Any]:
            before = session.version
            recovered = session.recover_from_overflow(error)
            caused = session.events(after_version=before)
            return {"object": "conversation.overflow_recovery", "recovered": recovered,
                    "events": [event_json(e) for e in caused]}

        return self._writing(conversation, recover)

    def audited(self, conversation: str, owner: str) -> str:
        """The session id the audit endpoints read for ``conversation``, or `NotFound`: a
        conversation of ``owner``'s, or with `audit_any_session` any session of the store
        that no conversation names (a missing one is `SessionNotFound` when read)."""
        if self.audit_any_session and self.registry.conversation(conversation) is None:
            try:
                return session_id(conversation)
            except LookupError:
                raise NotFound(f"Conversation with id '{conversation}' not found.") from None
        self.record(conversation, owner)
        return session_id(conversation)

    def events(self, conversation: str, owner: str) -> list[tl.DomainEvent]:
        """The conversation's log, for the audit endpoints (`audited`)."""
        return self.store.events_of(self.audited(conversation, owner))
