"""Profile files: read a TOML file and validate it with the domain's pure parser.

The domain (`turnledger.domain.budget`) does no I/O; this module is where a profile file is
opened and decoded. The file's shape is documented in `turnledger.domain.budget` and
docs/profiles.md.

Public (ADR-0101): besides the readers, every name of profiles, routes and budgets — the top
level keeps the first ones a newcomer needs (`RuntimeProfile`, `ProviderProfile`, `Route`, …).
"""

from __future__ import annotations

import os
import tomllib

from turnledger.domain.budget import (
    DEFAULT_CONTEXT_TOKENS,
    DEFAULT_MAX_HISTORY_TURNS,
    Compaction,
    HistoryPruning,
    ProfileDocument,
    ProviderProfile,
    ResolvedRoute,
    Route,
    RuntimeProfile,
    effective_context_budget,
    parse_profile_document,
    request_window,
    resolve_capacity,
    resolve_route,
)
from turnledger.domain.errors import InvalidProfile
from turnledger.domain.pricing import Pricing

__all__ = [
    "DEFAULT_CONTEXT_TOKENS",
    "DEFAULT_MAX_HISTORY_TURNS",
    "Compaction",
    "HistoryPruning",
    "Pricing",
    "ProfileDocument",
    "ProviderProfile",
    "ResolvedRoute",
    "Route",
    "RuntimeProfile",
    "effective_context_budget",
    "load_profile",
    "load_profile_document",
    "request_window",
    "resolve_capacity",
    "resolve_route",
]


def load_profile_document(path: str | os.PathLike[str]) -> ProfileDocument:
    """Read a TOML profile file: runtime settings, providers and the optional ``[route]``.

    Raises `InvalidProfile` naming the file — and the dotted key, or the line of a TOML syntax
    error — for an unreadable file, invalid TOML or any invalid or unknown key.
    """
    source = os.fspath(path)
    try:
        with open(source, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise InvalidProfile(f"{source}: cannot read profile: {reason}") from None
    except tomllib.TOMLDecodeError as error:
        raise InvalidProfile(f"{source}: invalid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise InvalidProfile(f"{source}: invalid TOML: not UTF-8 ({error.reason})") from None
    return parse_profile_document(data, source)


def load_profile(path: str | os.PathLike[str]) -> tuple[RuntimeProfile, list[ProviderProfile]]:
    """Read a TOML profile file into (runtime profile, provider profiles); see the module doc.

    The optional ``[route]`` table is validated but not returned; use `load_profile_document`.
    Raises `InvalidProfile` like `load_profile_document`.
    """
    document = load_profile_document(path)
    return document.runtime, list(document.providers)
