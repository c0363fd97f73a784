"""genai contents ⇄ turnledger messages, checked to come back (issue 22, ADR-0081).

Needs ``pip install 'turnledger[google-adk]'``. Re-exported by
`turnledger.integrations.google_adk`, whose callback uses them.

``google.genai.types.Content`` goes through the provider format `turnledger.domain.formats.genai`;
this module dumps and validates the objects. A content that would not come back with the same
JSON (pydantic's ``model_dump``, without null fields) is refused (`InvalidMessage`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from turnledger.domain.errors import InvalidMessage
from turnledger.domain.formats import Json, Piece
from turnledger.domain.formats.genai import (
    GenaiCalls,
    from_genai_content,
    genai_content_json,
    genai_groups,
    to_genai_json,
)
from turnledger.domain.messages import ChatMessage, ConversationMessage, ToolCall
from turnledger.integrations import missing_extra

try:
    from google.genai import types
    from pydantic import BaseModel
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise missing_extra("google_adk", "google-adk", "google-adk") from error

__all__ = [
    "Built",
    "checked_from_genai",
    "dump_content",
    "fresh_content",
    "from_genai",
    "to_genai",
    "validated",
]

Built = tuple[tuple[Piece, ...], types.Content]
"""Pieces, and the content their conversion's check validated (`BuiltOnce.seed`)."""


def dump_content(content: types.Content) -> Json:
    """The JSON of ``content`` as it is compared: pydantic's, without null fields."""
    dumped: Json = content.model_dump(mode="json", exclude_none=True)
    return dumped


def from_genai(
    contents: Iterable[types.Content], *, unanswered: Iterable[ToolCall] = (), seed: str = ""
) -> list[ConversationMessage]:
    """The turnledger messages of genai contents, each checked to come back with the same
    JSON (``unanswered``, ``seed``: `from_genai_json`; the callback's seed is the session and
    its next log position). Raises `InvalidMessage` naming the content (and part) when one is
    not a ``Content``, has no turnledger form or would not come back; nothing is converted
    with a loss."""
    return checked_from_genai(contents, unanswered, seed)[0]


def checked_from_genai(
    contents: Iterable[types.Content], unanswered: Iterable[ToolCall] = (), seed: str = ""
) -> tuple[list[ConversationMessage], list[Built]]:
    """`from_genai`, with the contents its check validated (`BuiltOnce.seed`). Each content
    is checked as a window groups its messages (`genai_groups`): a window's provider messages
    carry these very items, so no round trip through provider messages is needed."""
    calls = GenaiCalls(unanswered, seed)
    out: list[ConversationMessage] = []
    checked: list[Built] = []
    for i, content in enumerate(contents):
        where = f"contents[{i}]"
        if not isinstance(content, types.Content):
            raise InvalidMessage(f"{where}: not a google.genai Content: "
                                 f"{type(content).__name__}")
        raw = dump_content(content)
        converted = from_genai_content(raw, calls, where)
        groups = genai_groups(converted)
        back = validated([genai_content_json(group) for group in groups])
        if [dump_content(c) for c in back] != [raw]:
            raise InvalidMessage(f"{where} would not come back with the same JSON; it was "
                                 "not recorded")
        checked.append((groups[0], back[0]))
        out.extend(converted)
    return out, checked


def validated(out: list[Json]) -> list[types.Content]:
    """The genai contents of their JSON ``out`` (`InvalidMessage` when it makes none)."""
    try:
        return [types.Content.model_validate_json(json.dumps(raw)) for raw in out]
    except ValueError as error:
        raise InvalidMessage(f"the recorded messages do not make genai contents: "
                             f"{error}") from None


def to_genai(history: Iterable[ChatMessage | ConversationMessage]) -> list[types.Content]:
    """The genai contents of a turnledger window or history (the inverse of `from_genai`);
    the breadcrumb is a text part of the user content it opens; a system message (recorded by
    another runtime) is a user text part, since contents have no system role."""
    return validated(to_genai_json(history))


def fresh_content(content: types.Content) -> types.Content:
    """A copy of a cached content for a request (pydantic's public ``model_copy``): ADK and
    its model classes edit a request's contents, their parts and the parts' sub-models
    (function_call, inline_data, ...) in place, so those are copied one level; their values
    (a text, a call's args) are shared: ADK replaces them, never edits them in place."""
    if content.parts is None:
        return content.model_copy()
    return content.model_copy(update={"parts": [_fresh_part(p) for p in content.parts]})


def _fresh_part(part: types.Part) -> types.Part:
    subs = {name: value.model_copy() for name in part.model_fields_set
            if isinstance(value := getattr(part, name), BaseModel)}
    return part.model_copy(update=subs)
