"""LangChain messages ⇄ turnledger messages, losslessly (issue 10, point 3).

Needs ``pip install 'turnledger[langchain]'`` (langchain-core). Re-exported by
`turnledger.integrations.langchain`, whose history and trimming step use them.

``HumanMessage`` / ``SystemMessage`` / ``AIMessage`` (with ``tool_calls``) / ``ToolMessage``:
the content (a string or a list of content blocks, images included) goes through the OpenAI Chat
Completions provider format (`turnledger.domain.providers`), which keeps every block; every
other field LangChain sets (``id``, ``name``, ``additional_kwargs``, ``response_metadata``,
``usage_metadata``, ``artifact``, ``status``...) is kept verbatim beside it under
``"langchain"``. A message that would not come back equal is refused (`InvalidMessage`), never
stored changed. `usage_of` reads an ``AIMessage``'s ``usage_metadata`` as a `Usage` (issue 35).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from turnledger.domain.errors import InvalidMessage, InvalidUsage
from turnledger.domain.messages import ChatMessage, ConversationMessage
from turnledger.domain.providers import from_openai_chat, to_openai_chat
from turnledger.domain.usage import Usage, langchain_usage
from turnledger.integrations import fresh_json, missing_extra

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise missing_extra("langchain", "langchain-core", "langchain") from error

__all__ = [
    "fresh_message",
    "from_langchain",
    "from_langchain_messages",
    "recorded_id",
    "to_langchain",
    "to_langchain_messages",
    "usage_of",
]

_ROLES: dict[type[BaseMessage], str] = {
    HumanMessage: "user",
    AIMessage: "assistant",
    SystemMessage: "system",
    ToolMessage: "tool",
}
_CLASSES = {role: cls for cls, role in _ROLES.items()}
_KEY = "langchain"  # the verbatim LangChain fields, beside the Chat Completions ones


def _openai_form(message: BaseMessage, where: str) -> dict[str, Any]:
    """``message`` as one Chat Completions message plus its other LangChain fields."""
    role = _ROLES.get(type(message))
    if role is None:
        raise InvalidMessage(f"{where}: {type(message).__name__} is not supported (use "
                             "HumanMessage, AIMessage, SystemMessage or ToolMessage)")
    rest = message.model_dump(exclude_defaults=True)
    for key in ("content", "type", "tool_calls", "tool_call_id"):
        rest.pop(key, None)
    raw: dict[str, Any] = {"role": role, "content": message.content}
    if isinstance(message, AIMessage) and message.tool_calls:
        raw["tool_calls"] = [_call_json(call, where) for call in message.tool_calls]
    if isinstance(message, ToolMessage):
        raw["tool_call_id"] = message.tool_call_id
    if rest:
        raw[_KEY] = rest
    return raw


def _call_json(call: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not call.get("id"):
        raise InvalidMessage(f"{where}: a tool call has no id, so no result can answer it")
    arguments = json.dumps(call["args"], ensure_ascii=False)
    return {"id": call["id"], "type": "function",
            "function": {"name": call["name"], "arguments": arguments}}


def from_langchain(message: BaseMessage, *, where: str = "message") -> ConversationMessage:
    """The turnledger message of one LangChain message (module doc).

    Raises `InvalidMessage` for another message class, a tool call without an id, or fields
    that are not JSON; nothing is converted with a loss.
    """
    try:
        raw = json.loads(json.dumps(_openai_form(message, where)))
    except (TypeError, ValueError) as error:
        raise InvalidMessage(f"{where}: a field is not JSON-serialisable: {error}") from None
    converted = from_openai_chat([raw])
    if len(converted) != 1 or to_openai_chat(converted) != [raw]:
        raise InvalidMessage(f"{where}: {type(message).__name__} would not come back equal")
    return converted[0]


def from_langchain_messages(messages: Iterable[BaseMessage]) -> list[ConversationMessage]:
    """`from_langchain` of each message; the error names the index of a bad one."""
    return [from_langchain(m, where=f"messages[{i}]") for i, m in enumerate(messages)]


def _message_of(raw: dict[str, Any]) -> BaseMessage:
    fields = dict(raw.pop(_KEY, None) or {})
    role = raw["role"]
    content = raw.get("content")
    fields["content"] = "" if content is None else content
    if "tool_calls" in raw:
        fields["tool_calls"] = [
            {"id": c["id"], "name": c["function"]["name"],
             "args": json.loads(c["function"]["arguments"] or "{}"), "type": "tool_call"}
            for c in raw["tool_calls"]
        ]
    if role == "tool":
        fields["tool_call_id"] = raw["tool_call_id"]
    message: BaseMessage = _CLASSES[role](**fields)
    return message


def to_langchain_messages(
    history: Iterable[ConversationMessage | ChatMessage],
) -> list[BaseMessage]:
    """The LangChain messages of a turnledger history or chat view (one per provider message:
    a `ToolResults` of two results is two ``ToolMessage``); the breadcrumb is a
    ``HumanMessage``."""
    return [_message_of(raw) for raw in to_openai_chat(history)]


def fresh_message(message: BaseMessage) -> BaseMessage:
    """A copy of ``message`` sharing nothing mutable with it (its content blocks, tool calls
    and other dict or list fields copied), cheaper than building it again; pydantic's
    public ``model_copy`` (only non-empty fields are replaced: they were given, so the copy's
    set fields are the message's)."""
    return message.model_copy(update={
        name: fresh_json(value) for name in type(message).model_fields
        if (value := getattr(message, name)) and type(value) in (dict, list)})


def to_langchain(message: ConversationMessage | ChatMessage) -> BaseMessage:
    """The LangChain message of one turnledger message (`to_langchain_messages`)."""
    converted = to_langchain_messages([message])
    if len(converted) != 1:
        raise InvalidMessage(f"this message is {len(converted)} LangChain messages: use "
                             "to_langchain_messages")
    return converted[0]


def recorded_id(message: ConversationMessage) -> str | None:
    """The LangChain id a recorded message was converted from (None: it had none)."""
    last: str | None = to_openai_chat([message])[-1].get(_KEY, {}).get("id")
    return last


def usage_of(metadata: object) -> Usage | None:
    """An ``AIMessage.usage_metadata`` as a `Usage` (None: the reply has none): read as
    `langchain_usage` reads it (its input total holds the cache counts)."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise InvalidUsage(f"usage_metadata must be a dict, got {type(metadata).__name__}")
    return langchain_usage(metadata)
