"""MkDocs hook: publish the repository's ADR/ folder as the site's adr/ section.

The decision records live beside the code (ADR/, where the index and every record link each
other by file name), not under docs/; this hook adds each of them to the build as a page under
adr/, so the site shows them and strict mode checks their links like any other page's. Only
the index (adr/README.md) is in the navigation; the records are reached from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

ADR_DIR = Path(__file__).resolve().parents[2] / "ADR"


def on_files(files: Files, config: Any) -> Files:
    """Add ADR/*.md as adr/*.md (the index in the navigation, the records outside it)."""
    for path in sorted(ADR_DIR.glob("*.md")):
        inclusion = (InclusionLevel.INCLUDED if path.name == "README.md"
                     else InclusionLevel.NOT_IN_NAV)
        files.append(File.generated(config, f"adr/{path.name}", abs_src_path=str(path),
                                    inclusion=inclusion))
    return files
