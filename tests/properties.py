"""Hypothesis profiles of the suite, and the example counts of its property tests.

- ``ci``: derandomized (the same examples on every run, no example database), so a red CI
  always means a change broke something. `.ci/run` sets ``HYPOTHESIS_PROFILE=ci``.
- ``dev`` (the default): random examples, as Hypothesis runs by default.
- ``long``: random examples, `examples` times ``TURNLEDGER_EXAMPLES_SCALE`` (default 20):
  the long run before a change to the store, the state or the snapshots lands
  (``python -m benchmarks.properties``).

A property test gives its example count as ``max_examples=examples(N)``: N in ``ci`` and
``dev``, N times the scale in ``long``.
"""

from __future__ import annotations

import os
from typing import Final

from hypothesis import settings

__all__ = ["PROFILE", "examples", "load"]

PROFILE: Final = os.environ.get("HYPOTHESIS_PROFILE", "dev")


def examples(count: int) -> int:
    """``count`` examples, scaled up under the ``long`` profile."""
    if PROFILE != "long":
        return count
    return count * int(os.environ.get("TURNLEDGER_EXAMPLES_SCALE", "20"))


def load() -> None:
    """Register the profiles and load the one ``HYPOTHESIS_PROFILE`` names (conftest)."""
    settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                              print_blob=True)
    settings.register_profile("dev", deadline=None)
    settings.register_profile("long", deadline=None, database=None, print_blob=True)
    settings.load_profile(PROFILE)
