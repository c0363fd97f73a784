"""The names of the transcript formats `turnledger import` and `export` read and write.

Apart from their codecs (`turnledger.replay.transcripts`) so that the command line's parser
lists them without loading any codec (``turnledger --help`` stays fast, issue 20).
"""

from __future__ import annotations

from typing import Final

__all__ = ["AUTO", "FORMATS"]

FORMATS: Final = ("openai", "anthropic", "responses", "bedrock", "gemini")
"""Every transcript format, in the order the codecs are listed."""
AUTO: Final = "auto"
"""The format name that lets each line say its own format (`detect_format`)."""
