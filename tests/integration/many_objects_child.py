"""Many framework session objects for ONE conversation, appending from many threads (issue 19,
point 6); importable by the tests, and a child process of them.

A server with several workers builds a framework session per request: here ``objects`` OpenAI
Agents SDK sessions (`TurnledgerSession`) or LangChain histories (`TurnledgerChatMessageHistory`)
all name the conversation `CONVERSATION`, and ``threads`` threads make the calls, call ``c``
through object ``c % objects``. Each call adds one whole turn (`TURN` items: a question, a
function call, its output, the answer), all tagged with ``c``. `run_calls` returns one line per
call that raised.

As a child: ``python many_objects_child.py URL FRAMEWORK FIRST STEP CALLS OBJECTS THREADS`` makes
calls ``FIRST, FIRST + STEP, ...`` below ``CALLS``; it opens its objects, prints ``ready``, waits
for a line on stdin (so that every child starts at once), runs and prints the failures as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make ``tests`` and ``turnledger`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from turnledger.domain.messages import ConversationMessage
from turnledger.integrations import open_session
from turnledger.store.session import Store, open_store

CONVERSATION = "many-objects-conversation"
TURN = 4
"""Items (messages) each call adds."""

Adder = Callable[[int], None]


def sdk_turn(call: int) -> list[dict[str, Any]]:
    """The Responses items of call ``call``: one whole turn."""
    return [
        {"role": "user", "content": f"question {call}"},
        {"type": "function_call", "id": f"fc_{call}", "call_id": f"call_{call}",
         "name": "lookup", "arguments": f'{{"call": {call}}}', "status": "completed"},
        {"type": "function_call_output", "call_id": f"call_{call}", "output": f"found {call}"},
        {"type": "message", "id": f"msg_{call}", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": f"answer {call}", "annotations": [],
                      "logprobs": []}]},
    ]


def langchain_turn(call: int) -> list[Any]:
    """The LangChain messages of call ``call``: one whole turn."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    return [
        HumanMessage(f"question {call}"),
        AIMessage("", tool_calls=[{"id": f"call_{call}", "name": "lookup",
                                   "args": {"call": call}}]),
        ToolMessage(f"found {call}", tool_call_id=f"call_{call}"),
        AIMessage(f"answer {call}"),
    ]


def expected_messages(framework: str, call: int) -> list[ConversationMessage]:
    """The turnledger messages call ``call`` must have recorded, in order."""
    if framework == "sdk":
        from turnledger.integrations.openai_agents import from_responses_items

        return from_responses_items(sdk_turn(call))
    from turnledger.integrations.langchain import from_langchain_messages

    return from_langchain_messages(langchain_turn(call))


def sdk_adders(store: Store, objects: int) -> list[Adder]:
    """``objects`` SDK sessions of the conversation (opened at their first call, as the SDK
    does), each as ``add(call)``: ``await session.add_items(turn)`` in the thread's own loop."""
    from turnledger.integrations.openai_agents import TurnledgerSession

    def adder(session: TurnledgerSession) -> Adder:
        return lambda call: asyncio.run(session.add_items(sdk_turn(call)))

    return [adder(TurnledgerSession(CONVERSATION, store)) for _ in range(objects)]


def langchain_adders(store: Store, objects: int) -> list[Adder]:
    """``objects`` LangChain histories of the conversation, each with its own turnledger
    session, as ``add(call)``: ``history.add_messages(turn)``."""
    from turnledger.integrations.langchain import TurnledgerChatMessageHistory

    def adder(history: TurnledgerChatMessageHistory) -> Adder:
        return lambda call: history.add_messages(langchain_turn(call))

    return [adder(TurnledgerChatMessageHistory(open_session(store, CONVERSATION)))
            for _ in range(objects)]


ADDERS = {"sdk": sdk_adders, "langchain": langchain_adders}


def run_calls(
    adders: Sequence[Adder], calls: Sequence[int], threads: int
) -> list[str]:
    """Make ``calls`` from ``threads`` threads, call ``c`` through ``adders[c % len]``; one
    line ("call N: Error: text") per call that raised."""
    failures: list[str] = []
    lock = threading.Lock()

    def work(mine: Sequence[int]) -> None:
        for call in mine:
            try:
                adders[call % len(adders)](call)
            except Exception as error:  # every failure counts, whatever its type
                with lock:
                    failures.append(f"call {call}: {type(error).__name__}: {error}")

    workers = [threading.Thread(target=work, args=(calls[t::threads],)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return failures


def main(argv: Sequence[str]) -> None:
    url, framework, first, step, calls, objects, threads = argv
    with open_store(url) as store:
        adders = ADDERS[framework](store, int(objects))
        print("ready", flush=True)
        sys.stdin.readline()
        failures = run_calls(adders, range(int(first), int(calls), int(step)), int(threads))
    print(json.dumps(failures), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
