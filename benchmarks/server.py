"""Benchmark: append + window over HTTP on loopback against the same calls in process (issue 37).

Per turn, two Responses items (a user question, an assistant answer) are appended and the
window for the next model call is prepared, up to ``--turns`` turns per conversation, over
``--conversations`` conversations:

- in process: ``from_openai_responses`` per item, `Session.extend`, `Session.prepare_request`
  and the Responses body, on a store of its own;
- over HTTP: ``POST /v1/conversations/{id}/items`` then ``POST .../window`` to a
  ``turnledger serve`` subprocess (one worker) on a store of its own, through one keep-alive
  ``httpx`` client.

Reports p50 and p99 of a turn (append + window) both ways, the overhead and the ratio; then
the requests per second one server process answers with ``--clients`` concurrent clients
each writing its own conversation for ``--seconds``. Prints a table and writes
``benchmarks/results/server.json``. Run from the project root when the machine is quiet:
``.venv/bin/python -m benchmarks.server``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

import turnledger as tl
from turnledger.providers import from_openai_responses

RESULTS = Path(__file__).parent / "results" / "server.json"


def _items(turn: int) -> list[dict[str, Any]]:
    return [{"type": "message", "role": "user", "id": f"msg_u{turn}", "status": "completed",
             "content": [{"type": "input_text", "text": f"question {turn} " + "word " * 40}]},
            {"type": "message", "role": "assistant", "id": f"msg_a{turn}",
             "status": "completed", "content": [{"type": "output_text", "annotations": [],
                                                 "text": f"answer {turn} " + "word " * 60}]}]


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def in_process(url: str, conversations: int, turns: int) -> list[float]:
    """Seconds per turn (append + window), every turn of every conversation."""
    samples: list[float] = []
    with tl.open_store(url) as store:
        for _ in range(conversations):
            session = store.start_session()
            for turn in range(turns):
                start = time.perf_counter()
                messages = [m for item in _items(turn) for m in from_openai_responses([item])]
                session.extend(messages)
                session.prepare_request().to_openai_responses()
                samples.append(time.perf_counter() - start)
    return samples


def _serve(url: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "turnledger", "--store", url, "serve", "--port", "0"],
        stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
        if found:
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, found.group(1)
    raise SystemExit("error: the server did not start")


def over_http(base: str, conversations: int, turns: int) -> list[float]:
    samples: list[float] = []
    with httpx.Client(base_url=base, timeout=60) as http:
        for _ in range(conversations):
            conversation = http.post("/v1/conversations", json={}).json()["id"]
            path = f"/v1/conversations/{conversation}"
            for turn in range(turns):
                start = time.perf_counter()
                http.post(path + "/items", json={"items": _items(turn)}).raise_for_status()
                http.post(path + "/window", json={}).raise_for_status()
                samples.append(time.perf_counter() - start)
    return samples


def throughput(base: str, clients: int, seconds: float) -> float:
    """Requests per second (appends and windows) of one server process."""
    counts = [0] * clients
    deadline = time.monotonic() + seconds

    def client(n: int) -> None:
        with httpx.Client(base_url=base, timeout=60) as http:
            path = "/v1/conversations/" + http.post("/v1/conversations", json={}).json()["id"]
            turn = 0
            while time.monotonic() < deadline:
                http.post(path + "/items", json={"items": _items(turn)}).raise_for_status()
                http.post(path + "/window", json={}).raise_for_status()
                counts[n] += 2
                turn += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--conversations", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tl-bench-server-") as tmp:
        local = in_process(f"sqlite:///{tmp}/local.db", args.conversations, args.turns)
        process, base = _serve(f"sqlite:///{tmp}/served.db")
        try:
            remote = over_http(base, args.conversations, args.turns)
            rps = throughput(base, args.clients, args.seconds)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
    ms = 1000.0
    rows = {
        "in_process": {"p50_ms": statistics.median(local) * ms,
                       "p99_ms": _percentile(local, 0.99) * ms},
        "http": {"p50_ms": statistics.median(remote) * ms,
                 "p99_ms": _percentile(remote, 0.99) * ms},
    }
    result = {
        "benchmark": "server", "store": "sqlite", "turns": args.turns,
        "conversations": args.conversations, **rows,
        "overhead_p50_ms": rows["http"]["p50_ms"] - rows["in_process"]["p50_ms"],
        "ratio_p50": rows["http"]["p50_ms"] / rows["in_process"]["p50_ms"],
        "requests_per_second_one_worker": rps, "clients": args.clients,
        "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "load": os.getloadavg()[0],
    }
    print(f"append + window per turn, {args.turns} turns x {args.conversations} "
          "conversations, SQLite, loopback")
    print(f"{'':12} {'p50 ms':>8} {'p99 ms':>8}")
    for name, row in rows.items():
        print(f"{name:12} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f}")
    print(f"overhead p50 {result['overhead_p50_ms']:.2f} ms, ratio {result['ratio_p50']:.2f}x; "
          f"one worker: {rps:.0f} requests/s with {args.clients} clients")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
