"""Issue 34: ADR/README.md is an index a reader can trust — it opens with the ~15 decisions
that shape the architecture, then lists every record in ADR/ (the documentation site publishes
the records but keeps only the index in its navigation, so nothing else notices a missing row)."""

from __future__ import annotations

import re
from pathlib import Path

ADR = Path(__file__).resolve().parents[2] / "ADR"
INDEX = ADR / "README.md"


def _section(title: str) -> str:
    return INDEX.read_text(encoding="utf-8").split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_i34_the_adr_index_lists_every_record_once() -> None:
    """Each ADR/NNNN-*.md has exactly one row in the full table, and each row names a file."""
    rows = re.findall(r"^\| \[(\d{4})\]\((\S+?\.md)\) \|", _section("Every decision"), re.MULTILINE)
    files = sorted(path.name for path in ADR.glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert files == sorted(name for _, name in rows)
    assert [name[:4] for name in sorted(name for _, name in rows)] == sorted(n for n, _ in rows)


def test_i34_the_adr_index_opens_with_the_decisions_that_shape_the_architecture() -> None:
    """The opening list names 12-18 records, each once, each a file of ADR/, each with why."""
    items = re.findall(r"^- \[(\d{4})\]\((\S+?\.md)\) — (.+)$",
                       _section("The decisions that shape the architecture"), re.MULTILINE)
    assert 12 <= len(items) <= 18, items
    assert len(items) == len({number for number, _, _ in items})
    assert [] == [name for _, name, _ in items if not (ADR / name).is_file()]
    assert [] == [number for number, _, why in items if len(why) < 40]
