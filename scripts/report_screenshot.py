"""Regenerate docs/images/report-long.png: `turnledger report` of a long real session (issue 38
point 3).

    python -m scripts.report_screenshot [--out docs/images/report-long.png]

Needs the dev tools (the session builders and browser helpers live in the tests) and Debian's
``chromium``. The session is the one the report's readability test measures: the 300 real turns
of the repository's recorded conversations and transcripts (`benchmarks.cache.fixtures`),
replayed live with a request before every model reply under the low-water profile at 8,000
tokens, the provider's usage recorded for each request. The screenshot shows the report's
first screen: the header and the context chart with its decision and cache-break lanes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.browser import chromium, screenshot
from tests.report_sessions import LOW_WATER_8K, live_fixtures
from turnledger import audit

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "report-long.png")
    args = parser.parse_args(argv)
    events, _ = live_fixtures(LOW_WATER_8K)
    with tempfile.TemporaryDirectory() as workdir:
        page = Path(workdir) / "report.html"
        audit.report(events, page)
        shot = screenshot(chromium(), page, Path(workdir) / "report.png", "1400,900")
        args.out.write_bytes(shot.read_bytes())
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
