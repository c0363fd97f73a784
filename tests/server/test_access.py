"""Issue 37 point 5: bearer keys scoped to their tenant, 413, no CORS by default, no content
in logs; and point 3: the OpenAPI document matches the routes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import turnledger as tl
from tests.extras import need
from tests.server.live import serving


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """A live server on a SQLite store whose registry has keys."""
    need("starlette")
    from turnledger.server.app import Settings, create_app
    from turnledger.server.registry import Registry

    url = f"sqlite:///{tmp_path}/store.db"
    with tl.open_store(url) as store:
        registry = Registry.beside(store)
        app = create_app(store, Settings(store_url=url, require_keys=True, max_body_bytes=4096,
                                         registry=registry))
        with serving(app) as base:
            yield base, registry
        registry.close()


def test_i37_p5_a_key_sees_only_its_tenants_conversations(keyed: tuple[str, Any]) -> None:
    """401 without or with a revoked key; another tenant's conversation is a 404; a shared
    tenant sees it."""
    import httpx

    base, registry = keyed
    (_, alice), (_, bob) = registry.create_key("a"), registry.create_key("b")
    (_, team1), (_, team2) = (registry.create_key("t1", "team"),
                              registry.create_key("t2", "team"))
    url = base + "/v1/conversations"
    assert 401 == httpx.post(url, json={}).status_code
    assert 401 == httpx.post(url, json={}, headers={"Authorization": "Bearer nope"}).status_code

    def as_(secret: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"}

    mine = httpx.post(url, json={}, headers=as_(alice)).json()["id"]
    assert 200 == httpx.get(f"{url}/{mine}", headers=as_(alice)).status_code
    assert 404 == httpx.get(f"{url}/{mine}", headers=as_(bob)).status_code
    assert 404 == httpx.get(f"{url}/{mine}/items", headers=as_(bob)).status_code
    shared = httpx.post(url, json={}, headers=as_(team1)).json()["id"]
    assert 200 == httpx.get(f"{url}/{shared}", headers=as_(team2)).status_code
    key_id = next(k.id for k in registry.api_keys() if k.name == "a")
    assert registry.revoke_key(key_id)
    assert 401 == httpx.get(f"{url}/{mine}", headers=as_(alice)).status_code


def test_i37_p5_bodies_over_the_limit_get_413_and_no_cors_by_default(
        keyed: tuple[str, Any]) -> None:
    """A body over max_body_bytes is refused before it is read; no CORS header unless
    configured."""
    import httpx

    base, registry = keyed
    _, secret = registry.create_key("a")
    headers = {"Authorization": f"Bearer {secret}", "Origin": "https://evil.example"}
    big = {"items": [{"role": "user", "content": "x" * 5000}]}
    answer = httpx.post(base + "/v1/conversations", json=big, headers=headers)
    assert 413 == answer.status_code
    assert "request_too_large" == answer.json()["error"]["code"]
    ok = httpx.post(base + "/v1/conversations", json={}, headers=headers)
    assert "access-control-allow-origin" not in ok.headers


def test_i37_p5_no_message_content_reaches_the_logs(
        keyed: tuple[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    """A refused, a failed and an accepted request log nothing of the items' text."""
    import httpx

    base, registry = keyed
    _, secret = registry.create_key("a")
    headers = {"Authorization": f"Bearer {secret}"}
    secret_text = "the-patient-record-4711"
    caplog.set_level(logging.DEBUG)
    conversation = httpx.post(base + "/v1/conversations", headers=headers, json={
        "items": [{"role": "user", "content": secret_text}]}).json()["id"]
    httpx.post(f"{base}/v1/conversations/{conversation}/items", headers=headers,
               json={"items": [{"type": "function_call_output", "call_id": "x",
                                "output": secret_text, "id": 5}]})
    httpx.post(f"{base}/v1/conversations/{conversation}/window", headers=headers, json={})
    assert caplog.records, "the server logged nothing: the check would prove nothing"
    assert secret_text not in caplog.text


def test_i37_p5_serve_refuses_to_bind_beyond_loopback_without_keys(tmp_path: Path) -> None:
    """turnledger serve --host 0.0.0.0 on a store without keys exits 2 before binding."""
    from turnledger.cli import main

    assert 2 == main(["--store", f"sqlite:///{tmp_path}/s.db", "serve", "--host", "0.0.0.0"])


def test_i37_p3_the_openapi_document_names_every_route_and_only_those(
        keyed: tuple[str, Any]) -> None:
    """/openapi.json lists each (path, method) the application routes, and no other."""
    import httpx
    from starlette.routing import Route

    from turnledger.server.app import _Api, routes

    base, _ = keyed
    document = httpx.get(base + "/openapi.json").json()
    documented = {(path, method.upper()) for path, ops in document["paths"].items()
                  for method in ops}
    api = _Api.__new__(_Api)
    routed = {(r.path, m) for r in routes(api) if isinstance(r, Route)
              for m in (r.methods or ()) if m != "HEAD"} | {("/openapi.json", "GET")}
    assert routed == documented
