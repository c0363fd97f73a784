"""Issue 38 point 2: the live dashboard `turnledger serve` answers at ``/``, in a real headless
Chromium driven over the DevTools protocol (`tests.browser.devtools`)."""

from __future__ import annotations

import base64
import json
import statistics
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import turnledger as tl
from tests.browser import DevTools, chromium, devtools
from tests.extras import need
from tests.server.live import serving
from tests.tcp_proxy import commit_cutting_proxy

VIEWPORT = (1280, 900)
USAGE = {
    "prompt_tokens": 500,
    "completion_tokens": 20,
    "prompt_tokens_details": {"cached_tokens": 300},
}

# Resolves with true once ``selector`` matches in the page (false after 20 s): sent before a
# write, so its answer arrives at the test no earlier than the element appears.
APPEARS = """new Promise((resolve) => {
  const found = () => document.querySelector(%s) !== null;
  if (found()) { resolve(true); return; }
  const watch = new MutationObserver(() => {
    if (found()) { watch.disconnect(); resolve(true); }
  });
  watch.observe(document.body, {subtree: true, childList: true, attributes: true});
  setTimeout(() => { watch.disconnect(); resolve(false); }, 20000);
})"""


@pytest.fixture
def small_window(tmp_path: Path) -> Iterator[tuple[str, tl.Store]]:
    """A live server on a SQLite store whose conversations start with a 600-token budget on a
    2,000-token model; yields its URL and the store."""
    need("starlette")
    from turnledger.server.app import Settings, create_app

    url = f"sqlite:///{tmp_path}/store.db"
    with tl.open_store(url) as store:
        app = create_app(
            store,
            Settings(
                store_url=url,
                profile=tl.RuntimeProfile(max_context_tokens=600),
                providers=(tl.ProviderProfile("p", "m", context_window=2000),),
            ),
        )
        with serving(app) as base:
            yield base, store


def _turns(first: int, count: int) -> list[dict[str, str]]:
    return [
        item
        for i in range(first, first + count)
        for item in (
            {"role": "user", "content": f"question {i} " + "word " * 60},
            {"role": "assistant", "content": f"answer {i} " + "word " * 60},
        )
    ]


def _timed(page: DevTools, selector: str, write: Any) -> tuple[Any, float]:
    """``write()``'s answer and the seconds from its acknowledgement to ``selector`` showing."""
    watch = page.send(
        "Runtime.evaluate",
        {"expression": APPEARS % json.dumps(selector), "awaitPromise": True, "returnByValue": True},
    )
    answer = write()
    acknowledged = time.monotonic()
    assert 200 == answer.status_code, answer.text
    assert page.value(page.result(watch, 30)) is True, f"{selector} never appeared"
    return answer, page.answered_at(watch) - acknowledged


def _text(page: DevTools, selector: str) -> str:
    value = page.evaluate(f"document.querySelector({json.dumps(selector)})?.textContent")
    assert isinstance(value, str), f"nothing matches {selector}"
    return " ".join(value.split())


def _open(page: DevTools, url: str, state: str = "live") -> None:
    for domain in ("Network", "Log", "Runtime", "Page"):
        page.call(f"{domain}.enable")
    page.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": VIEWPORT[0], "height": VIEWPORT[1], "deviceScaleFactor": 1, "mobile": False},
    )
    page.call("Emulation.setFocusEmulationEnabled", {"enabled": True})
    page.call("Page.navigate", {"url": url})
    page.wait_for(f"document.querySelector('#status')?.dataset.state === '{state}'")


def test_i38_p2_the_dashboard_shows_each_decision_live_within_a_second(
    small_window: tuple[str, tl.Store], tmp_path: Path
) -> None:
    """The page at ``/`` follows the store-wide stream in Chromium: a trim, a usage and a pop
    written over HTTP appear in its DOM; each session shows its gauge, counts (cache breaks
    by the rule of turnledger/replay/cache_breaks.py, compared with it), cache hit rate and
    report link, in the screenshot's frame; Tab reaches a session with a visible focus; no
    request leaves the server's origin; after a cut, the page resumes with Last-Event-ID and
    receives each event once.

    How "within a second" is measured: from the moment the write's HTTP answer reached the
    test to the moment the test received the page's answer to a MutationObserver promise sent
    before the write, both on the test's monotonic clock. That covers all a person waits for —
    the server's follower poll, the stream, the page's parse and its next frame — and adds the
    DevTools answer's own trip, so it can only overstate. The page's clock from frame receipt
    would leave out the server's part, which is most of it. Three writes are measured and the
    median must be ≤ 1 s (one scheduling stall on a shared 2-core runner must not decide it);
    each must be ≤ 3 s.
    """
    import httpx

    from turnledger.replay.cache_breaks import cache_breaks
    from turnledger.server.ids import session_id

    base, store = small_window
    program = chromium()
    with (
        commit_cutting_proxy("127.0.0.1", int(base.rsplit(":", 1)[1])) as proxy,
        devtools(program, tmp_path, VIEWPORT) as page,
    ):
        origin = f"http://127.0.0.1:{proxy.port}"
        _open(page, origin + "/")
        assert "No session has recorded a decision yet." in _text(page, "#empty")

        first = httpx.post(base + "/v1/conversations", json={"items": _turns(0, 3)}).json()["id"]
        one = f"{base}/v1/conversations/{first}"
        assert 200 == httpx.post(one + "/window", json={}).status_code
        card = f'[data-conversation="{first}"]'
        latencies = []
        window, seconds = _timed(
            page,
            f'{card} li[data-type="TrimDecided"]',
            lambda: httpx.post(one + "/window", json={"items": _turns(3, 7)}),
        )
        latencies.append(seconds)
        _, seconds = _timed(
            page,
            f'{card} li[data-type="UsageRecorded"]',
            lambda: httpx.post(one + "/usage", json={"usage": USAGE}),
        )
        latencies.append(seconds)
        newest = httpx.get(one + "/items", params={"limit": 1}).json()["data"][0]["id"]
        _, seconds = _timed(
            page,
            f'{card} li[data-type="MessagePopped"]',
            lambda: httpx.delete(f"{one}/items/{newest}"),
        )
        latencies.append(seconds)
        last = httpx.post(one + "/window", json={}).json()
        second = httpx.post(base + "/v1/conversations", json={"items": _turns(0, 1)}).json()["id"]
        page.wait_for(f"""document.querySelector('{card} [data-count="requests"]')
                          ?.textContent === '3'
                          && document.querySelector('[data-conversation="{second}"]') !== null""")
        print("seconds from acknowledgement to the page:", latencies)
        assert statistics.median(latencies) <= 1.0, latencies
        assert max(latencies) <= 3.0, latencies

        # What each session shows; the cache breaks as the replay module finds them.
        breaks = cache_breaks(store.events_of(session_id(first)))
        assert ["trim", "pop"] == [b.cause for b in breaks]
        counts = {
            name: _text(page, f'{card} [data-count="{name}"]')
            for name in ("requests", "trims", "summaries", "clearings", "breaks")
        }
        assert {
            "requests": "3",
            "trims": "1",
            "summaries": "0",
            "clearings": "0",
            "breaks": str(len(breaks)),
        } == counts
        assert (
            f"Latest cache break: the request at position {breaks[-1].position}, after a "
            f"pop at position {breaks[-1].cause_position}"
        ) == _text(page, f"{card} .latest-break")
        assert window.json()["history_trimmed"]
        tokens = last["capacity"]["estimated_tokens"]
        share = round(100 * tokens / 600)
        assert (
            f"{tokens} tokens, {share} % of the 600-token budget (the mark) · model window 2,000"
            == _text(page, f"{card} .gauge-text")
        )
        assert f"{100 * tokens / 2000}%" == page.evaluate(
            f"document.querySelector('{card} .fill').style.width"
        )
        assert (
            "Cache hit rate 60 %: 300 of 500 input tokens read from the provider's cache "
            "(1 usage recorded)"
        ) == _text(page, f"{card} .hit-rate")
        report = page.evaluate(f"document.querySelector('{card} a.report').href")
        assert f"{origin}/v1/conversations/{first}/report" == report
        assert "text/html" in httpx.get(report).headers["content-type"]
        assert "no request yet · budget 600 · model window 2,000" == _text(
            page, f'[data-conversation="{second}"] .gauge-text'
        )
        assert "2 sessions" in _text(page, "#totals")

        # The screenshot: the required elements are drawn inside its frame.
        shot = page.call("Page.captureScreenshot", {"format": "png"})
        png = base64.b64decode(shot["data"])
        (tmp_path / "dashboard.png").write_bytes(png)
        assert b"\x89PNG\r\n\x1a\n" == png[:8]
        assert VIEWPORT == struct.unpack("!II", png[16:24])
        for part in (
            ".gauge .bar",
            ".gauge-text",
            ".counts",
            ".hit-rate",
            ".latest-break",
            "a.report",
            '.events li[data-type="MessagePopped"]',
        ):
            box = page.evaluate(f"""(() => {{
                const r = document.querySelector('{card} {part}').getBoundingClientRect();
                return [r.left, r.top, r.right, r.bottom]; }})()""")
            left, top, right, bottom = box
            assert 0 <= left < right <= VIEWPORT[0], (part, box)
            assert 0 <= top < bottom <= VIEWPORT[1], (part, box)

        # The keyboard: Tab reaches the newest session's button, with a visible focus ring;
        # then its report link, then the older session, whose list Enter folds.
        page.press("Tab", 9)
        focused = page.evaluate("""[document.activeElement.className,
            document.activeElement.closest('.session')?.dataset.conversation,
            getComputedStyle(document.activeElement).outlineStyle,
            getComputedStyle(document.activeElement).outlineWidth]""")
        assert ["toggle", second, "solid", "3px"] == focused
        page.press("Tab", 9)
        assert ["report", second] == page.evaluate(
            "[document.activeElement.className, "
            "document.activeElement.closest('.session').dataset.conversation]"
        )
        page.press("Tab", 9)
        page.press("Enter", 13, "\r")
        assert ["false", True] == page.evaluate(f"""[
            document.querySelector('{card} .toggle').getAttribute('aria-expanded'),
            document.querySelector('{card} .events').hidden]""")

        # A drop: the page resumes from the last event it got, and gets each event once.
        proxy.black_out(0.3)
        page.wait_for("document.querySelector('#status').dataset.state === 'retrying'")
        assert 200 == httpx.post(one + "/usage", json={"usage": USAGE}).status_code
        page.wait_for(f"""document.querySelector('{card} .hit-rate').textContent.includes(
                          '2 usages')""")
        assert (
            "Cache hit rate 60 %: 600 of 1,000 input tokens read from the provider's "
            "cache (2 usages recorded)"
        ) == _text(page, f"{card} .hit-rate")
        assert "3" == _text(page, f'{card} [data-count="requests"]')
        streams = [
            r["request"]
            for r in page.events("Network.requestWillBeSent")
            if r["request"]["url"] == origin + "/v1/events"
        ]
        resumed = [r["headers"].get("Last-Event-ID") for r in streams]
        assert "0-0" == resumed[0]
        assert len(resumed) >= 2
        assert all(text is not None and text != "0-0" for text in resumed[1:]), resumed

        # Nothing left the origin; no policy violation, no script error.
        requested = [r["request"]["url"] for r in page.events("Network.requestWillBeSent")]
        assert [] == [u for u in requested if not u.startswith(origin + "/")]
        assert origin + "/" in requested
        assert [] == [
            e
            for e in page.events("Log.entryAdded")
            if e["entry"]["source"] in ("security", "javascript")
        ]
        assert [] == page.events("Runtime.exceptionThrown")


def test_i38_p2_the_page_is_served_with_its_policy_and_without_a_key(tmp_path: Path) -> None:
    """``GET /`` answers the page with a Content-Security-Policy that allows only its own
    inline script and style (by hash) and connections to its origin; with keys required, the
    page is served without one (it holds no data) while the stream it reads still needs one."""
    need("starlette")
    import httpx

    from turnledger.server.app import Settings, create_app
    from turnledger.server.dashboard import page
    from turnledger.server.registry import Registry

    url = f"sqlite:///{tmp_path}/store.db"
    body, policy = page()
    with tl.open_store(url) as store:
        registry = Registry.beside(store)
        app = create_app(store, Settings(store_url=url, require_keys=True, registry=registry))
        with serving(app) as base:
            answer = httpx.get(base + "/")
            assert 200 == answer.status_code
            assert body == answer.content
            assert policy == answer.headers["content-security-policy"]
            assert 401 == httpx.get(base + "/v1/events").status_code
        registry.close()
    directives = dict(part.split(" ", 1) for part in policy.split("; "))
    assert "'none'" == directives["default-src"]
    assert "'self'" == directives["connect-src"]
    for tag in ("script", "style"):
        (source,) = directives[f"{tag}-src"].split()
        assert source.startswith("'sha256-"), source
    assert b"http://" not in body
    assert b"https://" not in body


def test_i38_p2_with_keys_the_page_asks_for_one_and_shows_its_tenants_sessions(
    tmp_path: Path,
) -> None:
    """With keys required the page loads without one and asks for a key (again after a refused
    one); it sends the key as a bearer header on the stream, keeps it in the tab's
    sessionStorage only, and shows the sessions of the key's tenant, no other."""
    need("starlette")
    import httpx

    from turnledger.server.app import Settings, create_app
    from turnledger.server.registry import Registry

    url = f"sqlite:///{tmp_path}/store.db"
    with tl.open_store(url) as store:
        registry = Registry.beside(store)
        (_, alice), (_, bob) = registry.create_key("alice"), registry.create_key("bob")
        app = create_app(store, Settings(store_url=url, require_keys=True, registry=registry))
        with serving(app) as base, devtools(chromium(), tmp_path, VIEWPORT) as page:
            _open(page, base + "/", state="key")
            page.call("Input.insertText", {"text": "sk-not-a-key"})
            page.press("Enter", 13, "\r")
            page.wait_for(
                "document.querySelector('#key-form label').textContent"
                ".startsWith('That key was refused')"
            )
            page.wait_for("document.activeElement === document.querySelector('#key')")
            page.call("Input.insertText", {"text": alice})
            page.press("Enter", 13, "\r")
            page.wait_for("document.querySelector('#status').dataset.state === 'live'")

            def create(secret: str) -> str:
                answer = httpx.post(
                    base + "/v1/conversations",
                    json={},
                    headers={"Authorization": f"Bearer {secret}"},
                )
                assert 200 == answer.status_code, answer.text
                return str(answer.json()["id"])

            first, others, last = create(alice), create(bob), create(alice)
            page.wait_for(f"document.querySelector('[data-conversation=\"{last}\"]') !== null")
            shown = page.evaluate(
                "[...document.querySelectorAll('.session')]"
                ".map((card) => card.dataset.conversation)"
            )
            assert [last, first] == shown
            assert others not in shown
            assert alice == page.evaluate("sessionStorage.getItem('turnledger.dashboard.key')")
            streams = [
                r["request"]["headers"]
                for r in page.events("Network.requestWillBeSent")
                if r["request"]["url"] == base + "/v1/events"
            ]
            assert [None, "Bearer sk-not-a-key", f"Bearer {alice}"] == [
                h.get("Authorization") for h in streams
            ]
            assert all(
                r["request"]["url"].startswith(base + "/")
                for r in page.events("Network.requestWillBeSent")
            )
        registry.close()


def test_i38_p2_the_page_finds_each_cache_break_the_replay_module_finds(
    tmp_path: Path,
) -> None:
    """The page's live fold gives every cache break `turnledger.replay.cache_breaks` reads
    from the log, with its cause and positions, request after request, for a session written
    by a script on the server's store (not through the API): trims, summaries, a route switch,
    a pop and a clear."""
    need("starlette")
    from turnledger.events import RequestPrepared, TrimDecided, TurnsSummarized
    from turnledger.replay.cache_breaks import cache_breaks
    from turnledger.server.app import Settings, create_app
    from turnledger.server.ids import conversation_id

    url = f"sqlite:///{tmp_path}/store.db"
    providers = (
        tl.ProviderProfile("p", "small", context_window=2000),
        tl.ProviderProfile("q", "large", context_window=8000),
    )
    with tl.open_store(url) as store:
        app = create_app(store, Settings(store_url=url))
        with serving(app) as base, devtools(chromium(), tmp_path, VIEWPORT) as page:
            _open(page, base + "/")
            session = store.start_session(
                profile=tl.RuntimeProfile(max_context_tokens=300), providers=providers
            )
            session.summarizer = tl.Summarizer("short", lambda turns, previous: "earlier work")
            card = f'[data-conversation="{conversation_id(session.id)}"]'
            shown = []
            for step in range(8):
                session.extend(
                    [
                        tl.ChatMessage.user(f"question {step} " + "word " * 40),
                        tl.ChatMessage.assistant(f"answer {step} " + "word " * 40),
                    ]
                )
                if step == 3:
                    session.select_route(tl.Route("q", "large"))
                if step == 5:
                    session.pop()
                if step == 6:
                    session.clear()
                    session.append(tl.ChatMessage.user("start again"))
                session.prepare_request()
                page.wait_for(
                    f"document.querySelector('{card} [data-count=\"requests\"]')"
                    f"?.textContent === '{step + 1}'"
                )
                shown.append(_text(page, f"{card} .latest-break"))
            events = store.events_of(session.id)
            found = cache_breaks(events)
            assert {"trim", "route", "pop", "clear"} <= {b.cause for b in found}
            expected, latest = [], ""
            requests = [e.originator_version for e in events if isinstance(e, RequestPrepared)]
            for position in requests:
                for b in found:
                    if b.position == position:
                        latest = (
                            f"Latest cache break: the request at position {b.position}, "
                            f"after a {b.cause} at position {b.cause_position}"
                        )
                expected.append(latest)
            assert expected == shown
            summaries = sum(isinstance(e, TurnsSummarized) for e in events)
            assert summaries > 0
            counts = {
                name: _text(page, f'{card} [data-count="{name}"]')
                for name in ("trims", "summaries", "breaks")
            }
            assert {
                "trims": str(sum(isinstance(e, TrimDecided) for e in events)),
                "summaries": str(summaries),
                "breaks": str(len(found)),
            } == counts
