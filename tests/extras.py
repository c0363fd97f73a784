"""Optional packages and programs the tests need, and what happens without one — defined once.

`need("cryptography")` imports and returns an optional module; `need_program("chromium")` returns
the path of an executable. When it is missing the test skips with the reason, or FAILS when the
environment variable ``TURNLEDGER_REQUIRE_EXTRAS=1`` is set (CI installs every extra, so a skip
there would hide a test that did not run).
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType

import pytest

__all__ = ["need", "need_program"]


def _missing(what: str) -> None:
    if os.environ.get("TURNLEDGER_REQUIRE_EXTRAS") == "1":
        pytest.fail(f"TURNLEDGER_REQUIRE_EXTRAS=1 but {what} (pip install -e '.[dev]')")
    pytest.skip(what)


def need(module: str) -> ModuleType:
    """Import an optional module, or skip (fail under TURNLEDGER_REQUIRE_EXTRAS=1) without it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        _missing(f"optional package {module!r} is not installed ({error})")
        raise  # unreachable: _missing raises


def need_program(*names: str) -> str:
    """The first of `names` on PATH, or skip (fail under TURNLEDGER_REQUIRE_EXTRAS=1)."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    _missing(f"none of the programs {', '.join(names)} is on PATH")
    raise AssertionError("unreachable")
