"""Headless Chromium for the HTML report's tests: dump a page's DOM, take a screenshot, and a
local HTTP server that counts the requests a page makes (it must make none).

`chromium()` finds Debian's ``chromium`` through `tests.extras.need_program` (skip without it,
fail under ``TURNLEDGER_REQUIRE_EXTRAS=1``). Each run gets its own profile directory, so runs
do not share state, and the flags that make Chromium call home are off.
"""

from __future__ import annotations

import http.server
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path

from tests.extras import need_program

__all__ = ["Element", "RequestLog", "chromium", "dump_dom", "elements", "screenshot", "serve"]

TIMEOUT = 120.0  # seconds for one Chromium run; a loaded 2-core machine takes a few


def chromium() -> str:
    """The path of the Chromium program, or skip/fail (`need_program`)."""
    return need_program("chromium", "chromium-browser")


def _run(program: str, page: Path, profile: Path, *action: str) -> str:
    argv = [
        program, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-extensions", "--disable-background-networking", "--disable-sync",
        "--disable-component-update", "--disable-default-apps", f"--user-data-dir={profile}",
        *action, page.resolve().as_uri(),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=False,
                            stdin=subprocess.DEVNULL)
    assert 0 == result.returncode, f"{argv}\n{result.stderr[-2000:]}"
    return result.stdout


def dump_dom(program: str, page: Path, workdir: Path) -> str:
    """The DOM Chromium built from ``page`` after loading it, serialised."""
    return _run(program, page, workdir / "chromium-dom", "--dump-dom")


def screenshot(program: str, page: Path, png: Path, size: str = "1400,2000") -> Path:
    """A PNG of ``page`` rendered in a ``size`` window; returns ``png``."""
    _run(program, page, png.parent / "chromium-shot", f"--screenshot={png}",
         f"--window-size={size}")
    return png


class Element:
    """One start tag of a page: its name and attributes."""

    def __init__(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tag = tag
        self.attrs = {name: value or "" for name, value in attrs}

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append(Element(tag, attrs))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append(Element(tag, attrs))


def elements(page: str) -> list[Element]:
    """Every element (start tag) of an HTML text, in document order."""
    collector = _Collector()
    collector.feed(page)
    collector.close()
    return collector.found


class RequestLog:
    """The paths a local server was asked for."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.paths: list[str] = []
        self.lock = threading.Lock()


@contextmanager
def serve() -> Iterator[RequestLog]:
    """A local HTTP server on 127.0.0.1 (a free port) recording every request it receives."""
    log = RequestLog(0)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with log.lock:
                log.paths.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    log.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield log
    finally:
        server.shutdown()
        server.server_close()
