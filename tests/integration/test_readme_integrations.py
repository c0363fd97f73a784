"""Issue 10, point 5: each README example of the integrations runs offline as written and prints
what the README says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tests.docs_text import section as docs_section
from tests.extras import need

SECTIONS = {
    "## A step in one transaction": (),
    "## Several writers on one session": (),  # issue 19, point 6: retry_on_conflict
    "## OpenAI Agents SDK sessions": ("agents",),
    "## LangChain and LangGraph": ("langchain_core", "langgraph"),
}


def _example(heading: str) -> tuple[str, str]:
    """The section's Python example and its printed output (in docs/ since issue 34)."""
    _, section = docs_section(heading)
    match = re.search(r"```python\n(.*?)```\s*Prints:\s*```text\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"{heading}: no python example followed by its output"
    return match.group(1), match.group(2)


@pytest.mark.parametrize("heading", list(SECTIONS))
def test_readme_integration_example_runs_offline(
    heading: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example runs in a fresh namespace (and directory) and prints its documented output."""
    for module in SECTIONS[heading]:
        need(module)
    code, expected = _example(heading)
    page = docs_section(heading)[0]
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{page}:{heading}", "exec"), {"__name__": "__readme__"})
    assert expected == out.getvalue()
