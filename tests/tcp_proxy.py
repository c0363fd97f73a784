"""A TCP proxy on 127.0.0.1 that can cut a PostgreSQL connection right after a COMMIT.

Used to reproduce an *in-doubt commit*: the client's ``COMMIT`` reaches the server, which commits,
but the connection dies before the client reads the answer. Only loopback addresses are used.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator


class CommitCuttingProxy:
    """Forward 127.0.0.1:<port> to ``upstream``; when armed, cut after forwarding a COMMIT.

    ``arm(n)`` makes the next ``n`` COMMIT statements (psycopg pipelines them as Parse messages)
    be forwarded to the server, then, after ``wait`` seconds (the server commits
    meanwhile), both sockets of that connection are closed without passing the server's reply on.
    """

    def __init__(self, upstream: tuple[str, int], *, wait: float = 0.2) -> None:
        self.upstream = upstream
        self.wait = wait
        self.cuts = 0
        self._armed = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []

    def arm(self, commits: int = 1) -> None:
        with self._lock:
            self._armed = commits

    def start(self) -> CommitCuttingProxy:
        thread = threading.Thread(target=self._accept_loop, daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopping.set()
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()
        for thread in self._threads:
            thread.join(timeout=2)

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(self.upstream, timeout=5)
            server.settimeout(None)
            self._sockets += [client, server]
            for source, target, watch in ((client, server, True), (server, client, False)):
                thread = threading.Thread(
                    target=self._pump, args=(source, target, (client, server), watch), daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _take_arm(self) -> bool:
        with self._lock:
            if self._armed <= 0:
                return False
            self._armed -= 1
            return True

    def _pump(
        self,
        source: socket.socket,
        target: socket.socket,
        pair: tuple[socket.socket, socket.socket],
        watch_commits: bool,
    ) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
                if watch_commits and _is_commit(data) and self._take_arm():
                    time.sleep(self.wait)  # the server commits; its reply is never passed on
                    with self._lock:
                        self.cuts += 1
                    for sock in pair:
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)
                        with contextlib.suppress(OSError):
                            sock.close()
                    return
        except OSError:
            pass
        for sock in pair:
            with contextlib.suppress(OSError):
                sock.close()


def _is_commit(data: bytes) -> bool:
    """Whether ``data`` carries a COMMIT statement (simple query, or a pipelined Parse message)."""
    return b"COMMIT\x00" in data.upper()


@contextlib.contextmanager
def commit_cutting_proxy(
    host: str = "127.0.0.1", port: int = 5432, *, wait: float = 0.2
) -> Iterator[CommitCuttingProxy]:
    proxy = CommitCuttingProxy((host, port), wait=wait).start()
    try:
        yield proxy
    finally:
        proxy.stop()
