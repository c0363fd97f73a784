"""LangChain 1.x agents on turnledger sessions: a middleware for ``create_agent`` (issue 22).

Needs ``pip install 'turnledger[langchain]'`` (the ``langchain`` package, 1.x).

``create_agent(model, tools, middleware=[TurnledgerMiddleware(store, profile=...)])``:

- before **every** model call of a run (``wrap_model_call``: the first one of a turn and each
  one between tool steps, R24), the messages of the graph state not recorded yet (the user's
  message, tool results) are recorded in one transaction, the trims a request would make are
  decided and recorded (whole turns by tokens and by turn limit, the breadcrumb, tool pairs
  kept, R27), and the model is called on that window; the graph state keeps every message;
- the reply is recorded as it landed in the graph state, in nodes the graph runs anyway (no
  node, so no checkpoint, of the middleware's own per step): before the step's tools run
  (``wrap_tool_call``: the first of a step's tool calls records it, once) and at the end of the
  run (``after_agent``: a reply without tool calls, or a tool that returns directly), so the
  log holds every message when the run ends (ADR-0079, ADR-0090).

One turnledger session per LangGraph thread (``config["configurable"]["thread_id"]``, named by
`session_uuid`), or the one ``session_id`` given; the same rules as `TurnledgerTrimmer`, which
this middleware uses. The agent's ``system_prompt`` and tool schemas are the agent's
configuration, not messages of the conversation: they are not recorded, and the token budget
(``max_context_tokens``) is the budget of the messages alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Unpack, cast

from turnledger.domain.errors import TurnledgerError
from turnledger.integrations import (
    IntegrationOptions,
    OptionKeywords,
    missing_extra,
    off_loop,
)
from turnledger.integrations.langchain import TurnledgerTrimmer
from turnledger.store.session import Session, Store

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
    )
    from langchain.agents.middleware.types import ExtendedModelResponse
    from langchain_core.messages import AnyMessage, BaseMessage, RemoveMessage, ToolMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.config import get_config
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.runtime import Runtime
    from langgraph.types import Command
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise missing_extra("langchain_agents", "langchain 1.x", "langchain") from error

__all__ = ["TurnledgerMiddleware"]

Handler = Callable[[ModelRequest[Any]], ModelResponse[Any]]
AsyncHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
ModelCallResult = ModelResponse[Any] | ExtendedModelResponse[Any]
ToolResult = ToolMessage | Command[Any]
ToolHandler = Callable[[ToolCallRequest], ToolResult]
AsyncToolHandler = Callable[[ToolCallRequest], Awaitable[ToolResult]]


def _config() -> RunnableConfig:
    try:
        return get_config()
    except RuntimeError:  # outside a graph run: no thread id, only session_id can name it
        return {}


def _tool_config(request: ToolCallRequest) -> RunnableConfig:
    config: RunnableConfig | None = getattr(request.runtime, "config", None)
    return _config() if config is None else config


def _messages(state: Any) -> Sequence[BaseMessage]:
    try:
        messages: Sequence[BaseMessage] = state["messages"]
    except (KeyError, TypeError):
        raise TurnledgerError("TurnledgerMiddleware: the agent state has no 'messages'") from None
    return messages


def _any(window: list[BaseMessage]) -> list[AnyMessage]:
    # The window holds only the four classes `to_langchain_messages` builds, all AnyMessage.
    return cast("list[AnyMessage]", window)


class TurnledgerMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Keeps a ``create_agent`` conversation in turnledger and shows the model whole turns
    (module doc).

    ``store`` holds the sessions; ``options`` (`IntegrationOptions`, or its fields as keywords:
    ``profile``, ``providers``, ``route``, ``summarizer``, ``conflict_budget_seconds``) say how
    they start. A call that loses a race to another writer of the thread is decided again on the
    newer state (within ``conflict_budget_seconds``, ADR-0065). Raises `TurnledgerError` when
    the state holds fewer messages than the thread's session recorded (the graph lost its
    checkpoint). ``summarizer`` (a `Summarizer` or a bare callable; issue 24): before each model
    call the turns a token-budget trim drops are shown as its summary in place of the breadcrumb
    (`TurnsSummarized`; when it fails, the plain trim and `SummaryRefused`).

    ``state_window=True`` (opt-in): after each model call the graph state's ``messages`` are
    the window the model saw plus its reply, not the whole thread (the log keeps every message:
    read it from the session), so the checkpointer stores and reads the window at each step
    instead of the whole thread. What is new is then what follows the last recorded message in
    the state, found by id (ADR-0090).
    """

    def __init__(
        self, store: Store, *, session_id: str | int | None = None, state_window: bool = False,
        options: IntegrationOptions | None = None, **keywords: Unpack[OptionKeywords],
    ) -> None:
        super().__init__()
        self.state_window = bool(state_window)
        self.trimmer = TurnledgerTrimmer(store, session_id=session_id, options=options,
                                         **keywords)

    @property
    def name(self) -> str:
        return "TurnledgerMiddleware"

    def session_for(self, config: RunnableConfig | None = None) -> Session:
        """The turnledger session of the thread of ``config`` (default: the running graph's)."""
        return self.trimmer.session_for(_config() if config is None else config)

    # -- before each model call: record what is new, trim, call the model on the window --

    def wrap_model_call(self, request: ModelRequest[Any], handler: Handler) -> ModelCallResult:
        messages, config = _messages(request.state), _config()
        window = self.trimmer.window(messages, config, after_last=self.state_window)
        response = handler(request.override(messages=_any(window)))
        return self._keep(window, messages, config, response)

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: AsyncHandler
    ) -> ModelCallResult:
        messages, config = _messages(request.state), _config()
        window = await off_loop(self.trimmer.window, messages, config,
                                after_last=self.state_window)
        response = await handler(request.override(messages=_any(window)))
        if not self.state_window:
            return response
        return await off_loop(self._keep, window, messages, config, response)

    def _keep(
        self,
        window: list[BaseMessage],
        messages: Sequence[BaseMessage],
        config: RunnableConfig,
        response: ModelResponse[Any],
    ) -> ModelCallResult:
        """The response; with ``state_window``, with the state's messages replaced by the
        window and the reply (applied after the model node's own update, which adds the
        reply: so the reply comes once, after the window). The last message recorded stays
        in the state even when the window leaves it out (a tool step swept as an orphan on
        restore, R36): what is new next time is what follows it."""
        if not self.state_window:
            return response
        held: list[BaseMessage] = []
        last = self.trimmer.last_recorded_id(config)
        if last is not None and all(m.id != last for m in window):
            held = [m for m in messages if m.id == last][-1:]
        kept = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *window, *held, *response.result]
        return ExtendedModelResponse(model_response=response,
                                     command=Command(update={"messages": kept}))

    # -- after each model call, before its tools run, and at the end of the run: record what
    # -- the state holds that the log does not (the reply), in nodes the graph runs anyway --

    def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        self.trimmer.record(_messages(request.state), _tool_config(request),
                            after_last=self.state_window)
        return handler(request)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: AsyncToolHandler
    ) -> ToolResult:
        await off_loop(self.trimmer.record, _messages(request.state), _tool_config(request),
                       after_last=self.state_window)
        return await handler(request)

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        self.trimmer.record(_messages(state), _config(), after_last=self.state_window)
        return None

    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        config = _config()
        await off_loop(self.trimmer.record, _messages(state), config,
                       after_last=self.state_window)
        return None
