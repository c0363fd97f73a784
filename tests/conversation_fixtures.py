"""Every recorded conversation of the fixtures, with its format (issue 21).

``tests/fixtures/conversations/*.jsonl`` hold hand-written conversations of every block type;
``tests/fixtures/public/*.json`` hold public recordings (sources in its README).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import turnledger as tl
from turnledger.providers import (
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
)

FIXTURES = Path(__file__).parent / "fixtures"
IMPORTERS: dict[str, Callable[[Any], list[tl.ConversationMessage]]] = {
    "openai": from_openai_chat,
    "anthropic": from_anthropic,
    "responses": from_openai_responses,
}
EXPORTERS: dict[str, Callable[[Any], Any]] = {
    "openai": to_openai_chat,
    "anthropic": to_anthropic,
    "responses": to_openai_responses,
}
NATIVE_API = {"openai": "openai_chat", "anthropic": "anthropic", "responses": "openai_responses"}


def conversations() -> list[tuple[str, str, Any]]:
    """(name, format, the recorded JSON value) of every fixture conversation."""
    found: list[tuple[str, str, Any]] = []
    for path in sorted((FIXTURES / "conversations").glob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            found.append((f"{path.stem}:{number}", path.stem, json.loads(line)))
    for path in sorted((FIXTURES / "public").glob("*.json")):
        fmt = path.stem.split("_")[0]
        found.append((path.stem, fmt, json.loads(path.read_text(encoding="utf-8"))))
    return found


def public() -> list[tuple[str, str, Any]]:
    """The public recordings alone."""
    return [c for c in conversations() if ":" not in c[0]]
