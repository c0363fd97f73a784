"""pydantic-ai messages ⇄ turnledger messages, checked to come back (issue 22, ADR-0081).

Needs ``pip install 'turnledger[pydantic-ai]'`` (pydantic-ai-slim). Re-exported by
`turnledger.integrations.pydantic_ai`, whose history uses them.

``ModelRequest`` / ``ModelResponse`` go through the provider format
`turnledger.domain.formats.pydantic_ai`; this module dumps and validates the objects. "Equal" is
pydantic-ai's own JSON form (``ModelMessagesTypeAdapter``): a message that would not come back
with the same JSON is refused by name (`InvalidMessage`), never stored changed or dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from turnledger.domain.errors import InvalidMessage
from turnledger.domain.formats import Json, Piece
from turnledger.domain.formats.pydantic_ai import (
    from_pydantic_ai_message,
    pydantic_ai_groups,
    pydantic_ai_message_json,
    to_pydantic_ai_json,
)
from turnledger.domain.messages import ChatMessage, ConversationMessage
from turnledger.domain.usage import PYDANTIC_AI, Usage
from turnledger.integrations import missing_extra

try:
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
    )
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise missing_extra("pydantic_ai", "pydantic-ai", "pydantic-ai") from error

__all__ = [
    "Built",
    "checked_from_pydantic_ai",
    "fresh_message",
    "from_pydantic_ai",
    "parts_json",
    "to_pydantic_ai",
    "usage_of",
    "validated",
]

Built = tuple[tuple[Piece, ...], ModelMessage]
"""Pieces, and the message their conversion's check validated (`BuiltOnce.seed`)."""


def _dump(messages: Sequence[ModelMessage], *, compact: bool = False) -> list[Json]:
    """pydantic-ai's own JSON form of ``messages`` (``compact``: without null fields)."""
    dumped: list[Json] = ModelMessagesTypeAdapter.dump_python(
        list(messages), mode="json", exclude_none=compact
    )
    return dumped


def from_pydantic_ai(messages: Iterable[ModelMessage]) -> list[ConversationMessage]:
    """The turnledger messages of pydantic-ai messages (module doc), each checked to come back.

    "The same" is pydantic-ai's own save and load: a deprecated ``RetryPromptPart`` comes back
    as the part pydantic-ai loads it as. Raises `InvalidMessage` naming the message (and part)
    when one is not a pydantic-ai message, holds a part kind turnledger has no form for, or
    would not come back with the same JSON; nothing is converted with a loss.
    """
    return checked_from_pydantic_ai(messages)[0]


def checked_from_pydantic_ai(
    messages: Iterable[ModelMessage],
) -> tuple[list[ConversationMessage], list[Built]]:
    """`from_pydantic_ai`, with the messages its check validated (`BuiltOnce.seed`)."""
    messages = list(messages)
    if all(isinstance(m, ModelRequest | ModelResponse) for m in messages):
        try:
            # The messages as given, when they come back as they are (`_converted`); else as
            # pydantic-ai itself saves and loads them (a legacy part loads as its successor).
            return _converted(messages)
        except Exception:  # said below, of the messages as pydantic-ai loads them
            pass
    try:
        loaded = ModelMessagesTypeAdapter.validate_json(
            ModelMessagesTypeAdapter.dump_json(messages))
    except Exception as error:  # pydantic's errors name the bad field
        raise InvalidMessage(f"not pydantic-ai messages: {error}") from None
    return _converted(loaded)


def _converted(messages: list[ModelMessage]) -> tuple[list[ConversationMessage], list[Built]]:
    """`checked_from_pydantic_ai` of ``messages`` as they are: each converted from its compact
    JSON (no null fields), checked to come back with its full JSON as `to_pydantic_ai` builds
    it. When the built JSON is the compact one, no validation is needed but pydantic-ai's own
    load of the compact JSON (only for the messages that left null fields out)."""
    try:
        compact, full = _dump(messages, compact=True), _dump(messages)
    except Exception as error:  # pydantic's errors name the bad field
        raise InvalidMessage(f"not pydantic-ai messages: {error}") from None
    out: list[ConversationMessage] = []
    checked: list[Built] = []
    same: dict[int, tuple[Piece, ...]] = {}  # the messages whose window JSON is their compact
    for i, raw in enumerate(compact):
        converted = from_pydantic_ai_message(raw, f"messages[{i}]")
        # Grouped as a window groups them: a window's provider messages carry these very
        # items (`BuiltOnce`), so no round trip through provider messages is needed.
        groups = pydantic_ai_groups(converted)
        built = [pydantic_ai_message_json(group) for group in groups]
        if built == [raw]:
            same[i] = groups[0]
        else:  # checked whole (a null kept, say)
            back = validated(built)
            if _dump(back) != [full[i]]:
                raise InvalidMessage(f"messages[{i}] ({raw.get('kind')}) would not come back "
                                     "with the same JSON; it was not recorded")
            checked.append((groups[0], back[0]))
        out.extend(converted)
    dropped = [i for i in same if compact[i] != full[i]]  # their null fields left out
    if dropped:
        loaded = validated([compact[i] for i in dropped])
        for i, message, dumped in zip(dropped, loaded, _dump(loaded), strict=True):
            if dumped != full[i]:
                raise InvalidMessage(f"messages[{i}] ({compact[i].get('kind')}) would not come "
                                     "back with the same JSON; it was not recorded")
            checked.append((same[i], message))
    return out, checked


def validated(out: list[Json]) -> list[ModelMessage]:
    """The pydantic-ai messages of their JSON ``out`` (`InvalidMessage` when it makes none)."""
    try:
        return ModelMessagesTypeAdapter.validate_json(json.dumps(out))
    except ValueError as error:
        raise InvalidMessage(f"the recorded messages do not make pydantic-ai messages: "
                             f"{error}") from None


def to_pydantic_ai(history: Iterable[ChatMessage | ConversationMessage]) -> list[ModelMessage]:
    """The pydantic-ai messages of a turnledger window or history (the inverse of
    `from_pydantic_ai`); the breadcrumb is a user prompt of the request it opens. Messages
    another runtime recorded come back as the plain parts of their role."""
    return validated(to_pydantic_ai_json(history))


def fresh_message(message: ModelMessage) -> ModelMessage:
    """A copy of a cached message with a parts list of its own (pydantic-ai replaces a
    request's fields, never edits a part in place): the dataclass instance's fields copied,
    ~3x cheaper than `copy.copy` (1.2 µs against 4.5 µs a message, per model call)."""
    copied: ModelMessage = object.__new__(type(message))
    copied.__dict__.update(message.__dict__)
    copied.parts = list(message.parts)  # type: ignore[assignment]
    return copied


def parts_json(message: ModelMessage) -> list[Json]:
    """The JSON of ``message``'s parts, as pydantic-ai dumps them."""
    return _dump([message])[0]["parts"]  # type: ignore[no-any-return]


def usage_of(response: ModelResponse) -> Usage | None:
    """The usage of ``response`` (pydantic-ai's counts mean what `Usage`'s do: the input with
    the cached tokens, the output with the reasoning); None when pydantic-ai did not measure
    it (``unmeasured_requests``) or it counts no token at all."""
    usage = response.usage
    if usage.unmeasured_requests or not (usage.input_tokens or usage.output_tokens):
        return None
    return Usage(PYDANTIC_AI, usage.input_tokens, usage.output_tokens,
                 usage.cache_read_tokens, usage.cache_write_tokens)
