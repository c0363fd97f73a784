"""The token estimate (R20-R23): a byte heuristic, not a provider tokenizer.

One message costs ``FRAMING_TOKENS`` (4) plus ``ceil(utf8_bytes / 4)`` for its text, plus
``IMAGE_TOKEN_ESTIMATE`` (1,600) per image that is actually transmitted:

- user messages (``[Tool results]`` carriers and the breadcrumb included): each *loadable*
  ``[IMAGE:ref]`` marker costs 1,600 and its marker text is not counted as text (R21);
  placeholders such as ``[IMAGE:...]`` or ``[IMAGE:photo.png]`` stay text;
- tool messages: the whole content is text, marker text included (R22); the attachments the tool
  declared cost 1,600 each, but only in the current user turn (older results are counted by their
  bytes alone);
- system and assistant messages: text (R23).

The current turn runs from the newest real user message to the end of the history. The cost of
one message depends only on the message and on whether it is in the current turn, so callers that
keep prefix sums (the session) compute each cost once with `message_tokens` / `message_costs`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Final

import attrs

from turnledger.domain.messages import (
    AssistantToolCalls,
    ChatMessage,
    is_real_user_message,
)
from turnledger.domain.pricing import (
    DEFAULT_PRICING,
    IMAGE_TOKEN_ESTIMATE,
    NOTHING,
    Priced,
    Pricing,
    image_ref_tokens,
    priced_parts,
)

__all__ = [
    "BREADCRUMB_TOKENS",
    "FRAMING_TOKENS",
    "IMAGE_MARKER_PREFIX",
    "IMAGE_TOKEN_ESTIMATE",
    "base_message_tokens",
    "current_turn_start",
    "current_turn_surcharge",
    "estimate_history_tokens",
    "image_count",
    "image_markers",
    "is_loadable_image_reference",
    "message_costs",
    "message_tokens",
    "text_tokens",
]

FRAMING_TOKENS: Final = 4
IMAGE_MARKER_PREFIX: Final = "[IMAGE:"
_WRAP: Final = re.compile(r"[\r\n]\s*")


def utf8_len(text: str) -> int:
    """Length of ``text`` in UTF-8 bytes (R20 counts bytes, not characters)."""
    if text.isascii():
        return len(text)  # the common case, without building a bytes object
    # surrogatepass: a lone surrogate (possible in JSON-decoded text) is counted, never an error.
    return len(text.encode("utf-8", "surrogatepass"))


def _ceil_quarter(n_bytes: int) -> int:
    return (n_bytes + 3) // 4


def text_tokens(text: str) -> int:
    """``ceil(utf8_len(text) / 4)``: the text part of the estimate, without framing (R20)."""
    return _ceil_quarter(utf8_len(text))


def _is_windows_drive_path(ref: str) -> bool:
    return len(ref) >= 3 and ref[0].isascii() and ref[0].isalpha() and ref[1] == ":" and (
        ref[2] in "\\/"
    )


def _is_unc_path(ref: str) -> bool:
    # \\server\share...: a server name and something after it. \\?\ and \\.\ are device
    # namespaces, not network shares.
    if not ref.startswith("\\\\"):
        return False
    rest = ref[2:]
    if rest.startswith(("?", ".")):
        return False
    for i, ch in enumerate(rest):
        if ch in "\\/":
            return i > 0 and i + 1 < len(rest)
    return False


def is_loadable_image_reference(ref: str) -> bool:
    """True when an ``[IMAGE:ref]`` marker names an image the runtime can load (R21).

    Loadable: an absolute path (``/``), ``http://`` / ``https://`` URLs, ``data:`` URIs, a Windows
    drive path (``C:\\`` or ``C:/``) or a UNC path (``\\\\server\\share``). Anything else
    (``...``, ``<path>``, ``photo.png``) is a placeholder and stays text.
    """
    return (
        ref.startswith(("/", "http://", "https://", "data:"))
        or _is_windows_drive_path(ref)
        or _is_unc_path(ref)
    )


def _collapse_marker(raw: str) -> str:
    # A reference wrapped across lines when pasted (newline + indentation) is still one
    # reference; surrounding whitespace is not part of it.
    if "\n" not in raw and "\r" not in raw:
        return raw.strip()
    return _WRAP.sub("", raw).strip()


@attrs.frozen
class ImageMarker:
    """One ``[IMAGE:ref]`` marker in a text: ``text[start:end]`` is the whole marker.

    ``ref`` is the reference with surrounding whitespace and line wraps removed.
    """

    start: int
    end: int
    ref: str

    @property
    def loadable(self) -> bool:
        """True when the image is transmitted, so charged (R21); placeholders are text."""
        return bool(self.ref) and is_loadable_image_reference(self.ref)


def image_markers(text: str) -> Iterator[ImageMarker]:
    """Every ``[IMAGE:…]`` marker of ``text``, from the prefix to the next ``]`` — the one scan.

    The estimate (R21), truncation (R39: never split a marker) and the transcript exporters
    all read markers through this function. An unterminated prefix is text, and so is every
    later one (no ``]`` follows), which keeps the scan linear.
    """
    cursor = 0
    while (start := text.find(IMAGE_MARKER_PREFIX, cursor)) != -1:
        ref_start = start + len(IMAGE_MARKER_PREFIX)
        end = text.find("]", ref_start)
        if end == -1:
            return
        yield ImageMarker(start, end + 1, _collapse_marker(text[ref_start:end]))
        cursor = end + 1


def _scan_markers(text: str) -> tuple[int, int]:
    """(UTF-8 bytes of the text outside loadable markers, number of loadable markers)."""
    bytes_, refs = _scan_marker_refs(text)
    return bytes_, len(refs)


def _scan_marker_refs(text: str) -> tuple[int, list[str]]:
    """(UTF-8 bytes of the text outside loadable markers, their references)."""
    total = utf8_len(text)
    if IMAGE_MARKER_PREFIX not in text:
        return total, []
    removed = 0
    refs: list[str] = []
    for marker in image_markers(text):
        if marker.loadable:
            refs.append(marker.ref)
            removed += utf8_len(text[marker.start : marker.end])
    return total - removed, refs


def image_count(message: ChatMessage, *, current_turn: bool) -> int:
    """How many images of ``message`` are transmitted, so charged 1,600 each (R21, R22).

    User messages: their loadable markers. Tool messages: their declared attachments, only when
    ``current_turn`` is true. System and assistant messages: none (R23).
    """
    if message.role == "user":
        return _scan_markers(message.content)[1]
    if message.role == "tool" and current_turn:
        return len(message.attachments)
    return 0


def message_tokens(
    message: ChatMessage, *, current_turn: bool, pricing: Pricing = DEFAULT_PRICING
) -> int:
    """The estimate of one message (R20-R23, and the kinds of ``pricing``: issue 21).

    ``current_turn`` says whether the message belongs to the current user turn: a tool
    message's attachments are charged in the current turn only (R22), and so is reasoning
    ciphertext (`Pricing`).
    """
    tokens = base_message_tokens(message, pricing)
    return tokens + current_turn_surcharge(message, pricing) if current_turn else tokens


def _priced(message: ChatMessage, pricing: Pricing) -> Priced:
    """What ``message`` holds that is not text (`turnledger.domain.pricing`)."""
    item = message.item
    if message.blocks:
        if not pricing.by_kind:
            return NOTHING
        role = "reasoning" if _is_reasoning_item(message) else message.role
        return priced_parts(role, message.blocks, pricing)
    if item is None or not item.blocks or not pricing.by_kind:
        return NOTHING  # the common case: a text, or a call or result without blocks
    role = "assistant" if isinstance(item, AssistantToolCalls) else "tool"
    return priced_parts(role, item.blocks, pricing)


def _is_reasoning_item(message: ChatMessage) -> bool:
    # A Responses reasoning item is recorded as an assistant message of one thinking block
    # whose fields say so (turnledger.domain.providers).
    return (message.role == "assistant" and len(message.blocks) == 1
            and '"type":"reasoning"' in message.extra)


def base_message_tokens(message: ChatMessage, pricing: Pricing = DEFAULT_PRICING) -> int:
    """The estimate of one message outside the current turn (R20-R23, issue 21).

    What every message costs wherever it is: framing, text, the images of a user message, and
    what ``pricing`` charges for its content that is not text.
    """
    priced = _priced(message, pricing)
    if message.role != "user":
        # Tool output marker text is plain text (R22); system/assistant text is text (R23).
        text_bytes = utf8_len(message.content) - priced.text_bytes
        return FRAMING_TOKENS + _ceil_quarter(text_bytes) + priced.tokens
    if priced is NOTHING and IMAGE_MARKER_PREFIX not in message.content:
        return FRAMING_TOKENS + _ceil_quarter(utf8_len(message.content))
    text_bytes, refs = _scan_marker_refs(message.content)
    images = sum(image_ref_tokens(ref, pricing) for ref in refs)
    return (FRAMING_TOKENS + _ceil_quarter(max(0, text_bytes - priced.text_bytes)) + images
            + priced.tokens)


def current_turn_surcharge(message: ChatMessage, pricing: Pricing = DEFAULT_PRICING) -> int:
    """What ``message`` costs more inside the current turn: its declared tool attachments
    (R22) and, with ``pricing.by_kind``, its reasoning ciphertext (issue 21).

    ``message_tokens(m, current_turn=True) == base_message_tokens(m) +
    current_turn_surcharge(m)``, so a caller can keep the two parts in separate sums.
    """
    if message.role == "user":
        return 0
    extra = _priced(message, pricing).current_turn_tokens
    if message.role == "tool" and message.attachments:
        return sum(image_ref_tokens(ref, pricing) for ref in message.attachments) + extra
    return extra


def current_turn_start(history: Sequence[ChatMessage]) -> int:
    """Index where the current user turn starts: the newest real user message.

    Without a real user message the whole history counts as the current turn (index 0), so tool
    messages there are charged their attachments: nothing older exists that they could belong to.
    """
    for i in range(len(history) - 1, -1, -1):
        if is_real_user_message(history[i]):
            return i
    return 0


def message_costs(
    history: Sequence[ChatMessage], pricing: Pricing = DEFAULT_PRICING
) -> list[int]:
    """The estimate of every message, with the current-turn rule applied; O(total length).

    ``sum(message_costs(h)) == estimate_history_tokens(h)``. A session keeps prefix sums of this.
    """
    current = current_turn_start(history)
    return [message_tokens(m, current_turn=i >= current, pricing=pricing)
            for i, m in enumerate(history)]


def estimate_history_tokens(
    history: Sequence[ChatMessage], *, pricing: Pricing | None = None
) -> int:
    """Estimated tokens of a provider-facing history (R20-R23; issue 21 for other content).

    The current turn is the newest real user message and everything after it. When the history
    has no real user message, every message is in the current turn (tool messages then count
    their attachments). ``pricing`` prices content that is not text (default: `Pricing()`;
    `Pricing.spec()` for R20-R23 alone).
    """
    return sum(message_costs(history, DEFAULT_PRICING if pricing is None else pricing))


BREADCRUMB_TOKENS: Final = message_tokens(ChatMessage.breadcrumb(), current_turn=False)
"""The estimate of the breadcrumb message (R31): 17 tokens."""
