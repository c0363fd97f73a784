"""The content blocks of a message, public (ADR-0101): text, images, documents, thinking, the
provider's own tool use and results, and the blocks turnledger does not know (kept verbatim).

A `ChatMessage` holds them in its ``blocks``; `canonical_json` is the JSON text their fields
keep. They live in `turnledger.domain.blocks`.
"""

from turnledger.domain.blocks import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    OpaqueBlock,
    RedactedThinkingBlock,
    ServerToolResult,
    ServerToolUse,
    TextBlock,
    ThinkingBlock,
    canonical_json,
)

__all__ = [
    "ContentBlock",
    "DocumentBlock",
    "ImageBlock",
    "OpaqueBlock",
    "RedactedThinkingBlock",
    "ServerToolResult",
    "ServerToolUse",
    "TextBlock",
    "ThinkingBlock",
    "canonical_json",
]
