"""Issue 37 point 3: the window for the next model call and overflow recovery, over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID, uuid4

import pytest

import turnledger as tl
from tests.backends import ALL_BACKENDS, fresh_target
from tests.extras import need
from tests.server.live import serving


@pytest.fixture(params=ALL_BACKENDS)
def small_window(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A server whose conversations start with a 600-token budget on a 2,000-token model."""
    need("starlette")
    from turnledger.server.app import Settings, create_app

    settings_of = {"profile": tl.RuntimeProfile(max_context_tokens=600),
                   "providers": (tl.ProviderProfile("p", "m", context_window=2000),)}
    with fresh_target(request.param, tmp_path) as target, tl.open_store(target.url) as store:
        app = create_app(store, Settings(store_url=target.url, **settings_of))
        with serving(app) as url:
            yield url


def _turns(n: int) -> list[dict[str, str]]:
    return [item for i in range(n) for item in (
        {"role": "user", "content": f"question {i} " + "word " * 60},
        {"role": "assistant", "content": f"answer {i} " + "word " * 60})]


def test_i37_p3_window_trims_whole_turns_and_reports_both_numbers(small_window: str) -> None:
    """R7, R18, R19, R32: the window keeps the newest whole turns after the breadcrumb, says
    the estimate and the model's window, carries the body, and names the HistoryTrimmed; the
    items list still holds every item (the record)."""
    import httpx

    conversation = httpx.post(small_window + "/v1/conversations", json={}).json()["id"]
    base = f"{small_window}/v1/conversations/{conversation}"
    for start in range(0, 20, 10):
        assert 200 == httpx.post(base + "/items",
                                 json={"items": _turns(10)[start:start + 10]}).status_code
    window = httpx.post(base + "/window", json={"api": "openai_chat",
                                                "include": ["items", "events"]}).json()
    capacity = window["capacity"]
    assert 2000 == capacity["model_context_window"]
    assert 0 < capacity["estimated_tokens"] <= 600
    assert tl.BREADCRUMB_TEXT == window["items"][0]["content"]
    assert window["items"][-1]["content"][0]["text"].startswith("answer 9 ")
    assert ["user", "assistant"] == [m["role"] for m in window["body"][-2:]]
    assert "answer 9 " in str(window["body"][-1]["content"])
    assert 1 == len(window["history_trimmed"])
    assert "token_budget" == window["history_trimmed"][0]["reason"]
    notice = window["history_trimmed"][0]  # issue 35: what the trim did to the context
    assert 600 == notice["budget"]
    assert notice["tokens_after"] <= 600 < notice["tokens_before"]
    assert ["HistoryTrimmed", "RequestPrepared"] == [e["type"] for e in window["events"]][-2:]
    listed = httpx.get(base + "/items", params={"limit": 100}).json()["data"]
    assert 20 == len(listed)


def test_i37_p3_a_refused_window_says_why_and_overflow_recovery_trims(small_window: str) -> None:
    """R18: unanswered tool calls refuse the window (400, code); R25: a provider's overflow
    error recovers by trimming, recorded."""
    import httpx

    conversation = httpx.post(small_window + "/v1/conversations",
                              json={"items": _turns(4)}).json()["id"]
    base = f"{small_window}/v1/conversations/{conversation}"
    # Added to the server's open session: a session restored after the call would have swept
    # it from the views (R36, E5) and prepared the request without it.
    httpx.post(base + "/items", json={"items": [
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]})
    refused = httpx.post(base + "/window", json={})
    assert (400, "unanswered_tool_calls") == (refused.status_code,
                                              refused.json()["error"]["code"])
    httpx.post(base + "/items", json={"items": [
        {"type": "function_call_output", "call_id": "c", "output": "ok"}]})
    recovered = httpx.post(base + "/overflow", json={
        "error": "This model's maximum context length is 2000 tokens."}).json()
    assert recovered["recovered"] is True
    assert "OverflowRecovered" in [e["type"] for e in recovered["events"]]
    timeline = httpx.get(base + "/timeline").json()["data"]
    assert "OverflowReported" in [e["type"] for e in timeline]
    assert httpx.get(base + "/verify").json()["ok"] is True
    assert "<html" in httpx.get(base + "/report").text.lower()


def test_i37_p3_a_window_for_an_unknown_api_is_refused_before_anything_is_recorded(
    small_window: str,
) -> None:
    """A bad ``api`` is a 400 naming the parameter, and the conversation's log is as it was:
    before, the trims of the request were recorded first, then the request refused."""
    import httpx

    base = small_window + "/v1/conversations"
    made = httpx.post(base, json={"items": _turns(8)}).json()["id"]
    before = httpx.get(f"{base}/{made}/timeline").json()
    refused = httpx.post(f"{base}/{made}/window", json={"api": "cohere"})
    assert 400 == refused.status_code
    assert "api" == refused.json()["error"]["param"]
    assert before == httpx.get(f"{base}/{made}/timeline").json()


def test_i37_p3_a_window_answers_items_and_events_only_when_asked(small_window: str) -> None:
    """The default answer is what a runtime sends (body, capacity, trims); ``include`` adds the
    kept items and every recorded event; an unknown ``include`` is a 400 naming it, before
    anything is recorded."""
    import httpx

    base = small_window + "/v1/conversations"
    made = httpx.post(base, json={"items": _turns(2)}).json()["id"]
    plain = httpx.post(f"{base}/{made}/window", json={}).json()
    assert {"object", "conversation_id", "capacity", "body", "prompt_cache_key",
            "request_digest", "history_trimmed"} == set(plain)
    assert [] == plain["history_trimmed"]
    asked = httpx.post(f"{base}/{made}/window", json={"include": ["items"]}).json()
    assert ["user", "assistant"] * 2 == [i["role"] for i in asked["items"]]
    assert "events" not in asked
    before = httpx.get(f"{base}/{made}/timeline").json()
    refused = httpx.post(f"{base}/{made}/window", json={"include": ["items", "secrets"]})
    assert (400, "include") == (refused.status_code, refused.json()["error"]["param"])
    assert "secrets" in refused.json()["error"]["message"]
    assert before == httpx.get(f"{base}/{made}/timeline").json()


def test_i37_p3_a_window_records_new_items_first_in_one_request(small_window: str) -> None:
    """``items`` on a window: appended as items.create would (ids given back in
    ``added_items``), then the window prepared from them; an invalid item refuses the whole
    request before anything is recorded; a window refused after the append says the items
    were recorded."""
    import httpx

    base = small_window + "/v1/conversations"
    made = httpx.post(base, json={}).json()["id"]
    window = httpx.post(f"{base}/{made}/window", json={"items": _turns(1),
                                                       "include": ["items"]}).json()
    assert 2 == len(window["added_items"])
    assert [i["id"] for i in window["added_items"]] == [
        i["id"] for i in httpx.get(f"{base}/{made}/items",
                                   params={"order": "asc"}).json()["data"]]
    assert "answer 0 " in window["items"][-1]["content"][0]["text"]
    before = httpx.get(f"{base}/{made}/timeline").json()
    bad = httpx.post(f"{base}/{made}/window",
                     json={"items": [{"role": "user", "content": "ok"}, 7]})
    assert (400, "items[1]") == (bad.status_code, bad.json()["error"]["param"])
    assert before == httpx.get(f"{base}/{made}/timeline").json()
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    refused = httpx.post(f"{base}/{made}/window", json={"items": [call]})
    assert (400, "unanswered_tool_calls") == (refused.status_code,
                                              refused.json()["error"]["code"])
    assert "1 items were recorded" in refused.json()["error"]["message"]
    listed = httpx.get(f"{base}/{made}/items", params={"order": "asc"}).json()["data"]
    assert "function_call" == listed[-1]["type"]


def test_i35_p3_usage_of_a_window_is_recorded_over_http(small_window: str) -> None:
    """A runtime in any language posts the provider's usage for the window it sent: by the
    window answer's request_digest, or the newest window by default; a usage of no known
    shape or a digest of no window is a 400 naming the parameter, with nothing recorded."""
    import httpx

    base = small_window + "/v1/conversations"
    made = httpx.post(base, json={"items": _turns(1)}).json()["id"]
    first = httpx.post(f"{base}/{made}/window", json={"api": "anthropic"}).json()
    httpx.post(f"{base}/{made}/items", json={"items": _turns(2)[2:]})
    second = httpx.post(f"{base}/{made}/window", json={}).json()
    anthropic = {"input_tokens": 12, "cache_read_input_tokens": 300,
                 "cache_creation_input_tokens": 40, "output_tokens": 25}
    by_digest = httpx.post(f"{base}/{made}/usage", json={
        "usage": anthropic, "request_digest": first["request_digest"]})
    assert 200 == by_digest.status_code
    event = by_digest.json()["event"]
    assert ("UsageRecorded", first["request_digest"], 352, 300, 40, 25) == (
        event["type"], event["digest"], event["input_tokens"], event["cache_read_tokens"],
        event["cache_write_tokens"], event["output_tokens"])
    assert first["capacity"]["estimated_tokens"] == event["estimated_tokens"]
    newest = httpx.post(f"{base}/{made}/usage", json={"usage": {
        "input_tokens": 400, "output_tokens": 9,
        "input_tokens_details": {"cached_tokens": 256}}}).json()["event"]
    assert (second["request_digest"], "openai-responses") == (newest["digest"], newest["api"])
    before = httpx.get(f"{base}/{made}/timeline").json()
    for body, param in (({"usage": {"tokens": 3}}, "usage"), ({}, "usage"),
                        ({"usage": anthropic, "request_digest": "0" * 64}, "request_digest"),
                        ({"usage": anthropic, "request_digest": 5}, "request_digest")):
        refused = httpx.post(f"{base}/{made}/usage", json=body)
        assert (400, param) == (refused.status_code, refused.json()["error"]["param"]), body
    assert before == httpx.get(f"{base}/{made}/timeline").json()



def test_i37_every_answer_says_an_event_time_as_the_stream_does(small_window: str) -> None:
    """The window's events, /timeline and the event stream (the timeline's JSON) give an
    event's time in one form, ISO 8601 in UTC with microseconds even when they are 0 (Python's
    plain isoformat drops them), so a dashboard matches an event it streamed with one it read."""
    import httpx

    from turnledger.domain.events import HistoryTrimmed, TrimReason
    from turnledger.replay.timeline import timeline
    from turnledger.server.conversations import event_json

    on_the_second = HistoryTrimmed(UUID(int=1), 3, datetime(2026, 12, 5, 12, 0, tzinfo=UTC),
                                   2, 1, TrimReason.TOKEN_BUDGET)
    streamed = timeline([on_the_second])[0].to_jsonable()["timestamp"]
    assert "2026-12-05T12:00:00.000000+00:00" == streamed == event_json(on_the_second)[
        "timestamp"]
    base = small_window + "/v1/conversations"
    made = httpx.post(base, json={"items": _turns(8)}).json()["id"]
    window = httpx.post(f"{base}/{made}/window", json={"include": ["events"]}).json()
    listed = httpx.get(f"{base}/{made}/timeline").json()["data"]
    by_position = {entry["position"]: entry["timestamp"] for entry in listed}
    assert window["events"]
    for event in window["events"]:
        assert by_position[event["position"]] == event["timestamp"]


@pytest.fixture(params=ALL_BACKENDS)
def served_store(request: pytest.FixtureRequest,
                 tmp_path: Path) -> Iterator[tuple[str, tl.Store, dict[str, object]]]:
    """A live server like `small_window`'s, with its store and settings for the test to read."""
    need("starlette")
    from turnledger.server.app import Settings, create_app

    settings_of: dict[str, object] = {
        "profile": tl.RuntimeProfile(max_context_tokens=600),
        "providers": (tl.ProviderProfile("p", "m", context_window=2000),)}
    with fresh_target(request.param, tmp_path) as target, tl.open_store(target.url) as store:
        app = create_app(store, Settings(store_url=target.url, **settings_of))  # type: ignore[arg-type]
        with serving(app) as url:
            yield url, store, settings_of


def test_i37_a_window_answer_is_byte_for_byte_what_the_same_calls_give_in_process(
    served_store: tuple[str, tl.Store, dict[str, object]],
) -> None:
    """The one-request window (items + window), turn after turn through trims, with tools,
    each body API and each include: its bytes are the compact UTF-8 JSON of the answer the
    same calls make in process (a twin session: body, capacity, digest), with the trims and
    events the server's own log holds for that request. Holds the server's encoding and
    content exactly while its hot path is made cheaper."""
    import httpx

    from turnledger.domain.cache import prompt_cache_key
    from turnledger.events import HistoryTrimmed
    from turnledger.providers import from_openai_responses, to_openai_responses
    from turnledger.server.conversations import event_json
    from turnledger.server.ids import session_id

    url, store, settings_of = served_store
    tool = {"type": "function", "name": "look", "description": "Looks — ✓ up",
            "parameters": {"type": "object", "properties": {}}}
    twin_store = tl.open_store(f"memory://twin-{uuid4().hex}")
    twin = twin_store.import_conversation([], settings_of["profile"],  # type: ignore[arg-type]
                                          settings_of["providers"])  # type: ignore[arg-type]
    base = url + "/v1/conversations"
    with httpx.Client(timeout=30) as http:
        made = http.post(base, json={}).json()["id"]
        seen = store.events_of(session_id(made))[-1].originator_version
        trimmed = 0
        for turn in range(14):
            items = [{"type": "message", "role": "user", "id": f"msg_u{turn}",
                      "status": "completed", "content": [{"type": "input_text",
                      "text": f"question {turn} — café ✓ \u2028 " + "word " * 30}]},
                     {"type": "message", "role": "assistant", "id": f"msg_a{turn}",
                      "status": "completed", "content": [{"type": "output_text",
                      "annotations": [], "text": f"answer {turn} " + "word " * 40}]}]
            api = ("openai_responses", "openai_chat", "anthropic")[turn % 3]
            include = [["items", "events"], [], ["events"], ["items"]][turn % 4]
            tools = [tool] if turn % 2 else []
            answer = http.post(f"{base}/{made}/window", json={
                "items": items, "api": api, "include": include, "tools": tools})
            extended = twin.extend([m for item in items for m in from_openai_responses([item])])
            prepared = twin.prepare_request(tools=tools)
            logged = store.events_of(session_id(made))
            # What the window's prepare recorded: after this request's appends (and the
            # trims the appends made, R27a).
            caused = [e for e in logged if e.originator_version > seen][len(extended):]
            seen = logged[-1].originator_version
            expected: dict[str, object] = {
                "object": "conversation.window", "conversation_id": made,
                "capacity": {"fits": True, "estimated_tokens": prepared.estimated_tokens,
                             "model_context_window": prepared.model_context_window,
                             "budget": prepared.budget, "window": prepared.window},
                "body": {"openai_responses": prepared.to_openai_responses,
                         "openai_chat": prepared.to_openai_chat,
                         "anthropic": prepared.to_anthropic}[api](),
                "prompt_cache_key": prompt_cache_key(session_id(made)),
                "request_digest": prepared.digest,
                "history_trimmed": [event_json(e) for e in caused
                                    if isinstance(e, HistoryTrimmed)],
                "added_items": items}
            if "items" in include:
                expected["items"] = to_openai_responses(prepared.messages)
            if "events" in include:
                expected["events"] = [event_json(e) for e in caused]
            assert 200 == answer.status_code, answer.text
            assert json.dumps(expected, ensure_ascii=False, allow_nan=False,
                              separators=(",", ":")).encode() == answer.content, turn
            assert ("application/json", str(len(answer.content))) == (
                answer.headers["content-type"], answer.headers["content-length"])
            trimmed += bool(expected["history_trimmed"])
    assert trimmed > 1  # the trims' answers were held too, not only the plain ones
    twin_store.close()


@pytest.fixture(params=ALL_BACKENDS)
def two_replicas(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two servers (two apps, each with its own sessions and item folds) on one store."""
    need("starlette")
    from turnledger.server.app import Settings, create_app
    from turnledger.server.registry import Registry

    with fresh_target(request.param, tmp_path) as target, tl.open_store(target.url) as store:
        registry = Registry.beside(store)
        try:
            first = create_app(store, Settings(store_url=target.url, registry=registry))
            second = create_app(store, Settings(store_url=target.url, registry=registry))
            with serving(first) as one, serving(second) as other:
                yield one, other
        finally:
            registry.close()


def test_i37_a_window_checks_item_ids_against_its_own_writes_and_another_replicas(
    two_replicas: tuple[str, str],
) -> None:
    """A window's items are checked for ids the conversation holds: those the same server
    just wrote (taken from its own write, not read back) and those another replica wrote
    since (refused, 400 duplicate_item_id); the items list shows each item once, in order."""
    import httpx

    one, other = (url + "/v1/conversations" for url in two_replicas)
    made = httpx.post(one, json={}).json()["id"]

    def item(n: int) -> dict[str, object]:
        return {"type": "message", "role": "user", "id": f"msg_{n}", "content": f"q{n}"}

    def window(base: str, *items: dict[str, object]) -> httpx.Response:
        return httpx.post(f"{base}/{made}/window", json={"items": list(items)})

    assert 200 == window(one, item(0)).status_code
    assert 200 == window(one, item(1)).status_code
    again = window(one, item(1))
    assert (400, "duplicate_item_id") == (again.status_code, again.json()["error"]["code"])
    assert 200 == httpx.post(f"{other}/{made}/items", json={"items": [item(2)]}).status_code
    theirs = window(one, item(2))
    assert (400, "duplicate_item_id") == (theirs.status_code, theirs.json()["error"]["code"])
    assert 200 == window(one, item(3)).status_code
    assert 200 == window(other, item(4)).status_code
    mine = window(other, item(3))
    assert (400, "duplicate_item_id") == (mine.status_code, mine.json()["error"]["code"])
    for base in (one, other):
        listed = httpx.get(f"{base}/{made}/items", params={"order": "asc"}).json()["data"]
        assert [f"msg_{n}" for n in range(5)] == [i["id"] for i in listed]
