"""pydantic-ai agents on turnledger sessions (issue 22).

Needs ``pip install 'turnledger[pydantic-ai]'`` (pydantic-ai-slim).

- **Conversions** (`from_pydantic_ai`, `to_pydantic_ai`; from
  `turnledger.integrations.pydantic_ai_messages`): pydantic-ai's ``ModelRequest`` /
  ``ModelResponse`` ⇄ turnledger messages through the provider format
  `turnledger.domain.formats.pydantic_ai` (ADR-0081). "Equal" is pydantic-ai's own JSON form
  (``ModelMessagesTypeAdapter``): a message that would not come back with the same JSON is
  refused by name (`InvalidMessage`), never stored changed or dropped.
- **History**: `TurnledgerHistory`, a pydantic-ai capability
  (``Agent(model, capabilities=[history])``). Before every model request of a run (R24) it
  records what the run added since the last request and the trims a request would make, in
  one transaction (`Session.fit_window`), and sends the model that window, ending with the
  run's current request as pydantic-ai requires (what other runs recorded after it waits for
  the run's next request). The run's own message list is left whole; the run's last messages
  are recorded when it ends. ``history.messages()``: the ``message_history`` of the next run.
- **Usage** (issue 35): each model response's ``usage`` (every attempt's, a rejected one's
  too) is recorded as answering the window sent to that request, by the run's next store call
  (its next request, or its end); a response whose usage pydantic-ai did not measure records
  none, nor does a request sent something other than the window fitted for it whole (another
  run's newer messages cut off, or a capability that changed the messages after this one).

A run's messages are told apart from the history given to it by where they stand: from the
first message stamped with the run's ``run_id`` on (`_of_run`); what was passed as
``message_history`` is not recorded again (record an outside history once with
`TurnledgerHistory.record`). Store calls run in a worker thread (`off_loop`), the window's
messages built in the event loop's thread while the step's commit waits (ADR-0093); a write that
loses a race to another writer is decided again on the newer state (`retrying`, ADR-0065).
"""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, Unpack

from turnledger.domain.formats.pydantic_ai import pydantic_ai_message_json, pydantic_ai_opens
from turnledger.domain.messages import ChatMessage, ConversationMessage
from turnledger.integrations import (
    Asked,
    BuiltOnce,
    Decided,
    IntegrationOptions,
    OptionKeywords,
    WaitingUsages,
    WindowKeywords,
    after_recorded,
    fit_then_build,
    fit_window,
    missing_extra,
    off_loop,
    options_of,
)
from turnledger.integrations.pydantic_ai_messages import (
    checked_from_pydantic_ai,
    fresh_message,
    from_pydantic_ai,
    parts_json,
    to_pydantic_ai,
    usage_of,
)
from turnledger.integrations.pydantic_ai_messages import (
    validated as _validated,  # by this name: what each window build validates with
)
from turnledger.store.session import Session, Store

try:
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import RunContext
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise missing_extra("pydantic_ai", "pydantic-ai", "pydantic-ai") from error

__all__ = ["TurnledgerHistory", "from_pydantic_ai", "to_pydantic_ai"]

R = TypeVar("R")


def _ends_with(items: Sequence[Any], tail: Sequence[Any]) -> bool:
    return list(items[len(items) - len(tail):]) == list(tail)


def _of_run(messages: Sequence[ModelMessage], run_id: str) -> list[ModelMessage]:
    """The messages of run ``run_id`` in its message list: from its first message stamped with
    its id on. The history it was given stands before them; every message after is the run's,
    whatever its own ``run_id`` says: pydantic-ai keeps an id a model set on its reply, and a
    reply object a model reuses keeps the id of the run that first stamped it."""
    for i, message in enumerate(messages):
        if message.run_id == run_id:
            return list(messages[i:])
    return []


def _ending_with_run(
    window: list[ModelMessage], messages: Sequence[ModelMessage], run_id: str
) -> list[ModelMessage]:
    """``window`` (the conversation's) as run ``run_id`` may send it: ending with the run's
    current request, the last of ``messages`` (`after_recorded`). What other writers recorded
    after it is left out of this request, as if it came after it (pydantic-ai refuses a
    history ending with a reply; one ending with another run's request would be answered in
    this run). When newer turns trimmed the run's own turn away, the run's messages so far
    follow the window (its turn whole: each call with its result)."""
    if not messages or not isinstance(messages[-1], ModelRequest):
        return window

    def is_current(message: ModelMessage, current: ModelRequest) -> bool:
        # A breadcrumb may open the request: a suffix. Equal parts first (no dump): a
        # request rebuilt from the record is most often equal to the run's own.
        return isinstance(message, ModelRequest) and message.run_id == run_id and (
            _ends_with(message.parts, current.parts)
            or _ends_with(parts_json(message), parts_json(current)))

    end = after_recorded(window, [messages[-1]], same=is_current)
    if end is not None:
        return window[:end]
    return [m for m in window if m.run_id != run_id] + _of_run(messages, run_id)


class TurnledgerHistory(AbstractCapability[Any]):
    """A pydantic-ai capability that keeps an agent's history in a turnledger session (module
    doc). ``TurnledgerHistory.open(store, "user-42")`` names the conversation (restored, or
    started with the options' ``profile``/``providers``/``route``); ``TurnledgerHistory(session)``
    takes one. ``options`` (`IntegrationOptions`; its ``summarizer`` and
    ``conflict_budget_seconds`` also as keywords): every window shows the turns a token-budget
    trim drops as the summarizer's summary (issue 24; None: the session's own); a write that
    loses a race is decided again on the newer state within the budget, then raises
    `ConcurrencyConflict`; nothing of a call that raised is recorded (ADR-0065).
    """

    def __init__(
        self, session: Session, *, options: IntegrationOptions | None = None,
        **keywords: Unpack[WindowKeywords],
    ) -> None:
        self.session = session
        self.options = options_of(options, keywords, session_given=True)
        self.summarizer = self.options.summarizer
        self._recorded: dict[str, int] = {}  # run id -> how many of its messages are recorded
        self._lock = threading.Lock()
        # Each window message's pydantic-ai message, built once; handed out as copies.
        self._built = BuiltOnce(
            pydantic_ai_opens,
            lambda groups: _validated([pydantic_ai_message_json(g) for g in groups]),
            fresh_message)
        # run id -> (the messages sent to its current request, the window fitted for it when
        # they are that whole window, else None): what its responses' usage answers.
        self._asked: Asked[str, tuple[list[ModelMessage], list[ChatMessage] | None]] = Asked()
        self._usages = WaitingUsages()  # recorded by the next store call

    @classmethod
    def open(
        cls, store: Store, session_id: str, *, options: IntegrationOptions | None = None,
        **keywords: Unpack[OptionKeywords],
    ) -> TurnledgerHistory:
        """The history of the conversation ``session_id`` (`open_session`: I/O)."""
        options = options_of(options, keywords)  # refused before any I/O
        return cls(options.open(store, session_id), options=options)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a session: not buildable from an agent spec

    # -- blocking API --

    def messages(self) -> list[ModelMessage]:
        """The window now, as pydantic-ai messages (the trims it takes are recorded): the
        ``message_history`` of the next run."""
        self._record_usages()
        window = self._retrying(
            "messages", lambda: fit_window(self.session, self.summarizer))
        return self._to_pydantic_ai(window)

    def record(self, messages: Sequence[ModelMessage]) -> None:
        """Record ``messages`` in one transaction (`InvalidMessage`: none of them)."""
        converted = from_pydantic_ai(messages)  # once: a retry only records again
        self._record_usages()
        if converted:
            self._retrying("record", lambda: self.session.extend(converted))

    def window(self, messages: Sequence[ModelMessage], run_id: str) -> list[ModelMessage]:
        """Record the messages of run ``run_id`` not recorded yet and return the window, in
        one transaction, ending with the run's current request (`_ending_with_run`)."""
        with self._lock:
            converted, count = self._unrecorded(messages, run_id)
            window = self._fit(converted)
            self._recorded[run_id] = count
        return _ending_with_run(self._to_pydantic_ai(window), messages, run_id)

    def _unrecorded(
        self, messages: Sequence[ModelMessage], run_id: str
    ) -> tuple[list[ConversationMessage], int]:
        """The messages of run ``run_id`` in ``messages`` not recorded yet, converted once (a
        retry only records again), and how many of its messages there are with them. What
        the conversion's check validated is kept for the window (`BuiltOnce.seed`)."""
        ours = _of_run(messages, run_id)
        converted, checked = checked_from_pydantic_ai(ours[self._recorded.get(run_id, 0):])
        self._built.seed(checked)
        return converted, len(ours)

    def _fit(
        self, converted: Sequence[ConversationMessage], decided: Decided | None = None
    ) -> list[ChatMessage]:
        """Record ``converted`` and the trims of the window, in one transaction; the window
        (``decided``: as `Session.fit_window` takes it)."""
        self._record_usages()  # before this fit: each answers the window fitted before it
        return self._retrying(
            "messages", lambda: fit_window(self.session, self.summarizer, converted, decided))

    def _record_usages(self) -> None:
        """Record the usages of the responses that arrived since the last store call."""
        self._usages.record(self.options.conflict_budget_seconds)

    def _to_pydantic_ai(self, window: Sequence[ChatMessage]) -> list[ModelMessage]:
        """`to_pydantic_ai` of ``window``, each message built and validated once."""
        return self._built(window)

    def _record_run(self, messages: Sequence[ModelMessage], run_id: str) -> None:
        self._record_usages()
        with self._lock:
            done = self._recorded.get(run_id, 0)
            ours = _of_run(messages, run_id)
            self.record(ours[done:])
            self._recorded[run_id] = len(ours)

    def _retrying(self, what: str, write: Callable[[], R]) -> R:
        return self.options.retrying(write, f"{what} of session {self.session.id}")

    # -- the pydantic-ai hooks --

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Record the run's new messages and send the model the window (the run keeps its
        own list whole). Only the transaction (`_fit`) runs in a worker: converting in the
        loop's thread, where pydantic-ai made the messages, was ~0.8 ms a call cheaper
        (`benchmarks.agent_step`); the window is built while the commit waits
        (`fit_then_build`). A run's requests come one after another: no lock."""
        run_id, messages = ctx.run_id or "", request_context.messages
        converted, count = self._unrecorded(messages, run_id)
        chat, window = await fit_then_build(functools.partial(self._fit, converted),
                                            self._with_pydantic_ai)
        self._recorded[run_id] = count
        sent = _ending_with_run(window, messages, run_id)
        whole = len(sent) == len(window) and all(map(operator.is_, sent, window))
        self._asked.hold(run_id, (sent, chat if whole else None))  # until the run ends
        request_context.messages = sent
        return request_context

    def _with_pydantic_ai(
        self, window: list[ChatMessage]
    ) -> tuple[list[ChatMessage], list[ModelMessage]]:
        return window, self._to_pydantic_ai(window)

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        """Hold the response's usage for the run's next store call (module doc), when the
        request sent the window fitted for it, whole; the response is left as it is."""
        asked = self._asked.get(ctx.run_id or "")
        if asked is not None and asked[1] is not None and _same(request_context.messages,
                                                                asked[0]):
            self._usages.add(self.session, asked[1], functools.partial(usage_of, response))
        return response

    async def after_run(
        self, ctx: RunContext[Any], *, result: AgentRunResult[Any]
    ) -> AgentRunResult[Any]:
        """Record what the run added after its last model request (its final answer)."""
        await off_loop(self._record_run, result.all_messages(), ctx.run_id or "")
        with self._lock:
            self._recorded.pop(ctx.run_id or "", None)
            self._asked.take(ctx.run_id or "")
        return result


def _same(messages: Sequence[ModelMessage], sent: Sequence[ModelMessage]) -> bool:
    """Whether ``messages`` carry the very parts ``sent`` did, in order, each in a request or
    a response as there: pydantic-ai merges adjacent requests before the model call (a
    breadcrumb's and the question's), which sends the same window; any other change (a
    capability's) is not that window."""
    return messages is sent or _parts_of(messages) == _parts_of(sent)


def _parts_of(messages: Sequence[ModelMessage]) -> list[tuple[bool, int]]:
    return [(isinstance(m, ModelRequest), id(part)) for m in messages for part in m.parts]
