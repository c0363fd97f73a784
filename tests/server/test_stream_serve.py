"""The SSE streams as `turnledger serve` and `create_app` run them (issue 37 points 4 and 5): a
tenant's streams carry only its own conversations' decisions, and SIGTERM ends open streams
with their ``shutdown`` frame instead of waiting for them forever."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import turnledger as tl
from tests.extras import need
from tests.server.live import serving
from tests.server.stream_subscriber_child import parse


def test_point5_a_tenant_s_streams_carry_only_its_own_conversations(tmp_path: Path) -> None:
    """With keys, another tenant's conversation stream is a 404 and the store-wide stream
    leaves its decisions out; its own tenant sees them (before: every key saw every
    conversation's decisions)."""
    httpx = need("httpx")
    need("starlette")
    from turnledger.server.app import Settings, create_app
    from turnledger.server.registry import Registry

    url = f"sqlite:///{tmp_path}/store.db"
    with tl.open_store(url) as store:
        registry = Registry.beside(store)
        (_, alice), (_, bob) = registry.create_key("a"), registry.create_key("b")
        app = create_app(store, Settings(store_url=url, require_keys=True, registry=registry))
        with serving(app) as base, httpx.Client(base_url=base, timeout=20) as client:
            as_alice = {"Authorization": f"Bearer {alice}"}
            as_bob = {"Authorization": f"Bearer {bob}"}
            mine = client.post("/v1/conversations", headers=as_alice, json={"items": [
                {"type": "message", "role": "user", "content": "hello"}]}).json()["id"]
            theirs = client.post("/v1/conversations", headers=as_bob, json={"items": [
                {"type": "message", "role": "user", "content": "hi"}]}).json()["id"]
            for conversation, headers in ((mine, as_alice), (theirs, as_bob)):
                answer = client.post(f"/v1/conversations/{conversation}/window", json={},
                                     headers=headers)
                assert 200 == answer.status_code, answer.text
            assert 404 == client.get(f"/v1/conversations/{mine}/events",
                                     headers=as_bob).status_code

            def first_gauge_seen_by(headers: dict[str, str]) -> str:
                """The conversation of the first context gauge the whole log streams (Alice's
                window was asked first: a stream that leaks shows hers to Bob)."""
                with client.stream("GET", "/v1/events?last_event_id=0-0",
                                   headers=headers) as response:
                    for frame in parse(response.iter_lines()):
                        if frame.get("event") == "context":
                            return str(json.loads(frame["data"])["conversation_id"])
                raise AssertionError("the stream ended without a context gauge")

            assert mine == first_gauge_seen_by(as_alice)
            assert theirs == first_gauge_seen_by(as_bob)
        registry.close()


def test_point1_sigterm_ends_open_streams_with_their_shutdown_frame(tmp_path: Path) -> None:
    """`turnledger serve` with a subscriber connected: SIGTERM gives the stream its final
    ``shutdown`` frame and the process exits (uvicorn waits for open responses, and a stream
    never ends on its own: before, the server never exited)."""
    httpx = need("httpx")
    need("uvicorn")
    server = subprocess.Popen(
        [sys.executable, "-m", "turnledger", "--store", f"sqlite:///{tmp_path}/store.db",
         "serve", "--port", "0"],
        stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    frames: list[dict[str, str]] = []
    try:
        assert server.stderr is not None
        base = next(found.group(1) for line in server.stderr
                    if (found := re.search(r"running on (http://127\.0\.0\.1:\d+)", line)))
        connected = threading.Event()

        def subscribe() -> None:
            with httpx.Client(base_url=base, timeout=60) as client, \
                    client.stream("GET", "/v1/events") as response:
                for frame in parse(response.iter_lines()):
                    frames.append(frame)
                    connected.set()

        reader = threading.Thread(target=subscribe, daemon=True)
        reader.start()
        assert connected.wait(20), "the stream did not open"
        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) in (0, -signal.SIGTERM)
        reader.join(10)
        assert time.monotonic() - started < 30
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
    assert "shutdown" in [frame.get("event") for frame in frames]
