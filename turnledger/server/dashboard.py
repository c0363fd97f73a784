"""The live dashboard the server serves at ``/`` (issue 38 point 2; docs/server.md, "Dashboard").

One self-contained page (``dashboard.html`` beside this module: HTML, inline CSS and inline
JavaScript, nothing fetched from anywhere but the server itself) that follows the store-wide
event stream (``GET /v1/events``, `turnledger.server.stream`) and draws each session as it
runs: its context gauge, its trims, summaries, clearings and cache breaks, its cache hit rate,
its latest decisions and a link to its report.

The page holds no data of its own (everything it shows comes over the stream, under the
stream's access rules), so it is served without a key; with keys required it asks for one and
sends it as ``Authorization: Bearer`` on the stream (`turnledger.server.access`).

Its Content-Security-Policy allows the page's own inline script and style by their SHA-256
(nothing else inline) and connections to the server's own origin only.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["dashboard", "page"]

_INLINE = re.compile(r"<(script|style)>(.*?)</\1>", re.DOTALL)


@functools.cache
def page() -> tuple[bytes, str]:
    """The page's bytes and its Content-Security-Policy (read once, on the first request)."""
    text = resources.files("turnledger.server").joinpath("dashboard.html").read_text("utf-8")
    hashes: dict[str, list[str]] = {"script": [], "style": []}
    for tag, body in _INLINE.findall(text):
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        hashes[tag].append(f"'sha256-{digest}'")
    policy = "; ".join(
        [
            "default-src 'none'",
            "script-src " + " ".join(hashes["script"]),
            "style-src " + " ".join(hashes["style"]),
            "connect-src 'self'",
            "img-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )
    return text.encode(), policy


async def dashboard(request: Request) -> Response:
    """``GET /``: the page, with its policy and no caching (a new server may serve a new page)."""
    body, policy = page()
    return Response(
        body,
        media_type="text/html; charset=utf-8",
        headers={
            "Content-Security-Policy": policy,
            "Cache-Control": "no-cache",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        },
    )
