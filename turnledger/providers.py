"""Provider conversions, public: see `turnledger.domain.providers` (pure, no I/O).

OpenAI Chat Completions ``messages``, Anthropic ``system`` + ``messages`` and OpenAI Responses
input items, both directions, exact round trips; re-exported from `turnledger` too.
"""

from turnledger.domain.providers import (
    TranscriptError,
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
)

__all__ = [
    "TranscriptError",
    "from_anthropic",
    "from_openai_chat",
    "from_openai_responses",
    "to_anthropic",
    "to_openai_chat",
    "to_openai_responses",
]
