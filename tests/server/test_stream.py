"""The SSE stream of every decision (issue 37 point 4): frames, the context gauge (R19),
resumption with Last-Event-ID, writers and subscribers in other processes, slow subscribers,
heartbeats and shutdown. Each test serves `stream_routes` in a Starlette app of its own under
uvicorn on 127.0.0.1 and a free port."""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import turnledger as tl
from tests.backends import SHARED_BACKENDS, fresh_target
from tests.extras import need
from tests.server.stream_subscriber_child import parse
from turnledger.audit import timeline
from turnledger.events import MessageAppended, RequestPrepared

ROOT = Path(__file__).resolve().parents[2]


# -- a server of the stream routes alone ---------------------------------------------------

@contextmanager
def serving(store: tl.Store, sndbuf: int | None = None, **hub_options: Any) -> Iterator[Any]:
    """`stream_routes` of ``store`` served on a free loopback port; yields (base URL, hub).

    ``sndbuf`` shrinks the listening socket's send buffer (accepted sockets inherit it), so
    a subscriber that does not read blocks its stream after a few frames."""
    need("starlette")
    uvicorn = need("uvicorn")
    from starlette.applications import Starlette

    from turnledger.server.stream import EventHub, stream_routes

    hub = EventHub(store, **hub_options)
    app = Starlette(routes=stream_routes(store, hub=hub))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if sndbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive(), "the server did not start"
        assert time.monotonic() < deadline, "the server did not start in time"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", hub, server
    finally:
        if thread.is_alive():
            close_hub(server, hub)  # as a server does when shutdown begins
        server.should_exit = True
        thread.join(20)
        sock.close()


def _loop_of(server: Any) -> Any:
    """The event loop the server runs in (its listening sockets' loop)."""
    (srv, *_) = server.servers
    return srv.get_loop()


def close_hub(server: Any, hub: Any) -> None:
    """Run `EventHub.close` in the server's loop (as a server does when shutdown begins)."""
    import asyncio

    asyncio.run_coroutine_threadsafe(hub.close(), _loop_of(server)).result(10)


def expected_frames(store: tl.Store) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, event, data) of every frame the store-wide stream carries, from the log itself."""
    found: list[tuple[str, str, dict[str, Any]]] = []
    cursor = (0, 0)
    while True:
        page, after = store.backend.follow_notifications(cursor, 1000)
        for (key, number), event in page:
            if isinstance(event, MessageAppended):
                continue
            entry = timeline([event])[0]
            wire = "conv_" + event.originator_id.hex
            found.append((f"{key}-{number}", entry.type,
                          entry.to_jsonable() | {"conversation_id": wire}))
            if isinstance(event, RequestPrepared):
                gauge = {"conversation_id": wire, "position": event.originator_version,
                         "timestamp": entry.to_jsonable()["timestamp"],
                         "route": entry.data["route"],
                         "estimated_tokens": event.estimated_tokens, "budget": event.budget}
                if event.capacity is not None:
                    gauge["model_context_window"] = event.capacity
                found.append((f"{key}-{number}-1", "context", gauge))
        if after == cursor:
            return found
        cursor = after


def read_events(url: str, count: int, headers: dict[str, str] | None = None,
                timeout: float = 30) -> list[dict[str, str]]:
    """The first ``count`` events (frames with an id) of the stream at ``url``."""
    httpx = need("httpx")
    events: list[dict[str, str]] = []
    with httpx.Client(timeout=httpx.Timeout(timeout)) as client, client.stream(
        "GET", url, headers=headers or {}
    ) as response:
        assert 200 == response.status_code
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in parse(response.iter_lines()):
            if "id" in event:
                events.append(event)
                if len(events) == count:
                    break
    return events


def write(url: str, sessions: int, appends: int) -> None:
    """Run the writer child (another process) to the end."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.server.stream_writer_child", url, str(sessions),
         str(appends)], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert 0 == done.returncode, done.stderr


# -- frames and the gauge -------------------------------------------------------------------

@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_point4_every_decision_from_another_process_with_the_r19_gauge(
    kind: str, tmp_path: Path
) -> None:
    """Issue 37 point 4, R33, R19: what a writer in another process decides reaches a
    subscriber of this server, each frame the timeline's JSON; after each RequestPrepared a
    context gauge with model_context_window only when the capacity is known; no message."""
    with fresh_target(kind, tmp_path) as target, tl.open_store(target.url) as store, \
            serving(store) as (base, _hub, _server):
        # Start the subscriber first: without an id it sees what follows its connection.
        with need("httpx").Client() as client, client.stream("GET", base + "/v1/events") as r:
            frames = parse(r.iter_lines())
            assert {"comment": "ready"} == next(frames)  # subscribed: now write
            write(target.url, 2, 3)
            expected = expected_frames(store)
            events: list[dict[str, str]] = []
            for event in frames:
                if "id" in event:
                    events.append(event)
                    if len(events) == len(expected):
                        break
        assert [(i, e) for i, e, _ in expected] == [(e["id"], e["event"]) for e in events]
        assert [d for _, _, d in expected] == [json.loads(e["data"]) for e in events]
        kinds = {e["event"] for e in events}
        assert {"HistoryTrimmed", "TrimDecided", "RequestPrepared", "context"} <= kinds
        assert "MessageAppended" not in kinds
        gauges = [json.loads(e["data"]) for e in events if e["event"] == "context"]
        known = [g for g in gauges if g["route"]["provider"] == "known"]
        unknown = [g for g in gauges if g["route"]["provider"] != "known"]
        assert known
        assert unknown
        assert all(8000 == g["model_context_window"] for g in known)
        assert all("model_context_window" not in g for g in unknown)


@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_point4_resume_after_any_id_from_memory_or_from_the_log(
    kind: str, tmp_path: Path
) -> None:
    """Issue 37 point 4: Last-Event-ID (header or ?last_event_id=) resumes right after that
    frame, a gauge included, whether the hub still holds it or reads it back from the log
    (a server started after the writes); 0-0 is the whole log."""
    with fresh_target(kind, tmp_path) as target, tl.open_store(target.url) as store:
        write(target.url, 2, 2)
        expected = [(i, e) for i, e, _ in expected_frames(store)]
        with serving(store) as (base, _hub, _server):  # the hub starts after every write
            url = base + "/v1/events"
            whole = read_events(url, len(expected), {"Last-Event-ID": "0-0"})
            assert expected == [(e["id"], e["event"]) for e in whole]
            prepared = next(n for n, (_, e) in enumerate(expected) if e == "RequestPrepared")
            for index in (0, prepared, prepared + 1, len(expected) // 2):
                last = expected[index][0]
                rest = expected[index + 1:]
                by_header = read_events(url, len(rest), {"Last-Event-ID": last})
                by_query = read_events(f"{url}?last_event_id={last}", len(rest))
                assert rest == [(e["id"], e["event"]) for e in by_header]
                assert rest == [(e["id"], e["event"]) for e in by_query]


def test_point4_one_conversation_and_its_errors(tmp_path: Path) -> None:
    """Issue 37 point 4: a conversation's stream carries its frames only; an unknown or
    malformed conversation id is a 404 and a malformed Last-Event-ID a 400, in OpenAI's
    error envelope."""
    httpx = need("httpx")
    with tl.open_store(f"sqlite:///{tmp_path}/s.db") as store:
        write(f"sqlite:///{tmp_path}/s.db", 2, 2)
        first, second = store.sessions()
        expected = [(i, e) for i, e, d in expected_frames(store)
                    if d["conversation_id"] == "conv_" + first.replace("-", "")]
        assert expected
        with serving(store) as (base, _hub, _server):
            url = f"{base}/v1/conversations/conv_{first.replace('-', '')}/events"
            got = read_events(url, len(expected), {"Last-Event-ID": "0-0"})
            assert expected == [(e["id"], e["event"]) for e in got]
            with httpx.Client() as client:
                for bad in ("conv_" + "0" * 32, "conv_nothex", second):
                    answer = client.get(f"{base}/v1/conversations/{bad}/events")
                    assert 404 == answer.status_code
                    assert "not_found" == answer.json()["error"]["code"]
                answer = client.get(base + "/v1/events", headers={"Last-Event-ID": "x-1"})
                assert 400 == answer.status_code
                assert "last_event_id" == answer.json()["error"]["param"]


# -- exactly once across killed subscribers and writers in other processes -------------------

@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_point4_killed_subscribers_reconnect_and_see_every_event_exactly_once_in_order(
    kind: str, tmp_path: Path
) -> None:
    """Issue 37 point 4: subscriber processes SIGKILLed mid-stream reconnect with the last id
    they recorded while writers in two other processes keep writing; in the end each has
    every frame exactly once, in the log's order."""
    rng = random.Random(37)
    with fresh_target(kind, tmp_path) as target, tl.open_store(target.url) as store, \
            serving(store) as (base, _hub, _server):
        writers = [subprocess.Popen(
            [sys.executable, "-m", "tests.server.stream_writer_child", target.url, "3", "12"],
            cwd=ROOT, stdout=subprocess.DEVNULL) for _ in range(2)]
        outs = [tmp_path / f"sub{n}.txt" for n in range(2)]
        urls = [base + "/v1/events", base + "/v1/events"]
        for out in outs:
            out.write_text("")

        def start(n: int) -> subprocess.Popen[bytes]:
            lines = outs[n].read_text().splitlines()
            last = lines[-1].split()[0] if lines else "0-0"
            return subprocess.Popen(
                [sys.executable, "-m", "tests.server.stream_subscriber_child", urls[n],
                 str(outs[n]), last], cwd=ROOT)

        subscribers = [start(n) for n in range(2)]
        kills = 0
        while any(w.poll() is None for w in writers) or kills < 4:
            time.sleep(rng.uniform(0.1, 0.4))
            n = rng.randrange(2)
            subscribers[n].send_signal(signal.SIGKILL)
            subscribers[n].wait()
            kills += 1
            subscribers[n] = start(n)
        assert all(0 == w.wait() for w in writers)
        expected = [f"{i} {e}" for i, e, _ in expected_frames(store)]
        deadline = time.monotonic() + 60
        for out in outs:
            while len(out.read_text().splitlines()) < len(expected):
                assert time.monotonic() < deadline, "a subscriber did not catch up"
                time.sleep(0.1)
        time.sleep(0.3)  # nothing more may arrive: a duplicate would show now
        for process in subscribers:
            process.send_signal(signal.SIGKILL)
            process.wait()
        for out in outs:
            assert expected == out.read_text().splitlines()
        assert kills >= 4


# -- slow subscribers, heartbeats, shutdown -----------------------------------------------------

def _raw_subscriber(base: str) -> socket.socket:
    """A subscriber with a tiny receive buffer that reads nothing until told."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.connect((host, int(port)))
    sock.sendall(f"GET /v1/events HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    return sock


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    sock.settimeout(10)
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _dechunk(raw: bytes) -> list[str]:
    """The SSE lines of a raw chunked HTTP/1.1 response."""
    _head, _, body = raw.partition(b"\r\n\r\n")
    text = []
    while body:
        size, _, rest = body.partition(b"\r\n")
        length = int(size, 16)
        if length == 0:
            break
        text.append(rest[:length])
        body = rest[length + 2:]
    return b"".join(text).decode().split("\n")


def test_point4_a_slow_subscriber_is_cut_with_lagged_and_resumes_others_unstalled(
    tmp_path: Path
) -> None:
    """Issue 37 point 4: a subscriber that stops reading does not hold the others back; once
    it is max_lag events behind it gets a final `lagged` frame (no id) and the stream ends;
    resuming with its last id gives the rest, each frame exactly once."""
    url = f"sqlite:///{tmp_path}/s.db"
    with tl.open_store(url) as store, serving(store, sndbuf=2048, max_lag=20, page_size=10) as (
        base, hub, _server
    ):
        slow = _raw_subscriber(base)
        fast: list[list[dict[str, str]]] = []
        deadline = time.monotonic() + 10
        while hub.subscribers < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        started = time.monotonic()
        write(url, 8, 15)  # more frames than the buffers on the way hold
        expected = [(i, e) for i, e, _ in expected_frames(store)]
        fast.append(read_events(base + "/v1/events", len(expected), {"Last-Event-ID": "0-0"}))
        assert expected == [(e["id"], e["event"]) for e in fast[0]]
        assert time.monotonic() - started < 60
        raw = _read_all(slow)  # the server ended the stream after the lagged frame
        slow.close()
        events = list(parse(_dechunk(raw)))
        assert "lagged" == events[-1].get("event")
        assert "id" not in events[-1]
        seen = [(e["id"], e["event"]) for e in events if "id" in e]
        assert len(seen) < len(expected)
        rest = read_events(base + "/v1/events", len(expected) - len(seen),
                           {"Last-Event-ID": seen[-1][0]})
        assert expected == seen + [(e["id"], e["event"]) for e in rest]


def test_point4_keepalive_comments_and_a_clean_end_on_shutdown(tmp_path: Path) -> None:
    """Issue 37 point 4: an idle stream gets `: keepalive` comments; closing the hub (as a
    server does when shutdown begins) ends every stream with a final `shutdown` frame."""
    httpx = need("httpx")
    with tl.open_store(f"sqlite:///{tmp_path}/s.db") as store, serving(
        store, heartbeat=0.2
    ) as (base, hub, server), httpx.Client(timeout=10) as client:
        with client.stream("GET", base + "/v1/events") as response:
            lines = response.iter_lines()
            seen: list[dict[str, str]] = []
            for event in parse(lines):
                seen.append(event)
                if event == {"comment": "keepalive"}:
                    break
            close_hub(server, hub)
            rest = list(parse(lines))  # ends: the server closed the stream
        assert {"comment": "keepalive"} == seen[-1]
        assert "shutdown" == rest[-1]["event"]
        assert all(e.get("comment") == "keepalive" for e in rest[:-1])
