"""LangChain and LangGraph on turnledger sessions (issue 10, point 3).

Needs ``pip install 'turnledger[langchain]'`` (langchain-core; LangGraph for its agents).

- **Conversions** (`from_langchain`, `to_langchain`, and their ``*_messages`` forms; from
  `turnledger.integrations.langchain_messages`): LangChain messages ⇄ turnledger messages,
  losslessly, through the OpenAI Chat Completions format, every other field kept verbatim.
- **History** (from `turnledger.integrations.langchain_history`):
  `TurnledgerChatMessageHistory`, a ``BaseChatMessageHistory`` for
  ``RunnableWithMessageHistory``, and `history_factory`, its ``get_session_history``.
- **Trimming step**: `TurnledgerTrimmer` records the messages of a LangGraph thread as they
  come and returns the whole-turn window: as LangGraph's ``pre_model_hook`` (it answers
  ``{"llm_input_messages": window}``, so the graph state keeps every message while the model
  sees the window) with `TurnledgerTrimmer.as_post_model_hook` as its ``post_model_hook``
  (records the reply, so the log is whole when the loop ends), and as an LCEL step on a message
  list (``trimmer.as_runnable() | model``; `TurnledgerTrimmer.record` records the reply).
- **Agents** (LangChain 1.x ``create_agent``): `turnledger.integrations.langchain_agents`
  has the middleware, which trims between the tool steps of one run too.
- **Usage** (issue 35): when the model's reply is recorded (the post-model hook, `record`, the
  middleware, or the next window), its ``usage_metadata`` is recorded as answering the window
  the trimmer handed out before it (`record_usage`): LangChain's counts mean what turnledger's
  do (``input_tokens`` sums every input token type, the cache reads and writes included;
  ``output_tokens`` every output type), recorded with api ``langchain``.

Async calls run the store's blocking I/O in a worker thread (`off_loop`). Many objects (one per
request, several workers or processes) may serve one conversation: a call that loses a race to
another writer is decided again on the newer state until it lands (`retrying`, within the
conflict budget, ADR-0065); LangChain sees a `ConcurrencyConflict` only when it is spent.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from turnledger.domain.errors import TurnledgerError
from turnledger.domain.events import MessageAppended
from turnledger.domain.messages import ChatMessage
from turnledger.integrations import (
    Asked,
    IntegrationOptions,
    OptionKeywords,
    SessionsByName,
    after_recorded,
    missing_extra,
    off_loop,
    record_usage,
)
from turnledger.integrations.langchain_history import (
    TurnledgerChatMessageHistory,
    history_factory,
    thread_name,
)
from turnledger.integrations.langchain_messages import (
    fresh_message,
    from_langchain,
    from_langchain_messages,
    recorded_id,
    to_langchain,
    to_langchain_messages,
    usage_of,
)
from turnledger.store.session import Session, Store

try:
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise missing_extra("langchain", "langchain-core", "langchain") from error

__all__ = [
    "TurnledgerChatMessageHistory",
    "TurnledgerTrimmer",
    "from_langchain",
    "from_langchain_messages",
    "history_factory",
    "to_langchain",
    "to_langchain_messages",
]


def _last_recorded_id(session: Session, recorded: int) -> str | None:
    """The LangChain id of the message ``session`` recorded last (at ``recorded - 1``), read
    from the newest events back (the views may not show it: a tool call waiting for its
    results is held back)."""
    version, back = session.version, 16
    while True:
        events = session.events(after_version=max(0, version - back))
        for event in reversed(events):
            if isinstance(event, MessageAppended) and event.position == recorded - 1:
                return recorded_id(event.message)
        if back >= version:
            return None
        back *= 4


def _state_messages(state: Mapping[str, Any]) -> Any:
    """The ``messages`` of a graph state; `TypeError` naming the keys it has instead."""
    if "messages" not in state:
        keys = ", ".join(map(str, state)) or "none"
        raise TypeError(f"a graph state holds its messages under 'messages'; this one has "
                        f"{keys}")
    return state["messages"]


class TurnledgerTrimmer(SessionsByName):
    """Records a conversation's LangChain messages and answers the whole-turn window.

    One turnledger session per LangGraph thread (``config["configurable"]["thread_id"]``, named
    by `session_uuid`), or the one ``session_id`` given; sessions start with the ``options``'
    (`IntegrationOptions`, or its fields as keywords) ``profile`` and ``route``. The messages
    given are the whole conversation so far (a graph's ``messages``): those not recorded yet are
    recorded in one transaction, then the trims a request would make are decided and recorded,
    and the window is returned. After a lost race with another writer of the thread, what is new
    is judged again on the newer state (within ``conflict_budget_seconds``, as
    `TurnledgerChatMessageHistory`). ``summarizer``: each window shows the turns a token-budget
    trim drops as its summary (issue 24, as `TurnledgerChatMessageHistory`).
    """

    def __init__(
        self, store: Store, *, session_id: str | int | None = None,
        options: IntegrationOptions | None = None, **keywords: Unpack[OptionKeywords],
    ) -> None:
        named = None if session_id is None else thread_name(session_id)
        super().__init__(store, session_id=named, options=options, **keywords)
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
        # Each session's last window handed out whose reply was not recorded yet: what the
        # reply's usage answers (issue 35).
        self._asked: Asked[str, list[ChatMessage]] = Asked(most=None)

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
                self._answered(session, new)  # before this fit changes the last window
                # The step's new messages and the window's trims: one transaction.
                window = self._window(session, from_langchain_messages(new))
                self._noted(session, new, after_last)
                self._asked.hold(session.id, window)
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
                           else fresh_message(converted))
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
            self._answered(session, new)
            session.extend(from_langchain_messages(new))
            self._noted(session, new, after_last)
        return len(new)

    def _answered(self, session: Session, new: Sequence[BaseMessage]) -> None:
        """Record the usage of the reply among ``new`` (its first `AIMessage`) as answering
        the window handed out last, once (`record_usage`: a reply without usage records
        none). Under the session's writing lock."""
        if self._asked.get(session.id) is None:
            return
        reply = next((m for m in new if isinstance(m, AIMessage)), None)
        window = None if reply is None else self._asked.take(session.id)
        if reply is not None and window is not None:
            record_usage(session, window, functools.partial(usage_of, reply.usage_metadata),
                         self.options.conflict_budget_seconds)

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
        end = None if last is None else after_recorded(
            messages, [last], same=lambda message, kept: message.id == kept)
        if end is not None:
            return messages[end:]
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
