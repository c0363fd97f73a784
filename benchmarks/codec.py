"""Benchmark: encode/decode cost of the event codec and of a full stored record (ADR-0003).

Two representative events: a `MessageAppended` carrying an assistant tool call (the most common
large event) and a `TrimDecided` (all scalars and enums). For each it measures, per event, the
best-of-N mean in microseconds (`timeit`):

- ``encode``: ``encode_event`` (cattrs unstructure + msgpack pack);
- ``decode``: ``decode_event`` (msgpack unpack + upcast check + cattrs structure + validators);
- ``record out`` / ``record in``: the mapper's full path, with the hash chain and the
  ``[chain, payload]`` envelope (``to_stored_events`` / ``decode_record``), no compressor;

plus the payload size and, for comparison, the size of the same fields as compact JSON.

Run from the project root: ``.venv/bin/python -m benchmarks.codec``. Prints a table and writes
``benchmarks/results/codec.json``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import timeit
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import cattrs
import msgpack

from turnledger.domain.events import (
    DomainEvent,
    MessageAppended,
    TrimDecided,
    TrimReason,
    TrimTrigger,
    View,
)
from turnledger.domain.messages import AssistantToolCalls, ToolCall
from turnledger.store.codec import default_codec
from turnledger.store.mapper import ZERO_CHAIN, TurnledgerMapper

RESULTS = Path(__file__).parent / "results" / "codec.json"
SESSION = UUID("0b5e55ed-0000-4000-8000-000000000001")
WHEN = datetime(2025, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)

EVENTS: dict[str, DomainEvent] = {
    "MessageAppended (1 tool call)": MessageAppended(
        SESSION, 2, WHEN, 17,
        AssistantToolCalls(
            "Let me search the repository for the failing test.",
            (ToolCall("call_0001", "search", '{"path": "src/", "query": "test_r25 overflow"}'),),
        ),
    ),
    "TrimDecided": TrimDecided(
        SESSION, 3, WHEN, View.CHAT, TrimTrigger.PREPARE, TrimReason.TOKEN_BUDGET,
        first_kept_position=42, dropped_messages=18, dropped_turns=4, kept_turns=6,
        tokens_before=31_250, tokens_after=19_900, limit=20_000,
    ),
}


def best_us(fn: Callable[[], object], number: int, repeat: int) -> float:
    """Best-of-``repeat`` mean time of one call, in microseconds."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def measure(name: str, event: DomainEvent, number: int, repeat: int) -> dict[str, object]:
    codec = default_codec()
    mapper = TurnledgerMapper(codec=codec)
    topic, payload = codec.encode_event(event)
    (record,), _ = mapper.to_stored_events([event], ZERO_CHAIN)
    version = event.originator_version
    assert codec.decode_event(topic, payload, SESSION, version) == event
    assert mapper.decode_record(record)[0] == event
    plain = cattrs.Converter().unstructure(event)
    plain["timestamp"] = event.timestamp.isoformat()
    plain["originator_id"] = str(event.originator_id)
    json_size = len(json.dumps(plain, separators=(",", ":"), default=str).encode())
    return {
        "event": name,
        "encode_us": round(best_us(lambda: codec.encode_event(event), number, repeat), 2),
        "decode_us": round(
            best_us(lambda: codec.decode_event(topic, payload, SESSION, version), number, repeat),
            2,
        ),
        "record_out_us": round(
            best_us(lambda: mapper.to_stored_events([event], ZERO_CHAIN), number, repeat), 2
        ),
        "record_in_us": round(best_us(lambda: mapper.decode_record(record), number, repeat), 2),
        "payload_bytes": len(payload),
        "record_bytes": len(record.state),
        "json_bytes": json_size,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--number", type=int, default=20_000, help="calls per timing run")
    parser.add_argument("--repeat", type=int, default=7, help="timing runs (best is kept)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    rows = [measure(name, event, args.number, args.repeat) for name, event in EVENTS.items()]
    header = ("event", "encode µs", "decode µs", "record out µs", "record in µs", "payload B",
              "record B", "JSON B")
    keys = ("event", "encode_us", "decode_us", "record_out_us", "record_in_us", "payload_bytes",
            "record_bytes", "json_bytes")
    widths = [max(len(header[i]), *(len(str(r[k])) for r in rows)) for i, k in enumerate(keys)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for row in rows:
        print("  ".join(str(row[k]).ljust(w) for k, w in zip(keys, widths)))

    report = {
        "benchmark": "turnledger event codec (cattrs + msgpack) and record mapper",
        "number": args.number,
        "repeat": args.repeat,
        "python": platform.python_version(),
        "msgpack": ".".join(map(str, msgpack.version)),
        "cattrs": importlib.metadata.version("cattrs"),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, default=list) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
