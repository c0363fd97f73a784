"""ADR-0008, enforced: a module's own ``__all__`` lists only what other modules import from it.

The public API is `turnledger.__all__` (docs/api.md), the six topic modules of ADR-0101 and
the integrations' modules; every other module is internal, and its ``__all__`` says which of
its names the rest of the package (or its tests) use, so an export nobody uses shows up here
instead of growing the surface (issue 20 point 6). A name counts as used when another module
of the package or a test imports it (``from M import NAME``) or reads it off the module
(``import M as m; m.NAME``).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "turnledger"
PUBLIC = ("turnledger", "turnledger.integrations")
"""The modules whose ``__all__`` is a public surface of its own (ADR-0008)."""
PUBLIC_SUBMODULES = frozenset(f"turnledger.{name}" for name in (
    "audit", "blocks", "errors", "events", "profiles", "providers"))
"""The topic modules ADR-0101 made public: their ``__all__`` is a surface of its own too."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _uses(tree: ast.AST, modules: set[str]) -> set[tuple[str, str]]:
    """``(module, name)`` for every name ``tree`` imports from, or reads off, a module."""
    used: set[tuple[str, str]] = set()
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                used.add((node.module, alias.name))
                submodule = f"{node.module}.{alias.name}"
                if submodule in modules:
                    aliases[alias.asname or alias.name] = submodule
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = aliases.get(node.value.id)
            if module is not None:
                used.add((module, node.attr))
    return used


def _exports(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if (isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)):
            return list(ast.literal_eval(node.value))
    return []


def test_i20_p6_adr_0008_every_module_export_is_imported_by_another_module() -> None:
    trees = {_module_name(p): ast.parse(p.read_text("utf-8")) for p in PACKAGE.rglob("*.py")}
    modules = set(trees)
    users: dict[tuple[str, str], set[str]] = defaultdict(set)
    for name, tree in trees.items():
        for use in _uses(tree, modules):
            users[use].add(name)
    for path in (ROOT / "tests").rglob("*.py"):
        for use in _uses(ast.parse(path.read_text("utf-8")), modules):
            users[use].add("tests")
    unused = sorted(
        (module, name)
        for module, tree in trees.items()
        if not module.startswith(PUBLIC[1]) and module != PUBLIC[0]
        and module not in PUBLIC_SUBMODULES
        for name in _exports(tree)
        if not users[(module, name)] - {module}
    )
    assert [] == unused
