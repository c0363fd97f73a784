"""ADR-0001 / STYLE 1: the domain layer imports no other unit and no I/O library."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

DOMAIN = Path(__file__).resolve().parents[2] / "turnledger" / "domain"
FORBIDDEN = (
    "eventsourcing", "sqlite3", "psycopg", "psycopg_pool", "msgpack", "cattrs", "socket",
    "tomllib", "pathlib", "io", "os", "shutil", "tempfile", "subprocess", "urllib", "http",
    "turnledger.store", "turnledger.projections", "turnledger.replay", "turnledger.cli",
    "turnledger.profiles",
)
FORBIDDEN_CALLS = ("open",)


def _calls(path: Path) -> set[str]:
    """Names of the builtins in FORBIDDEN_CALLS that the module calls (``open(...)``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in FORBIDDEN_CALLS
    }


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


@pytest.mark.parametrize("path", sorted(DOMAIN.glob("*.py")), ids=lambda p: p.name)
def test_domain_module_opens_no_file(path: Path) -> None:
    """A domain module reads no file: profile files are read by `turnledger.profiles`."""
    assert set() == _calls(path)


def test_layering_check_catches_file_io(tmp_path: Path) -> None:
    """The two checks above see a file read and an I/O import (they can fail)."""
    module = tmp_path / "reader.py"
    module.write_text("import tomllib\nfrom pathlib import Path\nopen('x')\n", encoding="utf-8")
    assert {"open"} == _calls(module)
    assert {"tomllib", "pathlib"} <= _imports(module)
