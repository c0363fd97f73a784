"""The store's limits name the timeout an error ran into, whatever its exception chain."""

from __future__ import annotations

import sqlite3

from turnledger.store.backends.port import Limits


def test_e3_a_cyclic_exception_chain_is_walked_once() -> None:
    """An error whose cause and context form a cycle is classified (not a hang): the lock
    timeout found in the chain is named, and a chain with none gives None."""
    outer, inner = RuntimeError("outer"), sqlite3.OperationalError("database is locked")
    outer.__cause__, inner.__context__ = inner, outer
    assert "lock_timeout=2 s" == Limits(lock=2).exceeded(outer)
    first, second = ValueError("a"), ValueError("b")
    first.__context__, second.__context__ = second, first
    assert Limits(lock=2).exceeded(first) is None
