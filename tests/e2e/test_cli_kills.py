"""Issue 19 point 5: a killed `purge --yes`, `forget`, `rekey` or `rechain` never leaves a store
half done, and running the same command again finishes whatever it left.

Each test runs the real command (``python -m turnledger``) as a subprocess on a real store (a
SQLite file, a PostgreSQL schema) and SIGKILLs it after a random delay, then checks the store
from this process, reruns the same command to completion and checks it again:

- after the kill the store verifies (`verify`) and is in one of the command's consistent
  states: every session fully forgotten (data key destroyed AND `SessionForgotten` recorded)
  or fully intact; rekey: every data key opens under exactly one of the old and the new master
  key, the one the ``encryption`` setting names, and the store opens with that key only;
  rechain: the whole store under one chain, the one its setting names;
- the rerun exits 0 and leaves the command done (purge: every idle session forgotten; forget:
  the session forgotten, the others intact; rekey: the store under the new key; rechain: the
  store under the audit key), `verify` passes, and on SQLite no destroyed data key's wrapped
  bytes are left in the database file or its write-ahead log (another process holds the
  store open all along, as a service would, so SQLite's own checkpoint at the last close does
  not hide an erasure the command skipped).

A kill counts as *unfinished* when the store did not verify or was not in a consistent state
right after it, and as *broken* when the rerun did not finish it; the test wants neither.
Kills per command and backend: ``TURNLEDGER_KILLS`` (default 10; ``benchmarks/kills.py`` runs
30 and reports the counts). The delays are drawn from ``TURNLEDGER_KILL_SEED`` (printed, named
in every failure) as fractions of a calibration run's duration (the second of two whole runs),
so a seed replays where in the run the kills land, not the exact instants. A run the kill came
too late for (it had exited) makes its rerun a rerun after success, which must exit 0 and
change nothing; it also shortens the span by a tenth, so that a slow calibration does not
leave most kills after the end.
"""

from __future__ import annotations

import abc
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from uuid import UUID

import attrs
import pytest

import turnledger as tl
from tests.backends import SHARED_BACKENDS, Target, fresh_target
from tests.e2e.conftest import Cli, clean_env, describe
from tests.e2e.test_cli_privacy import _key_file
from tests.extras import need
from turnledger.domain.events import SessionForgotten
from turnledger.replay.audit import verify
from turnledger.store.keys import KeyTable, key_id, parse_key, unwrap

KILLS = int(os.environ.get("TURNLEDGER_KILLS") or 10)
"""Kills per command and backend (``TURNLEDGER_KILLS`` for a longer run)."""
EARLIEST, LATEST = 0.4, 1.1
"""The kill delays, as fractions of a calibration run: the first ~40 % is the interpreter
starting (no store is open yet), and past 100 % the command has exited."""
SESSIONS_PER_ROUND = 6
"""Sessions added before each run of `purge` (it forgets all of them: ``--older-than 0s``)."""
HOLDER = (
    "import sys, turnledger as tl\n"
    "store = tl.open_store(sys.argv[1])\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
    "store.close()\n"
)
"""A process that keeps the store open (a service) until its stdin closes."""


def kill_seed() -> int:
    """``TURNLEDGER_KILL_SEED`` when set (to replay the delays), else a random one."""
    return int(os.environ.get("TURNLEDGER_KILL_SEED") or random.SystemRandom().getrandbits(32))


@attrs.define
class KillFigures:
    """What a loop of kills found."""

    command: str
    backend: str
    kills: int = 0
    """Runs ended by the SIGKILL."""
    finished: int = 0
    """Runs that had exited before the kill (their rerun is a rerun after success)."""
    unfinished: int = 0
    """Kills after which the store did not verify or was not in a consistent state."""
    refused: int = 0
    """Reruns that did not exit 0."""
    broken: int = 0
    """Kills after which the rerun did not leave the command done."""
    findings: list[str] = attrs.field(factory=list)
    final_verify: str = ""
    """What `turnledger verify` said of the store as the loop left it, when it did not exit 0."""

    def line(self) -> str:
        return (f"{self.command} on {self.backend}: {self.kills} killed, {self.finished} "
                f"finished first, {self.unfinished} unfinished, {self.refused} reruns refused, "
                f"{self.broken} broken")


# --- the stores -------------------------------------------------------------------------------

def _key(path: Path) -> str:
    return path.read_text().strip()


def _parse(path: Path) -> bytes:
    return parse_key(_key(path))


def _fill(store: tl.Store, sessions: int) -> list[str]:
    ids = []
    for _ in range(sessions):
        session = store.start_session()
        for i in range(3):
            session.extend([tl.ChatMessage.user(f"question {i}"),
                            tl.ChatMessage.assistant(f"answer {i}")])
        ids.append(session.id)
    return ids


def _keys(store: tl.Store) -> KeyTable:
    keys = store.backend.protection.keys
    assert keys is not None, "an encrypted store has a keys table"
    return keys


def _ends_forgotten(store: tl.Store, session_id: str) -> bool:
    uuid = UUID(session_id)
    version, _ = store.backend.head(uuid)
    last = store.backend.read_records(uuid, after_version=version - 1)
    return bool(last) and last[-1].topic == store.backend.mapper.codec.topic_of(SessionForgotten)


def _session_states(store: tl.Store) -> dict[str, str]:
    """Each session's erasure state: intact, forgotten, or what is half done."""
    states = {}
    keys = _keys(store)
    for session_id in store.sessions():
        row = keys.get(UUID(session_id))
        destroyed = row is not None and row.wrapped is None
        recorded = _ends_forgotten(store, session_id)
        states[session_id] = {
            (False, False): "intact", (True, True): "forgotten",
            (True, False): "key destroyed, SessionForgotten missing",
            (False, True): "SessionForgotten recorded, key kept",
        }[(destroyed, recorded)]
    return states


def _verify_findings(store: tl.Store) -> list[str]:
    return [str(v) for v in verify(store.backend).violations]


@contextmanager
def _holder(url: str, env: dict[str, str], cwd: Path) -> Iterator[None]:
    """Another process with the store open for the whole loop (SQLite only)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url], cwd=cwd, env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        assert "ready" == process.stdout.readline().strip(), "the holder did not open the store"
        yield
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)


# --- the scenarios ----------------------------------------------------------------------------

class Scenario(abc.ABC):
    """One command's kill loop: what is prepared before each run, and what is checked."""

    name: str

    def __init__(self, target: Target, cwd: Path) -> None:
        self.target = target
        self.cwd = cwd
        self.cli = Cli(target, cwd)

    @property
    def env(self) -> dict[str, str]:
        return clean_env() | {"PYTHONUNBUFFERED": "1"}

    @contextmanager
    def running(self) -> Iterator[None]:
        """What stays up during the whole loop."""
        yield

    @abc.abstractmethod
    def prepare(self) -> None:
        """Make the store ready for the next run of the command."""

    @abc.abstractmethod
    def argv(self) -> list[str]:
        """The command, the same for the killed run and its rerun."""

    @abc.abstractmethod
    def after_kill(self) -> list[str]:
        """What is wrong with the store right after a kill (nothing: consistent, verifies)."""

    @abc.abstractmethod
    def after_rerun(self) -> list[str]:
        """What is wrong with the store after the rerun (nothing: the command is done)."""

    def repair(self) -> None:
        """Mend what a broken round left, so the next round counts only its own kill."""
        return


class ForgetScenario(Scenario):
    """`forget SESSION` (and `purge --older-than 0s --yes` below) on an encrypted store."""

    name = "forget"

    def __init__(self, target: Target, cwd: Path) -> None:
        super().__init__(target, cwd)
        self.key_file = _key_file(cwd, "store.key")
        self.wrapped: dict[str, bytes] = {}
        self.victims: list[str] = []
        self.kept: set[str] = set()

    @property
    def env(self) -> dict[str, str]:
        return super().env | {"TURNLEDGER_KEY": _key(self.key_file)}

    @contextmanager
    def running(self) -> Iterator[None]:
        if self.target.sqlite_path is None:
            yield
            return
        with tl.open_store(self.target.url, key=_key(self.key_file)):
            pass  # the file and its settings exist before the holder opens it
        with _holder(self.target.url, self.env, self.cwd):
            yield

    def open(self) -> tl.Store:
        return tl.open_store(self.target.url, key=_key(self.key_file))

    def prepare(self) -> None:
        with self.open() as store:
            kept, victim = _fill(store, 2)
            self._remember(store, [kept, victim])
        self.kept.add(kept)
        self.victims = [victim]

    def _remember(self, store: tl.Store, ids: list[str]) -> None:
        for session_id in ids:
            row = _keys(store).get(UUID(session_id))
            assert row is not None
            assert row.wrapped is not None
            self.wrapped[session_id] = row.wrapped

    def argv(self) -> list[str]:
        return self.cli.argv("forget", self.victims[0])

    def after_kill(self) -> list[str]:
        with self.open() as store:
            states = _session_states(store)
            problems = _verify_findings(store)
        return problems + [f"{s}: {state}" for s, state in states.items()
                           if state not in ("intact", "forgotten")]

    def after_rerun(self) -> list[str]:
        with self.open() as store:
            states = _session_states(store)
            problems = _verify_findings(store)
        problems += [f"{s}: {state}, expected {want}" for s, state in states.items()
                     if state != (want := "intact" if s in self.kept else "forgotten")]
        return problems + self._wrapped_left(states)

    def repair(self) -> None:
        with self.open() as store:
            for session_id, state in _session_states(store).items():
                if state == "key destroyed, SessionForgotten missing":
                    store.forget(session_id)  # what `forget` again does (ADR-0046)

    def _wrapped_left(self, states: dict[str, str]) -> list[str]:
        """Destroyed data keys whose wrapped bytes are still in the SQLite files. Read only
        while this process holds no connection to them (closing a descriptor of a database
        file would drop this process's SQLite locks on it)."""
        path = self.target.sqlite_path
        if path is None:
            return []
        files = [p for p in (path, Path(f"{path}-wal")) if p.exists()]
        raw = b"".join(p.read_bytes() for p in files)
        return [f"{s}: the wrapped key of a forgotten session is still in {path.name}*"
                for s, state in states.items()
                if state == "forgotten" and self.wrapped[s] in raw]


class PurgeScenario(ForgetScenario):
    """`purge --older-than 0s --yes`: every session is idle, every one is to be forgotten."""

    name = "purge --yes"

    def prepare(self) -> None:
        with self.open() as store:
            self.victims = _fill(store, SESSIONS_PER_ROUND)
            self._remember(store, self.victims)

    def argv(self) -> list[str]:
        return self.cli.argv("purge", "--older-than", "0s", "--yes")


class RekeyScenario(Scenario):
    """`rekey --new-key-file NEW` with the current key; the next round rotates from NEW."""

    name = "rekey"

    def __init__(self, target: Target, cwd: Path) -> None:
        super().__init__(target, cwd)
        self.old = _key_file(cwd, "key-0")
        self.new = self.old
        self.round = 0
        self.forgotten: set[str] = set()

    def prepare(self) -> None:
        self.round += 1
        self.old, self.new = self.new, _key_file(self.cwd, f"key-{self.round}")
        with tl.open_store(self.target.url, key=_key(self.old)) as store:
            ids = _fill(store, 2)
            if self.round % 3 == 0:  # a destroyed key (NULL) among the rows re-wrapped
                store.forget(ids[0])
                self.forgotten.add(ids[0])

    def argv(self) -> list[str]:
        return self.cli.argv("--key-file", self.old, "rekey", "--new-key-file", self.new)

    def _opens_with(self) -> list[Path]:
        opened = []
        for path in (self.old, self.new):
            try:
                tl.open_store(self.target.url, key=_key(path)).close()
            except tl.TurnledgerError:
                continue
            opened.append(path)
        return opened

    def _check(self, wanted: tuple[Path, ...]) -> list[str]:
        opened = self._opens_with()
        if len(opened) != 1 or opened[0] not in wanted:
            return [f"the store opens with {[p.name for p in opened]}, "
                    f"expected one of {[p.name for p in wanted]}"]
        master = _key(opened[0])
        with tl.open_store(self.target.url, key=master) as store:
            problems = _verify_findings(store)
            keys = _keys(store)
            setting = keys.settings().get("encryption")
            for session_id in store.sessions():
                problems += self._key_problems(keys, session_id, setting)
        return problems

    def _key_problems(self, keys: KeyTable, session_id: str, setting: str | None) -> list[str]:
        row = keys.get(UUID(session_id))
        if row is None:
            return [f"{session_id}: no row in tl_keys"]
        if row.wrapped is None:
            return [] if session_id in self.forgotten else [f"{session_id}: key destroyed"]
        opens = [path.name for path in (self.old, self.new)
                 if unwrap(_parse(path), UUID(session_id), row.wrapped) is not None]
        ids = {key_id(_parse(path), "master"): path.name for path in (self.old, self.new)}
        if len(opens) != 1 or ids.get(row.key_id) != opens[0] or ids.get(setting or "") != opens[0]:
            return [f"{session_id}: opens under {opens}, row says {ids.get(row.key_id)}, "
                    f"setting says {ids.get(setting or '')}"]
        return []

    def after_kill(self) -> list[str]:
        return self._check((self.old, self.new))

    def after_rerun(self) -> list[str]:
        return self._check((self.new,))


class RechainScenario(Scenario):
    """`rechain --yes` with an audit key on a fresh unkeyed store each round (it runs once
    per store)."""

    name = "rechain"

    def __init__(self, target: Target, cwd: Path) -> None:
        super().__init__(target, cwd)
        self.audit = _key_file(cwd, "audit.key")
        self.round = 0
        self.stores = ExitStack()

    @contextmanager
    def running(self) -> Iterator[None]:
        with self.stores:
            yield

    def prepare(self) -> None:
        self.round += 1
        self.stores.close()  # the previous round's store is checked: drop it
        self.target = self.stores.enter_context(
            fresh_target(self.target.kind, self.cwd / f"rechain-{self.round}")
        )
        self.cli = Cli(self.target, self.cwd)
        with tl.open_store(self.target.url, snapshot_interval=3) as store:
            _fill(store, 4)

    def argv(self) -> list[str]:
        return self.cli.argv("--audit-key-file", self.audit, "rechain", "--yes")

    def after_kill(self) -> list[str]:
        try:
            store = tl.open_store(self.target.url)  # still unkeyed
        except tl.TurnledgerError:
            return self.after_rerun()  # moved: it must be whole
        with store:
            return _verify_findings(store)

    def after_rerun(self) -> list[str]:
        try:
            tl.open_store(self.target.url).close()
        except tl.TurnledgerError:
            pass
        else:
            return ["the store still opens without its audit key (unkeyed chain)"]
        with tl.open_store(self.target.url, audit_key=_key(self.audit)) as store:
            return _verify_findings(store)


# --- the loop ---------------------------------------------------------------------------------

def _run_killed(argv: list[str], env: dict[str, str], cwd: Path, delay: float) -> int | None:
    """Run ``argv``, SIGKILL it after ``delay`` seconds; its exit code if it exited first."""
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        code = process.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
        return None
    _, err = process.communicate()
    assert 0 == code, f"the run before the kill failed: {err}"
    return code


def _rerun(scenario: Scenario) -> tuple[float, subprocess.CompletedProcess[str]]:
    began = time.monotonic()
    result = subprocess.run(scenario.argv(), cwd=scenario.cwd, env=scenario.env,
                            stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=120, check=False)
    return time.monotonic() - began, result


def kill_loop(scenario: Scenario, kills: int, seed: int) -> KillFigures:
    """SIGKILL ``scenario``'s command ``kills`` times; the figures (never stops early)."""
    rng = random.Random(seed)
    figures = KillFigures(scenario.name, scenario.target.kind)
    with scenario.running():
        for _ in range(2):  # whole runs: how long the command takes, once warm
            scenario.prepare()
            span, calibration = _rerun(scenario)
            assert 0 == calibration.returncode, describe(calibration)
            assert [] == scenario.after_rerun(), f"a calibration run (seed {seed})"
        for index in range(kills):
            scenario.prepare()
            delay = span * rng.uniform(EARLIEST, LATEST)
            exited = _run_killed(scenario.argv(), scenario.env, scenario.cwd, delay)
            figures.finished += exited is not None
            figures.kills += exited is None
            if exited is not None:  # the calibration ran slow (a busy machine): aim earlier
                span *= 0.9
            found = scenario.after_kill()
            if found:
                figures.unfinished += 1
                figures.findings.append(f"kill {index} at {delay:.3f} s: {found[:3]}")
            _, rerun = _rerun(scenario)
            if rerun.returncode != 0:
                figures.refused += 1
                figures.findings.append(f"rerun {index}: exit {rerun.returncode} "
                                        f"{rerun.stderr.strip()[-300:]}")
            left = scenario.after_rerun()
            if left or rerun.returncode != 0:
                figures.broken += 1
                figures.findings.append(f"after rerun {index}: {left[:3]}")
                scenario.repair()
        final = _final_verify(scenario)
        figures.final_verify = "" if final.returncode == 0 else describe(final)
    return figures


def _final_verify(scenario: Scenario) -> subprocess.CompletedProcess[str]:
    """`turnledger verify` on the store as the loop left it (the command, not the function)."""
    extra: list[str] = []
    if isinstance(scenario, RekeyScenario):
        extra = ["--key-file", str(scenario.new)]
    elif isinstance(scenario, RechainScenario):
        extra = ["--audit-key-file", str(scenario.audit)]
    return subprocess.run(scenario.cli.argv(*extra, "verify"), cwd=scenario.cwd,
                          env=scenario.env, capture_output=True, text=True, timeout=120,
                          check=False)


SCENARIOS = {"purge": PurgeScenario, "forget": ForgetScenario, "rekey": RekeyScenario,
             "rechain": RechainScenario}


@pytest.mark.slow  # ~20 s per command and backend at 15 kills
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
@pytest.mark.parametrize("command", list(SCENARIOS))
@pytest.mark.parametrize("kind", SHARED_BACKENDS)
def test_i19_p5_a_killed_command_never_leaves_the_store_half_done(
    kind: str, command: str, tmp_path: Path
) -> None:
    """SIGKILL purge --yes / forget / rekey / rechain at random moments: after every kill the
    store verifies in a consistent state, and rerunning the command finishes it."""
    need("cryptography")
    seed = kill_seed()
    print(f"kill test seed: {seed} (TURNLEDGER_KILL_SEED={seed} to replay the delays)")
    with fresh_target(kind, tmp_path) as target:
        scenario = SCENARIOS[command](target, tmp_path)
        figures = kill_loop(scenario, KILLS, seed)
    print(figures.line())
    why = f"seed {seed}: {figures.line()}; " + "; ".join(figures.findings[:6])
    assert (KILLS, 0, 0, 0) == (figures.kills + figures.finished, figures.unfinished,
                                figures.refused, figures.broken), why
    assert "" == figures.final_verify
