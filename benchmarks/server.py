"""Benchmark: append + window over HTTP on loopback against the same calls in process (issue 37).

Per turn, two Responses items (a user question, an assistant answer) are appended and the
window for the next model call is prepared, up to ``--turns`` turns per conversation, over
``--conversations`` conversations:

- in process: ``from_openai_responses`` per item, `Session.extend`, `Session.prepare_request`
  and the Responses body, on a store of its own;
- over HTTP: ``POST /v1/conversations/{id}/items`` then ``POST .../window`` (the same
  answer: the body, the capacity, the trims) to a ``turnledger serve`` subprocess (one
  worker) on a store of its own, through one keep-alive connection of two clients: the
  standard library's ``http.client`` (the transport's floor) and ``httpx`` (the client of
  the ``openai`` SDK, which spends about 0.4 ms of its own per request);
- in one request (``one_request``): ``POST .../window {"items": [...]}`` appends and
  prepares in one round trip (``http.client``).

Reports p50 and p99 of a turn (append + window) both ways, the overhead and the ratio; the
CPU time a one-request turn costs the server process (read from ``/proc``, Linux only) beside
the CPU time of the same calls in process (the server's own cost, without the client's and
the scheduler's time, which the clock's overhead carries); then the requests per second one
server process answers with ``--clients`` concurrent clients each writing its own
conversation for ``--seconds``; then, on a fresh schema of the PostgreSQL at ``--postgres``,
the requests per second of one worker and of three replicas (``turnledger serve`` processes
on the one store) with three times as many clients, spread over the replicas. Prints a table
and writes ``benchmarks/results/server.json``. Run from the project root when the machine is quiet:
``.venv/bin/python -m benchmarks.server``.
"""

from __future__ import annotations

import argparse
import http.client
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
import urllib.parse
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
                prepared = session.prepare_request()
                prepared.to_openai_responses()
                samples.append(time.perf_counter() - start)
    return samples


def in_process_cpu(url: str, conversations: int, turns: int) -> float:
    """CPU seconds per turn of the in-process lane's calls (the store opened outside)."""
    spent = 0.0
    with tl.open_store(url) as store:
        for _ in range(conversations):
            session = store.start_session()
            for turn in range(turns):
                start = time.process_time()
                messages = [m for item in _items(turn) for m in from_openai_responses([item])]
                session.extend(messages)
                session.prepare_request().to_openai_responses()
                spent += time.process_time() - start
    return spent / (conversations * turns)


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (None where there is no ``/proc``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu(pid: int, base: str, conversations: int, turns: int) -> float | None:
    """CPU seconds the server process spends per one-request turn (`over_http_client`)."""
    before = _cpu_seconds(pid)
    over_http_client(base, conversations, turns, one_request=True)
    after = _cpu_seconds(pid)
    return None if before is None or after is None else (after - before) / (conversations
                                                                            * turns)


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


def over_httpx(base: str, conversations: int, turns: int) -> list[float]:
    samples: list[float] = []
    with httpx.Client(base_url=base, timeout=60) as http:
        for _ in range(conversations):
            conversation = http.post("/v1/conversations", json={}).json()["id"]
            path = f"/v1/conversations/{conversation}"
            for turn in range(turns):
                start = time.perf_counter()
                http.post(path + "/items", json={"items": _items(turn)}).raise_for_status()
                http.post(path + "/window", json={}).json()
                samples.append(time.perf_counter() - start)
    return samples


def over_http_client(base: str, conversations: int, turns: int, *,
                     one_request: bool = False) -> list[float]:
    address = urllib.parse.urlsplit(base)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=60)
    headers = {"content-type": "application/json"}

    def post(path: str, body: object) -> Any:
        connection.request("POST", path, json.dumps(body), headers)
        response = connection.getresponse()
        answer = json.loads(response.read())
        if response.status != 200:
            raise SystemExit(f"error: {path} answered {response.status}: {answer}")
        return answer

    samples: list[float] = []
    try:
        for _ in range(conversations):
            path = "/v1/conversations/" + post("/v1/conversations", {})["id"]
            for turn in range(turns):
                start = time.perf_counter()
                if one_request:
                    post(path + "/window", {"items": _items(turn)})
                else:
                    post(path + "/items", {"items": _items(turn)})
                    post(path + "/window", {})
                samples.append(time.perf_counter() - start)
    finally:
        connection.close()
    return samples


def throughput(base: str | list[str], clients: int, seconds: float) -> float:
    """Requests per second (appends and windows) of the server processes at ``base``, each
    client writing its own conversation on the replica ``n % len(base)``."""
    bases = [base] if isinstance(base, str) else base
    counts = [0] * clients
    deadline = time.monotonic() + seconds

    def client(n: int) -> None:
        with httpx.Client(base_url=bases[n % len(bases)], timeout=60) as http:
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


PG_URL = os.environ.get("TURNLEDGER_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def postgres_throughput(pg_url: str, clients: int, seconds: float) -> dict[str, float] | None:
    """Requests per second of one server process, then of three replicas, on one fresh
    PostgreSQL schema (None when PostgreSQL cannot be reached)."""
    import uuid

    import psycopg

    try:
        admin = psycopg.connect(pg_url, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as error:
        print(f"PostgreSQL not reached ({error}); no replica figures", file=sys.stderr)
        return None
    schema = f"tl_bench_{uuid.uuid4().hex[:12]}"
    url = f"{pg_url}?schema={schema}"
    out: dict[str, float] = {}
    try:
        for replicas in (1, 3):
            served = []
            try:
                for _ in range(replicas):  # one after the other: the first creates the tables
                    served.append(_serve(url))
                out[f"replicas_{replicas}"] = throughput([b for _, b in served], clients,
                                                         seconds)
            finally:
                for process, _ in served:
                    process.send_signal(signal.SIGTERM)
                for process, _ in served:
                    process.wait(30)
    finally:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--conversations", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--postgres", default=PG_URL,
                        help="a PostgreSQL URL for the replica lanes ('' to skip them)")
    args = parser.parse_args(argv)
    lanes: dict[str, list[float]] = {"in_process": [], "http.client": [], "httpx": [],
                                     "one_request": []}
    with tempfile.TemporaryDirectory(prefix="tl-bench-server-") as tmp:
        process, base = _serve(f"sqlite:///{tmp}/served.db")
        try:
            # One conversation of each lane in turn: a drift of the machine reaches all three.
            for n in range(args.conversations):
                lanes["in_process"] += in_process(f"sqlite:///{tmp}/local{n}.db", 1, args.turns)
                lanes["http.client"] += over_http_client(base, 1, args.turns)
                lanes["httpx"] += over_httpx(base, 1, args.turns)
                lanes["one_request"] += over_http_client(base, 1, args.turns, one_request=True)
            cpu: dict[str, list[float]] = {"server_one_request": [], "in_process": []}
            for n in range(args.conversations):
                spent = server_cpu(process.pid, base, 1, args.turns)
                if spent is not None:
                    cpu["server_one_request"].append(spent)
                cpu["in_process"].append(in_process_cpu(f"sqlite:///{tmp}/cpu{n}.db", 1,
                                                        args.turns))
            rps = throughput(base, args.clients, args.seconds)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
    replicas = (postgres_throughput(args.postgres, args.clients * 3, args.seconds)
                if args.postgres else None)
    ms = 1000.0
    rows = {name: {"p50_ms": statistics.median(samples) * ms,
                   "p99_ms": _percentile(samples, 0.99) * ms}
            for name, samples in lanes.items()}
    base_p50 = rows["in_process"]["p50_ms"]
    for name in ("http.client", "httpx", "one_request"):
        rows[name]["overhead_p50_ms"] = rows[name]["p50_ms"] - base_p50
        rows[name]["ratio_p50"] = rows[name]["p50_ms"] / base_p50
    result = {
        "benchmark": "server", "store": "sqlite", "turns": args.turns,
        "conversations": args.conversations, "lanes": rows,
        "cpu_ms_per_turn": {name: statistics.median(spent) * ms
                            for name, spent in cpu.items() if spent},
        "requests_per_second_one_worker": rps, "clients": args.clients,
        "postgresql_requests_per_second": replicas, "postgresql_clients": args.clients * 3,
        "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "load": os.getloadavg()[0],
    }
    print(f"append + window per turn, {args.turns} turns x {args.conversations} "
          "conversations, SQLite, loopback")
    print(f"{'':12} {'p50 ms':>8} {'p99 ms':>8} {'overhead p50':>13} {'ratio':>6}")
    for name, row in rows.items():
        extra = (f" {row['overhead_p50_ms']:13.2f} {row['ratio_p50']:6.2f}"
                 if "ratio_p50" in row else "")
        print(f"{name:12} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f}{extra}")
    spent_ms = result["cpu_ms_per_turn"]
    if "server_one_request" in spent_ms:
        print(f"CPU per turn, median of {args.conversations}: server process (one_request) "
              f"{spent_ms['server_one_request']:.2f} ms, in process "
              f"{spent_ms['in_process']:.2f} ms, overhead "
              f"{spent_ms['server_one_request'] - spent_ms['in_process']:.2f} ms")
    print(f"one worker: {rps:.0f} requests/s with {args.clients} httpx clients")
    if replicas:
        print(f"PostgreSQL, {args.clients * 3} httpx clients: one worker "
              f"{replicas['replicas_1']:.0f} requests/s, three replicas "
              f"{replicas['replicas_3']:.0f} requests/s ({os.cpu_count()} CPUs)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
