"""Issue 37 point 2: the `openai` Python package, unmodified, against a live server."""

from __future__ import annotations

from typing import Any

import pytest

from tests.extras import need


def _client(url: str) -> Any:
    openai = need("openai")
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def test_i37_p2_conversation_lifecycle_through_the_openai_client(server_url: str) -> None:
    """create, retrieve, update and delete with client.conversations; ids are conv_."""
    client = _client(server_url)
    created = client.conversations.create(items=[{"role": "user", "content": "hi"}],
                                          metadata={"topic": "demo"})
    assert created.id.startswith("conv_")
    assert {"topic": "demo"} == client.conversations.retrieve(created.id).metadata
    assert {"k": "v"} == client.conversations.update(created.id, metadata={"k": "v"}).metadata
    deleted = client.conversations.delete(created.id)
    assert (created.id, True) == (deleted.id, deleted.deleted)
    openai = need("openai")
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(created.id)


def test_i37_p2_items_round_trip_exactly_and_page_with_after(server_url: str) -> None:
    """Every kind of item comes back as stored, ids stable; the SDK's auto-paging walks the
    pages through first_id/last_id/has_more in both orders."""
    client = _client(server_url)
    conversation = client.conversations.create()
    given = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}],
         "encrypted_content": "opaque"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"type": "message", "role": "assistant", "content": "done"},
    ] * 5
    given = [dict(item, call_id=f"c{i}") if "call_id" in item else item
             for i, item in enumerate(given)]
    given = [dict(item, id=f"rs_{i}") if item["type"] == "reasoning" else item
             for i, item in enumerate(given)]
    added = []
    for start in range(0, len(given), 10):
        added += client.conversations.items.create(
            conversation.id, items=given[start:start + 10]).data
    ids = [item.id for item in added]
    assert len(set(ids)) == len(given)
    listed = list(client.conversations.items.list(conversation.id, limit=3, order="asc"))
    assert ids == [item.id for item in listed]
    newest_first = list(client.conversations.items.list(conversation.id, limit=4))
    assert ids[::-1] == [item.id for item in newest_first]
    one = client.conversations.items.retrieve(ids[2], conversation_id=conversation.id)
    assert ("function_call", "c2", '{"a": 1}') == (one.type, one.call_id, one.arguments)
    assert [item.model_dump(exclude_unset=True) for item in added] == [
        item.model_dump(exclude_unset=True) for item in listed]


def test_i37_p2_deleting_an_item_pops_the_newest_and_refuses_an_older_one(
        server_url: str) -> None:
    """DELETE of the newest item is Session.pop; an older one is a 400 naming why."""
    openai = need("openai")
    client = _client(server_url)
    conversation = client.conversations.create(items=[
        {"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}])
    first, second = list(client.conversations.items.list(conversation.id, order="asc"))
    with pytest.raises(openai.BadRequestError, match="append-only"):
        client.conversations.items.delete(first.id, conversation_id=conversation.id)
    answer = client.conversations.items.delete(second.id, conversation_id=conversation.id)
    assert conversation.id == answer.id
    assert [first.id] == [i.id for i in client.conversations.items.list(conversation.id)]


def test_i37_p2_errors_use_openais_envelope_and_status_codes(server_url: str) -> None:
    """404 for unknown or malformed ids, 400 for bad items, nothing stored of a refused
    request."""
    import httpx

    client = _client(server_url)
    openai = need("openai")
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve("conv_" + "0" * 32)
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve("conv_nope")
    conversation = client.conversations.create()
    answer = httpx.post(f"{server_url}/v1/conversations/{conversation.id}/items",
                        json={"items": [{"role": "user", "content": "ok"}, {"content": "x"}]})
    assert 400 == answer.status_code
    error = answer.json()["error"]
    assert {"message", "type", "param", "code"} == set(error)
    assert "items[1]" in str(error["param"])
    assert [] == list(client.conversations.items.list(conversation.id))
    too_many = httpx.post(f"{server_url}/v1/conversations/{conversation.id}/items",
                          json={"items": [{"role": "user", "content": "x"}] * 21})
    assert 400 == too_many.status_code
    duplicate = [{"role": "user", "content": "x", "id": "msg_same"}] * 2
    twice = httpx.post(f"{server_url}/v1/conversations/{conversation.id}/items",
                       json={"items": duplicate})
    assert (400, "duplicate_item_id") == (twice.status_code, twice.json()["error"]["code"])
    httpx.post(f"{server_url}/v1/conversations/{conversation.id}/items",
               json={"items": duplicate[:1]})
    again = httpx.post(f"{server_url}/v1/conversations/{conversation.id}/items",
                       json={"items": duplicate[:1]})  # a retry whose answer was lost
    assert (400, "duplicate_item_id") == (again.status_code, again.json()["error"]["code"])
