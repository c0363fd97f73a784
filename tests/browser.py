"""Headless Chromium for the HTML report's tests: dump a page's DOM, take a screenshot, and a
local HTTP server that counts the requests a page makes (it must make none); and for a live page
(the server's dashboard), `devtools`: Chromium driven over the DevTools protocol.

`chromium()` finds Debian's ``chromium`` through `tests.extras.need_program` (skip without it,
fail under ``TURNLEDGER_REQUIRE_EXTRAS=1``). Each run gets its own profile directory, so runs
do not share state, and the flags that make Chromium call home are off.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import itertools
import json
import os
import socket
import struct
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from tests.extras import need_program

__all__ = ["DevTools", "Element", "RequestLog", "chromium", "devtools", "dump_dom", "elements",
           "screenshot", "serve"]

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


# --- a live page: Chromium driven over the DevTools protocol (issue 38 point 2) ----------------


class _WebSocket:
    """The client side of RFC 6455, enough for Chromium's DevTools endpoint: text frames out
    (masked, as a client must), text frames in (fragmented or not), pings answered."""

    def __init__(self, url: str, timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        nonce = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((
            f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {nonce}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            assert chunk, "the DevTools endpoint closed during the handshake"
            head += chunk
        status, _, rest = head.partition(b"\r\n")
        assert b" 101 " in status, status
        accept = base64.b64encode(hashlib.sha1(
            (nonce + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        assert accept in rest, "the DevTools endpoint answered another handshake"
        self.extra = rest.partition(b"\r\n\r\n")[2]
        self.sock.settimeout(None)
        self.send_lock = threading.Lock()

    def _exactly(self, count: int) -> bytes:
        data, self.extra = self.extra[:count], self.extra[count:]
        while len(data) < count:
            chunk = self.sock.recv(max(65536, count - len(data)))
            if not chunk:
                raise ConnectionError("the DevTools endpoint closed the connection")
            data += chunk
        self.extra = data[count:] + self.extra
        return data[:count]

    def _send(self, opcode: int, payload: bytes) -> None:
        size = len(payload)
        if size < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
        elif size < 1 << 16:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
        mask = os.urandom(4)
        masked = (int.from_bytes(payload, "big") ^ int.from_bytes(
            (mask * (size // 4 + 1))[:size], "big")).to_bytes(size, "big")
        with self.send_lock:
            self.sock.sendall(head + mask + masked)

    def send(self, text: str) -> None:
        self._send(0x1, text.encode())

    def receive(self) -> str | None:
        """The next text message; None once the endpoint closed."""
        message = b""
        while True:
            first, second = self._exactly(2)
            size = second & 0x7F
            if size == 126:
                (size,) = struct.unpack("!H", self._exactly(2))
            elif size == 127:
                (size,) = struct.unpack("!Q", self._exactly(8))
            payload = self._exactly(size)  # a server's frames are not masked
            opcode = first & 0x0F
            if opcode == 0x8:
                return None
            if opcode == 0x9:
                self._send(0xA, payload)
                continue
            if opcode in (0x0, 0x1):
                message += payload
                if first & 0x80:
                    return message.decode()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


class DevTools:
    """One page of a headless Chromium, driven over the DevTools protocol: commands
    (`call`, or `send` then `result` to overlap one with other work), the events Chromium sent
    (`events`), `evaluate` and `wait_for` in the page. Each answer is stamped with the
    `time.monotonic()` of its arrival (`answered_at`)."""

    def __init__(self, socket_url: str) -> None:
        self.ws = _WebSocket(socket_url, TIMEOUT)
        self.lock = threading.Condition()
        self.answers: dict[int, tuple[float, dict[str, Any]]] = {}
        self.received: list[dict[str, Any]] = []
        self.ids = itertools.count(1)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while (text := self.ws.receive()) is not None:
                message = json.loads(text)
                with self.lock:
                    if "id" in message:
                        self.answers[message["id"]] = (time.monotonic(), message)
                    else:
                        self.received.append(message)
                    self.lock.notify_all()
        with self.lock:
            self.lock.notify_all()

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        """Send a command; returns its id for `result`."""
        number = next(self.ids)
        self.ws.send(json.dumps({"id": number, "method": method, "params": params or {}}))
        return number

    def result(self, number: int, timeout: float = TIMEOUT) -> dict[str, Any]:
        """The result of command ``number`` (AssertionError on a protocol error or timeout)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while number not in self.answers:
                left = deadline - time.monotonic()
                assert left > 0, f"no answer to command {number} within {timeout} s"
                assert self.reader.is_alive(), f"Chromium closed before answering {number}"
                self.lock.wait(left)
            message = self.answers[number][1]
        assert "error" not in message, message["error"]
        result: dict[str, Any] = message["result"]
        return result

    def answered_at(self, number: int) -> float:
        """When the answer to command ``number`` arrived (`time.monotonic()`)."""
        with self.lock:
            return self.answers[number][0]

    def call(self, method: str, params: dict[str, Any] | None = None,
             timeout: float = TIMEOUT) -> dict[str, Any]:
        return self.result(self.send(method, params), timeout)

    def events(self, method: str) -> list[dict[str, Any]]:
        """The params of every event ``method`` received so far."""
        with self.lock:
            return [m["params"] for m in self.received if m["method"] == method]

    @staticmethod
    def value(result: dict[str, Any]) -> Any:
        """The value of a ``Runtime.evaluate`` result (AssertionError on a thrown error)."""
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def evaluate(self, expression: str, timeout: float = TIMEOUT) -> Any:
        """The JSON value of ``expression`` in the page (a promise is awaited)."""
        return self.value(self.call("Runtime.evaluate", {
            "expression": expression, "returnByValue": True, "awaitPromise": True}, timeout))

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        """The first truthy value of ``expression``, evaluated every 50 ms."""
        deadline = time.monotonic() + timeout
        while not (value := self.evaluate(expression)):
            assert time.monotonic() < deadline, f"never true within {timeout} s: {expression}"
            time.sleep(0.05)
        return value

    def press(self, key: str, code: int, text: str = "") -> None:
        """A key pressed and released (``key`` as DOM names it, ``code`` its virtual key,
        ``text`` what it types: Enter types ``"\\r"``, which is what activates a button)."""
        down: dict[str, Any] = {"type": "keyDown", "key": key, "code": key,
                                "windowsVirtualKeyCode": code}
        if text:
            down["text"] = text
        self.call("Input.dispatchKeyEvent", down)
        self.call("Input.dispatchKeyEvent", {"type": "keyUp", "key": key, "code": key,
                                             "windowsVirtualKeyCode": code})

    def close(self) -> None:
        self.ws.close()
        self.reader.join(5)


@contextmanager
def devtools(program: str, workdir: Path, size: tuple[int, int] = (1280, 900)
             ) -> Iterator[DevTools]:
    """A headless Chromium with one blank page, driven over the DevTools protocol.

    Chromium picks a free port (``--remote-debugging-port=0``) and writes it to
    ``DevToolsActivePort`` in its profile directory; the page's socket is read from
    ``/json/list``. The process (and only it) is stopped when the block ends."""
    profile = workdir / "chromium-devtools"
    profile.mkdir(parents=True, exist_ok=True)
    argv = [
        program, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-extensions", "--disable-background-networking", "--disable-sync",
        "--disable-component-update", "--disable-default-apps", "--remote-debugging-port=0",
        f"--window-size={size[0]},{size[1]}", f"--user-data-dir={profile}", "about:blank",
    ]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    page: DevTools | None = None
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + TIMEOUT
        while not port_file.exists() or not port_file.read_text().strip():
            assert process.poll() is None, process.stderr.read().decode()[-2000:] \
                if process.stderr else "chromium exited"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                    timeout=TIMEOUT) as answer:
            targets = json.load(answer)
        (target,) = [t for t in targets if t["type"] == "page"][:1]
        page = DevTools(target["webSocketDebuggerUrl"])
        yield page
    finally:
        if page is not None:
            page.close()
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(20)
        if process.stderr is not None:
            process.stderr.close()
