"""Suite-wide setup: the Hypothesis profile (`tests.properties`) is loaded before any test
module builds its ``settings``, so every property test inherits it."""

from tests.properties import load

load()
