"""Child process: restore a pydantic-ai conversation and print its window as pydantic-ai JSON.

``python pydantic_ai_child.py STORE_URL NAME``; used by test_integration_pydantic_ai.py to prove the
history is restored intact in a new process.
"""

from __future__ import annotations

import json
import sys

from pydantic_ai.messages import ModelMessagesTypeAdapter

import turnledger as tl
from turnledger.integrations.pydantic_ai import TurnledgerHistory

if __name__ == "__main__":
    with tl.open_store(sys.argv[1]) as store:
        messages = TurnledgerHistory.open(store, sys.argv[2]).messages()
        print(json.dumps(ModelMessagesTypeAdapter.dump_python(messages, mode="json"),
                         sort_keys=True))
