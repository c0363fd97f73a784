"""Benchmark: what a user pays per model call of an agent run (issue 22).

OpenAI Agents SDK (``agents``), LangGraph (``langgraph``), pydantic-ai (``pydantic_ai``) and
Google ADK (``adk``) parts, each against the framework's own stack.

One **agent step** is what happens between two model calls of a tool loop: record the step
(the model's reasoning and function call, the tool's output: three Responses items, ~2 KB)
and build the input of the next model call. Measured, interleaved step by step so machine load
weighs on both sides alike, after 100 / 1,000 / 10,000 turns of history:

- **SDK**: the SDK's own session (``SQLiteSession`` on SQLite; ``SQLAlchemySession`` on asyncpg
  on PostgreSQL), ``add_items(step)`` as the SDK's run loop saves a step, then
  ``get_items()`` and the trimming a user adds to stay in budget: whole turns kept from the
  newest, at most 50 turns and 32,000 estimated tokens (``ceil(len(json) / 4) + 4`` an item),
  the same policy as turnledger's default profile;
- **turnledger**: ``TurnledgerSession.add_items(step)`` (the same save), then
  ``call_model_input_filter`` on the SDK's whole run input (the window read at the start of the
  run plus the run's items): it finds nothing new to record, decides and records the trims
  (R24) and returns the window.

Each run is a user message, three tool steps and a final answer (all recorded on both sides);
the three tool steps are timed. The ratio is SDK / turnledger: above 1, turnledger is faster.
Goal (issue 22): >= 1x at 100 turns.

**LangGraph** (LangChain 1.x ``create_agent``, the agent LangGraph users build now), the same
step inside a real graph run: three agents on the same scripted chat model and tool (a turn of
four messages, ~2.4 KB: question, reasoning + tool call, ~1.5 KB tool result, answer), each
with a durable checkpointer of its own (``SqliteSaver``; ``PostgresSaver`` of
``langgraph-checkpoint-postgres``), run with ``durability="sync"`` (every checkpoint written
before the next node, as turnledger records before the model call):

- **LangGraph**: a ``wrap_model_call`` middleware that trims the state's messages with
  ``trim_messages`` (``strategy="last"``, ``max_tokens=32000``, ``start_on="human"``,
  ``count_tokens_approximately``) before each model call;
- **turnledger**: ``TurnledgerMiddleware`` (default profile: 50 turns, 32,000 tokens). It does
  not replace the checkpointer: the graph state keeps the thread's messages (the middleware
  records what is new against it), so a durable deployment has both. It records the reply
  inside nodes the graph runs anyway (the tool step, the end of the run: ADR-0090), so a step
  writes as many checkpoints as LangGraph's;
- **window**: ``TurnledgerMiddleware(state_window=True)``: the graph state keeps the window the
  model saw and its reply, not the thread (the log keeps every message), so each checkpoint
  holds the window. Its thread is filled as such runs leave it: the window in the checkpoint.

A step is timed from the moment a model call returns to the moment the next one starts
(timestamps taken inside the scripted model): the graph records the reply and the tool result
(checkpoints, middleware), runs the (trivial) tool and builds the next model input. Runs are
interleaved one by one, each side first in turn. Ratio = LangGraph / turnledger (wall time);
the CPU time of the process over the same interval (``time.process_time``, all threads: the
checkpointer's background writes included) is reported beside it, a steadier figure when
others load the machine, with the 1-minute load average after each row.

**pydantic-ai** (``--parts pydantic_ai``; it has no store of its own): the same turns and steps
in an ``Agent`` on pydantic-ai's ``FunctionModel``, with a capability on each side:

- **pydantic-ai**: what its documentation shows, per step: the run's new messages saved as
  ``ModelMessagesTypeAdapter`` JSON rows (one transaction; SQLite file, or a PostgreSQL table),
  and the model input trimmed by the user's whole-turn rule (``_pa_trim``: 50 turns, 32,000
  estimated tokens of the parts' text); the conversation's messages kept in memory between
  runs and given whole as each run's ``message_history``, as the documentation does;
- **turnledger**: ``TurnledgerHistory`` (records the run's new messages, decides and records
  the trims, sends the window); each run gets ``history.messages()`` as its history.

Ratio = pydantic-ai / turnledger, wall and CPU as above.

**Google ADK** (``--parts adk``): the same turns and steps in an ``LlmAgent`` with one tool
(``search``) on a scripted ``BaseLlm`` (no network), run by ADK's ``Runner`` on ADK's durable
``DatabaseSessionService`` (SQLite file through aiosqlite; PostgreSQL through asyncpg, a fresh
schema as its search path). A step is ADK's own work (the reply and the tool response appended
as events, one transaction each, the next request's contents built from the session's events)
plus, before the next model call:

- **ADK**: the trim a user adds, a ``before_model_callback`` keeping whole turns from the newest
  of ``llm_request.contents`` (``_adk_trim``: 50 turns, 32,000 estimated tokens of the parts'
  text and function call arguments / responses);
- **turnledger**: ``TurnledgerCallback`` as ``before_model_callback`` (records what is new,
  decides and records the trims, sends the window) and its ``after_model``, on a turnledger
  store. ADK needs a session service and keeps its events whatever the callback does, so this
  side runs on the same kind of ``DatabaseSessionService``: a durable ADK deployment has both.

Both ADK sessions and the turnledger log are filled directly (the events as ADK's own rows, 400
a transaction; the contents ADK hands the callbacks, client call ids stripped, recorded with
``from_genai``), so the callback's first call records the run's question only: it follows the
newest recorded content (asserted: the log ends with every message once). Each run checks that
the model saw whole turns and fewer contents than the untrimmed history, and on ADK's side at
most 50 turns within budget. Ratio = ADK / turnledger, wall and CPU as above.

Run from the project root::

    .venv/bin/python -m benchmarks.agent_step            # full run, writes results/agent_step.json
    .venv/bin/python -m benchmarks.agent_step --quick    # 100 and 1,000 turns, JSON to tmp
    .venv/bin/python -m benchmarks.agent_step --parts langgraph   # one part, JSON to tmp
    .venv/bin/python -m benchmarks.agent_step --parts adk --quick  # Google ADK, JSON to tmp

``--postgres URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``; fresh schemas,
dropped after), ``--no-postgres`` to skip PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from copy import deepcopy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_API_KEY", "sk-benchmark-no-network")

import turnledger as tl
from benchmarks.integrations import (
    PG_DEFAULT,
    Backend,
    Text,
    _close_theirs,
    _table,
    postgres_backend,
    sqlite_backend,
    turn_items,
)
from turnledger.integrations.openai_agents import TurnledgerSession

RESULTS = Path(__file__).parent / "results" / "agent_step.json"
MAX_TURNS = 50  # turnledger's default turn limit (R29), applied on the SDK side too
BUDGET = 32_000  # turnledger's default token budget (R11), applied on the SDK side too
Item = dict[str, Any]
PARTS = ("agents", "langgraph", "pydantic_ai", "adk")


def user_trim(items: list[Item], max_turns: int = MAX_TURNS, budget: int = BUDGET) -> list[Item]:
    """The trimming a user adds after ``get_items()``: whole turns (a turn starts at a user
    message) from the newest, at most ``max_turns`` and ``budget`` estimated tokens; the
    newest turn is kept whatever its size."""
    kept_from, tokens, turns = 0, 0, 0
    for i in range(len(items) - 1, -1, -1):
        tokens += math.ceil(len(json.dumps(items[i])) / 4) + 4
        if items[i].get("role") == "user":
            turns += 1
            if turns > 1 and (turns > max_turns or tokens > budget):
                break
            kept_from = i
    return items[kept_from:]


class _Input:
    """Stands for the SDK's ``CallModelData`` (``model_data.input``, ``.instructions``)."""

    def __init__(self, items: list[Item]) -> None:
        self.model_data = self
        self.input = items
        self.instructions = "Answer briefly."


async def _fill(backend: Backend, turns: int, name: str) -> None:
    """``turns`` turns on both sides, 100 turns a transaction."""
    text = Text(turns)
    theirs = backend.theirs(name)
    with tl.open_store(backend.ours_url) as store:
        ours = TurnledgerSession(name, store)
        for first in range(0, turns, 100):
            items = [i for n in range(first, min(first + 100, turns)) for i in turn_items(n, text)]
            await theirs.add_items(items)
            await ours.add_items(items)
    await _close_theirs(theirs)


def _run_items(n: int, text: Text) -> tuple[Item, list[list[Item]], Item]:
    """A run: its user message, three tool steps (reasoning, call, output), its answer."""
    whole = turn_items(n, text)
    user, reasoning, call, output, answer = whole
    steps = []
    for k in range(3):
        steps.append([
            {**reasoning, "id": f"rs_{n}_{k}"},
            {**call, "id": f"fc_{n}_{k}", "call_id": f"call_{n}_{k}"},
            {**output, "call_id": f"call_{n}_{k}"},
        ])
    return user, steps, answer


async def bench_size(backend: Backend, turns: int, runs: int) -> dict[str, Any]:
    """Median step time of each side after ``turns`` turns, ``runs`` runs of three steps."""
    name = f"step-{turns}-{uuid.uuid4().hex[:8]}"
    await _fill(backend, turns, name)
    text = Text(turns + 7)
    times: dict[str, list[float]] = {"sdk": [], "turnledger": []}
    sizes: dict[str, list[int]] = {"sdk": [], "turnledger": []}
    theirs = backend.theirs(name)
    with tl.open_store(backend.ours_url) as store:
        ours = TurnledgerSession(name, store)
        for r in range(runs):
            user, steps, answer = _run_items(turns + r, text)
            # Run start (untimed, alike on both sides): read the history, save the input.
            await theirs.get_items()
            await theirs.add_items([user])
            run_input = [*(await ours.get_items()), user]
            await ours.add_items([user])
            for k, step in enumerate(steps):
                sides = ("sdk", "turnledger") if (r + k) % 2 == 0 else ("turnledger", "sdk")
                for side in sides:
                    start = time.perf_counter()
                    if side == "sdk":
                        await theirs.add_items(step)
                        window = user_trim(await theirs.get_items())
                    else:
                        await ours.add_items(step)
                        run_input += step
                        window = (await ours.call_model_input_filter(_Input(run_input))).input
                    times[side].append(time.perf_counter() - start)
                    sizes[side].append(len(window))
            await theirs.add_items([answer])
            await ours.add_items([answer])
        ours.close()
    await _close_theirs(theirs)
    sdk, mine = statistics.median(times["sdk"]), statistics.median(times["turnledger"])
    return {"backend": backend.name, "turns": turns, "steps": len(times["sdk"]),
            "sdk_ms": sdk * 1e3, "turnledger_ms": mine * 1e3,
            "sdk_items": sizes["sdk"][-1], "turnledger_items": sizes["turnledger"][-1],
            "sdk_over_turnledger": sdk / mine}


# --- LangGraph: create_agent with a checkpointer --------------------------------------------

LG_STEPS = 3  # tool steps a run, as on the SDK side
THREAD = {"configurable": {"thread_id": "bench-thread"}}


def _lc_turn(n: int, text: Text) -> list[Any]:
    """One filled turn as LangChain messages (ids given, as the graph's reducer would)."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    call = {"id": f"call_{n}", "name": "search", "args": {"q": text(40)}}
    return [HumanMessage(f"Question {n}: {text(200)}", id=f"h_{n}"),
            AIMessage(text(300), tool_calls=[call], id=f"ai_{n}"),
            ToolMessage(text(1500), tool_call_id=f"call_{n}", id=f"t_{n}"),
            AIMessage(text(400), id=f"a_{n}")]


def _step_model(script: list[Any]) -> Any:
    """A chat model that answers from ``script`` and notes when each call enters and leaves."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.outputs import ChatGeneration, ChatResult
    from pydantic import Field

    class StepModel(BaseChatModel):
        script: list[Any] = Field(default_factory=list)
        entered: list[float] = Field(default_factory=list)
        left: list[float] = Field(default_factory=list)
        cpu_entered: list[float] = Field(default_factory=list)
        cpu_left: list[float] = Field(default_factory=list)
        seen: list[int] = Field(default_factory=list)

        @property
        def _llm_type(self) -> str:
            return "scripted-steps"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            self.entered.append(time.perf_counter())
            self.cpu_entered.append(time.process_time())
            self.seen.append(len(messages))
            result = ChatResult(generations=[ChatGeneration(message=self.script.pop(0))])
            self.cpu_left.append(time.process_time())
            self.left.append(time.perf_counter())
            return result

    return StepModel(script=script)


def _lg_run(n: int, text: Text) -> tuple[Any, list[Any], dict[str, str]]:
    """A run: its question, the model's replies (three tool calls, an answer), tool outputs."""
    from langchain_core.messages import AIMessage, HumanMessage

    user = HumanMessage(f"Question {n}: {text(200)}", id=f"h_{n}")
    replies, outputs = [], {}
    for k in range(LG_STEPS):
        q = f"{n}-{k}"
        replies.append(AIMessage(text(300), id=f"ai_{n}_{k}",
                                 tool_calls=[{"id": f"call_{n}_{k}", "name": "search",
                                              "args": {"q": q}}]))
        outputs[q] = text(1500)
    replies.append(AIMessage(text(400), id=f"a_{n}"))
    return user, replies, outputs


def _trim_middleware() -> Any:
    from langchain.agents.middleware import wrap_model_call
    from langchain_core.messages import trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    @wrap_model_call  # type: ignore[arg-type]
    def trim_to_budget(request: Any, handler: Any) -> Any:
        window = trim_messages(request.messages, max_tokens=BUDGET, strategy="last",
                               token_counter=count_tokens_approximately, start_on="human",
                               include_system=True)
        return handler(request.override(messages=window))

    return trim_to_budget


class _Checkpointers:
    """A fresh durable checkpointer per agent: SqliteSaver files, or PostgresSaver schemas."""

    def __init__(self, directory: Path, postgres: str | None) -> None:
        self.directory, self.postgres = directory, postgres
        self.closers: list[Any] = []
        self.schemas: list[str] = []

    def saver(self, name: str) -> Any:
        if self.postgres is None:
            import sqlite3

            from langgraph.checkpoint.sqlite import SqliteSaver

            connection = sqlite3.connect(self.directory / f"{name}.db", check_same_thread=False)
            self.closers.append(connection.close)
            return SqliteSaver(connection)
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        schema = f"bench_lg_{name}_{uuid.uuid4().hex[:8]}".replace("-", "_")
        self.schemas.append(schema)
        with psycopg.connect(_conninfo(self.postgres), autocommit=True) as pg:
            pg.execute(f'CREATE SCHEMA "{schema}"')
        connection = psycopg.connect(_conninfo(self.postgres), autocommit=True,
                                     prepare_threshold=0, row_factory=dict_row,
                                     options=f"-c search_path={schema}")
        self.closers.append(connection.close)
        saver = PostgresSaver(connection)  # type: ignore[arg-type]
        saver.setup()
        return saver

    def ours_url(self, name: str) -> str:
        if self.postgres is None:
            return f"sqlite:///{self.directory / f'{name}-turnledger.db'}"
        schema = f"bench_lg_{name}_{uuid.uuid4().hex[:8]}_tl".replace("-", "_")
        self.schemas.append(schema)
        return f"{self.postgres}?schema={schema}"

    def close(self) -> None:
        for close in self.closers:
            close()
        if self.postgres is not None:
            import psycopg

            with psycopg.connect(_conninfo(self.postgres), autocommit=True) as pg:
                for schema in self.schemas:
                    pg.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _conninfo(url: str) -> str:
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    return (f"host={parts.hostname} port={parts.port or 5432} user={parts.username} "
            f"dbname={parts.path.lstrip('/')}")


def _lg_agent(saver: Any, middleware: Any, outputs: dict[str, str]) -> tuple[Any, Any]:
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    @tool
    def search(q: str) -> str:
        """Search the documents."""
        return outputs[q]

    model = _step_model([])
    return create_agent(model, [search], middleware=[middleware], checkpointer=saver), model


def _lg_fill(agent: Any, messages: list[Any], middleware: Any) -> None:
    """The thread's checkpoint holds ``messages`` (one checkpoint, as if grown run by run);
    turnledger's log holds them too, 100 turns a transaction. With ``state_window`` the
    checkpoint holds what such runs leave there: the window and nothing older."""
    nodes = agent.get_graph().nodes
    last = next((n for n in nodes if n.endswith(".after_agent")), "model")
    state = messages
    if middleware is not None:
        for end in range(400, len(messages) + 400, 400):
            middleware.trimmer.record(messages[:end], THREAD)
        if middleware.state_window:
            state = middleware.trimmer.window(messages, THREAD)
    agent.update_state(THREAD, {"messages": state}, as_node=last)
    assert agent.get_state(THREAD).next == (), "the filled thread must be at rest"


SIDES = ("langgraph", "turnledger", "window")  # window: TurnledgerMiddleware(state_window=True)


def bench_langgraph(savers: _Checkpointers, backend: str, turns: int,
                    runs: int) -> dict[str, Any]:
    """Median step time of each agent after ``turns`` turns, ``runs`` runs of three steps."""
    from turnledger.integrations.langchain_agents import TurnledgerMiddleware

    text = Text(turns)
    history = [m for n in range(turns) for m in _lc_turn(n, text)]
    outputs: dict[str, str] = {}
    tag = f"{turns}"
    steps = _Steps(SIDES)
    with tl.open_store(savers.ours_url(tag)) as store, \
            tl.open_store(savers.ours_url(f"{tag}w")) as window_store:
        ours = TurnledgerMiddleware(store)
        windowed = TurnledgerMiddleware(window_store, state_window=True)
        agents = {"langgraph": _lg_agent(savers.saver(f"lg{tag}"), _trim_middleware(), outputs),
                  "turnledger": _lg_agent(savers.saver(f"tl{tag}"), ours, outputs),
                  "window": _lg_agent(savers.saver(f"tw{tag}"), windowed, outputs)}
        _lg_fill(agents["langgraph"][0], history, None)
        _lg_fill(agents["turnledger"][0], history, ours)
        _lg_fill(agents["window"][0], history, windowed)
        del history
        text = Text(turns + 7)
        for r in range(runs):
            user, replies, run_outputs = _lg_run(turns + r, text)
            outputs.update(run_outputs)
            for side in SIDES[r % 3:] + SIDES[:r % 3]:  # each side first in turn
                agent, scripted = agents[side]
                scripted.script[:] = [m.model_copy() for m in replies]
                for noted in (scripted.entered, scripted.left, scripted.cpu_entered,
                              scripted.cpu_left, scripted.seen):
                    noted.clear()
                agent.invoke({"messages": [user.model_copy()]}, THREAD, durability="sync")
                steps.add(side, {"entered": scripted.entered, "left": scripted.left,
                                 "cpu_entered": scripted.cpu_entered,
                                 "cpu_left": scripted.cpu_left}, scripted.seen[-1])
    return steps.row(backend, turns, "langgraph", ours=SIDES[1:])


def run_langgraph(args: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    return _over_sizes(args, directory, bench_langgraph)


def _over_sizes(
    args: argparse.Namespace, directory: Path,
    bench: Callable[[Any, str, int, int], dict[str, Any]],
) -> list[dict[str, Any]]:
    """``bench(savers, backend, turns, runs)`` for each backend and session size, ``--repeat``
    times, each time on fresh stores (a row each, numbered ``repeat``)."""
    sizes = _sizes(args)
    rows = []
    for backend, postgres in (("SQLite", None), ("PostgreSQL", args.postgres)):
        if postgres is not None and args.no_postgres:
            continue
        for repeat in range(args.repeat):
            # A directory of its own per part and repeat (each part runs this on one tree).
            fresh = Path(tempfile.mkdtemp(prefix=f"{backend}-{repeat}-", dir=directory))
            savers = _Checkpointers(fresh, postgres)
            try:
                for turns in sizes:
                    # A checkpoint of 10,000 turns is ~25 MB, written two or three times a
                    # step. Each run adds a turn: more runs would measure a longer
                    # conversation than the row says (30 runs at 100 turns: 100 to 130
                    # turns, the baseline's cost growing with them); `--repeat` gives more
                    # samples of the same length.
                    runs = 2 if args.quick else (4 if turns >= 10_000 else 8)
                    row = bench(savers, backend, turns, runs)
                    rows.append(row | {"repeat": repeat} if args.repeat > 1 else row)
            finally:
                savers.close()
    return rows


def _sizes(args: argparse.Namespace) -> tuple[int, ...]:
    if args.turns:
        return tuple(int(t) for t in args.turns.split(","))
    return (100, 1_000) if args.quick else (100, 1_000, 10_000)


def repeat_summary(rows: Sequence[dict[str, Any]]) -> str:
    """The median (min-max) of each wall-time ratio over the repetitions of a row."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["backend"], row["turns"]), []).append(row)
    lines = ["median ratio over fresh conversations (min-max):"]
    for (backend, turns), group in groups.items():
        ratios = [k for k in group[0] if "_over_" in k and not k.startswith("cpu_")]
        said = ", ".join(
            f"{k} {statistics.median(r[k] for r in group):.2f} "
            f"({min(r[k] for r in group):.2f}-{max(r[k] for r in group):.2f})" for k in ratios)
        lines.append(f"  {backend} {turns:,} turns, {len(group)} conversations: {said}")
    return "\n".join(lines)


class _Steps:
    """Each side's step times, wall and CPU, from the notes its scripted model takes at every
    call (``entered``/``left``, ``cpu_entered``/``cpu_left``: a step is from one call's return
    to the next call), and the length of what its model saw last."""

    def __init__(self, sides: Sequence[str]) -> None:
        self.wall: dict[str, list[float]] = {side: [] for side in sides}
        self.cpu: dict[str, list[float]] = {side: [] for side in sides}
        self.seen: dict[str, int] = {}

    def add(self, side: str, notes: Mapping[str, Sequence[Any]], seen: int) -> None:
        """One run's ``LG_STEPS`` steps of ``side``."""
        self.wall[side] += [notes["entered"][k + 1] - notes["left"][k] for k in range(LG_STEPS)]
        self.cpu[side] += [notes["cpu_entered"][k + 1] - notes["cpu_left"][k]
                           for k in range(LG_STEPS)]
        self.seen[side] = seen

    def row(self, backend: str, turns: int, theirs: str,
            ours: Sequence[str] = ("turnledger",)) -> dict[str, Any]:
        """One row of a part that sets a framework's own stack (``theirs``) against turnledger
        (``ours``: its sides, "turnledger" first): median wall and CPU ms a step, what each
        model saw last, the ratios, the load."""
        sides = (theirs, *ours)
        wall = {side: statistics.median(self.wall[side]) for side in sides}
        used = {side: statistics.median(self.cpu[side]) for side in sides}
        row: dict[str, Any] = {"backend": backend, "turns": turns,
                               "steps": len(self.wall["turnledger"])}
        for side in sides:
            row |= {f"{side}_ms": wall[side] * 1e3, f"{side}_messages": self.seen[side],
                    f"{side}_cpu_ms": used[side] * 1e3}
        for side in ours:
            row |= {f"{theirs}_over_{side}": wall[theirs] / wall[side],
                    f"cpu_{theirs}_over_{side}": used[theirs] / used[side]}
        return row | {"load_average": os.getloadavg()[0]}


def _two_sides_report(title: str, theirs: str, label: str, rows: Sequence[dict[str, Any]],
                      ours: Sequence[str] = ("turnledger",)) -> str:
    """The table of `_Steps.row` rows; ``label`` names the framework's side; a ratio column
    per side of ``ours`` ("ratio" for turnledger's, "ratio NAME" for the others)."""
    named = [("" if side == "turnledger" else f" {side}") for side in ours]
    return _table(
        title,
        ["backend", "turns", "steps", f"{label} ms", *(f"{s} ms" for s in ours),
         f"{label} messages", *(f"{s} messages" for s in ours),
         *(f"ratio{n}" for n in named), *(f"CPU ratio{n}" for n in named), "load"],
        [[r["backend"], r["turns"], r["steps"],
          *(f"{r[f'{s}_ms']:.2f} ({r[f'{s}_cpu_ms']:.1f})" for s in (theirs, *ours)),
          *(r[f"{s}_messages"] for s in (theirs, *ours)),
          *(f"{r[f'{theirs}_over_{s}']:.2f}x" for s in ours),
          *(f"{r[f'cpu_{theirs}_over_{s}']:.2f}x" for s in ours),
          f"{r['load_average']:.1f}"]
         for r in rows],
    )


# --- pydantic-ai: an agent with a history capability -----------------------------------------

def _pa_turn(n: int, text: Text) -> list[Any]:
    """One filled turn as pydantic-ai messages (the four of the LangGraph part)."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    return [ModelRequest(parts=[UserPromptPart(f"Question {n}: {text(200)}")]),
            ModelResponse(parts=[TextPart(text(300)), ToolCallPart(
                "search", {"q": text(40)}, tool_call_id=f"call_{n}")]),
            ModelRequest(parts=[ToolReturnPart("search", text(1500), tool_call_id=f"call_{n}")]),
            ModelResponse(parts=[TextPart(text(400))])]


def _pa_tokens(message: Any) -> int:
    """A user's estimate of a message's tokens: ``ceil(chars / 4) + 4`` of its parts' text and
    tool arguments (what a model is sent, not pydantic-ai's bookkeeping fields)."""
    chars = sum(len(str(getattr(part, "content", "") or ""))
                + len(str(getattr(part, "args", "") or "")) for part in message.parts)
    return math.ceil(chars / 4) + 4


def _pa_trim(messages: list[Any], max_turns: int = MAX_TURNS, budget: int = BUDGET) -> list[Any]:
    """The trim a pydantic-ai user writes: whole turns (a turn starts at a request with a user
    prompt) from the newest, at most ``max_turns`` and ``budget`` estimated tokens
    (`_pa_tokens`); the newest turn is kept whatever its size."""
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    kept_from, tokens, turns = 0, 0, 0
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        tokens += _pa_tokens(message)
        if isinstance(message, ModelRequest) and any(
                isinstance(part, UserPromptPart) for part in message.parts):
            turns += 1
            if turns > 1 and (turns > max_turns or tokens > budget):
                break
            kept_from = i
    return messages[kept_from:]


class _JsonRows:
    """pydantic-ai's documented persistence, per message: ``ModelMessagesTypeAdapter`` JSON
    rows in a table of one's own (SQLite file, or a PostgreSQL schema), one transaction a
    save."""

    def __init__(self, savers: _Checkpointers, name: str) -> None:
        if savers.postgres is None:
            import sqlite3

            self.db: Any = sqlite3.connect(savers.directory / f"{name}-pa.db",
                                           check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.mark = "?"
        else:
            import psycopg

            schema = f"bench_pa_{name}_{uuid.uuid4().hex[:8]}"
            savers.schemas.append(schema)
            self.db = psycopg.connect(_conninfo(savers.postgres),
                                      options=f"-c search_path={schema}")
            self.db.execute(f'CREATE SCHEMA "{schema}"')
            self.mark = "%s"
        savers.closers.append(self.db.close)
        key = "INTEGER PRIMARY KEY" if savers.postgres is None else "BIGSERIAL PRIMARY KEY"
        self.db.execute(f"CREATE TABLE messages (id {key}, "
                        "conversation TEXT NOT NULL, body TEXT NOT NULL)")
        self.db.commit()

    def save(self, conversation: str, messages: Sequence[Any]) -> None:
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        if not messages:
            return
        rows = [(conversation, ModelMessagesTypeAdapter.dump_json([m]).decode())
                for m in messages]
        self.db.cursor().executemany(
            f"INSERT INTO messages (conversation, body) VALUES ({self.mark}, {self.mark})", rows)
        self.db.commit()  # one transaction


def _pa_capability(rows: _JsonRows, conversation: str) -> Any:
    """The user's capability: save the run's new messages, send the model the trimmed list."""
    from pydantic_ai.capabilities import AbstractCapability

    class JsonHistory(AbstractCapability[Any]):
        def __init__(self) -> None:
            self.saved: dict[str, int] = {}

        def _save_run(self, messages: Sequence[Any], run_id: str) -> None:
            ours = [m for m in messages if m.run_id == run_id]
            rows.save(conversation, ours[self.saved.get(run_id, 0):])
            self.saved[run_id] = len(ours)

        async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
            self._save_run(request_context.messages, ctx.run_id or "")
            request_context.messages = _pa_trim(request_context.messages)
            return request_context

        async def after_run(self, ctx: Any, *, result: Any) -> Any:
            self._save_run(result.all_messages(), ctx.run_id or "")
            return result

    return JsonHistory()


def _pa_agent(capability: Any, outputs: dict[str, str], script: list[Any],
              notes: dict[str, list[float]]) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    def scripted(messages: Any, info: Any) -> Any:
        notes["entered"].append(time.perf_counter())
        notes["cpu_entered"].append(time.process_time())
        notes["seen"].append(len(messages))
        reply = script.pop(0)
        notes["cpu_left"].append(time.process_time())
        notes["left"].append(time.perf_counter())
        return reply

    agent = Agent(FunctionModel(scripted), capabilities=[capability])

    @agent.tool_plain
    def search(q: str) -> str:
        """Search the documents."""
        return outputs[q]

    return agent


def _pa_replies(n: int, text: Text, outputs: dict[str, str]) -> list[Any]:
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

    replies = []
    for k in range(LG_STEPS):
        q = f"{n}-{k}"
        outputs[q] = text(1500)
        replies.append(ModelResponse(parts=[TextPart(text(300)), ToolCallPart(
            "search", {"q": q}, tool_call_id=f"call_{n}_{k}")]))
    replies.append(ModelResponse(parts=[TextPart(text(400))]))
    return replies


PA_SIDES = ("pydantic_ai", "turnledger")


def bench_pydantic_ai(savers: _Checkpointers, backend: str, turns: int,
                      runs: int) -> dict[str, Any]:
    """Median step time of each agent after ``turns`` turns, ``runs`` runs of three steps."""
    from turnledger.integrations.pydantic_ai import TurnledgerHistory

    text = Text(turns)
    history = [m for n in range(turns) for m in _pa_turn(n, text)]
    outputs: dict[str, str] = {}
    tag = f"pa{turns}"
    steps = _Steps(PA_SIDES)
    rows = _JsonRows(savers, tag)
    for first in range(0, len(history), 400):
        rows.save("bench", history[first:first + 400])
    with tl.open_store(savers.ours_url(tag)) as store:
        ours = TurnledgerHistory.open(store, "bench")
        for first in range(0, len(history), 400):
            ours.record(history[first:first + 400])
        scripts: dict[str, list[Any]] = {side: [] for side in PA_SIDES}
        notes = {side: {k: [] for k in ("entered", "left", "cpu_entered", "cpu_left", "seen")}
                 for side in PA_SIDES}
        agents = {"pydantic_ai": _pa_agent(_pa_capability(rows, "bench"), outputs,
                                           scripts["pydantic_ai"], notes["pydantic_ai"]),
                  "turnledger": _pa_agent(ours, outputs, scripts["turnledger"],
                                          notes["turnledger"])}
        theirs = history  # the user keeps the conversation's messages (loaded once)
        text = Text(turns + 7)
        for r in range(runs):
            replies = _pa_replies(turns + r, text, outputs)
            question = f"Question {turns + r}: {text(200)}"
            for side in PA_SIDES if r % 2 == 0 else PA_SIDES[::-1]:
                # Each side its own reply objects, as a model makes them: pydantic-ai stamps
                # a reply with its run's id only when it has none, so a reply shared with
                # the other side's earlier run kept that run's id. The user's capability
                # tells its run's messages by run id and saved none of those replies;
                # turnledger did the same before it told them by position (its tool results
                # then left without their calls, swept as orphans).
                scripts[side][:] = deepcopy(replies)
                noted = notes[side]
                for values in noted.values():
                    values.clear()
                given = theirs if side == "pydantic_ai" else ours.messages()
                result = agents[side].run_sync(question, message_history=given)
                if side == "pydantic_ai":
                    theirs = result.all_messages()
                steps.add(side, noted, int(noted["seen"][-1]))
        # Both sides recorded every message of every run (no reply missed, no result swept).
        swept = [e for e in ours.session.events() if isinstance(e, tl.OrphansSwept)]
        assert not swept, f"turnledger swept {len(swept)} times: a run's messages were missed"
        saved = rows.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        assert saved == len(theirs), f"the JSON rows hold {saved} of {len(theirs)} messages"
    return steps.row(backend, turns, "pydantic_ai")


def run_pydantic_ai(args: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    return _over_sizes(args, directory, bench_pydantic_ai)


def report_pydantic_ai(rows: Sequence[dict[str, Any]]) -> str:
    return _two_sides_report(
        "pydantic-ai Agent, one agent step (the run's new messages saved, the next model "
        "input trimmed); median wall ms (CPU ms of the process); ratio pydantic-ai JSON rows + "
        "user trim / TurnledgerHistory; load: 1-min average after the row",
        "pydantic_ai", "pydantic-ai", rows)


# --- Google ADK: an LlmAgent run by ADK's Runner on ADK's durable sessions -------------------

ADK_APP, ADK_USER, ADK_SESSION, ADK_AGENT = "bench", "user", "bench-session", "searcher"
ADK_SIDES = ("adk", "turnledger", "none")  # none: LlmAgent(include_contents="none")


def _adk_turn(n: int, text: Text) -> list[Any]:
    """One filled turn as genai contents (the four messages of the LangGraph part), with the
    client-side call id ADK gives a function call and its response in its events."""
    from google.genai import types

    call_id = f"adk-fill-{n}"
    return [types.Content(role="user", parts=[types.Part(text=f"Question {n}: {text(200)}")]),
            types.Content(role="model", parts=[
                types.Part(text=text(300)),
                types.Part(function_call=types.FunctionCall(
                    id=call_id, name="search", args={"q": text(40)}))]),
            types.Content(role="user", parts=[types.Part(
                function_response=types.FunctionResponse(
                    id=call_id, name="search", response={"result": text(1500)}))]),
            types.Content(role="model", parts=[types.Part(text=text(400))])]


def _adk_without_ids(content: Any) -> Any:
    """``content`` as ADK hands it to the model callbacks: client-side call ids stripped."""
    copy = content.model_copy(deep=True)
    for part in copy.parts or []:
        for held in (part.function_call, part.function_response):
            if held is not None and (held.id or "").startswith("adk-"):
                held.id = None
    return copy


def _adk_tokens(content: Any) -> int:
    """A user's estimate of a content's tokens: ``ceil(chars / 4) + 4`` of its parts' text and
    function call arguments / response values (as `_pa_tokens`)."""
    chars = 0
    for part in content.parts or []:
        chars += len(part.text or "")
        if part.function_call is not None:
            chars += len(json.dumps(part.function_call.args or {}))
        if part.function_response is not None:
            chars += len(json.dumps(part.function_response.response or {}))
    return math.ceil(chars / 4) + 4


def _adk_turn_start(content: Any) -> bool:
    """A turn starts at a user content with text (not a content of function responses)."""
    return content.role == "user" and any(part.text for part in content.parts or [])


def _adk_trim(contents: list[Any], max_turns: int = MAX_TURNS,
              budget: int = BUDGET) -> list[Any]:
    """The trim an ADK user writes in a ``before_model_callback``: whole turns from the newest
    of ``llm_request.contents``, at most ``max_turns`` and ``budget`` estimated tokens
    (`_adk_tokens`); the newest turn is kept whatever its size (as `_pa_trim`)."""
    kept_from, tokens, turns = 0, 0, 0
    for i in range(len(contents) - 1, -1, -1):
        tokens += _adk_tokens(contents[i])
        if _adk_turn_start(contents[i]):
            turns += 1
            if turns > 1 and (turns > max_turns or tokens > budget):
                break
            kept_from = i
    return contents[kept_from:]


async def _adk_user_trim(callback_context: Any, llm_request: Any) -> None:
    """ADK's side's ``before_model_callback``: the request's contents trimmed (`_adk_trim`)."""
    llm_request.contents = _adk_trim(list(llm_request.contents))


def _adk_model(script: list[Any], notes: dict[str, list[Any]]) -> Any:
    """A ``BaseLlm`` that answers from ``script`` (no network) and notes when each call enters
    and leaves, and the contents it was given."""
    from google.adk.models.base_llm import BaseLlm

    class StepModel(BaseLlm):
        model: str = "scripted-steps"

        async def generate_content_async(self, llm_request: Any,
                                         stream: bool = False) -> Any:
            notes["entered"].append(time.perf_counter())
            notes["cpu_entered"].append(time.process_time())
            notes["seen"][:] = [list(llm_request.contents)]
            reply = script.pop(0)
            notes["cpu_left"].append(time.process_time())
            notes["left"].append(time.perf_counter())
            yield reply

    return StepModel()


def _adk_replies(n: int, text: Text, outputs: dict[str, str]) -> list[Any]:
    """A run's model replies: three steps (text, a ``search`` call), then an answer."""
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    usage = types.GenerateContentResponseUsageMetadata(  # a model reports it (ADK logs its
        prompt_token_count=20_000, candidates_token_count=100, total_token_count=20_100)  # lack)
    replies = []
    for k in range(LG_STEPS):
        q = f"{n}-{k}"
        outputs[q] = text(1500)
        replies.append(LlmResponse(usage_metadata=usage, content=types.Content(
            role="model", parts=[types.Part(text=text(300)), types.Part(
                function_call=types.FunctionCall(name="search", args={"q": q}))])))
    replies.append(LlmResponse(usage_metadata=usage, content=types.Content(
        role="model", parts=[types.Part(text=text(400))])))
    return replies


def _adk_service(savers: _Checkpointers, name: str) -> Any:
    """ADK's durable session service: a SQLite file (aiosqlite), or a fresh PostgreSQL schema
    (asyncpg, the schema as its search path)."""
    from google.adk.sessions import DatabaseSessionService

    if savers.postgres is None:
        return DatabaseSessionService(
            f"sqlite+aiosqlite:///{savers.directory / f'{name}-adk.db'}")
    import psycopg

    schema = f"bench_adk_{name}_{uuid.uuid4().hex[:8]}"
    savers.schemas.append(schema)
    with psycopg.connect(_conninfo(savers.postgres), autocommit=True) as pg:
        pg.execute(f'CREATE SCHEMA "{schema}"')
    url = savers.postgres.replace("postgresql://", "postgresql+asyncpg://", 1)
    return DatabaseSessionService(url, connect_args={"server_settings": {"search_path": schema}})


async def _adk_fill(service: Any, history: list[Any]) -> None:
    """ADK's session holds ``history`` as the events a Runner would have left (the user's
    question authored by the user, the rest by the agent), inserted as ADK's own event rows,
    400 a transaction (ADK's ``append_event`` is a transaction an event)."""
    from google.adk.events import Event
    from google.adk.sessions.schemas.v1 import StorageEvent

    session = await service.create_session(app_name=ADK_APP, user_id=ADK_USER,
                                           session_id=ADK_SESSION)
    start = time.time() - 3600  # before the runs' events; 1 ms apart, in order
    for first in range(0, len(history), 400):
        async with service.database_session_factory() as sql:
            sql.add_all([StorageEvent.from_event(session, Event(
                invocation_id=f"fill-{(first + i) // 4}",
                author="user" if (first + i) % 4 == 0 else ADK_AGENT,
                content=content, timestamp=start + (first + i) * 1e-3))
                for i, content in enumerate(history[first:first + 400])])
            await sql.commit()
    stored = await service.get_session(app_name=ADK_APP, user_id=ADK_USER,
                                       session_id=ADK_SESSION)
    assert stored is not None, "the filled session must be there"
    assert len(stored.events) == len(history), "the fill must be whole"


def _adk_check(side: str, seen: list[Any], untrimmed: int, question: str) -> None:
    """The model saw whole turns (after the breadcrumb on turnledger's sides when trimmed),
    fewer contents than the untrimmed history, ending with the run's turn (its question and
    three steps); on ADK's side, within the turn and token limits; on the ``none`` side (ADK
    gives the current turn only), earlier turns too: turnledger supplied the history."""
    from turnledger.domain.messages import BREADCRUMB_TEXT

    assert len(seen) < untrimmed, f"{side}: the model saw the whole history"
    current = seen[-1 - 2 * LG_STEPS]
    assert [part.text for part in current.parts or []] == [question], \
        f"{side}: the input does not end with the run's turn"
    first = [part.text for part in seen[0].parts or []]
    if side != "adk" and first == [BREADCRUMB_TEXT]:  # a content of its own
        seen = seen[1:]
        first = [part.text for part in seen[0].parts or []]
    assert seen[0].role == "user", f"{side}: the model input does not start at a turn"
    assert (first[0] or "").startswith("Question"), f"{side}: the input does not start at a turn"
    turns = sum(_adk_turn_start(c) for c in seen)
    assert turns <= MAX_TURNS, f"{side}: {turns} turns"
    if side == "adk":
        assert turns == 1 or sum(map(_adk_tokens, seen)) <= BUDGET, "adk: over budget"
    if side == "none":
        assert turns > 1, "none: the model saw no history"


def bench_adk(savers: _Checkpointers, backend: str, turns: int, runs: int) -> dict[str, Any]:
    """Median step time of each agent after ``turns`` turns, ``runs`` runs of three steps."""
    return asyncio.run(_bench_adk(savers, backend, turns, runs))


async def _bench_adk(savers: _Checkpointers, backend: str, turns: int,
                     runs: int) -> dict[str, Any]:
    from turnledger.integrations.google_adk import TurnledgerCallback, from_genai

    text = Text(turns)
    history = [c for n in range(turns) for c in _adk_turn(n, text)]
    outputs: dict[str, str] = {}
    tag = f"adk{turns}"
    steps = _Steps(ADK_SIDES)
    services = {side: _adk_service(savers, f"{tag}{side[:2]}") for side in ADK_SIDES}
    try:
        for service in services.values():
            await _adk_fill(service, history)
        with tl.open_store(savers.ours_url(tag)) as store, \
                tl.open_store(savers.ours_url(f"{tag}n")) as none_store:
            ours = TurnledgerCallback(store)
            none = TurnledgerCallback(none_store)
            # What each callback would have recorded: the contents as ADK hands them to
            # it. Its first call for this ADK session records what follows the newest
            # recorded content (the last answer): the run's question only (checked below);
            # with include_contents="none", the contents are the run's question alone.
            logs = {"turnledger": ours.session_for(ADK_SESSION),
                    "none": none.session_for(ADK_SESSION)}
            for log in logs.values():
                for first in range(0, len(history), 400):
                    log.extend(from_genai([_adk_without_ids(c)
                                           for c in history[first:first + 400]]))
            del history
            await _adk_runs(services, ours, none, logs, turns, runs, outputs, steps)
    finally:
        for service in services.values():
            await service.close()
    return steps.row(backend, turns, "adk", ours=ADK_SIDES[1:])


async def _adk_runs(services: dict[str, Any], ours: Any, none: Any, logs: dict[str, Any],
                    turns: int, runs: int, outputs: dict[str, str], steps: _Steps) -> None:
    """``runs`` runs of each side on its filled ADK session, each side first in turn; the step
    times and the last model input's length noted in ``steps``."""
    from google.adk.agents import LlmAgent
    from google.adk.runners import Runner
    from google.genai import types

    from turnledger.integrations.google_adk import to_genai
    from turnledger.replay.transcripts import record_of

    def search(q: str) -> str:
        """Search the documents."""
        return outputs[q]

    scripts: dict[str, list[Any]] = {side: [] for side in ADK_SIDES}
    notes = {side: {k: [] for k in ("entered", "left", "cpu_entered", "cpu_left",
                                      "seen")} for side in ADK_SIDES}
    callbacks = {"adk": (_adk_user_trim, None), "turnledger": (ours, ours.after_model),
                 "none": (none, none.after_model)}
    runners = {side: Runner(
        agent=LlmAgent(name=ADK_AGENT, model=_adk_model(scripts[side], notes[side]),
                       instruction="Answer briefly.", tools=[search],
                       before_model_callback=callbacks[side][0],
                       after_model_callback=callbacks[side][1],
                       include_contents="none" if side == "none" else "default"),
        app_name=ADK_APP, session_service=services[side]) for side in ADK_SIDES}
    text = Text(turns + 7)
    for r in range(runs):
        replies = _adk_replies(turns + r, text, outputs)
        question = types.Content(role="user", parts=[types.Part(
            text=f"Question {turns + r}: {text(200)}")])
        for side in ADK_SIDES[r % 3:] + ADK_SIDES[:r % 3]:  # each side first in turn
            scripts[side][:] = [m.model_copy(deep=True) for m in replies]
            noted = notes[side]
            for values in noted.values():
                values.clear()
            async for _ in runners[side].run_async(
                    user_id=ADK_USER, session_id=ADK_SESSION,
                    new_message=question.model_copy(deep=True)):
                pass
            assert not scripts[side], f"{side}: the run did not end"
            last = noted["seen"][0]
            # The last call's untrimmed input: the history, the run's question and
            # three steps of call and response.
            _adk_check(side, last, 4 * (turns + r) + 1 + 2 * LG_STEPS,
                       question.parts[0].text)
            steps.add(side, noted, len(last))
    # Nothing recorded twice or missed: the fill and each run's eight messages, the
    # same on both turnledger sides.
    recorded = {}
    for side, log in logs.items():
        assert log.next_position == 4 * turns + 8 * runs, (side, log.next_position)
        recorded[side] = [_adk_without_ids(c).model_dump(mode="json") for c in to_genai(
            record_of(log.events())[4 * turns:])]
    assert recorded["turnledger"] == recorded["none"], "none: another log"


def run_adk(args: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    return _over_sizes(args, directory, bench_adk)


def report_adk(rows: Sequence[dict[str, Any]]) -> str:
    return _two_sides_report(
        "Google ADK LlmAgent on Runner + DatabaseSessionService, one agent step (reply and "
        "tool response appended as ADK events, next model input built); median wall ms (CPU ms "
        "of the process); ratio ADK + user trim / ADK + TurnledgerCallback; 'none': "
        "TurnledgerCallback on LlmAgent(include_contents=\"none\"); load: 1-min average after "
        "the row",
        "adk", "ADK", rows, ours=ADK_SIDES[1:])


async def run(args: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    sizes = (100, 1_000) if args.quick else (100, 1_000, 10_000)
    runs = 4 if args.quick else 8
    backends = [sqlite_backend(directory)]
    if not args.no_postgres:
        backends.append(postgres_backend(args.postgres, f"step_{uuid.uuid4().hex[:8]}"))
    rows = []
    try:
        for backend in backends:
            for turns in sizes:
                rows.append(await bench_size(backend, turns, runs))
    finally:
        for backend in backends:
            for cleanup in backend.cleanup:
                done = cleanup()
                if done is not None:
                    await done
    return rows


def report(rows: Sequence[dict[str, Any]]) -> str:
    return _table(
        "One agent step (record reasoning + call + output, build the next model input); "
        "median ms; ratio SDK / turnledger",
        ["backend", "turns", "steps", "SDK ms", "turnledger ms", "SDK items",
         "turnledger items", "ratio"],
        [[r["backend"], r["turns"], r["steps"], r["sdk_ms"], r["turnledger_ms"], r["sdk_items"],
          r["turnledger_items"], f"{r['sdk_over_turnledger']:.2f}x"] for r in rows],
    )


def report_langgraph(rows: Sequence[dict[str, Any]]) -> str:
    return _table(
        "LangGraph create_agent, one agent step (reply + tool result checkpointed/recorded, "
        "next model input built); median wall ms (CPU ms of the process); ratio LangGraph / "
        "turnledger; 'window': TurnledgerMiddleware(state_window=True); load: 1-min average "
        "after the row",
        ["backend", "turns", "steps", "LangGraph ms", "turnledger ms", "window ms",
         "ratio", "ratio window", "CPU ratio", "CPU ratio window", "load"],
        [[r["backend"], r["turns"], r["steps"],
          f"{r['langgraph_ms']:.2f} ({r['langgraph_cpu_ms']:.1f})",
          f"{r['turnledger_ms']:.2f} ({r['turnledger_cpu_ms']:.1f})",
          f"{r['window_ms']:.2f} ({r['window_cpu_ms']:.1f})",
          f"{r['langgraph_over_turnledger']:.2f}x", f"{r['langgraph_over_window']:.2f}x",
          f"{r['cpu_langgraph_over_turnledger']:.2f}x", f"{r['cpu_langgraph_over_window']:.2f}x",
          f"{r['load_average']:.1f}"] for r in rows],
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 turns; JSON to tmp")
    parser.add_argument("--postgres", default=PG_DEFAULT)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated, of {', '.join(PARTS)} (not all: JSON to tmp)")
    parser.add_argument("--turns", help="comma-separated conversation lengths of the LangGraph, "
                        "pydantic-ai and ADK parts (default 100,1000,10000; --quick 100,1000)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="fresh conversations per row of those parts, each a row of its "
                        "own, with the median ratio over them (default 1; not 1: JSON to tmp)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tl-bench-step-") as tmp:
        if "agents" in parts:
            results["steps"] = asyncio.run(run(args, Path(tmp)))
            print(report(results["steps"]))
        for part, run_part, report_part in (
                ("langgraph", run_langgraph, report_langgraph),
                ("pydantic_ai", run_pydantic_ai, report_pydantic_ai),
                ("adk", run_adk, report_adk)):
            if part in parts:
                results[part] = run_part(args, Path(tmp))
                print(report_part(results[part]))
                if args.repeat > 1:
                    print(repeat_summary(results[part]))
    partial = args.quick or set(parts) != set(PARTS) or args.turns or args.repeat > 1
    output = Path(tempfile.gettempdir()) / "agent_step.json" if partial else RESULTS
    output.parent.mkdir(parents=True, exist_ok=True)
    meta = {"when": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": "python -m benchmarks.agent_step" + (" --quick" * args.quick)
            + (" --no-postgres" * args.no_postgres)
            + (f" --parts {args.parts}" * (set(parts) != set(PARTS)))
            + (f" --turns {args.turns}" if args.turns else "")
            + (f" --repeat {args.repeat}" * (args.repeat > 1)),
            "python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "max_turns": MAX_TURNS, "budget_tokens": BUDGET}
    output.write_text(json.dumps({**meta, **results}, indent=2) + "\n", encoding="utf-8")
    print(f"results: {output}")


if __name__ == "__main__":
    main()
