"""The SSE stream mounted by `create_app` (issue 37 point 4): a decision taken through the
Conversations API's own endpoints reaches a subscriber of the conversation's stream."""

from __future__ import annotations

import json
from pathlib import Path

import turnledger as tl
from tests.extras import need
from tests.server.live import serving
from tests.server.stream_subscriber_child import parse


def test_point4_create_app_streams_the_window_decision_with_the_r19_gauge(
    tmp_path: Path,
) -> None:
    """Issue 37 point 4, R19: through `create_app`, a window asked for over HTTP streams its
    RequestPrepared and the context gauge, without model_context_window (no provider: the
    capacity is unknown), to the conversation's subscriber."""
    httpx = need("httpx")
    need("starlette")
    from turnledger.server.app import Settings, create_app

    url = f"sqlite:///{tmp_path}/store.db"
    with tl.open_store(url) as store, serving(create_app(store, Settings(store_url=url))) as base, \
            httpx.Client(base_url=base, timeout=20) as client:
        created = client.post("/v1/conversations", json={"items": [
            {"type": "message", "role": "user", "content": "hello"}]})
        assert 200 == created.status_code, created.text
        conversation = created.json()["id"]
        with client.stream("GET", f"/v1/conversations/{conversation}/events") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            frames = parse(response.iter_lines())
            assert {"comment": "ready"} == next(frames)
            window = client.post(f"/v1/conversations/{conversation}/window", json={})
            assert 200 == window.status_code, window.text
            events = []
            for frame in frames:
                if "id" in frame:
                    events.append(frame)
                if frame.get("event") == "context":
                    break
        assert "RequestPrepared" == events[-2]["event"]
        gauge = json.loads(events[-1]["data"])
        prepared = json.loads(events[-2]["data"])
        assert conversation == gauge["conversation_id"] == prepared["conversation_id"]
        assert prepared["data"]["estimated_tokens"] == gauge["estimated_tokens"]
        assert prepared["data"]["budget"] == gauge["budget"]
        assert "model_context_window" not in gauge
