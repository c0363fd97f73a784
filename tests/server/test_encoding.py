"""Issue 37 (ADR-0110): answers of recorded items and windows are written by orjson, and are
the standard library's bytes all the same, wherever the two would differ."""

from __future__ import annotations

import json
import math
import random
import struct
from typing import Any

import pytest

import turnledger as tl
from tests.extras import need
from tests.server.live import serving

_PYTHON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, check_circular=False,
                           separators=(",", ":"))


def _python_bytes(value: object) -> bytes:
    return _PYTHON.encode(value).encode("utf-8")


def _floats() -> list[float]:
    """Every power of two, each decade's edges and random bit patterns (seeded), both signs."""
    rng = random.Random(37)
    found = [2.0 ** k for k in range(-1074, 1024)]
    found += [m * 10.0 ** e for e in range(-323, 308) for m in (1.0, 1.5, 9.999999999999998)]
    found += [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
              for _ in range(50_000)]
    found += [rng.uniform(-1e-4, 1e-4) * 10.0 ** -rng.randrange(6) for _ in range(20_000)]
    return [s * x for x in found if math.isfinite(x) for s in (1.0, -1.0)]


def test_i37_every_finite_float_is_written_as_python_writes_it() -> None:
    """Where orjson writes a float otherwise (1e-9 to 1e-4), the check finds it and the
    standard library writes the answer; every other float takes orjson's path, but for a false
    alarm on a mantissa holding ``.0000``."""
    orjson = need("orjson")
    from turnledger.server.app import _fast_dumps

    values = _floats()
    differ = 0
    for x in values:
        expected = _python_bytes({"x": [x]})
        fast = _fast_dumps({"x": [x]})
        differ += orjson.dumps({"x": [x]}) != expected
        if fast is not None:
            assert expected == fast, x
        else:
            assert 1e-9 <= abs(x) < 1e-4 or b".0000" in expected, x
    assert 1000 < differ  # the check had something to find


def test_i37_what_orjson_refuses_is_written_by_the_standard_library() -> None:
    """A key that is not a string, an integer beyond 64 bits and deep nesting are written as
    before; a lone surrogate is refused as before."""
    need("orjson")
    from turnledger.server.app import _RecordJson

    for value in ({1: "a", 2.5: "b", None: "c"}, [2 ** 64, -(2 ** 70)],
                  json.loads("[" * 300 + "]" * 300)):
        assert _python_bytes(value) == _RecordJson(value).body
    with pytest.raises(UnicodeEncodeError):
        _RecordJson({"text": "\ud800"})


def _items(turn: int) -> list[dict[str, Any]]:
    return [{"type": "message", "role": "user", "id": f"msg_u{turn}", "status": "completed",
             "x_score": [1e-7, 5e-5, 0.25, 1e16, 2.5e-10][turn % 5],
             "content": [{"type": "input_text",
                          "text": f"question {turn} \u00e9\u4e2d\U0001f600 \x01\t\n\"\\ "
                                  + "word " * 40}]},
            {"type": "message", "role": "assistant", "id": f"msg_a{turn}",
             "status": "completed", "content": [{"type": "output_text", "annotations": [],
                                                 "text": f"answer {turn} " + "word " * 60}]}]


def test_i37_window_and_items_answers_over_http_are_the_standard_librarys_bytes() -> None:
    """Windows (each API, with the items and events, trimmed), item pages and an item over
    HTTP: each answer's bytes are what the standard library writes of its own JSON; the
    float-free ones took orjson's path."""
    need("orjson")
    httpx = need("httpx")
    from turnledger.server.app import Settings, _fast_dumps, create_app

    profile = tl.RuntimeProfile(max_context_tokens=3000)
    with tl.open_store("memory://encoding") as store, serving(
            create_app(store, Settings(profile=profile))) as url, httpx.Client(
            base_url=url) as http:
        base = "/v1/conversations/" + http.post("/v1/conversations", json={}).json()["id"]
        answers: list[bytes] = []
        for turn in range(40):
            for body in ({"items": _items(turn)}, {"api": "openai_chat"},
                         {"api": "anthropic", "include": ["items", "events"]}):
                answer = http.post(base + "/window", json=body)
                assert 200 == answer.status_code, answer.text
                answers.append(answer.content)
        answers.append(http.get(base + "/items", params={"limit": 100}).content)
        answers.append(http.get(base + "/items/msg_u3").content)
        plain = http.post(base + "/items", json={"items": [
            {"role": "user", "content": "no float here"}]})
        answers.append(plain.content)
    assert any(json.loads(a).get("history_trimmed") for a in answers)
    assert any(b'"x_score":1e-07' in a for a in answers)
    for raw in answers:
        assert _python_bytes(json.loads(raw)) == raw
    assert _fast_dumps(json.loads(plain.content)) == plain.content
