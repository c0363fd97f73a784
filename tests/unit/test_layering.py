"""ADR-0001 / STYLE 1: the domain layer imports no other unit and no I/O library."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

DOMAIN = Path(__file__).resolve().parents[2] / "turnledger" / "domain"
FORBIDDEN = (
    "eventsourcing", "sqlite3", "psycopg", "psycopg_pool", "msgpack", "cattrs", "socket",
    "turnledger.store", "turnledger.projections", "turnledger.replay", "turnledger.cli",
)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(DOMAIN.glob("*.py")), ids=lambda p: p.name)
def test_domain_module_imports_no_io_and_no_outer_unit(path: Path) -> None:
    """A domain module may import the standard library, attrs and other domain modules only."""
    offending = sorted(
        name for name in _imports(path)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    )
    assert [] == offending
