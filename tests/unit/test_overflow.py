"""Unit tests for turnledger.domain.overflow: recognising provider overflow errors (R26)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnledger.domain.overflow import OVERFLOW_PATTERNS, is_context_window_exceeded

R26_PHRASES = (
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


def _alternate_case(text: str) -> str:
    return "".join(c.upper() if i % 2 else c.lower() for i, c in enumerate(text))


def _raise_chain(*messages: str) -> BaseException:
    """Raise messages[0], re-raise each next one `from` the previous; return the outermost."""
    error: BaseException = RuntimeError(messages[0])
    for message in messages[1:]:
        try:
            raise error
        except BaseException as inner:
            try:
                raise RuntimeError(message) from inner
            except RuntimeError as outer:
                error = outer
    return error


def test_r26_patterns_are_exactly_the_ten_spec_phrases() -> None:
    """OVERFLOW_PATTERNS lists the ten R26 phrases, in SPEC order."""
    assert R26_PHRASES == OVERFLOW_PATTERNS


@pytest.mark.parametrize("phrase", R26_PHRASES)
@pytest.mark.parametrize("case", [str.lower, str.upper, str.title, _alternate_case])
def test_r26_each_phrase_matches_in_any_case(phrase: str, case: Callable[[str], str]) -> None:
    """Each R26 phrase is recognised whatever its letter case, inside a longer message."""
    text = f"Error 400: {case(phrase)} (request id 42)"
    assert True is is_context_window_exceeded(text)


@pytest.mark.parametrize(
    "text",
    [
        "This model's maximum context length is 8192 tokens. However, your messages resulted in "
        "9012 tokens. Please reduce the length of the messages.",
        "prompt is too long: 210000 tokens > 200000 maximum",
        "the request exceeds the available context size, try increasing it",
        "Input is too long for requested model.",
        "Request too large: too many tokens in the prompt",
    ],
)
def test_r26_real_provider_messages_match(text: str) -> None:
    """Overflow messages as providers actually word them are recognised."""
    assert True is is_context_window_exceeded(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "rate limit exceeded",
        "Too many requests",
        "invalid api key",
        "maximum length",
        "context window",
        "the prompt is long",
        "token limit",
        "context length is 8192",
        "prompt exceeds max",
    ],
)
def test_r26_other_errors_do_not_match(text: str) -> None:
    """Errors that only share words with an R26 phrase are not overflows."""
    assert False is is_context_window_exceeded(text)


def test_r26_whitespace_runs_and_line_breaks_match_a_single_space() -> None:
    """A phrase broken across lines or double-spaced is still recognised."""
    assert True is is_context_window_exceeded("Maximum\n  context\tlength reached")


def test_r26_exception_message_is_searched() -> None:
    """An exception whose own message holds a phrase is an overflow."""
    assert True is is_context_window_exceeded(ValueError("Prompt Is Too Long"))


def test_r26_exception_without_phrase_is_not_an_overflow() -> None:
    """An exception whose chain holds no phrase is not an overflow."""
    assert False is is_context_window_exceeded(_raise_chain("timeout", "retry failed"))


def test_r26_explicit_cause_chain_is_searched() -> None:
    """A phrase two levels down a `raise ... from` chain is found."""
    outermost = "provider call failed"
    error = _raise_chain("Token limit exceeded", "HTTP 400", outermost)
    assert outermost == str(error)
    assert True is is_context_window_exceeded(error)


def test_r26_implicit_context_chain_is_searched() -> None:
    """A phrase in the exception being handled when another was raised (__context__) is found."""

    def call_provider() -> None:
        try:
            raise KeyError("context length exceeded")
        except KeyError:
            raise RuntimeError("while handling") from None

    with pytest.raises(RuntimeError) as caught:
        call_provider()
    # `from None` hides the context from tracebacks, but it is still the wrapped SDK error.
    assert True is caught.value.__suppress_context__
    assert True is is_context_window_exceeded(caught.value)


def test_r26_exception_group_members_are_searched() -> None:
    """A phrase in one member of an exception group is found."""
    group = ExceptionGroup("task failed", [OSError("reset"), ValueError("too many tokens")])
    assert True is is_context_window_exceeded(group)


def test_r26_cyclic_chain_terminates() -> None:
    """A cause chain that loops back on itself is walked once and ends."""
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__cause__, second.__cause__ = second, first
    assert False is is_context_window_exceeded(first)
    second.args = ("input is too long",)
    assert True is is_context_window_exceeded(first)


def test_r26_chain_walk_is_bounded() -> None:
    """Only the first 64 linked exceptions are searched, so a phrase deeper than that is missed."""

    def chain(depth_of_phrase: int, length: int) -> BaseException:
        errors = [RuntimeError(f"level {i}") for i in range(length)]
        errors[depth_of_phrase] = RuntimeError("maximum context length")
        for outer, inner in itertools.pairwise(errors):
            outer.__cause__ = inner
        return errors[0]

    assert True is is_context_window_exceeded(chain(63, 100))
    assert False is is_context_window_exceeded(chain(64, 100))


def test_r26_broken_str_does_not_crash_and_cause_is_still_searched() -> None:
    """An exception whose __str__ raises is skipped; its cause is still searched."""

    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    error = Broken()
    assert False is is_context_window_exceeded(error)
    error.__cause__ = OSError("exceeds the context window")
    assert True is is_context_window_exceeded(error)


@pytest.mark.parametrize("value", [None, 42, b"too many tokens", ["too many tokens"]])
def test_r26_other_types_raise_type_error(value: object) -> None:
    """Anything but a str or an exception is a TypeError naming its type."""
    with pytest.raises(TypeError, match=type(value).__name__):
        is_context_window_exceeded(value)  # type: ignore[arg-type]


@given(
    before=st.text(max_size=30),
    after=st.text(max_size=30),
    phrase=st.sampled_from(R26_PHRASES),
    flips=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_r26_property_phrase_anywhere_in_any_case_matches(
    before: str, after: str, phrase: str, flips: list[bool]
) -> None:
    """Any text containing a phrase, each letter in either case, is an overflow."""
    mixed = "".join(c.upper() if flip else c for c, flip in zip(phrase, flips))
    assert True is is_context_window_exceeded(before + " " + mixed + " " + after)


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
def test_r26_property_result_ignores_ascii_case_and_wrapping(text: str) -> None:
    """Upper-casing text, or wrapping it in an exception, never changes the answer."""
    expected = is_context_window_exceeded(text)
    assert expected == is_context_window_exceeded(text.upper())
    assert expected == is_context_window_exceeded(RuntimeError(text))
    assert expected == any(p in " ".join(text.split()).lower() for p in R26_PHRASES)
