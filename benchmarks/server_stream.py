"""Benchmark: 1,000 concurrent SSE subscribers held by one server process (issue 37 goal).

One server process serves `turnledger.server.stream.stream_routes` (uvicorn, 127.0.0.1, a free
port) on a SQLite store. ``--clients`` client processes (default 2) open ``--subscribers``
streams in all (default 1,000) of ``GET /v1/events`` with httpx's async client. Once every
stream is open, a writer in a process of its own (the library, no server) records ``--turns``
turns (default 100) at ``--rate`` turns a second (default 20): each turn a user message, an
assistant reply and a prepared request, under a turn limit that trims each time, so each turn
is five frames (TrimDecided, BreadcrumbInserted, HistoryTrimmed, RequestPrepared and its
context gauge). The followers read what the writer commits from the log (another process's
writes), as a server would.

Reported: whether every subscriber received every frame (exactly once, in order), the server's
resident memory before the subscribers, with them open, and per subscriber ((open − before)
/ N), and the delivery latency of each frame at each subscriber (time of receipt minus the
event's recorded time: commit, the follower's poll interval, fan-out and the client's parse)
p50 / p99 / max, and the server's CPU seconds over the run.

Run from the project root when the machine is quiet (``uptime`` under 2.5):
``.venv/bin/python -m benchmarks.server_stream``. Writes
``benchmarks/results/server_stream.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "server_stream.json"
ROOT = Path(__file__).resolve().parents[1]


# -- the server process ----------------------------------------------------------------------

def serve(url: str) -> None:
    """Serve the stream routes of ``url``; print the port, then run until killed."""
    import uvicorn
    from starlette.applications import Starlette

    import turnledger as tl
    from turnledger.server.stream import EventHub, stream_routes

    store = tl.open_store(url)
    hub = EventHub(store)
    app = Starlette(routes=stream_routes(store, hub=hub))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    server = uvicorn.Server(uvicorn.Config(
        app, log_level="warning", lifespan="off", backlog=4096, timeout_keep_alive=60))
    server.run(sockets=[sock])


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- a client process --------------------------------------------------------------------------

async def _subscribe(
    client: Any, url: str, expected: int, opened: asyncio.Event, counter: list[int],
    total: int, delays: list[float], ids: list[str],
) -> None:
    """One stream, parsed with bytes operations only (a client process holds hundreds: the
    parse must not be what the latency measures)."""
    async with client.stream("GET", url) as response:
        response.raise_for_status()
        pending = b""
        async for chunk in response.aiter_raw():
            now = time.time()
            frames = (pending + chunk).split(b"\n\n")
            pending = frames.pop()
            for frame in frames:
                if frame.endswith(b": ready"):
                    counter[0] += 1
                    if counter[0] == total:
                        opened.set()
                    continue
                if not frame.startswith(b"id: "):
                    continue  # a keepalive
                ids.append(frame[4:frame.index(b"\n")].decode())
                at = frame.index(b'"timestamp":"') + 13
                stamp = frame[at:frame.index(b'"', at)].decode()
                delays.append(now - datetime.fromisoformat(stamp).timestamp())
            if len(ids) >= expected:
                return


async def _clients(url: str, count: int, expected: int) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    opened = asyncio.Event()
    counter = [0]
    delays: list[list[float]] = [[] for _ in range(count)]
    ids: list[list[str]] = [[] for _ in range(count)]
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(60, read=None)) as client:
        tasks = [asyncio.create_task(_subscribe(client, url, expected, opened, counter, count,
                                                delays[n], ids[n])) for n in range(count)]
        await opened.wait()
        print("open", flush=True)
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=600)
    first = ids[0]
    return {
        "cpu_seconds": time.process_time(),
        "complete": sum(1 for got in ids if got == first and len(got) == expected),
        "delays": [d for per in delays for d in per],
        "ids": first,
    }


def client_main(url: str, count: int, expected: int, out: str) -> None:
    """Hold ``count`` streams until each has ``expected`` frames; write what they saw."""
    result = asyncio.run(_clients(url, count, expected))
    Path(out).write_text(json.dumps(result))


# -- the writer --------------------------------------------------------------------------------

def write(url: str, turns: int, rate: float) -> None:
    """``turns`` turns at ``rate`` a second, each trimmed and prepared (five frames)."""
    import turnledger as tl

    provider = tl.ProviderProfile(name="p", model="m", context_window=128_000)
    with tl.open_store(url) as store:
        session = store.start_session(profile=tl.RuntimeProfile(max_history_messages=1),
                                      providers=[provider])
        start = time.monotonic()
        for turn in range(turns):
            session.append(tl.ChatMessage.user(f"question {turn}"))
            session.append(tl.ChatMessage.assistant(f"answer {turn}"))
            session.prepare_request()
            time.sleep(max(0.0, start + (turn + 1) / rate - time.monotonic()))


def _expected_frames(url: str) -> list[str]:
    """The ids of every frame the store-wide stream carries, from the log."""
    import turnledger as tl
    from turnledger.events import MessageAppended, RequestPrepared

    ids: list[str] = []
    with tl.open_store(url) as store:
        cursor = (0, 0)
        while True:
            page, after = store.backend.follow_notifications(cursor, 1000)
            for (key, number), event in page:
                if isinstance(event, MessageAppended):
                    continue
                ids.append(f"{key}-{number}")
                if isinstance(event, RequestPrepared):
                    ids.append(f"{key}-{number}-1")
            if after == cursor:
                return ids
            cursor = after


# -- the run -----------------------------------------------------------------------------------

def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(subscribers: int, clients: int, turns: int, rate: float) -> dict[str, Any]:
    """One run (module doc); the result as JSON values."""
    me = [sys.executable, "-m", "benchmarks.server_stream"]
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/store.db"
        # Frames per turn: TrimDecided, BreadcrumbInserted, HistoryTrimmed after the first
        # turn; RequestPrepared and its gauge every turn; the session's start and route first.
        server = subprocess.Popen([*me, "--serve", url], cwd=ROOT, stdout=subprocess.PIPE,
                                  text=True)
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            base = f"http://127.0.0.1:{port}/v1/events"
            import httpx

            with httpx.Client() as probe, probe.stream("GET", base) as warm:
                next(warm.iter_lines())  # the hub is started and every module loaded
            time.sleep(0.5)
            before = _rss_kib(server.pid)
            cpu_before = _cpu_seconds(server.pid)
            expected = 2 + 5 * turns - 3
            shares = [subscribers // clients + (n < subscribers % clients) for n in range(clients)]
            outs = [Path(tmp) / f"client{n}.json" for n in range(clients)]
            started = time.monotonic()
            procs = [subprocess.Popen(
                [*me, "--client", base, str(share), str(expected), str(out)],
                cwd=ROOT, stdout=subprocess.PIPE, text=True) for share, out in zip(
                    shares, outs, strict=True)]
            for proc in procs:
                assert proc.stdout is not None
                assert proc.stdout.readline().strip() == "open", "a client could not open"
            open_seconds = time.monotonic() - started
            time.sleep(1.0)
            with_open = _rss_kib(server.pid)
            write(url, turns, rate)
            for proc in procs:
                assert proc.wait(timeout=600) == 0
            after = _rss_kib(server.pid)
            cpu = _cpu_seconds(server.pid) - cpu_before
        finally:
            server.kill()
            server.wait()
        seen = [json.loads(out.read_text()) for out in outs]
        frames = _expected_frames(url)
    delays = [d for s in seen for d in s["delays"]]
    return {
        "subscribers": subscribers,
        "client_processes": clients,
        "frames_per_subscriber": len(frames),
        "subscribers_with_every_frame_in_order": sum(
            s["complete"] for s in seen if s["ids"] == frames),
        "seconds_to_open_all": round(open_seconds, 2),
        "server_rss_mib_before": round(before / 1024, 1),
        "server_rss_mib_open": round(with_open / 1024, 1),
        "server_rss_mib_after": round(after / 1024, 1),
        "kib_per_subscriber": round((with_open - before) / subscribers, 1),
        "latency_ms_p50": round(1000 * statistics.median(delays), 1),
        "latency_ms_p99": round(1000 * _percentile(delays, 0.99), 1),
        "latency_ms_max": round(1000 * max(delays), 1),
        "deliveries": len(delays),
        "server_cpu_seconds": round(cpu, 2),
        "client_cpu_seconds": [round(s["cpu_seconds"], 2) for s in seen],
        "turns": turns,
        "turns_per_second": rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--serve", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    if args.client:
        url, count, expected, out = args.client
        client_main(url, int(count), int(expected), out)
        return
    load = os.getloadavg()[0]
    result = run(args.subscribers, args.clients, args.turns, args.rate)
    result["load_before"] = load
    result["python"] = platform.python_version()
    result["command"] = "python -m benchmarks.server_stream " + " ".join(sys.argv[1:])
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
