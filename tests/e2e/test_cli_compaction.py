"""The CLI on a compacted session (SQLite; issue 24 point 4).

The session (`tests.e2e.compaction_session.record`, written with the library) holds
`TurnsSummarized`, `SummaryRefused` and `ToolResultsCleared`. `replay` shows each with its range;
`verify` passes, and fails on a copy where a summary's range was forged; `what-if` with a
smaller budget reuses the recorded summaries and, with ``--summarizer MODULE:CALLABLE``, asks
the passed one for the rest; `report` draws the summarised turns and the cleared results;
`stats` counts the compactions and the tokens they saved (C7). The commands run through the
CLI's ``main`` in this process, whose path holds the repository: ``--summarizer`` imports the
test helper module from there, and a module of the working directory from that directory.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

import turnledger as tl
from tests.e2e.compaction_session import record
from tests.integration.test_replay import append_raw, next_stamp
from turnledger.domain.events import TurnsSummarized

from .conftest import Cli, describe, run_main

PASSED = "tests.e2e.compaction_session:summarize_v2"


@pytest.fixture
def compacted(sqlite_cli: Cli) -> tuple[Cli, str, list[dict[str, Any]]]:
    """The CLI on a store holding the compacted session; its id and `replay --json`."""
    session_id = record(sqlite_cli.target.url)
    return sqlite_cli, session_id, sqlite_cli.json("replay", session_id, "--json")


def _of(timeline: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [entry for entry in timeline if entry["type"] == kind]


def test_i24_cli_replay_and_verify_show_and_check_each_compaction(
    compacted: tuple[Cli, str, list[dict[str, Any]]], tmp_path: Path,
) -> None:
    cli, session_id, timeline = compacted
    summaries = _of(timeline, "TurnsSummarized")
    refusals = _of(timeline, "SummaryRefused")
    clearings = _of(timeline, "ToolResultsCleared")
    assert (3, 1, 9) == (len(summaries), len(refusals), len(clearings))
    text = cli.ok("replay", session_id)
    for entry in summaries:
        data = entry["data"]
        assert re.search(
            rf"^\s*{entry['position']}\s.*TurnsSummarized\s+turns at log positions "
            rf"{data['first_position']}-{data['last_position']} summarised by 'cli-test-v1'",
            text, re.MULTILINE), text
    (refused,) = refusals
    assert (f"summary by 'down-v1' of log positions {refused['data']['first_position']}-"
            f"{refused['data']['last_position']} refused (raised") in text
    for entry in clearings:
        assert f"tool results cleared at log positions {entry['data']['positions'][0]} " in text
    assert cli.ok("verify", session_id).rstrip().endswith(": OK")  # exit 0

    # A copy of the store where a summary claims other turns than its trim dropped.
    assert cli.target.sqlite_path is not None
    copy = tmp_path / "forged.db"
    shutil.copyfile(cli.target.sqlite_path, copy)
    with tl.open_store(f"sqlite:///{copy}") as store:
        good = next(e for e in store.events_of(session_id) if isinstance(e, TurnsSummarized))
        append_raw(store, session_id, attrs.evolve(
            good, **next_stamp(store, session_id), first_position=good.first_position + 1))
    forged = run_main(["--store", f"sqlite:///{copy}", "verify", session_id], cwd=cli.cwd)
    assert 1 == forged.returncode, describe(forged)
    assert "TurnsSummarized names log positions" in forged.stdout
    assert 0 == cli.run("verify", session_id).returncode  # the original is untouched


def test_i24_cli_what_if_smaller_budget_with_and_without_a_summarizer(
    compacted: tuple[Cli, str, list[dict[str, Any]]],
) -> None:
    cli, session_id, timeline = compacted
    recorded = {(e["data"]["first_position"], e["data"]["last_position"])
                for e in [*_of(timeline, "TurnsSummarized"), *_of(timeline, "SummaryRefused")]}
    plain = cli.json("what-if", session_id, "--max-context-tokens", "400", "--json")
    passed = cli.run("what-if", session_id, "--max-context-tokens", "400", "--json",
                     "--summarizer", PASSED)
    assert 0 == passed.returncode, describe(passed)
    asked = json.loads(passed.stdout)
    assert "summarizer" not in plain
    assert PASSED == asked["summarizer"]

    def notes(report: dict[str, Any], source: str) -> list[dict[str, Any]]:
        return [c for r in report["requests"] for c in r["compactions"] if c["source"] == source]

    assert not notes(plain, "summarizer")
    reused = notes(asked, "log")
    made = notes(asked, "summarizer")
    assert reused
    assert made
    assert all((c["first_position"], c["last_position"]) in recorded for c in reused)
    assert {PASSED} == {c["summarizer"] for c in made}
    assert all(c["kind"] == "summary" and c["tokens"] < c["replaced_tokens"] for c in made)
    assert (plain["totals"]["what_if"]["summaries"] + len(made)
            == asked["totals"]["what_if"]["summaries"])
    assert (asked["totals"]["what_if"]["compaction_tokens_saved"]
            > plain["totals"]["what_if"]["compaction_tokens_saved"])
    # The text names each request's reused and new summaries with their tokens.
    text = cli.ok("what-if", session_id, "--max-context-tokens", "400", "--summarizer", PASSED)
    first = made[0]
    assert (f"summary of log positions {first['first_position']}-{first['last_position']} made "
            f"by the passed summarizer ('{PASSED}'), {first['tokens']} tokens for "
            f"{first['replaced_tokens']:,}") in text
    assert f"{len(reused) - 1} reused from the log, {len(made)} made by the passed" in text
    # The compaction settings change too: no clearing, or more turns kept whole.
    unclear = cli.json("what-if", session_id, "--no-clear-tool-results", "--json")
    assert 9 == unclear["totals"]["recorded"]["tool_result_clearings"]
    assert 0 == unclear["totals"]["what_if"]["tool_result_clearings"]
    assert not unclear["profile"]["compaction"]["clear_tool_results"]
    kept = cli.json("what-if", session_id, "--keep-tool-result-turns", "3", "--json")
    assert 3 == kept["profile"]["compaction"]["keep_tool_result_turns"]


def test_i24_cli_what_if_summarizer_import_errors_are_usage_errors(
    compacted: tuple[Cli, str, list[dict[str, Any]]],
) -> None:
    cli, session_id, _ = compacted
    for spec, says in (
        ("no_colon", "expected MODULE:CALLABLE"),
        ("tests.e2e.no_such_module:summarize", "cannot import module 'tests.e2e.no_such_module'"),
        ("tests.e2e.compaction_session:missing", "has no attribute 'missing'"),
        ("tests.e2e.compaction_session:NOT_CALLABLE",
         "'NOT_CALLABLE' is of type int, not callable"),
    ):
        result = cli.run("what-if", session_id, "--max-context-tokens", "400",
                         "--summarizer", spec)
        assert 2 == result.returncode, describe(result)
        assert [f"turnledger: error: --summarizer {spec!r}: "] == [
            line[: len(f"turnledger: error: --summarizer {spec!r}: ")]
            for line in result.stderr.splitlines()]
        assert says in result.stderr
    # A module in the working directory is found (as uvicorn finds an app there).
    (cli.cwd / "local_summaries.py").write_text(
        "def summarize(turns, previous):\n    return f'{len(turns)} messages, locally'\n",
        encoding="utf-8")
    local = cli.json("what-if", session_id, "--max-context-tokens", "400", "--json",
                     "--summarizer", "local_summaries:summarize")
    made = [c for r in local["requests"] for c in r["compactions"] if c["source"] == "summarizer"]
    assert made
    assert {"local_summaries:summarize"} == {c["summarizer"] for c in made}
    result = cli.run("report", session_id, "-o", cli.cwd / "r.html", "--summarizer", PASSED)
    assert 2 == result.returncode, describe(result)
    assert "--summarizer needs --what-if" in result.stderr


def test_i24_cli_report_draws_compacted_spans(
    compacted: tuple[Cli, str, list[dict[str, Any]]],
) -> None:
    cli, session_id, timeline = compacted
    out = cli.cwd / "report.html"
    cli.ok("report", session_id, "-o", out, "--what-if", "max_context_tokens=400",
           "--what-if", "compaction.clear_tool_results=true", "--summarizer", PASSED)
    html = out.read_text(encoding="utf-8")
    sides = html.split('<section id="turns">')[1].split('<div class="side">')[1:3]
    recorded_side, what_if_side = sides
    for entry in _of(timeline, "TurnsSummarized"):
        data = entry["data"]
        assert (f"summarised by &#x27;cli-test-v1&#x27; (TurnsSummarized at event "
                f"{entry['position']}, log positions {data['first_position']}-"
                f"{data['last_position']})") in recorded_side
    assert 'class="turn summarised"' in recorded_side
    assert f"summarised by &#x27;{PASSED}&#x27;" in what_if_side
    assert f"&#x27;{PASSED}&#x27;" not in recorded_side
    flags = re.findall(r'class="flag results-cleared"', recorded_side)
    assert len(_of(timeline, "ToolResultsCleared")) == len(flags)
    again = cli.cwd / "again.html"
    cli.ok("report", session_id, "-o", again, "--what-if", "max_context_tokens=400",
           "--what-if", "compaction.clear_tool_results=true", "--summarizer", PASSED)
    assert out.read_bytes() == again.read_bytes()  # E12: the same bytes


def test_i24_cli_stats_counts_compactions_and_tokens_saved(
    compacted: tuple[Cli, str, list[dict[str, Any]]],
) -> None:
    cli, session_id, timeline = compacted
    summaries = [e["data"] for e in _of(timeline, "TurnsSummarized")]
    clearings = [e["data"] for e in _of(timeline, "ToolResultsCleared")]
    expected = {
        "summaries": len(summaries),
        "summary_tokens_saved": sum(d["replaced_tokens"] - d["tokens"] for d in summaries),
        "summary_refusals_raised": len(_of(timeline, "SummaryRefused")),
        "summary_refusals_oversize": 0,
        "tool_result_clearings": len(clearings),
        "tool_results_cleared": sum(len(d["tool_call_ids"]) for d in clearings),
        "tool_result_tokens_saved": sum(d["tokens_before"] - d["tokens_after"]
                                        for d in clearings),
    }
    stats = cli.json("stats", "--json")
    (row,) = stats["sessions"]
    assert expected == {key: row[key] for key in expected}
    assert expected == {key: stats["totals"][key] for key in expected}
    text = cli.ok("stats")
    lines = text.split("compaction per session")[1].splitlines()
    (line,) = [x for x in lines if x.startswith(session_id[:8])]
    assert line.split() == [
        session_id[:8], str(expected["summaries"]), str(expected["summary_tokens_saved"]),
        "raised", "1", str(expected["tool_result_clearings"]),
        str(expected["tool_results_cleared"]), str(expected["tool_result_tokens_saved"]),
    ]
