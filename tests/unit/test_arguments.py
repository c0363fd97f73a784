"""Issue 34 point 4: one rule for an int or a number argument (`turnledger.domain.arguments`),
and every entry point that takes a count, a limit, a position or a number refuses by it.

A bool is an int to Python; to turnledger ``True`` in a count's slot is a mistake to name. Each
entry point keeps its own error and words (a profile key in `InvalidProfile`, a replay
position in `InvalidPosition`), which these tests pin with the value the rule decides on.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable

import pytest

import turnledger as tl
from turnledger.audit import views_at
from turnledger.domain.arguments import is_int, is_number, require_int
from turnledger.domain.budget import valid_compact_ratio
from turnledger.errors import InvalidPosition
from turnledger.integrations import conflict_budget
from turnledger.profiles import Pricing


class _Size(enum.IntEnum):
    ONE = 1


def test_i34_p4_an_int_is_an_int_that_is_not_a_bool() -> None:
    """``True`` and ``1.0`` are no ints; an int subclass other than bool is one."""
    assert [True, True, False, False, False, False] == [
        is_int(v) for v in (1, _Size.ONE, True, False, 1.0, "1")]


def test_i34_p4_a_number_is_an_int_or_a_float_that_is_not_a_bool() -> None:
    """NaN and the infinities are numbers here; a caller that refuses them says so."""
    assert [True, True, True, True, False, False, False] == [
        is_number(v) for v in (1, 0.5, math.nan, -math.inf, True, "1", None)]


def test_i34_p4_require_int_names_the_argument_and_the_type_given() -> None:
    """The value back when it is an int; else the caller's error, in the one wording."""
    assert 3 == require_int("max_turns", 3)
    with pytest.raises(TypeError, match=r"^max_turns must be an int, got bool$"):
        require_int("max_turns", True)
    with pytest.raises(InvalidPosition, match=r"^position must be an int, got float$"):
        require_int("position", 2.0, InvalidPosition)


REFUSED: dict[str, tuple[Callable[[object], object], type[Exception], str]] = {
    "trim_to_recent_turn_count": (lambda v: tl.trim_to_recent_turn_count([], v), TypeError,
                                  "max_turns must be an int, got {type}"),
    "truncate_tool_result": (lambda v: tl.truncate_tool_result("x", v), TypeError,
                             "max_chars must be an int, got {type}"),
    "views_at": (lambda v: views_at([], v), InvalidPosition,
                 "position must be an int, got {type}"),
    "RuntimeProfile count": (lambda v: tl.RuntimeProfile(max_history_messages=v),
                             tl.InvalidProfile,
                             "max_history_messages: must be a non-negative integer or absent, "
                             "got {value}"),
    "ProviderProfile window": (lambda v: tl.ProviderProfile("p", "m", context_window=v),
                               tl.InvalidProfile,
                               "context_window: must be a positive integer or absent, "
                               "got {value}"),
    "Pricing count": (lambda v: Pricing(image_tokens=v), tl.InvalidProfile,
                      "pricing.image_tokens: must be a non-negative integer, got {value}"),
    "RuntimeProfile ratio": (lambda v: tl.RuntimeProfile(context_compact_ratio=v),
                             tl.InvalidProfile,
                             "context_compact_ratio: must be a number or absent, got {value}"),
    "conflict_budget": (conflict_budget, ValueError,
                        "conflict_budget_seconds must be a number >= 0, got {value}"),
}


@pytest.mark.parametrize("entry", sorted(REFUSED))
def test_i34_p4_every_count_and_number_argument_refuses_a_bool_in_its_own_words(
    entry: str,
) -> None:
    """``True`` is refused at each entry point, with its error naming the argument."""
    call, error, words = REFUSED[entry]
    with pytest.raises(error) as raised:
        call(True)
    assert words.format(type="bool", value="True") == str(raised.value)


def test_i34_p4_a_number_where_an_int_is_needed_is_refused_and_a_ratio_takes_it() -> None:
    """``2.0`` is no count (refused, naming its type), but a ratio's number; ``True`` is
    neither, and an unusable ratio is unset (R14), never an error."""
    with pytest.raises(TypeError, match=r"^max_turns must be an int, got float$"):
        tl.trim_to_recent_turn_count([], 2.0)
    assert (None, None) == (valid_compact_ratio(True), valid_compact_ratio(2.0))
    assert "0.5" == str(valid_compact_ratio(0.5))
