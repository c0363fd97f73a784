"""Issue 34: every Python example in README.md and the pages under docs/ runs as written.

Each page's examples run in order in one namespace (a page may build on its earlier examples),
in a fresh working directory; an example followed by ``Prints:`` and a ``text`` block prints
exactly that. An example that cannot run as written (a sketch whose names stand for the
reader's own code) says so right before its fence, ``<!-- not-run: reason -->``; the few there
are, are counted here, each with its reason.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.docs_text import ROOT, pages
from tests.extras import need

FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.DOTALL | re.MULTILINE)
NOT_RUN = re.compile(r"<!-- not-run: (\S[^>]*?) -->\n\Z")
PRINTS = re.compile(r"\s*Prints:\s*```text\n(.*?)```", re.DOTALL)

# The sketches, by page: a new one is a decision to write down here, not a default.
NOT_RUN_EXPECTED = {"docs/guide/tour.md": 2, "docs/privacy.md": 1, "docs/server.md": 1}


class Example(NamedTuple):
    """One ```python block of a page: where it starts, its code, what it prints (if the page
    says) and why it does not run (if it does not)."""

    line: int
    code: str
    prints: str | None
    not_run: str | None


def examples(path: Path) -> list[Example]:
    """The page's Python examples, in order."""
    text = path.read_text(encoding="utf-8")
    found = []
    for fence in FENCE.finditer(text):
        if fence[1] != "python":
            continue
        marker = NOT_RUN.search(text, 0, fence.start())
        prints = PRINTS.match(text, fence.end())
        found.append(Example(text.count("\n", 0, fence.start()) + 2, fence[2],
                             prints[1] if prints else None, marker[1] if marker else None))
    return found


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _imported(code: str) -> list[str]:
    """The modules an example imports that are neither the standard library's nor ours."""
    modules = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.append(node.module)
    roots = sys.stdlib_module_names | {"turnledger"}
    return [module for module in dict.fromkeys(modules) if module.split(".")[0] not in roots]


PAGES = [path for path in pages() if any(ex.not_run is None for ex in examples(path))]


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_i34_each_page_s_python_examples_run_in_order_and_print_what_the_page_says(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's runnable examples run one after the other in one namespace, in an empty
    directory; each one the page follows with ``Prints:`` prints exactly that text."""
    runnable = [example for example in examples(page) if example.not_run is None]
    for module in _imported("".join(example.code for example in runnable)):
        need(module)  # a framework page needs its extra (CI installs every one)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for example in runnable:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = compile(example.code, f"{page}:{example.line}", "exec", dont_inherit=True)
            exec(code, namespace)
        if example.prints is not None:
            assert (example.line, example.prints) == (example.line, out.getvalue())


def test_i34_examples_that_do_not_run_are_the_listed_few_each_with_its_reason() -> None:
    """Every ``not-run`` marker stands right before a Python example and gives a reason; the
    pages hold exactly the sketches listed above (reported with their reasons on failure)."""
    skipped = {_name(path): [example.not_run for example in examples(path) if example.not_run]
               for path in pages()}
    markers = {_name(path): path.read_text(encoding="utf-8").count("<!-- not-run:")
               for path in pages()}
    assert {page: n for page, n in markers.items() if n} == NOT_RUN_EXPECTED, skipped
    assert {page: len(reasons) for page, reasons in skipped.items() if reasons} == (
        NOT_RUN_EXPECTED), skipped


def test_i34_the_readme_s_one_minute_example_is_the_first_and_runs_with_its_output() -> None:
    """The README leads with its two commands, then one runnable example with its output."""
    (first, *_) = examples(ROOT / "README.md")
    assert (None, True) == (first.not_run, bool(first.prints))
