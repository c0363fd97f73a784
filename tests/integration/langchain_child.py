"""Child process: restore a LangChain thread's turnledger session and print it as JSON.

``python langchain_child.py STORE_URL THREAD_ID``; prints ``{"log": [...], "window": [...]}``:
every recorded message and the window the model would see now, as ``messages_to_dict``. Used by
test_integration_langchain.py to prove a thread comes back whole in a new process.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from langchain_core.messages import messages_to_dict

import turnledger as tl
from turnledger.integrations.langchain import to_langchain_messages
from turnledger.integrations.langchain_agents import TurnledgerMiddleware
from turnledger.replay.transcripts import record_of


def main(url: str, thread_id: str) -> None:
    with tl.open_store(url) as store:
        config: Any = {"configurable": {"thread_id": thread_id}}
        session = TurnledgerMiddleware(store).session_for(config)
        print(json.dumps({
            "log": messages_to_dict(to_langchain_messages(record_of(session.events()))),
            "window": messages_to_dict(to_langchain_messages(session.chat_view())),
        }, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
