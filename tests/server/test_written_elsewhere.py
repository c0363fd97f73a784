"""Issue 37 points 2 and 3, issue 38 point 2: sessions the server shares with the library.

The server's store is the record every process writes: a runtime appends with the library, an
operator imports, a framework integration records its steps. A conversation the library also
wrote to lists, adds and windows like any other (every item with an id and its type), and the
audit endpoints the dashboard links to read a session no conversation names when the server
has no keys (every caller is its operator), as the store-wide stream shows it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import turnledger as tl
from tests.backends import ALL_BACKENDS, fresh_target
from tests.extras import need
from tests.server.live import serving


@pytest.fixture(params=ALL_BACKENDS)
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A live server without keys, and its store's URL for the library to write to."""
    need("starlette")
    from turnledger.server.app import Settings, create_app

    with (fresh_target(request.param, tmp_path) as target, tl.open_store(target.url) as store,
          serving(create_app(store, Settings(store_url=target.url))) as url):
        yield url, target.url


def _client(url: str) -> Any:
    openai = need("openai")
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def _library_step(store_url: str, conversation: str) -> None:
    """What a runtime writes with the library between two server calls: a tool step of two
    calls, their two results, an answer."""
    from turnledger.server.ids import session_id

    with tl.open_store(store_url) as store:
        session = store.restore(session_id(conversation))
        session.extend([
            tl.AssistantToolCalls(None, (tl.ToolCall("c1", "read", "{}"),
                                         tl.ToolCall("c2", "read", "{}"))),
            tl.ToolResults((tl.ToolResult("c1", "one"), tl.ToolResult("c2", "two"))),
            tl.ChatMessage.assistant("from the library"),
        ])


def test_i37_a_conversation_the_library_wrote_to_lists_adds_and_windows(
        shared: tuple[str, str]) -> None:
    """Each message the library recorded is listed as its Responses items, each with its
    type and an id that stays the same between lists; items added afterwards and a window
    work (they answered 500 before: the id check read an id such items do not have)."""
    url, store_url = shared
    client = _client(url)
    conversation = client.conversations.create(items=[{"role": "user", "content": "hi"}])
    _library_step(store_url, conversation.id)
    listed = list(client.conversations.items.list(conversation.id, order="asc"))
    assert ["message", "function_call", "function_call", "function_call_output",
            "function_call_output", "message"] == [item.type for item in listed]
    ids = [item.id for item in listed]
    assert len(set(ids)) == 6
    assert all(i.startswith(("msg_", "fc_", "fco_")) for i in ids)
    assert ids == [item.id for item in client.conversations.items.list(conversation.id,
                                                                        order="asc")]
    answer = client.conversations.items.retrieve(ids[-1], conversation_id=conversation.id)
    assert ("assistant", "from the library") == (answer.role, answer.content[0].text)

    added = client.conversations.items.create(
        conversation.id, items=[{"role": "user", "content": "and now?"}]).data
    import httpx

    window = httpx.post(f"{url}/v1/conversations/{conversation.id}/window",
                        json={"items": [{"role": "assistant", "content": "now this"}],
                              "api": "openai_chat"})
    assert 200 == window.status_code, window.text
    assert [*ids, added[0].id, window.json()["added_items"][0]["id"]] == [
        item.id for item in client.conversations.items.list(conversation.id, order="asc")]
    refused = httpx.post(f"{url}/v1/conversations/{conversation.id}/items",
                         json={"items": [{"role": "user", "content": "x", "id": ids[1]}]})
    assert (400, "duplicate_item_id") == (refused.status_code,
                                          refused.json()["error"]["code"])


def test_i37_deleting_one_item_of_a_message_recorded_elsewhere_is_refused_whole(
        shared: tuple[str, str]) -> None:
    """A library's tool results are one message (one log position) and two items: deleting
    the newest of them would pop both, so it is refused with nothing removed; a single
    newest item recorded by the library is popped by its id."""
    openai = need("openai")
    from turnledger.server.ids import session_id

    url, store_url = shared
    client = _client(url)
    conversation = client.conversations.create(items=[{"role": "user", "content": "hi"}])
    with tl.open_store(store_url) as store:
        session = store.restore(session_id(conversation.id))
        session.extend([
            tl.AssistantToolCalls(None, (tl.ToolCall("c1", "read", "{}"),
                                         tl.ToolCall("c2", "read", "{}"))),
            tl.ToolResults((tl.ToolResult("c1", "one"), tl.ToolResult("c2", "two")))])
    before = [item.id for item in client.conversations.items.list(conversation.id)]
    with pytest.raises(openai.BadRequestError, match="one message with 1 other item"):
        client.conversations.items.delete(before[0], conversation_id=conversation.id)
    assert before == [item.id for item in client.conversations.items.list(conversation.id)]

    with tl.open_store(store_url) as store:
        store.restore(session_id(conversation.id)).append(tl.ChatMessage.assistant("done"))
    newest = next(iter(client.conversations.items.list(conversation.id))).id
    client.conversations.items.delete(newest, conversation_id=conversation.id)
    assert before == [item.id for item in client.conversations.items.list(conversation.id)]


def test_i38_the_dashboards_report_link_reads_a_session_the_library_started(
        shared: tuple[str, str]) -> None:
    """Without keys the store-wide stream shows every session, so its report, timeline and
    verification are served too; an id of no session is a 404 in OpenAI's envelope."""
    import httpx

    from turnledger.server.ids import conversation_id

    url, store_url = shared
    with tl.open_store(store_url) as store:
        session = store.start_session(tl.RuntimeProfile())
        session.append(tl.ChatMessage.user("started by the library"))
        conversation = conversation_id(session.id)
    base = f"{url}/v1/conversations/{conversation}"
    report = httpx.get(base + "/report")
    assert (200, "text/html") == (report.status_code,
                                  report.headers["content-type"].split(";")[0])
    assert conversation.removeprefix("conv_") in report.text.replace("-", "")
    timeline = httpx.get(base + "/timeline").json()
    assert ["SessionStarted", "RouteSelected", "MessageAppended"] == [
        e["type"] for e in timeline["data"]]
    verification = httpx.get(base + "/verify").json()
    assert (True, 3) == (verification["ok"], verification["events_checked"])
    missing = httpx.get(f"{url}/v1/conversations/conv_{'0' * 32}/report")
    assert (404, "not_found") == (missing.status_code, missing.json()["error"]["code"])


def test_i38_with_keys_a_session_no_conversation_names_stays_unseen(tmp_path: Path) -> None:
    """With keys a conversation is its creator's alone: a session the library started is a
    404 to every key, as it is absent from every key's stream."""
    need("starlette")
    import httpx

    from turnledger.server.app import Settings, create_app
    from turnledger.server.ids import conversation_id
    from turnledger.server.registry import Registry

    url = f"sqlite:///{tmp_path}/store.db"
    with tl.open_store(url) as store:
        session = store.start_session(tl.RuntimeProfile())
        session.append(tl.ChatMessage.user("started by the library"))
        registry = Registry.beside(store)
        _, key = registry.create_key("ops", "team")
        app = create_app(store, Settings(store_url=url, require_keys=True, registry=registry))
        with serving(app) as base:
            answer = httpx.get(f"{base}/v1/conversations/{conversation_id(session.id)}/report",
                               headers={"Authorization": f"Bearer {key}"})
        registry.close()
    assert (404, "not_found") == (answer.status_code, answer.json()["error"]["code"])
