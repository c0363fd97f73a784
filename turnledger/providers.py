"""Provider formats, public (ADR-0101): see `turnledger.domain.providers` (pure, no I/O).

OpenAI Chat Completions ``messages``, Anthropic ``system`` + ``messages`` and OpenAI Responses
input items, both directions, exact round trips; and the request bodies: which APIs a body can
be built for (`APIS`), a request's messages as one of them accepts them (`fit_messages`) and
what a body left out (`LeftOut`); a provider's usage read into one form (`Usage`, for
`Session.record_usage`).
"""

from turnledger.domain.bodies import APIS, LeftOut, fit_messages
from turnledger.domain.providers import (
    TranscriptError,
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
)
from turnledger.domain.usage import USAGE_APIS, Usage

__all__ = [
    "APIS",
    "USAGE_APIS",
    "LeftOut",
    "TranscriptError",
    "Usage",
    "fit_messages",
    "from_anthropic",
    "from_openai_chat",
    "from_openai_responses",
    "to_anthropic",
    "to_openai_chat",
    "to_openai_responses",
]
