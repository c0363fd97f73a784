"""Issue 8, point 4: the README's provider loop runs as it is written."""

from __future__ import annotations

import contextlib
import io
import re

from tests.docs_text import section

README, SECTION = section("## The provider loop")  # docs/guide/provider-loop.md


def _loop_snippet() -> str:
    match = re.search(r"```python\n(.*?)```", SECTION, re.DOTALL)
    assert match is not None
    return match.group(1)


def test_e6_readme_provider_loop_runs() -> None:
    """prepare -> to_anthropic -> send -> from_anthropic -> append -> recover, as documented."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_loop_snippet(), str(README), "exec"), {})
    assert "The test timed out.\n" == out.getvalue()
