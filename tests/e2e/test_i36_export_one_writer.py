"""Issue 36 point 3 on the command line: ``export`` in another format writes what that
provider's types accept (the request bodies' writer), the record and ``--view chat`` alike;
in the record's own format it gives the recording back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.extras import need
from tests.provider_types import problems

from .conftest import REPO, Cli, describe, imported_ids, write_jsonl

RECORDING = REPO / "tests" / "fixtures" / "public" / "anthropic_mid_system.json"


@pytest.mark.parametrize("view", [[], ["--view", "chat"]])
def test_i36_p3_an_anthropic_recording_exported_as_responses_is_accepted(
    cli: Cli, tmp_path: Path, view: list[str]
) -> None:
    """Its assistant text was written as output_text parts with no item id, which every
    member of the SDK's input item union refuses; now as the Responses body writes it."""
    need("openai")
    recorded = json.loads(RECORDING.read_text(encoding="utf-8"))
    [session] = imported_ids(cli.ok("import", write_jsonl(tmp_path / "a.jsonl", recorded)))
    result = cli.run("export", session, "--format", "responses", *view)

    assert 0 == result.returncode, describe(result)
    assert [] == problems("openai_responses", json.loads(result.stdout))
    assert recorded == json.loads(cli.ok("export", session, "--format", "anthropic", *view))
