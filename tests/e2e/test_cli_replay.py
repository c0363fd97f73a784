"""``turnledger replay``: the audit timeline and time travel (E4, E6, E12, R27a)."""

from __future__ import annotations

import re
import uuid

from turnledger.domain.messages import BREADCRUMB_TEXT

from .conftest import Cli, describe


def test_e6_replay_json_lists_every_event_with_position_type_and_summary(cli: Cli) -> None:
    """replay --json is a JSON list, one entry per event, positions 1..N, each summarised."""
    session_id, out = cli.demo()
    recorded = int(re.findall(r"^events recorded: (\d+)$", out, re.MULTILINE)[0])

    entries = cli.json("replay", session_id, "--json")

    assert isinstance(entries, list)
    assert list(range(1, recorded + 1)) == [entry["position"] for entry in entries]
    assert all({"position", "type", "summary"} <= set(entry) for entry in entries)
    assert all(isinstance(e["summary"], str) and e["summary"] for e in entries)
    assert ["SessionStarted", "RouteSelected"] == [e["type"] for e in entries[:2]]
    # E6: the timeline says why each trim happened: its reason and its limit.
    trims = [e for e in entries if e["type"] == "TrimDecided"]
    assert trims
    for trim in trims:
        reason = trim["data"]["reason"].replace("_", " ")
        assert reason in trim["summary"], trim
        assert f"{trim['data']['limit']:,}" in trim["summary"], trim
    table = cli.ok("replay", session_id).splitlines()
    assert recorded + 2 == len(table)  # header, rule, one row per event


def test_e4_replay_at_position_gives_the_chat_view_as_of_that_event(cli: Cli) -> None:
    """replay --at N --view chat --json gives the view after event N, not the latest one."""
    first = cli.import_fixture("openai")[0]  # SessionStarted, RouteSelected, 3 appends
    system = {"role": "system", "content": "You are a terse assistant.",
              "attachments": [], "synthetic": False}
    user = {"role": "user", "content": "Bonjour ! Quelle heure est-il à Paris ?",
            "attachments": [], "synthetic": False}
    assistant = {"role": "assistant", "content": "Il est 14 h 05 à Paris.",
                 "attachments": [], "synthetic": False}

    at_4 = cli.json("replay", first, "--at", "4", "--view", "chat", "--json")
    latest = cli.json("replay", first, "--view", "conversation", "--json")

    assert {"session": first, "at": 4, "view": "chat", "messages": [system, user]} == at_4
    assert {"session": first, "at": 5, "view": "conversation",
            "messages": [system, user, assistant]} == latest


def test_r27a_replay_at_a_prepared_request_shows_the_messages_sent(cli: Cli) -> None:
    """At a RequestPrepared position the chat view is the request: its count, its breadcrumb."""
    session_id, _ = cli.demo()
    entries = cli.json("replay", session_id, "--json")
    prepared = [e for e in entries if e["type"] == "RequestPrepared"]
    first_trim = next(e["position"] for e in entries if e["type"] == "TrimDecided")
    after_trim = next(e for e in prepared if e["position"] > first_trim)

    for request in (prepared[0], after_trim):
        view = cli.chat_view(session_id, "--at", str(request["position"]))
        assert request["data"]["message_count"] == len(view), request
    view = cli.chat_view(session_id, "--at", str(after_trim["position"]))
    assert ["system", "user"] == [m["role"] for m in view[:2]]
    assert (BREADCRUMB_TEXT, True) == (view[1]["content"], view[1]["synthetic"])  # R31


def test_e4_replay_at_out_of_range_is_a_one_line_usage_error(cli: Cli) -> None:
    """--at outside the recorded positions exits 2 with one stderr line naming --at."""
    first = cli.import_fixture("openai")[0]  # 5 events

    for at in ("6", "-1"):
        result = cli.run("replay", first, "--at", at, "--view", "chat")

        assert 2 == result.returncode, describe(result)
        assert 1 == len(result.stderr.splitlines()), result.stderr
        assert "--at" in result.stderr
        assert "" == result.stdout


def test_e11_replay_unknown_session_is_a_one_line_usage_error(cli: Cli) -> None:
    """replay of a session the store does not hold exits 2 with one line naming it."""
    cli.import_fixture("openai")

    for session_id in (str(uuid.UUID(int=7)), "not-a-session"):
        result = cli.run("replay", session_id, "--json")

        assert 2 == result.returncode, describe(result)
        assert 1 == len(result.stderr.splitlines()), result.stderr
        assert session_id in result.stderr
        assert "" == result.stdout


def test_e12_replay_json_twice_is_byte_identical(cli: Cli) -> None:
    """The same events give the same replay bytes: the timeline and a past view (E12)."""
    session_id, _ = cli.demo()
    timeline = ("replay", session_id, "--json")
    past_view = ("replay", session_id, "--at", "30", "--view", "conversation", "--json")

    assert cli.ok(*timeline) == cli.ok(*timeline)
    assert cli.ok(*past_view) == cli.ok(*past_view)
