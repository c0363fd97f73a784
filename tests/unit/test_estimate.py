"""The token estimate (R20-R23): exact numbers, images, current turn vs older tool results."""


from __future__ import annotations

import pytest
from hypothesis import given

from tests.strategies import chat_histories
from turnledger.domain.estimate import (
    BREADCRUMB_TOKENS,
    IMAGE_TOKEN_ESTIMATE,
    current_turn_start,
    estimate_history_tokens,
    image_count,
    is_loadable_image_reference,
    message_costs,
    message_tokens,
    text_tokens,
)
from turnledger.domain.messages import ChatMessage, tool_envelope

S = ChatMessage.system
U = ChatMessage.user
A = ChatMessage.assistant
T = ChatMessage.tool


def test_r20_hello_costs_six() -> None:
    """ceil(5 / 4) + 4 framing = 6."""
    assert 6 == estimate_history_tokens([U("hello")])


def test_r20_empty_message_costs_the_framing_only() -> None:
    """An empty message costs its 4 framing tokens."""
    assert 4 == estimate_history_tokens([A("")])


def test_r20_counts_utf8_bytes_not_characters() -> None:
    """"é" is 2 bytes: ceil(2 / 4) + 4 = 5; four of them (8 bytes) cost 2 + 4 = 6."""
    assert 5 == estimate_history_tokens([U("é")])
    assert 6 == estimate_history_tokens([U("éééé")])
    assert 2 == text_tokens("éééé")


def test_r20_four_byte_characters() -> None:
    """An emoji is 4 UTF-8 bytes: one token of text."""
    assert 5 == estimate_history_tokens([U("🦀")])


def test_r20_rounds_up_per_message_and_sums() -> None:
    """Each message is rounded up on its own: 9 bytes -> 3, 4 bytes -> 1."""
    assert (3 + 4) + (1 + 4) == estimate_history_tokens([S("123456789"), A("1234")])


def test_r20_empty_history_costs_nothing() -> None:
    """No message, no token."""
    assert 0 == estimate_history_tokens([])


def test_r21_loadable_marker_in_user_message_costs_a_fixed_image() -> None:
    """The marker text is replaced by 1,600: "look " is 5 bytes -> 2 + 4 + 1600."""
    assert 2 + 4 + IMAGE_TOKEN_ESTIMATE == estimate_history_tokens([U("look [IMAGE:/x.png]")])


@pytest.mark.parametrize(
    "ref",
    [
        "/tmp/a.png",
        "http://example.com/a.png",
        "https://example.com/a.png",
        "data:image/png;base64,AAAA",
        "C:\\pics\\a.png",
        "d:/pics/a.png",
        "\\\\server\\share\\a.png",
    ],
)
def test_r21_loadable_references(ref: str) -> None:
    """Absolute paths, http(s), data URIs, Windows drive and UNC paths are loadable."""
    assert is_loadable_image_reference(ref)
    assert 4 + IMAGE_TOKEN_ESTIMATE == estimate_history_tokens([U(f"[IMAGE:{ref}]")])


@pytest.mark.parametrize(
    "ref", ["...", "photo.png", "<path>", "ftp://x/a.png", "C:a.png", "\\\\?\\C:\\a", "\\\\server"]
)
def test_r21_placeholders_stay_text(ref: str) -> None:
    """Non-loadable markers are counted as their text, with no image."""
    text = f"[IMAGE:{ref}]"
    assert not is_loadable_image_reference(ref)
    assert text_tokens(text) + 4 == estimate_history_tokens([U(text)])


def test_r21_placeholder_dots_exact_number() -> None:
    """"[IMAGE:...]" is 11 bytes of text: 3 + 4 = 7."""
    assert 7 == estimate_history_tokens([U("[IMAGE:...]")])


def test_r21_several_markers_and_surrounding_whitespace_in_reference() -> None:
    """Two loadable markers cost two images; whitespace around a reference is not part of it."""
    text = "a[IMAGE:/1.png]b[IMAGE: https://e.com/2.png ]c[IMAGE:...]"
    # Text left: "a" "b" "c[IMAGE:...]" = 1 + 1 + 12 = 14 bytes -> 4 tokens.
    assert 4 + 4 + 2 * IMAGE_TOKEN_ESTIMATE == estimate_history_tokens([U(text)])
    assert 2 == image_count(U(text), current_turn=False)


def test_r21_unterminated_marker_is_text() -> None:
    """"[IMAGE:/x.png" without "]" is text (13 bytes -> 4)."""
    assert 4 + 4 == estimate_history_tokens([U("[IMAGE:/x.png")])


def test_r21_line_wrapped_reference_is_still_loadable() -> None:
    """A reference wrapped across lines by a terminal is one loadable image."""
    assert 4 + IMAGE_TOKEN_ESTIMATE == estimate_history_tokens([U("[IMAGE:/very/long\n   /x.png]")])


def test_r21_markers_in_older_user_messages_still_cost_images() -> None:
    """User messages always transmit their images, current turn or not."""
    history = [U("[IMAGE:/a.png]"), A("ok"), U("b")]
    assert (4 + IMAGE_TOKEN_ESTIMATE) + (1 + 4) + (1 + 4) == estimate_history_tokens(history)


def test_r21_tool_results_carrier_is_a_user_message_with_images() -> None:
    """A "[Tool results]" carrier is a user message: its loadable markers are images."""
    carrier = U("[Tool results] [IMAGE:/a.png]")
    # "[Tool results] " is 15 bytes -> 4 tokens.
    assert 4 + 4 + IMAGE_TOKEN_ESTIMATE == message_tokens(carrier, current_turn=False)


def test_r22_tool_marker_text_is_plain_text() -> None:
    """Marker text in a tool result is counted as text, never as an image."""
    content = tool_envelope("c1", "[IMAGE:/x.png]")
    history = [U("q"), T(content)]
    assert (1 + 4) + (text_tokens(content) + 4) == estimate_history_tokens(history)
    assert 0 == image_count(T(content), current_turn=True)


def test_r22_current_turn_tool_attachments_cost_images() -> None:
    """Attachments of a tool result in the current turn cost 1,600 each."""
    history = [U("q"), T("out", ["/a.png", "/b.png"])]
    assert (1 + 4) + (1 + 4 + 2 * IMAGE_TOKEN_ESTIMATE) == estimate_history_tokens(history)


def test_r22_older_tool_attachments_cost_nothing() -> None:
    """Before the current user turn a tool result counts by its bytes alone."""
    old_tool = T("out", ["/a.png"])
    history = [U("q1"), old_tool, U("q2"), T("new", ["/b.png"])]
    expected = (1 + 4) + (1 + 4) + (1 + 4) + (1 + 4 + IMAGE_TOKEN_ESTIMATE)
    assert expected == estimate_history_tokens(history)
    assert [5, 5, 5, 5 + IMAGE_TOKEN_ESTIMATE] == message_costs(history)


def test_r22_carrier_does_not_start_a_new_current_turn() -> None:
    """A "[Tool results]" carrier continues the turn: earlier tool results stay current."""
    history = [U("q"), T("out", ["/a.png"]), U("[Tool results] more")]
    assert 0 == current_turn_start(history)
    assert 1 == image_count(history[1], current_turn=True)
    assert 5 + (5 + IMAGE_TOKEN_ESTIMATE) + (5 + 4) == estimate_history_tokens(history)


def test_r22_without_user_message_everything_is_current() -> None:
    """No real user message: every tool result is in the current turn."""
    history = [S("s"), T("out", ["/a.png"])]
    assert (1 + 4) + (1 + 4 + IMAGE_TOKEN_ESTIMATE) == estimate_history_tokens(history)


def test_r22_breadcrumb_does_not_start_the_current_turn() -> None:
    """The synthetic breadcrumb is not a real user message."""
    history = [U("q"), T("out", ["/a.png"]), ChatMessage.breadcrumb()]
    assert 0 == current_turn_start(history)


def test_r23_system_and_assistant_markers_are_text() -> None:
    """System and assistant text is text, markers included."""
    text = "[IMAGE:/x.png]"  # 14 bytes -> 4
    assert 8 + 8 == estimate_history_tokens([S(text), A(text)])


def test_r31_breadcrumb_costs_seventeen() -> None:
    """The breadcrumb text is 49 bytes: 13 + 4."""
    assert 17 == BREADCRUMB_TOKENS
    assert 17 == estimate_history_tokens([ChatMessage.breadcrumb()])


@given(chat_histories())
def test_r20_message_costs_sum_to_the_estimate(history: list[ChatMessage]) -> None:
    """The per-message costs add up to the history estimate and are all >= 4."""
    costs = message_costs(history)
    assert estimate_history_tokens(history) == sum(costs)
    assert all(c >= 4 for c in costs)
