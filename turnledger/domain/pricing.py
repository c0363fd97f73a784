"""Content priced by what it is (issue 21, K1-K8): the rules beside R20-R23's text.

R20-R23 price text by its UTF-8 bytes and an image at a fixed 1,600 tokens. A provider bills
other content by what it is, never by the bytes of its base64: a `Pricing` says how each kind is
estimated, a session records it in its profile (so replay and what-if price as it did), and
`priced_parts` tells the estimate (`turnledger.domain.estimate`) which bytes of a message are
not text and what they cost instead. The rules and their sources are in docs/behaviour.md
("Content priced by kind"). Nothing here does I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import struct
from collections.abc import Iterable, Iterator
from typing import Any, Final

import attrs

from turnledger.domain.arguments import is_int
from turnledger.domain.blocks import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    OpaqueBlock,
    RedactedThinkingBlock,
    ServerToolResult,
    ThinkingBlock,
    block_text,
    canonical_json,
    extra_fields,
)
from turnledger.domain.errors import InvalidProfile
from turnledger.domain.messages import ToolCall

__all__ = [
    "DEFAULT_PRICING",
    "IMAGE_TOKEN_ESTIMATE",
    "NOTHING",
    "SPEC_PRICING",
    "Priced",
    "Pricing",
    "image_ref_tokens",
    "image_tokens_by_size",
    "openai_tool_tokens",
    "priced_parts",
]

IMAGE_TOKEN_ESTIMATE: Final = 1600
"""R21: the fixed estimate of one transmitted image."""


def _check_count(key: str, value: object) -> None:
    if not is_int(value) or value < 0:
        raise InvalidProfile(f"pricing.{key}: must be a non-negative integer, got {value!r}")


def _check_positive(key: str, value: object) -> None:
    _check_count(key, value)
    if value == 0:
        raise InvalidProfile(f"pricing.{key}: must be a positive integer, got 0")


@attrs.frozen
class Pricing:
    """How the estimate prices content that is not text (issue 21); part of `RuntimeProfile`.

    - ``by_kind``: False prices every block by the bytes of its text, as R20-R23 alone did
      before issue 21 (sessions recorded before it are read with it, so they replay as they
      were decided); True applies the rules below.
    - ``image_tokens``: one image (R21, R22), wherever a provider takes one: user images, the
      current turn's tool-result images, an assistant's image blocks and generated images.
    - ``image_by_size``: opt-in (K1): an inline image whose header gives its size costs
      ``ceil(width × height / 750)`` after fitting 1,568 px on its long edge (Anthropic's rule);
      an image of unknown size (a URL) still costs ``image_tokens``.
    - ``document_page_tokens``: one page of a base64 PDF (pages counted in the file);
      ``document_tokens``: a document whose pages cannot be counted (a URL, a file id).
    - ``audio_tokens_per_second``: audio input, by its duration (a WAV header, else 128 kbit/s).
    - ``ciphertext_bytes_per_token``: encrypted or redacted reasoning (Responses
      ``encrypted_content``, Anthropic ``redacted_thinking``), by its decoded bytes, in the
      current turn only: both providers drop the reasoning of earlier turns. A thinking
      signature is no content and costs nothing.
    - ``server_result_percent``: the encrypted page contents (``encrypted_content``) of a
      server tool's result (Anthropic web search, fetch, code execution, MCP results) cost
      this share of their text's estimate: they are billed as the text they hold. The rest of
      a result is text, a document in it a document.
    - ``tool_use_system_tokens``: what Anthropic adds to a request with tools (its tool-use
      system prompt), charged when the route's API is Anthropic and the request has tools.
    - ``openai_reply_tokens``: what OpenAI Chat adds to every request, the tokens that prime
      the reply (``<|start|>assistant<|message|>``), charged when the route's API is OpenAI
      Chat.
    - ``openai_tool_counting``: opt-in: on a route whose API is OpenAI's (Chat or Responses),
      a function tool costs what OpenAI's cookbook counts for it (`openai_tool_tokens`)
      instead of its JSON text (R18, the default).

    Raises `InvalidProfile` naming the field for a negative or non-integer count.
    """

    by_kind: bool = True
    image_tokens: int = IMAGE_TOKEN_ESTIMATE
    image_by_size: bool = False
    document_page_tokens: int = 1_500
    document_tokens: int = 1_500
    audio_tokens_per_second: int = 10
    ciphertext_bytes_per_token: int = 16
    server_result_percent: int = 300
    tool_use_system_tokens: int = 346
    openai_reply_tokens: int = 3
    openai_tool_counting: bool = False

    def __attrs_post_init__(self) -> None:
        for key in ("by_kind", "image_by_size", "openai_tool_counting"):
            if not isinstance(getattr(self, key), bool):
                raise InvalidProfile(f"pricing.{key}: must be true or false, "
                                     f"got {getattr(self, key)!r}")
        for key in ("image_tokens", "document_page_tokens", "document_tokens",
                    "audio_tokens_per_second", "server_result_percent",
                    "tool_use_system_tokens", "openai_reply_tokens"):
            _check_count(key, getattr(self, key))
        _check_positive("ciphertext_bytes_per_token", self.ciphertext_bytes_per_token)

    @classmethod
    def spec(cls) -> Pricing:
        """R20-R23 alone, as before issue 21: every block priced by the bytes of its text."""
        return cls(by_kind=False)


DEFAULT_PRICING: Final = Pricing()
SPEC_PRICING: Final = Pricing.spec()


@attrs.frozen
class Priced:
    """What a message holds that is not text: its ``text_bytes`` come out of the text
    estimate; it costs ``tokens`` wherever it is and ``current_turn_tokens`` more in the
    current turn (as R22's attachments)."""

    text_bytes: int = 0
    tokens: int = 0
    current_turn_tokens: int = 0

    def __add__(self, other: Priced) -> Priced:
        return Priced(self.text_bytes + other.text_bytes, self.tokens + other.tokens,
                      self.current_turn_tokens + other.current_turn_tokens)


NOTHING: Final = Priced()


# --- payloads --------------------------------------------------------------------------------

def _decoded(data: str, limit: int | None = None) -> bytes:
    """The bytes of base64 ``data`` (its first ``limit`` bytes); b"" when it is not base64."""
    if limit is not None:
        data = data[: (limit + 2) // 3 * 4]
    try:
        return base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return b""


def _decoded_size(data: str) -> int:
    return len(data) * 3 // 4


def _png_size(head: bytes) -> tuple[int, int] | None:
    if head.startswith(b"\x89PNG\r\n\x1a\n") and len(head) >= 24:
        width, height = struct.unpack(">II", head[16:24])
        return int(width), int(height)
    return None


def _gif_size(head: bytes) -> tuple[int, int] | None:
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        width, height = struct.unpack("<HH", head[6:10])
        return int(width), int(height)
    return None


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    if not head.startswith(b"\xff\xd8"):
        return None
    i = 2
    while i + 9 < len(head):
        if head[i] != 0xFF:
            return None
        marker = head[i + 1]
        length = int.from_bytes(head[i + 2:i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):  # a start-of-frame segment: the size
            height, width = struct.unpack(">HH", head[i + 5:i + 9])
            return int(width), int(height)
        i += 2 + length
    return None


def _webp_size(head: bytes) -> tuple[int, int] | None:
    if head[:4] != b"RIFF" or head[8:12] != b"WEBP" or len(head) < 30:
        return None
    if head[12:16] == b"VP8 ":
        width, height = struct.unpack("<HH", head[26:30])
        return int(width) & 0x3FFF, int(height) & 0x3FFF
    if head[12:16] == b"VP8L" and len(head) >= 25:
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def image_size(data: str) -> tuple[int, int] | None:
    """(width, height) of a base64 PNG, JPEG, GIF or WebP from its header; None if unknown."""
    head = _decoded(data, 65_536)
    for reader in (_png_size, _jpeg_size, _gif_size, _webp_size):
        size = reader(head)
        if size is not None and size[0] > 0 and size[1] > 0:
            return size
    return None


def image_tokens_by_size(width: int, height: int) -> int:
    """Anthropic's published estimate of an image: ``width × height / 750`` after fitting
    1,568 px on its long edge."""
    scale = min(1.0, 1568 / max(width, height))
    return math.ceil(round(width * scale) * round(height * scale) / 750)


def _image_cost(data: str, pricing: Pricing) -> int:
    if pricing.image_by_size and data:
        size = image_size(data)
        if size is not None:
            return image_tokens_by_size(*size)
    return pricing.image_tokens


def image_ref_tokens(ref: str, pricing: Pricing) -> int:
    """The cost of one transmitted image given by its reference (a marker's, an attachment's)."""
    if not pricing.by_kind or not pricing.image_by_size:
        return pricing.image_tokens
    _, sep, data = ref.partition(";base64,")
    return _image_cost(data if ref.startswith("data:") and sep else "", pricing)


_PAGE: Final = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


def pdf_pages(data: str) -> int:
    """The pages of a base64 PDF (its ``/Type /Page`` objects); at least 1."""
    return max(1, len(_PAGE.findall(_decoded(data))))


def audio_seconds(data: str, audio_format: str) -> float:
    """The duration of base64 audio: from a WAV header, else at 128 kbit/s."""
    size = _decoded_size(data)
    if audio_format == "wav":
        head = _decoded(data, 64)
        if head[:4] == b"RIFF" and head[8:12] == b"WAVE" and len(head) >= 32:
            byte_rate = int.from_bytes(head[28:32], "little")
            if byte_rate > 0:
                return max(0, size - 44) / byte_rate
    return size * 8 / 128_000


# --- blocks ----------------------------------------------------------------------------------

def _document(block: DocumentBlock, pricing: Pricing) -> Priced:
    source = extra_fields(block.source)
    kind, data = source.get("type"), source.get("data")
    if kind == "text":
        return NOTHING  # a text document is text
    if kind == "base64" and isinstance(data, str):
        pages = pdf_pages(data) if source.get("media_type") == "application/pdf" else 1
        return Priced(len(block.source), pages * pricing.document_page_tokens)
    return Priced(len(block.source), pricing.document_tokens)


def _file_part(inner: dict[str, Any], pricing: Pricing) -> int:
    """An OpenAI ``file`` / ``input_file`` part: a PDF by its pages, else one document."""
    data = inner.get("file_data")
    head, sep, payload = data.partition(";base64,") if isinstance(data, str) else ("", "", "")
    if sep and head.endswith("application/pdf"):
        return pdf_pages(payload) * pricing.document_page_tokens
    return pricing.document_tokens


def _opaque(block: OpaqueBlock, role: str, pricing: Pricing) -> Priced:
    fields = extra_fields(block.json)
    kind = fields.get("type")
    size = len(block.json)
    if kind == "input_audio" and isinstance(fields.get("input_audio"), dict):
        audio = fields["input_audio"]
        seconds = audio_seconds(str(audio.get("data", "")), str(audio.get("format", "")))
        return Priced(size, math.ceil(seconds * pricing.audio_tokens_per_second))
    if kind == "file" and isinstance(fields.get("file"), dict):
        return Priced(size, _file_part(fields["file"], pricing))
    if kind == "input_file":
        return Priced(size, _file_part(fields, pricing))
    if kind == "image_generation_call" and isinstance(fields.get("result"), str):
        result = fields["result"]
        return Priced(len(result), _image_cost(result, pricing))
    if kind == "image" and isinstance(fields.get("source"), dict):  # an image kept whole
        data = fields["source"].get("data")
        return _image_part(size, _image_cost(data if isinstance(data, str) else "", pricing),
                           role)
    if kind == "compaction" and isinstance(fields.get("encrypted_content"), str):
        # The encrypted context of the turns it replaced: read in every request that carries
        # it, so priced wherever it is (not K4's current turn only).
        data = fields["encrypted_content"]
        return Priced(len(data), _ciphertext_tokens(data, pricing))
    if kind == "input_image":  # a Responses image given by its file_id: size unknown
        return _image_part(size, pricing.image_tokens, role)
    return NOTHING


def _image_part(size: int, tokens: int, role: str) -> Priced:
    # A tool result's images cost in the current turn only, as its attachments do (R22).
    return Priced(size, 0, tokens) if role == "tool" else Priced(size, tokens)


def _ciphertext_tokens(data: str, pricing: Pricing) -> int:
    return math.ceil(_decoded_size(data) / pricing.ciphertext_bytes_per_token)


def _ciphertext(data: str, pricing: Pricing) -> Priced:
    return Priced(len(data), 0, _ciphertext_tokens(data, pricing))


def _server_result(block: ServerToolResult, pricing: Pricing) -> Priced:
    """K5: the encrypted page contents of a server tool's result cost ``server_result_percent``
    of their text estimate (they are billed as the text they hold); a document in it costs as
    a document (K2); the rest of it is text."""
    try:
        content = json.loads(block.content)
    except ValueError:
        return NOTHING
    encrypted, documents = _server_parts(content, pricing)
    tokens = (encrypted + 3) // 4 * pricing.server_result_percent // 100
    return Priced(encrypted, tokens) + documents if encrypted else documents


def _server_parts(value: object, pricing: Pricing) -> tuple[int, Priced]:
    """(bytes of the ``encrypted_content`` strings, the documents) of a server result."""
    encrypted, documents = 0, NOTHING
    if isinstance(value, list):
        for item in value:
            more, docs = _server_parts(item, pricing)
            encrypted, documents = encrypted + more, documents + docs
    elif isinstance(value, dict):
        if value.get("type") == "document" and isinstance(value.get("source"), dict):
            source = value["source"]
            if source.get("type") != "text":
                block = DocumentBlock(canonical_json(source))
                priced = _document(block, pricing)
                # The source's bytes as they stand in the result's JSON text.
                return 0, Priced(len(canonical_json(source)), priced.tokens)
        for key, item in value.items():
            if key == "encrypted_content" and isinstance(item, str):
                encrypted += len(item.encode("utf-8"))
            else:
                more, docs = _server_parts(item, pricing)
                encrypted, documents = encrypted + more, documents + docs
    return encrypted, documents


def _block(block: ContentBlock, role: str, pricing: Pricing) -> Priced:
    match block:
        case ImageBlock() if role not in ("user", "tool"):
            # R21 prices a user's images by their markers and R22 a tool's by its attachments.
            return Priced(len(block_text(block).encode("utf-8")),
                          _image_cost(block.data, pricing))
        case DocumentBlock():
            return _document(block, pricing)
        case RedactedThinkingBlock(data=data):
            return _ciphertext(data, pricing)
        case ThinkingBlock(signature=signature) if signature and role == "reasoning":
            # A Responses reasoning item: its ciphertext is the reasoning; no byte of it is
            # in the text (the signature never is).
            priced = _ciphertext(signature, pricing)
            return attrs.evolve(priced, text_bytes=0)
        case ServerToolResult():
            return _server_result(block, pricing)
        case OpaqueBlock():
            return _opaque(block, role, pricing)
    return NOTHING


def priced_parts(role: str, blocks: Iterable[Any], pricing: Pricing) -> Priced:
    """What the ``blocks`` of a ``role`` message cost that is not text (see `Pricing`).

    ``role`` is the message's role, ``"tool"`` for a tool result's blocks, ``"reasoning"`` for
    the block of a Responses reasoning item. Nothing when ``pricing.by_kind`` is False.
    """
    if not pricing.by_kind:
        return NOTHING
    total = NOTHING
    for block in _content_blocks(blocks):
        part = _block(block, role, pricing)
        if part is not NOTHING:
            total = total + part
    return total


def _content_blocks(blocks: Iterable[Any]) -> Iterator[ContentBlock]:
    return (b for b in blocks if not isinstance(b, ToolCall))


# --- tool schemas ----------------------------------------------------------------------------

_FUNCTION_START: Final = 7
_PROPERTIES_START: Final = 3
_PROPERTY: Final = 3
_ENUM_START: Final = -3
_ENUM_ITEM: Final = 3
_FUNCTIONS_END: Final = 12


def _quarter(text: str) -> int:
    return (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


def openai_tool_tokens(schemas: Iterable[str]) -> int:
    """The tokens of a request's tool schemas as OpenAI's cookbook counts them (opt-in,
    `Pricing.openai_tool_counting`).

    OpenAI renders function tools compactly, not as their JSON: "How to count tokens with
    tiktoken" (OpenAI Cookbook, tool calls) counts 7 tokens a function plus its
    ``name:description``, 3 for its properties, 3 a property plus its
    ``name:type:description``, an enum's items (3 each plus the item, less 3), and 12 at the
    end; a trailing period of a description is not counted. The texts cost R20's four bytes a
    token here, as everywhere. A function tool in Chat's (``{"type": "function", "function":
    {...}}``) or Responses' form (``{"type": "function", "name": ...}``); any other tool (a
    hosted tool) or a text that is not such JSON costs its JSON text (R18).
    """
    total, functions = 0, 0
    for schema in schemas:
        function = _function_of(schema)
        if function is None:
            total += _quarter(schema)
            continue
        functions += 1
        total += _function_tokens(function)
    return total + (_FUNCTIONS_END if functions else 0)


def _function_of(schema: str) -> dict[str, Any] | None:
    try:
        tool = json.loads(schema)
    except ValueError:
        return None
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        return None
    function = tool.get("function", tool)
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return None
    return function


def _text_of(value: object) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else json.dumps(value, ensure_ascii=False)


def _function_tokens(function: dict[str, Any]) -> int:
    description = _text_of(function.get("description")).removesuffix(".")
    tokens = _FUNCTION_START + _quarter(f"{function['name']}:{description}")
    parameters = function.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(properties, dict) or not properties:
        return tokens
    tokens += _PROPERTIES_START
    for key, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        tokens += _PROPERTY
        enum = spec.get("enum")
        if isinstance(enum, list):
            tokens += _ENUM_START + sum(_ENUM_ITEM + _quarter(_text_of(item)) for item in enum)
        kind = _text_of(spec.get("type"))
        tokens += _quarter(f"{key}:{kind}:{_text_of(spec.get('description')).removesuffix('.')}")
    return tokens
