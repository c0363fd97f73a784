"""Baseline for `benchmarks.session`: a plain `eventsourcing` application, library defaults.

One `Conversation` aggregate per session; ``append_message`` triggers a ``MessageAppended``
event carrying the same fields as turnledger's (``position``, the message as a plain dict,
``original_chars``). The application is `eventsourcing.application.Application` with its
default mapper and JSON transcoder, no compressor, no cipher, no snapshots: what a user of the
library would write first. Configuration goes through the ``env`` argument only.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from typing import Any

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event

from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ConversationMessage,
    ToolResults,
)

__all__ = [
    "Conversation",
    "ConversationApp",
    "message_as_dict",
    "open_postgres_baseline",
    "open_sqlite_baseline",
]


class Conversation(Aggregate):
    """A session as a library aggregate: the messages in a list, one event per message."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    @event("MessageAppended")
    def append_message(
        self, position: int, message: dict[str, Any], original_chars: int | None
    ) -> None:
        self.messages.append(message)


class ConversationApp(Application[Any]):
    """The library's `Application` unchanged (default JSON transcoder)."""


def message_as_dict(message: ConversationMessage) -> dict[str, Any]:
    """The message's data as JSON-able dict (what the baseline event carries)."""
    match message:
        case Chat(message=m):
            return {
                "type": "chat",
                "role": m.role,
                "content": m.content,
                "attachments": list(m.attachments),
                "synthetic": m.synthetic,
            }
        case AssistantToolCalls(text=text, tool_calls=calls, reasoning_content=reasoning):
            return {
                "type": "assistant_tool_calls",
                "text": text,
                "tool_calls": [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls
                ],
                "reasoning_content": reasoning,
            }
        case ToolResults(results=results):
            return {
                "type": "tool_results",
                "results": [
                    {
                        "tool_call_id": r.tool_call_id,
                        "content": r.content,
                        "tool_name": r.tool_name,
                        "attachments": list(r.attachments),
                    }
                    for r in results
                ],
            }
    raise TypeError(f"not a conversation message: {type(message).__name__}")


def open_sqlite_baseline(path: str) -> ConversationApp:
    """The baseline application on a SQLite file (the library's WAL setup)."""
    return ConversationApp(
        env={
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": path,
            "CREATE_TABLE": "y",
        }
    )


def open_postgres_baseline(settings: Mapping[str, str]) -> ConversationApp:
    """The baseline application on PostgreSQL; ``settings`` are the library's POSTGRES_* keys
    (the schema must exist)."""
    env = {"PERSISTENCE_MODULE": "eventsourcing.postgres", "CREATE_TABLE": "y"}
    env.update(settings)
    return ConversationApp(env=env)


if __name__ == "__main__":  # a smoke check: one save, one read
    from turnledger.domain.messages import ChatMessage

    with tempfile.TemporaryDirectory() as tmp:
        app = open_sqlite_baseline(f"{tmp}/baseline.db")
        conversation = Conversation()
        conversation.append_message(0, message_as_dict(Chat(ChatMessage.user("hi"))), None)
        app.save(conversation)
        print(app.repository.get(conversation.id).messages)
        app.close()
