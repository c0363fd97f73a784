"""Issue 37, done means: the README's TypeScript client and `curl` session run as written.

The TypeScript block is type-checked by ``tsc --strict`` against the `openai` npm package's own
types (the locked versions in tests/server/node), compiled and run against a live server; the
`curl` block runs in bash. Both only have the server's address replaced.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.extras import need_program

ROOT = Path(__file__).parents[2]
NODE_DIR = Path(__file__).parent / "node"
README_ADDRESS = "127.0.0.1:8000"


def _block(language: str, after: str) -> str:
    """The first ``language`` fence of README.md after the text ``after``."""
    text = ROOT.joinpath("README.md").read_text(encoding="utf-8")
    found = re.search(rf"```{language}\n(.*?)```", text[text.index(after):], re.S)
    assert found is not None, f"README.md has no {language} block after {after!r}"
    return found.group(1)


@pytest.fixture(scope="module")
def node_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    npm = need_program("npm")
    work = tmp_path_factory.mktemp("readme") / "node"
    shutil.copytree(NODE_DIR, work, ignore=shutil.ignore_patterns("node_modules"))
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=work,
                   check=True, timeout=300)
    return work


def test_i37_the_readme_typescript_client_type_checks_and_runs(
        server_url: str, node_work: Path) -> None:
    """Creates a conversation, records the assistant's answer and gets an `openai_chat` body
    in one window request: two messages, nothing trimmed."""
    node = need_program("node")
    source = _block("ts", "## From any language")
    assert README_ADDRESS in source
    node_work.joinpath("readme.ts").write_text(
        source.replace(f"http://{README_ADDRESS}", server_url), encoding="utf-8")
    compiled = subprocess.run(
        [str(node_work / "node_modules" / ".bin" / "tsc"), "--strict", "--target", "es2022",
         "--module", "nodenext", "--moduleResolution", "nodenext", "--types", "node",
         "--skipLibCheck", "readme.ts"],
        cwd=node_work, capture_output=True, text=True, timeout=120, check=False)
    assert 0 == compiled.returncode, compiled.stdout + compiled.stderr
    done = subprocess.run([node, "readme.js"], cwd=node_work, capture_output=True, text=True,
                          timeout=60, check=False)
    assert 0 == done.returncode, done.stderr
    tokens, messages, trimmed = done.stdout.split()
    assert int(tokens) > 0
    assert ("2", "[]") == (messages, trimmed)


def _documents(text: str) -> list[dict[str, Any]]:
    """The JSON objects curl printed one after another (no newline between them)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        value, at = decoder.raw_decode(text, at)
        assert isinstance(value, dict), text
        found.append(value)
    return found


def test_i37_the_readme_curl_session_runs(server_url: str) -> None:
    """The four requests: a conversation, an item, an Anthropic body, the items in order."""
    bash = need_program("bash")
    need_program("curl")
    script = _block("sh", "With `curl`")
    address = server_url.removeprefix("http://")
    done = subprocess.run([bash, "-euo", "pipefail", "-c",
                           script.replace("localhost:8000", address)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert 0 == done.returncode, done.stderr
    added, window, listed = _documents(done.stdout)
    assert "assistant" == added["data"][0]["role"]
    assert ["user", "assistant"] == [m["role"] for m in window["body"]["messages"]]
    assert ["hi", "hello"] == [i["content"][0]["text"] for i in listed["data"]]
