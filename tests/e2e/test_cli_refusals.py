"""What the command line refuses or says rather than doing something else (a review of the
CLI against a demanding user, stop 33): commands that change a store never create one (nor do
read commands, issue 21 point 5), key files are never overwritten, private files are private
whatever they were, an empty store URL or input file is said, an out-of-range ratio is said, a
page is announced only when it exists.

The commands run through the CLI's ``main`` in this process, except where the process is the
point: the modes of the files a command writes, and a store URL taken from the environment.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tests.extras import need
from turnledger.store.keys import new_key_text
from turnledger.store.session import open_store

from .conftest import Cli, clean_env, describe, run_command, run_main

LINE = [{"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."}]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _import_one(cli: Cli) -> str:
    source = cli.cwd / "one.jsonl"
    source.write_text(json.dumps({"messages": LINE}) + "\n", encoding="utf-8")
    stdout = cli.ok("import", source, "--format", "openai")
    session_id, summary = stdout.rstrip("\n").split("\t")
    assert "line 1: 4 messages, 1 turn" == summary, stdout  # not "1 turns"
    return session_id


def test_e11_commands_that_change_a_store_never_create_one(tmp_path: Path) -> None:
    """forget, purge, rekey, rechain and projections run on a SQLite path that does not exist
    (a typo) exit 2 naming it, and leave no file behind: they used to create an empty store
    and report on it (rekey: "re-wrapped 0 data keys"; purge: "no session is idle")."""
    need("cryptography")
    key, new_key = tmp_path / "store.key", tmp_path / "new.key"
    for path in (key, new_key):
        path.write_text(new_key_text() + "\n")
    typo = tmp_path / "typo.db"
    audit = {"TURNLEDGER_AUDIT_KEY": new_key_text()}
    commands = [
        (["--key-file", key, "forget", "0" * 32], None),
        (["--key-file", key, "purge", "--older-than", "90d"], None),
        (["--key-file", key, "rekey", "--new-key-file", new_key], None),
        (["rechain", "--yes"], audit),
        (["projections", "run"], None),
    ]
    for args, env in commands:
        result = run_main(["--store", f"sqlite:///{typo}", *args], cwd=tmp_path, env=env)
        assert 2 == result.returncode, describe(result)
        assert f"turnledger: error: no store at {typo} (" in result.stderr, describe(result)
        assert not typo.exists(), describe(result)


def test_e11_projections_run_refuses_a_read_only_store(sqlite_cli: Cli) -> None:
    """``projections run`` writes the analytics tables: on ``mode=ro`` it used to print
    "applied N events" and write nothing. It exits 2 and says why."""
    _import_one(sqlite_cli)
    result = run_main(["--store", f"{sqlite_cli.target.url}?mode=ro", "projections", "run"],
                      cwd=sqlite_cli.cwd)
    assert (2, "") == (result.returncode, result.stdout), describe(result)
    assert "opened read-only (mode=ro)" in result.stderr


def test_e11_keygen_never_overwrites_a_file_and_writes_mode_0600(tmp_path: Path) -> None:
    """A key file that exists (maybe a store's only key) is left as it was, exit 2; a new one
    is written readable by its owner only."""
    existing = tmp_path / "store.key"
    existing.write_text("the only copy\n")
    existing.chmod(0o644)
    result = run_command([sys.executable, "-m", "turnledger", "keygen", "--output", str(existing)],
                         cwd=tmp_path)
    assert 2 == result.returncode, describe(result)
    assert "exists: keygen never overwrites a file" in result.stderr
    assert ("the only copy\n", 0o644) == (existing.read_text(), _mode(existing))
    fresh = tmp_path / "new.key"
    result = run_command([sys.executable, "-m", "turnledger", "keygen", "--output", str(fresh)],
                         cwd=tmp_path)
    assert 0 == result.returncode, describe(result)
    assert 0o600 == _mode(fresh)


def test_e11_anchor_and_report_files_are_private_even_when_they_existed(
    sqlite_cli: Cli
) -> None:
    """``anchor --output`` and ``report -o`` replace an existing file's content and make it
    mode 0600 (the help says so; an existing 0644 file used to stay 0644). ``report -o -``
    writes the HTML to standard output, not to a file named ``-``. An anchor taken without
    an audit key says on stderr that it is a plain SHA-256 (ADR-0048)."""
    session_id = _import_one(sqlite_cli)
    anchor, page = sqlite_cli.cwd / "a.anchor", sqlite_cli.cwd / "r.html"
    for path in (anchor, page):
        path.write_text("old")
        path.chmod(0o644)
    result = sqlite_cli.spawn("anchor", "--output", anchor)
    assert 0 == result.returncode, describe(result)
    assert "warning: no audit key: the anchor holds plain SHA-256 values" in result.stderr
    sqlite_cli.ok("report", session_id, "-o", page, spawn=True)
    for path in (anchor, page):
        assert (0o600, False) == (_mode(path), path.read_text().startswith("old")), path
    html = sqlite_cli.ok("report", session_id, "-o", "-")
    assert html.startswith("<!DOCTYPE html>")
    assert not (sqlite_cli.cwd / "-").exists()


def test_e11_an_empty_store_url_is_refused(tmp_path: Path) -> None:
    """``--store ""`` or an empty TURNLEDGER_STORE (an unset variable in a script) is a usage
    error; it used to mean ``./turnledger.db`` and write there."""
    source = tmp_path / "one.jsonl"
    source.write_text(json.dumps({"messages": LINE}) + "\n", encoding="utf-8")
    given = run_main(["--store", "", "import", source], cwd=tmp_path)
    from_env = run_command([sys.executable, "-m", "turnledger", "import", str(source)],
                           cwd=tmp_path, env={**clean_env(), "TURNLEDGER_STORE": ""})
    for result in (given, from_env):
        assert 2 == result.returncode, describe(result)
        assert "the store URL is empty" in result.stderr
    assert ["one.jsonl"] == os.listdir(tmp_path)  # no ./turnledger.db


def test_e11_an_input_without_conversations_is_said_and_creates_no_store(
    sqlite_cli: Cli
) -> None:
    """An empty file (or only blank lines) imports nothing: a warning says so, exit 0, and no
    store is created for it; ``--json`` still prints its (empty) lists."""
    blank = sqlite_cli.cwd / "blank.jsonl"
    blank.write_text("\n  \n")
    for extra in ((), ("--json",)):
        result = sqlite_cli.run("import", blank, *extra)
        assert 0 == result.returncode, describe(result)
        assert "holds no conversation" in result.stderr
    assert {"imported": [], "skipped": [], "rejected": []} == json.loads(result.stdout)
    listed = sqlite_cli.run("sessions")
    assert listed.stderr.startswith("turnledger: error: no store at "), describe(listed)


def test_r14_an_out_of_range_ratio_is_said_to_be_unset(sqlite_cli: Cli) -> None:
    """R14 takes a ratio outside (0, 1] as unset; the command says so rather than run a
    comparison that is silently the recorded one."""
    session_id = _import_one(sqlite_cli)
    for args in (("what-if", session_id, "--context-compact-ratio", "1.5"),
                 ("report", session_id, "-o", "r.html", "--what-if",
                  "context_compact_ratio=0")):
        result = sqlite_cli.run(*args)
        assert 0 == result.returncode, describe(result)
        assert "is outside (0, 1]: taken as unset (R14)" in result.stderr, describe(result)
    quiet = sqlite_cli.run("what-if", session_id, "--context-compact-ratio", "0.5")
    assert "warning" not in quiet.stderr, describe(quiet)


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_e11_a_limit_below_one_names_the_same_bound(sqlite_cli: Cli, limit: str) -> None:
    result = sqlite_cli.run("sessions", "--limit", limit)
    assert 2 == result.returncode, describe(result)
    assert f"must be >= 1, got {limit}" in result.stderr


def test_e11_a_next_page_is_announced_only_when_there_is_one(sqlite_cli: Cli) -> None:
    """``sessions --limit N`` names the next page only when more sessions follow (a page that
    ended on the last session used to announce one that listed "no sessions")."""
    store = open_store(sqlite_cli.target.url)
    for _ in range(3):
        store.start_session()
    store.close()
    ids = [r["session_id"] for r in sqlite_cli.json("sessions", "--json")]
    assert 3 == len(ids)
    first = sqlite_cli.run("sessions", "--limit", "2", "--json")
    assert [r["session_id"] for r in json.loads(first.stdout)] == ids[:2]
    assert f"next page: sessions --after {ids[1]} --limit 2" in first.stderr
    last = sqlite_cli.run("sessions", "--limit", "1", "--after", ids[1], "--json")
    assert [r["session_id"] for r in json.loads(last.stdout)] == ids[2:]
    assert "next page" not in last.stderr, describe(last)


def test_e11_summarizer_timeout_without_a_summarizer_is_refused(sqlite_cli: Cli) -> None:
    session_id = _import_one(sqlite_cli)
    result = sqlite_cli.run("what-if", session_id, "--summarizer-timeout", "3")
    assert (2, "") == (result.returncode, result.stdout), describe(result)
    assert "--summarizer-timeout needs --summarizer" in result.stderr


def test_e11_stats_on_an_explicit_read_only_store_says_so(sqlite_cli: Cli) -> None:
    """The note that the analytics tables were not used comes with ``mode=ro`` given too, not
    only when the file's permissions made the command fall back to it."""
    _import_one(sqlite_cli)
    result = run_main(["--store", f"{sqlite_cli.target.url}?mode=ro", "stats"],
                      cwd=sqlite_cli.cwd)
    assert 0 == result.returncode, describe(result)
    assert "the store is read-only: statistics computed from its events" in result.stderr


def test_i21_p5_read_commands_never_create_a_store(sqlite_cli: Cli, tmp_path: Path) -> None:
    """sessions, stats, export and replay on a mistyped path exit 2 naming it and create
    neither the file nor its directory."""
    missing = tmp_path / "typo" / "nope.db"
    url = f"sqlite:///{missing}"
    some_id = "00000000-0000-4000-8000-000000000001"
    for args in (["sessions"], ["stats"], ["export", some_id, "--format", "openai"],
                 ["replay", some_id]):
        result = sqlite_cli.run("--store", url, *args, store=False)
        assert 2 == result.returncode, describe(result)
        assert f"turnledger: error: no store at {missing}" in result.stderr
    assert not missing.parent.exists()
