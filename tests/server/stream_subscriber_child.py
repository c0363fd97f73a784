"""A subscriber in a process of its own for the SSE exactly-once test (issue 37 point 4).

Reads ``GET URL`` as Server-Sent Events (resuming after ``LAST_ID`` when given) and appends one
line ``<id> <event>`` per event to ``OUT``, flushed at once, so a parent that SIGKILLs it knows
the last event it recorded. ``parse`` is the tests' one SSE parser.

Usage: ``python -m tests.server.stream_subscriber_child URL OUT [LAST_ID]``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

import httpx


def parse(lines: Iterable[str]) -> Iterator[dict[str, str]]:
    """The SSE events of a stream's lines: each a dict of its fields (``id``, ``event``,
    ``data``); a comment is yielded as ``{"comment": text}``."""
    fields: dict[str, str] = {}
    for line in lines:
        if not line:
            if fields:
                yield fields
            fields = {}
        elif line.startswith(":"):
            yield {"comment": line[1:].strip()}
        else:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
    if fields:
        yield fields


def follow(url: str, out: str, last_id: str | None) -> None:
    """Record every event of the stream at ``url`` until it ends."""
    headers = {"Last-Event-ID": last_id} if last_id else {}
    with httpx.Client(timeout=httpx.Timeout(30, read=None)) as client, client.stream(
        "GET", url, headers=headers
    ) as response, open(out, "a", encoding="utf-8") as file:
        response.raise_for_status()
        for event in parse(response.iter_lines()):
            if "id" in event:
                file.write(f"{event['id']} {event.get('event', '')}\n")
                file.flush()


if __name__ == "__main__":
    follow(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
