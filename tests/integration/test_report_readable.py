"""Issue 38 point 3: the report reads on long real sessions.

Each session of `tests.report_sessions` is reported (plainly, and with the what-if profile a
user would try on it), loaded in headless Chromium, and measured in the page: the text boxes
of each chart and strip that overlap another (goal 0), and the drawn elements that leave the
plot they belong to (goal 0: a request's point, a rejection's cross and the data lines inside
the plot rectangle; the decision markers, their labels and route switches inside its left
and right edges; everything inside its SVG). The page also never says ``None``, an imported
session gets a chart (its estimated context per turn), and the what-if side of a session that
recorded no request says its requests are simulated.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser import chromium, devtools
from tests.report_sessions import long_sessions
from turnledger import audit

VIEWPORT = (1400, 1000)

# In the page: per chart or strip, the pairs of visible text boxes that overlap (by more than
# a quarter pixel each way) and the elements outside their plot or their SVG.
MEASURE = """(() => {
  const visible = (el) => el.textContent.trim() !== '' && getComputedStyle(el).display !== 'none'
    && getComputedStyle(el).visibility !== 'hidden';
  const overlap = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0.25
    && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.25;
  const name = (el) => el.tagName + '.' + (el.getAttribute('class') || '') + ' "'
    + (el.textContent || '').trim().slice(0, 40) + '"';
  const out = {overlaps: [], outside: [], texts: 0, drawn: 0, charts: 0};
  for (const svg of document.querySelectorAll('svg.chart, svg.strip')) {
    out.charts += 1;
    const box = svg.getBoundingClientRect();
    const texts = [...svg.querySelectorAll('text')].filter(visible);
    const rects = texts.map((t) => t.getBoundingClientRect());
    out.texts += texts.length;
    for (let i = 0; i < texts.length; i++)
      for (let j = i + 1; j < texts.length; j++)
        if (overlap(rects[i], rects[j])) out.overlaps.push([name(texts[i]), name(texts[j])]);
    const within = (r, b, vertical) => r.left >= b.left - 0.5 && r.right <= b.right + 0.5
      && (!vertical || (r.top >= b.top - 0.5 && r.bottom <= b.bottom + 0.5));
    for (const el of svg.querySelectorAll('text, circle, path, rect, line, polyline, polygon')) {
      out.drawn += 1;
      if (!within(el.getBoundingClientRect(), box, true)) out.outside.push('svg: ' + name(el));
    }
    const plotEl = svg.querySelector('rect.plot');
    if (!plotEl) continue;
    const plot = plotEl.getBoundingClientRect();
    for (const el of svg.querySelectorAll(
        '.pt, .rejected, .tokens, .band, .budget, .window, .hit, .switch line, .estimated'))
      if (!within(el.getBoundingClientRect(), plot, true)) out.outside.push('plot: ' + name(el));
    for (const el of svg.querySelectorAll('.mark, .switch, .cache-break'))
      if (!within(el.getBoundingClientRect(), plot, false))
        out.outside.push('plot edges: ' + name(el));
  }
  out.none = [...document.querySelectorAll('body *')].filter((el) => [...el.childNodes].some(
    (n) => n.nodeType === 3 && /\\bNone\\b/.test(n.textContent))).map(name).slice(0, 5);
  return out;
})()"""


def measure(page: Any, path: Path) -> dict[str, Any]:
    """Load the report at ``path`` and measure it (`MEASURE`)."""
    page.call("Page.enable")
    page.call("Page.navigate", {"url": path.resolve().as_uri()})
    page.wait_for("document.readyState === 'complete' && !!document.querySelector('#totals')")
    result: dict[str, Any] = page.evaluate(MEASURE)
    return result


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every long session reported plainly and with its what-if, as files."""
    workdir = tmp_path_factory.mktemp("readable")
    written = {}
    for name, build in long_sessions(workdir).items():
        events, other = build()
        written[name] = workdir / f"{name}.html"
        audit.report(events, written[name])
        if other is not None:
            written[f"{name} what-if"] = workdir / f"{name}-what-if.html"
            audit.report(events, written[f"{name} what-if"], what_if=other)
    return written


def test_i38_p3_no_text_overlaps_and_nothing_leaves_its_plot(
    reports: dict[str, Path], tmp_path: Path
) -> None:
    """Issue 38 point 3: 0 overlapping text boxes and 0 elements outside their plot, in
    Chromium, over every long session's report and what-if report; no ``None`` in any."""
    measured = {}
    with devtools(chromium(), tmp_path, VIEWPORT) as page:
        for name, path in reports.items():
            measured[name] = measure(page, path)
    print(json.dumps({name: {k: (len(v) if isinstance(v, list) else v) for k, v in m.items()}
                      for name, m in measured.items()}, indent=1))
    assert all(m["charts"] >= 2 and m["texts"] > 10 for m in measured.values())
    assert {} == {name: m["overlaps"][:5] for name, m in measured.items() if m["overlaps"]}
    assert {} == {name: m["outside"][:5] for name, m in measured.items() if m["outside"]}
    assert {} == {name: m["none"] for name, m in measured.items() if m["none"]}


def test_i38_p3_an_imported_session_draws_its_estimated_context_per_turn(
    reports: dict[str, Path],
) -> None:
    """An imported session (no request recorded) draws one point per turn: the estimated
    tokens of everything recorded up to that turn's end, on a turn axis, said so."""
    page = reports["imported-fixtures"].read_text(encoding="utf-8")
    assert "no request was recorded in this session" in page
    points = re.findall(r'<circle class="estimated"[^>]*data-turn="(\d+)"', page)
    assert [str(n) for n in range(1, 301)] == points
    assert "turn number →" in page
    # A coding agent's short session is drawn at its own scale, the 32,000 budget said.
    codex = reports["imported-codex_rich"].read_text(encoding="utf-8")
    assert "token budget 32,000: above this scale" in codex
    assert 'class="budget"' not in codex


def test_i38_p3_what_if_of_an_imported_session_says_its_requests_are_simulated(
    reports: dict[str, Path],
) -> None:
    """The what-if report of a session that recorded no request labels both sides simulated,
    and says that no model window was declared for its route."""
    page = reports["imported-fixtures what-if"].read_text(encoding="utf-8")
    headings = re.findall(r"<h3>([^<]*)", page)
    assert len(headings) == 4  # two charts, two strips
    assert all("simulated" in h for h in headings)
    assert "recorded, with" not in page
    assert "300 turns · 0 requests · 0 decisions drawn" in page  # the log's, not the re-run's
    assert "no context window was declared" in page
