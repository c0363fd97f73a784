"""``turnledger demo`` and the README's commands (R18, R24-R27, R31-R33, E7).

The demo's narration is read from a run in this process; the README's commands run as a person
runs them: the installed ``turnledger`` script, as a subprocess, in a fresh directory or with
``TURNLEDGER_STORE`` set.
"""

from __future__ import annotations

import re
from pathlib import Path

from turnledger.domain.messages import BREADCRUMB_TEXT

from .conftest import (
    CONSOLE_SCRIPT,
    REPO,
    SESSION_LINE,
    Cli,
    clean_env,
    describe,
    run_command,
    run_main,
)

README = REPO / "README.md"
CLI_DOC = REPO / "docs" / "cli.md"  # the synopsis, moved from the README (issue 34)
NOTICE = re.compile(r">> HistoryTrimmed \(subscriber\): dropped (\d+) messages, "
                    r"kept (\d+) turns, reason (\w+)")
TRIM = re.compile(r"^\s+trim \((append|prepare|overflow), (token_budget|turn_limit)\): "
                  r"dropped \d+ turns / (\d+) messages", re.MULTILINE)


def _stats_row(stdout: str, session_id: str) -> dict[str, str]:
    """The demo's stats table row for ``session_id``, keyed by the two-space separated headers."""
    lines = stdout.split("== stats (turnledger stats) ==\n", 1)[1].splitlines()
    headers = re.split(r"\s{2,}", lines[0].strip())
    assert set(lines[1]) == {"-", " "}, lines[1]  # the rule under the headers
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[2:] if line.strip()]
    mine = [row for row in rows if row[0] == session_id[:8]]
    assert 1 == len(mine), lines
    return dict(zip(headers, mine[0], strict=True))


def test_r31_r33_demo_narrates_trims_breadcrumbs_notices_overflow_rejection_and_stats(
    cli: Cli,
) -> None:
    """`turnledger demo` exits 0 and shows both trim reasons, their notices, R25, R18, stats."""
    session_id, out = cli.demo()

    trims = TRIM.findall(out)
    notices = NOTICE.findall(out)
    crumbs = out.count(f"breadcrumb: {BREADCRUMB_TEXT!r}")
    assert {"append", "prepare", "overflow"} == {trigger for trigger, _, _ in trims}
    assert {"token_budget", "turn_limit"} == {reason for _, reason, _ in trims}
    # R31-R32: every trim is told to the model (one breadcrumb) and to clients (one notice),
    # with the same reason and the same number of dropped messages.
    assert len(trims) == len(notices) == crumbs
    assert [(reason, dropped) for _, reason, dropped in trims] == [
        (reason, dropped) for dropped, _, reason in notices
    ]
    assert "recovered: retrying" in out  # R25
    rejected = re.search(r"REJECTED before sending: request needs about ([\d,]+) tokens "
                         r"but the model context window of \S+ is ([\d,]+) tokens", out)
    assert rejected is not None, out  # R18: names both numbers
    assert int(rejected[1].replace(",", "")) > int(rejected[2].replace(",", ""))

    row = _stats_row(out, session_id)
    by_reason = {"token_budget": 0, "turn_limit": 0}
    for _, reason, _ in trims:
        by_reason[reason] += 1
    assert str(by_reason["token_budget"]) == row["trims budget"]
    assert str(by_reason["turn_limit"]) == row["trims turns"]
    assert "1" == row["rejected"]
    assert "1" == row["overflows"]
    assert f"{sum(int(d) for _, _, d in trims):,}" == row["msgs dropped"]
    assert f"next: turnledger --store {cli.target.url} replay {session_id}" in out


def test_readme_first_command_installs_then_runs_the_demo() -> None:
    """The README's first command is the documented install + `.venv/bin/turnledger demo`."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    expected = [
        "python3 -m venv .venv",
        ".venv/bin/pip install -e '.[dev]'",
        ".venv/bin/turnledger demo",
    ]
    assert expected == [part.strip() for part in blocks[0].strip().split("&&")]
    assert ".venv/bin/python -m pytest -q" == blocks[1].strip()


def test_readme_demo_console_script_writes_default_store_in_cwd(tmp_path: Path) -> None:
    """The `turnledger` console script's `demo`, without --store, writes ./turnledger.db."""
    result = run_command([CONSOLE_SCRIPT, "demo"], cwd=tmp_path)
    assert 0 == result.returncode, describe(result)
    assert result.stdout.startswith("store: sqlite:///./turnledger.db\n"), result.stdout
    assert (tmp_path / "turnledger.db").is_file()
    # The default store is then what every command without --store reads.
    session_id = SESSION_LINE.findall(result.stdout)[0]
    listed = run_command([CONSOLE_SCRIPT, "sessions"], cwd=tmp_path)
    assert 0 == listed.returncode, describe(listed)
    assert session_id in listed.stdout


def test_cli_store_comes_from_turnledger_store_env_when_no_option(tmp_path: Path) -> None:
    """Without --store the command uses $TURNLEDGER_STORE (missing directories created)."""
    path = tmp_path / "from" / "env.db"
    env = {**clean_env(), "TURNLEDGER_STORE": f"sqlite:///{path}"}
    result = run_command([CONSOLE_SCRIPT, "demo"], cwd=tmp_path, env=env)
    assert 0 == result.returncode, describe(result)
    assert path.is_file()
    assert not (tmp_path / "turnledger.db").exists()


def test_readme_command_synopsis_matches_the_parser(tmp_path: Path) -> None:
    """Every command docs/cli.md's synopsis lists is one `turnledger --help` offers, and back."""
    text = CLI_DOC.read_text(encoding="utf-8")
    documented = set(re.findall(r"^turnledger \[--store URL\] ([a-z-]+)", text, re.MULTILINE))
    result = run_main(["--help"], cwd=tmp_path)
    assert 0 == result.returncode, describe(result)
    offered = set(re.findall(r"^    ([a-z-]+)  ", result.stdout, re.MULTILINE))
    assert offered == documented
