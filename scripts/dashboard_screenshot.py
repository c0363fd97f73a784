"""Regenerate docs/images/dashboard.png: the live dashboard of `turnledger serve` (issue 38
point 2) while three agents run against it.

    python -m scripts.dashboard_screenshot [--out docs/images/dashboard.png]

Needs the ``server`` extra, the dev tools (``pytest``: the browser helpers live in the tests)
and Debian's ``chromium``. It starts a server on a temporary SQLite store, opens ``/`` in a
headless Chromium, then writes over HTTP as agents would: a long tool loop whose tool results
are cleared and whose oldest turns are trimmed (each request's usage recorded, the cached
prefix lost at each trim or clearing), a short chat, and a session that has not sent a request
yet. Everything reaches the page through the event stream, as it would live.
"""

from __future__ import annotations

import argparse
import base64
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

import turnledger as tl
from tests.browser import chromium, devtools
from tests.server.live import serving
from turnledger.profiles import Compaction
from turnledger.server.app import Settings, create_app

SIZE = (1440, 860)
ROOT = Path(__file__).resolve().parent.parent


def _loop_turn(i: int) -> list[dict[str, Any]]:
    """One step of a coding agent: a request, a tool call, its (long) result, an answer."""
    return [
        {"role": "user", "content": f"Step {i}: look at module {i} and fix what fails."},
        {
            "type": "function_call",
            "call_id": f"call_{i}",
            "name": "read_file",
            "arguments": f'{{"path": "src/module_{i}.py"}}',
        },
        {
            "type": "function_call_output",
            "call_id": f"call_{i}",
            "output": f"# src/module_{i}.py\n" + "def handler(event):\n    return event\n" * 40,
        },
        {"role": "assistant", "content": f"Module {i} returns the event unchanged; fixed."},
    ]


def _run(base: str, conversation: str, items: list[dict[str, Any]], cached: int) -> int:
    """Record ``items`` and prepare the next window, then bill it as a provider would:
    ``cached`` input tokens read from its cache. Returns the window's input tokens."""
    one = f"{base}/v1/conversations/{conversation}"
    window = httpx.post(one + "/window", json={"items": items, "include": ["events"]})
    answer = window.raise_for_status().json()
    tokens = int(answer["capacity"]["estimated_tokens"])
    rewrote = {"TrimDecided", "ToolResultsCleared"} & {e["type"] for e in answer["events"]}
    read = 0 if rewrote else min(cached, tokens)  # a rewritten prefix is not in the cache
    usage = {
        "prompt_tokens": tokens,
        "completion_tokens": 90,
        "prompt_tokens_details": {"cached_tokens": read},
    }
    httpx.post(one + "/usage", json={"usage": usage}).raise_for_status()
    return tokens


def _agents(base: str) -> None:
    create = base + "/v1/conversations"
    # Newest first on the page: the quiet session, then the chat, then the loop on top.
    httpx.post(
        create,
        json={"items": [{"role": "user", "content": "Summarise yesterday's failed builds."}]},
    ).raise_for_status()
    chat = httpx.post(create, json={}).raise_for_status().json()["id"]
    loop = httpx.post(create, json={}).raise_for_status().json()["id"]
    prefix = 0
    for i in range(16):
        prefix = _run(base, loop, _loop_turn(i), prefix)
        time.sleep(0.1)
    prefix = 0
    for i in range(3):
        prefix = _run(
            base,
            chat,
            [
                {"role": "user", "content": f"Question {i}: what does the release checklist say?"},
                {"role": "assistant", "content": "It says to tag, build, then publish. " * 4},
            ],
            prefix,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "dashboard.png")
    out: Path = parser.parse_args(argv).out
    profile = tl.RuntimeProfile(
        max_context_tokens=2000, compaction=Compaction(clear_tool_results=True)
    )
    providers = (tl.ProviderProfile("openai", "gpt-4.1", context_window=8000),)
    with tempfile.TemporaryDirectory() as work:
        url = f"sqlite:///{work}/agents.db"
        with tl.open_store(url) as store:
            app = create_app(store, Settings(store_url=url, profile=profile, providers=providers))
            with serving(app) as base, devtools(chromium(), Path(work), SIZE) as page:
                page.call(
                    "Emulation.setDeviceMetricsOverride",
                    {"width": SIZE[0], "height": SIZE[1], "deviceScaleFactor": 1, "mobile": False},
                )
                page.call("Page.navigate", {"url": base + "/"})
                page.wait_for("document.querySelector('#status')?.dataset.state === 'live'")
                _agents(base)
                page.wait_for("document.querySelectorAll('.session').length === 3")
                time.sleep(2)  # the cards' highlight of fresh activity fades
                shot = page.call("Page.captureScreenshot", {"format": "png"})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(base64.b64decode(shot["data"]))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
