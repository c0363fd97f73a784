"""Stored text never reaches the terminal as control characters (issue 9.9).

Message text with ESC sequences, BEL, backspace, carriage return, DEL, C1 controls (CSI
``\\x9b``) and bidi overrides is shown escaped (``\\x1b``, ``\\u202e``) by every human-readable
output — the timeline, a view, the session list — and unchanged by ``--json``.
"""

from __future__ import annotations

import json
import re

from tests.backends import Target
from tests.e2e.conftest import Cli
from turnledger import AssistantToolCalls, ChatMessage, ToolCall, ToolResult, ToolResults
from turnledger.store.session import open_store

HOSTILE = "\x1b[2J\x1b]0;pwned\x07 red\x1b[31m!\x1b[0m \x08\r\x7f \x9b31m \x85 \u202eevil"
RAW_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _record(target: Target) -> str:
    with open_store(target.url) as store:
        session = store.start_session()
        session.append(ChatMessage.user(f"user {HOSTILE}"))
        session.append(AssistantToolCalls(f"calling {HOSTILE}", (ToolCall("c1", "sh"),)))
        session.append(ToolResults((ToolResult("c1", f"output {HOSTILE}", "sh"),)))
        session.append(ChatMessage.assistant(f"answer {HOSTILE}"))
        session.prepare_request()
        return session.id


def test_e6_human_outputs_escape_control_characters(sqlite_cli: Cli) -> None:
    """replay (timeline and views) and sessions print no raw C0/C1/bidi control character."""
    session_id = _record(sqlite_cli.target)
    outputs = {
        "timeline": sqlite_cli.ok("replay", session_id),
        "chat view": sqlite_cli.ok("replay", session_id, "--view", "chat"),
        "conversation view": sqlite_cli.ok("replay", session_id, "--view", "conversation"),
        "sessions": sqlite_cli.ok("sessions"),
    }
    found = {name: sorted(set(RAW_CONTROLS.findall(text))) for name, text in outputs.items()}
    assert {name: [] for name in outputs} == found
    assert "\\x1b[31m" in outputs["chat view"]
    assert "\\u202eevil" in outputs["chat view"]
    assert "\\x1b[2J\\x1b]0;pwned\\x07" in outputs["timeline"]


def test_e6_json_outputs_keep_stored_text_unchanged(sqlite_cli: Cli) -> None:
    """--json shows the stored text exactly (JSON escapes it; parsing gives it back)."""
    session_id = _record(sqlite_cli.target)
    messages = sqlite_cli.chat_view(session_id)
    assert f"user {HOSTILE}" == messages[0]["content"]
    assert f"answer {HOSTILE}" == messages[-1]["content"]
    entries = json.loads(sqlite_cli.ok("replay", session_id, "--json"))
    appended = [e for e in entries if e["type"] == "MessageAppended"]
    assert f"answer {HOSTILE}" == appended[-1]["data"]["message"]["message"]["content"]
