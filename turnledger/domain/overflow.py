"""Recognise a provider's context-window overflow from its error text (R26).

A provider that rejects a request because it is too large says so in prose, and each one words it
differently. `is_context_window_exceeded` matches the ten phrases SPEC R26 lists, ignoring case,
so the runtime can start the reactive recovery of R25. Provider SDKs wrap errors, so for an
exception the whole ``__cause__`` / ``__context__`` chain (and the members of exception groups) is
searched, not only the outermost message.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Final

__all__ = ["OVERFLOW_PATTERNS", "is_context_window_exceeded"]

OVERFLOW_PATTERNS: Final[tuple[str, ...]] = (
    "exceeds the context window",
    "exceeds the available context size",
    "context window of this model",
    "maximum context length",
    "context length exceeded",
    "too many tokens",
    "token limit exceeded",
    "prompt is too long",
    "input is too long",
    "prompt exceeds max length",
)
"""The R26 phrases, lower case and with single spaces, as matched after normalisation."""

# Enough for any real wrapping depth (SDK -> HTTP client -> retry layer -> runtime); the bound
# only exists so that a pathological, programmatically built chain cannot make us loop for long.
_MAX_EXCEPTIONS: Final = 64


def _normalise(text: str) -> str:
    # casefold() is the Unicode-correct case-insensitive form; collapsing whitespace runs lets a
    # message that was wrapped across lines (or double-spaced) still match its phrase.
    return " ".join(text.split()).casefold()


def _matches(text: str) -> bool:
    normalised = _normalise(text)
    return any(pattern in normalised for pattern in OVERFLOW_PATTERNS)


def _text_of(error: BaseException) -> str:
    # A broken __str__ in some third-party exception must not turn a diagnosis into a new crash.
    try:
        return str(error)
    except Exception:
        return ""


def _linked(error: BaseException) -> Iterator[BaseException]:
    if error.__cause__ is not None:
        yield error.__cause__
    if error.__context__ is not None:
        yield error.__context__
    if isinstance(error, BaseExceptionGroup):
        yield from error.exceptions


def _texts(error: BaseException) -> Iterator[str]:
    """The texts of ``error`` and of every exception linked to it, breadth first, each once."""
    seen: set[int] = set()
    queue: deque[BaseException] = deque([error])
    while queue and len(seen) < _MAX_EXCEPTIONS:
        current = queue.popleft()
        if id(current) in seen:  # cause/context chains can form cycles
            continue
        seen.add(id(current))
        yield _text_of(current)
        queue.extend(_linked(current))


def is_context_window_exceeded(error: BaseException | str) -> bool:
    """True when a provider error says the request exceeded the model's context window (R26).

    ``error`` is the error text, or the exception itself: then its message and the messages of
    the exceptions it was raised from (``__cause__``, ``__context__``, exception-group members;
    at most 64, cycles tolerated) are searched. Matching ignores case and treats any run of
    whitespace as one space.

    Raises:
        TypeError: ``error`` is neither a str nor an exception.
    """
    if isinstance(error, str):
        return _matches(error)
    if isinstance(error, BaseException):
        return any(_matches(text) for text in _texts(error))
    raise TypeError(f"error must be a str or an exception, got {type(error).__name__}")
