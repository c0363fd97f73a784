"""Budget and route configuration: runtime/provider profiles, capacity and the token budget.

This module is the one place where the token budget (R11-R17), the request safety window
(R18) and the capacity of a provider/model route (R19) are decided. Everything here is pure:
`parse_profile_document` validates a profile file's parsed TOML; `turnledger.profiles` reads it.

Profile file (TOML)
-------------------

Every key is optional; an unknown key anywhere is an error. Counts are non-negative integers
(``true``/``false`` are not integers); ``context_compact_ratio`` is any TOML number (integer or
float, ``nan`` and ``inf`` included), and a number outside (0, 1] is treated as unset (R14)::

    # Absolute proactive budget in estimated tokens; 0 disables proactive trimming (R12).
    max_context_tokens = 100000
    # Budget relative to the model's context window (R13); outside (0, 1] means unset (R14).
    context_compact_ratio = 0.7
    # Turn limit: unit is one complete user turn, not a message row; default 50 (R28-R29).
    max_history_messages = 50
    # Bound on one tool result when it is recorded, in characters; 0 = no bound (R38).
    max_tool_result_chars = 50000

    [history_pruning]          # lowers the budget, never raises it (R16)
    enabled = true
    max_tokens = 8192

    [pricing]                  # content that is not text (issue 21; defaults shown)
    image_by_size = false      # opt-in: an inline image by its pixel size
    document_page_tokens = 1500


    [compaction]               # opt-in stages (issue 24); off by default
    clear_tool_results = false # older tool results' contents become a placeholder
    keep_tool_result_turns = 3 # ... outside the newest 3 turns (at least 1)
    low_water = 0.6            # a forced trim drops to 60 % of the budget / turn limit
                               # (issue 35); absent: just below the limit (the spec's trim)

    [providers.openai]         # the table key is the provider name
    model = "gpt-4o"           # required
    context_window = 128000    # optional, positive; absent = capacity unknown (R19)

    api = "openai_chat"        # optional: the request API (openai_chat, openai_responses,
                               # anthropic); a prepared request then builds its body

    [providers.openai.aliases] # optional: alias key -> the model dispatched, and its window
    fast = { model = "gpt-4o-mini", context_window = 128000 }
    cheap = { model = "gpt-4o-mini" }   # context_window is optional here too

    [route]                    # optional default route
    provider = "openai"        # must name a table under [providers]
    model = "fast"             # the provider's model, an alias key, or any other model name

Errors raise `InvalidProfile` with the file and the dotted key, e.g.
``profile.toml: providers.openai.context_window: must be a positive integer or absent, got -1``.

Capacity of a route (R19)
-------------------------

`resolve_capacity` finds the provider profile named by ``route.provider`` and, in this order:
``route.model`` equal to the profile's ``model`` gives its ``context_window``; ``route.model``
equal to an alias key gives that alias's window (the alias's model is what is dispatched);
``route.model`` equal to the *target model* of one or more aliases gives their window when they
all declare the same one. Anything else — another model, an unknown provider — is *unknown*
(``None``): another model's metadata is never borrowed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import ROUND_FLOOR, Decimal
from typing import Any, Final, NamedTuple, final

import attrs

# The request APIs a provider can name are those the body conversions know (issue 21).
from turnledger.domain.arguments import is_int, is_number
from turnledger.domain.bodies import check_api
from turnledger.domain.errors import InvalidProfile
from turnledger.domain.pricing import SPEC_PRICING, Pricing

# The tool-result bound (R38) is defined once, by the truncation rule; re-exported here because
# it is also a RuntimeProfile default.
from turnledger.domain.truncate import DEFAULT_MAX_TOOL_RESULT_CHARS

__all__ = [
    "BILLED_KEPT",
    "DEFAULT_CONTEXT_TOKENS",
    "DEFAULT_MAX_HISTORY_TURNS",
    "DEFAULT_MAX_TOOL_RESULT_CHARS",
    "MAX_CORRECTION",
    "AliasMap",
    "Compaction",
    "HistoryPruning",
    "ModelAlias",
    "ProfileDocument",
    "ProviderProfile",
    "ResolvedRoute",
    "Route",
    "RuntimeProfile",
    "corrected_limit",
    "effective_context_budget",
    "estimate_correction",
    "find_provider",
    "low_water_tokens",
    "low_water_turns",
    "parse_profile_document",
    "request_window",
    "resolve_capacity",
    "resolve_route",
    "session_pricing",
    "valid_compact_ratio",
]

DEFAULT_CONTEXT_TOKENS: Final = 32_000
"""The historical budget, and the window operand when nothing better is known (R11, R13, R17)."""

DEFAULT_MAX_HISTORY_TURNS: Final = 50
"""The turn limit when ``max_history_messages`` is not configured (R29)."""


MAX_STORED_INT: Final = 2**63 - 1
"""The largest integer a profile may hold: it must fit the signed 64-bit integers of the store."""
MIN_STORED_INT: Final = -(2**63)

# --- shared value checks --------------------------------------------------------------------
# One definition per rule, used by the constructors (field names) and by the TOML loader
# (dotted keys), so both report the same thing in the same words; what an int or a number is
# (never a bool: `enabled = true` in a count slot is a config mistake) is `arguments`'.

def _check_stored_range(key: str, value: int) -> None:
    # Every profile is recorded in the session's first event (msgpack, PostgreSQL bigint):
    # refuse here, naming the key, what could not be stored later (E11).
    if not MIN_STORED_INT <= value <= MAX_STORED_INT:
        raise InvalidProfile(
            f"{key}: must be between {MIN_STORED_INT} and {MAX_STORED_INT}, got {value!r}"
        )


def _check_count(key: str, value: object, *, optional: bool) -> None:
    """A non-negative integer (R12, R16, R29, R38); ``None`` only when ``optional``."""
    if value is None and optional:
        return
    if not is_int(value) or value < 0:
        kind = "a non-negative integer" + (" or absent" if optional else "")
        raise InvalidProfile(f"{key}: must be {kind}, got {value!r}")
    _check_stored_range(key, value)


def _check_window(key: str, value: object) -> None:
    """A context window: a positive integer, or ``None`` for unknown (R19)."""
    if value is None:
        return
    if not is_int(value) or value <= 0:
        raise InvalidProfile(f"{key}: must be a positive integer or absent, got {value!r}")
    _check_stored_range(key, value)


def _check_ratio(key: str, value: object) -> None:
    """Any int or float is accepted: a number outside (0, 1] is unset, not an error (R14).

    An integer ratio must still be storable (a 64-bit integer); a larger one is refused.
    """
    if value is None:
        return
    if not is_number(value):
        raise InvalidProfile(f"{key}: must be a number or absent, got {value!r}")
    if isinstance(value, int):
        _check_stored_range(key, value)


def _check_name(key: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidProfile(f"{key}: must be a non-empty string, got {value!r}")


def _check_bool(key: str, value: object) -> None:
    if not isinstance(value, bool):
        raise InvalidProfile(f"{key}: must be true or false, got {value!r}")


# --- runtime profile ------------------------------------------------------------------------

@attrs.frozen
class HistoryPruning:
    """Operator knob that lowers the token budget to trim earlier (R16).

    It applies only when ``enabled`` is true and ``max_tokens`` is positive; it never raises
    the budget. Raises `InvalidProfile` for a non-bool ``enabled`` or a negative ``max_tokens``.
    """

    enabled: bool = False
    max_tokens: int = 8192

    def __attrs_post_init__(self) -> None:
        _check_bool("history_pruning.enabled", self.enabled)
        _check_count("history_pruning.max_tokens", self.max_tokens, optional=False)


def _check_low_water(key: str, value: object) -> None:
    """A fraction strictly between 0 and 1, or None (issue 35). Unlike a ratio (R14), a bad
    value is an error: it cannot mean "unset", and 0 or 1 would empty the window or trim on
    every request."""
    if value is None:
        return
    if not is_number(value) or not math.isfinite(value) or not 0 < value < 1:
        raise InvalidProfile(
            f"{key}: must be a number strictly between 0 and 1 or absent, got {value!r}"
        )


@attrs.frozen
class Compaction:
    """The compaction stages a profile opts into (issue 24); all off by default (ADR-0086).

    ``clear_tool_results``: before whole turns are dropped for the token budget, the contents
    of the tool results outside the newest ``keep_tool_result_turns`` turns of the chat view
    are replaced by a placeholder naming what was cleared (`ToolResultsCleared`). Raises
    `InvalidProfile` for a non-bool switch or a turn count below 1 (the newest turn's
    results are the ones the model is answering).

    ``low_water`` (issue 35, ADR-0104): a fraction in (0, 1). A trim is still forced only when
    the limit is exceeded, but it then drops whole oldest turns down to ``low_water`` × the
    token budget (`low_water_tokens`), or to ``floor(low_water × turn limit)`` turns, at least
    one (`low_water_turns`), instead of just below the limit, so the kept prefix stays
    byte-identical for the requests until the next forced trim, which a provider's prompt
    cache can serve. With it, tool-result clearing waits for a forced budget trim and is
    done in the same request (one change of the prefix, not one per turn). None (the
    default): the spec's trim. Raises `InvalidProfile` naming ``compaction.low_water`` for
    anything but a finite number strictly between 0 and 1.

    ``learn_estimate`` (issue 35, ADR-0107): once the provider's usage is recorded
    (`Session.record_usage`), a token-budget trim trims as if each estimated token were
    `estimate_correction` tokens: the input billed over the estimate of the session's newest
    `BILLED_KEPT` billed requests, between 1 and `MAX_CORRECTION`. An estimate above the bill
    is left as it is: the budget is never loosened, every window still fits it by the
    estimate. The correction is recorded in the `TrimDecided` it changed. Off by default.
    """

    clear_tool_results: bool = False
    keep_tool_result_turns: int = 3
    low_water: float | None = None
    learn_estimate: bool = False

    def __attrs_post_init__(self) -> None:
        _check_bool("compaction.clear_tool_results", self.clear_tool_results)
        _check_count("compaction.keep_tool_result_turns", self.keep_tool_result_turns,
                     optional=False)
        if self.keep_tool_result_turns < 1:
            raise InvalidProfile(
                "compaction.keep_tool_result_turns: must be at least 1 (the newest turn's "
                f"results are always kept), got {self.keep_tool_result_turns}"
            )
        _check_low_water("compaction.low_water", self.low_water)
        _check_bool("compaction.learn_estimate", self.learn_estimate)


BILLED_KEPT: Final = 8
"""How many of a session's newest billed requests an estimate learns from (issue 35)."""
MAX_CORRECTION: Final = 2.0
"""The largest correction an estimate learns: twice the estimate (issue 35)."""


def estimate_correction(billed: Sequence[tuple[int, int]], learn: bool) -> float | None:
    """What a session's estimate is multiplied by (issue 35, `Compaction.learn_estimate`):
    the input billed over the estimate of ``billed`` (``(billed, estimated)`` pairs, the
    newest `BILLED_KEPT`), bounded to [1, `MAX_CORRECTION`] and rounded to 4 decimals (a
    value a record holds exactly enough to decide again); None when not learning, nothing
    was billed yet, or the bill is at most the estimate (nothing to correct)."""
    if not learn:
        return None
    estimated = sum(e for _, e in billed)
    if estimated <= 0:
        return None
    ratio = round(min(sum(b for b, _ in billed) / estimated, MAX_CORRECTION), 4)
    return ratio if ratio > 1 else None


def corrected_limit(limit: int, correction: float | None) -> int:
    """``limit`` estimated tokens as a budget under ``correction``: ``floor(limit /
    correction)``, computed on the decimal value; ``limit`` itself without one."""
    if correction is None:
        return limit
    return int((Decimal(limit) / Decimal(repr(correction))).to_integral_value(
        rounding=ROUND_FLOOR))


def _low_water_share(limit: int, low_water: float) -> int:
    # Exact, as the ratio's budget is (R13): 0.6 is 6/10, not the binary float below it.
    return int((Decimal(repr(low_water)) * limit).to_integral_value(rounding=ROUND_FLOOR))


def low_water_tokens(budget: int, low_water: float | None) -> int:
    """The estimate a forced budget trim drops to (issue 35): ``floor(low_water × budget)``,
    computed on the decimal value; the budget itself without a low water (the spec's trim).
    Never above the budget; it may be 0, which keeps the newest turn alone (R6)."""
    return budget if low_water is None else _low_water_share(budget, low_water)


def low_water_turns(max_turns: int, low_water: float | None) -> int:
    """How many turns a forced turn-limit trim keeps (issue 35): ``floor(low_water ×
    max_turns)``, at least 1 (R6); without a low water ``max(max_turns, 1)`` (R29)."""
    if low_water is None:
        return max(max_turns, 1)
    return max(1, _low_water_share(max_turns, low_water))


@attrs.frozen
class RuntimeProfile:
    """The history settings of one agent runtime (R11-R17, R28-R29, R38).

    ``max_context_tokens``: absolute budget in estimated tokens; ``0`` disables proactive token
    trimming (R12); ``None`` is unset. ``context_compact_ratio``: budget relative to the model's
    window (R13); a number outside (0, 1], NaN or infinite is kept as configured but treated as
    unset (R14). ``max_history_messages``: the turn limit, in complete user turns (R28); ``None``
    means 50 (R29), ``0`` keeps only the newest turn. ``max_tool_result_chars``: bound on one tool
    result, ``0`` = no bound (R38).

    Raises `InvalidProfile`, naming the field, for a negative count, a bool or non-int count, a
    ratio that is not a number, or a ``history_pruning`` that is not a `HistoryPruning`.
    """

    max_context_tokens: int | None = None
    context_compact_ratio: float | None = None
    history_pruning: HistoryPruning = attrs.field(factory=HistoryPruning)
    max_history_messages: int | None = None
    max_tool_result_chars: int = DEFAULT_MAX_TOOL_RESULT_CHARS
    pricing: Pricing | None = attrs.field(default=None, kw_only=True)
    """How the estimate prices content that is not text (issue 21, `Pricing`). None: not
    chosen; a session started with it records the default `Pricing()`, so its record says how
    it priced. A recorded profile without pricing is a session started before issue 21: it
    priced every block by its text (`session_pricing`)."""
    compaction: Compaction = attrs.field(factory=Compaction, kw_only=True)
    """The opt-in compaction stages (issue 24); stored only when not the default, so a
    default profile records the same bytes as before."""

    def __attrs_post_init__(self) -> None:
        if self.pricing is not None and not isinstance(self.pricing, Pricing):
            raise InvalidProfile(f"pricing: must be a Pricing, got {type(self.pricing).__name__}")
        _check_count("max_context_tokens", self.max_context_tokens, optional=True)
        _check_ratio("context_compact_ratio", self.context_compact_ratio)
        if not isinstance(self.history_pruning, HistoryPruning):
            raise InvalidProfile(
                "history_pruning: must be a HistoryPruning, "
                f"got {type(self.history_pruning).__name__}"
            )
        _check_count("max_history_messages", self.max_history_messages, optional=True)
        _check_count("max_tool_result_chars", self.max_tool_result_chars, optional=False)
        if not isinstance(self.compaction, Compaction):
            raise InvalidProfile(
                f"compaction: must be a Compaction, got {type(self.compaction).__name__}"
            )

    @property
    def max_history_turns(self) -> int:
        """The turn limit in complete user turns: as configured, 0 included, else 50 (R29)."""
        if self.max_history_messages is None:
            return DEFAULT_MAX_HISTORY_TURNS
        return self.max_history_messages


def session_pricing(profile: RuntimeProfile) -> Pricing:
    """The pricing a session's recorded ``profile`` estimated with (issue 21): its own, or, for
    a session recorded before issue 21 (no pricing), R20-R23 alone (`Pricing.spec`)."""
    return profile.pricing if profile.pricing is not None else SPEC_PRICING


def valid_compact_ratio(ratio: float | None) -> Decimal | None:
    """The ratio as an exact decimal when it is a finite number in (0, 1], else None (R13-R14).

    The decimal is built from ``repr`` (the shortest text that round-trips the float), so 0.29 is
    exactly 29/100 and not the binary float 0.28999999999999998.
    """
    if ratio is None or not is_number(ratio):
        return None
    if not math.isfinite(ratio) or not 0 < ratio <= 1:
        return None
    return Decimal(repr(ratio))


def _check_capacity(capacity: int | None) -> None:
    _check_window("capacity", capacity)


def effective_context_budget(profile: RuntimeProfile, capacity: int | None) -> int:
    """The proactive trimming target in estimated tokens; 0 means disabled (R11-R17).

    ``capacity`` is the selected route's context window, ``None`` when unknown (R19). In order:
    an explicit ``max_context_tokens = 0`` gives 0 whatever else is set (R12). A valid ratio gives
    ``floor(ratio × window)``, computed on the decimal value (R13), capped by a positive
    ``max_context_tokens`` (R15); the window operand is the capacity, else a positive
    ``max_context_tokens``, else 32,000 (R17). Without a valid ratio a positive
    ``max_context_tokens`` is the budget (R12), and with neither the budget is 32,000 (R11).
    An enabled ``history_pruning`` with positive ``max_tokens`` then lowers it (R16), and a known
    capacity caps it (R17).

    A ratio-derived budget is never below 1: a tiny ratio asks for early trimming, and letting it
    round down to 0 would silently *disable* trimming (0 is the R12 sentinel).

    Raises `InvalidProfile` when ``capacity`` is not a positive int or None.
    """
    _check_capacity(capacity)
    absolute = profile.max_context_tokens
    if absolute == 0:
        return 0  # R12: the explicit zero is a switch, not a number to combine.
    ratio = valid_compact_ratio(profile.context_compact_ratio)
    if ratio is not None:
        window = request_window(profile, capacity)
        derived = int((ratio * window).to_integral_value(rounding=ROUND_FLOOR))
        budget = max(1, derived)
        if absolute is not None:
            budget = min(budget, absolute)  # R15: only downward.
    elif absolute is not None:
        budget = absolute
    else:
        budget = DEFAULT_CONTEXT_TOKENS
    pruning = profile.history_pruning
    if pruning.enabled and pruning.max_tokens > 0:
        budget = min(budget, pruning.max_tokens)
    if capacity is not None:
        budget = min(budget, capacity)
    return budget


def request_window(profile: RuntimeProfile, capacity: int | None) -> int:
    """The window a prepared request must fit, in estimated tokens (R17 operand, R18).

    The capacity when known; else a positive ``max_context_tokens`` (R17: the operator's number
    is respected, not brought down to the 32,000 stub); else 32,000. It does not depend on the
    ratio or on history pruning, and an explicit ``max_context_tokens = 0`` still gets a window
    (R18: the capacity check applies when proactive trimming is disabled).

    Raises `InvalidProfile` when ``capacity`` is not a positive int or None.
    """
    _check_capacity(capacity)
    if capacity is not None:
        return capacity
    if profile.max_context_tokens:
        return profile.max_context_tokens
    return DEFAULT_CONTEXT_TOKENS


# --- provider profiles and routes -----------------------------------------------------------

class ModelAlias(NamedTuple):
    """What an alias key dispatches: a model name and its context window (None = unknown)."""

    model: str
    context_window: int | None = None


@final
class AliasMap(Mapping[str, ModelAlias]):
    """An immutable, hashable ``alias key -> ModelAlias`` mapping, ordered by key.

    Equal to any mapping with the same items (``AliasMap({"a": ("m", 1)}) == {"a": ("m", 1)}``).
    Raises `InvalidProfile` for an empty key, an empty model or a non-positive window.
    """

    __slots__ = ("_items",)

    _items: tuple[tuple[str, ModelAlias], ...]

    def __init__(
        self,
        aliases: Mapping[str, tuple[str, int | None]] | Iterable[tuple[str, tuple[str, int | None]]]
        = (),
    ) -> None:
        pairs = aliases.items() if isinstance(aliases, Mapping) else aliases
        items: dict[str, ModelAlias] = {}
        for entry in pairs:
            if not isinstance(entry, tuple | list) or len(entry) != 2:
                raise InvalidProfile(f"aliases: must be a mapping, got an item {entry!r}")
            key, value = entry
            _check_name("aliases key", key)
            items[key] = _to_model_alias(f"aliases.{key}", value)
        # Sorted, so that equal maps are built, hashed and serialised identically (E12).
        object.__setattr__(self, "_items", tuple(sorted(items.items())))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("AliasMap is immutable")

    def __getitem__(self, key: str) -> ModelAlias:
        for alias, target in self._items:
            if alias == key:
                return target
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (alias for alias, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AliasMap):
            return self._items == other._items
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"AliasMap({dict(self._items)!r})"


def _to_model_alias(key: str, value: object) -> ModelAlias:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise InvalidProfile(f"{key}: must be a (model, context_window) pair, got {value!r}")
    model, window = value
    _check_name(f"{key}.model", model)
    _check_window(f"{key}.context_window", window)
    return ModelAlias(model, window)


def _to_alias_map(
    value: Mapping[str, tuple[str, int | None]] | Iterable[tuple[str, tuple[str, int | None]]],
) -> AliasMap:
    if isinstance(value, AliasMap):
        return value
    raw: object = value  # callers without type checking may pass anything
    if isinstance(raw, str) or not isinstance(raw, Mapping | Iterable):
        raise InvalidProfile(f"aliases: must be a mapping, got {raw!r}")
    return AliasMap(value)


@attrs.frozen
class ProviderProfile:
    """A model provider: its name, its configured model and windows, and its aliases (R19).

    ``aliases`` maps an alias key to ``(model, context_window)``; it is stored as an `AliasMap`
    (immutable, hashable) of `ModelAlias` tuples. Raises `InvalidProfile` for an empty name or
    model, a window that is not a positive int or None, or an alias key equal to ``model`` (a
    route naming it would be ambiguous).
    """

    name: str
    model: str
    context_window: int | None = None
    aliases: AliasMap = attrs.field(factory=AliasMap, converter=_to_alias_map)
    api: str | None = attrs.field(default=None, kw_only=True)
    """The request API this provider is called through (issue 21): ``"openai_chat"``,
    ``"openai_responses"`` or ``"anthropic"``; None when not said. A prepared request to a
    route of this provider then builds that API's body (`PreparedRequest.body`) and records what
    it left out."""

    def __attrs_post_init__(self) -> None:
        _check_name("name", self.name)
        _check_name("model", self.model)
        _check_window("context_window", self.context_window)
        check_api("api", self.api)
        if self.model in self.aliases:
            raise InvalidProfile(
                f"aliases.{self.model}: an alias key must differ from the provider's model"
            )

    def capacity_for(self, model: str) -> int | None:
        """The context window of ``model`` on this provider, None when unknown (R19).

        The provider's own model first, then an alias key, then an alias's target model when
        every alias targeting it declares the same window; any other model is unknown.
        """
        if model == self.model:
            return self.context_window
        if model in self.aliases:
            return self.aliases[model].context_window
        windows = {a.context_window for a in self.aliases.values() if a.model == model}
        # Two aliases disagreeing on one model's window is no basis for a number: unknown.
        return windows.pop() if len(windows) == 1 else None

    def dispatch_model(self, model: str) -> str:
        """The model name sent to the provider: an alias key's target, else ``model`` itself."""
        if model != self.model and model in self.aliases:
            return self.aliases[model].model
        return model


@attrs.frozen
class Route:
    """The selected provider/model pair (R19); ``model`` may be an alias key.

    Raises `InvalidProfile` for an empty provider or model.
    """

    provider: str
    model: str

    def __attrs_post_init__(self) -> None:
        _check_name("route.provider", self.provider)
        _check_name("route.model", self.model)


def find_provider(providers: Sequence[ProviderProfile], name: str) -> ProviderProfile | None:
    """The provider profile called ``name``, or None.

    Raises `InvalidProfile` when several profiles share the name: picking one would risk
    borrowing another model's metadata (R19).
    """
    found = [p for p in providers if p.name == name]
    if len(found) > 1:
        raise InvalidProfile(f"providers.{name}: declared {len(found)} times")
    return found[0] if found else None


def resolve_capacity(providers: Sequence[ProviderProfile], route: Route) -> int | None:
    """The context window of the route's model, or None when unknown (R19).

    Unknown when the provider is not configured, when the model is neither the provider's model,
    an alias key nor an alias's target model, or when the matching entry declares no window.
    Raises `InvalidProfile` when two profiles share the route's provider name.
    """
    provider = find_provider(providers, route.provider)
    return None if provider is None else provider.capacity_for(route.model)


@attrs.frozen
class ResolvedRoute:
    """A route with its capacity, budget and request window, resolved together (R19).

    ``capacity`` is None when unknown; ``budget`` is the proactive target (0 = disabled);
    ``window`` is the R18 safety window. ``dispatch_model`` is the model name sent to the
    provider when ``route.model`` is an alias key (None: ``route.model`` is sent as is).
    ``api`` is the request API the route's provider names (None: not said).
    """

    route: Route
    capacity: int | None
    budget: int
    window: int
    dispatch_model: str | None = attrs.field(default=None, kw_only=True)
    api: str | None = attrs.field(default=None, kw_only=True)

    @property
    def model(self) -> str:
        """The model name dispatched to the provider."""
        return self.dispatch_model if self.dispatch_model is not None else self.route.model

    @property
    def model_context_window(self) -> int | None:
        """What clients are told: the capacity, and nothing when it is unknown (R19)."""
        return self.capacity


def resolve_route(
    profile: RuntimeProfile, providers: Sequence[ProviderProfile], route: Route
) -> ResolvedRoute:
    """Capacity, budget and request window of ``route``, from one capacity lookup (R11-R19).

    Raises `InvalidProfile` when two profiles share the route's provider name.
    """
    provider = find_provider(providers, route.provider)
    capacity = None if provider is None else provider.capacity_for(route.model)
    dispatched = None if provider is None else provider.dispatch_model(route.model)
    return ResolvedRoute(
        route,
        capacity,
        effective_context_budget(profile, capacity),
        request_window(profile, capacity),
        dispatch_model=dispatched if dispatched != route.model else None,
        api=None if provider is None else provider.api,
    )


# --- TOML profile files ---------------------------------------------------------------------

@attrs.frozen
class ProfileDocument:
    """Everything a profile file declares: runtime settings, providers, optional default route."""

    runtime: RuntimeProfile
    providers: tuple[ProviderProfile, ...]
    route: Route | None = None


_RUNTIME_KEYS: Final = frozenset(
    {"max_context_tokens", "context_compact_ratio", "max_history_messages", "max_tool_result_chars"}
)
_TOP_KEYS: Final = _RUNTIME_KEYS | {
    "history_pruning", "providers", "route", "pricing", "compaction"
}
_COMPACTION_KEYS: Final = frozenset(f.name for f in attrs.fields(Compaction))
_PRICING_KEYS: Final = frozenset(f.name for f in attrs.fields(Pricing))
_PRUNING_KEYS: Final = frozenset({"enabled", "max_tokens"})
_PROVIDER_KEYS: Final = frozenset({"model", "context_window", "aliases", "api"})
_ALIAS_KEYS: Final = frozenset({"model", "context_window"})
_ROUTE_KEYS: Final = frozenset({"provider", "model"})


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _table(key: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidProfile(f"{key}: must be a table, got {value!r}")
    return value


def _reject_unknown(prefix: str, table: Mapping[str, Any], known: frozenset[str]) -> None:
    for key in table:
        if key not in known:
            raise InvalidProfile(f"{_join(prefix, key)}: unknown key")


def _require(prefix: str, table: Mapping[str, Any], key: str) -> object:
    if key not in table:
        raise InvalidProfile(f"{_join(prefix, key)}: required key is missing")
    return table[key]


def _parse_runtime(data: Mapping[str, Any]) -> RuntimeProfile:
    # The top-level keys are the field names, so the constructors' checks already name the key.
    pruning = HistoryPruning()
    if "history_pruning" in data:
        table = _table("history_pruning", data["history_pruning"])
        _reject_unknown("history_pruning", table, _PRUNING_KEYS)
        pruning = HistoryPruning(**table)
    pricing = None
    if "pricing" in data:
        table = _table("pricing", data["pricing"])
        _reject_unknown("pricing", table, _PRICING_KEYS)
        pricing = Pricing(**table)
    compaction = Compaction()
    if "compaction" in data:
        table = _table("compaction", data["compaction"])
        _reject_unknown("compaction", table, _COMPACTION_KEYS)
        compaction = Compaction(**table)
    runtime_args = {k: v for k, v in data.items() if k in _RUNTIME_KEYS}
    return RuntimeProfile(history_pruning=pruning, pricing=pricing, compaction=compaction,
                          **runtime_args)


def _parse_alias(prefix: str, value: object) -> tuple[str, int | None]:
    table = _table(prefix, value)
    _reject_unknown(prefix, table, _ALIAS_KEYS)
    model = _require(prefix, table, "model")
    _check_name(f"{prefix}.model", model)
    window = table.get("context_window")
    _check_window(f"{prefix}.context_window", window)
    return model, window  # type: ignore[return-value]  # both checked just above


def _parse_provider(name: str, value: object) -> ProviderProfile:
    prefix = f"providers.{name}"
    table = _table(prefix, value)
    _reject_unknown(prefix, table, _PROVIDER_KEYS)
    if not name:
        raise InvalidProfile(f'{prefix}: the provider name must not be empty (providers."")')
    model = _require(prefix, table, "model")
    _check_name(f"{prefix}.model", model)
    window = table.get("context_window")
    _check_window(f"{prefix}.context_window", window)
    aliases: dict[str, tuple[str, int | None]] = {}
    if "aliases" in table:
        alias_table = _table(f"{prefix}.aliases", table["aliases"])
        for key, alias in alias_table.items():
            alias_prefix = f"{prefix}.aliases.{key}"
            if not key:
                raise InvalidProfile(f"{alias_prefix}: an alias key must not be empty")
            if key == model:
                raise InvalidProfile(
                    f"{alias_prefix}: an alias key must differ from the provider's model"
                )
            aliases[key] = _parse_alias(alias_prefix, alias)
    api = table.get("api")
    check_api(f"{prefix}.api", api)
    return ProviderProfile(name, model, window, aliases, api=api)  # type: ignore[arg-type]


def _parse_route(value: object, providers: Sequence[ProviderProfile]) -> Route:
    table = _table("route", value)
    _reject_unknown("route", table, _ROUTE_KEYS)
    provider = _require("route", table, "provider")
    model = _require("route", table, "model")
    _check_name("route.provider", provider)
    _check_name("route.model", model)
    if find_provider(providers, provider) is None:  # type: ignore[arg-type]  # checked str
        # A default route to an undeclared provider is almost surely a typo; say so now.
        raise InvalidProfile(f"route.provider: {provider!r} is not declared under [providers]")
    return Route(provider, model)  # type: ignore[arg-type]  # checked str


def parse_profile_document(data: Mapping[str, Any], source: str = "<profile>") -> ProfileDocument:
    """Build a `ProfileDocument` from parsed TOML data (the shape of the module docstring).

    Raises `InvalidProfile` whose message starts with ``source`` and names the dotted key.
    """
    try:
        _reject_unknown("", data, _TOP_KEYS)
        runtime = _parse_runtime(data)
        providers: list[ProviderProfile] = []
        if "providers" in data:
            for name, value in _table("providers", data["providers"]).items():
                providers.append(_parse_provider(name, value))
        route = _parse_route(data["route"], providers) if "route" in data else None
    except InvalidProfile as error:
        raise InvalidProfile(f"{source}: {error}") from None
    return ProfileDocument(runtime, tuple(providers), route)
