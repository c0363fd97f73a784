"""Child process: one ``create_agent`` run whose tool step dies with the process, then resumed.

``python langchain_step_child.py STORE_URL CHECKPOINT_DB crash|resume``:

- ``crash``: a run whose model calls ``lookup``; the tool ends the process (``os._exit(17)``)
  as a kill would, after the graph checkpointed the reply and before the tool answers;
- ``resume``: a new process resumes the thread from its checkpoint (``invoke(None)``): the
  tool runs again, the model answers; prints ``{"state": [...], "log": [...]}`` as
  ``messages_to_dict``.

Used by test_i22_langchain.py (issue 22): a crash in the middle of a step leaves the log no
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


def main(url: str, checkpoints: str, mode: str) -> None:
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
    else:
        script = [AIMessage("x is known", id="reply-2")]
    with tl.open_store(url) as store, sqlite3.connect(checkpoints,
                                                      check_same_thread=False) as db:
        middleware = TurnledgerMiddleware(store)
        agent = create_agent(ToolModel(messages=iter(script)), [lookup],
                             middleware=[middleware], checkpointer=SqliteSaver(db))
        if mode == "crash":
            agent.invoke({"messages": [HumanMessage("what is x?", id="q-1")]}, CONFIG,
                         durability="sync")
            raise SystemExit("the tool did not end the process")
        state = agent.invoke(None, CONFIG, durability="sync")
        log = to_langchain_messages(record_of(middleware.session_for(CONFIG).events()))
        print(json.dumps({"state": messages_to_dict(state["messages"]),
                          "log": messages_to_dict(log)}, sort_keys=True))


if __name__ == "__main__":
    main(*sys.argv[1:4])
