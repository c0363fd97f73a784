"""Issue 37 point 6: three server processes on one PostgreSQL store give the same answers."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.backends import fresh_target
from tests.extras import need


@contextmanager
def replicas(url: str, count: int) -> Iterator[list[str]]:
    """``count`` ``turnledger serve`` processes on ``url``; yields their base URLs."""
    processes: list[subprocess.Popen[str]] = []
    bases: list[str] = []
    try:
        for _ in range(count):
            process = subprocess.Popen(
                [sys.executable, "-m", "turnledger", "--store", url, "serve", "--port", "0"],
                stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
            processes.append(process)
            assert process.stderr is not None
            for line in process.stderr:
                found = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
                if found:
                    bases.append(found.group(1))
                    break
            assert len(bases) == len(processes), "a replica did not start"
            # Keep reading its log so a full pipe never blocks it.
            threading.Thread(target=process.stderr.read, daemon=True).start()
        yield bases
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.mark.postgres
def test_i37_p6_three_replicas_on_postgresql_answer_alike(tmp_path: Path) -> None:
    """Writes spread over three replicas, concurrent ones included, are all stored once and
    every replica lists the same items, the same conversation and the same window."""
    need("uvicorn")
    httpx = need("httpx")
    with fresh_target("postgresql", tmp_path) as target, replicas(target.url, 3) as bases:
        conversation = httpx.post(bases[0] + "/v1/conversations",
                                  json={"metadata": {"who": "r0"}}).json()["id"]
        path = f"/v1/conversations/{conversation}"
        failures: list[int] = []

        def writer(n: int) -> None:
            with httpx.Client(base_url=bases[n % 3], timeout=30) as http:
                for i in range(10):
                    items = [{"role": "user", "content": f"q{n}-{i}", "id": f"msg_q{n}_{i}"},
                             {"role": "assistant", "content": f"a{n}-{i}",
                              "id": f"msg_a{n}_{i}"}]
                    answer = http.post(path + "/items", json={"items": items})
                    if answer.status_code != 200:
                        failures.append(answer.status_code)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert [] == failures
        listed = [httpx.get(b + path + "/items", params={"limit": 100, "order": "asc"}).json()
                  for b in bases]
        assert listed[0] == listed[1] == listed[2]
        ids = [item["id"] for item in listed[0]["data"]]
        assert 80 == len(ids) == len(set(ids))
        for k in range(0, 80, 2):  # each request's two items stay together, in order
            assert ids[k].replace("msg_q", "") == ids[k + 1].replace("msg_a", "")
        assert len({httpx.get(b + path).text for b in bases}) == 1
        httpx.post(bases[1] + path + "/window", json={})
        timelines = [httpx.get(b + path + "/timeline").json() for b in bases]
        assert timelines[0] == timelines[1] == timelines[2]
        deleted = httpx.delete(bases[2] + path + "/items/" + ids[-1])
        assert 200 == deleted.status_code
        after = [[i["id"] for i in httpx.get(b + path + "/items",
                                             params={"limit": 100}).json()["data"]]
                 for b in bases]
        assert after[0] == after[1] == after[2] == ids[-2::-1]
