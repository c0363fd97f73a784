"""Regenerate docs/images/report-long.png, `turnledger report` of a long real session (issue 38
point 3); docs/images/report-imported.png, the report of an imported coding-agent session
(issue 36: the Codex CLI rollout of ``tests/fixtures/agents``, imported by ``turnledger import``);
and docs/images/report-demo.png, the report of ``turnledger demo``'s session.

    python -m scripts.report_screenshot [--out docs/images]

Needs the dev tools (the session builders and browser helpers live in the tests) and Debian's
``chromium``. The session is the one the report's readability test measures: the 300 real turns
of the repository's recorded conversations and transcripts (`benchmarks.cache.fixtures`),
replayed live with a request before every model reply under the low-water profile at 8,000
tokens, the provider's usage recorded for each request. Each screenshot shows the report's
first screen: the header and the context chart with its decision and cache-break lanes (an
imported session, which recorded no request, drawn by turns).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from pathlib import Path

import turnledger as tl
from tests.browser import chromium, screenshot
from tests.report_sessions import LOW_WATER_8K, imported_agent, live_fixtures
from turnledger import audit
from turnledger.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images",
                        help="the directory of the two PNG files")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as workdir:
        demo_url = f"sqlite:///{Path(workdir) / 'demo.db'}"
        with contextlib.redirect_stdout(io.StringIO()):
            cli_main(["--store", demo_url, "demo"])
        with tl.open_store(demo_url) as store:
            (demo,) = store.sessions()
            demo_events = store.events_of(demo)
        sessions = {
            "report-demo.png": demo_events,
            "report-long.png": live_fixtures(LOW_WATER_8K)[0],
            "report-imported.png": imported_agent("codex_rich.jsonl",
                                                  Path(workdir) / "codex.db")[0],
        }
        for name, events in sessions.items():
            page = Path(workdir) / f"{name}.html"
            audit.report(events, page)
            shot = screenshot(chromium(), page, Path(workdir) / name, "1400,1150")
            out = args.out / name
            out.write_bytes(shot.read_bytes())
            print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
