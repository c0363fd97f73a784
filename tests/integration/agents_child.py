"""Child process: restore a `TurnledgerSession` and print its ``get_items()`` as JSON.

``python agents_child.py STORE_URL SESSION_NAME``; used by test_openai_agents.py to prove a
session is restored, byte for byte, in a new process.
"""

from __future__ import annotations

import asyncio
import json
import sys

import turnledger as tl
from turnledger.integrations.openai_agents import TurnledgerSession


async def main(url: str, name: str) -> None:
    with tl.open_store(url) as store:
        session = TurnledgerSession(name, store)
        print(json.dumps(await session.get_items(), sort_keys=True))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
