"""The rule every count, limit, position and number argument is refused by, in one place.

An int argument is an int and never a bool: Python counts ``True`` as 1, and ``max_turns=True``
or ``enabled = true`` in a count's slot of a profile file is a mistake to name, not a limit of
one. A number is an int or a float on the same terms. Each caller keeps its own words and its
own error (a profile key in `InvalidProfile`, a replay position in `InvalidPosition`); the rule
is here, so that every entry point refuses the same values (issue 34).
"""

from __future__ import annotations

from typing import TypeGuard

__all__ = ["is_int", "is_number", "require_int"]


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """An int or a float that is not a bool (NaN and the infinities included: a caller that
    refuses them says so)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def require_int(name: str, value: object, error: type[Exception] = TypeError) -> int:
    """``value`` when it is an int (`is_int`); else ``error`` naming the argument and the type
    given: ``max_chars must be an int, got str``."""
    if not is_int(value):
        raise error(f"{name} must be an int, got {type(value).__name__}")
    return value
