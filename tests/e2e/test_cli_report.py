"""``turnledger report``: the demo session as one HTML file, opened in Chromium.

The demo records five trims (two token-budget, two turn-limit, one overflow recovery), one
rejected request and two route switches: the page Chromium builds must draw each of them once,
as a marker naming its event, link it to its timeline row, and write nothing to the store.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.browser import chromium, dump_dom, elements, screenshot

from .conftest import Cli, describe


def _expected_marks(timeline: list[dict[str, object]]) -> Counter[tuple[str, int]]:
    """(lane, event position) of every trim, rejection and route switch the demo recorded."""
    expected: Counter[tuple[str, int]] = Counter()
    for entry in timeline:
        data, position = entry["data"], entry["position"]
        assert isinstance(data, dict)
        assert isinstance(position, int)
        if entry["type"] == "TrimDecided":
            lane = "overflow" if data["trigger"] == "overflow" else str(data["reason"])
            expected[(lane, position)] += 1
        elif entry["type"] == "RequestRejected":
            expected[("rejected", position)] += 1
        elif entry["type"] == "RouteSelected" and data["reason"] != "initial":
            expected[("switch", position)] += 1
    return expected


def test_report_of_the_demo_draws_each_decision_once_in_chromium(
    sqlite_cli: Cli, tmp_path: Path
) -> None:
    """report -o FILE: Chromium's DOM has the chart, one marker per trim, rejection and route
    switch (linked to its timeline row and back), one row per event; a screenshot is saved."""
    program = chromium()
    session_id, _ = sqlite_cli.demo()
    timeline = sqlite_cli.json("replay", session_id, "--json")
    before = sqlite_cli.event_counts()
    page = tmp_path / "demo.html"

    stdout = sqlite_cli.ok("report", session_id, "-o", page)
    dom = dump_dom(program, page, tmp_path)
    png = screenshot(program, page, tmp_path / "demo.png")

    found = elements(dom)
    drawn: Counter[tuple[str, int]] = Counter()
    for element in found:
        for kind in ("token_budget", "turn_limit", "overflow", "sweep", "rejected", "switch"):
            if element.tag == "g" and kind in element.classes:
                drawn[(kind, int(element.attrs["data-event"]))] += 1
    links = {e.attrs["href"] for e in found if e.tag == "a"}
    rows = [e.attrs["id"] for e in found if e.tag == "tr" and "id" in e.attrs]
    assert f"wrote {page}" in stdout
    assert 1 == sum(e.tag == "svg" and "chart" in e.classes for e in found)
    assert 1 == sum(e.tag == "svg" and "strip" in e.classes for e in found)
    assert _expected_marks(timeline) == drawn
    assert {f"#e{position}" for _, position in drawn} <= links  # chart -> timeline
    assert {f"#c{position}" for _, position in drawn} <= links  # timeline -> chart
    ids = {e.attrs.get("id") for e in found}
    assert {f"c{position}" for _, position in drawn} <= ids
    assert [f"e{entry['position']}" for entry in timeline] == rows
    assert png.stat().st_size > 10_000
    assert before == sqlite_cli.event_counts()


def test_report_what_if_and_bad_options(sqlite_cli: Cli, tmp_path: Path) -> None:
    """--what-if KEY=VALUE adds the other profile's chart; an unknown key, a bad value or an
    unwritable output is a one-line usage error (exit 2)."""
    session_id, _ = sqlite_cli.demo()
    page = tmp_path / "what-if.html"

    sqlite_cli.ok("report", session_id, "-o", page, "--what-if", "max_context_tokens=600",
                  "--what-if", "max-history-messages=1")
    unknown = sqlite_cli.run("report", session_id, "-o", page, "--what-if", "budget=1")
    bad = sqlite_cli.run("report", session_id, "-o", page, "--what-if", "max_context_tokens=-1")
    unwritable = sqlite_cli.run("report", session_id, "-o", tmp_path / "missing" / "r.html")

    text = page.read_text(encoding="utf-8")
    assert 2 == text.count('<svg class="chart"')
    assert "max_context_tokens 2400 → 600, max_history_messages 4 → 1" in text
    for result, reason in ((unknown, "budget=1"), (bad, "max_context_tokens"),
                           (unwritable, "cannot write the report")):
        assert 2 == result.returncode, describe(result)
        assert reason in result.stderr, describe(result)
        assert 1 == len(result.stderr.splitlines()), describe(result)
