"""LangChain and LangGraph on turnledger sessions (issue 10, point 3).

Needs ``pip install 'turnledger[langchain]'`` (langchain-core; LangGraph for its agents).

- **Conversions** (`from_langchain`, `to_langchain`, and their ``*_messages`` forms):
  ``HumanMessage`` / ``SystemMessage`` / ``AIMessage`` (with ``tool_calls``) / ``ToolMessage``
  ⇄ turnledger messages, losslessly: the content (a string or a list of content blocks, images
  included) goes through the OpenAI Chat Completions conversion, which keeps every block; every
  other field LangChain sets (``id``, ``name``, ``additional_kwargs``, ``response_metadata``,
  ``usage_metadata``, ``artifact``, ``status``...) is kept verbatim beside it. A message that
  would not come back equal is refused (`InvalidMessage`), never stored changed.
- **History**: `TurnledgerChatMessageHistory`, a ``BaseChatMessageHistory`` backed by a
  turnledger session (for ``RunnableWithMessageHistory``): ``messages`` is what the model should
  see now (whole turns within the budget, the breadcrumb when older turns were cut; the trims
  are recorded), ``add_messages`` records a step in one transaction, ``clear`` is recorded.
  `history_factory(store)` is the ``get_session_history`` to give: each history it builds
  opens its session at its first use, so the factory, which LangChain calls on the event loop
  inside ``ainvoke``, does no I/O.
- **Trimming step**: `TurnledgerTrimmer` records the messages of a LangGraph thread as they
  come and returns the whole-turn window: as LangGraph's ``pre_model_hook`` (it answers
  ``{"llm_input_messages": window}``, so the graph state keeps every message while the model
  sees the window) with `TurnledgerTrimmer.as_post_model_hook` as its ``post_model_hook``
  (records the reply, so the log is whole when the loop ends), and as an LCEL step on a message
  list (``trimmer.as_runnable() | model``; `TurnledgerTrimmer.record` records the reply).
- **Agents** (LangChain 1.x ``create_agent``): `turnledger.integrations.langchain_agents`
  has the middleware, which trims between the tool steps of one run too.

Async calls run the store's blocking I/O in a worker thread (`off_loop`). Many objects (one per
request, several workers or processes) may serve one conversation: a call that loses a race to
another writer is decided again on the newer state until it lands (`retrying`, within
``conflict_budget_seconds``, ADR-0065); LangChain sees a `ConcurrencyConflict` only when that
budget is spent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.errors import InvalidMessage, TurnledgerError
from turnledger.domain.events import MessageAppended
from turnledger.domain.messages import ChatMessage, ConversationMessage
from turnledger.domain.providers import from_openai_chat, to_openai_chat
from turnledger.integrations import (
    CONFLICT_BUDGET_SECONDS,
    SessionsByName,
    conflict_budget,
    fit_window,
    off_loop,
    open_session,
    retrying,
    session_uuid,
)
from turnledger.store.session import Session, Store
from turnledger.store.summaries import Summarizer, SummaryFunction, as_summarizer

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
    from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "turnledger.integrations.langchain needs langchain-core: "
        "pip install 'turnledger[langchain]'"
    ) from error

__all__ = [
    "TurnledgerChatMessageHistory",
    "TurnledgerTrimmer",
    "from_langchain",
    "from_langchain_messages",
    "history_factory",
    "to_langchain",
    "to_langchain_messages",
]

_ROLES: dict[type[BaseMessage], str] = {
    HumanMessage: "user",
    AIMessage: "assistant",
    SystemMessage: "system",
    ToolMessage: "tool",
}
_CLASSES = {role: cls for cls, role in _ROLES.items()}
_KEY = "langchain"  # the verbatim LangChain fields, beside the Chat Completions ones
R = TypeVar("R")


def _openai_form(message: BaseMessage, where: str) -> dict[str, Any]:
    """``message`` as one Chat Completions message plus its other LangChain fields."""
    role = _ROLES.get(type(message))
    if role is None:
        raise InvalidMessage(f"{where}: {type(message).__name__} is not supported (use "
                             "HumanMessage, AIMessage, SystemMessage or ToolMessage)")
    rest = message.model_dump(exclude_defaults=True)
    for key in ("content", "type", "tool_calls", "tool_call_id"):
        rest.pop(key, None)
    raw: dict[str, Any] = {"role": role, "content": message.content}
    if isinstance(message, AIMessage) and message.tool_calls:
        raw["tool_calls"] = [_call_json(call, where) for call in message.tool_calls]
    if isinstance(message, ToolMessage):
        raw["tool_call_id"] = message.tool_call_id
    if rest:
        raw[_KEY] = rest
    return raw


def _call_json(call: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not call.get("id"):
        raise InvalidMessage(f"{where}: a tool call has no id, so no result can answer it")
    arguments = json.dumps(call["args"], ensure_ascii=False)
    return {"id": call["id"], "type": "function",
            "function": {"name": call["name"], "arguments": arguments}}


def from_langchain(message: BaseMessage, *, where: str = "message") -> ConversationMessage:
    """The turnledger message of one LangChain message (module doc).

    Raises `InvalidMessage` for another message class, a tool call without an id, or fields
    that are not JSON; nothing is converted with a loss.
    """
    try:
        raw = json.loads(json.dumps(_openai_form(message, where)))
    except (TypeError, ValueError) as error:
        raise InvalidMessage(f"{where}: a field is not JSON-serialisable: {error}") from None
    converted = from_openai_chat([raw])
    if len(converted) != 1 or to_openai_chat(converted) != [raw]:
        raise InvalidMessage(f"{where}: {type(message).__name__} would not come back equal")
    return converted[0]


def from_langchain_messages(messages: Iterable[BaseMessage]) -> list[ConversationMessage]:
    """`from_langchain` of each message; the error names the index of a bad one."""
    return [from_langchain(m, where=f"messages[{i}]") for i, m in enumerate(messages)]


def _message_of(raw: dict[str, Any]) -> BaseMessage:
    fields = dict(raw.pop(_KEY, None) or {})
    role = raw["role"]
    content = raw.get("content")
    fields["content"] = "" if content is None else content
    if "tool_calls" in raw:
        fields["tool_calls"] = [
            {"id": c["id"], "name": c["function"]["name"],
             "args": json.loads(c["function"]["arguments"] or "{}"), "type": "tool_call"}
            for c in raw["tool_calls"]
        ]
    if role == "tool":
        fields["tool_call_id"] = raw["tool_call_id"]
    message: BaseMessage = _CLASSES[role](**fields)
    return message


def to_langchain_messages(
    history: Iterable[ConversationMessage | ChatMessage],
) -> list[BaseMessage]:
    """The LangChain messages of a turnledger history or chat view (one per provider message:
    a `ToolResults` of two results is two ``ToolMessage``); the breadcrumb is a
    ``HumanMessage``."""
    return [_message_of(raw) for raw in to_openai_chat(history)]


def _fresh_json(value: Any) -> Any:
    """A copy of a JSON value (dicts and lists copied, leaves shared: they are immutable)."""
    if type(value) is dict:
        return {key: _fresh_json(inner) for key, inner in value.items()}
    if type(value) is list:
        return [_fresh_json(inner) for inner in value]
    return value


def _fresh_message(message: BaseMessage) -> BaseMessage:
    """A copy of ``message`` sharing nothing mutable with it (its content blocks, tool calls
    and other dict or list fields copied), ~8x cheaper than building it again."""
    copied = message.model_copy()
    fields = copied.__dict__
    for key, value in fields.items():
        if value and type(value) in (dict, list):
            fields[key] = _fresh_json(value)
    return copied


def to_langchain(message: ConversationMessage | ChatMessage) -> BaseMessage:
    """The LangChain message of one turnledger message (`to_langchain_messages`)."""
    converted = to_langchain_messages([message])
    if len(converted) != 1:
        raise InvalidMessage(f"this message is {len(converted)} LangChain messages: use "
                             "to_langchain_messages")
    return converted[0]


class TurnledgerChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat message history kept in a turnledger session (module doc).

    ``session`` is a `Session`, or a callable that opens one: then nothing is opened, read or
    written until the first call that needs the session, and an async call opens it in a
    worker thread (`lazy`, `history_factory`: ``RunnableWithMessageHistory`` calls its
    factory synchronously inside ``ainvoke``, on the event loop).

    A call that loses a race to another writer of the session is decided again on the newer
    state, for at most ``conflict_budget_seconds`` (default 30; 0: once), then raises
    `ConcurrencyConflict` saying so; nothing of a call that raised is recorded (ADR-0065).

    ``summarizer`` (a `Summarizer` or a bare callable; issue 24): ``messages`` shows the turns
    a token-budget trim drops as its summary in place of the breadcrumb (`TurnsSummarized`; on
    failure the plain trim, `SummaryRefused`). None: the session's own `Session.summarizer`.
    """

    def __init__(
        self,
        session: Session | Callable[[], Session],
        *,
        conflict_budget_seconds: float = CONFLICT_BUDGET_SECONDS,
        summarizer: Summarizer | SummaryFunction | None = None,
    ) -> None:
        self._budget = conflict_budget(conflict_budget_seconds)
        self.summarizer = as_summarizer(summarizer)
        if isinstance(session, Session):
            self._session: Session | None = session
            self._open: Callable[[], Session] | None = None
        elif callable(session):
            self._session, self._open = None, session
        else:
            raise TypeError("TurnledgerChatMessageHistory takes a turnledger Session or a "
                            f"callable that opens one, got {type(session).__name__}")
        self._opening = threading.Lock()

    @classmethod
    def lazy(
        cls,
        store: Store,
        session_id: str | int,
        *,
        profile: RuntimeProfile | None = None,
        providers: Sequence[ProviderProfile] = (),
        route: Route | None = None,
        conflict_budget_seconds: float = CONFLICT_BUDGET_SECONDS,
        summarizer: Summarizer | SummaryFunction | None = None,
    ) -> TurnledgerChatMessageHistory:
        """The history of the conversation named ``session_id`` (`session_uuid`), opened at
        its first use (restored, or started with ``profile``, ``providers`` and ``route``):
        building it does no I/O."""
        if not isinstance(store, Store):
            raise TypeError(f"store must be a turnledger Store, got {type(store).__name__}")
        name = _thread_name(session_id)
        session_uuid(name)  # a name that is no str is refused now, not at first use
        frozen = tuple(providers)

        def open_it() -> Session:
            return open_session(store, name, profile=profile, providers=frozen, route=route)

        return cls(open_it, conflict_budget_seconds=conflict_budget_seconds,
                   summarizer=summarizer)

    @property
    def session(self) -> Session:
        """The turnledger session (opened now, once, when the history was built lazily)."""
        if self._session is None:
            with self._opening:
                if self._session is None:
                    assert self._open is not None, "a history without a session has an opener"
                    self._session = self._open()
        return self._session

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """What the model should see now; the trims this takes are recorded (fit_window)."""
        session = self.session
        window = self._retrying(
            session, "messages", lambda: fit_window(session, self.summarizer))
        return to_langchain_messages(window)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Record ``messages`` in one transaction (`Session.extend`)."""
        converted = from_langchain_messages(messages)  # once: a retry only records again
        session = self.session
        self._retrying(session, "add_messages", lambda: session.extend(converted))

    def clear(self) -> None:
        """Remove every message from the views (recorded; the log keeps them)."""
        session = self.session
        self._retrying(session, "clear", session.clear)

    def _retrying(self, session: Session, what: str, write: Callable[[], R]) -> R:
        return retrying(write, f"{what} of session {session.id}", self._budget)

    async def aget_messages(self) -> list[BaseMessage]:
        return await off_loop(lambda: self.messages)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await off_loop(self.add_messages, messages)

    async def aclear(self) -> None:
        await off_loop(self.clear)


def history_factory(
    store: Store,
    *,
    profile: RuntimeProfile | None = None,
    providers: Sequence[ProviderProfile] = (),
    route: Route | None = None,
    conflict_budget_seconds: float = CONFLICT_BUDGET_SECONDS,
    summarizer: Summarizer | SummaryFunction | None = None,
) -> Callable[[str], TurnledgerChatMessageHistory]:
    """A ``get_session_history`` for ``RunnableWithMessageHistory``: ``session_id`` → its
    `TurnledgerChatMessageHistory.lazy` history (with ``summarizer``), so the factory never
    blocks the event loop (LangChain calls it synchronously, in ``ainvoke`` too)."""
    conflict_budget(conflict_budget_seconds)  # a bad budget is refused here, not at first use
    summarizer = as_summarizer(summarizer)  # and a summarizer that is not callable

    def get_session_history(session_id: str) -> TurnledgerChatMessageHistory:
        return TurnledgerChatMessageHistory.lazy(
            store, session_id, profile=profile, providers=providers, route=route,
            conflict_budget_seconds=conflict_budget_seconds, summarizer=summarizer,
        )

    return get_session_history


def _last_recorded_id(session: Session, recorded: int) -> str | None:
    """The LangChain id of the message ``session`` recorded last (at ``recorded - 1``), read
    from the newest events back (the views may not show it: a tool call waiting for its
    results is held back)."""
    version, back = session.version, 16
    while True:
        events = session.events(after_version=max(0, version - back))
        for event in reversed(events):
            if isinstance(event, MessageAppended) and event.position == recorded - 1:
                last: str | None = to_openai_chat([event.message])[-1].get(_KEY, {}).get("id")
                return last
        if back >= version:
            return None
        back *= 4


def _thread_name(session_id: str | int) -> str:
    """A session id as LangGraph keeps a thread id: an int as its text (``42`` and ``"42"``
    are one thread); anything else as given, checked as a session name (`session_uuid`)."""
    return str(session_id) if type(session_id) is int else cast("str", session_id)


def _state_messages(state: Mapping[str, Any]) -> Any:
    """The ``messages`` of a graph state; `TypeError` naming the keys it has instead."""
    if "messages" not in state:
        keys = ", ".join(map(str, state)) or "none"
        raise TypeError(f"a graph state holds its messages under 'messages'; this one has "
                        f"{keys}")
    return state["messages"]


class TurnledgerTrimmer(SessionsByName):
    """Records a conversation's LangChain messages and answers the whole-turn window.

    One turnledger session per LangGraph thread (``config["configurable"]["thread_id"]``,
    named by `session_uuid`), or the one ``session_id`` given; sessions start with ``profile``,
    ``providers`` and ``route``. The messages given are the whole conversation so far (a
    graph's ``messages``): those not recorded yet are recorded in one transaction, then the
    trims a request would make are decided and recorded, and the window is returned. After a
    lost race with another writer of the thread, what is new is judged again on the newer state
    (within ``conflict_budget_seconds``, as `TurnledgerChatMessageHistory`). ``summarizer``:
    each window shows the turns a token-budget trim drops as its summary (issue 24, as
    `TurnledgerChatMessageHistory`).
    """

    def __init__(
        self,
        store: Store,
        *,
        profile: RuntimeProfile | None = None,
        providers: Sequence[ProviderProfile] = (),
        route: Route | None = None,
        session_id: str | int | None = None,
        conflict_budget_seconds: float = CONFLICT_BUDGET_SECONDS,
        summarizer: Summarizer | SummaryFunction | None = None,
    ) -> None:
        named = None if session_id is None else _thread_name(session_id)
        super().__init__(store, profile=profile, providers=providers, route=route,
                         session_id=named, conflict_budget_seconds=conflict_budget_seconds,
                         summarizer=summarizer)
        # One writer at a time per session in this object: what is new is judged and recorded
        # under it, so calls at once (a step's parallel tool calls) record a message once.
        self._writing: dict[str, threading.Lock] = {}
        # For ``after_last``: each session's last recorded message's id, and the log position
        # it was recorded at (another writer moved the log on when that differs).
        self._last_ids: dict[str, tuple[int, str | None]] = {}
        # Each window message's LangChain message, built once (turnledger messages are
        # immutable values); these never leave the object: what is handed out is the caller's
        # own equal message or a copy (`_fresh_message`), so a model or middleware that edits
        # its input never edits the next window.
        self._converted: dict[ChatMessage, BaseMessage] = {}

    def session_for(self, config: RunnableConfig | None = None) -> Session:
        """The session of the thread of ``config`` (or of ``session_id``); opened once."""
        name = self.session_id or ((config or {}).get("configurable") or {}).get("thread_id")
        if not name:
            raise TurnledgerError(f"{type(self).__name__} needs a session_id or a thread_id in "
                                  "config['configurable']")
        session = self._session_named(str(name))
        with self._lock:
            self._writing.setdefault(session.id, threading.Lock())
        return session

    def window(
        self,
        messages: Sequence[BaseMessage],
        config: RunnableConfig | None = None,
        *,
        after_last: bool = False,
    ) -> list[BaseMessage]:
        """Record what is new in ``messages`` and return the window the model should see.

        ``messages`` is the whole conversation so far; with ``after_last``, any list that holds
        the last message recorded (found by its id) and what came after it, such as the last
        window plus the step's messages: what follows that message is new."""
        session = self.session_for(config)

        def record_and_fit() -> list[ChatMessage]:
            with self._writing[session.id]:
                new = self._new_messages(session, messages, after_last)
                # The step's new messages and the window's trims: one transaction.
                window = self._window(session, from_langchain_messages(new))
                self._noted(session, new, after_last)
                return window

        chat = self._retrying(session, "the trimming step", record_and_fit)
        return self._langchain_of(chat, messages)

    def _langchain_of(
        self, chat: Sequence[ChatMessage], given: Sequence[BaseMessage] = ()
    ) -> list[BaseMessage]:
        """`to_langchain_messages` of a window, each message converted once per trimmer (a
        step's window is the last one plus the step's messages). A window message equal to a
        message of ``given`` (the graph state's, found by id) is handed out as that very
        object, as a graph without turnledger hands the model its state's messages; any other
        (the breadcrumb, a truncated tool result) as a copy of the cached one."""
        # The window is whole turns from the end of the conversation: its messages are among
        # the last ones given (a miss only costs a copy).
        tail = given[len(given) - min(len(given), 2 * len(chat) + 8):]
        by_id = {m.id: m for m in tail if m.id}
        with self._lock:
            cache = self._converted
            if len(cache) > 2 * len(chat) + 256:
                cache.clear()  # what trims removed from the window (and other threads')
            out = []
            for message in chat:
                converted = cache.get(message)
                if converted is None:
                    one = to_langchain_messages([message])
                    if len(one) != 1:  # not one provider message: not cached
                        out.extend(one)
                        continue
                    converted = cache[message] = one[0]
                same = by_id.get(converted.id) if converted.id else None
                out.append(same if same is not None and same == converted
                           else _fresh_message(converted))
            return out

    def record(
        self,
        messages: Sequence[BaseMessage],
        config: RunnableConfig | None = None,
        *,
        after_last: bool = False,
    ) -> int:
        """Record what is new in ``messages`` (the whole conversation so far, or with
        ``after_last`` as `window` takes it), in one transaction, and trim nothing: after the
        model's reply, so the log holds the last message when a loop ends. Returns how many
        messages were new."""
        session = self.session_for(config)

        def record_new() -> int:
            with self._writing[session.id]:
                return self._record_new(session, messages, after_last)

        return self._retrying(session, "recording the messages", record_new)

    def _record_new(
        self, session: Session, messages: Sequence[BaseMessage], after_last: bool = False
    ) -> int:
        new = self._new_messages(session, messages, after_last)
        if new:
            session.extend(from_langchain_messages(new))
            self._noted(session, new, after_last)
        return len(new)

    def _noted(self, session: Session, new: Sequence[BaseMessage], after_last: bool) -> None:
        """Note the id of the last of ``new``, just recorded (for ``after_last``)."""
        if new and after_last:
            self._last_ids[session.id] = (session.next_position, new[-1].id)

    def _new_messages(
        self, session: Session, messages: Sequence[BaseMessage], after_last: bool
    ) -> Sequence[BaseMessage]:
        """What of ``messages`` ``session`` has not recorded. Judged on each attempt: after a
        conflict, another writer may have recorded some of these very messages."""
        recorded = session.next_position
        if after_last:
            new = self._after_last(session, messages, recorded)
        elif len(messages) < recorded:
            raise TurnledgerError(
                f"session {session.id} recorded {recorded} messages but only {len(messages)} "
                "were given: give the whole conversation, in order (in a LangGraph agent, its "
                "checkpointer must keep the thread's messages; a new conversation needs a new "
                "thread id)"
            )
        else:
            new = messages[recorded:]
        return new

    def last_recorded_id(self, config: RunnableConfig | None = None) -> str | None:
        """The LangChain id of the message the thread's session recorded last (None when it
        recorded none)."""
        session = self.session_for(config)
        return self._last_of(session, session.next_position)

    def _last_of(self, session: Session, recorded: int) -> str | None:
        noted = self._last_ids.get(session.id)
        if noted is not None and noted[0] == recorded:
            return noted[1]
        # First use here, or another writer moved the log on: ask the log.
        last = _last_recorded_id(session, recorded) if recorded else None
        self._last_ids[session.id] = (recorded, last)
        return last

    def _after_last(
        self, session: Session, messages: Sequence[BaseMessage], recorded: int
    ) -> Sequence[BaseMessage]:
        """The messages after the last one ``session`` recorded, found by id."""
        if recorded == 0:
            return messages
        last = self._last_of(session, recorded)
        if last is not None:
            for i in range(len(messages) - 1, -1, -1):
                if messages[i].id == last:
                    return messages[i + 1:]
        raise TurnledgerError(
            f"session {session.id}: the messages given do not hold the last one it recorded "
            f"(id {last!r}): give the last window and what came after it (in a LangGraph "
            "agent, its checkpointer must keep the thread's state; a new conversation needs a "
            "new thread id)"
        )

    def invoke(self, value: Any, config: RunnableConfig | None = None) -> Any:
        """A graph state (``{"messages": [...]}``) → ``{"llm_input_messages": window}``; a
        message list → the window."""
        if isinstance(value, Mapping):
            return {"llm_input_messages": self.window(_state_messages(value), config)}
        return self.window(list(value), config)

    async def ainvoke(self, value: Any, config: RunnableConfig | None = None) -> Any:
        """`invoke`, with the store's I/O in a worker thread."""
        return await off_loop(self.invoke, value, config)

    def as_runnable(self) -> Runnable[Any, Any]:
        """This step as a Runnable (sync and async): a LangGraph ``pre_model_hook`` or an LCEL
        step before a chat model."""
        return RunnableLambda(self.invoke, afunc=self.ainvoke, name="turnledger_trim")

    def as_post_model_hook(self) -> Runnable[Any, Any]:
        """A LangGraph ``post_model_hook`` that records the model's reply (and anything else
        new in the graph state) and changes nothing: with it, the log holds every message when
        the loop ends, not only from the next model call on (issue 22)."""

        def post(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
            self.record(_state_messages(state), config)
            return {}

        async def apost(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
            return await off_loop(post, state, config)

        return RunnableLambda(post, afunc=apost, name="turnledger_record")
