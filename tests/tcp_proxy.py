"""A TCP proxy on 127.0.0.1 that can cut a PostgreSQL connection right after a COMMIT.

Used to reproduce an *in-doubt commit*: the client's ``COMMIT`` reaches the server, which commits,
but the connection dies before the client reads the answer (or the COMMIT is lost on the way,
and the server rolls back); and a server that cannot be reached for a while. Only loopback
addresses are used.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterable, Iterator


class CommitCuttingProxy:
    """Forward 127.0.0.1:<port> to ``upstream``; when armed, cut after forwarding a COMMIT.

    ``arm(n)`` makes the next ``n`` COMMIT statements (psycopg pipelines them as Parse messages)
    — or statements that commit on their own: an INSERT into ``stored_events`` sent outside
    a ``BEGIN``, as the PostgreSQL append runs (ADR-0089), prepared or not — be forwarded to
    the server, then, after ``wait`` seconds (the server commits meanwhile), both sockets
    of that connection are closed without passing the server's reply on.
    ``forward=False`` drops the COMMIT instead (the server never commits); ``dark=S`` blacks
    the proxy out for ``S`` seconds after the cut. ``black_out(seconds)`` cuts every connection
    at once, wherever it stands, and closes each new one at once for ``seconds``: the server
    cannot be reached meanwhile.
    """

    def __init__(self, upstream: tuple[str, int], *, wait: float = 0.2) -> None:
        self.upstream = upstream
        self.wait = wait
        self.cuts = 0
        self._armed = 0
        self._forward = True
        self._dark = 0.0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._dark_until = 0.0
        self._muted: set[socket.socket] = set()
        """The connections (by their client socket) whose server answers are dropped: a
        statement that commits was forwarded and its connection is about to be cut. Held as
        the socket objects until the cut, never by ``id()``: a new connection's socket may be
        given a freed one's id, and its server's answers were then dropped too (the client
        hung until its connect timeout)."""

    def arm(self, commits: int = 1, *, forward: bool = True, dark: float = 0.0) -> None:
        with self._lock:
            self._armed, self._forward, self._dark = commits, forward, dark

    @property
    def muted(self) -> int:
        """How many connections have their server's answers dropped now (cut, or about to be)."""
        with self._lock:
            return len(self._muted)

    def light(self) -> None:
        """Wait until a blackout is over."""
        with self._lock:
            left = self._dark_until - time.monotonic()
        time.sleep(max(left, 0.0))

    def black_out(self, seconds: float) -> None:
        with self._lock:
            self._dark_until = time.monotonic() + seconds
            cut, self._sockets = self._sockets, []
        _cut(cut)

    def start(self) -> CommitCuttingProxy:
        thread = threading.Thread(target=self._accept_loop, daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            sockets = [self._listener, *self._sockets]
        for sock in sockets:
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
            with self._lock:
                dark = time.monotonic() < self._dark_until
                if not dark:
                    self._sockets += [client, server]
            if dark:
                _cut((client, server))
                continue
            for source, target, watch in ((client, server, True), (server, client, False)):
                thread = threading.Thread(
                    target=self._pump, args=(source, target, (client, server), watch), daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _take_arm(self) -> tuple[bool, float] | None:
        """(forward the COMMIT, seconds to black out after the cut), or None: not armed."""
        with self._lock:
            if self._armed <= 0:
                return None
            self._armed -= 1
            return self._forward, self._dark

    def _pump(
        self,
        source: socket.socket,
        target: socket.socket,
        pair: tuple[socket.socket, socket.socket],
        watch_commits: bool,
    ) -> None:
        statements = _Statements()
        try:
            while data := source.recv(65536):
                commits = watch_commits and statements.commits(data)
                armed = self._take_arm() if commits else None
                if armed is None:
                    with self._lock:
                        muted = pair[0] in self._muted
                    if not muted:
                        target.sendall(data)
                    continue
                forward, dark = armed
                if forward:
                    with self._lock:  # the server's answer is never passed on
                        self._muted.add(pair[0])
                    target.sendall(data)
                    time.sleep(self.wait)  # the server commits; its reply is never passed on
                with self._lock:
                    self.cuts += 1
                if dark:
                    self.black_out(dark)
                break
        except OSError:
            pass
        _cut(pair)
        with self._lock:
            self._muted.discard(pair[0])


def _cut(sockets: Iterable[socket.socket]) -> None:
    """Close ``sockets`` now: shut down first, since a plain close waits for the other
    direction's pump to leave its recv, and until then the peer is told nothing (it hangs)."""
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()


def _is_commit(data: bytes) -> bool:
    """Whether ``data`` carries a COMMIT statement (simple query, or a pipelined Parse message)."""
    return b"COMMIT\x00" in data.upper()


_APPEND = b"INSERT INTO "
_EVENTS = b'"stored_events"'


class _Statements:
    """What one client connection has sent, enough to tell where a transaction commits: the
    names of the statements it prepared that insert into the events table, and whether an
    explicit transaction is open (a ``BEGIN`` sent, its ``COMMIT`` or ``ROLLBACK`` not yet)."""

    def __init__(self) -> None:
        self.appends: set[bytes] = set()
        self.in_transaction = False

    def commits(self, data: bytes) -> bool:
        """Whether forwarding ``data`` commits a transaction: a COMMIT, or an append's insert
        executed outside an explicit transaction (it is its own)."""
        if _is_commit(data):
            self.in_transaction = False
            return True
        executes_append = False
        for kind, body in _messages(data):
            if kind == b"Q" or kind == b"P":
                text = body if kind == b"Q" else body.split(b"\x00", 2)[1]
                head = text.lstrip().upper()
                if head.startswith((b"BEGIN", b"START TRANSACTION")):
                    self.in_transaction = True
                elif head.startswith((b"ROLLBACK", b"END", b"ABORT")):
                    self.in_transaction = False
                if kind == b"P":  # a name given again (the unnamed one) is that statement now
                    name = body.split(b"\x00", 1)[0]
                    if head.startswith(_APPEND) and _EVENTS in text:
                        self.appends.add(name)
                    else:
                        self.appends.discard(name)
            elif kind == b"B":
                name = body.split(b"\x00", 2)[1]
                if name in self.appends and not self.in_transaction:
                    executes_append = True
        return executes_append


def _messages(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The whole frontend messages (type, body) at the start of ``data`` (none for a startup
    packet, which has no type byte; a message cut by the read's size ends the list)."""
    at = 0
    while at + 5 <= len(data):
        kind = data[at:at + 1]
        if not kind.isalpha():
            return
        end = at + 1 + int.from_bytes(data[at + 1:at + 5], "big")
        if end > len(data):
            return
        yield kind, data[at + 5:end]
        at = end


@contextlib.contextmanager
def commit_cutting_proxy(
    host: str = "127.0.0.1", port: int = 5432, *, wait: float = 0.2
) -> Iterator[CommitCuttingProxy]:
    proxy = CommitCuttingProxy((host, port), wait=wait).start()
    try:
        yield proxy
    finally:
        proxy.stop()
