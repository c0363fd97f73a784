"""Issue 21 point 1 in a session: the route's provider names its API, the prepared request
builds that API's body, prices what is sent, and `RequestPrepared` records what was left out."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import attrs
import msgpack
import pytest

import turnledger as tl
from tests.conversation_fixtures import public
from tests.integration.test_store_contract import load_fixture
from tests.provider_types import problems
from turnledger.audit import timeline
from turnledger.domain.bodies import LeftOut
from turnledger.domain.budget import Route
from turnledger.domain.events import DomainEvent, Purpose, RequestPrepared, SessionStarted
from turnledger.profiles import Pricing
from turnledger.providers import from_anthropic, from_openai_chat, from_openai_responses
from turnledger.store.backend import EventStoreBackend
from turnledger.store.codec import EventCodec, default_codec

WEB_SEARCH = next(raw for name, _, raw in public() if name == "anthropic_web_search")


def _prepared(store: tl.Store, api: str | None) -> tuple[tl.Session, tl.PreparedRequest]:
    provider = tl.ProviderProfile("p", "m", 200_000, api=api)
    history = from_anthropic(WEB_SEARCH)
    session = store.import_conversation([*history, tl.ChatMessage.user("And then?")],
                                        providers=[provider])
    return session, session.prepare_request()


def test_i21_p1_the_routes_api_builds_the_body_and_the_record_says_what_was_left_out(
    tmp_path: Path,
) -> None:
    """An Anthropic session routed to an OpenAI Chat provider: body() is accepted by OpenAI,
    and the RequestPrepared read back from SQLite lists exactly what the request left out."""
    url = f"sqlite:///{tmp_path / 'bodies.db'}"
    with tl.open_store(url) as store:
        session, request = _prepared(store, "openai_chat")
        session_id = session.id
    assert [] == problems("openai_chat", request.body())
    assert request.left_out  # the thinking and server-tool blocks
    with tl.open_store(url) as store:
        (recorded,) = [e for e in store.events_of(session_id) if isinstance(e, RequestPrepared)]
    assert ("openai_chat", request.left_out) == (recorded.api, recorded.left_out)


def test_i21_p1_the_estimate_prices_what_is_sent() -> None:
    """What is left out costs nothing: the estimate is that of the messages sent (plus the
    tokens OpenAI Chat primes the reply with, K6)."""
    with tl.open_store("memory://") as store:
        _, to_openai = _prepared(store, "openai_chat")
        _, to_anthropic = _prepared(store, "anthropic")
    assert tl.estimate_history_tokens(to_openai.sent) + Pricing().openai_reply_tokens == (
        to_openai.estimated_tokens)
    assert to_openai.estimated_tokens < to_anthropic.estimated_tokens
    assert () == to_anthropic.left_out


def test_i21_p1_without_an_api_nothing_changes_and_body_says_why() -> None:
    """A provider that names no API keeps the old request (sent is messages, nothing left
    out) and body() refuses, naming the profile key."""
    with tl.open_store("memory://") as store:
        _, request = _prepared(store, None)
    assert (request.messages, ()) == (request.sent, request.left_out)
    with pytest.raises(tl.InvalidProfile, match="names no api"):
        request.body()


def test_i21_p1_a_profile_names_the_api_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    """``[providers.X] api = ...`` is read; an unknown API is an InvalidProfile naming it."""
    good = tmp_path / "good.toml"
    good.write_text('[providers.claude]\nmodel = "claude-sonnet-4-5"\napi = "anthropic"\n')
    _, providers = tl.load_profile(good)
    assert "anthropic" == providers[0].api
    bad = tmp_path / "bad.toml"
    bad.write_text('[providers.claude]\nmodel = "m"\napi = "gemini"\n')
    with pytest.raises(tl.InvalidProfile, match=r"providers\.claude\.api: must be one of"):
        tl.load_profile(bad)


SESSION = UUID("5e55104e-0000-4000-8000-0000000021a1")
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
FIELDS = {"purpose": Purpose.TURN, "route": Route("openai", "gpt-4o"), "capacity": 8_000,
          "budget": 6_000, "window": 8_000, "estimated_tokens": 910, "message_count": 3,
          "digest": "ab" * 32, "tool_tokens": 12, "hook_tokens": 0}


@attrs.frozen
class RequestPreparedV1(DomainEvent):
    """`RequestPrepared` exactly as version 1 of the code declared it."""

    purpose: Purpose
    route: Route
    capacity: int | None
    budget: int
    window: int
    estimated_tokens: int
    message_count: int
    digest: str
    tool_tokens: int = 0
    hook_tokens: int = 0


def test_i21_p1_a_version_1_request_prepared_still_loads() -> None:
    """A v1 payload (no class_version, no api, no left_out) reads as no API, nothing left out."""
    codec = default_codec()
    topic, _ = codec.encode_event(RequestPrepared(SESSION, 5, NOW, **FIELDS))
    _, old = EventCodec({topic: RequestPreparedV1}).encode_event(
        RequestPreparedV1(SESSION, 5, NOW, **FIELDS))
    assert "class_version" not in msgpack.unpackb(old, timestamp=3)
    assert RequestPrepared(SESSION, 5, NOW, **FIELDS) == codec.decode_event(topic, old, SESSION, 5)


def test_i21_p1_a_version_2_request_prepared_round_trips_what_was_left_out() -> None:
    """A v2 record keeps its API and the list of what was left out."""
    codec = default_codec()
    event = RequestPrepared(SESSION, 6, NOW, **FIELDS, api="openai_chat",
                            left_out=(LeftOut(1, "thinking block", "goes back to Anthropic"),))
    topic, payload = codec.encode_event(event)
    assert 2 == msgpack.unpackb(payload, timestamp=3)["class_version"]
    assert event == codec.decode_event(topic, payload, SESSION, 6)


def test_e10_issue_21_version_2_fixture_records_load(backend: EventStoreBackend) -> None:
    """The v2 records of SessionStarted (pricing, api) and RequestPrepared (left_out) written
    by make_profile_request_records.py read back as the events that wrote them, on every backend."""
    names = ("session_started_v2", "request_prepared_v2")
    backend.recorder.insert_events([load_fixture(name) for name in names])
    session = UUID("5e55104e-0000-4000-8000-0000000021c5")
    started, prepared = backend.read(session)
    assert isinstance(started, SessionStarted)
    assert isinstance(prepared, RequestPrepared)
    assert (Pricing(image_by_size=True), "openai_chat") == (
        started.profile.pricing, started.providers[0].api)
    assert ("openai_chat", ("thinking block",)) == (
        prepared.api, tuple(e.what for e in prepared.left_out))
    assert [] == backend.check_chain(session)


WINDOWS = {"openai": 128_000, "responses": 128_000, "anthropic": 200_000}
APIS_OF = {"openai": "openai_chat", "responses": "openai_responses", "anthropic": "anthropic"}


@pytest.mark.parametrize(("name", "fmt", "raw"), public(), ids=[p[0] for p in public()])
def test_i21_p2_every_public_recording_prepares_under_the_default_profile(
    name: str, fmt: str, raw: object
) -> None:
    """Each recorded conversation (reasoning, server tools, PDFs, audio, generated images...),
    continued by a user message, prepares under the default profile within its model's window,
    as its provider accepted it; its body is accepted by the provider's types."""
    history = {"openai": from_openai_chat, "responses": from_openai_responses,
               "anthropic": from_anthropic}[fmt](raw)
    provider = tl.ProviderProfile("p", "m", WINDOWS[fmt], api=APIS_OF[fmt])
    with tl.open_store("memory://") as store:
        session = store.import_conversation([*history, tl.ChatMessage.user("Go on.")],
                                            providers=[provider])
        request = session.prepare_request()
    assert request.estimated_tokens <= WINDOWS[fmt]
    assert [] == problems(APIS_OF[fmt], request.body())


def test_i21_p1_the_timeline_says_what_a_request_left_out() -> None:
    """`replay`'s summary of a RequestPrepared names its API and what it left out."""
    with tl.open_store("memory://") as store:
        session, request = _prepared(store, "openai_chat")
        entries = timeline(session.events())
    (summary,) = [e.summary for e in entries if e.type == "RequestPrepared"]
    assert f", openai_chat body leaving out {len(request.left_out)} (" in summary
    assert "thinking block" in summary
