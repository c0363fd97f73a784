"""Issue 37 point 1: SIGTERM drains the requests in flight; an acknowledged write is stored,
a cut one is not half-stored."""

from __future__ import annotations

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


def test_i37_p1_sigterm_mid_load_loses_no_acknowledged_item_and_halves_none(
        tmp_path: Path) -> None:
    """Four clients add two-item requests while the server gets SIGTERM: every acknowledged
    item is stored, and every stored request has both its items."""
    need("uvicorn")
    httpx = need("httpx")
    url = f"sqlite:///{tmp_path}/store.db"
    server = subprocess.Popen(
        [sys.executable, "-m", "turnledger", "--store", url, "serve", "--port", "0"],
        stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        base = None
        assert server.stderr is not None
        for line in server.stderr:
            found = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
            if found:
                base = found.group(1)
                break
        assert base is not None, "the server did not say where it listens"
        conversation = httpx.post(base + "/v1/conversations", json={}).json()["id"]
        acknowledged: list[str] = []
        stop = threading.Event()

        def client(n: int) -> None:
            with httpx.Client(base_url=base, timeout=10) as http:
                i = 0
                while not stop.is_set():
                    tag = f"r{n}-{i}"
                    i += 1
                    items = [{"role": "user", "content": tag, "id": f"msg_{tag}a"},
                             {"role": "assistant", "content": tag, "id": f"msg_{tag}b"}]
                    try:
                        answer = http.post(f"/v1/conversations/{conversation}/items",
                                           json={"items": items})
                    except httpx.HTTPError:
                        return
                    if answer.status_code == 200:
                        acknowledged.append(tag)

        threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        server.send_signal(signal.SIGTERM)
        # uvicorn drains, runs the lifespan's shutdown, then raises the signal again so the
        # exit status says what stopped it.
        assert server.wait(30) in (0, -signal.SIGTERM)
        assert "Finished server process" in server.stderr.read()
        stop.set()
        for t in threads:
            t.join(30)
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
    assert acknowledged, "no request was acknowledged: the test proved nothing"
    from turnledger.server.ids import session_id
    from turnledger.server.items import items_of

    with tl.open_store(url) as store:
        stored = [s.item["id"] for s in items_of(store.events_of(session_id(conversation)))]
    tags = [i[4:-1] for i in stored]
    assert set(acknowledged) <= set(tags)
    assert all(tags[k] == tags[k + 1] for k in range(0, len(tags), 2))
    assert len(tags) % 2 == 0
