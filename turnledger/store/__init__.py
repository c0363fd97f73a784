"""turnledger's store: the event store, its backends, sessions and the write path.

The store sits below the projections and imports none of them (ADR-0001). What it must ask of
them is registered here by the package's composition root (``turnledger/__init__.py``): the
hooks that must see a session's events before `Store.forget` makes their content unreadable —
the analytics counters, which a forgotten session keeps (ADR-0046, ADR-0072). Light on
purpose: this module is loaded with the package, before any store is opened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from turnledger.store.backend import EventStoreBackend

__all__ = ["DEFAULT_STORE_URL", "before_erasure", "run_before_erasure"]

DEFAULT_STORE_URL: Final = "sqlite:///./turnledger.db"
"""The store a command or `open_store` uses when none is named: ``./turnledger.db``. Here, in
the package's light ``__init__``, so that the command line's parser shows it without loading
the store (``turnledger --help`` stays fast, issue 20)."""

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
