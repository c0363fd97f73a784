"""Kill benchmark of the server: SIGKILL a ``turnledger serve`` replica mid-request (issue 37).

The goal of issue 37: the store's fault figures (``benchmarks/crash.py``: nothing acknowledged
lost, nothing written twice) unchanged when the writes come through the server. Two lanes:

- ``postgresql``: ``--replicas`` (3) ``turnledger serve`` processes on ONE PostgreSQL store (a
  fresh schema on 127.0.0.1:5432);
- ``sqlite``: one ``turnledger serve`` process on a SQLite file.

``--clients`` threads append items (``POST /v1/conversations/{id}/items``, a user and an
assistant message with ids the client chose, ``msg_c<client>_<n>u`` and ``...a``) to a few
conversations, round-robin over the live replicas. A killer SIGKILLs a random live replica at
random moments (seeded: ``TURNLEDGER_KILL_SEED`` replays the delays and choices) and restarts it
on a new port. A request that gets no answer (connection cut or refused, timeout, 5xx) is
retried with the SAME items on the next live replica until it is answered: a 200 (stored), or on
a retry a 400 saying the id is already in the conversation (stored before the kill cut its
answer: acknowledged by the retry, not a duplicate). The client may never see an id twice.

At the end every conversation is read twice: listed over HTTP from every live replica (``GET
.../items?order=asc&limit=100`` paged with ``after``; the replicas must agree), and folded from
the store itself (`turnledger.server.items.items_of`); then ``turnledger.audit.verify`` audits
the whole store. Counted: *lost* (an acknowledged id missing), *duplicated* (an id present more
than once), *phantom* (a present id no client sent to that conversation); *cut* (attempts that
failed after the request was sent: the kill landed mid-request), *in flight* (requests open on
the replica at the moment of its kill), *stored before kill* (retries answered "already in this
conversation").

Run from the project root: ``.venv/bin/python -m benchmarks.server_kills`` (``--kills N`` per
lane, ``--seconds S`` per lane, ``--replicas N``, ``--clients N``, ``--backends sqlite``).
Prints a table, writes ``benchmarks/results/server_kills.json`` and exits 1 when anything was
lost, duplicated or phantom, the replicas disagree, a request went unanswered or was refused
for another reason, or verify fails (or PostgreSQL does not answer on 127.0.0.1:5432).
`run_lane` is the loop, shared with ``tests/server/test_server_kills.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

import turnledger as tl
from tests.backends import fresh_target, postgres_problem
from turnledger.audit import verify
from turnledger.server.ids import session_id
from turnledger.server.items import DUPLICATE_ID, items_of

RESULTS = Path(__file__).parent / "results" / "server_kills.json"
COLUMNS = ("backend", "replicas", "kills", "in_flight", "acknowledged", "retried", "cut",
           "stored_before_kill", "lost", "duplicated", "phantom", "verify_ok", "seconds")
START_LIMIT = 30.0
"""Seconds a replica may take to say it is running."""
REQUEST_TIMEOUT = 20.0
"""Seconds one attempt may take (a SIGKILL resets the connection at once)."""
RETRY_LIMIT = 90.0
"""Seconds a request may take to get an answer, retries included, before it counts unanswered."""
_RUNNING = re.compile(r"running on (http://127\.0\.0\.1:\d+)")


def kill_seed() -> int:
    """``TURNLEDGER_KILL_SEED`` when set (to replay a sequence of kills), else a random one."""
    return int(os.environ.get("TURNLEDGER_KILL_SEED") or random.SystemRandom().getrandbits(32))


class Replica:
    """One ``turnledger serve`` process on ``url``; its stderr is read on a thread (so a full
    pipe never blocks it) and its last lines are kept for a failure's report."""

    def __init__(self, url: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "turnledger", "--store", url, "serve", "--port", "0"],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.tail: deque[str] = deque(maxlen=30)
        self.tracebacks = 0
        self._base: str | None = None
        self._running = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        self.base: str = self._started()

    def _started(self) -> str:
        if not self._running.wait(START_LIMIT) or self._base is None:
            self.process.kill()
            self.process.wait()
            raise RuntimeError("a replica did not start: " + " | ".join(self.tail))
        return self._base

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.tail.append(line.rstrip())
            if "Traceback" in line:
                self.tracebacks += 1
            found = _RUNNING.search(line)
            if found and self._base is None:
                self._base = found.group(1)
                self._running.set()
        self._running.set()  # it exited before it ran: the caller sees no base

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class LaneFigures:
    """One lane's counts (module doc)."""

    backend: str
    replicas: int
    seed: int
    kills: int = 0
    in_flight: int = 0
    requests: int = 0
    acknowledged: int = 0
    acknowledged_items: int = 0
    retried: int = 0
    cut: int = 0
    refused: int = 0
    server_errors: int = 0
    stored_before_kill: int = 0
    unanswered: int = 0
    unexpected: list[str] = field(default_factory=list)
    items_present: int = 0
    lost: int = 0
    duplicated: int = 0
    phantom: int = 0
    in_doubt_present: int = 0
    replicas_disagree: int = 0
    verify_ok: bool = False
    verify_findings: list[str] = field(default_factory=list)
    server_tracebacks: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.duplicated == 0 and self.phantom == 0
                and self.unanswered == 0 and not self.unexpected
                and self.replicas_disagree == 0 and self.verify_ok)

    def row(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


class _Pool:
    """The replicas' slots: the live ones serve the clients; a killed one is restarted on a new
    port by a thread of its own while the others keep serving."""

    def __init__(self, url: str, count: int) -> None:
        self.url = url
        self.lock = threading.Lock()
        self.slots: list[Replica | None] = [Replica(url) for _ in range(count)]
        self.turn = 0
        self.restarts: list[threading.Thread] = []
        self.failures: list[str] = []
        self.tracebacks = 0

    def live(self) -> list[tuple[int, Replica]]:
        with self.lock:
            return [(i, r) for i, r in enumerate(self.slots) if r is not None]

    def pick(self, avoid: str | None, deadline: float) -> str | None:
        """The next live replica's base (another than ``avoid`` when one is up); waits while
        none is; None after ``deadline``."""
        while time.monotonic() < deadline:
            with self.lock:
                bases = [r.base for r in self.slots if r is not None]
                self.turn += 1
                turn = self.turn
            choices = [b for b in bases if b != avoid] or bases
            if choices:
                return choices[turn % len(choices)]
            time.sleep(0.02)
        return None

    def kill(self, slot: int) -> None:
        """SIGKILL the slot's replica and restart it on a thread."""
        with self.lock:
            victim = self.slots[slot]
            self.slots[slot] = None
        assert victim is not None
        victim.kill()
        self.tracebacks += victim.tracebacks

        def restart() -> None:
            try:
                replica = Replica(self.url)
            except RuntimeError as error:
                self.failures.append(str(error))
                return
            with self.lock:
                self.slots[slot] = replica

        thread = threading.Thread(target=restart, daemon=True)
        thread.start()
        self.restarts.append(thread)

    def settle(self) -> None:
        for thread in self.restarts:
            thread.join(START_LIMIT + 5)

    def close(self) -> None:
        self.settle()
        for _, replica in self.live():
            replica.stop()
            self.tracebacks += replica.tracebacks


def _items(client: int, n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"question {n} of client {client}",
             "id": f"msg_c{client}_{n}u"},
            {"role": "assistant", "content": f"answer {n} to client {client}",
             "id": f"msg_c{client}_{n}a"}]


def _error_message(answer: httpx.Response) -> str:
    """The message of an error answer (its text when it is not OpenAI's envelope)."""
    if answer.status_code == 200:
        return ""
    try:
        return str(answer.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return answer.text[:200]


def _error_code(answer: httpx.Response) -> str | None:
    """The ``code`` of OpenAI's error envelope, None when the answer has none."""
    try:
        code = answer.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return str(code) if code is not None else None


def _listed(http: httpx.Client, base: str, conversation: str) -> list[str]:
    """Every item id of the conversation as ``base`` lists it, oldest first (paged)."""
    ids: list[str] = []
    params: dict[str, Any] = {"limit": 100, "order": "asc"}
    while True:
        answer = http.get(f"{base}/v1/conversations/{conversation}/items", params=params)
        answer.raise_for_status()
        page = answer.json()
        ids += [item["id"] for item in page["data"]]
        if not page["has_more"]:
            return ids
        params["after"] = page["last_id"]


class _Lane:
    """One lane's loop: the clients, the killer and their shared counts (`run_lane`)."""

    def __init__(self, pool: _Pool, figures: LaneFigures, convs: list[str], seed: int) -> None:
        self.pool = pool
        self.figures = figures
        self.convs = convs
        self.seed = seed
        self.sent: dict[str, set[str]] = {c: set() for c in convs}
        self.acknowledged: dict[str, set[str]] = {c: set() for c in convs}
        self.in_flight: dict[int, str] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def count(self, name: str, by: int = 1) -> None:
        with self.lock:
            setattr(self.figures, name, getattr(self.figures, name) + by)

    def send(self, http: httpx.Client, client: int, conversation: str,
             items: list[dict[str, Any]]) -> None:
        """POST the items until answered (module doc)."""
        ids = [item["id"] for item in items]
        deadline = time.monotonic() + RETRY_LIMIT
        attempts, avoid = 0, None
        while (base := self.pool.pick(avoid, deadline)) is not None:
            attempts += 1
            if attempts == 2:
                self.count("retried")
            avoid = base
            self.in_flight[client] = base
            try:
                answer = http.post(f"{base}/v1/conversations/{conversation}/items",
                                   json={"items": items})
            except (httpx.ConnectError, httpx.ConnectTimeout):
                self.count("refused")
                continue
            except httpx.TransportError:
                self.count("cut")
                continue
            finally:
                self.in_flight.pop(client, None)
            if answer.status_code >= 500:
                self.count("server_errors")
                time.sleep(0.05)
                continue
            message = _error_message(answer)
            if answer.status_code == 200:
                stored = [item["id"] for item in answer.json()["data"]]
                if stored != ids:
                    self.figures.unexpected.append(f"{conversation} {ids}: 200 with {stored}")
                    return
            elif (answer.status_code == 400 and _error_code(answer) == DUPLICATE_ID
                  and attempts > 1):
                self.count("stored_before_kill")
            else:
                self.figures.unexpected.append(f"{conversation} {ids} attempt {attempts}: "
                                               f"{answer.status_code} {message[:200]}")
                return
            with self.lock:
                self.acknowledged[conversation].update(ids)
                self.figures.acknowledged += 1
                self.figures.acknowledged_items += len(ids)
            return
        self.count("unanswered")

    def client(self, n: int) -> None:
        rng = random.Random(f"{self.seed}-client-{n}")
        with httpx.Client(timeout=REQUEST_TIMEOUT) as http:
            k = 0
            while not self.stop.is_set():
                conversation = rng.choice(self.convs)
                items = _items(n, k)
                with self.lock:
                    self.sent[conversation].update(item["id"] for item in items)
                    self.figures.requests += 1
                self.send(http, n, conversation, items)
                k += 1

    def killer(self, kills: int, seconds: float) -> None:
        rng = random.Random(f"{self.seed}-killer")
        interval = seconds / (kills + 1)
        for _ in range(kills):
            time.sleep(rng.uniform(0.3, 1.7) * interval)
            while not (live := self.pool.live()):
                time.sleep(0.02)
            slot, victim = rng.choice(live)
            self.figures.in_flight += sum(1 for b in list(self.in_flight.values())
                                          if b == victim.base)
            self.pool.kill(slot)
            self.figures.kills += 1


def run_lane(url: str, backend: str, *, replicas: int, kills: int, seconds: float, seed: int,
             clients: int = 6, conversations: int = 4) -> LaneFigures:
    """The kill loop on the store at ``url`` (module doc): its figures."""
    figures = LaneFigures(backend, replicas, seed)
    began = time.monotonic()
    pool = _Pool(url, replicas)
    try:
        with httpx.Client(timeout=REQUEST_TIMEOUT) as http:
            base = pool.live()[0][1].base
            convs = [http.post(base + "/v1/conversations", json={}).raise_for_status().json()["id"]
                     for _ in range(conversations)]
        lane = _Lane(pool, figures, convs, seed)
        threads = [threading.Thread(target=lane.client, args=(n,), daemon=True)
                   for n in range(clients)]
        for t in threads:
            t.start()
        try:
            lane.killer(kills, seconds)
            time.sleep(max(0.0, began + seconds - time.monotonic()))
        finally:
            lane.stop.set()
            for t in threads:
                t.join(RETRY_LIMIT + REQUEST_TIMEOUT + 10)
        figures.unexpected += [f"a client thread did not end ({t.name})"
                               for t in threads if t.is_alive()]
        pool.settle()
        figures.unexpected += pool.failures
        _check(figures, pool, url, convs, lane.sent, lane.acknowledged)
    finally:
        pool.close()
    figures.server_tracebacks = pool.tracebacks
    figures.seconds = round(time.monotonic() - began, 1)
    return figures


def _check(figures: LaneFigures, pool: _Pool, url: str, convs: list[str],
           sent: dict[str, set[str]], acknowledged: dict[str, set[str]]) -> None:
    """Count lost, duplicated and phantom items from the store and every live replica, and
    audit the store."""
    with httpx.Client(timeout=60) as http:
        listed = {c: [_listed(http, r.base, c) for _, r in pool.live()] for c in convs}
    with tl.open_store(url) as store:
        folded = {c: [s.item["id"] for s in items_of(store.events_of(session_id(c)))]
                  for c in convs}
        report = verify(store.backend)
    figures.verify_ok = report.ok
    figures.verify_findings = [str(v) for v in report.violations[:10]]
    for c in convs:
        figures.replicas_disagree += sum(1 for ids in listed[c] if ids != folded[c])
        for ids in [folded[c], *listed[c]]:  # the worst reading of each count
            present = Counter(ids)
            figures.lost = max(figures.lost, len(acknowledged[c] - present.keys()))
            figures.duplicated = max(figures.duplicated,
                                     sum(n - 1 for n in present.values() if n > 1))
            figures.phantom = max(figures.phantom, len(present.keys() - sent[c]))
        figures.items_present += len(folded[c])
        figures.in_doubt_present += len((set(folded[c]) & sent[c]) - acknowledged[c])


def _lane(backend: str, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    if backend == "postgresql" and (problem := postgres_problem()) is not None:
        return {"backend": backend, "ok": False, "failure": problem}
    with (tempfile.TemporaryDirectory(prefix=f"server-kills-{backend}-") as tmp,
          fresh_target(backend, Path(tmp)) as target):
        figures = run_lane(target.url, backend,
                           replicas=args.replicas if backend == "postgresql" else 1,
                           kills=args.kills, seconds=args.seconds, seed=seed,
                           clients=args.clients, conversations=args.conversations)
    return figures.row()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="kills per lane (default 20)")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="seconds of writing per lane (default 60)")
    parser.add_argument("--replicas", type=int, default=3,
                        help="server processes on PostgreSQL (default 3; SQLite has one)")
    parser.add_argument("--clients", type=int, default=6, help="client threads (default 6)")
    parser.add_argument("--conversations", type=int, default=4,
                        help="conversations written to (default 4)")
    parser.add_argument("--backends", default="postgresql,sqlite",
                        help="lanes, comma-separated (default postgresql,sqlite)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    seed = kill_seed()
    print(f"seed {seed} (TURNLEDGER_KILL_SEED={seed} replays the kills)", flush=True)
    began = time.monotonic()
    rows = []
    for backend in [b for b in args.backends.split(",") if b]:
        rows.append(_lane(backend, args, seed))
        print(json.dumps(rows[-1]), flush=True)
    print("  ".join(f"{c:>{max(len(c), 10)}}" for c in COLUMNS))
    for row in rows:
        print("  ".join(f"{row.get(c, '-')!s:>{max(len(c), 10)}}" for c in COLUMNS))
    for row in rows:
        if not row["ok"]:
            print(f"FAILED on {row['backend']}: {row.get('failure') or row}", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "server_kills", "seed": seed, "kills_per_lane": args.kills,
        "seconds_per_lane": args.seconds, "clients": args.clients,
        "conversations": args.conversations, "python": platform.python_version(),
        "machine": platform.machine(), "cpus": os.cpu_count(),
        "total_seconds": round(time.monotonic() - began, 1), "lanes": rows,
    }, indent=2) + "\n", encoding="utf-8")
    return 0 if rows and all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
