"""What the store asks of the layers above it without importing them (STYLE 1).

The store sits below the projections. A projection that must see a session's events before
`Store.forget` makes their content unreadable — the analytics counters, which a forgotten
session keeps (ADR-0046) — registers a hook here with `before_erasure`; the store runs every
registered hook, in the order they were registered, before each erasure. The package imports
`turnledger.projections.analytics` (it exports `Analytics`), so that hook is registered
before any store can be opened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turnledger.store.backend import EventStoreBackend

__all__ = ["ErasureHook", "before_erasure", "run_before_erasure"]

ErasureHook = Callable[["EventStoreBackend"], None]
"""``hook(backend)``: called with the store's backend before a session's content is erased."""

_before_erasure: list[ErasureHook] = []
_lock = threading.Lock()


def before_erasure(hook: ErasureHook) -> ErasureHook:
    """Run ``hook(backend)`` before every erasure of a session's content (`Store.forget`),
    after the hooks registered before it. Registering a hook again changes nothing. Returns
    ``hook``, so it serves as a decorator."""
    with _lock:
        if hook not in _before_erasure:
            _before_erasure.append(hook)
    return hook


def run_before_erasure(backend: EventStoreBackend) -> None:
    """Run the registered hooks on ``backend``, in order; what a hook raises stops the
    erasure (nothing is erased then)."""
    with _lock:
        hooks = tuple(_before_erasure)
    for hook in hooks:
        hook(backend)
