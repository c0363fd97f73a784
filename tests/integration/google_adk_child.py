"""Child process: restore an ADK conversation and print its window as genai JSON.

``python google_adk_child.py STORE_URL ADK_SESSION_ID``; used by test_integration_google_adk.py.
"""

from __future__ import annotations

import json
import sys

import turnledger as tl
from turnledger.integrations.google_adk import TurnledgerCallback

if __name__ == "__main__":
    with tl.open_store(sys.argv[1]) as store:
        contents = TurnledgerCallback(store).contents(sys.argv[2])
        print(json.dumps([c.model_dump(mode="json") for c in contents]))
