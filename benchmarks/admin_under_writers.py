"""Benchmark: an operator's command on a store that agent processes are writing (issue 33).

The longer run of the matrix of ``tests/integration/test_admin_under_writers.py``
(ADR-0098): for each admin command (``rekey``, ``rechain``, ``purge``, ``forget``, ``anchor``,
``projections run``) and each backend (a SQLite file, a fresh PostgreSQL schema on
127.0.0.1:5432), ``--agents`` agent processes (``tests/integration/admin_writer_child.py``: half
start a new session per message, each of which needs a new data key, half append to sessions
of their own) write for ``--seconds`` while the command runs as the CLI in its own process
(``python -m turnledger --store URL ...``), halfway through. When the store refuses an agent
(`StoreChanged`, ...) it reopens with the keys the operator hands out after the command.

- ``rekey``: the store's key is replaced; ``rechain``: an unkeyed chain gets an audit key;
- ``purge --older-than 2s --yes``: 80 sessions idle for 2 s, the agents come back to the half
  it forgets last, starting with the purge (so some are written between its judgment and its
  forget) and writing for ``--seconds`` from then;
- ``forget``: of a session nobody writes, and ``forget --if-idle-since 1s`` of one an agent
  is writing (it must be kept: exit 1);
- ``anchor`` (then ``verify --anchor`` afterwards) and ``projections run``.

Afterwards a fresh store opened with the final keys reads every append an agent was told
had succeeded. Columns: ``acked`` appends acknowledged to the agents; ``lost`` of those
missing or unreadable (in sessions not forgotten); ``refused`` refusals the agents saw;
``erased_active`` sessions forgotten that an agent wrote during the run; ``verify``
``turnledger.audit.verify`` (and ``verify --anchor``) clean. Run from the project root::

    .venv/bin/python -m benchmarks.admin_under_writers [--seconds 10] [--agents 2]
        [--commands rekey,rechain,purge,forget,anchor,projections]
        [--backends sqlite,postgresql] [--before PATH]

``--before PATH`` runs the agents and the commands from the tree at PATH (a checkout from
before ADR-0098, e.g. 9b14823); the checks always run with this tree. Prints a table, writes
``benchmarks/results/admin_under_writers.json`` (``--output``) and exits 1 when an
acknowledged append was lost, an active session was erased, verify failed or a run broke.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import turnledger as tl
from tests.backends import fresh_target, postgres_problem
from tests.integration.test_admin_under_writers import (
    ACKS_AFTER,
    ACKS_BEFORE,
    SESSIONS,
    Agents,
    texts_of,
)
from turnledger.audit import verify
from turnledger.store.keys import new_key_text

RESULTS = Path(__file__).parent / "results" / "admin_under_writers.json"
ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ("rekey", "rechain", "purge", "forget", "anchor", "projections")
BACKENDS = ("sqlite", "postgresql")
PER_AGENT = 3
"""Sessions of each agent that appends to existing sessions."""
IDLE = 2.2
"""Seconds the purge's sessions stay idle before it runs (it forgets those idle 2 s)."""


def _env(extra: dict[str, str], before: Path | None) -> dict[str, str]:
    env = dict(extra)
    if before is not None:
        env["PYTHONPATH"] = str(before)
    return env


def _cli(url: str, arguments: Sequence[str], env: dict[str, str],
         before: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process (from the tree at ``before``, if given); not checked."""
    return subprocess.run(
        [sys.executable, "-m", "turnledger", "--store", url, *arguments],
        cwd=before or ROOT, env={**os.environ, **_env(env, before)}, capture_output=True,
        text=True, timeout=900,
    )


def _until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _keys(command: str) -> tuple[dict[str, str | None], dict[str, str | None], dict[str, str]]:
    """The agents' keys before and after the command, and the command's environment."""
    key, new, audit = new_key_text(), new_key_text(), new_key_text()
    if command == "rekey":
        return {"key": key}, {"key": new}, {"TURNLEDGER_KEY": key, "TURNLEDGER_NEW_KEY": new}
    if command == "rechain":
        return {}, {"audit_key": audit}, {"TURNLEDGER_AUDIT_KEY": audit}
    if command == "purge":
        return {"key": key}, {"key": key}, {"TURNLEDGER_KEY": key}
    keys: dict[str, str | None] = {"key": key, "audit_key": audit}
    return keys, keys, {"TURNLEDGER_KEY": key, "TURNLEDGER_AUDIT_KEY": audit}


def _open(url: str, keys: dict[str, str | None]) -> tl.Store:
    return tl.open_store(url, key=keys.get("key"), audit_key=keys.get("audit_key"))


class Scenario:
    """One command under agents on one empty store: set up, run, then checked."""

    def __init__(self, command: str, url: str, directory: Path, seconds: float,
                 agent_count: int, before: Path | None) -> None:
        self.command, self.url, self.directory = command, url, directory
        self.seconds, self.before = seconds, before
        self.first, self.last, self.env = _keys(command)
        self.modes = ["existing"] * agent_count if command == "purge" else [
            "new" if k % 2 == 0 else "existing" for k in range(agent_count)]
        self.agents = Agents(directory, url, self.first)
        self.runs: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.error = ""
        self.anchor = directory / "anchor.json"

    def setup(self) -> list[list[str]]:
        """The sessions (the purge's idle ones first); each agent's own."""
        purge = self.command == "purge"
        count = SESSIONS if purge else PER_AGENT * self.modes.count("existing") + 1
        with _open(self.url, self.first) as store:
            self.ids = [store.start_session().id for _ in range(count)]
        if purge:
            time.sleep(IDLE)
            returning = self.ids[SESSIONS // 2:]
            return [returning[::-(k + 1)] for k in range(len(self.modes))]
        own = self.ids[1:]  # ids[0]: the idle session `forget` forgets
        return [own[PER_AGENT * (k // 2):PER_AGENT * (k // 2 + 1)] if mode == "existing"
                else [] for k, mode in enumerate(self.modes)]

    def _cli(self, arguments: Sequence[str], expect: int) -> None:
        started = time.monotonic()
        done = _cli(self.url, arguments, self.env, self.before)
        self.runs.append({"command": " ".join(arguments), "exit": done.returncode,
                          "expected": expect, "seconds": round(time.monotonic() - started, 2)})
        if done.returncode != expect:
            raise AssertionError(f"{' '.join(arguments)}: exit {done.returncode}, expected "
                                 f"{expect}: {(done.stderr or done.stdout).strip()[-300:]}")

    def operate(self) -> None:
        """The operator's command, halfway through the agents' writing."""
        if self.command == "rekey":
            self._cli(["rekey"], 0)
        elif self.command == "rechain":
            self._cli(["rechain", "--yes"], 0)
        elif self.command == "forget":
            self._cli(["forget", self.ids[0]], 0)
            if len(self.ids) > 1:  # a session an agent is writing: not idle, kept (exit 1)
                self._cli(["forget", self.ids[1], "--if-idle-since", "1s"], 1)
        elif self.command == "anchor":
            self._cli(["anchor", "--output", str(self.anchor)], 0)
        else:
            self._cli(["projections", "run"], 0)

    def write(self, assigned: list[list[str]]) -> None:
        """The agents write for `seconds`, the command running among them."""
        env = _env({"TL_I33_AGENT_SECONDS": str(self.seconds + 240)}, self.before)
        started = time.monotonic()
        try:
            if self.command == "purge":  # it starts with the agents, as in the test
                self.runs.append({"command": "purge --older-than 2s --yes", "expected": 0})
                purge = subprocess.Popen(
                    [sys.executable, "-m", "turnledger", "--store", self.url, "purge",
                     "--older-than", "2s", "--yes"], cwd=self.before or ROOT,
                    env={**os.environ, **_env(self.env, self.before)},
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                )
            for mode, sessions in zip(self.modes, assigned, strict=True):
                self.agents.start(mode, sessions, env=env)
            if self.command == "purge":
                _, errors = purge.communicate(timeout=900)
                self.runs[-1].update(exit=purge.returncode,
                                     seconds=round(time.monotonic() - started, 2))
                if purge.returncode != 0:
                    raise AssertionError(f"purge: exit {purge.returncode}: {errors[-300:]}")
            else:
                self.agents.wait_for(ACKS_BEFORE)
                _until(started + self.seconds / 2)
                self.operate()
                self.agents.hand_out(self.last)
                self.agents.wait_for(ACKS_AFTER)
            _until(started + self.seconds)
        finally:
            self.agents.stop()

    def check(self) -> dict[str, Any]:
        """What a fresh store opened with the final keys reads of the acknowledged appends."""
        acks, refusals = self.agents.acks(), self.agents.refusals()
        by_session: dict[str, set[str]] = {}
        for ack in acks:
            by_session.setdefault(ack["session"], set()).add(ack["text"])
        lost = erased_acks = unreadable = 0
        with _open(self.url, self.last) as store:
            forgotten = {s for s in {*self.ids, *by_session} if store.forgotten(s)}
            erased_active = sorted(forgotten & set(by_session))
            for session_id, wanted in by_session.items():
                if session_id in forgotten:
                    erased_acks += len(wanted)
                    continue
                try:
                    lost += len(wanted - texts_of(store, session_id))
                except tl.TurnledgerError as failure:
                    unreadable += 1
                    lost += len(wanted)
                    if unreadable <= 3:
                        self.notes.append(f"{session_id}: {type(failure).__name__}: "
                                          f"{failure}"[:200])
            report = verify(store.backend)
            verified = report.ok
            self.notes += [str(v)[:200] for v in report.violations[:3]]
        self._judge(forgotten)
        if self.command == "anchor" and self.anchor.exists():
            checked = _cli(self.url, ["verify", "--anchor", str(self.anchor)], self.env)
            verified = verified and checked.returncode == 0
            if checked.returncode:
                self.notes.append(f"verify --anchor: exit {checked.returncode}")
        return {
            "command": self.command, "agents": len(self.modes), "seconds": self.seconds,
            "acked": len(acks), "lost": lost, "refused": len(refusals),
            "erased_active": len(erased_active), "verify": verified,
            "sessions_written": len(by_session), "unreadable_sessions": unreadable,
            "erased_acks": erased_acks, "refusals": dict(Counter(refusals)),
            "runs": self.runs, "error": self.error, "notes": self.notes,
            "ok": not (lost or erased_active or self.error) and verified,
        }

    def _judge(self, forgotten: set[str]) -> None:
        """Did the erasing commands do their job (on the sessions nobody wrote)?"""
        if self.command == "purge":
            untouched = set(self.ids[:SESSIONS // 2])
            purged = len(untouched & forgotten)
            self.notes.append(f"{purged} of {len(untouched)} idle sessions forgotten")
            if purged < len(untouched) and not self.error:
                self.error = "the purge left idle sessions"
        if self.command == "forget" and self.ids[0] not in forgotten and not self.error:
            self.error = "forget did not forget the idle session"

    def __call__(self) -> dict[str, Any]:
        try:
            self.write(self.setup())
        except AssertionError as broken:
            self.error = str(broken)[:500]
        return self.check()


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [[str(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + " |"
              for r in cells]
    return "\n".join(lines)


def _listed(parser: argparse.ArgumentParser, option: str, value: str,
            known: Sequence[str]) -> list[str]:
    chosen = [v.strip() for v in value.split(",") if v.strip()]
    if not chosen or set(chosen) - set(known):
        parser.error(f"{option}: a comma-separated list of {', '.join(known)}")
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="seconds the agents write around each command")
    parser.add_argument("--agents", type=int, default=2, choices=range(2, 5),
                        help="agent processes (2-4)")
    parser.add_argument("--commands", default=",".join(COMMANDS),
                        help="comma-separated subset of " + ", ".join(COMMANDS))
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="comma-separated: sqlite, postgresql")
    parser.add_argument("--before", type=Path,
                        help="run the agents and the commands from the tree at PATH")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    commands = _listed(parser, "--commands", args.commands, COMMANDS)
    backends = _listed(parser, "--backends", args.backends, BACKENDS)
    before = args.before.resolve() if args.before else None
    if "postgresql" in backends and (problem := postgres_problem()):
        print(problem, file=sys.stderr)
        return 1
    rows: list[dict[str, Any]] = []
    for command in commands:
        for backend in backends:
            with (
                tempfile.TemporaryDirectory(prefix=f"i33-{command}-{backend}-") as tmp,
                fresh_target(backend, Path(tmp)) as target,
            ):
                row = {"backend": backend, **Scenario(
                    command, target.url, Path(tmp), args.seconds, args.agents, before)()}
            rows.append(row)
            print(f"  {command} on {backend}: {row['acked']} acked, {row['lost']} lost"
                  + (f" ({row['error']})" if row["error"] else ""), flush=True)
    print(f"\nAdmin commands under {args.agents} agents writing for {args.seconds:g} s"
          + (f" (agents and commands from {before})" if before else "") + "\n")
    print(_table(rows, ["command", "backend", "acked", "lost", "refused", "erased_active",
                        "verify"]))
    failed = [r for r in rows if not r["ok"]]
    for row in failed:
        print(f"\nFAILED {row['command']} on {row['backend']}: {row['error']} {row['notes']}")
    report = {
        "benchmark": "admin_under_writers",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.admin_under_writers " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "python": platform.python_version(), "platform": platform.platform(),
        "cpus": os.cpu_count(), "seconds": args.seconds, "agents": args.agents,
        "before": str(before) if before else None, "ok": not failed, "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nresults: {args.output}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
