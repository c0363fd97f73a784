"""A session driven by random commands keeps its invariants (R3, R6, R18, R24-R27a, R31, E4, E5).

Hypothesis' `RuleBasedStateMachine` appends user messages (with images, some reading like the
breadcrumb), tool loops with attachments, ``[Tool results]`` carriers and late system messages;
prepares requests, recovers from overflows, switches between a wide and a narrow provider and
restores the session from the store. After every step:

- no tool call is split from its result, in the chat view, the conversation view or a request;
- the newest turn (everything since the last real user message) is in the chat view, whole;
- at most one breadcrumb, right after the system messages at the head;
- the running estimate equals `estimate_history_tokens` of the chat view (R20-R23);
- a restore from the store rebuilds the same views (E4, E5).
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import uuid4

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from tests.properties import examples
from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.decider import PreparedRequest
from turnledger.domain.errors import ContextWindowExceeded
from turnledger.domain.estimate import estimate_history_tokens
from turnledger.domain.events import (
    DomainEvent,
    MessageAppended,
    OverflowRecovered,
    RequestRejected,
    TrimDecided,
)
from turnledger.domain.messages import (
    BREADCRUMB_TEXT,
    TOOL_RESULTS_PREFIX,
    AssistantToolCalls,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    assistant_envelope,
    is_breadcrumb,
    is_real_user_message,
    parse_assistant_envelope,
    parse_tool_envelope,
    to_chat_messages,
    tool_envelope,
)
from turnledger.store.backend import drop_memory_store
from turnledger.store.session import Session, Store, open_store

PROVIDERS = (
    ProviderProfile("wide", "w-1", 3_000, {"fast": ("w-mini", 900)}),
    ProviderProfile("narrow", "n-1", 400),
)
ROUTES = (
    Route("wide", "w-1"),
    Route("wide", "fast"),
    Route("narrow", "n-1"),
    Route("narrow", "unlisted"),  # capacity unknown (R19)
)

_words = st.text(alphabet="abcdefgh éü", min_size=0, max_size=60)
_user_texts = st.one_of(
    _words,
    _words.map(lambda t: f"{t} [IMAGE:/x.png]"),
    _words.map(lambda t: f"[IMAGE:https://example.com/{len(t)}.jpg] {t}"),
    _words.map(lambda t: f"{t} [IMAGE:...]"),
    st.just(BREADCRUMB_TEXT),
)
_outputs = st.text(alphabet="xyz 0123[]:/IMAGE", min_size=0, max_size=160)
_attachments = st.lists(st.sampled_from(("/tmp/a.png", "https://e.com/b.png")), max_size=2)


def _tool_ids(history: Sequence[ChatMessage]) -> tuple[list[str], list[str]]:
    """(ids of assistant tool calls, ids of tool results), in order."""
    calls: list[str] = []
    results: list[str] = []
    for m in history:
        if m.role == "assistant" and (envelope := parse_assistant_envelope(m.content)):
            calls.extend(c.id for c in envelope[1])
        elif m.role == "tool" and (parsed := parse_tool_envelope(m.content)):
            results.append(parsed[0])
    return calls, results


def _assert_no_split_pair(history: Sequence[ChatMessage]) -> None:
    calls, results = _tool_ids(history)
    assert sorted(calls) == sorted(results), f"split tool pair: {calls} vs {results}"


def _assert_one_breadcrumb_after_systems(history: Sequence[ChatMessage]) -> None:
    crumbs = [i for i, m in enumerate(history) if is_breadcrumb(m)]
    assert len(crumbs) <= 1, f"stacked breadcrumbs at {crumbs}"
    if crumbs:
        assert all(m.role == "system" for m in history[: crumbs[0]])


class SessionMachine(RuleBasedStateMachine):
    """One session on a named in-memory store, with a snapshot every 7 events."""

    def __init__(self) -> None:
        super().__init__()
        self.name = f"stateful-{uuid4().hex}"
        self.url = f"memory://{self.name}"
        self.store: Store = open_store(self.url, snapshot_interval=7)
        self.session: Session | None = None
        self.newest_turn: list[ChatMessage] = []  # chat messages since the last real user one
        self.counter = 0
        self.legacy = False

    def teardown(self) -> None:
        self.store.close()
        drop_memory_store(self.name)

    # -- helpers --

    @property
    def live(self) -> Session:
        assert self.session is not None
        return self.session

    def _record(self, message: ConversationMessage | ChatMessage) -> None:
        """Append, and keep the newest turn as it was recorded (R38 may have truncated it)."""
        events = self.live.append(message)
        appended = [e for e in events if isinstance(e, MessageAppended)]
        assert 1 == len(appended)
        rendered = to_chat_messages([appended[0].message])
        if rendered and is_real_user_message(rendered[0]):
            self.newest_turn = list(rendered)
        elif self.newest_turn:
            # Everything after the newest real user message, late systems included, stays in
            # place: only the preamble before the first turn can move or go (R4, R6).
            self.newest_turn.extend(rendered)

    def _next_id(self) -> str:
        self.counter += 1
        return f"call_{self.counter}"

    # -- rules --

    @initialize(
        turn_limit=st.sampled_from((None, 0, 1, 2, 4)),
        budget=st.sampled_from((None, 0, 80, 250, 600)),
        legacy=st.booleans(),
        systems=st.integers(min_value=0, max_value=2),
        route=st.sampled_from(ROUTES),
    )
    def start(
        self, turn_limit: int | None, budget: int | None, legacy: bool, systems: int, route: Route
    ) -> None:
        profile = RuntimeProfile(
            max_context_tokens=budget, max_history_messages=turn_limit, max_tool_result_chars=100
        )
        self.legacy = legacy
        self.session = self.store.start_session(
            profile=profile, providers=PROVIDERS, route=route, legacy=legacy
        )
        for i in range(systems):
            self.live.append(ChatMessage.system(f"system prompt {i} " * 5))

    @rule(text=_user_texts)
    def user_message(self, text: str) -> None:
        if text.startswith(TOOL_RESULTS_PREFIX):
            text = f" {text}"
        self._record(ChatMessage.user(text))

    @rule(text=_words)
    def assistant_message(self, text: str) -> None:
        self._record(ChatMessage.assistant(text))

    @rule(
        outputs=st.lists(st.tuples(_outputs, _attachments), min_size=1, max_size=3),
        text=st.none() | _words,
        as_chat=st.booleans(),
    )
    def tool_loop(
        self, outputs: list[tuple[str, list[str]]], text: str | None, as_chat: bool
    ) -> None:
        calls = tuple(ToolCall(self._next_id(), "shell", "{}") for _ in outputs)
        results = tuple(
            ToolResult(call.id, out, "shell", tuple(att))
            for call, (out, att) in zip(calls, outputs)
        )
        if as_chat:  # the legacy loop's provider-facing form
            self._record(ChatMessage.assistant(assistant_envelope(text, calls)))
            for result in results:
                self._record(
                    ChatMessage.tool(
                        tool_envelope(result.tool_call_id, result.content), result.attachments
                    )
                )
        else:
            self._record(AssistantToolCalls(text, calls))
            self._record(ToolResults(results))

    @rule(text=_outputs)
    def tool_results_carrier(self, text: str) -> None:
        self._record(ChatMessage.user(f"{TOOL_RESULTS_PREFIX} {text}"))

    @rule(text=_words)
    def late_system_message(self, text: str) -> None:
        self._record(ChatMessage.system(f"late: {text}"))

    @rule(
        tools=st.lists(st.dictionaries(st.sampled_from("abc"), _words, max_size=2), max_size=2),
        hooks=st.lists(_words, max_size=2),
        final_summary=st.booleans(),
    )
    def prepare(self, tools: list[dict[str, str]], hooks: list[str], final_summary: bool) -> None:
        try:
            request = self.live.prepare_request(
                tools=tools, hooks=hooks, final_summary=final_summary
            )
        except ContextWindowExceeded as error:
            rejected = error
        else:
            self._check_request(request)
            return
        last = self.live.events()[-1]
        assert isinstance(last, RequestRejected)
        assert (last.estimated_tokens, last.window) == (
            rejected.estimated_tokens,
            rejected.context_window,
        )
        assert rejected.estimated_tokens > rejected.context_window  # R18

    def _check_request(self, request: PreparedRequest) -> None:
        assert request.messages == self.live.chat_view()  # R27a
        _assert_no_split_pair(request.messages)
        _assert_one_breadcrumb_after_systems(request.messages)
        assert request.estimated_tokens >= estimate_history_tokens(request.messages)
        assert request.estimated_tokens <= request.window  # R18
        if request.capacity is None:
            assert request.model_context_window is None  # R19

    @rule(wrapped=st.booleans())
    def provider_overflow(self, wrapped: bool) -> None:
        before = self.live.state.chat_tokens()
        error: BaseException | str = "prompt is too long: 9000 tokens > 8192 maximum"
        if wrapped:
            try:
                raise RuntimeError("maximum context length exceeded")
            except RuntimeError as inner:
                outer = ValueError("provider call failed")
                outer.__cause__ = inner
                error = outer
        version = self.live.version
        recovered = self.live.recover_from_overflow(error)
        new = self.live.events()[version:]
        if recovered:
            assert isinstance(new[-1], OverflowRecovered)
            decided = [e for e in new if isinstance(e, TrimDecided)]
            assert 1 == len(decided)
            assert before * 2 // 3 == decided[0].limit  # R25
            assert decided[0].tokens_after <= decided[0].limit or 1 == decided[0].kept_turns
        else:
            assert [] == [e for e in new if isinstance(e, TrimDecided)]

    @rule(route=st.sampled_from(ROUTES), hint=st.booleans())
    def switch_route(self, route: Route, hint: bool) -> None:
        self.live.select_route(route, reason="classifier_hint" if hint else "explicit")
        assert route == self.live.route

    @precondition(lambda self: self.session is not None)
    @rule(new_store=st.booleans())
    def restore(self, new_store: bool) -> None:
        chat, conversation = self.live.chat_view(), self.live.conversation_view()
        if new_store:
            other = open_store(self.url, snapshot_interval=7)
            restored = other.restore(self.live.id)
            other.close()
            # Continue on this machine's store: a Session belongs to the store that made it.
            restored = self.store.restore(self.live.id)
        else:
            restored = self.store.restore(self.live.id)
        assert (chat, conversation) == (restored.chat_view(), restored.conversation_view())
        self.session = restored

    # -- invariants --

    @invariant()
    def no_split_tool_pair(self) -> None:
        if self.session is None:
            return
        _assert_no_split_pair(self.live.chat_view())
        _assert_no_split_pair(to_chat_messages(self.live.conversation_view()))

    @invariant()
    def newest_turn_is_whole_at_the_end(self) -> None:
        if self.session is None or not self.newest_turn:
            return
        view = self.live.chat_view()
        n = len(self.newest_turn)
        assert self.newest_turn == view[len(view) - n :]

    @invariant()
    def at_most_one_breadcrumb_after_the_systems(self) -> None:
        if self.session is None:
            return
        _assert_one_breadcrumb_after_systems(self.live.chat_view())
        _assert_one_breadcrumb_after_systems(to_chat_messages(self.live.conversation_view()))

    @invariant()
    def running_estimate_is_exact(self) -> None:
        if self.session is None:
            return
        assert estimate_history_tokens(self.live.chat_view()) == self.live.state.chat_tokens()

    @invariant()
    def restore_rebuilds_the_live_views(self) -> None:
        if self.session is None:
            return
        restored = self.store.restore(self.live.id)
        assert self.live.version == restored.version  # a consistent history sweeps nothing
        assert (self.live.chat_view(), self.live.conversation_view()) == (
            restored.chat_view(),
            restored.conversation_view(),
        )

    @invariant()
    def versions_are_contiguous(self) -> None:
        if self.session is None:
            return
        events: list[DomainEvent] = self.live.events()
        assert list(range(1, len(events) + 1)) == [e.originator_version for e in events]


SessionMachine.TestCase.settings = settings(
    max_examples=examples(30),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_session_machine = SessionMachine.TestCase
