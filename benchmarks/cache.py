"""Benchmark: what a provider's prompt cache can keep of each trim's windows (issue 35 point 5).

Sessions are replayed request by request (one request before every model reply: before each
assistant message or tool-call message that follows a user or tool message), and every lane
builds the request it would send from the same data:

- **spec**: turnledger's default profile with ``max_context_tokens=B`` (the spec's trim, and
  its default turn limit of 50);
- **low_water=x** for x in 0.5, 0.6, 0.7, 0.8: the same with
  ``compaction=Compaction(low_water=x)`` (a forced trim drops whole turns down to x of the
  budget, issue 35 point 1). Reported "not available" when ``Compaction`` has no ``low_water``;
- **trim_messages**: LangChain's ``trim_messages(strategy="last", max_tokens=B,
  token_counter=<turnledger's estimate>, start_on="human", include_system=True)`` over the whole
  history before each request (as a ``wrap_model_call`` middleware does);
- **agents_sdk**: the OpenAI Agents SDK session with ``SessionSettings(limit=N)``: at the start
  of each turn the run reads the newest N items (a real ``SQLiteSession``), and the run's items
  are appended to that input for its later requests (the SDK reads the session once per run);
  the system prompt is the agent's instructions, always first. N is chosen so the lane's mean
  context matches the spec trim's: ``N = round(spec mean context / mean tokens of an SDK item
  of the session)``. It has no token budget: its requests may exceed B (column ``over_B``).

Turnledger is driven through its public API (``open_store("memory://")``, ``start_session``,
``append``, ``prepare_request``; the request is ``PreparedRequest.messages``).

Definitions (each lane is measured with the same functions):

- a request's messages are **rendered** one by one as OpenAI Chat messages (turnledger's
  ``to_openai_chat``, canonical JSON); an SDK item is first read back as the message it is
  (``from_openai_responses_item``). Every message is priced by turnledger's own estimate
  (``turnledger.domain.estimate.message_costs`` over the request), for every lane;
- the **shared prefix** of a request is the longest run of its leading messages identical
  (byte for byte, rendered) to the previous request's leading messages; its tokens are those of
  these messages;
- a **cache break** is a request that does not start with the whole previous request (its
  prefix was cut or rewritten); the first request is not a break;
- **steady state** runs from the first request whose untrimmed history exceeds the budget B
  (the same request for every lane); all figures below are over the steady state;
  ``breaks_per_10_turns`` = breaks / turns x 10, ``shared`` = shared-prefix tokens / input
  tokens, ``mean_context`` = input tokens / requests (and as a share of B: the price of a lower
  water mark);
- **simulated input cost**, in base-input-token units, over a cache warm from the session's
  first request (no expiry: an agent loop calls well within five minutes):

  - Anthropic (platform.claude.com/docs/en/build-with-claude/prompt-caching): cache reads 0.1x,
    5-minute cache writes 1.25x, the rest 1x; breakpoints on the system prompt and on the last
    message before the newest turn (issue 35 point 2's rule; ``anthropic_last_*``: with one
    more on the request's last message, as Anthropic's automatic caching places it, so a turn's
    tool results are cached for the turn's next request); a breakpoint writes its prefix
    when it holds at least 1,024 tokens (the minimum of Claude Sonnet 4.x); a request reads the
    longest cached prefix ending at a breakpoint or at most 20 blocks before one (the
    documented lookback; a message counts as one block here);
  - OpenAI (openai.com/index/api-prompt-caching, "Prompt Caching in the API", gpt-4o: cached
    input $1.25 against $2.50, so 0.5x; newer models discount more, ``--openai-cached``): the
    longest prefix of the request that an earlier request of the session began with, counted
    from 1,024 tokens in 128-token increments (below 1,024 nothing is cached); no write
    surcharge. Prefixes are matched at message boundaries (the provider matches tokens, so a
    prefix that ends inside a message is not counted: a slight underestimate for every lane).

  Reported as a ratio to the same lane with no caching (``anthropic_x``, ``openai_x``) and to
  the spec trim on the same data (``anthropic_vs_spec``, ``openai_vs_spec``).

Data: ``synthetic``: 300 turns of a tool-using agent (deterministic seed: a user message, 0-3
rounds of 1-2 tool calls with results of 200-6,000 characters, log-uniform, then an answer);
``fixtures``: the real conversations of ``tests/fixtures`` (transcripts, conversations and the
public recordings: ``tests.conversation_fixtures``), their turns taken in turn until 300 turns,
each user message prefixed with its turn number (so a repeated turn is not a repeated prefix);
the 4 of their 46 turns larger than half the smaller budget (4,000 tokens: web search results,
a listing of 15,000 tokens) are left out, as no window of 8,000 tokens could hold them beside
another turn.
Budgets 8,000 and 32,000.

Goals (issue 35), for the recommended low-water setting at steady state: at most 1 break per
10 turns, at least 85 % of input tokens in the shared prefix, Anthropic cost at most 0.3x the
spec trim's, a mean context of at least 70 % of the budget. The recommended setting of a budget
is the one meeting every goal on every data set with the highest mean context (the lowest of
its data sets'), or none. Beside them, `benchmarks.cache_floor`'s floor per data set and
budget: the fewest breaks per 10 turns any whole-turn trim within the budget can reach at the
goal's mean context; where it is above the goal, no setting can meet the goals at that budget.

Run from the project root::

    .venv/bin/python -m benchmarks.cache            # 300 turns, budgets 8,000 and 32,000
    .venv/bin/python -m benchmarks.cache --quick    # 60 turns, budget 8,000, JSON to tmp

Prints the table; writes ``benchmarks/results/cache.json`` and ``benchmarks/results/cache.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import attrs

import turnledger as tl
from turnledger.domain.blocks import TextBlock
from turnledger.domain.budget import Compaction, RuntimeProfile
from turnledger.domain.estimate import message_costs
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    chat_tool_call_id,
    is_real_user_message,
    to_chat_messages,
)
from turnledger.domain.providers import (
    from_openai_responses_item,
    to_openai_chat,
    to_openai_responses,
)

RESULTS = Path(__file__).parent / "results" / "cache.json"
PLOT = Path(__file__).parent / "results" / "cache.png"
# A model window far above the budgets, so the budget alone decides (R11) and no request is
# refused for the window (R18).
PROVIDER = tl.ProviderProfile("bench", "model", context_window=200_000)
LOW_WATERS = (0.5, 0.6, 0.7, 0.8)
BUDGETS = (8_000, 32_000)

ANTHROPIC_READ = 0.1
ANTHROPIC_WRITE = 1.25
ANTHROPIC_MIN_CACHEABLE = 1_024
ANTHROPIC_LOOKBACK = 20
OPENAI_CACHED = 0.5
OPENAI_MIN = 1_024
OPENAI_STEP = 128

GOAL_BREAKS_PER_10_TURNS = 1.0
GOAL_SHARED = 0.85
GOAL_ANTHROPIC_VS_SPEC = 0.3
GOAL_MEAN_CONTEXT = 0.7


# --- measurement (pure) ---------------------------------------------------------------------

_RENDERED: dict[ChatMessage, str] = {}


def render(message: ChatMessage) -> str:
    """The message as the provider receives it: one OpenAI Chat message, canonical JSON."""
    try:
        return _RENDERED[message]
    except KeyError:
        pass
    try:
        text = json.dumps(to_openai_chat([message]), sort_keys=True, ensure_ascii=False)
    except tl.TurnledgerError:
        text = repr(message)  # a message the Chat format cannot carry is still compared whole
    _RENDERED[message] = text
    return text


@dataclass(frozen=True)
class Request:
    """One request as the benchmark sees it: its rendered messages and their estimates."""

    rendered: tuple[str, ...]
    tokens: tuple[int, ...]
    newest_turn: int
    """Index of the newest real user message (the newest turn's start): the Anthropic
    breakpoint is on the message before it."""
    leading: int
    """Leading system messages (the system prompt's breakpoint is on the last of them)."""
    turn: int
    """Which turn of the session the request belongs to (0 = before the first user message)."""

    @property
    def total(self) -> int:
        return sum(self.tokens)


def request_of(messages: Sequence[ChatMessage], turn: int) -> Request:
    """Render and price ``messages`` (turnledger's estimate, current-turn rule applied)."""
    newest = 0
    for i in range(len(messages) - 1, -1, -1):
        if is_real_user_message(messages[i]):
            newest = i
            break
    leading = 0
    while leading < len(messages) and messages[leading].role == "system":
        leading += 1
    return Request(tuple(render(m) for m in messages), tuple(message_costs(messages)),
                   newest, leading, turn)


def shared_prefix(previous: Request | None, current: Request) -> int:
    """Leading messages of ``current`` identical to the previous request's leading ones."""
    if previous is None:
        return 0
    n = 0
    for a, b in zip(previous.rendered, current.rendered, strict=False):
        if a != b:
            break
        n += 1
    return n


def is_break(previous: Request | None, current: Request) -> bool:
    """A request that does not start with the whole previous request."""
    return previous is not None and shared_prefix(previous, current) < len(previous.rendered)


def _prefix_keys(request: Request) -> list[int]:
    """``keys[L]`` identifies the first L rendered messages (a chained hash)."""
    keys = [0]
    for text in request.rendered:
        keys.append(hash((keys[-1], text)))
    return keys


def _cumulative(request: Request) -> list[int]:
    cum = [0]
    for t in request.tokens:
        cum.append(cum[-1] + t)
    return cum


def anthropic_costs(requests: Sequence[Request], *, read: float = ANTHROPIC_READ,
                    write: float = ANTHROPIC_WRITE, minimum: int = ANTHROPIC_MIN_CACHEABLE,
                    lookback: int = ANTHROPIC_LOOKBACK, last: bool = False) -> list[float]:
    """Each request's simulated Anthropic input cost (see the module doc), cache warm from the
    first request; ``last``: one more breakpoint on the request's last message."""
    cache: set[int] = set()
    costs: list[float] = []
    for request in requests:
        keys, cum = _prefix_keys(request), _cumulative(request)
        ends = (request.leading, request.newest_turn, len(request.rendered) if last else 0)
        breakpoints = sorted({b for b in ends if b > 0})
        hit = 0
        for bp in breakpoints:
            for length in range(bp, max(bp - lookback, 0) - 1, -1):
                if length > hit and keys[length] in cache:
                    hit = length
                    break
        written = hit
        for bp in breakpoints:
            if bp > hit and cum[bp] >= minimum:
                cache.add(keys[bp])
                written = bp
        cached, created = cum[hit], cum[written] - cum[hit]
        costs.append(read * cached + write * created + (cum[-1] - cached - created))
    return costs


def openai_cached_tokens(requests: Sequence[Request], *, minimum: int = OPENAI_MIN,
                         step: int = OPENAI_STEP) -> list[int]:
    """Each request's cached input tokens as OpenAI counts them (see the module doc)."""
    seen: set[int] = set()
    cached: list[int] = []
    for request in requests:
        keys, cum = _prefix_keys(request), _cumulative(request)
        length = 0
        for n in range(len(keys) - 1, 0, -1):
            if keys[n] in seen:
                length = n
                break
        matched = cum[length]
        cached.append(0 if matched < minimum else minimum + (matched - minimum) // step * step)
        seen.update(keys[1:])
    return cached


def measure(requests: Sequence[Request], steady_from: int, budget: int, *,
            openai_cached: float = OPENAI_CACHED) -> dict[str, Any]:
    """The lane's figures over ``requests[steady_from:]`` (caches warm from the first)."""
    anthropic = anthropic_costs(requests)
    anthropic_last = anthropic_costs(requests, last=True)
    openai = openai_cached_tokens(requests)
    steady = range(steady_from, len(requests))
    breaks = shared_tokens = input_tokens = 0
    turns: set[int] = set()
    for i in steady:
        previous = requests[i - 1] if i > 0 else None
        current = requests[i]
        shared = shared_prefix(previous, current)
        breaks += is_break(previous, current)
        shared_tokens += sum(current.tokens[:shared])
        input_tokens += current.total
        turns.add(current.turn)
    count = len(steady)
    anthropic_cost = sum(anthropic[i] for i in steady)
    anthropic_last_cost = sum(anthropic_last[i] for i in steady)
    openai_tokens = sum(openai[i] for i in steady)
    openai_cost = openai_cached * openai_tokens + (input_tokens - openai_tokens)
    mean = input_tokens / count if count else 0.0
    return {
        "requests": count,
        "turns": len(turns),
        "breaks": breaks,
        "breaks_per_10_turns": round(10 * breaks / len(turns), 2) if turns else 0.0,
        "input_tokens": input_tokens,
        "shared_tokens": shared_tokens,
        "shared": round(shared_tokens / input_tokens, 4) if input_tokens else 0.0,
        "mean_context": round(mean, 1),
        "mean_context_of_budget": round(mean / budget, 4),
        "over_budget": sum(requests[i].total > budget for i in steady),
        "anthropic_cost": round(anthropic_cost, 1),
        "anthropic_x": round(anthropic_cost / input_tokens, 4) if input_tokens else 0.0,
        "anthropic_last_cost": round(anthropic_last_cost, 1),
        "anthropic_last_x": round(anthropic_last_cost / input_tokens, 4) if input_tokens else 0.0,
        "openai_cost": round(openai_cost, 1),
        "openai_x": round(openai_cost / input_tokens, 4) if input_tokens else 0.0,
    }


# --- data -----------------------------------------------------------------------------------

_WORDS = (
    "the", "agent", "reads", "the", "file", "and", "runs", "tests", "then", "fixes", "a",
    "failing", "case", "résumé", "café", "naïve", "—", "ok", "✓", "def", "main():", "return",
    "0", "#", "TODO:", "handle", "error", "path", "retry", "backoff", "import", "config",
)  # fmt: skip


@dataclass
class Conversation:
    """A session's messages in order, and the turn each one belongs to."""

    name: str
    items: list[ConversationMessage] = field(default_factory=list)


def synthetic(turns: int, seed: int = 35_005) -> Conversation:
    """A tool-using agent session of ``turns`` turns (deterministic for a seed)."""
    rng = random.Random(seed)
    pool = " ".join(rng.choice(_WORDS) for _ in range(40_000))  # about 200,000 characters

    def text(lo: int, hi: int) -> str:
        size = rng.randint(lo, hi)
        start = rng.randrange(0, len(pool) - size)
        return pool[start:start + size]

    conv = Conversation("synthetic")
    conv.items.append(Chat(ChatMessage.system("You are a coding agent. " + text(2000, 2500))))
    call_no = 0
    for n in range(turns):
        conv.items.append(Chat(ChatMessage.user(f"Task {n}: " + text(80, 600))))
        for _ in range(rng.choice((0, 1, 1, 2, 2, 3))):
            calls = []
            for _ in range(rng.choice((1, 1, 2))):
                call_no += 1
                args = json.dumps({"path": f"src/mod_{call_no}.py", "query": text(10, 120)})
                calls.append(ToolCall(f"call_{call_no}", rng.choice(("read", "shell")), args))
            conv.items.append(AssistantToolCalls(text(0, 200) or None, tuple(calls)))
            results = []
            for call in calls:
                size = int(math.exp(rng.uniform(math.log(200), math.log(6000))))
                results.append(ToolResult(call.id, text(size, size), call.name))
            conv.items.append(ToolResults(tuple(results)))
        conv.items.append(Chat(ChatMessage.assistant(text(100, 1500))))
    return conv


def _fixture_turns() -> tuple[list[ConversationMessage], list[list[ConversationMessage]]]:
    """The leading system messages of the first fixture, and every fixture's turns."""
    from tests.conversation_fixtures import FIXTURES, IMPORTERS, conversations
    from turnledger.replay.transcripts import read_conversations

    histories: list[list[ConversationMessage]] = []
    for _, fmt, value in conversations():
        if fmt == "openai" and isinstance(value, dict):
            value = value["messages"]  # a recorded request: its messages
        histories.append(IMPORTERS[fmt](value))
    for path in sorted((FIXTURES / "transcripts").glob("*.jsonl")):
        histories += [read.history for read in
                      read_conversations(path.read_text(encoding="utf-8"), path.stem)
                      if not isinstance(read, tl.TurnledgerError)]  # a malformed line is a test
    system: list[ConversationMessage] = []
    turns: list[list[ConversationMessage]] = []
    for items in histories:
        current: list[ConversationMessage] | None = None
        for item in items:
            if isinstance(item, Chat) and is_real_user_message(item.message):
                current = [item]
                turns.append(current)
            elif current is not None:
                current.append(item)
            elif isinstance(item, Chat) and item.message.role == "system" and not turns:
                system.append(item)
    return system, turns


def fixtures(turns: int, largest: int = min(BUDGETS) // 2) -> Conversation:
    """The fixtures' real turns of at most ``largest`` estimated tokens, taken in turn until
    ``turns`` turns (see the module doc)."""
    system, recorded = _fixture_turns()
    recorded = [t for t in recorded if sum(message_costs(to_chat_messages(t))) <= largest]
    conv = Conversation("fixtures")
    conv.items += system or [Chat(ChatMessage.system("You are a helpful assistant."))]
    for n in range(turns):
        first, *rest = recorded[n % len(recorded)]
        assert isinstance(first, Chat)
        m = first.message
        message = ChatMessage.from_blocks("user", (TextBlock(f"(turn {n})"), *m.blocks),
                                          extra=m.extra) if m.blocks else attrs.evolve(
            m, content=f"(turn {n}) {m.content}")
        conv.items += [Chat(message), *rest]
    return conv


def _assistant_produced(item: ConversationMessage) -> bool:
    return isinstance(item, AssistantToolCalls) or (
        isinstance(item, Chat) and item.message.role == "assistant")


def replay_points(items: Sequence[ConversationMessage]) -> Iterator[tuple[int, int]]:
    """(index, turn) of every request: before each model reply (an assistant-produced item
    that follows something else), ``items[:index]`` is the history it answers."""
    turn = 0
    for i, item in enumerate(items):
        if isinstance(item, Chat) and is_real_user_message(item.message):
            turn += 1
        if i > 0 and _assistant_produced(item) and not _assistant_produced(items[i - 1]):
            yield i, turn


def steady_start(conv: Conversation, budget: int) -> int:
    """The first request whose untrimmed history exceeds ``budget`` (estimated tokens)."""
    chats: list[ChatMessage] = []
    done = 0
    for n, (index, _) in enumerate(replay_points(conv.items)):
        chats += to_chat_messages(conv.items[done:index])
        done = index
        if sum(message_costs(chats)) > budget:
            return n
    return len(list(replay_points(conv.items)))


# --- lanes ----------------------------------------------------------------------------------

def low_water_available() -> bool:
    """True when this turnledger's `Compaction` has the low-water setting (issue 35 point 1)."""
    return "low_water" in attrs.fields_dict(Compaction)


def turnledger_lane(conv: Conversation, profile: RuntimeProfile) -> list[Request]:
    """Every request ``prepare_request`` builds for the session under ``profile``."""
    requests: list[Request] = []
    with tl.open_store("memory://") as store:
        session = store.start_session(profile, providers=[PROVIDER])
        done = 0
        for index, turn in replay_points(conv.items):
            for item in conv.items[done:index]:
                session.append(item)
            done = index
            requests.append(request_of(session.prepare_request().messages, turn))
    return requests


def trim_messages_lane(conv: Conversation, budget: int) -> list[Request]:
    """LangChain's ``trim_messages`` over the whole history before every request."""
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        trim_messages,
    )

    chats: list[ChatMessage] = []
    messages: list[BaseMessage] = []
    costs: dict[str, int] = {}

    def counter(window: Sequence[BaseMessage]) -> int:
        return sum(costs[str(m.id)] for m in window)

    requests: list[Request] = []
    done = 0
    for index, turn in replay_points(conv.items):
        for chat in to_chat_messages(conv.items[done:index]):
            key = str(len(chats))
            chats.append(chat)
            if chat.role == "system":
                messages.append(SystemMessage(chat.content, id=key))
            elif chat.role == "user":
                messages.append(HumanMessage(chat.content, id=key))
            elif chat.role == "assistant":
                messages.append(AIMessage(chat.content, id=key))
            else:
                messages.append(ToolMessage(chat.content, id=key,
                                            tool_call_id=chat_tool_call_id(chat) or "unknown"))
        done = index
        costs = {str(i): c for i, c in enumerate(message_costs(chats))}
        window = trim_messages(messages, max_tokens=budget, strategy="last",
                               token_counter=counter, start_on="human", include_system=True)
        requests.append(request_of([chats[int(str(m.id))] for m in window], turn))
    return requests


def sdk_items(items: Sequence[ConversationMessage]) -> list[dict[str, Any]]:
    """The session's messages as the SDK stores them: Responses input items."""
    return [dict(item) for item in to_openai_responses(items)]


def _item_message(item: dict[str, Any]) -> ChatMessage:
    messages = to_chat_messages([from_openai_responses_item(item)])
    assert len(messages) == 1, item
    return messages[0]


def sdk_lane(conv: Conversation, limit: int) -> list[Request]:
    """The Agents SDK: ``SessionSettings(limit=N)`` read once per run (see the module doc)."""
    from agents import SessionSettings, SQLiteSession

    loop = asyncio.new_event_loop()
    session = SQLiteSession("bench", ":memory:", session_settings=SessionSettings(limit=limit))
    as_message: dict[str, ChatMessage] = {}

    def message(item: dict[str, Any]) -> ChatMessage:
        key = json.dumps(item, sort_keys=True)
        if key not in as_message:
            as_message[key] = _item_message(item)
        return as_message[key]

    first_user = next(i for i, item in enumerate(conv.items)
                      if isinstance(item, Chat) and is_real_user_message(item.message))
    instructions = to_chat_messages(conv.items[:first_user])
    requests: list[Request] = []
    history: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    done = first_user
    try:
        for index, turn in replay_points(conv.items):
            for item in conv.items[done:index]:
                if isinstance(item, Chat) and is_real_user_message(item.message):
                    if run:
                        loop.run_until_complete(session.add_items(run))  # type: ignore[arg-type]
                    history = list(loop.run_until_complete(session.get_items()))  # type: ignore[arg-type]
                    run = []
                run += sdk_items([item])
            done = index
            requests.append(request_of(
                instructions + [message(i) for i in history + run], turn))
    finally:
        session.close()
        loop.close()
    return requests


def sdk_item_tokens(conv: Conversation) -> float:
    """Mean estimated tokens of one SDK item of the session (instructions excluded)."""
    items = sdk_items([i for i in conv.items
                       if not (isinstance(i, Chat) and i.message.role == "system")])
    costs = message_costs([_item_message(item) for item in items])
    return sum(costs) / len(costs)


# --- the run --------------------------------------------------------------------------------

def lanes(budget: int) -> list[tuple[str, RuntimeProfile | None]]:
    """The turnledger lanes: the spec trim, then each low-water setting (None: unavailable)."""
    out: list[tuple[str, RuntimeProfile | None]] = [
        ("spec", RuntimeProfile(max_context_tokens=budget))]
    for x in LOW_WATERS:
        profile = None
        if low_water_available():
            profile = RuntimeProfile(max_context_tokens=budget,
                                     compaction=Compaction(low_water=x))
        out.append((f"low_water={x}", profile))
    return out


def run_data(conv: Conversation, budget: int, openai_cached: float,
             log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every lane on one session and budget."""
    steady = steady_start(conv, budget)
    rows: list[dict[str, Any]] = []

    def row(lane: str, requests: list[Request] | None, note: str = "") -> None:
        base = {"data": conv.name, "budget": budget, "lane": lane, "steady_from": steady,
                "note": note}
        if requests is None:
            rows.append({**base, "available": False})
            return
        rows.append({**base, "available": True,
                     **measure(requests, steady, budget, openai_cached=openai_cached)})
        log(f"  {conv.name} B={budget:,} {lane}: done")

    for lane, profile in lanes(budget):
        if profile is None:
            row(lane, None, "not available: Compaction has no low_water")
        else:
            row(lane, turnledger_lane(conv, profile))
    row("trim_messages", trim_messages_lane(conv, budget))
    spec = rows[0]
    limit = max(1, round(spec["mean_context"] / sdk_item_tokens(conv)))
    row(f"agents_sdk limit={limit}", sdk_lane(conv, limit),
        "N = round(spec mean context / mean tokens of an SDK item)")
    for r in rows:
        if r.get("available"):
            r["anthropic_vs_spec"] = round(r["anthropic_cost"] / spec["anthropic_cost"], 3)
            r["anthropic_last_vs_spec"] = round(
                r["anthropic_last_cost"] / spec["anthropic_last_cost"], 3)
            r["openai_vs_spec"] = round(r["openai_cost"] / spec["openai_cost"], 3)
            r["meets_goals"] = (
                r["breaks_per_10_turns"] <= GOAL_BREAKS_PER_10_TURNS
                and r["shared"] >= GOAL_SHARED
                and r["anthropic_vs_spec"] <= GOAL_ANTHROPIC_VS_SPEC
                and r["mean_context_of_budget"] >= GOAL_MEAN_CONTEXT)
    return rows


def recommend(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The low-water lanes meeting every goal, per data set and budget and per budget on every
    data set; the recommendation of a budget is the one of these with the highest mean context
    (None when no setting meets the goals on every data set at that budget)."""
    meeting: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("available") and r["lane"].startswith("low_water"):
            meeting.setdefault((r["data"], r["budget"]), [])
            if r["meets_goals"]:
                meeting[(r["data"], r["budget"])].append(r)
    per = {f"{data} B={budget}": sorted(r["lane"] for r in found)
           for (data, budget), found in sorted(meeting.items())}
    recommended: dict[str, str | None] = {}
    for budget in sorted({b for _, b in meeting}):
        groups = [found for (_, b), found in meeting.items() if b == budget]
        common = set.intersection(*({r["lane"] for r in found} for found in groups))
        score = {lane: min(r["mean_context_of_budget"] for found in groups for r in found
                           if r["lane"] == lane) for lane in common}
        recommended[str(budget)] = max(score, key=lambda lane: score[lane]) if score else None
    return {"meeting_goals": per, "recommended_per_budget": recommended}


COLUMNS = ["data", "budget", "lane", "breaks_per_10_turns", "shared", "anthropic_x",
           "anthropic_vs_spec", "anthropic_last_vs_spec", "openai_x", "openai_vs_spec",
           "mean_context",
           "mean_context_of_budget", "over_budget", "meets_goals"]


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table (an unavailable lane says so)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        if not r.get("available"):
            cells = [str(r["data"]), f"{r['budget']:,}", r["lane"], r["note"]] + [""] * (
                len(COLUMNS) - 4)
        else:
            cells = [str(r["data"]), f"{r['budget']:,}", r["lane"],
                     f"{r['breaks_per_10_turns']:.2f}", f"{100 * r['shared']:.1f} %",
                     f"{r['anthropic_x']:.3f}", f"{r['anthropic_vs_spec']:.3f}",
                     f"{r['anthropic_last_vs_spec']:.3f}",
                     f"{r['openai_x']:.3f}", f"{r['openai_vs_spec']:.3f}",
                     f"{r['mean_context']:,.0f}",
                     f"{100 * r['mean_context_of_budget']:.1f} %", str(r["over_budget"]),
                     "yes" if r["meets_goals"] else "no"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: Path) -> bool:
    """Shared share, breaks and Anthropic cost against mean context, per data and budget."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    keys = sorted({(r["data"], r["budget"]) for r in rows})
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    metrics = [("shared", "share of input tokens in the shared prefix", GOAL_SHARED),
               ("breaks_per_10_turns", "cache breaks per 10 turns", GOAL_BREAKS_PER_10_TURNS),
               ("anthropic_vs_spec", "Anthropic input cost / spec trim's",
                GOAL_ANTHROPIC_VS_SPEC)]
    for ax, (metric, title, goal) in zip(axes, metrics, strict=True):
        ax.axhline(goal, color="grey", linestyle="--", linewidth=0.8)
        ax.axvline(100 * GOAL_MEAN_CONTEXT, color="grey", linestyle="--", linewidth=0.8)
        for data, budget in keys:
            group = [r for r in rows if (r["data"], r["budget"]) == (data, budget)
                     and r.get("available")]
            xs = [100 * r["mean_context_of_budget"] for r in group]
            ys = [r[metric] for r in group]
            line = ax.scatter(xs, ys, label=f"{data}, B={budget:,}")
            for r, x, y in zip(group, xs, ys, strict=True):
                ax.annotate(r["lane"].replace("low_water=", "lw ").split(" limit")[0],
                            (x, y), fontsize=7, color=line.get_facecolor()[0],
                            xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel("mean context, % of the budget")
        ax.set_title(f"{title} (dashed: goals)", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("benchmarks.cache: steady state, every lane on the same data")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=None, help="turns per session (300)")
    parser.add_argument("--budgets", default=None, help="comma-separated (8000,32000)")
    parser.add_argument("--data", default="synthetic,fixtures",
                        help="synthetic and/or fixtures, comma-separated")
    parser.add_argument("--openai-cached", type=float, default=OPENAI_CACHED,
                        help="OpenAI's cached-input price over the input price (0.5: gpt-4o)")
    parser.add_argument("--quick", action="store_true",
                        help="60 turns, budget 8,000; JSON and plot to a temporary folder")
    parser.add_argument("--output", type=Path, default=None, help="JSON results file")
    args = parser.parse_args(argv)
    turns = args.turns or (60 if args.quick else 300)
    budgets = [int(b) for b in (args.budgets or ("8000" if args.quick else "8000,32000"))
               .split(",")]
    output = args.output or (Path(tempfile.gettempdir()) / "cache.json" if args.quick
                             else RESULTS)
    makers = {"synthetic": synthetic, "fixtures": fixtures}
    rows: list[dict[str, Any]] = []
    for name in args.data.split(","):
        conv = makers[name](turns)
        for budget in budgets:
            rows += run_data(conv, budget, args.openai_cached, lambda s: print(s, flush=True))
    print(f"\nSteady state (from the first request whose history exceeds the budget); "
          f"{turns} turns; turnledger's estimate for every lane; costs in input-token units "
          f"(x: over the same lane uncached; vs_spec: over the spec trim's)")
    print(table(rows))
    advice = recommend(rows)
    print(f"\nlow-water settings meeting every goal: {advice['meeting_goals']}")
    print(f"recommended per budget (goals met on every data set, highest mean context): "
          f"{advice['recommended_per_budget']}")
    from benchmarks.cache_floor import floors

    floor_rows = floors(turns, budgets, args.data.split(","))
    print("\nThe floor (benchmarks.cache_floor): the fewest breaks per 10 turns any whole-turn "
          "trim within the budget reaches while the model sees on average >= "
          f"{GOAL_MEAN_CONTEXT:.0%} of it; above {GOAL_BREAKS_PER_10_TURNS:g}, no setting can "
          "meet the goals at that budget")
    for f in floor_rows:
        verdict = ("no setting can meet the goals" if f["floor_per_10_turns"]
                   > GOAL_BREAKS_PER_10_TURNS else "reachable")
        print(f"  {f['data']} B={f['budget']:,} (turns of {f['mean_turn_tokens']:,} tokens on "
              f"average): floor {f['floor_per_10_turns']:.2f}, best schedule "
              f"{f['schedule_per_10_turns']} at {f['schedule_mean_of_budget']} of the budget; "
              f"{verdict}")
    plotted = plot(rows, output.with_suffix(".png"))
    report = {"benchmark": "cache", "python": sys.version.split()[0],
              "platform": platform.platform(), "cpus": os.cpu_count(), "turns": turns,
              "budgets": budgets, "low_water_available": low_water_available(),
              "prices": {"anthropic_read": ANTHROPIC_READ, "anthropic_write": ANTHROPIC_WRITE,
                         "anthropic_min_cacheable": ANTHROPIC_MIN_CACHEABLE,
                         "anthropic_lookback_blocks": ANTHROPIC_LOOKBACK,
                         "openai_cached": args.openai_cached, "openai_min": OPENAI_MIN,
                         "openai_step": OPENAI_STEP},
              "goals": {"breaks_per_10_turns": GOAL_BREAKS_PER_10_TURNS,
                        "shared": GOAL_SHARED, "anthropic_vs_spec": GOAL_ANTHROPIC_VS_SPEC,
                        "mean_context_of_budget": GOAL_MEAN_CONTEXT},
              "recommended": advice, "floors": floor_rows, "rows": rows}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"written to {output}" + (f" and {output.with_suffix('.png')}" if plotted else
                                    " (matplotlib missing: no plot)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
