"""Issue 22: the README's pydantic-ai and Google ADK examples run offline as written and print
what the README says (the pattern of test_readme_integrations.py)."""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

import pytest

from tests.docs_text import section as docs_section
from tests.extras import need

SECTIONS = {
    "## pydantic-ai agents": ("pydantic_ai",),
    "## Google ADK agents": ("google.adk",),
}


def _example(heading: str) -> tuple[str, str]:
    """The section's Python example and the output printed after it."""
    _, section = docs_section(heading)  # docs/integrations/
    match = re.search(r"```python\n(.*?)```\s*Prints:\s*```text\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"{heading}: no python example followed by its output"
    return match.group(1), match.group(2)


@pytest.mark.parametrize("heading", list(SECTIONS))
def test_i22_readme_framework_example_runs_offline(
    heading: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example runs in a fresh namespace and directory, prints its documented output and
    warns nothing."""
    for module in SECTIONS[heading]:
        need(module)
    code, expected = _example(heading)
    page = docs_section(heading)[0]
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("error")
        exec(compile(code, f"{page}:{heading}", "exec"), {"__name__": "__readme__"})
    assert expected == out.getvalue()
