"""Issue 37 point 2: the `openai` npm package from Node against a live server.

``npm ci`` installs the locked client (tests/server/node/package-lock.json) into a temporary
copy of the directory, so the repository holds no node_modules; CI needs node and npm on PATH
and the npm registry (or its cache) reachable.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.extras import need_program

NODE_DIR = Path(__file__).parent / "node"


def test_i37_p2_the_openai_npm_client_creates_adds_pages_and_deletes(
        server_url: str, tmp_path: Path) -> None:
    """conversations.create/retrieve/delete, items.create/list (auto-paging 2 at a time)/
    retrieve from Node, unmodified; a 404 arrives as the client's error status."""
    node = need_program("node")
    npm = need_program("npm")
    work = tmp_path / "node"
    shutil.copytree(NODE_DIR, work, ignore=shutil.ignore_patterns("node_modules"))
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=work,
                   check=True, timeout=300)
    done = subprocess.run([node, "client.mjs", server_url], cwd=work, capture_output=True,
                          text=True, timeout=120, check=False)
    assert 0 == done.returncode, done.stderr
    seen = json.loads(done.stdout)
    assert seen["id"].startswith("conv_")
    assert {"runtime": "node"} == seen["metadata"]
    assert ["message", "function_call", "function_call_output", "message"] == [
        kind for _, kind in seen["listed"]]
    assert seen["added"] == [item_id for item_id, _ in seen["listed"][1:]]
    assert ["function_call", "c1", '{"q":1}'] == seen["retrieved"]
    assert 404 == seen["notFound"]
    assert seen["deleted"] is True
