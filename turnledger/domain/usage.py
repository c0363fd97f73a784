"""The usage a provider returns with an answer, read into one form (issue 35).

Providers count the same things under different names and sums:

- OpenAI Chat Completions: ``prompt_tokens`` (cached included),
  ``prompt_tokens_details.cached_tokens`` and ``.cache_write_tokens``, ``completion_tokens``.
- OpenAI Responses: ``input_tokens`` (cached included), ``input_tokens_details.cached_tokens``
  and ``.cache_write_tokens``, ``output_tokens``.
- Anthropic Messages: ``input_tokens`` (the tokens *after* the last cache breakpoint only),
  ``cache_read_input_tokens``, ``cache_creation_input_tokens``, ``output_tokens``.
- Gemini (``usage_metadata``): ``prompt_token_count`` (cached included),
  ``cached_content_token_count``, ``candidates_token_count`` and ``thoughts_token_count``
  (camelCase as the REST API writes it, or snake_case as the ``google-genai`` types do).

`Usage.of` reads any of them, as the SDK's object (anything with ``model_dump()``) or as a
dict, into `Usage`, whose ``input_tokens`` always counts every input token billed. A shape it
does not know, a count that is not a whole number of zero or more, or cached tokens above the
input are refused (`InvalidUsage`) naming what was wrong: a usage is recorded as the provider
billed it or not at all. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from turnledger.domain.errors import InvalidUsage

__all__ = ["USAGE_APIS", "Usage", "langchain_usage"]


OPENAI_CHAT: Final = "openai-chat"
OPENAI_RESPONSES: Final = "openai-responses"
ANTHROPIC: Final = "anthropic"
GEMINI: Final = "gemini"
LANGCHAIN: Final = "langchain"
PYDANTIC_AI: Final = "pydantic-ai"
USAGE_APIS: Final = (OPENAI_CHAT, OPENAI_RESPONSES, ANTHROPIC, GEMINI, LANGCHAIN, PYDANTIC_AI)
"""The usage shapes a `Usage` is read from, by the name `Usage.api` records: `Usage.of` reads
the providers' four; ``langchain`` (an ``AIMessage.usage_metadata``) and ``pydantic-ai`` (a
``ModelResponse.usage``) are the frameworks' normalized forms, whose counts already mean what
`Usage`'s do, read by their integrations (`turnledger.integrations`)."""


@attrs.frozen
class Usage:
    """One answer's usage, in one form: ``input_tokens`` counts every input token billed,
    ``cache_read_tokens`` of them served from the provider's cache and ``cache_write_tokens``
    written to it; ``output_tokens`` counts the output (reasoning included). ``api`` names the
    shape it was read from (`USAGE_APIS`)."""

    api: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __attrs_post_init__(self) -> None:
        if self.api not in USAGE_APIS:
            raise InvalidUsage(f"usage api must be one of {', '.join(USAGE_APIS)}, "
                               f"got {self.api!r}")
        for name in ("input_tokens", "output_tokens", "cache_read_tokens",
                     "cache_write_tokens"):
            _count(name, getattr(self, name))
        cached = self.cache_read_tokens + self.cache_write_tokens
        if cached > self.input_tokens:
            raise InvalidUsage(f"usage says {cached} input tokens read from or written to the "
                               f"cache, more than the {self.input_tokens} input tokens billed")

    @property
    def cache_hit_rate(self) -> float:
        """The share of the input tokens read from the cache (0.0 for no input)."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else 0.0

    @classmethod
    def of(cls, usage: object) -> Usage:
        """``usage`` as the provider returned it (an SDK object or its dict), or a `Usage`.

        The shape is told by its keys: ``prompt_tokens`` is OpenAI Chat; ``cache_read_input_
        tokens`` or ``cache_creation_input_tokens`` Anthropic; ``input_tokens_details`` or
        ``total_tokens`` beside ``input_tokens`` Responses; ``input_token_details`` or
        ``output_token_details`` LangChain's ``usage_metadata`` (`langchain_usage`);
        ``prompt_token_count`` / ``promptTokenCount`` Gemini. ``input_tokens`` and
        ``output_tokens`` alone mean the same in Responses and Anthropic when nothing was
        cached, and are read as Responses.
        `InvalidUsage` for anything else."""
        if isinstance(usage, Usage):
            return usage
        fields = _as_dict(usage)
        if "prompt_tokens" in fields:
            return _openai_chat(fields)
        if "cache_read_input_tokens" in fields or "cache_creation_input_tokens" in fields:
            return _anthropic(fields)
        if "input_token_details" in fields or "output_token_details" in fields:
            return langchain_usage(fields)
        if "input_tokens" in fields:
            return _responses(fields)
        if "prompt_token_count" in fields or "promptTokenCount" in fields:
            return _gemini(fields)
        keys = ", ".join(sorted(map(str, fields))) or "none"
        raise InvalidUsage("usage is no OpenAI Chat, Responses, Anthropic or Gemini usage "
                           f"(keys: {keys})")


def _as_dict(usage: object) -> Mapping[str, Any]:
    """The usage's fields: a mapping as it is, an SDK model by its public ``model_dump``."""
    if isinstance(usage, Mapping):
        return usage
    dump = getattr(usage, "model_dump", None)
    if callable(dump):
        dumped = dump()
        if isinstance(dumped, Mapping):
            return dumped
    raise InvalidUsage(f"usage must be a provider's usage object or a dict, got "
                       f"{type(usage).__name__}")


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidUsage(f"usage {name} must be a whole number of 0 or more, got {value!r}")
    return value


def _get(fields: Mapping[str, Any], name: str, *, required: bool = True) -> int:
    """The count ``name``; a missing or null optional count is 0."""
    value = fields.get(name)
    if value is None:
        if required:
            raise InvalidUsage(f"usage has no {name}")
        return 0
    return _count(name, value)


def _details(fields: Mapping[str, Any], name: str, key: str) -> int:
    """``fields[name][key]`` (a details object), 0 when it or the key is missing or null."""
    details = fields.get(name)
    if details is None:
        return 0
    if not isinstance(details, Mapping):
        raise InvalidUsage(f"usage {name} must be an object, got {type(details).__name__}")
    return _get(details, key, required=False)


def _openai_chat(fields: Mapping[str, Any]) -> Usage:
    return Usage(
        api=OPENAI_CHAT,
        input_tokens=_get(fields, "prompt_tokens"),
        output_tokens=_get(fields, "completion_tokens"),
        cache_read_tokens=_details(fields, "prompt_tokens_details", "cached_tokens"),
        cache_write_tokens=_details(fields, "prompt_tokens_details", "cache_write_tokens"),
    )


def _responses(fields: Mapping[str, Any]) -> Usage:
    return Usage(
        api=OPENAI_RESPONSES,
        input_tokens=_get(fields, "input_tokens"),
        output_tokens=_get(fields, "output_tokens"),
        cache_read_tokens=_details(fields, "input_tokens_details", "cached_tokens"),
        cache_write_tokens=_details(fields, "input_tokens_details", "cache_write_tokens"),
    )


def _anthropic(fields: Mapping[str, Any]) -> Usage:
    read = _get(fields, "cache_read_input_tokens", required=False)
    write = _get(fields, "cache_creation_input_tokens", required=False)
    return Usage(
        api=ANTHROPIC,
        input_tokens=_get(fields, "input_tokens") + read + write,
        output_tokens=_get(fields, "output_tokens"),
        cache_read_tokens=read,
        cache_write_tokens=write,
    )


def langchain_usage(metadata: Mapping[str, Any]) -> Usage:
    """A LangChain ``AIMessage.usage_metadata``. Its ``input_tokens`` is the sum of every input
    token type (LangChain's integrations add Anthropic's cache reads and writes to it) and
    ``input_token_details`` breaks it down: ``cache_read``, and the cache writes as
    ``cache_creation``, or (``langchain-anthropic``, which splits them by lifetime) as
    ``ephemeral_5m_input_tokens`` and ``ephemeral_1h_input_tokens`` with ``cache_creation`` 0.
    """
    details = metadata.get("input_token_details") or {}
    if not isinstance(details, Mapping):
        raise InvalidUsage("usage_metadata input_token_details must be a dict, got "
                           f"{type(details).__name__}")
    written = _get(details, "cache_creation", required=False) or sum(
        _get(details, key, required=False)
        for key in ("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"))
    return Usage(
        api=LANGCHAIN,
        input_tokens=_get(metadata, "input_tokens"),
        output_tokens=_get(metadata, "output_tokens"),
        cache_read_tokens=_get(details, "cache_read", required=False),
        cache_write_tokens=written,
    )


def _gemini(fields: Mapping[str, Any]) -> Usage:
    camel = "promptTokenCount" in fields

    def get(snake: str, *, required: bool = False) -> int:
        name = _camel(snake) if camel else snake
        return _get(fields, name, required=required)

    return Usage(
        api=GEMINI,
        input_tokens=get("prompt_token_count", required=True),
        output_tokens=get("candidates_token_count") + get("thoughts_token_count"),
        cache_read_tokens=get("cached_content_token_count"),
    )


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.title() for part in rest)
