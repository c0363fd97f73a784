"""The names of the transcript formats `turnledger import` and `export` read and write.

Apart from their codecs (`turnledger.replay.transcripts`) so that the command line's parser
lists them without loading any codec (``turnledger --help`` stays fast, issue 20).
"""

from __future__ import annotations

from typing import Final

__all__ = ["AGENT_FORMATS", "AUTO", "CLAUDE_CODE", "CODEX", "FORMATS", "GEMINI_CLI"]

FORMATS: Final = ("openai", "anthropic", "responses", "bedrock", "gemini")
"""Every transcript format, in the order the codecs are listed."""
AUTO: Final = "auto"
"""The format name that lets each line say its own format (`detect_format`)."""
CLAUDE_CODE: Final = "claude-code"
CODEX: Final = "codex"
GEMINI_CLI: Final = "gemini-cli"
AGENT_FORMATS: Final = (CLAUDE_CODE, CODEX, GEMINI_CLI)
"""The coding agents' transcripts, read as whole files of events (`import` only: nothing
writes them back; `turnledger.replay.agent_transcripts`)."""
