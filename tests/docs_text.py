"""Where the documentation's text lives: README.md and the pages under docs/ (issue 34 moved
most of the README into docs/; the tests that run an example find it by its heading)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADING = re.compile(r"^(#+) (.*)$")


def pages() -> list[Path]:
    """README.md, then every Markdown page under docs/, in path order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _headings(text: str) -> list[tuple[int, int, str]]:
    """(offset of the line, level, title) of each heading outside a fenced block."""
    found, fenced, offset = [], False, 0
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line.rstrip("\n"))):
            found.append((offset, len(match[1]), match[2]))
        offset += len(line)
    return found


def section(heading: str) -> tuple[Path, str]:
    """The page holding the one heading that starts with ``heading`` (its leading #s ignored)
    and the text under it, up to the next heading of its level or above."""
    title = heading.lstrip("#").strip()
    hits = []
    for path in pages():
        text = path.read_text(encoding="utf-8")
        heads = _headings(text)
        for i, (offset, level, name) in enumerate(heads):
            if name.startswith(title):
                end = next((o for o, lv, _ in heads[i + 1:] if lv <= level), len(text))
                start = text.index("\n", offset) + 1
                hits.append((path, text[start:end]))
    assert 1 == len(hits), f"{heading!r}: {len(hits)} headings start so in README.md and docs/"
    return hits[0]
