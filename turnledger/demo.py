"""`turnledger demo`: a scripted agent session on a real store, narrated step by step.

The script plays an agent runtime: a system prompt, user turns with tool loops, an image, a
``[Tool results]`` carrier, a turn-limit trim, a token-budget trim, a provider that overflows
once (and the recovery), and a request that cannot fit its model (R18). Every breadcrumb and
`HistoryTrimmed` is printed when it happens, through a `Store.subscribe` callback (R33).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TextIO

from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.errors import ContextWindowExceeded
from turnledger.domain.events import (
    BreadcrumbInserted,
    DomainEvent,
    HistoryTrimmed,
    TrimDecided,
)
from turnledger.domain.messages import (
    BREADCRUMB_TEXT,
    AssistantToolCalls,
    ChatMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.store.session import Session, Store

__all__ = ["run_demo"]

DEMO_PROFILE = RuntimeProfile(max_context_tokens=2_400, max_history_messages=4)
DEMO_PROVIDERS = (
    ProviderProfile("openai", "gpt-4o-mini", context_window=6_000,
                    aliases={"fast": ("gpt-4o-mini-fast", 3_000)}),
    ProviderProfile("local", "llama-3-8b", context_window=2_000),
)

SYSTEM = "You are a careful coding agent. Use tools to read files before answering."
READ_FILE = json.dumps(
    {"name": "read_file", "description": "Read a file of the repository",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
    sort_keys=True,
)


class _Provider:
    """A fake provider: overflows once when asked to, otherwise answers."""

    def __init__(self) -> None:
        self.overflow_next = False

    def complete(self, messages: list[ChatMessage]) -> None:
        if self.overflow_next:
            self.overflow_next = False
            raise RuntimeError(
                "Error code: 400 - This model's maximum context length is 6000 tokens. "
                f"However, your {len(messages)} messages resulted in 6431 tokens "
                "(its tokenizer counts more than the estimate)."
            )


def _file(name: str, lines: int) -> str:
    return "\n".join(f"{name}:{i}: def handler_{i}(request): return process(request, {i})"
                     for i in range(lines))


def run_demo(store: Store, out: TextIO, *, color: bool = False) -> Session:
    """Run the scripted session on ``store``, writing the narration to ``out``."""
    narrator = _Narrator(out)
    unsubscribe = store.subscribe(narrator.notice)
    try:
        session = store.start_session(
            profile=DEMO_PROFILE, providers=DEMO_PROVIDERS, route=Route("openai", "gpt-4o-mini")
        )
        resolved = session.state.route
        say = narrator.say
        say(f"session {session.id}")
        say(f"route openai/gpt-4o-mini: capacity {resolved.capacity:,} tokens, "
            f"proactive budget {resolved.budget:,} (max_context_tokens "
            f"{DEMO_PROFILE.max_context_tokens:,}), turn limit {DEMO_PROFILE.max_history_turns}")
        session.append(ChatMessage.system(SYSTEM))
        provider = _Provider()
        call = _caller(session, provider, say, narrator.flush)
        turn = _turn_runner(session, say, narrator.flush)
        _agent_turns(session, call, turn, say)
        _overflow_and_route_switch(session, provider, call, turn, say)

        crumbs = sum(1 for m in session.chat_view() if m.content == BREADCRUMB_TEXT)
        say(f"\nworking history: {len(session.chat_view())} messages, {crumbs} breadcrumb")
        say(f"events recorded: {session.version}")
        return session
    finally:
        unsubscribe()


class _Narrator:
    """Prints the narration; holds the `HistoryTrimmed` notices until the trim is told."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.notices: list[HistoryTrimmed] = []

    def say(self, text: str = "") -> None:
        print(text, file=self.out)

    def notice(self, event: DomainEvent) -> None:
        # Delivered right after the commit (R33); printed after the trim it reports.
        assert isinstance(event, HistoryTrimmed)
        self.notices.append(event)

    def flush(self) -> None:
        for event in self.notices:
            self.say(f"    >> HistoryTrimmed (subscriber): dropped {event.dropped_messages} "
                     f"messages, kept {event.kept_turns} turns, reason {event.reason.value}")
        self.notices.clear()


def _agent_turns(
    session: Session, call: Callable[..., None], turn: Callable[..., None],
    say: Callable[[str], None],
) -> None:
    """Turns 1-5: tool loops, an image, a [Tool results] carrier, both kinds of trim."""
    turn("Why does the request handler time out?", [("src/handler.py", 18)])
    call("first provider call of turn 1", tools=(READ_FILE,))
    turn("Here is a screenshot of the error: [IMAGE:/tmp/screenshot.png]", [])
    call("turn 2 (the image costs a fixed 1,600 tokens)", tools=(READ_FILE,))
    turn("And the retry policy?", [("src/retry.py", 22), ("src/policy.py", 20)])
    call("after a two-step tool loop")
    session.append(ChatMessage.user("[Tool results]\ncache.py: hit ratio 0.93"))
    say("  + [Tool results] carrier (part of the same turn, R2)")
    call("tool-loop boundary")
    turn("Can you check the logs too?", [("logs/app.log", 30)])
    call("turn 4: the log tool also returned an image (1,600 tokens while current)")
    turn("What about the database pool?", [("src/db.py", 16)])
    call("turn 5: over the turn limit and the budget")


def _overflow_and_route_switch(
    session: Session, provider: _Provider, call: Callable[..., None],
    turn: Callable[..., None], say: Callable[[str], None],
) -> None:
    """Turn 6: a provider overflow and its recovery (R25), then a capacity rejection (R18)."""
    say("\n== provider overflow ==")
    provider.overflow_next = True
    turn("Summarise everything you found.", [])
    call("turn 6, provider says the context is too long")

    say("\n== route switch and capacity check ==")
    session.select_route(Route("local", "llama-3-8b"), reason="classifier_hint")
    resolved = session.state.route
    say(f"classifier hint -> local/llama-3-8b: capacity {resolved.capacity:,}, "
        f"budget {resolved.budget:,}")
    big_schema = json.dumps({"name": "search", "description": "x" * 8_000}, sort_keys=True)
    call("with an 8,000-character tool schema", tools=(big_schema,))
    session.select_route(Route("openai", "gpt-4o-mini"), reason="explicit")
    call("back on openai/gpt-4o-mini", tools=(READ_FILE,))


def _turn_runner(
    session: Session, say: Callable[[str], None], flush: Callable[[], None]
) -> Callable[..., None]:
    counter = {"n": 0}

    def turn(question: str, reads: list[tuple[str, int]]) -> None:
        counter["n"] += 1
        n = counter["n"]
        say(f"\n-- turn {n}: user: {question}")
        for event in session.append(ChatMessage.user(question)):
            _describe(event, say)
        flush()
        for i, (path, lines) in enumerate(reads):
            call_id = f"call_{n}_{i}"
            session.append(AssistantToolCalls(
                f"Reading {path}.", (ToolCall(call_id, "read_file", json.dumps({"path": path})),)
            ))
            attachments = ("/tmp/trace.png",) if path.endswith(".log") else ()
            session.append(ToolResults((ToolResult(call_id, _file(path, lines), "read_file",
                                                   attachments),)))
            say(f"  + tool loop: read_file {path} ({lines} lines"
                f"{', with an image attachment' if attachments else ''})")
        session.append(ChatMessage.assistant(f"Answer to turn {n}."))

    return turn


def _caller(
    session: Session, provider: _Provider, say: Callable[[str], None], flush: Callable[[], None]
) -> Callable[..., None]:
    def call(label: str, tools: tuple[str, ...] = ()) -> None:
        say(f"  prepare_request ({label})")
        before = session.version
        for _attempt in range(3):
            try:
                request = session.prepare_request(tools=tools)
            except ContextWindowExceeded as error:
                say(f"    REJECTED before sending: {error}")
                return
            finally:
                for event in session.events(after_version=before):
                    _describe(event, say)
                flush()
                before = session.version
            window = request.model_context_window
            say(f"    sent {len(request.messages)} messages, ~{request.estimated_tokens:,} tokens"
                f" (window {window:,})" if window else " (capacity unknown)")
            try:
                provider.complete(request.messages)
                return
            except RuntimeError as error:
                say(f"    provider error: {error}")
                recovered = session.recover_from_overflow(error)
                for event in session.events(after_version=before):
                    _describe(event, say)
                flush()
                before = session.version
                if not recovered:
                    say("    not recoverable")
                    return
                say("    recovered: retrying")

    return call


def _describe(event: DomainEvent, say: Callable[[str], None]) -> None:
    if isinstance(event, TrimDecided):
        say(f"    trim ({event.trigger.value}, {event.reason.value}): dropped "
            f"{event.dropped_turns} turns / {event.dropped_messages} messages, "
            f"{event.tokens_before:,} -> {event.tokens_after:,} tokens (limit {event.limit:,}); "
            f"kept {event.kept_turns} turns")
    elif isinstance(event, BreadcrumbInserted):
        say(f"    breadcrumb: {BREADCRUMB_TEXT!r} before position {event.before_position}")
