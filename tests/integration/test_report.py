"""`turnledger.audit.report`: one self-contained HTML file per session (issue 13).

The page must be inert whatever the store holds: every stored string is escaped (no tag, no
attribute, no link comes from content), the page has no script and fetches nothing. A session
just large enough to aggregate (`POINT_BUDGET` + 10 requests) must still show every trim and
every rejection, merged into counted markers, and Chromium must load it without one request
to the local server its messages point at.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

import turnledger as tl
from benchmarks.report import record_agent_session
from tests.browser import Element, chromium, dump_dom, elements, screenshot, serve
from turnledger import audit
from turnledger.domain.events import DomainEvent
from turnledger.events import OverflowUnrecoverable, SessionStarted
from turnledger.replay.report import POINT_BUDGET, TIMELINE_FULL

# What the report itself writes: anything else in a page came from content.
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "section", "h1", "h2", "h3",
    "p", "div", "span", "code", "table", "thead", "tbody", "tr", "th", "td", "ol", "li",
    "svg", "g", "a", "rect", "circle", "line", "path", "polyline", "polygon", "text",
}
TRIM_LANES = {"token_budget", "turn_limit", "overflow"}


def hostile_texts(port: int) -> tuple[str, ...]:
    """Messages that would inject markup or fetch from ``127.0.0.1:port`` if not escaped."""
    return (
        '<script>document.title="pwned"</script>',
        '"><img src=x onerror="document.title=1">',
        f'<img src="http://127.0.0.1:{port}/img.png">',
        f'<link rel="stylesheet" href="http://127.0.0.1:{port}/link.css">',
        f"<style>@import url(http://127.0.0.1:{port}/import.css);</style>",
        "</style></title></svg>]]><b onclick=x>bold</b>",
        f"[IMAGE:http://127.0.0.1:{port}/marker.png] &amp; \x1b[2J \u202e",
    )


def record(turns: int, hostile: Sequence[str]) -> list[DomainEvent]:
    """An agent session of ``turns`` turns on ``memory://`` (benchmarks.report), its events."""
    with tl.open_store("memory://") as store:
        session = record_agent_session(store, turns, hostile)
        return store.events_of(session.id)


def check_inert(page: str) -> list[Element]:
    """Assert that ``page`` holds only the report's own markup; return its elements."""
    found = elements(page)
    assert set() == {e.tag for e in found} - ALLOWED_TAGS
    assert [] == [(e.tag, name) for e in found for name in e.attrs if name.startswith("on")]
    assert [] == [e.attrs["href"] for e in found if "href" in e.attrs
                  and not re.fullmatch(r"#[ec]\d+", e.attrs["href"])]
    assert [] == [e.tag for e in found if "src" in e.attrs]
    return found


def marks(found: Sequence[Element], kinds: set[str]) -> Counter[int]:
    """Event position → count, over the markers of ``kinds`` (first chart only)."""
    counts: Counter[int] = Counter()
    charts = 0
    for element in found:
        if element.tag == "svg":
            charts += "chart" in element.classes
        if charts == 1 and element.tag == "g" and element.classes & kinds and (
            "mark" in element.classes or "rejected" in element.classes
        ):
            counts[int(element.attrs["data-event"])] += int(element.attrs["data-count"])
    return counts


def test_report_escapes_every_stored_string() -> None:
    """Hostile messages, tool names, provider and model names and errors become inert text."""
    texts = hostile_texts(8)
    name = '<img src=x onerror="alert(1)">'
    provider = tl.ProviderProfile(name, name, context_window=1_000)
    with tl.open_store("memory://") as store:
        session = store.start_session(profile=tl.RuntimeProfile(max_context_tokens=120),
                                      providers=[provider], route=tl.Route(name, name))
        for n, text in enumerate(texts):
            session.append(tl.ChatMessage.user(text))
            call = tl.ToolCall(f"{text}-{n}", name, "{}")
            session.append(tl.AssistantToolCalls(text, (call,)))
            session.append(tl.ToolResults((tl.ToolResult(call.id, text * 3, name),)))
            session.append(tl.ChatMessage.assistant(text))
            with contextlib.suppress(tl.ContextWindowExceeded):  # a rejection is drawn too
                session.prepare_request()
        session.recover_from_overflow(RuntimeError(texts[0]))
        events = store.events_of(session.id)

    for what_if in (None, tl.RuntimeProfile(max_context_tokens=60)):
        page = audit.report(events, what_if=what_if)

        check_inert(page)
        assert "&lt;script&gt;document.title=&quot;pwned&quot;&lt;/script&gt;" in page
        assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
        assert "\\x1b[2J" in page
        assert "\\u202e" in page


def test_report_is_deterministic_and_written_to_the_path(tmp_path: Path) -> None:
    """The same events give the same bytes (E12), returned and written to the given path."""
    events = record(12, ())
    path = tmp_path / "r.html"

    first = audit.report(events, path)

    assert first == audit.report(events)
    assert first == path.read_text(encoding="utf-8")


def test_report_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """The report holds conversation text: a new report file is created 0600, like the store's."""
    path = tmp_path / "private.html"

    audit.report(record(3, ()), path)

    assert 0o600 == path.stat().st_mode & 0o777


def test_report_rejects_events_that_are_not_a_session() -> None:
    """A report needs a session's events from its SessionStarted: else a TurnledgerError."""
    events = record(3, ())

    with pytest.raises(tl.TurnledgerError, match="SessionStarted"):
        audit.report(events[1:])


def test_hostile_session_in_chromium_fetches_nothing_and_runs_nothing(tmp_path: Path) -> None:
    """Messages pointing at a local server and carrying scripts: Chromium loads the report
    without one request to that server, and the DOM it builds holds the text, escaped."""
    program = chromium()
    with serve() as server:
        texts = hostile_texts(server.port)
        events = record(len(texts) + 3, texts)
        page_path = tmp_path / "hostile.html"
        audit.report(events, page_path, what_if=tl.RuntimeProfile(max_context_tokens=500))
        dom = dump_dom(program, page_path, tmp_path)
        assert [] == server.paths

    check_inert(page_path.read_text(encoding="utf-8"))
    check_inert(dom)
    # The scripts would have set the document title: it is still the report's own.
    assert re.search(r"<title>turnledger report: session [0-9a-f-]{36}</title>", dom)
    # Chromium serialises text nodes with <, > and & escaped (quotes as they are).
    assert '&lt;script&gt;document.title="pwned"&lt;/script&gt;' in dom
    assert f'&lt;img src="http://127.0.0.1:{server.port}/img.png"&gt;' in dom
    assert f"&lt;style&gt;@import url(http://127.0.0.1:{server.port}/import.css)" in dom


def test_large_session_report_aggregates_and_renders(tmp_path: Path) -> None:
    """A session just past the chart's point budget: counted markers for every trim and
    rejection, merged turns and collapsed timeline rows; Chromium renders it."""
    program = chromium()
    events = record(POINT_BUDGET + 10, ())
    page_path = tmp_path / "large.html"
    audit.report(events, page_path)
    dom = dump_dom(program, page_path, tmp_path)
    png = screenshot(program, page_path, tmp_path / "large.png")

    found = check_inert(page_path.read_text(encoding="utf-8"))
    trims = Counter(e.originator_version for e in events
                    if isinstance(e, tl.TrimDecided | OverflowUnrecoverable))
    rejected = Counter(e.originator_version for e in events if isinstance(e, tl.RequestRejected))
    assert len(events) > TIMELINE_FULL
    assert ["1"] == [e.attrs["data-aggregated"] for e in found if "chart" in e.classes]
    assert trims.total() == marks(found, TRIM_LANES).total()
    assert set(marks(found, TRIM_LANES)) <= set(trims)  # each marker names one of them
    assert rejected.total() == marks(found, {"rejected"}).total() > 0
    assert any(int(e.attrs.get("data-turns", "1")) > 1 for e in found if "turn" in e.classes)
    assert any("run" in e.classes for e in found if e.tag == "tr")
    dom_found = check_inert(dom)
    assert 1 == sum(e.tag == "svg" and "chart" in e.classes for e in dom_found)
    assert png.stat().st_size > 10_000


def test_what_if_side_by_side_draws_the_other_profile(tmp_path: Path) -> None:
    """With a what-if profile the page holds two charts and two strips on the same scales, the
    what-if chart's trims being those the replay decides."""
    events = record(40, ())
    started = events[0]
    assert isinstance(started, SessionStarted)
    smaller = attrs.evolve(started.profile, max_context_tokens=1_500)
    replayed = audit.what_if(events, smaller)

    page = audit.report(events, what_if=smaller)

    found = check_inert(page)
    charts = [e for e in found if e.tag == "svg" and "chart" in e.classes]
    strips = [e for e in found if e.tag == "svg" and "strip" in e.classes]
    assert (2, 2) == (len(charts), len(strips))
    scales = {(c.attrs["viewbox"], c.attrs["data-ymax"], c.attrs["data-requests"]) for c in charts}
    assert 1 == len(scales)  # the same scales side by side
    what_if_marks = page.split('class="chart"')[2]
    drawn = sum(int(n) for n in re.findall(
        r'<g class="mark (?:token_budget|turn_limit|overflow)" data-event="\d+" '
        r'data-count="(\d+)"', what_if_marks))
    assert replayed.what_if.trims == drawn


def test_i35_p3_the_report_says_each_cache_break_its_cause_and_the_bill() -> None:
    """Issue 35 point 3: section 5 counts the cache breaks by cause (the same as
    `cache_breaks` reads from the log), lists each with a link to its request and its cause,
    and gives the cache hit rate and the estimate against the bill from the recorded usage."""
    from turnledger.replay.cache_breaks import cache_breaks

    with tl.open_store("memory://") as store:
        session = store.start_session(tl.RuntimeProfile(max_context_tokens=400))
        for n in range(8):
            session.append(tl.ChatMessage.user(f"question {n} " + "why " * 40))
            request = session.prepare_request()
            session.record_usage({"input_tokens": 2 * request.estimated_tokens,
                                  "input_tokens_details": {"cached_tokens":
                                                           request.estimated_tokens},
                                  "output_tokens": 5}, request)
            session.append(tl.ChatMessage.assistant(f"answer {n} " + "because " * 40))
        events = session.events()
    page = audit.report(events)
    found = cache_breaks(events)
    assert len(found) >= 4
    section = page[page.index('<section id="cache">'):]
    assert (f'<td>recorded</td><td class="num">8</td><td class="num">{len(found)}</td>'
            f'<td>{len(found)} trim</td><td class="num">8</td><td class="num">50.0%</td>'
            '<td class="num">0.50</td>') in section
    first = found[0]
    # The request by its number (the chart's x), then its event position (issue 38).
    number = [e.originator_version for e in events
              if isinstance(e, tl.RequestPrepared)].index(first.position) + 1
    assert (f'<li><a href="#e{first.position}">request {number}</a> (event {first.position}): '
            f'trim at <a href="#e{first.cause_position}">event {first.cause_position}</a></li>'
            ) in section
    # The chart's cache lane draws the same breaks, one marker per request (issue 38).
    lane = re.findall(r'<g class="mark cache" data-event="(\d+)" data-count="(\d+)"', page)
    assert [b.position for b in found] == [int(v) for v, n in lane if n == "1"]
