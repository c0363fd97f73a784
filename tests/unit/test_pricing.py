"""Issue 21 point 2: content priced by what it is, never base64 as text (docs/behaviour.md K1-K8).

Each rule of `turnledger.domain.pricing` against the number it must give, the default profile
unchanged on what SPEC covers (R20-R23), the opt-in size-aware image rule, and the pricing
recorded with the session so that replay and what-if price as it was decided.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest

import turnledger as tl
from turnledger.audit import what_if
from turnledger.blocks import RedactedThinkingBlock, ServerToolResult
from turnledger.domain.blocks import DocumentBlock, ImageBlock, OpaqueBlock, canonical_json
from turnledger.domain.budget import session_pricing
from turnledger.domain.estimate import FRAMING_TOKENS, message_tokens, text_tokens
from turnledger.domain.events import SessionStarted
from turnledger.domain.pricing import SPEC_PRICING, image_tokens_by_size
from turnledger.profiles import Pricing
from turnledger.providers import from_anthropic, from_openai_responses
from turnledger.store.codec import default_codec

RECORDS = Path(__file__).parents[1] / "fixtures" / "records"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _png(width: int, height: int, padding: int = 0) -> str:
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(
        ">II", width, height) + b"\x08\x06\x00\x00\x00"
    return _b64(header + b"\x00" * padding)


def _pdf(pages: int, padding: int = 0) -> str:
    body = b"%%PDF-1.4\n1 0 obj << /Type /Pages /Count %d >> endobj\n" % pages
    body += b"".join(b"%d 0 obj << /Type /Page /Parent 1 0 R >> endobj\n" % (i + 2)
                     for i in range(pages))
    return _b64(body + b"%" * padding)


def _wav(seconds: float, rate: int = 16_000) -> str:
    frames = int(seconds * rate)
    header = b"RIFF" + struct.pack("<I", 36 + frames * 2) + b"WAVEfmt " + struct.pack(
        "<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16) + b"data" + struct.pack("<I", frames * 2)
    return _b64(header + b"\x00\x00" * frames)


def _assistant(block: object) -> tl.ChatMessage:
    return tl.ChatMessage.from_blocks("assistant", [block])  # type: ignore[list-item]


def test_i21_p2_a_generated_image_costs_an_image_not_its_base64() -> None:
    """The issue's 1.6 MB image_generation_call result: 1,600 tokens, not ~550,000, so the
    conversation prepares within a 128,000-token window."""
    result = _png(1024, 1024, padding=1_200_000)
    item = {"type": "image_generation_call", "id": "ig_1", "status": "completed",
            "result": result}
    history = from_openai_responses([{"role": "user", "content": "Draw a cat"}, item])
    chat = tl.to_chat_messages(history)
    other = len(canonical_json(item)) - len(result)
    assert text_tokens("Draw a cat") + 4 + FRAMING_TOKENS + math.ceil(other / 4) + 1600 == (
        tl.estimate_history_tokens(chat))
    assert 400_000 < tl.estimate_history_tokens(chat, pricing=Pricing.spec())
    with tl.open_store("memory://") as store:
        session = store.import_conversation(
            [*history, tl.ChatMessage.user("Now a dog")],
            providers=[tl.ProviderProfile("openai", "gpt-image", 128_000)])
        assert session.prepare_request().estimated_tokens < 2_000


def test_i21_p2_a_pdf_costs_its_pages() -> None:
    """A base64 PDF costs 1,500 tokens a page (Anthropic's published figure), whatever its
    bytes; a document of unknown size (a URL) one document's worth."""
    pdf = DocumentBlock(canonical_json({"type": "base64", "media_type": "application/pdf",
                                        "data": _pdf(3, padding=100_000)}))
    url = DocumentBlock(canonical_json({"type": "url", "url": "https://x/spec.pdf"}))
    for block, expected in ((pdf, 3 * 1500), (url, 1500)):
        message = tl.ChatMessage.from_blocks("user", [block])
        assert FRAMING_TOKENS + expected == message_tokens(message, current_turn=False)


def test_i21_p2_audio_costs_its_duration() -> None:
    """100 KB of WAV audio (3.2 s at 16 kHz) costs 10 tokens a second, not 25,000."""
    part = {"type": "input_audio", "input_audio": {"data": _wav(3.2), "format": "wav"}}
    message = tl.ChatMessage.from_blocks("user", [OpaqueBlock(canonical_json(part))])
    assert FRAMING_TOKENS + 32 == message_tokens(message, current_turn=False)


def test_i21_p2_reasoning_ciphertext_costs_in_the_current_turn_only() -> None:
    """11.7 KB of encrypted_content costs its decoded bytes / 16 in the current turn (both
    providers drop earlier turns' reasoning) and nothing before it; the summary is text."""
    secret = _b64(b"\x01" * 8_775)  # 11,700 base64 characters
    (item,) = from_openai_responses([{"type": "reasoning", "summary": [
        {"type": "summary_text", "text": "Think."}], "encrypted_content": secret}])
    (message,) = tl.to_chat_messages([item])
    base = FRAMING_TOKENS + text_tokens("Think.")
    assert (base, base + math.ceil(8_775 / 16)) == (
        message_tokens(message, current_turn=False), message_tokens(message, current_turn=True))


def test_i21_p2_redacted_thinking_is_ciphertext_not_text() -> None:
    """A redacted_thinking block's base64 is priced as ciphertext (current turn only)."""
    data = _b64(b"\x02" * 3_000)
    message = _assistant(RedactedThinkingBlock(data))
    assert (FRAMING_TOKENS, FRAMING_TOKENS + math.ceil(3_000 / 16)) == (
        message_tokens(message, current_turn=False), message_tokens(message, current_turn=True))


def test_i21_p2_an_assistant_image_costs_an_image() -> None:
    """An image block anywhere a provider takes an image costs R21's 1,600."""
    message = _assistant(ImageBlock(media_type="image/png", data=_png(64, 64, 50_000)))
    assert FRAMING_TOKENS + 1600 == message_tokens(message, current_turn=False)


def test_i21_p2_size_aware_image_pricing_is_opt_in() -> None:
    """With image_by_size an inline image costs w x h / 750 after fitting 1,568 px (Anthropic's
    formula); a URL image, whose size is unknown, still costs 1,600; by default 1,600 each."""
    user = tl.ChatMessage.from_blocks("user", [
        ImageBlock(media_type="image/png", data=_png(1000, 1000)),
        ImageBlock("https://x/cat.png")])
    text = FRAMING_TOKENS + text_tokens("\n")
    by_size = Pricing(image_by_size=True)
    assert text + 1334 + 1600 == message_tokens(user, current_turn=False, pricing=by_size)
    assert text + 3200 == message_tokens(user, current_turn=False)
    assert 1568 * 1176 // 750 + 1 == image_tokens_by_size(4000, 3000)


@pytest.mark.parametrize("history", [
    [tl.ChatMessage.system("Be brief."), tl.ChatMessage.user("Look [IMAGE:/tmp/a.png] here"),
     tl.ChatMessage.tool_result_envelope("c1", "done", ["https://x/b.png"]),
     tl.ChatMessage.assistant("Thinking... [IMAGE:https://x/c.png]")],
    [tl.ChatMessage.user("héllo"), tl.ChatMessage.tool("plain tool text [IMAGE:/x.png]")],
])
def test_r20_r23_the_default_profile_prices_spec_content_as_the_spec_says(
    history: list[tl.ChatMessage],
) -> None:
    """On what R20-R23 cover (text, image markers, declared attachments) the default pricing
    and the SPEC's alone give the same estimate."""
    assert tl.estimate_history_tokens(history, pricing=Pricing.spec()) == (
        tl.estimate_history_tokens(history))


def test_i21_p2_a_new_session_records_its_pricing_and_an_old_one_replays_without() -> None:
    """A session started without a pricing records Pricing(); the v1 SessionStarted fixture
    (recorded before issue 21) reads with none, so its session prices by R20-R23 alone."""
    with tl.open_store("memory://") as store:
        session = store.start_session(profile=tl.RuntimeProfile())
        started = session.events()[0]
    assert isinstance(started, SessionStarted)
    assert Pricing() == started.profile.pricing
    raw = msgpack.unpackb((RECORDS / "session_started_v1.msgpack").read_bytes())
    _, payload = msgpack.unpackb(raw["state"])
    event = default_codec().decode_event(raw["topic"], payload, started.originator_id, 1)
    assert isinstance(event, SessionStarted)
    assert (None, SPEC_PRICING) == (event.profile.pricing, session_pricing(event.profile))


def test_i21_p2_pricing_is_set_in_the_profile_file(tmp_path: Path) -> None:
    """``[pricing]`` sets the rules; an unknown key or a negative count names itself."""
    path = tmp_path / "p.toml"
    path.write_text("[pricing]\nimage_by_size = true\ndocument_page_tokens = 2000\n")
    profile, _ = tl.load_profile(path)
    assert Pricing(image_by_size=True, document_page_tokens=2000) == profile.pricing
    path.write_text("[pricing]\nimage_size = true\n")
    with pytest.raises(tl.InvalidProfile, match=r"pricing\.image_size: unknown key"):
        tl.load_profile(path)
    with pytest.raises(tl.InvalidProfile, match=r"pricing\.audio_tokens_per_second"):
        Pricing(audio_tokens_per_second=-1)


def test_i21_p2_what_if_prices_as_recorded_unless_told_otherwise() -> None:
    """what_if with a profile that chooses no pricing keeps the session's recorded one, and
    the recorded requests re-decide to the estimates recorded."""
    item = {"type": "image_generation_call", "id": "ig_1", "status": "completed",
            "result": _png(64, 64, 90_000)}
    with tl.open_store("memory://") as store:
        session = store.import_conversation(
            [*from_openai_responses([{"role": "user", "content": "Draw"}, item]),
             tl.ChatMessage.user("Again")])
        session.prepare_request()
        events = session.events()
    report = what_if(events, tl.RuntimeProfile(max_context_tokens=50_000))
    assert Pricing() == report.profile.pricing
    assert [r.recorded.estimated_tokens for r in report.requests] == [
        r.what_if.estimated_tokens for r in report.requests]


def test_i21_p2_anthropic_adds_its_tool_use_system_prompt() -> None:
    """A request with tools to a provider whose API is Anthropic costs the 346 tokens of the
    tool-use system prompt Anthropic documents and adds; without an API nothing is added."""
    schema = json.dumps({"name": "f", "description": "d", "input_schema": {"type": "object"}})
    estimates = []
    for api in ("anthropic", None):
        with tl.open_store("memory://") as store:
            provider = tl.ProviderProfile("p", "m", 200_000, api=api)
            session = store.start_session(providers=[provider])
            session.append(tl.ChatMessage.user("hi"))
            estimates.append(session.prepare_request(tools=[schema]).estimated_tokens)
    assert 346 == estimates[0] - estimates[1]


ANTHROPIC_FILE_IMAGE = [
    {"role": "user", "content": [{"type": "text", "text": "Get the file"}]},
    {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "get_file", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
        {"type": "image", "source": {"type": "file", "file_id": "file_011"}}]}]},
]
RESPONSES_FILE_IMAGE = [
    {"role": "user", "content": [{"type": "input_text", "text": "Look"},
                                 {"type": "input_image", "file_id": "file-1", "detail": "auto"}]},
    {"type": "function_call", "call_id": "call_1", "name": "get_file", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1", "output": [
        {"type": "input_image", "file_id": "file-2", "detail": "auto"}]},
]


@pytest.mark.parametrize(("api", "history", "images"), [
    ("anthropic", lambda: from_anthropic({"messages": ANTHROPIC_FILE_IMAGE}), 1),
    ("openai_responses", lambda: from_openai_responses(RESPONSES_FILE_IMAGE), 2),
])
def test_k7_an_image_given_by_file_id_is_sent_to_its_api_and_costs_an_image(
    api: str, history: Any, images: int
) -> None:
    """An Anthropic ``image`` with a ``file`` source and a Responses ``input_image`` with a
    ``file_id`` (in a user message or a tool result) go to their own API as recorded, and each
    costs an image (K1), not its JSON text; nothing is left out."""
    with tl.open_store("memory://") as store:
        provider = tl.ProviderProfile("p", "m", 200_000, api=api)
        session = store.import_conversation(history(), providers=[provider])
        request = session.prepare_request()
    assert () == request.left_out
    assert images * 1600 < request.estimated_tokens < images * 1600 + 100


def test_k4_a_compaction_item_costs_its_ciphertext_in_every_turn() -> None:
    """A Responses ``compaction`` item (the encrypted context of earlier turns) costs its
    decoded bytes / 16, not its base64 as text, and in every turn: it is the context the
    provider reads in place of those turns, not reasoning it drops."""
    secret = _b64(b"\x03" * 2_100)  # 2,800 base64 characters
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": secret}
    (message,) = tl.to_chat_messages(from_openai_responses([item]))
    other = len(canonical_json(item)) - len(secret)
    expected = FRAMING_TOKENS + math.ceil(other / 4) + math.ceil(2_100 / 16)
    assert (expected, expected) == (message_tokens(message, current_turn=False),
                                    message_tokens(message, current_turn=True))


def test_k5_only_the_encrypted_part_of_a_server_tool_result_costs_more_than_text() -> None:
    """A web fetch result holding a plain-text page costs its text (R20's rate), not 300 %:
    K5's 300 % is for the encrypted page contents a result carries (a web search result's
    ``encrypted_content``), whose bill is the text they hold; a fetched PDF costs its pages
    (K2), not its base64."""
    page = "Pydantic AI is a Python agent framework. " * 100
    secret = "Zm9v" * 500
    pdf = _pdf(2, padding=20_000)
    fetched = ServerToolResult("web_fetch_tool_result", "srv_1", canonical_json({
        "type": "web_fetch_result", "url": "https://x", "content": {
            "type": "document", "source": {"type": "text", "media_type": "text/plain",
                                           "data": page}}}))
    searched = ServerToolResult("web_search_tool_result", "srv_2", canonical_json([
        {"type": "web_search_result", "url": "https://y", "title": "Y",
         "encrypted_content": secret}]))
    fetched_pdf = ServerToolResult("web_fetch_tool_result", "srv_3", canonical_json({
        "type": "web_fetch_result", "url": "https://z", "content": {
            "type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                           "data": pdf}}}))

    def cost(block: ServerToolResult) -> int:
        return message_tokens(_assistant(block), current_turn=False)

    assert FRAMING_TOKENS + text_tokens(fetched.content) == cost(fetched)
    rest = len(searched.content) - len(secret)
    assert FRAMING_TOKENS + math.ceil(rest / 4) + text_tokens(secret) * 3 == cost(searched)
    source = {"type": "base64", "media_type": "application/pdf", "data": pdf}
    rest = len(fetched_pdf.content) - len(canonical_json(source))  # K2 prices the source
    assert FRAMING_TOKENS + math.ceil(rest / 4) + 2 * 1500 == cost(fetched_pdf)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather.",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city"],
                   "properties": {"city": {"type": "string", "description": "A city."},
                                  "unit": {"type": "string", "enum": ["c", "f"]}}},
    "strict": True}}


def test_k6_openai_tool_counting_is_opt_in_and_follows_openais_count() -> None:
    """With ``openai_tool_counting`` a function tool sent to an OpenAI API costs what OpenAI's
    cookbook counts (7 a function, its name and description, 3 for its properties, 3 and
    name:type:description a property, an enum's items, 12 at the end), the text at four
    bytes a token; by default, and to Anthropic, it costs its JSON text (R18). A
    Responses function tool counts the same; a hosted tool stays JSON text."""
    responses_form = {"type": "function", **WEATHER["function"]}
    hosted = {"type": "web_search"}
    counted = (7 + text_tokens("get_weather:Get the weather") + 3
               + 3 + text_tokens("city:string:A city")
               + 3 + text_tokens("unit:string:") - 3 + 3 + text_tokens("c") + 3
               + text_tokens("f") + 12)
    on = Pricing(openai_tool_counting=True)
    estimates = {}
    for api, pricing, tool in (("openai_chat", on, WEATHER), ("openai_chat", None, WEATHER),
                               ("openai_responses", on, responses_form),
                               ("openai_responses", on, hosted),
                               ("anthropic", on, WEATHER)):
        with tl.open_store("memory://") as store:
            provider = tl.ProviderProfile("p", "m", 200_000, api=api)
            profile = tl.RuntimeProfile(pricing=pricing or Pricing())
            session = store.start_session(profile=profile, providers=[provider])
            session.append(tl.ChatMessage.user("hi"))
            bare = session.prepare_request().estimated_tokens
            with_tool = session.prepare_request(tools=[tool]).estimated_tokens
            estimates[api, pricing is not None, tool["type"]] = with_tool - bare
    schema = json.dumps(WEATHER, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    assert {("openai_chat", True, "function"): counted,
            ("openai_chat", False, "function"): text_tokens(schema),
            ("openai_responses", True, "function"): counted,
            ("openai_responses", True, "web_search"): text_tokens('{"type":"web_search"}'),
            ("anthropic", True, "function"): text_tokens(schema) + 346} == estimates


def test_k6_openai_chat_adds_the_three_tokens_that_prime_the_reply() -> None:
    """A request to a provider whose API is OpenAI Chat costs the 3 tokens OpenAI documents
    for priming every reply (``<|start|>assistant<|message|>``); R20-R23 alone add none."""
    estimates = []
    for api, pricing in (("openai_chat", Pricing()), (None, Pricing()),
                         ("openai_chat", Pricing.spec())):
        with tl.open_store("memory://") as store:
            provider = tl.ProviderProfile("p", "m", 200_000, api=api)
            session = store.start_session(profile=tl.RuntimeProfile(pricing=pricing),
                                          providers=[provider])
            session.append(tl.ChatMessage.user("hi"))
            estimates.append(session.prepare_request().estimated_tokens)
    assert [3, 0] == [estimates[0] - estimates[1], estimates[2] - estimates[1]]
