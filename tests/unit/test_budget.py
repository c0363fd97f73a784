"""Budget, request window and route capacity (SPEC R11-R19, R28-R29 and R38 defaults)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnledger.domain.budget import (
    DEFAULT_CONTEXT_TOKENS,
    DEFAULT_MAX_HISTORY_TURNS,
    DEFAULT_MAX_TOOL_RESULT_CHARS,
    AliasMap,
    HistoryPruning,
    ModelAlias,
    ProviderProfile,
    ResolvedRoute,
    Route,
    RuntimeProfile,
    effective_context_budget,
    find_provider,
    request_window,
    resolve_capacity,
    resolve_route,
    valid_compact_ratio,
)
from turnledger.domain.errors import InvalidProfile

OFF = HistoryPruning()


def _profile(
    mct: int | None = None,
    ratio: float | None = None,
    pruning: HistoryPruning = OFF,
) -> RuntimeProfile:
    return RuntimeProfile(
        max_context_tokens=mct, context_compact_ratio=ratio, history_pruning=pruning
    )


# --- defaults (R11, R29, R38) ---------------------------------------------------------------


def test_r11_default_context_tokens_is_32000() -> None:
    """The historical budget constant is 32,000 tokens."""
    expected = 32_000
    assert expected == DEFAULT_CONTEXT_TOKENS


def test_r29_default_max_history_turns_is_50() -> None:
    """The default turn limit constant is 50 turns."""
    expected = 50
    assert expected == DEFAULT_MAX_HISTORY_TURNS


def test_r38_default_max_tool_result_chars_is_50000() -> None:
    """The default tool-result bound is 50,000 characters, and the profile uses it."""
    expected = (50_000, 50_000)
    assert expected == (DEFAULT_MAX_TOOL_RESULT_CHARS, RuntimeProfile().max_tool_result_chars)


def test_r16_history_pruning_defaults_to_disabled_8192() -> None:
    """HistoryPruning() is disabled with max_tokens 8192."""
    expected = (False, 8192)
    assert expected == (HistoryPruning().enabled, HistoryPruning().max_tokens)


def test_r11_runtime_profile_defaults_leave_everything_unset() -> None:
    """A default RuntimeProfile sets neither budget knob nor a turn limit."""
    profile = RuntimeProfile()
    actual = (
        profile.max_context_tokens,
        profile.context_compact_ratio,
        profile.history_pruning,
        profile.max_history_messages,
    )
    assert (None, None, HistoryPruning(), None) == actual


@pytest.mark.parametrize(
    ("configured", "expected"), [(None, 50), (0, 0), (1, 1), (7, 7), (500, 500)]
)
def test_r29_max_history_turns_defaults_to_50_and_explicit_values_win(
    configured: int | None, expected: int
) -> None:
    """max_history_turns is 50 when unset; an explicit value, 0 included, is authoritative."""
    assert expected == RuntimeProfile(max_history_messages=configured).max_history_turns


# --- RuntimeProfile / HistoryPruning validation ---------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_context_tokens": -1}, "max_context_tokens"),
        ({"max_context_tokens": True}, "max_context_tokens"),
        ({"max_context_tokens": False}, "max_context_tokens"),
        ({"max_context_tokens": 1.5}, "max_context_tokens"),
        ({"max_context_tokens": "100"}, "max_context_tokens"),
        ({"context_compact_ratio": "0.5"}, "context_compact_ratio"),
        ({"context_compact_ratio": True}, "context_compact_ratio"),
        ({"context_compact_ratio": [0.5]}, "context_compact_ratio"),
        ({"max_history_messages": -1}, "max_history_messages"),
        ({"max_history_messages": True}, "max_history_messages"),
        ({"max_history_messages": 2.0}, "max_history_messages"),
        ({"max_tool_result_chars": -1}, "max_tool_result_chars"),
        ({"max_tool_result_chars": None}, "max_tool_result_chars"),
        ({"max_tool_result_chars": False}, "max_tool_result_chars"),
        ({"history_pruning": None}, "history_pruning"),
        ({"history_pruning": {"enabled": True}}, "history_pruning"),
    ],
)
def test_e11_invalid_runtime_profile_names_the_field(kwargs: dict[str, object], field: str) -> None:
    """Negative counts, bools as ints, non-numeric ratios raise InvalidProfile naming the field."""
    with pytest.raises(InvalidProfile) as info:
        RuntimeProfile(**kwargs)  # type: ignore[arg-type]
    assert str(info.value).startswith(f"{field}:")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"enabled": "yes"}, "history_pruning.enabled"),
        ({"enabled": 1}, "history_pruning.enabled"),
        ({"enabled": None}, "history_pruning.enabled"),
        ({"max_tokens": -1}, "history_pruning.max_tokens"),
        ({"max_tokens": True}, "history_pruning.max_tokens"),
        ({"max_tokens": None}, "history_pruning.max_tokens"),
        ({"max_tokens": 8192.0}, "history_pruning.max_tokens"),
    ],
)
def test_e11_invalid_history_pruning_names_the_field(kwargs: dict[str, object], field: str) -> None:
    """HistoryPruning rejects a non-bool switch and a negative or non-int max_tokens."""
    with pytest.raises(InvalidProfile) as info:
        HistoryPruning(**kwargs)  # type: ignore[arg-type]
    assert str(info.value).startswith(f"{field}:")


@pytest.mark.parametrize(
    "ratio", [0.0, -0.5, 1.0000001, 1.5, 2, -1, 0, math.nan, math.inf, -math.inf]
)
def test_r14_numeric_ratio_outside_range_is_accepted_and_kept(ratio: float) -> None:
    """A numeric ratio outside (0, 1], NaN or infinite is not a construction error."""
    kept = RuntimeProfile(context_compact_ratio=ratio).context_compact_ratio
    assert kept is not None
    assert (math.isnan(ratio) and math.isnan(kept)) or ratio == kept


def test_e11_invalid_profile_is_a_value_error() -> None:
    """InvalidProfile is catchable as ValueError."""
    with pytest.raises(ValueError, match="max_context_tokens"):
        RuntimeProfile(max_context_tokens=-5)


def test_e11_profile_values_are_frozen_and_hashable() -> None:
    """RuntimeProfile is immutable and usable as a dict key."""
    profile = RuntimeProfile(max_context_tokens=1, history_pruning=HistoryPruning(True, 2))
    with pytest.raises(AttributeError):
        profile.max_context_tokens = 2  # type: ignore[misc]
    same = RuntimeProfile(max_context_tokens=1, history_pruning=HistoryPruning(True, 2))
    expected = 1
    assert expected == {profile: 1}[same]


# --- valid_compact_ratio (R13-R14) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "expected"),
    [
        (None, None),
        (0.29, Fraction(29, 100)),
        (1, Fraction(1)),
        (1.0, Fraction(1)),
        (0.7, Fraction(7, 10)),
        (1e-05, Fraction(1, 100_000)),
        (0.0, None),
        (0, None),
        (-0.1, None),
        (1.01, None),
        (2, None),
        (math.nan, None),
        (math.inf, None),
        (-math.inf, None),
    ],
)
def test_r14_valid_compact_ratio_is_exact_decimal_in_open_closed_unit_interval(
    ratio: float | None, expected: Fraction | None
) -> None:
    """Only finite numbers in (0, 1] are valid, and their value is the exact decimal."""
    actual = valid_compact_ratio(ratio)
    assert expected == (None if actual is None else Fraction(actual))


# --- effective_context_budget: the table (R11-R17) ------------------------------------------

ON_8192 = HistoryPruning(enabled=True, max_tokens=8192)

BUDGET_TABLE = [
    # rule, max_context_tokens, ratio, pruning, capacity, expected
    ("R11 neither set, capacity unknown", None, None, OFF, None, 32_000),
    ("R11 neither set, capacity above 32k", None, None, OFF, 200_000, 32_000),
    ("R11 neither set, capacity below 32k caps", None, None, OFF, 8_000, 8_000),
    ("R11 neither set, capacity exactly 32k", None, None, OFF, 32_000, 32_000),
    ("R12 absolute, capacity unknown, not brought to 32k", 100_000, None, OFF, None, 100_000),
    ("R12 absolute below capacity", 20_000, None, OFF, 128_000, 20_000),
    ("R12 absolute of 1", 1, None, OFF, None, 1),
    ("R17 absolute above capacity is capped", 100_000, None, OFF, 64_000, 64_000),
    ("R12 zero disables", 0, None, OFF, None, 0),
    ("R12 zero with capacity", 0, None, OFF, 128_000, 0),
    ("R12 zero beats ratio", 0, 0.5, OFF, 128_000, 0),
    ("R12 zero beats pruning", 0, None, ON_8192, 128_000, 0),
    ("R12 zero beats everything", 0, 0.9, ON_8192, None, 0),
    ("R13 ratio of capacity", None, 0.5, OFF, 128_000, 64_000),
    ("R13 ratio of 32k fallback", None, 0.5, OFF, None, 16_000),
    ("R13 exact decimal 0.29 x 100", None, 0.29, OFF, 100, 29),
    ("R13 exact decimal 0.57 x 100", None, 0.57, OFF, 100, 57),
    ("R13 exact decimal 0.14 x 100", None, 0.14, OFF, 100, 14),
    ("R13 0.7 x 128000", None, 0.7, OFF, 128_000, 89_600),
    ("R13 rounds down", None, 0.333, OFF, 1_000, 333),
    ("R13 rounds down 2/3-ish", None, 0.6667, OFF, 100, 66),
    ("R13 ratio 1.0 is the whole window", None, 1.0, OFF, 128_000, 128_000),
    ("R13 integer ratio 1", None, 1, OFF, 128_000, 128_000),
    ("R13 ratio on 32k fallback exact", None, 0.29, OFF, None, 9_280),
    ("R13 tiny ratio never rounds to disabled 0", None, 1e-9, OFF, 128_000, 1),
    ("R14 ratio 0 is unset", None, 0.0, OFF, 128_000, 32_000),
    ("R14 negative ratio is unset", None, -0.5, OFF, 128_000, 32_000),
    ("R14 ratio above 1 is unset", None, 1.5, OFF, 128_000, 32_000),
    ("R14 integer ratio 2 is unset", None, 2, OFF, 128_000, 32_000),
    ("R14 NaN is unset", None, math.nan, OFF, 128_000, 32_000),
    ("R14 +inf is unset", None, math.inf, OFF, 128_000, 32_000),
    ("R14 -inf is unset", None, -math.inf, OFF, 128_000, 32_000),
    ("R14 invalid ratio falls back to absolute", 40_000, 1.5, OFF, 128_000, 40_000),
    ("R14 invalid ratio, unknown capacity, absolute", 40_000, math.nan, OFF, None, 40_000),
    ("R14 invalid ratio still capped", None, 7.0, OFF, 8_000, 8_000),
    ("R15 absolute caps the ratio budget", 50_000, 0.8, OFF, 128_000, 50_000),
    ("R15 absolute never raises the ratio budget", 50_000, 0.25, OFF, 128_000, 32_000),
    ("R15 absolute equal to ratio budget", 64_000, 0.5, OFF, 128_000, 64_000),
    ("R17 ratio applies to absolute when capacity unknown", 100_000, 0.5, OFF, None, 50_000),
    ("R17 ratio on absolute operand, exact decimal", 100, 0.29, OFF, None, 29),
    ("R17 ratio 1 on absolute operand", 100_000, 1.0, OFF, None, 100_000),
    ("R17 known capacity is the operand, not absolute", 100_000, 0.5, OFF, 64_000, 32_000),
    ("R16 pruning lowers the default", None, None, ON_8192, None, 8_192),
    ("R16 pruning lowers an absolute", 20_000, None, ON_8192, None, 8_192),
    ("R16 pruning lowers a ratio budget", None, 0.5, ON_8192, 128_000, 8_192),
    ("R16 pruning disabled has no effect", None, None, HistoryPruning(False, 100), None, 32_000),
    ("R16 pruning max_tokens 0 has no effect", None, None, HistoryPruning(True, 0), None, 32_000),
    ("R16 pruning never raises the default", None, None, HistoryPruning(True, 100_000), None,
     32_000),
    ("R16 pruning never raises an absolute", 5_000, None, HistoryPruning(True, 100_000), None,
     5_000),
    ("R16 pruning never raises a ratio budget", None, 0.1, HistoryPruning(True, 100_000), 128_000,
     12_800),
    ("R16+R17 pruning above capacity is capped", 100_000, None, HistoryPruning(True, 50_000),
     40_000, 40_000),
    ("R16 pruning below capacity wins", None, None, HistoryPruning(True, 1_000), 8_000, 1_000),
]


@pytest.mark.parametrize(
    ("mct", "ratio", "pruning", "capacity", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in BUDGET_TABLE],
)
def test_r11_to_r17_budget_table(
    mct: int | None,
    ratio: float | None,
    pruning: HistoryPruning,
    capacity: int | None,
    expected: int,
) -> None:
    """effective_context_budget matches the worked table of R11-R17, row by row."""
    assert expected == effective_context_budget(_profile(mct, ratio, pruning), capacity)


@pytest.mark.parametrize("percent", range(1, 101))
def test_r13_every_whole_percent_of_100_is_exact(percent: int) -> None:
    """ratio k/100 of a 100-token window is exactly k tokens (no binary-float undershoot)."""
    assert percent == effective_context_budget(_profile(ratio=percent / 100), 100)


@given(
    numerator=st.integers(min_value=1, max_value=10_000),
    window=st.integers(min_value=1, max_value=2_000_000),
)
def test_r13_ratio_budget_is_floor_of_exact_decimal_product(numerator: int, window: int) -> None:
    """For any 4-decimal ratio, budget == max(1, floor(decimal ratio x window))."""
    text = f"{numerator / 10_000:.4f}"
    expected = max(1, math.floor(Fraction(text) * window))
    assert expected == effective_context_budget(_profile(ratio=float(text)), window)


@pytest.mark.parametrize("capacity", [0, -1, True, 1.5, "128000"])
def test_r19_capacity_must_be_positive_int_or_none(capacity: object) -> None:
    """A capacity of 0, negative, bool or non-int is rejected by both computations."""
    with pytest.raises(InvalidProfile, match="capacity"):
        effective_context_budget(RuntimeProfile(), capacity)  # type: ignore[arg-type]
    with pytest.raises(InvalidProfile, match="capacity"):
        request_window(RuntimeProfile(), capacity)  # type: ignore[arg-type]


# --- effective_context_budget: properties ---------------------------------------------------

counts = st.none() | st.just(0) | st.integers(min_value=1, max_value=10_000_000)
ratios = (
    st.none()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(min_value=0.0, max_value=1.0)
    | st.integers(min_value=-2, max_value=2)
)
prunings = st.builds(
    HistoryPruning, st.booleans(), st.integers(min_value=0, max_value=10_000_000)
)
profiles = st.builds(
    RuntimeProfile,
    max_context_tokens=counts,
    context_compact_ratio=ratios,
    history_pruning=prunings,
)
capacities = st.none() | st.integers(min_value=1, max_value=10_000_000)
known_capacities = st.integers(min_value=1, max_value=10_000_000)


@given(profile=profiles, capacity=known_capacities)
def test_r17_budget_never_exceeds_known_capacity(profile: RuntimeProfile, capacity: int) -> None:
    """Whatever the profile, the budget is at most the known capacity."""
    assert effective_context_budget(profile, capacity) <= capacity


@given(profile=profiles, capacity=capacities, pruning_tokens=st.integers(0, 10_000_000))
def test_r16_pruning_never_raises_the_budget(
    profile: RuntimeProfile, capacity: int | None, pruning_tokens: int
) -> None:
    """Enabling history pruning can only lower the budget, never raise it."""
    without = RuntimeProfile(
        max_context_tokens=profile.max_context_tokens,
        context_compact_ratio=profile.context_compact_ratio,
        history_pruning=HistoryPruning(False, pruning_tokens),
    )
    with_pruning = RuntimeProfile(
        max_context_tokens=profile.max_context_tokens,
        context_compact_ratio=profile.context_compact_ratio,
        history_pruning=HistoryPruning(True, pruning_tokens),
    )
    assert effective_context_budget(with_pruning, capacity) <= effective_context_budget(
        without, capacity
    )


@given(ratio=ratios, pruning=prunings, capacity=capacities)
def test_r12_explicit_zero_stays_zero(
    ratio: float | None, pruning: HistoryPruning, capacity: int | None
) -> None:
    """max_context_tokens = 0 gives a budget of 0 whatever else is configured."""
    expected = 0
    assert expected == effective_context_budget(_profile(0, ratio, pruning), capacity)


@given(profile=profiles, capacity=capacities)
def test_r12_only_explicit_zero_gives_zero(profile: RuntimeProfile, capacity: int | None) -> None:
    """A budget is 0 exactly when max_context_tokens is explicitly 0 (no accidental disabling)."""
    budget = effective_context_budget(profile, capacity)
    assert (profile.max_context_tokens == 0) == (budget == 0)


@given(profile=profiles, capacity=capacities)
def test_r18_budget_never_exceeds_request_window(
    profile: RuntimeProfile, capacity: int | None
) -> None:
    """The proactive target always fits inside the R18 safety window."""
    assert effective_context_budget(profile, capacity) <= request_window(profile, capacity)


@given(profile=profiles, capacity=capacities)
def test_r14_invalid_ratio_behaves_exactly_as_unset(
    profile: RuntimeProfile, capacity: int | None
) -> None:
    """When the ratio is not in (0, 1], the budget equals the one with no ratio at all."""
    if valid_compact_ratio(profile.context_compact_ratio) is not None:
        return
    unset = RuntimeProfile(
        max_context_tokens=profile.max_context_tokens, history_pruning=profile.history_pruning
    )
    assert effective_context_budget(unset, capacity) == effective_context_budget(profile, capacity)


@given(profile=profiles, low=known_capacities, high=known_capacities)
def test_r17_budget_is_monotone_in_capacity(
    profile: RuntimeProfile, low: int, high: int
) -> None:
    """A larger known capacity never gives a smaller budget."""
    low, high = min(low, high), max(low, high)
    assert effective_context_budget(profile, low) <= effective_context_budget(profile, high)


@given(
    mct=counts,
    first=st.floats(min_value=0.0, max_value=1.0, exclude_min=True),
    second=st.floats(min_value=0.0, max_value=1.0, exclude_min=True),
    capacity=capacities,
)
def test_r13_budget_is_monotone_in_ratio(
    mct: int | None, first: float, second: float, capacity: int | None
) -> None:
    """A larger valid ratio never gives a smaller budget."""
    low, high = min(first, second), max(first, second)
    assert effective_context_budget(_profile(mct, low), capacity) <= effective_context_budget(
        _profile(mct, high), capacity
    )


@given(
    mct=st.integers(min_value=1, max_value=10_000_000),
    ratio=st.floats(min_value=0.0, max_value=1.0, exclude_min=True),
    capacity=capacities,
)
def test_r15_absolute_caps_the_ratio_budget(
    mct: int, ratio: float, capacity: int | None
) -> None:
    """With both set, the budget is the smaller of the ratio-only budget and the absolute one."""
    ratio_only = effective_context_budget(_profile(None, ratio), capacity)
    if capacity is None:
        ratio_only = effective_context_budget(_profile(None, ratio), mct)  # R17 operand
    assert min(ratio_only, mct) == effective_context_budget(_profile(mct, ratio), capacity)


# --- request_window (R18) -------------------------------------------------------------------

WINDOW_TABLE = [
    ("capacity known wins over a larger absolute", 200_000, None, 128_000, 128_000),
    ("capacity known wins over a smaller absolute", 20_000, None, 128_000, 128_000),
    ("capacity known, nothing set", None, None, 8_000, 8_000),
    ("capacity unknown, positive absolute", 100_000, None, None, 100_000),
    ("capacity unknown, absolute below 32k", 4_000, None, None, 4_000),
    ("capacity unknown, nothing set", None, None, None, 32_000),
    ("capacity unknown, trimming disabled still has a window", 0, None, None, 32_000),
    ("capacity known, trimming disabled", 0, None, 64_000, 64_000),
    ("ratio does not shrink the window", None, 0.1, 128_000, 128_000),
    ("ratio does not shrink the fallback", 100_000, 0.1, None, 100_000),
]


@pytest.mark.parametrize(
    ("mct", "ratio", "capacity", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in WINDOW_TABLE],
)
def test_r18_request_window_table(
    mct: int | None, ratio: float | None, capacity: int | None, expected: int
) -> None:
    """The safety window: capacity, else positive max_context_tokens, else 32,000."""
    assert expected == request_window(_profile(mct, ratio), capacity)


def test_r18_request_window_ignores_history_pruning() -> None:
    """Pruning lowers the proactive target, not the request window."""
    expected = 32_000
    assert expected == request_window(_profile(pruning=HistoryPruning(True, 10)), None)


# --- provider profiles and aliases (R19) ----------------------------------------------------

OPENAI = ProviderProfile(
    "openai",
    "gpt-4o",
    128_000,
    {"fast": ("gpt-4o-mini", 64_000), "mini": ("gpt-4o-mini", 64_000), "blind": ("o3", None)},
)
ANTHROPIC = ProviderProfile("anthropic", "claude-sonnet", 200_000)
LOCAL = ProviderProfile("local", "llama3")
SPLIT = ProviderProfile(
    "split", "base", 10_000, {"a": ("shared", 1_000), "b": ("shared", 2_000)}
)
PROVIDERS = (OPENAI, ANTHROPIC, LOCAL, SPLIT)


def test_r19_aliases_are_stored_as_model_alias_tuples() -> None:
    """Alias values become ModelAlias(model, context_window), still equal to plain tuples."""
    alias = OPENAI.aliases["fast"]
    assert (ModelAlias("gpt-4o-mini", 64_000), ("gpt-4o-mini", 64_000), "gpt-4o-mini", 64_000) == (
        alias,
        alias,
        alias.model,
        alias.context_window,
    )


def test_r19_alias_map_is_immutable_hashable_and_ordered_by_key() -> None:
    """AliasMap has a stable key order, a hash, equality with dicts, and no mutation."""
    aliases = AliasMap({"b": ("m2", None), "a": ("m1", 5)})
    expected_items = {"a": ("m1", 5), "b": ("m2", None)}
    other_items = {"a": ("m1", 6), "b": ("m2", None)}
    expected_order = ["a", "b"]
    assert expected_order == list(aliases)
    assert AliasMap([("a", ("m1", 5)), ("b", ("m2", None))]) == aliases
    assert hash(AliasMap(expected_items)) == hash(aliases)
    assert expected_items == aliases
    assert other_items != aliases
    with pytest.raises(AttributeError):
        aliases._items = ()  # noqa: SLF001  # proves the private field cannot be rebound
    with pytest.raises(TypeError):
        aliases["c"] = ("m3", 1)  # type: ignore[index]
    with pytest.raises(KeyError):
        aliases["missing"]


def test_r19_provider_profile_is_hashable_and_aliases_default_empty() -> None:
    """ProviderProfile hashes (aliases included) and defaults to no alias."""
    expected = 0
    assert expected == len(LOCAL.aliases)
    same = ProviderProfile("openai", "gpt-4o", 128_000, dict(OPENAI.aliases))
    assert expected + 1 == {OPENAI: 1}[same]


def test_r19_alias_map_repr_shows_its_items() -> None:
    """The repr of an alias map is readable."""
    expected = "AliasMap({'a': ModelAlias(model='m', context_window=None)})"
    assert expected == repr(AliasMap({"a": ("m", None)}))


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("", "m"), "name"),
        ((None, "m"), "name"),
        (("p", ""), "model"),
        (("p", 5), "model"),
        (("p", "m", 0), "context_window"),
        (("p", "m", -1), "context_window"),
        (("p", "m", True), "context_window"),
        (("p", "m", 1.5), "context_window"),
        (("p", "m", None, {"": ("x", 1)}), "aliases key"),
        (("p", "m", None, {"a": ("", 1)}), "aliases.a.model"),
        (("p", "m", None, {"a": ("x", 0)}), "aliases.a.context_window"),
        (("p", "m", None, {"a": ("x", -3)}), "aliases.a.context_window"),
        (("p", "m", None, {"a": ("x", False)}), "aliases.a.context_window"),
        (("p", "m", None, {"a": "x"}), "aliases.a"),
        (("p", "m", None, {"a": ("x", 1, 2)}), "aliases.a"),
        (("p", "m", None, {"m": ("x", 1)}), "aliases.m"),
        (("p", "m", None, "fast"), "aliases"),
        (("p", "m", None, 3), "aliases"),
        (("p", "m", None, ["fast"]), "aliases"),
    ],
)
def test_e11_invalid_provider_profile_names_the_field(args: tuple[object, ...], field: str) -> None:
    """Empty names or models, non-positive windows and malformed aliases raise InvalidProfile."""
    with pytest.raises(InvalidProfile) as info:
        ProviderProfile(*args)  # type: ignore[arg-type]
    assert str(info.value).startswith(f"{field}:")


@pytest.mark.parametrize(
    ("args", "field"),
    [(("", "m"), "route.provider"), (("p", ""), "route.model"), ((1, "m"), "route.provider")],
)
def test_e11_invalid_route_names_the_field(args: tuple[object, ...], field: str) -> None:
    """A route needs a non-empty provider and model."""
    with pytest.raises(InvalidProfile) as info:
        Route(*args)  # type: ignore[arg-type]
    assert str(info.value).startswith(f"{field}:")


CAPACITY_TABLE = [
    ("provider's own model", "openai", "gpt-4o", 128_000),
    ("alias key gives the alias window", "openai", "fast", 64_000),
    ("alias key without a window is unknown, not the provider's", "openai", "blind", None),
    ("alias target model, aliases agree", "openai", "gpt-4o-mini", 64_000),
    ("alias target model without a window", "openai", "o3", None),
    ("another model on the provider is unknown", "openai", "gpt-3.5-turbo", None),
    ("another provider's model is never borrowed", "openai", "claude-sonnet", None),
    ("other provider, own model", "anthropic", "claude-sonnet", 200_000),
    ("other provider, first provider's model", "anthropic", "gpt-4o", None),
    ("other provider, first provider's alias key", "anthropic", "fast", None),
    ("provider without a window", "local", "llama3", None),
    ("unknown provider", "mistral", "gpt-4o", None),
    ("alias target model, aliases disagree", "split", "shared", None),
    ("alias key on a split target keeps its own window", "split", "b", 2_000),
    ("provider model next to split aliases", "split", "base", 10_000),
    ("model names are case-sensitive", "openai", "GPT-4o", None),
]


@pytest.mark.parametrize(
    ("provider", "model", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in CAPACITY_TABLE],
)
def test_r19_resolve_capacity_table(provider: str, model: str, expected: int | None) -> None:
    """Capacity is the selected model's own window or unknown; never another model's."""
    assert expected == resolve_capacity(PROVIDERS, Route(provider, model))


def test_r19_resolve_capacity_without_providers_is_unknown() -> None:
    """No provider profiles at all: the capacity is unknown."""
    assert None is resolve_capacity([], Route("openai", "gpt-4o"))


def test_r19_duplicate_provider_names_are_rejected() -> None:
    """Two profiles with one name are ambiguous: InvalidProfile naming the provider."""
    twin = ProviderProfile("openai", "gpt-4o", 8_000)
    with pytest.raises(InvalidProfile, match=r"providers\.openai"):
        resolve_capacity([OPENAI, twin], Route("openai", "gpt-4o"))
    with pytest.raises(InvalidProfile, match=r"providers\.openai"):
        find_provider([OPENAI, twin], "openai")


def test_r19_find_provider_by_name() -> None:
    """find_provider returns the named profile, or None."""
    expected = (ANTHROPIC, None)
    assert expected == (find_provider(PROVIDERS, "anthropic"), find_provider(PROVIDERS, "x"))


@pytest.mark.parametrize(
    ("model", "expected"),
    [("fast", "gpt-4o-mini"), ("blind", "o3"), ("gpt-4o", "gpt-4o"), ("other", "other")],
)
def test_r19_dispatch_model_resolves_alias_keys(model: str, expected: str) -> None:
    """An alias key dispatches its target model; any other name is sent as is."""
    assert expected == OPENAI.dispatch_model(model)


# --- resolve_route (R19) --------------------------------------------------------------------


def test_r19_resolve_route_alias_pairs_capacity_budget_and_window() -> None:
    """An alias route resolves its own window, the budget on it, and the dispatched model."""
    route = Route("openai", "fast")
    actual = resolve_route(_profile(ratio=0.5), PROVIDERS, route)
    expected = ResolvedRoute(route, 64_000, 32_000, 64_000, dispatch_model="gpt-4o-mini")
    assert expected == actual
    assert (expected.model, 64_000) == (actual.model, actual.model_context_window)


def test_r19_resolve_route_unknown_model_sends_no_window_but_keeps_fallback() -> None:
    """Unknown capacity: clients get no model_context_window; safety arithmetic uses 32,000."""
    route = Route("openai", "gpt-3.5-turbo")
    actual = resolve_route(RuntimeProfile(), PROVIDERS, route)
    assert ResolvedRoute(route, None, 32_000, 32_000) == actual
    assert (None, route.model) == (actual.model_context_window, actual.model)


def test_r19_resolve_route_unknown_capacity_respects_absolute_budget() -> None:
    """Unknown capacity with a positive max_context_tokens: budget and window are that value."""
    route = Route("local", "llama3")
    actual = resolve_route(_profile(mct=100_000, ratio=0.5), PROVIDERS, route)
    assert ResolvedRoute(route, None, 50_000, 100_000) == actual


def test_r19_resolve_route_switch_changes_the_pair() -> None:
    """Switching the route re-resolves capacity and budget for the new model."""
    profile = _profile(ratio=0.5)
    first = resolve_route(profile, PROVIDERS, Route("openai", "gpt-4o"))
    second = resolve_route(profile, PROVIDERS, Route("anthropic", "claude-sonnet"))
    expected = ((128_000, 64_000), (200_000, 100_000))
    assert expected == (
        (first.capacity, first.budget),
        (second.capacity, second.budget),
    )


def test_r19_resolve_route_disabled_budget_still_has_window() -> None:
    """max_context_tokens = 0: budget 0, window still the capacity (R18 check still applies)."""
    actual = resolve_route(_profile(mct=0), PROVIDERS, Route("anthropic", "claude-sonnet"))
    expected = (0, 200_000)
    assert expected == (actual.budget, actual.window)


@given(profile=profiles, index=st.integers(0, len(CAPACITY_TABLE) - 1))
def test_r19_resolve_route_agrees_with_the_separate_functions(
    profile: RuntimeProfile, index: int
) -> None:
    """resolve_route computes the same pair as resolve_capacity + effective_context_budget."""
    _, provider, model, _ = CAPACITY_TABLE[index]
    route = Route(provider, model)
    capacity = resolve_capacity(PROVIDERS, route)
    expected = (
        capacity,
        effective_context_budget(profile, capacity),
        request_window(profile, capacity),
    )
    actual = resolve_route(profile, PROVIDERS, route)
    assert expected == (actual.capacity, actual.budget, actual.window)
