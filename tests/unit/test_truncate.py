"""Unit tests for turnledger.domain.truncate: bounding one tool result (R38-R39)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnledger.domain.errors import InvalidMessage
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    parse_tool_envelope,
    tool_envelope,
)
from turnledger.domain.truncate import (
    DEFAULT_MAX_TOOL_RESULT_CHARS,
    truncate_conversation_message,
    truncate_text,
    truncate_tool_message,
    truncate_tool_result,
    truncate_tool_results,
    truncation_marker,
)

# An independent definition of a marker (regex, not the module's hand scan): from "[IMAGE:" to
# the next "]".
IMAGE_MARKER = re.compile(r"\[IMAGE:[^\]]*\]")
TRUNCATION = re.compile(r"\n\[\.\.\. (\d+) characters truncated \.\.\.\]\n")
ALPHABET = "abcdefghijklmnopqrstuvwxyz"


def letters(n: int) -> str:
    """a..z repeated, n characters: every position is recognisable in an expected string."""
    return "".join(ALPHABET[i % 26] for i in range(n))


# --- R38: constants, bounds and arithmetic -------------------------------------------------

def test_r38_default_bound_is_fifty_thousand() -> None:
    """The default max_tool_result_chars is 50,000."""
    expected = 50_000
    assert expected == DEFAULT_MAX_TOOL_RESULT_CHARS


def test_r38_marker_text() -> None:
    """The marker names the number of removed characters, on its own line."""
    expected = "\n[... 70 characters truncated ...]\n"
    assert expected == truncation_marker(70)


def test_r38_text_within_bound_is_returned_unchanged() -> None:
    """Text exactly max_chars long is the same object, not a copy."""
    text = letters(9)
    assert text is truncate_tool_result(text, 9)


def test_r38_zero_means_no_bound() -> None:
    """max_chars == 0 leaves even a very long result untouched."""
    text = letters(200_000)
    assert text is truncate_tool_result(text, 0)


def test_r38_one_character_over_the_bound() -> None:
    """One character too many: head 6, tail 3, one character removed."""
    expected = "012345\n[... 1 characters truncated ...]\n789"
    assert expected == truncate_tool_result(
        "0123456789", 9
    )


def test_r38_head_two_thirds_tail_one_third() -> None:
    """100 characters bounded to 30: the first 20, the last 10, 70 removed."""
    expected = "abcdefghijklmnopqrst\n[... 70 characters truncated ...]\nmnopqrstuv"
    assert expected == truncate_tool_result(letters(100), 30)


@pytest.mark.parametrize(
    ("max_chars", "expected"),
    [
        (1, "\n[... 3 characters truncated ...]\nd"),
        (2, "a\n[... 2 characters truncated ...]\nd"),
        (3, "ab\n[... 1 characters truncated ...]\nd"),
    ],
)
def test_r38_tiny_bounds(max_chars: int, expected: str) -> None:
    """Head is floor(2/3 of the bound), the tail gets the rest, down to a bound of 1."""
    assert expected == truncate_tool_result("abcd", max_chars)


def test_r38_default_bound_arithmetic() -> None:
    """At the default bound the head is 33,333 characters and the tail 16,667."""
    text = letters(50_001)
    result = truncate_tool_result(text, DEFAULT_MAX_TOOL_RESULT_CHARS)
    assert text[:33_333] + truncation_marker(1) + text[-16_667:] == result
    assert 50_000 + len(truncation_marker(1)) == len(result)


def test_r38_lengths_are_python_characters_not_bytes() -> None:
    """Accented letters and emoji count one character each."""
    expected = "éééé\n[... 4 characters truncated ...]\néé"
    assert expected == truncate_tool_result("é" * 10, 6)
    expected = "😀😀😀😀\n[... 4 characters truncated ...]\n🎉🎉"
    assert expected == truncate_tool_result("😀" * 5 + "🎉" * 5, 6)


@pytest.mark.parametrize("function", [truncate_tool_result, truncate_text])
def test_r38_negative_bound_is_a_value_error_naming_max_chars(
    function: Callable[[str, int], str],
) -> None:
    """A negative bound is rejected with a ValueError naming max_chars."""
    with pytest.raises(ValueError, match=r"max_chars must be >= 0 .*got -1"):
        function("text", -1)


@pytest.mark.parametrize("bound", [True, 1.5, "10", None])
def test_r38_non_int_bound_is_a_type_error_naming_max_chars(bound: object) -> None:
    """A bound that is not an int (bool included) is a TypeError naming max_chars."""
    with pytest.raises(TypeError, match="max_chars must be an int"):
        truncate_tool_result("text", bound)  # type: ignore[arg-type]


# --- R39: image markers ---------------------------------------------------------------------

def test_r39_head_cut_inside_marker_moves_before_it() -> None:
    """A marker spanning the head cut is removed whole; the head ends before it."""
    text = "0123" + "[IMAGE:/a.png]" + "y" * 30 + "ABCDE"
    expected = "0123\n[... 44 characters truncated ...]\nABCDE"
    assert expected == truncate_tool_result(text, 15)


def test_r39_tail_cut_inside_marker_moves_after_it() -> None:
    """A marker spanning the tail cut is removed whole; the tail starts after it."""
    text = "abcdefghij" + "z" * 30 + "[IMAGE:https://x/y.png]" + "END"
    expected = "abcdefghij\n[... 53 characters truncated ...]\nEND"
    assert expected == truncate_tool_result(text, 15)


def test_r39_marker_ending_at_head_cut_is_kept() -> None:
    """A marker that ends exactly where the head ends is kept whole in the head."""
    text = "a[IMAGE:x]" + "y" * 30 + "ABCDE"
    expected = "a[IMAGE:x]\n[... 30 characters truncated ...]\nABCDE"
    assert expected == truncate_tool_result(
        text, 15
    )


def test_r39_marker_starting_at_head_cut_is_removed_without_moving_the_cut() -> None:
    """A marker that starts exactly at the head cut is outside the head; nothing moves."""
    text = "0123456789[IMAGE:x]" + "y" * 30 + "ABCDE"
    expected = "0123456789\n[... 39 characters truncated ...]\nABCDE"
    assert expected == truncate_tool_result(
        text, 15
    )


def test_r39_marker_starting_at_tail_cut_is_kept() -> None:
    """A marker that starts exactly where the tail starts is kept whole in the tail."""
    text = "h" * 18 + "y" * 30 + "[IMAGE:x]"
    expected = "h" * 18 + "\n[... 30 characters truncated ...]\n" + "[IMAGE:x]"
    assert expected == truncate_tool_result(text, 27)


def test_r39_one_marker_spanning_both_cuts_is_removed_alone() -> None:
    """A marker that contains both cuts is the only thing removed."""
    text = "ab" + "[IMAGE:" + "q" * 40 + "]" + "cd"
    expected = "ab\n[... 48 characters truncated ...]\ncd"
    assert expected == truncate_tool_result(text, 9)


def test_r39_placeholder_marker_is_not_split_either() -> None:
    """A non-loadable placeholder such as [IMAGE:...] is still a marker for the cut."""
    text = "0123" + "[IMAGE:...]" + "y" * 30 + "ABCDE"
    expected = "0123\n[... 41 characters truncated ...]\nABCDE"
    assert expected == truncate_tool_result(text, 15)


def test_r39_unterminated_marker_prefix_is_plain_text() -> None:
    """"[IMAGE:" with no closing bracket is not a marker, so the cut may fall inside it."""
    text = "0123[IMAGE:" + "y" * 30 + "ABCDE"
    expected = "0123[IMAGE\n[... 31 characters truncated ...]\nABCDE"
    assert expected == truncate_tool_result(
        text, 15
    )


def test_r39_many_unterminated_prefixes_are_fast() -> None:
    """A huge text of unclosed prefixes is cut in linear time (no quadratic rescans)."""
    text = "[IMAGE:" * 200_000
    result = truncate_tool_result(text, 30)
    assert text[:20] + truncation_marker(len(text) - 30) + text[-10:] == result


# --- R39: JSON envelopes --------------------------------------------------------------------

def test_r39_envelope_inner_content_is_truncated_and_reencoded() -> None:
    """Only the envelope's content is cut; the result is the same id's envelope."""
    result = truncate_tool_result(tool_envelope("call_1", letters(100)), 30)
    expected = (
        '{"tool_call_id":"call_1","content":"abcdefghijklmnopqrst'
        '\\n[... 70 characters truncated ...]\\nmnopqrstuv"}'
    )
    assert expected == result
    expected_json = {
        "tool_call_id": "call_1",
        "content": "abcdefghijklmnopqrst\n[... 70 characters truncated ...]\nmnopqrstuv",
    }
    assert expected_json == json.loads(result)


def test_r39_envelope_whose_content_fits_is_unchanged() -> None:
    """The allowance applies to the inner content: JSON framing alone never triggers a cut."""
    envelope = tool_envelope("call_with_a_long_identifier", "short")
    assert len(envelope) > 10
    assert envelope is truncate_tool_result(envelope, 10)


def test_r39_envelope_inner_image_marker_is_not_split() -> None:
    """The image-marker rule also applies to an envelope's inner content."""
    inner = "0123" + "[IMAGE:/a.png]" + "y" * 30 + "ABCDE"
    result = truncate_tool_result(tool_envelope("c1", inner), 15)
    expected = ("c1", "0123\n[... 44 characters truncated ...]\nABCDE")
    assert expected == parse_tool_envelope(result)


def test_r39_envelope_with_unicode_and_quotes_stays_valid_json() -> None:
    """Quotes, backslashes and non-ASCII in the kept parts are re-escaped correctly."""
    inner = 'é"\\' * 20
    result = truncate_tool_result(tool_envelope("ç-1", inner), 9)
    expected_inner = 'é"\\é"\\\n[... 51 characters truncated ...]\né"\\'
    assert {"tool_call_id": "ç-1", "content": expected_inner} == json.loads(result)


def test_r39_envelope_with_structured_content_is_cut_as_its_json_text() -> None:
    """Non-string inner content is truncated as its compact JSON text, as a string."""
    text = '{"tool_call_id": "c9", "content": {"rows": [1, 2, 3, 4, 5, 6, 7, 8, 9]}}'
    expected = tool_envelope("c9", '{"rows":' + truncation_marker(16) + ",9]}")
    assert expected == truncate_tool_result(text, 12)


def test_r39_json_without_tool_call_id_is_plain_text() -> None:
    """JSON that is not a tool envelope is cut like any other text."""
    text = '{"content":"' + "x" * 50 + '"}'
    expected = '{"content"\n[... 49 characters truncated ...]\nxxx"}'
    assert expected == truncate_tool_result(
        text, 15
    )


# --- helpers for the session layer ---------------------------------------------------------

def test_r38_tool_message_keeps_role_and_attachments() -> None:
    """A long tool ChatMessage is bounded; its attachments stay."""
    message = ChatMessage.tool(tool_envelope("c1", letters(100)), attachments=("/tmp/a.png",))
    expected = ChatMessage(
        "tool",
        tool_envelope("c1", letters(20) + truncation_marker(70) + letters(100)[90:]),
        ("/tmp/a.png",),
    )
    assert expected == truncate_tool_message(message, 30)


def test_r38_short_tool_message_is_the_same_object() -> None:
    """A tool message within the bound is returned as is."""
    message = ChatMessage.tool(tool_envelope("c1", "ok"))
    assert message is truncate_tool_message(message, 30)


def test_r38_tool_message_helper_rejects_other_roles() -> None:
    """Only tool messages are tool results; a user message is an InvalidMessage naming role."""
    with pytest.raises(InvalidMessage, match=r"role must be tool.*'user'"):
        truncate_tool_message(ChatMessage.user(letters(100)), 30)


def test_r38_tool_results_keep_id_name_and_attachments() -> None:
    """Each long ToolResult is bounded; id, name and attachments stay; short ones are kept."""
    short = ToolResult("c2", "ok", "ls")
    item = ToolResults((ToolResult("c1", letters(100), "shell", ("/a.png",)), short))
    expected = ToolResults(
        (
            ToolResult("c1", letters(20) + truncation_marker(70) + letters(100)[90:], "shell",
                       ("/a.png",)),
            short,
        )
    )
    result = truncate_tool_results(item, 30)
    assert expected == result
    assert short is result.results[1]


def test_r38_tool_results_within_bound_are_the_same_object() -> None:
    """ToolResults that all fit are returned as is."""
    item = ToolResults((ToolResult("c1", "ok"), ToolResult("c2", "fine")))
    assert item is truncate_tool_results(item, 30)


def test_r38_tool_result_content_that_looks_like_an_envelope_uses_the_plain_rule() -> None:
    """A ToolResult's content is the tool output itself, so it is never unwrapped."""
    content = tool_envelope("zz", "y" * 100)
    result = truncate_tool_results(ToolResults((ToolResult("c1", content),)), 30)
    expected = content[:20] + truncation_marker(len(content) - 30) + content[-10:]
    assert expected == result.results[0].content


def test_r38_conversation_message_bounds_only_tool_results() -> None:
    """Chat(tool) and ToolResults are bounded; user and tool-call items are returned as is."""
    long = letters(100)
    cut = letters(20) + truncation_marker(70) + letters(100)[90:]
    user = Chat(ChatMessage.user(long))
    calls = AssistantToolCalls(long, (ToolCall("c1", "shell", "{}"),))
    assert user is truncate_conversation_message(user, 30)
    assert calls is truncate_conversation_message(calls, 30)
    assert Chat(ChatMessage.tool(tool_envelope("c1", cut))) == truncate_conversation_message(
        Chat(ChatMessage.tool(tool_envelope("c1", long))), 30
    )
    assert ToolResults((ToolResult("c1", cut),)) == truncate_conversation_message(
        ToolResults((ToolResult("c1", long),)), 30
    )
    unbounded = ToolResults((ToolResult("c1", long),))
    assert unbounded is truncate_conversation_message(unbounded, 0)


def test_r38_conversation_message_rejects_negative_bound_even_for_untouched_items() -> None:
    """A bad bound is reported whatever the item, not only when a cut would happen."""
    with pytest.raises(ValueError, match="max_chars"):
        truncate_conversation_message(Chat(ChatMessage.user("hi")), -5)


# --- properties -----------------------------------------------------------------------------

fragments = st.lists(
    st.sampled_from(
        ["a", "bc", "xyz", "[IMAGE:", "]", "[IMAGE:/x.png]", "[IMAGE:...]", "é", "😀", "\n", "["]
    ),
    max_size=40,
).map("".join)
bounds = st.integers(min_value=0, max_value=80)


@given(fragments, bounds)
def test_r38_r39_property_cut_invariants(text: str, max_chars: int) -> None:
    """Head + marker + tail, exact N, within the allowance, no marker split, cuts maximal."""
    result = truncate_text(text, max_chars)
    if max_chars == 0 or len(text) <= max_chars:
        assert text is result
        return
    (match,) = TRUNCATION.finditer(result)  # exactly one marker (the alphabet has no digits)
    head, tail = result[: match.start()], result[match.end() :]
    removed = int(match.group(1))
    head_end, tail_start = len(head), len(text) - len(tail)
    assert text[:head_end] == head
    assert text[tail_start:] == tail
    assert len(text) == len(head) + removed + len(tail)
    assert len(head) <= max_chars * 2 // 3
    assert len(tail) <= max_chars - max_chars * 2 // 3
    assert len(result) <= max_chars + len(truncation_marker(removed))
    spans = [(m.start(), m.end()) for m in IMAGE_MARKER.finditer(text)]
    for start, end in spans:
        assert not start < head_end < end, (start, end, head_end)
        assert not start < tail_start < end, (start, end, tail_start)
    # The cuts only move to avoid a marker, never further.
    wanted_head = max_chars * 2 // 3
    wanted_tail = len(text) - (max_chars - wanted_head)
    assert head_end == wanted_head or (head_end, True) in {
        (s, s < wanted_head < e) for s, e in spans
    }
    assert tail_start == wanted_tail or (tail_start, True) in {
        (e, s < wanted_tail < e) for s, e in spans
    }


@given(fragments, bounds)
def test_r38_r39_property_matches_regex_reference(text: str, max_chars: int) -> None:
    """The hand-scanned marker rule agrees with a regex-based reference implementation."""
    expected = text
    if max_chars and len(text) > max_chars:
        head_end = max_chars * 2 // 3
        tail_start = len(text) - (max_chars - head_end)
        for m in IMAGE_MARKER.finditer(text):
            if m.start() < head_end < m.end():
                head_end = m.start()
            if m.start() < tail_start < m.end():
                tail_start = m.end()
        expected = text[:head_end] + truncation_marker(tail_start - head_end) + text[tail_start:]
    assert expected == truncate_tool_result(text, max_chars)


@given(st.text(min_size=1, max_size=20), fragments, bounds)
def test_r39_property_envelope_stays_valid_with_same_id(
    call_id: str, inner: str, max_chars: int
) -> None:
    """An envelope is still an envelope with the same id, holding the truncated inner text."""
    result = truncate_tool_result(tool_envelope(call_id, inner), max_chars)
    expected = (call_id, truncate_text(inner, max_chars))
    assert expected == parse_tool_envelope(result)
    assert {"tool_call_id", "content"} == set(json.loads(result))
