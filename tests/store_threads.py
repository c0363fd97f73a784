"""Noting which threads write to a store (ADR-0043, ADR-0092: an integration's store calls
run in a worker thread, its conversions in the event loop's), for the pydantic-ai and ADK
tests."""

from __future__ import annotations

import threading
from typing import Any

import pytest

__all__ = ["note_writing_threads"]


def note_writing_threads(monkeypatch: pytest.MonkeyPatch, store: Any) -> list[int]:
    """A list that gets the ident of the thread of each append to ``store``'s backend."""
    threads: list[int] = []
    append = store.backend.append

    def noting(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return append(*args, **kwargs)

    monkeypatch.setattr(store.backend, "append", noting)
    return threads
