"""ADR-0001 / STYLE 1: the domain layer imports no other unit and no I/O library; STYLE 18 /
ADR-0072: drivers and the library's backend recorders are named only in the backends.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "turnledger"
DOMAIN = PACKAGE / "domain"
STORE = PACKAGE / "store"
BACKENDS = STORE / "backends"
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


# --- the backends own their drivers and recorders (issue 20, point 3) ---------------------

DRIVERS = (
    "sqlite3", "psycopg", "psycopg_pool", "eventsourcing.sqlite", "eventsourcing.postgres",
    "eventsourcing.popo",
)
"""Driver modules and the library's backend modules: imported under ``store/backends`` only."""
BACKEND_NAMES = re.compile(
    r"(?:POPO|SQLite|Postgres|Memory)\w*(?:Recorder|Database|Datastore|Factory|Connection"
    r"|ConnectionPool|Cursor)|(?:SQLITE|POSTGRES)_DIALECT"
)
"""A backend's concrete classes and dialects (``POPOAggregateRecorder``, ``SQLiteDatabase``,
``MemoryEventRecorder``, ``SQLITE_DIALECT``...); the library's abstract recorders
(``AggregateRecorder``, ``TrackingRecorder``) are the port's own vocabulary."""
DRIVER_TEXT = re.compile(r"(?:sqlite3|psycopg(?:_pool)?|eventsourcing\.(?:sqlite|postgres|popo))"
                         r"(?:[.:].*)?")
"""A string that names a driver module (``importlib.import_module("psycopg")``, a topic)."""
OUTER_UNITS = ("turnledger.projections", "turnledger.replay", "turnledger.cli",
               "turnledger.integrations", "turnledger.providers", "turnledger.profiles",
               "turnledger.demo")
"""What the store must not import: the units above it (it asks through hooks and ports)."""


def _outside_backends() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if BACKENDS not in p.parents)


def _backend_references(path: Path) -> list[str]:
    """Each import of a driver module and each use of a backend's concrete name in ``path``
    (imported, or as a name or attribute), each string naming a driver module, and each
    ``noqa: SLF001`` (a reach into a library recorder's privates), as ``line: what``."""
    source = path.read_text(encoding="utf-8")
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        modules: list[str] = []
        words: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
            words = [alias.name for alias in node.names]
        elif isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and DRIVER_TEXT.fullmatch(node.value)):
            found.append(f"{node.lineno}: {node.value!r}")
        found += [
            f"{node.lineno}: import {m}" for m in modules
            if any(m == d or m.startswith(d + ".") for d in DRIVERS)
        ]
        found += [f"{node.lineno}: {w}" for w in words if BACKEND_NAMES.fullmatch(w)]
    found += [
        f"{number}: noqa: SLF001" for number, line in enumerate(source.splitlines(), 1)
        if "noqa: SLF001" in line
    ]
    return sorted(set(found))


@pytest.mark.parametrize(
    "path", _outside_backends(), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_i20_p3_no_driver_or_recorder_is_named_outside_the_backends(path: Path) -> None:
    """Outside ``turnledger/store/backends/`` no module imports a driver (sqlite3, psycopg,
    the library's sqlite/postgres/popo modules), names a backend's recorder, database or
    dialect, or reaches into a library recorder's privates: shared code asks the port."""
    assert [] == _backend_references(path)


@pytest.mark.parametrize("path", sorted(STORE.rglob("*.py")), ids=lambda p: p.name)
def test_i20_p3_the_store_imports_no_unit_above_it(path: Path) -> None:
    """The store imports the domain and itself only; a projection that must act before an
    erasure registers a hook (`turnledger.store.hooks`)."""
    offending = sorted(
        name for name in _imports(path)
        if any(name == unit or name.startswith(unit + ".") for unit in OUTER_UNITS)
    )
    assert [] == offending


def test_i20_p3_the_backend_check_sees_drivers_and_recorders(tmp_path: Path) -> None:
    """The check above finds each way a backend leaks out (it can fail)."""
    module = tmp_path / "leaky.py"
    module.write_text(
        "import sqlite3\n"
        "from eventsourcing.popo import POPOAggregateRecorder\n"
        "from turnledger.store.backends.sqlite import SQLiteDatabase\n"
        "import importlib\n"
        "importlib.import_module('psycopg')\n"
        "def f(backend):\n"
        "    return isinstance(backend.database, backends.sqlite.SQLiteDatabase)\n"
        "x = recorder._stored_events  # noqa: SLF001\n",
        encoding="utf-8",
    )
    assert [
        "1: import sqlite3", "2: POPOAggregateRecorder", "2: import eventsourcing.popo",
        "3: SQLiteDatabase", "5: 'psycopg'", "7: SQLiteDatabase", "8: noqa: SLF001",
    ] == _backend_references(module)
