"""``turnledger what-if``: another profile over the recorded appends (E6, E12).

The demo records with ``max_context_tokens = 2,400`` and a 4-turn limit; a 600-token budget or a
1-turn limit must trim more, and the command must write nothing to the store.
"""

from __future__ import annotations

import json
import uuid

from .conftest import Cli, describe


def _row_counts(cli: Cli) -> tuple[int, int]:
    """(stored events, stored snapshots), counted with SQL behind the CLI's back."""
    ((events,),) = cli.target.query("SELECT count(*) FROM stored_events")
    ((snapshots,),) = cli.target.query("SELECT count(*) FROM stored_snapshots")
    return int(events), int(snapshots)


def test_e6_what_if_smaller_budget_trims_more_and_writes_nothing(cli: Cli) -> None:
    """what-if --max-context-tokens 600 shows more trims than recorded; the store is unchanged."""
    session_id, _ = cli.demo()
    timeline = cli.json("replay", session_id, "--json")
    before = _row_counts(cli)

    command = ("what-if", session_id, "--max-context-tokens", "600", "--json")
    text = cli.ok(*command)
    report = json.loads(text)
    table = cli.ok("what-if", session_id, "--max-context-tokens", "600")

    recorded, what_if = report["totals"]["recorded"], report["totals"]["what_if"]
    assert (2_400, 600) == (report["recorded_profile"]["max_context_tokens"],
                           report["profile"]["max_context_tokens"])
    recorded_trims = [e for e in timeline if e["type"] == "TrimDecided"]
    assert len(recorded_trims) == sum(recorded["trims_by_reason"].values())
    assert what_if["trims_by_reason"]["token_budget"] > recorded["trims_by_reason"]["token_budget"]
    # One row per recorded request, sent or rejected (R18).
    requests = [e for e in timeline if e["type"] in {"RequestPrepared", "RequestRejected"}]
    assert [e["position"] for e in requests] == [row["position"] for row in report["requests"]]
    assert text == cli.ok(*command)  # E12: same events, same profile, same bytes
    assert any(line.startswith("what-if:") for line in table.splitlines()), table
    assert before == _row_counts(cli)


def test_r29_what_if_one_turn_limit_trims_more_by_turn_limit(cli: Cli) -> None:
    """what-if --max-history-messages 1 makes more turn-limit trims than the recorded limit 4."""
    session_id, _ = cli.demo()

    report = cli.json("what-if", session_id, "--max-history-messages", "1", "--json")

    recorded, what_if = report["totals"]["recorded"], report["totals"]["what_if"]
    assert 1 == report["profile"]["max_history_messages"]
    assert what_if["trims_by_reason"]["turn_limit"] > recorded["trims_by_reason"]["turn_limit"]


def test_e11_what_if_unknown_session_is_a_one_line_usage_error(cli: Cli) -> None:
    """what-if on a session the store does not hold exits 2 with one stderr line."""
    cli.demo()
    missing = str(uuid.UUID(int=42))

    result = cli.run("what-if", missing, "--max-context-tokens", "600")

    assert 2 == result.returncode, describe(result)
    assert 1 == len(result.stderr.splitlines()), result.stderr
    assert missing in result.stderr
