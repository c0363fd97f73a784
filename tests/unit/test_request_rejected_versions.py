"""`RequestRejected` version 2 adds ``reason`` and ``tool_call_ids`` (issue 9.3, E10, STYLE 9).

A version 1 record — written before refusals had a reason — still loads, as a capacity refusal
(R18) with no call ids; a version 2 record keeps its reason and ids.
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

import attrs
import msgpack

from turnledger.domain.budget import Route
from turnledger.domain.events import DomainEvent, Purpose, RejectionReason, RequestRejected
from turnledger.store.codec import EventCodec, default_codec

SESSION = UUID("5e55104e-0000-4000-8000-0000000009c3")
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
FIELDS = {
    "purpose": Purpose.TURN, "route": Route("openai", "gpt-4o"), "capacity": 8_000,
    "window": 8_000, "estimated_tokens": 9_100, "message_count": 12,
    "detail": "request needs about 9,100 tokens",
}


@attrs.frozen
class RequestRejectedV1(DomainEvent):
    """`RequestRejected` exactly as version 1 of the code declared it."""

    purpose: Purpose
    route: Route
    capacity: int | None
    window: int
    estimated_tokens: int
    message_count: int
    detail: str


def test_e10_a_version_1_request_rejected_loads_as_a_capacity_refusal() -> None:
    """A v1 payload (no reason, no ids, no class_version) reads as reason=capacity, ids ()."""
    codec = default_codec()
    topic, _ = codec.encode_event(RequestRejected(SESSION, 7, NOW, **FIELDS))
    _, old_payload = EventCodec({topic: RequestRejectedV1}).encode_event(
        RequestRejectedV1(SESSION, 7, NOW, **FIELDS)
    )
    assert "class_version" not in msgpack.unpackb(old_payload, timestamp=3)
    expected = RequestRejected(SESSION, 7, NOW, **FIELDS)
    assert expected == codec.decode_event(topic, old_payload, SESSION, 7)
    assert (RejectionReason.CAPACITY, ()) == (expected.reason, expected.tool_call_ids)


def test_e10_a_version_2_refusal_keeps_its_reason_and_call_ids() -> None:
    """An unanswered-calls refusal round-trips with class_version 2, its reason and ids."""
    codec = default_codec()
    event = RequestRejected(
        SESSION, 8, NOW, **FIELDS, reason=RejectionReason.UNANSWERED_TOOL_CALLS,
        tool_call_ids=("call_1", "call_2"),
    )
    topic, payload = codec.encode_event(event)
    assert 2 == msgpack.unpackb(payload, timestamp=3)["class_version"]
    assert event == codec.decode_event(topic, payload, SESSION, 8)
