"""Issue 34: the repository's shape holds. A test file is named after the unit it tests, never
after the issue that asked for it (its docstring cites the issue), and no function of the
package is longer than a reader can hold at once (60 lines, ``def`` to its end).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "turnledger"
TESTS = ROOT / "tests"

NAMES_AN_ISSUE = re.compile(r"(?:^|_)(?:i|issue)_?\d+(?:_|$)")
"""A file name part ``i36``, ``issue36`` or ``issue_36`` (``test_i36_x``, ``make_i24_records``,
``test_bodies_issue36``); ``adr_0008`` or ``v2`` are not issues."""

LONGEST = 60
LONG_FOR_NOW: set[str] = set()
"""Functions allowed over `LONGEST` for now, each with the reason in a comment: none."""


def _issue_named(paths: list[Path]) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in paths if NAMES_AN_ISSUE.search(p.stem))


def test_i34_no_test_file_is_named_after_an_issue() -> None:
    """Test modules, their helpers, children and fixture generators say what they hold."""
    assert [] == _issue_named(sorted(TESTS.rglob("*.py")))


@pytest.mark.parametrize("name", [
    "test_i36_custom_tool_calls", "test_bodies_issue36", "make_i24_records",
    "make_issue21_records", "i33_writer_child", "test_issue_7",
])
def test_i34_the_name_check_sees_an_issue_number(name: str) -> None:
    """The names issue 34 moved away from are caught."""
    assert [f"tests/{name}.py"] == _issue_named([TESTS / f"{name}.py"])


@pytest.mark.parametrize("name", [
    "test_adr_0008", "make_v2_records", "test_snapshot_format4", "test_integrations",
    "test_whatif",
])
def test_i34_the_name_check_passes_names_that_cite_no_issue(name: str) -> None:
    """An ADR number, a version or a word with an ``i`` in it is not an issue."""
    assert [] == _issue_named([TESTS / f"{name}.py"])


def _too_long(text: str, where: str) -> dict[str, int]:
    """The functions of the module ``text`` over `LONGEST` lines, counted from the ``def`` to
    the last line (docstring included), keyed ``where:name`` (methods and nested functions by
    their own name; of two of one name, the longer)."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            name = f"{where}:{node.name}"
            if size > max(LONGEST, found.get(name, 0)):
                found[name] = size
    return found


def test_i34_no_package_function_is_over_60_lines() -> None:
    """Every function of ``turnledger`` fits in 60 lines, but the ones left for now."""
    long: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        long |= _too_long(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    assert {} == {name: size for name, size in long.items() if name not in LONG_FOR_NOW}


def test_i34_the_length_check_counts_from_def_to_the_end() -> None:
    """A 61-line function (its docstring included) is caught, a 60-line one is not, a
    decorator is not counted, and a method is seen beside a short function of its name."""
    body = "".join(f"        x{i} = {i}\n" for i in range(57))
    text = ("def over() -> int:\n    return 1\n\n\n"
            "class C:\n"
            "    @staticmethod\n"
            f'    def fits() -> int:\n        """Doc."""\n{body}        return 0\n\n'
            f'    async def over() -> int:\n        """Doc,\n        more."""\n{body}'
            "        return 0\n")
    assert {"m.py:over": 61} == _too_long(text, "m.py")
