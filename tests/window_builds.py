"""Counting what an integration's window conversion builds (issue 22: each window message is
built once per integration object), defined once for the pydantic-ai and ADK tests."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

__all__ = ["count_window_builds"]


def count_window_builds(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType, converter: Any, method: str
) -> list[int]:
    """A list that gets, at each call of ``module._validated`` made while ``converter.method``
    converts a window, how many messages it validated; the round-trip checks of what is
    recorded (the same function, called outside a window's conversion) are not counted."""
    built: list[int] = []
    inside: list[bool] = []
    validated = module._validated  # noqa: SLF001 - what the conversion validates
    convert = getattr(converter, method)

    def counting(out: list[Any]) -> list[Any]:
        if inside:
            built.append(len(out))
        return validated(out)  # type: ignore[no-any-return]

    def converting(window: Any) -> Any:
        inside.append(True)
        try:
            return convert(window)
        finally:
            inside.pop()

    monkeypatch.setattr(module, "_validated", counting)
    monkeypatch.setattr(converter, method, converting)
    return built
