"""Issue 11 through the command: every command on an encrypted store, key errors, retention.

The key reaches the command in each of its three ways: ``--key-file`` before the command,
``--key-file`` after it, and ``TURNLEDGER_KEY``. The commands run through the CLI's ``main`` in
this process, except where the process is the point: the key read from the environment, the
mode of the anchor file, and a forget beside another process holding the store.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.backends import Target, fresh_target
from tests.e2e.conftest import Cli, clean_env, describe, run_command, run_main
from tests.e2e.test_cli_help import COMMANDS
from tests.extras import need
from turnledger.store.keys import new_key_text

MARKER = "E2E-PLAINTEXT-MARKER-51c0"
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": f"{MARKER}: what is my account number?"},
    {"role": "assistant", "content": "It is in your profile."},
]


@pytest.fixture(autouse=True)
def _cryptography() -> None:
    need("cryptography")


class KeyedCli(Cli):
    """The command on a store opened with a key file (given before the command)."""

    def __init__(self, target: Target, cwd: Path, key_file: Path) -> None:
        super().__init__(target, cwd)
        self.key_file = key_file

    def args(self, *args: str | os.PathLike[str], store: bool = True) -> list[str]:
        return super().args("--key-file", self.key_file, *args, store=store)

    def bare(self, *args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
        """Run without the key file."""
        return run_main(Cli.args(self, *args), cwd=self.cwd)


def _key_file(directory: Path, name: str = "store.key") -> Path:
    path = directory / name
    path.write_text(new_key_text() + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def keyed(sqlite_store: Target, tmp_path: Path) -> KeyedCli:
    return KeyedCli(sqlite_store, tmp_path, _key_file(tmp_path))


def _import(cli: KeyedCli) -> str:
    source = cli.cwd / "one.jsonl"
    source.write_text(json.dumps(CONVERSATION) + "\n", encoding="utf-8")
    (session_id,) = [line.split("\t")[0] for line in cli.ok(  # --again: a new session each call
        "import", source, "--format", "openai", "--again").splitlines()]
    return session_id


COVERED = {
    "demo", "import", "export", "sessions", "replay", "verify", "what-if", "report", "stats",
    "projections", "keygen", "forget", "purge", "rekey", "anchor", "rechain", "keys", "serve",
}


def _served(keyed: KeyedCli, bearer: str, *options: str) -> str:
    """`turnledger serve` on the encrypted store (a subprocess: the server is the process):
    one conversation whose item holds MARKER, read back through the API; its conversation id."""
    httpx = need("httpx")
    need("uvicorn")
    server = subprocess.Popen(keyed.argv("serve", "--port", "0", *options), cwd=keyed.cwd,
                              stderr=subprocess.PIPE, text=True,
                              env=clean_env() | {"PYTHONUNBUFFERED": "1"})
    try:
        assert server.stderr is not None
        base = next(found.group(1) for line in server.stderr
                    if (found := re.search(r"running on (http://127\.0\.0\.1:\d+)", line)))
        headers = {"Authorization": f"Bearer {bearer}"}
        item = {"type": "message", "role": "user", "content": MARKER}
        made = httpx.post(base + "/v1/conversations", json={"items": [item]}, headers=headers)
        assert 200 == made.status_code, made.text
        conversation = str(made.json()["id"])
        listed = httpx.get(f"{base}/v1/conversations/{conversation}/items", headers=headers)
        assert MARKER in listed.text
        assert 401 == httpx.get(f"{base}/v1/conversations/{conversation}").status_code
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
    return conversation


def test_the_round_trip_below_covers_every_command() -> None:
    """A new command must join the encrypted round trip (the parser is the list)."""
    assert COVERED == {path[0] for path, _ in COMMANDS if path}


def test_every_command_round_trips_on_an_encrypted_store(keyed: KeyedCli) -> None:
    """Each command works on an encrypted SQLite store given the key, and the file never holds
    the text it was given."""
    demo_id, _ = keyed.demo()
    session_id = _import(keyed)
    assert CONVERSATION == json.loads(keyed.ok("export", session_id, "--format", "openai"))
    env = clean_env() | {"TURNLEDGER_KEY": keyed.key_file.read_text().strip()}
    listed = run_command(Cli.argv(keyed, "sessions", "--json"), cwd=keyed.cwd, env=env)
    assert 0 == listed.returncode, describe(listed)
    assert {demo_id, session_id} == {row["session_id"] for row in json.loads(listed.stdout)}
    assert MARKER in keyed.ok("replay", session_id, "--view", "chat")
    assert "event" in keyed.ok("replay", demo_id)
    assert "OK" in Cli.ok(keyed, "verify", "--key-file", keyed.key_file)  # after the command
    assert 2 == keyed.json("stats", "--json")["totals"]["sessions"]
    assert "applied" in keyed.ok("projections", "run")
    keyed.ok("what-if", demo_id, "--max-history-messages", "1")
    assert "wrote" in keyed.ok("report", demo_id, "-o", keyed.cwd / "report.html")
    anchor = keyed.cwd / "anchor.json"
    keyed.ok("anchor", "--output", anchor, spawn=True)
    assert stat.S_IMODE(anchor.stat().st_mode) == 0o600
    assert "OK" in keyed.ok("verify", "--anchor", anchor)
    new_key = _key_file(keyed.cwd, "new.key")
    assert "re-wrapped 2 data keys" in keyed.ok("rekey", "--new-key-file", new_key)
    keyed.key_file = new_key
    assert "forgot session" in keyed.ok("forget", session_id)
    rows = {row["session_id"]: row for row in keyed.json("sessions", "--json")}
    assert (True, False) == (rows[session_id]["forgotten"], rows[demo_id]["forgotten"])
    stats = {row["session_id"]: row for row in keyed.json("stats", "--json")["sessions"]}
    assert len(CONVERSATION) == stats[session_id]["appends"]  # counted before the forget
    assert "no session is idle" in keyed.ok("purge", "--older-than", "90d")
    assert 44 == len(keyed.ok("keygen").strip())
    assert "OK" in keyed.ok("verify", "--anchor", anchor)
    audit = _key_file(keyed.cwd, "audit.key")
    assert "--yes" in keyed.ok("rechain", "--audit-key-file", audit)
    assert "re-chained" in keyed.ok("rechain", "--audit-key-file", audit, "--yes")
    assert "OK" in keyed.ok("verify", "--audit-key-file", audit)
    made = keyed.json("keys", "--audit-key-file", audit, "create", "--json")
    assert made["id"] in keyed.ok("keys", "--audit-key-file", audit, "list")
    _served(keyed, made["secret"], "--audit-key-file", str(audit))
    keyed.ok("keys", "--audit-key-file", audit, "revoke", made["id"])
    assert "revoked" in keyed.ok("keys", "--audit-key-file", audit, "list")
    raw = b"".join(p.read_bytes() for p in keyed.cwd.glob("stores/store.db*"))
    assert MARKER.encode() not in raw
    assert made["secret"].encode() not in raw


# One command per way the command line opens a store (for reading, with salvage, for writing,
# for verify).
COMMANDS_ON_A_SESSION = [("replay", "{id}"), ("export", "{id}", "--format", "openai"),
                         ("forget", "{id}")]
STORE_COMMANDS = [("sessions",), ("stats",), ("verify",), ("anchor",), ("demo",)]


def test_missing_or_wrong_key_is_exit_2_with_a_clear_message(keyed: KeyedCli) -> None:
    """Without the key every command exits 2 saying the store is encrypted; with another key
    it exits 2 saying the key is wrong; none says "corrupt"."""
    session_id = _import(keyed)
    commands = [tuple(a.format(id=session_id) for a in c) for c in COMMANDS_ON_A_SESSION]
    commands += STORE_COMMANDS
    other = _key_file(keyed.cwd, "other.key")
    found = []
    for command in commands:
        missing = keyed.bare(*command)
        found.append((command, missing.returncode, "is encrypted: give its key" in missing.stderr))
    for command in commands[:2]:
        wrong = keyed.bare("--key-file", other, *command)
        found.append((command, wrong.returncode, "wrong key" in wrong.stderr
                      and "corrupt" not in wrong.stderr))
    assert [(c, 2, True) for c, _, _ in found] == found


def test_purge_lists_then_forgets_only_with_yes(keyed: KeyedCli) -> None:
    """`purge --older-than` lists the sessions idle longer than the age and changes nothing;
    with --yes it forgets them. (Which sessions an age selects: the integration test of
    `Store.idle_sessions`, with a fixed clock.)"""
    first, second = _import(keyed), _import(keyed)
    none = keyed.ok("purge", "--older-than", "1d")
    listed = keyed.ok("purge", "--older-than", "0s")
    still = keyed.run("replay", first)
    done = keyed.ok("purge", "--older-than", "0s", "--yes")
    gone = keyed.run("replay", first)
    assert "no session is idle" in none
    assert (True, True, 0) == (f"would forget {first}" in listed,
                               f"would forget {second}" in listed, still.returncode)
    assert (True, 2) == (f"forgetting {second}" in done, gone.returncode), describe(gone)
    assert "was forgotten" in gone.stderr
    assert "OK" in keyed.ok("verify")


@pytest.mark.postgres
def test_key_errors_never_show_the_store_password(tmp_path: Path) -> None:
    """A wrong key on a PostgreSQL store with a password in its URL: exit 2, no password."""
    secret = "pa55-s3cret-word"
    with fresh_target("postgresql", tmp_path) as target:
        url = target.url.replace("postgres@", f"postgres:{secret}@", 1)
        cli = KeyedCli(Target("postgresql", url, pg_schema=target.pg_schema), tmp_path,
                       _key_file(tmp_path))
        demo = cli.run("demo")
        wrong = cli.bare("--key-file", _key_file(tmp_path, "other.key"), "sessions")
    assert (0, 2) == (demo.returncode, wrong.returncode), describe(wrong)
    assert secret not in demo.stdout + demo.stderr + wrong.stdout + wrong.stderr
    assert "wrong key" in wrong.stderr


def test_key_file_that_is_not_a_key_is_bad_usage(keyed: KeyedCli) -> None:
    """A key file holding something else: exit 2 naming the file, never echoing it."""
    bad = keyed.cwd / "bad.key"
    bad.write_text("my-password-123\n")
    result = keyed.bare("--key-file", bad, "sessions")
    assert (2, True, False) == (result.returncode, str(bad) in result.stderr,
                                "my-password-123" in result.stderr)



def test_a_damaged_encrypted_store_is_salvaged_with_its_key(keyed: KeyedCli) -> None:
    """One bad originator_id in an encrypted SQLite store: `verify` and `sessions` salvage the
    rest with the key (exit 1); the healthy session decrypts and verifies, no other finding."""
    from uuid import UUID

    victim, healthy = _import(keyed), _import(keyed)
    damaged = UUID(victim).hex[:-1] + "X"
    keyed.target.query(
        "UPDATE stored_events SET originator_id = ? WHERE originator_id = ? "
        "AND originator_version = 1", damaged, UUID(victim).hex,
    )
    verified = keyed.run("verify", "--json")
    listed = keyed.run("sessions")
    assert (1, 1) == (verified.returncode, listed.returncode), describe(verified)
    findings = {v["session_id"] for v in json.loads(verified.stdout)["violations"]}
    assert healthy not in findings
    assert healthy in listed.stdout


# --- issue 19 point 5: commands killed half way, and run again ---------------------------------

def test_i19_p5_purge_finishes_a_forget_left_half_done(store: Target, tmp_path: Path) -> None:
    """A session whose data key is destroyed without `SessionForgotten` (a forget of an older
    version killed between its steps) fails `verify`; `purge --yes` finishes it whatever its
    age (listed first without --yes), and `verify` passes."""
    from datetime import UTC, datetime

    cli = KeyedCli(store, tmp_path, _key_file(tmp_path))
    half, other = _import(cli), _import(cli)
    mark = store.mark()
    store.query(f"UPDATE tl_keys SET wrapped = NULL, forgotten_at = {mark} "
                f"WHERE session_id = {mark}", datetime.now(UTC).isoformat(), half)
    broken = cli.run("verify")
    listed = cli.ok("purge", "--older-than", "90d")
    done = cli.ok("purge", "--older-than", "90d", "--yes")
    verified = cli.run("verify")
    rows = {row["session_id"]: row["forgotten"] for row in cli.json("sessions", "--json")}
    assert (1, 0) == (broken.returncode, verified.returncode), describe(verified)
    assert (True, True) == (f"would finish the interrupted forget of {half}" in listed,
                            f"finishing the interrupted forget of {half}" in done), done
    assert {half: True, other: False} == rows


def test_i19_p5_rekey_run_again_after_it_committed_does_nothing(
    store: Target, tmp_path: Path
) -> None:
    """`rekey` run again with the same keys after it committed (its answer lost to a kill)
    exits 0 and changes nothing; a key that is neither the store's nor the new one is still
    refused."""
    cli = KeyedCli(store, tmp_path, _key_file(tmp_path, "old.key"))
    session_id = _import(cli)
    new = _key_file(tmp_path, "new.key")
    first = cli.run("rekey", "--new-key-file", new)
    again = cli.run("rekey", "--new-key-file", new)
    stranger = cli.bare("--key-file", _key_file(tmp_path, "other.key"), "rekey",
                        "--new-key-file", _key_file(tmp_path, "next.key"))
    cli.key_file = new
    texts = cli.ok("replay", session_id, "--view", "chat")
    assert (0, 0, 2) == (first.returncode, again.returncode, stranger.returncode), describe(again)
    assert (True, True, True) == ("already" in again.stdout, "wrong key" in stranger.stderr,
                                  MARKER in texts)
    assert "OK" in cli.ok("verify")


def test_i19_p5_rechain_run_again_after_it_committed_does_nothing(
    store: Target, tmp_path: Path
) -> None:
    """`rechain --yes` run again with the same audit key after it committed exits 0 and
    rewrites nothing; another audit key is still refused."""
    cli = Cli(store, tmp_path)
    cli.demo()
    audit = _key_file(tmp_path, "audit.key")
    first = cli.run("--audit-key-file", audit, "rechain", "--yes")
    again = cli.run("--audit-key-file", audit, "rechain", "--yes")
    other = cli.run("--audit-key-file", _key_file(tmp_path, "other.key"), "rechain", "--yes")
    verified = cli.run("--audit-key-file", audit, "verify")
    assert (0, 0, 2, 0) == (first.returncode, again.returncode, other.returncode,
                            verified.returncode), describe(again)
    assert (True, True) == ("already" in again.stdout, "wrong audit key" in other.stderr)


READER = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN")
connection.execute("SELECT count(*) FROM tl_keys").fetchall()
print("reading", flush=True)
sys.stdin.readline()
connection.execute("COMMIT")
print("idle", flush=True)
sys.stdin.read()
connection.close()
"""
"""Another process on the store: a read transaction (which holds the WAL's truncation back),
then an idle connection (so the command's close is not the last one, whose checkpoint would
clear the WAL whatever the command did)."""


@pytest.mark.parametrize("again", [("forget", "{id}"), ("purge", "--older-than", "90d", "--yes")])
def test_i19_p5_the_erasure_of_old_key_bytes_is_redone_by_running_again(
    sqlite_store: Target, tmp_path: Path, again: tuple[str, ...]
) -> None:
    """A forget that could not clear the old bytes of the destroyed key from the files (a
    reader held the write-ahead log; as a kill before that last step would leave them) says
    so, and `forget` or `purge --yes` run again clears them."""
    path = sqlite_store.sqlite_path
    assert path is not None
    quick = Target("sqlite", sqlite_store.url + "?lock_timeout=0.2", sqlite_path=path)
    cli = KeyedCli(quick, tmp_path, _key_file(tmp_path))
    session_id = _import(cli)
    (wrapped,) = sqlite_store.query("SELECT wrapped FROM tl_keys WHERE session_id = ?",
                                    session_id)[0]
    reader = subprocess.Popen([sys.executable, "-c", READER, str(path)], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert reader.stdin is not None
    assert reader.stdout is not None
    try:
        assert "reading" == reader.stdout.readline().strip()
        first = cli.spawn("forget", session_id)
        reader.stdin.write("done\n")
        reader.stdin.flush()
        assert "idle" == reader.stdout.readline().strip()
        # This process holds no connection to the file now: reading it drops no lock.
        left = wrapped in _raw_files(path)
        rerun = cli.spawn(*(a.format(id=session_id) for a in again))
        cleared = wrapped not in _raw_files(path)
    finally:
        reader.stdin.close()
        reader.wait(timeout=30)
    assert (0, 0) == (first.returncode, rerun.returncode), describe(rerun)
    assert (True, True, True) == ("could not be truncated" in first.stderr, left, cleared)


def _raw_files(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())
