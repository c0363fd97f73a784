"""Issue 33: an operator's command on a store that agent processes are writing (ADR-0098).

Every admin command that changes a store (`rekey`, `rechain`, `purge`, `forget`, `anchor`,
`projections run`) runs as the CLI, in its own process, while agent processes
(``admin_writer_child.py``) write to the same SQLite file or PostgreSQL schema. Afterwards a
fresh process opened with the new key / audit key must read every append any agent was told
had succeeded, `verify` must be clean, and nothing erased may have been active. The agents
reopen with the keys the operator hands them when the store refuses them (`StoreChanged`).

The longer run of the same matrix is ``python -m benchmarks.admin_under_writers``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import turnledger as tl
from tests.backends import SHARED_BACKENDS, Target, fresh_target
from turnledger.audit import verify
from turnledger.domain.events import MessageAppended, SessionForgotten
from turnledger.domain.messages import Chat
from turnledger.store.keys import new_key_text

CHILD = Path(__file__).with_name("admin_writer_child.py")
ROOT = Path(__file__).resolve().parents[2]
ACKS_BEFORE = 4
"""Appends each agent must have had acknowledged before the operator's command runs."""
ACKS_AFTER = 4
"""... and after it returned (the agents reopened with the new keys and went on)."""
SESSIONS = 80
"""Sessions the purge test makes idle; the agents come back to the half it forgets last."""


@pytest.fixture(params=SHARED_BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    with fresh_target(request.param, tmp_path) as made:
        yield made


class Agents:
    """Agent processes writing to one store until stopped; what each was told succeeded."""

    def __init__(self, directory: Path, url: str, keys: dict[str, str | None]) -> None:
        self.directory, self.url = directory, url
        self.keys_file = directory / "keys.json"
        self.stop_file = directory / "stop"
        self.hand_out(keys)
        self.outputs: list[Path] = []
        self.processes: list[subprocess.Popen[bytes]] = []

    def hand_out(self, keys: dict[str, str | None]) -> None:
        """The keys the agents (re)open the store with from now on."""
        temporary = self.keys_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(keys))
        temporary.replace(self.keys_file)

    def start(self, mode: str, sessions: Sequence[str] = (), *, env: dict[str, str] | None
              = None, prefix: Sequence[str] = ()) -> None:
        out = self.directory / f"agent-{len(self.outputs)}.jsonl"
        out.touch()
        arguments = [self.url, str(self.keys_file), str(out), str(self.stop_file), mode]
        if sessions:
            listed = self.directory / f"sessions-{len(self.outputs)}.txt"
            listed.write_text("\n".join(sessions))
            arguments.append(str(listed))
        self.outputs.append(out)
        self.processes.append(subprocess.Popen(
            [*prefix, sys.executable, str(CHILD), *arguments], cwd=ROOT,
            env={**os.environ, **(env or {})}, stderr=subprocess.PIPE,
        ))

    def acks(self, index: int | None = None) -> list[dict[str, Any]]:
        outputs = self.outputs if index is None else [self.outputs[index]]
        found = []
        for out in outputs:
            for line in out.read_text().splitlines():
                if line.strip():
                    found.append(json.loads(line))
        return [a for a in found if "session" in a]

    def refusals(self) -> list[str]:
        return [json.loads(line)["refused"] for out in self.outputs
                for line in out.read_text().splitlines() if '"refused"' in line]

    def wait_for(self, count: int, timeout: float = 60.0) -> None:
        """Until every agent has ``count`` more acknowledged appends than now."""
        start = [len(self.acks(i)) for i in range(len(self.outputs))]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(len(self.acks(i)) >= start[i] + count for i in range(len(self.outputs))):
                return
            for process in self.processes:
                if process.poll() is not None:  # exit 0 without output: its 60 s were up
                    raise AssertionError(
                        f"an agent ended (exit {process.returncode}) before {count} more"
                        f" appends: {process.stderr.read().decode()}"  # type: ignore[union-attr]
                    )
            time.sleep(0.05)
        raise AssertionError(f"the agents did not write {count} more appends in {timeout} s")

    def stop(self) -> None:
        self.stop_file.touch()
        for process in self.processes:
            _, errors = process.communicate(timeout=60)
            assert process.returncode == 0, errors.decode()


def cli(url: str, *arguments: str, env: dict[str, str] | None = None,
        expect: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "turnledger", "--store", url, *arguments], cwd=ROOT,
        env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == expect, (done.returncode, done.stdout, done.stderr)
    return done


def texts_of(store: tl.Store, session_id: str) -> set[str]:
    return {
        event.message.message.content for event in store.events_of(session_id)
        if isinstance(event, MessageAppended) and isinstance(event.message, Chat)
    }


def assert_every_ack_reads(store: tl.Store, acks: list[dict[str, Any]]) -> None:
    """Each acknowledged append is there, read by a fresh process's keys; verify is clean."""
    by_session: dict[str, set[str]] = {}
    for ack in acks:
        by_session.setdefault(ack["session"], set()).add(ack["text"])
    unreadable = []
    for session_id, wanted in by_session.items():
        try:
            missing = wanted - texts_of(store, session_id)
        except tl.TurnledgerError as error:
            unreadable.append(f"{session_id}: {type(error).__name__}: {error}")
            continue
        if missing:
            unreadable.append(f"{session_id}: {len(missing)} acknowledged appends missing")
    assert not unreadable, f"{len(unreadable)} of {len(by_session)} sessions: {unreadable[:3]}"
    report = verify(store.backend)
    assert report.ok, [str(v) for v in report.violations[:5]]


def test_i33_p1_rekey_under_writers_loses_no_acknowledged_append(
    target: Target, tmp_path: Path
) -> None:
    """Point 1: a writer opened before `rekey` never stores a data key under the old master
    key. Sessions it starts afterwards are refused (`StoreChanged`) until it reopens with the
    new key; with the new key every acknowledged append reads, `verify` is clean, and the
    store can be re-keyed again (it is not stuck with mixed keys)."""
    old, new, newer = new_key_text(), new_key_text(), new_key_text()
    with tl.open_store(target.url, key=old) as store:
        existing = [store.start_session().id for _ in range(3)]
    agents = Agents(tmp_path, target.url, {"key": old})
    agents.start("new")
    agents.start("new")
    agents.start("existing", existing)
    try:
        agents.wait_for(ACKS_BEFORE)
        cli(target.url, "rekey", env={"TURNLEDGER_KEY": old, "TURNLEDGER_NEW_KEY": new})
        time.sleep(0.3)  # the agents go on with the old key meanwhile
        agents.hand_out({"key": new})
        agents.wait_for(ACKS_AFTER)
    finally:
        agents.stop()
    with tl.open_store(target.url, key=new) as store:
        assert_every_ack_reads(store, agents.acks())
    assert "StoreChanged" in agents.refusals()  # the new sessions were refused, then reopened
    cli(target.url, "rekey", env={"TURNLEDGER_KEY": new, "TURNLEDGER_NEW_KEY": newer})
    with tl.open_store(target.url, key=newer) as store:
        assert_every_ack_reads(store, agents.acks())


def test_i33_p2_rechain_under_writers_loses_no_acknowledged_append(
    target: Target, tmp_path: Path
) -> None:
    """Point 2: `rechain` reads and rewrites inside one transaction no append interleaves
    with; writers opened before it are refused (`StoreChanged`) instead of extending the
    unkeyed chain. Opened with the audit key, every acknowledged append reads (those from
    before the rechain too) and `verify` reports nothing."""
    audit = new_key_text()
    with tl.open_store(target.url) as store:
        existing = [store.start_session().id for _ in range(3)]
    agents = Agents(tmp_path, target.url, {})
    agents.start("new")
    agents.start("existing", existing)
    try:
        agents.wait_for(ACKS_BEFORE)
        done = cli(target.url, "rechain", "--yes", env={"TURNLEDGER_AUDIT_KEY": audit})
        assert "re-chained" in done.stdout
        agents.hand_out({"audit_key": audit})
        agents.wait_for(ACKS_AFTER)
    finally:
        agents.stop()
    with tl.open_store(target.url, audit_key=audit) as store:
        assert_every_ack_reads(store, agents.acks())
    assert "StoreChanged" in agents.refusals()


def test_i33_p3_purge_keeps_the_sessions_written_while_it_runs(
    target: Target, tmp_path: Path
) -> None:
    """Point 3: `purge --yes` forgets a session only at the version it judged idle, checked
    in the transaction that destroys its key: a session written after it was listed (its
    user came back during the purge) is kept with every acknowledged append; the sessions
    nobody wrote are forgotten. The agents start with the purge and write the sessions it
    forgets last, so some are written between the judgment and the forget."""
    key = new_key_text()
    with tl.open_store(target.url, key=key) as store:
        ids = [store.start_session().id for _ in range(SESSIONS)]
    time.sleep(2.2)
    untouched, returning = ids[:SESSIONS // 2], ids[SESSIONS // 2:]
    agents = Agents(tmp_path, target.url, {"key": key})
    started = time.time()
    purge = subprocess.Popen(
        [sys.executable, "-m", "turnledger", "--store", target.url, "purge", "--older-than",
         "2s", "--yes"], cwd=ROOT, env={**os.environ, "TURNLEDGER_KEY": key},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    agents.start("existing", returning[::-1])
    agents.start("existing", returning[::-2])
    try:
        output, errors = purge.communicate(timeout=300)
        assert purge.returncode == 0, errors
    finally:
        agents.stop()
    with tl.open_store(target.url, key=key) as store:
        forgotten = {s for s in ids if store.forgotten(s)}
        active = {a["session"] for a in agents.acks() if a["at"] > started}
        assert active, "no agent wrote during the purge: the race was not run"
        erased_while_active = sorted(forgotten & active)
        assert not erased_while_active, (erased_while_active, output)
        assert set(untouched) <= forgotten, output  # the purge did its job
        kept = [a for a in agents.acks() if a["session"] not in forgotten]
        assert_every_ack_reads(store, kept)


def test_i33_p3_forget_if_idle_since_refuses_a_written_session(target: Target) -> None:
    """`forget --if-idle-since AGE` forgets an idle session and keeps one written within AGE
    (exit 1, nothing erased)."""
    key = new_key_text()
    with tl.open_store(target.url, key=key) as store:
        idle, busy = store.start_session(), store.start_session()
    time.sleep(4.2)
    with tl.open_store(target.url, key=key) as store:
        store.restore(busy.id).append(tl.ChatMessage.user("still here"))
    env = {"TURNLEDGER_KEY": key}
    refused = cli(target.url, "forget", busy.id, "--if-idle-since", "4s", env=env, expect=1)
    assert "not idle" in refused.stderr
    cli(target.url, "forget", idle.id, "--if-idle-since", "4s", env=env)
    with tl.open_store(target.url, key=key) as store:
        assert store.forgotten(idle.id)
        assert not store.forgotten(busy.id)
        assert "still here" in texts_of(store, busy.id)


@pytest.mark.parametrize("command", ["forget", "anchor", "projections"])
def test_i33_other_admin_commands_under_writers(
    target: Target, tmp_path: Path, command: str
) -> None:
    """The rest of the matrix: `forget` of an idle session, `anchor` and `projections run`
    while agents write other sessions; every acknowledged append reads afterwards and
    `verify` (with the anchor, where one was taken) is clean."""
    key, audit = new_key_text(), new_key_text()
    env = {"TURNLEDGER_KEY": key, "TURNLEDGER_AUDIT_KEY": audit}
    with tl.open_store(target.url, key=key, audit_key=audit) as store:
        existing = [store.start_session().id for _ in range(4)]
    agents = Agents(tmp_path, target.url, {"key": key, "audit_key": audit})
    agents.start("new")
    agents.start("existing", existing[1:])
    try:
        agents.wait_for(ACKS_BEFORE)
        if command == "forget":
            cli(target.url, "forget", existing[0], env=env)
        elif command == "anchor":
            cli(target.url, "anchor", "--output", str(tmp_path / "anchor.json"), env=env)
        else:
            cli(target.url, "projections", "run", env=env)
        agents.wait_for(ACKS_AFTER)
    finally:
        agents.stop()
    with tl.open_store(target.url, key=key, audit_key=audit) as store:
        assert_every_ack_reads(store, agents.acks())
        if command == "forget":
            assert store.forgotten(existing[0])
    if command == "anchor":
        cli(target.url, "verify", "--anchor", str(tmp_path / "anchor.json"), env=env)


@pytest.mark.postgres
def test_i33_p4_retention_uses_the_servers_clock_not_a_writers(tmp_path: Path) -> None:
    """Point 4 on PostgreSQL: a session written seconds ago by a process whose clock is 3
    days behind (libfaketime) is not idle for `purge --older-than 1d`: the server's clock
    dates each record. Idle sessions are still found (the server's clock moves on)."""
    faketime = "/usr/bin/faketime"
    if not os.path.exists(faketime):
        pytest.fail("faketime is missing: .ci/run installs Debian's faketime")
    key = new_key_text()
    with fresh_target("postgresql", tmp_path) as target:
        with tl.open_store(target.url, key=key) as store:
            session = store.start_session()
        agents = Agents(tmp_path, target.url, {"key": key})
        agents.start("existing", [session.id], prefix=[faketime, "-f", "-3d"])
        try:
            agents.wait_for(2)
        finally:
            agents.stop()
        with tl.open_store(target.url, key=key) as store:
            stamps = [e.timestamp for e in store.events_of(session.id)
                      if not isinstance(e, SessionForgotten)]
            assert min(stamps) < max(stamps) - _days(2)  # the skewed writer's events
        listed = cli(target.url, "purge", "--older-than", "1d", env={"TURNLEDGER_KEY": key})
        assert session.id not in listed.stdout, listed.stdout
        time.sleep(2.0)  # by the server's clock the session is now idle for 2 s
        listed = cli(target.url, "purge", "--older-than", "1s", env={"TURNLEDGER_KEY": key})
        assert session.id in listed.stdout, listed.stdout


def _days(count: float) -> Any:
    from datetime import timedelta

    return timedelta(days=count)


def test_i33_p1_verify_reports_mixed_keys_and_rekey_repairs_them(
    target: Target, tmp_path: Path
) -> None:
    """Point 1, a store left with mixed keys by a rekey under writers before ADR-0098: `verify`
    reports the session whose data key the store's key does not open (`E11-data-key`, exit 1)
    instead of raising; `rekey` refuses naming the key id it needs, and with that key given
    (`--old-key-file`) re-wraps it: the store verifies and reads whole again."""
    first, second, third = new_key_text(), new_key_text(), new_key_text()
    with tl.open_store(target.url, key=first) as store:
        kept, stranded = store.start_session(), store.start_session()
        stranded.append(tl.ChatMessage.user("written by a writer that kept the old key"))
    mark = target.mark()
    old_row = target.query(f"SELECT key_id, wrapped FROM tl_keys WHERE session_id = {mark}",
                           stranded.id)[0]
    cli(target.url, "rekey", env={"TURNLEDGER_KEY": first, "TURNLEDGER_NEW_KEY": second})
    target.query(f"UPDATE tl_keys SET key_id = {mark}, wrapped = {mark} "
                 f"WHERE session_id = {mark}", old_row[0], old_row[1], stranded.id)
    env = {"TURNLEDGER_KEY": second}
    found = cli(target.url, "verify", env=env, expect=1)
    assert "E11-data-key" in found.stdout + found.stderr
    assert stranded.id in found.stdout + found.stderr
    refused = cli(target.url, "rekey", env={**env, "TURNLEDGER_NEW_KEY": third}, expect=2)
    assert str(old_row[0]) in refused.stderr  # the key id it needs
    old_file = tmp_path / "first.key"
    old_file.write_text(first)
    cli(target.url, "rekey", "--old-key-file", str(old_file),
        env={**env, "TURNLEDGER_NEW_KEY": third})
    cli(target.url, "verify", env={"TURNLEDGER_KEY": third})
    with tl.open_store(target.url, key=third) as store:
        assert "written by a writer that kept the old key" in texts_of(store, stranded.id)
        assert kept.id in store.sessions()
