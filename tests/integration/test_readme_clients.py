"""Issue 21 point 5: the README's example with the real openai and anthropic clients runs as
written, against its stub server on localhost, and each body it sent is one the provider's
own request types accept."""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

from tests.docs_text import section
from tests.provider_types import problems

README, SECTION = section("## Real clients")  # docs/guide/real-clients.md


def _snippet() -> str:
    match = re.search(r"```python\n(.*?)```", SECTION, re.DOTALL)
    assert match is not None
    return match.group(1)


def test_i21_p5_readme_real_clients_example_runs_and_sends_accepted_bodies() -> None:
    """anthropic.Anthropic and openai.OpenAI (base_url: the stub) send one session's requests;
    the OpenAI fallback leaves out Anthropic's signed thinking and says so."""
    out = io.StringIO()
    namespace: dict[str, Any] = {}
    with contextlib.redirect_stdout(out):
        exec(compile(_snippet(), str(README), "exec"), namespace)
    assert "Raise its timeout to 60 s.\n['thinking block']\n" == out.getvalue()
    to_claude, to_gpt = namespace["server"].bodies
    anthropic_part = {k: to_claude[k] for k in ("system", "messages")}
    assert ([], []) == (problems("anthropic", anthropic_part),
                        problems("openai_chat", to_gpt["messages"]))
    assert "signature" not in repr(to_gpt)
