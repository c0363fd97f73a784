"""Child process: one ``create_agent`` run whose tool step dies with the process, then resumed.

``python langchain_step_child.py STORE_URL CHECKPOINT_DB crash|resume|turn [N] [window]``:

- ``crash``: a run whose model calls ``lookup``; the tool ends the process (``os._exit(17)``)
  as a kill would, after the graph checkpointed the reply and before the tool answers;
- ``resume``: a new process resumes the thread from its checkpoint (``invoke(None)``): the
  tool runs again, the model answers; prints ``{"state": [...], "log": [...]}`` as
  ``messages_to_dict``;
- ``turn N``: one more turn of the thread (question N, a tool step, answer N), printed as for
  ``resume`` with the model's inputs (``"inputs"``), a turn a process;
- ``window`` last: the middleware keeps only the window in the graph state (``state_window``).

Used by test_integration_langchain.py (issue 22): a crash in the middle of a step leaves the log no
further than the graph, and the resumed run leaves them equal, message for message.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, messages_to_dict
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver

import turnledger as tl
from turnledger.integrations.langchain import to_langchain_messages
from turnledger.integrations.langchain_agents import TurnledgerMiddleware
from turnledger.replay.transcripts import record_of

CONFIG: Any = {"configurable": {"thread_id": "crashed-step"}}


class ToolModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


class SeeingModel(ToolModel):
    inputs: list[list[Any]] = []  # noqa: RUF012 - a pydantic field

    def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
        self.inputs.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def main(url: str, checkpoints: str, mode: str, *rest: str) -> None:
    window = rest[-1:] == ("window",)
    turn = int(rest[0]) if mode == "turn" else 0
    @tool
    def lookup(q: str) -> str:
        """Look a value up."""
        if mode == "crash":
            sys.stdout.flush()
            os._exit(17)
        return f"value of {q}"

    if mode == "crash":
        script = [AIMessage("", id="reply-1",
                            tool_calls=[{"id": "c1", "name": "lookup", "args": {"q": "x"}}])]
    elif mode == "resume":
        script = [AIMessage("x is known", id="reply-2")]
    else:
        script = [AIMessage("", id=f"call-{turn}", tool_calls=[
                      {"id": f"c-{turn}", "name": "lookup", "args": {"q": str(turn)}}]),
                  AIMessage(f"answer {turn}", id=f"answer-{turn}")]
    profile = tl.RuntimeProfile(max_history_messages=1)
    with tl.open_store(url) as store, sqlite3.connect(checkpoints,
                                                      check_same_thread=False) as db:
        middleware = TurnledgerMiddleware(store, profile=profile, state_window=window)
        model = SeeingModel(messages=iter(script), inputs=[])
        agent = create_agent(model, [lookup], middleware=[middleware],
                             checkpointer=SqliteSaver(db))
        if mode == "crash":
            agent.invoke({"messages": [HumanMessage("what is x?", id="q-1")]}, CONFIG,
                         durability="sync")
            raise SystemExit("the tool did not end the process")
        question = None if mode == "resume" else {
            "messages": [HumanMessage(f"question {turn}", id=f"q-{turn}")]}
        state = agent.invoke(question, CONFIG, durability="sync")
        log = to_langchain_messages(record_of(middleware.session_for(CONFIG).events()))
        print(json.dumps({"state": messages_to_dict(state["messages"]),
                          "log": messages_to_dict(log),
                          "inputs": [messages_to_dict(seen) for seen in model.inputs]},
                         sort_keys=True))


if __name__ == "__main__":
    main(*sys.argv[1:])
