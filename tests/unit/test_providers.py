"""Issue 8, point 3: provider conversions are exact both ways, for every block type."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.properties import examples
from tests.strategies import (
    chat_histories,
    conversation_histories,
    every_block_type_history,
    provider_histories,
)
from turnledger.domain.blocks import ThinkingBlock, canonical_json, canonical_text
from turnledger.domain.bodies import fit_messages
from turnledger.domain.budget import Route
from turnledger.domain.decider import PreparedRequest, request_digest
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.estimate import image_count
from turnledger.domain.messages import (
    BREADCRUMB_TEXT,
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    assistant_envelope,
    to_chat_messages,
    tool_envelope,
)
from turnledger.domain.providers import from_openai_responses_item
from turnledger.providers import (
    TranscriptError,
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
)
from turnledger.replay.transcripts import read_conversations, write_conversation

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "conversations"
Importer = Callable[[Any], list[ConversationMessage]]
Exporter = Callable[[Any], Any]
FORMATS: dict[str, tuple[Importer, Exporter]] = {
    "openai": (from_openai_chat, to_openai_chat),
    "anthropic": (from_anthropic, to_anthropic),
    "responses": (from_openai_responses, to_openai_responses),
}


def fixture_lines(fmt: str) -> list[Any]:
    return [json.loads(line) for line in (FIXTURES / f"{fmt}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("fmt", list(FORMATS))
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_e11_generated_histories_round_trip(fmt: str, data: st.DataObject) -> None:
    """from_X(to_X(h)) == h and to_X(from_X(raw)) == raw for generated conversations."""
    importer, exporter = FORMATS[fmt]
    history = data.draw(provider_histories(fmt))
    raw = json.loads(json.dumps(exporter(history)))  # what a JSON file or a wire would hold
    assert history == importer(raw)
    assert raw == exporter(importer(raw))
    assert raw == exporter(to_chat_messages(history))


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_e11_every_fixture_conversation_round_trips(fmt: str) -> None:
    """to_X(from_X(raw)) == raw, JSON-equal, and from_X(to_X(h)) == h, for every fixture."""
    importer, exporter = FORMATS[fmt]
    for raw in fixture_lines(fmt):
        history = importer(raw)
        assert raw == exporter(history)
        assert history == importer(exporter(history))
        assert raw == exporter(to_chat_messages(history))  # the chat view carries it all


class SdkObject:
    """A stand-in for a provider SDK model: read through ``model_dump()``."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def model_dump(self, *, mode: str = "python", exclude_unset: bool = False) -> dict[str, Any]:
        copied: dict[str, Any] = json.loads(json.dumps(self.data))
        return copied


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_e11_sdk_objects_import_like_their_dicts(fmt: str) -> None:
    """Messages given as SDK objects (``model_dump()``) import as their plain dicts do."""
    importer, _ = FORMATS[fmt]
    for raw in fixture_lines(fmt):
        if isinstance(raw, dict):
            wrapped: Any = {**raw, "messages": [SdkObject(m) for m in raw["messages"]]}
        else:
            wrapped = [SdkObject(m) for m in raw]
        assert importer(raw) == importer(wrapped)


def test_e11_every_block_type_survives_anthropic_and_the_chat_view() -> None:
    """The history of every block type comes back equal from Anthropic's form."""
    history = every_block_type_history()
    assert history == from_anthropic(to_anthropic(history))
    assert history == from_anthropic(to_anthropic(to_chat_messages(history)))


def test_e11_unknown_block_types_never_reject_a_conversation() -> None:
    """A block type nobody knows yet is kept whole (opaque) and written back as it came."""
    raw = {"messages": [{"role": "user", "content": [{"type": "hologram", "depth": [1, 2]}]}]}
    assert raw == to_anthropic(from_anthropic(raw))


@pytest.mark.parametrize(
    ("fmt", "raw", "expected"),
    [
        ("openai", [{"role": "tool", "content": "x"}], "message 0: tool_call_id missing"),
        ("openai", [{"content": "x"}], "message 0: role missing"),
        ("anthropic", {"messages": [{"role": "bot", "content": "x"}]},
         "message 0: role 'bot' is not supported (user, assistant or system)"),
        ("responses", [{"type": "function_call", "name": "f", "arguments": "{}"}],
         "message 0: call_id missing"),
    ],
)
def test_e11_bad_input_names_the_message_and_field(fmt: str, raw: Any, expected: str) -> None:
    """A malformed message is a TranscriptError naming its index and the field."""
    importer, _ = FORMATS[fmt]
    with pytest.raises(TranscriptError) as caught:
        importer(raw)
    assert expected == str(caught.value)


def test_e6_prepared_request_gives_each_provider_body() -> None:
    """PreparedRequest.to_openai_chat/.to_anthropic/.to_openai_responses convert its messages
    as each API takes them (issue 21: what cannot cross is left out, `fit_messages`)."""
    messages = to_chat_messages(every_block_type_history())
    request = PreparedRequest(messages, Route("p", "m"), None, 1000, 10, None, window=1000)
    assert to_openai_chat(fit_messages(messages, "openai_chat")[0]) == request.to_openai_chat()
    assert to_anthropic(fit_messages(messages, "anthropic")[0]) == request.to_anthropic()
    assert to_openai_responses(
        fit_messages(messages, "openai_responses")[0]
    ) == request.to_openai_responses()


def test_e6_digest_covers_blocks_and_keeps_old_digests() -> None:
    """A plain message digests as before issue 8; a thinking signature changes the digest."""
    # SHA-256 of [["user","hi",[],false]], the digest the code before issue 8 recorded.
    before = "c4b28590e83fdcfb18b11182f5cfc73510d1e373e8208689c4057140db622204"
    assert before == request_digest([ChatMessage.user("hi")])
    assert before == request_digest([ChatMessage("user", "hi", envelope=False)])
    signed = [ChatMessage.from_blocks("assistant", [ThinkingBlock("t", "sig-1")])]
    resigned = [ChatMessage.from_blocks("assistant", [ThinkingBlock("t", "sig-2")])]
    assert request_digest(signed) != request_digest(resigned)


def test_r21_a_bare_user_messages_image_markers_are_sent_as_images() -> None:
    """A runtime's user text with a loadable [IMAGE:ref] marker sends an image part; an imported
    string is sent as it came, and a tool's declared images go with its result (R22)."""
    history = [
        ChatMessage.user("Why? [IMAGE:/tmp/log.png]"),
        ChatMessage("user", "[IMAGE:/tmp/log.png]", envelope=False),
        ChatMessage.tool_result_envelope("c1", "saved", ["https://x/b.png"]),
    ]
    assert [
        {"role": "user", "content": [{"type": "text", "text": "Why? "},
                                     {"type": "image_url", "image_url": {"url": "/tmp/log.png"}}]},
        {"role": "user", "content": "[IMAGE:/tmp/log.png]"},
        {"role": "tool", "tool_call_id": "c1", "content": [
            {"type": "text", "text": "saved"},
            {"type": "image_url", "image_url": {"url": "https://x/b.png"}}]},
    ] == to_openai_chat(history)


# --- what the first (lossy) converters' tests said that still holds ---------------------------
# tests/unit/test_formats.py tested turnledger/replay/formats.py, which providers replaced. The
# claims below still hold for the providers converters and the JSONL reader built on them; the
# others described the lossy behaviour (markers instead of blocks, dropped fields, rejected
# unknown content) and went with it.

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
    "rkJggg=="
)
PNG_URL = f"data:image/png;base64,{PNG}"


def bare(history: list[ConversationMessage]) -> list[ConversationMessage]:
    """``history`` without what only exact round trips need (blocks, verbatim fields, the
    envelope flag): the roles, texts, calls, results and images a runtime reads."""
    out: list[ConversationMessage] = []
    for item in history:
        if isinstance(item, Chat):
            m = item.message
            out.append(Chat(ChatMessage(m.role, m.content, m.attachments, synthetic=m.synthetic)))
        elif isinstance(item, AssistantToolCalls):
            calls = tuple(ToolCall(c.id, c.name, c.arguments) for c in item.tool_calls)
            out.append(AssistantToolCalls(item.text or None, calls, item.reasoning_content))
        else:
            assert isinstance(item, ToolResults)
            out.append(ToolResults(tuple(
                ToolResult(r.tool_call_id, r.content, r.tool_name, r.attachments)
                for r in item.results
            )))
    return out


def read_transcripts(fmt: str) -> dict[int, list[ConversationMessage] | TranscriptError]:
    """Line number -> history (or error) of ``tests/fixtures/transcripts/FMT.jsonl``."""
    text = (TRANSCRIPTS / f"{fmt}.jsonl").read_text(encoding="utf-8")
    return {
        item.line: item if isinstance(item, TranscriptError) else bare(item.history)
        for item in read_conversations(text, fmt)
    }


def test_e11_openai_transcript_reports_the_malformed_line_and_parses_the_others() -> None:
    """Line 5 (a tool call without a function name) is an error naming it; the others parse."""
    parsed = read_transcripts("openai")
    error = parsed[5]
    assert isinstance(error, TranscriptError)
    assert (5, "line 5: message 1: tool_calls[0].function.name missing") == (error.line, str(error))
    assert [1, 2, 3, 4, 6] == [n for n, v in sorted(parsed.items()) if isinstance(v, list)]


def test_openai_import_reads_roles_parallel_calls_and_named_results() -> None:
    """developer is a system message; parallel calls are one step, their results one batch named
    by the calls; a tool's image part is a declared attachment, its marker text stays text."""
    parsed = read_transcripts("openai")
    assert [
        Chat(ChatMessage.system("Use the tools; answer in one line.")),
        Chat(ChatMessage.user("How big is the repo, and what is in README.md?")),
        AssistantToolCalls(None, (ToolCall("call_du", "shell", '{"cmd": "du -sh ."}'),
                                  ToolCall("call_cat", "read_file", '{"path": "README.md"}'))),
        ToolResults((ToolResult("call_du", "4.2M\t.", "shell"),
                     ToolResult("call_cat", "# demo\nA demo project.", "read_file"))),
        AssistantToolCalls("Let me also count the files.",
                           (ToolCall("call_wc", "shell", '{"cmd": "git ls-files | wc -l"}'),)),
        ToolResults((ToolResult("call_wc", "37", "shell"),)),
        Chat(ChatMessage.assistant("4.2 MB, 37 files; README.md says: A demo project.")),
    ] == parsed[2]
    shot = ToolResult("call_shot", "saved [IMAGE:/tmp/home.png]", "screenshot", ("/tmp/home.png",))
    assert ToolResults((shot,)) == parsed[4][3]


def test_openai_import_details_of_tool_messages_and_assistant_steps() -> None:
    """Consecutive tool messages are one batch, a result without its call has no tool name;
    reasoning_content stays on a tool step; ``tool_calls: []`` is a plain assistant message; a
    breadcrumb's text is a real user message (R31)."""
    assert [ToolResults((ToolResult("orphan", "x"), ToolResult("orphan2", ""))),
            Chat(ChatMessage.user("hi"))] == bare(from_openai_chat([
                {"role": "tool", "tool_call_id": "orphan", "content": "x"},
                {"role": "tool", "tool_call_id": "orphan2", "content": None},
                {"role": "user", "content": "hi"},
            ]))
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert [AssistantToolCalls(None, (ToolCall("c", "f", "{}"),), "think")] == bare(
        from_openai_chat([{"role": "assistant", "content": "", "reasoning_content": "think",
                           "tool_calls": [call]}]))
    assert [Chat(ChatMessage.assistant(""))] == bare(
        from_openai_chat([{"role": "assistant", "content": None, "tool_calls": []}]))
    [item] = from_openai_chat([{"role": "user", "content": BREADCRUMB_TEXT}])
    assert isinstance(item, Chat)
    assert False is item.message.synthetic


def _call(**function: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", **function}]}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"role": "user"}, "messages must be a list, got dict"),
        ([{"role": "function", "content": "x"}], "message 0: role 'function' is not supported"),
        ([{"role": "user", "content": "q"}, _call(function={"arguments": "{}"})],
         "message 1: tool_calls[0].function.name missing"),
        ([_call(function={"name": "f", "arguments": {"a": 1}})],
         "message 0: tool_calls[0].function.arguments must be a string, got dict"),
        ([_call(function="f")], "message 0: tool_calls[0].function must be an object, got str"),
        ([_call(type="mcp", function={"name": "f", "arguments": "{}"})],
         "message 0: tool_calls[0].type must be 'function' or 'custom', got 'mcp'"),
        ([_call(type="custom", function={"name": "f", "arguments": "{}"})],
         "message 0: tool_calls[0].custom must be an object, got null"),
        ([{"role": "assistant", "content": None, "tool_calls": [{"id": "", "function": {}}]}],
         "message 0: tool_calls[0].id must not be empty"),
        ([{"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c", "function": {"name": "g", "arguments": "{}"}}]}],
         "message 0: tool_calls has a duplicate id 'c'"),
        ([{"role": "tool", "tool_call_id": 7, "content": "x"}],
         "message 0: tool_call_id must be a string, got int"),
    ],
)
def test_e11_openai_bad_input_names_the_message_and_field(raw: Any, expected: str) -> None:
    """Malformed OpenAI messages are TranscriptErrors naming the index and field, no line."""
    with pytest.raises(TranscriptError) as caught:
        from_openai_chat(raw)
    assert str(caught.value).startswith(expected)
    assert caught.value.line is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"system": "x"}, "messages missing"),
        ({"messages": {}}, "messages must be a list, got dict"),
        ([{"role": "user"}], "message 0: content missing"),
        ([{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}],
         "message 0: content[0].tool_use_id missing"),
        ([{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c", "is_error": "yes"}]}],
         "message 0: content[0].is_error must be a bool, got str"),
    ],
)
def test_e11_anthropic_bad_input_names_the_message_and_field(raw: Any, expected: str) -> None:
    """Malformed Anthropic conversations are TranscriptErrors naming where they are."""
    with pytest.raises(TranscriptError) as caught:
        from_anthropic(raw)
    assert str(caught.value).startswith(expected)


def test_e11_anthropic_empty_system_list_is_no_system_prompt() -> None:
    """``system: []`` is a request the API answers (a recorded llama-index request, billed as
    one without a system prompt: issue 21's cassettes); it imports as its messages alone
    instead of failing with "system must be a string or a list of blocks, got list"."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "weather?"}]}]
    imported = from_anthropic({"system": [], "messages": messages})
    assert (imported, to_anthropic(imported)) == (
        from_anthropic({"messages": messages}), {"messages": messages})


def test_e11_transcript_error_is_an_invalid_message_and_a_value_error() -> None:
    """TranscriptError belongs to the InvalidMessage family, so callers can catch either."""
    error = TranscriptError("message 0: role missing", line=3)
    assert (True, True, 3, "line 3: message 0: role missing", "message 0: role missing") == (
        isinstance(error, InvalidMessage), isinstance(error, ValueError), error.line,
        str(error), error.reason,
    )


def test_anthropic_transcript_images_system_blocks_and_tool_steps() -> None:
    """Line 4 (truncated JSON) is an error naming it. The system value is a leading system
    message (its blocks joined by lines); tool_use and tool_result steps keep their names; a
    tool error followed by user text is a result, then a user message; a base64 image is a
    data: URL marker, a url image a marker, a tool_result's image a declared attachment."""
    parsed = read_transcripts("anthropic")
    error = parsed[4]
    assert isinstance(error, TranscriptError)
    assert 4 == error.line
    assert str(error).startswith("line 4: invalid JSON: Unterminated string")
    assert [
        Chat(ChatMessage.system("Use the tools.\nAnswer in one line.")),
        Chat(ChatMessage.user("How big is the repo, and what is in README.md?")),
        AssistantToolCalls("Checking.", (
            ToolCall("toolu_du", "shell", '{"cmd":"du -sh ."}'),
            ToolCall("toolu_cat", "read_file", '{"path":"README.md"}'))),
        ToolResults((ToolResult("toolu_du", "4.2M\t.", "shell"),
                     ToolResult("toolu_cat", "# demo\nA demo project.", "read_file"))),
        AssistantToolCalls(None, (
            ToolCall("toolu_wc", "shell", '{"cmd":"git ls-files | wc -l"}'),)),
        ToolResults((ToolResult("toolu_wc", "git: not a repository", "shell"),)),
        Chat(ChatMessage.user("It is not a git checkout, just count the files.")),
        Chat(ChatMessage.assistant("4.2 MB; README.md says: A demo project.")),
    ] == parsed[2]
    assert Chat(ChatMessage.user(f"[IMAGE:{PNG_URL}]\nWhat is in this picture?")) == parsed[3][0]
    assert [
        Chat(ChatMessage.user(
            "Compare the home page with this mock-up:\n[IMAGE:https://example.com/mockup.png]")),
        ToolResults((ToolResult("toolu_shot", "saved", "screenshot", (PNG_URL,)),)),
    ] == [parsed[5][1], parsed[5][3]]


def test_r22_to_openai_unpacks_envelopes_and_declares_tool_images() -> None:
    """Envelopes become tool_calls and tool messages; a tool's attachments become image_url
    parts (an empty result sends its images only); a plain tool text has no call id to give."""
    history = [
        ChatMessage.system("sys"),
        ChatMessage.user("shot please"),
        ChatMessage.assistant(assistant_envelope(None, [ToolCall("c1", "shot", '{"w":1}')])),
        ChatMessage.tool(tool_envelope("c1", "saved"), ["/tmp/a.png"]),
        ChatMessage.tool(tool_envelope("c2", ""), ["https://x/b.png"]),
        ChatMessage.tool("plain output"),
        ChatMessage.assistant("done"),
    ]
    assert [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "shot please"},
        {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shot", "arguments": '{"w":1}'}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": [
            {"type": "text", "text": "saved"},
            {"type": "image_url", "image_url": {"url": "/tmp/a.png"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": [
            {"type": "image_url", "image_url": {"url": "https://x/b.png"}}]},
        {"role": "tool", "tool_call_id": "unknown", "content": "plain output"},
        {"role": "assistant", "content": "done"},
    ] == to_openai_chat(history)


def test_r21_to_openai_sends_loadable_user_markers_as_image_parts_only() -> None:
    """Loadable markers become image_url parts, a marker inside a line splits it; placeholders
    and a tool's marker text stay text."""
    history = [
        ChatMessage.user("look\n[IMAGE:/a.png]\n[IMAGE:...] and [IMAGE:photo.png]"),
        ChatMessage.user("[IMAGE:...]"),
        ChatMessage.tool(tool_envelope("c", "[IMAGE:/b.png]")),
        ChatMessage.user("see [IMAGE:https://x/a.png] here"),
    ]
    assert [
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "/a.png"}},
            {"type": "text", "text": "[IMAGE:...] and [IMAGE:photo.png]"}]},
        {"role": "user", "content": "[IMAGE:...]"},
        {"role": "tool", "tool_call_id": "c", "content": "[IMAGE:/b.png]"},
        {"role": "user", "content": [
            {"type": "text", "text": "see "},
            {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
            {"type": "text", "text": " here"}]},
    ] == to_openai_chat(history)


def test_r31_breadcrumb_exports_as_a_plain_user_message() -> None:
    """The synthetic breadcrumb is an ordinary user message in both formats."""
    history = [ChatMessage.breadcrumb(), ChatMessage.user("hi")]
    plain_user = [{"role": "user", "content": BREADCRUMB_TEXT}, {"role": "user", "content": "hi"}]
    assert (plain_user, {"messages": plain_user}) == (
        to_openai_chat(history), to_anthropic(history))


def test_r22_to_anthropic_collects_system_and_merges_tool_results() -> None:
    """Leading and late system text go to system; consecutive tool results are one user
    message; a data: URL attachment is a base64 image; arguments that are not a JSON object
    (invalid, or an array) are wrapped as ``_raw``."""
    history = [
        ChatMessage.system("rules"),
        ChatMessage.user("go"),
        ChatMessage.assistant(assistant_envelope("on it", [
            ToolCall("c1", "shell", '{"cmd": "ls"}'), ToolCall("c2", "f", "oops"),
            ToolCall("c3", "g", "[1, 2]")])),
        ChatMessage.tool(tool_envelope("c1", "a.txt"), [PNG_URL]),
        ChatMessage.system("late rule"),
        ChatMessage.tool(tool_envelope("c2", "")),
        ChatMessage.tool(tool_envelope("c3", "")),
        ChatMessage.assistant("done"),
    ]
    png = {"type": "base64", "media_type": "image/png", "data": PNG}
    assert {
        "system": "rules\n\nlate rule",
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "on it"},
                {"type": "tool_use", "id": "c1", "name": "shell", "input": {"cmd": "ls"}},
                {"type": "tool_use", "id": "c2", "name": "f", "input": {"_raw": "oops"}},
                {"type": "tool_use", "id": "c3", "name": "g", "input": {"_raw": "[1, 2]"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": [
                    {"type": "text", "text": "a.txt"}, {"type": "image", "source": png}]},
                {"type": "tool_result", "tool_use_id": "c2"},
                {"type": "tool_result", "tool_use_id": "c3"}]},
            {"role": "assistant", "content": "done"},
        ],
    } == to_anthropic(history)


def test_r21_to_anthropic_user_images_become_url_or_base64_blocks() -> None:
    """data: URLs become base64 sources, other refs url sources; empty text is left out."""
    history = [ChatMessage.user(f"[IMAGE:https://x/a.png]\n\n[IMAGE:{PNG_URL}]\ncaption")]
    assert {"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "text", "text": "caption"},
    ]}]} == to_anthropic(history)


@given(chat_histories())
def test_r21_exported_user_images_are_the_ones_the_estimate_charges(
    history: list[ChatMessage],
) -> None:
    """User images the estimate charges (R21) and every tool attachment (R22) are image parts."""
    expected = sum(
        image_count(m, current_turn=True) if m.role == "user" else len(m.attachments)
        for m in history
    )
    exported = to_openai_chat(history)
    assert expected == sum(
        1 for m in exported if isinstance(m.get("content"), list)
        for part in m["content"] if part["type"] == "image_url"
    )


# --- JSONL transcripts (replay/transcripts.py reads and writes them with these converters) ---

@pytest.mark.parametrize("fmt", ["gemini-api", "OpenAI", ""])
def test_e11_unknown_transcript_format_is_a_value_error_naming_it(fmt: str) -> None:
    """Reading or writing an unknown format is refused at the call, naming it."""
    with pytest.raises(ValueError, match=f"unknown transcript format '{fmt}'"):
        read_conversations("[]", fmt)
    with pytest.raises(ValueError, match=f"unknown transcript format '{fmt}'"):
        write_conversation([], fmt)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_e11_read_conversations_skips_blank_lines_and_keeps_line_numbers(fmt: str) -> None:
    """Blank lines are skipped, numbering stays 1-based on the file, CRLF endings are fine;
    an empty conversation is refused with its number (issue 21)."""
    text = '\n[{"role":"user","content":"a"}]\r\n   \n[]\n'
    read = [(c.line, str(c) if isinstance(c, TranscriptError) else bare(c.history))
            for c in read_conversations(text, fmt)]
    assert [(2, [Chat(ChatMessage.user("a"))]),
            (4, "line 4: an empty conversation: there is no message to record")] == read


@pytest.mark.parametrize(
    ("fmt", "line", "expected"),
    [
        ("openai", "42", "line 1: expected a JSON list of messages, got int"),
        ("openai", '{"model": "x"}', "line 1: expected a JSON list of messages, got dict"),
        ("anthropic", '"hi"', "line 1: expected a JSON list of messages, got str"),
        ("anthropic", '{"model": "x"}', "line 1: messages missing"),
        ("openai", "[{", "line 1: invalid JSON"),
    ],
)
def test_e11_read_conversations_names_what_is_wrong_with_a_line(
    fmt: str, line: str, expected: str
) -> None:
    """Wrong shapes and bad JSON are errors naming the line."""
    [result] = list(read_conversations(line, fmt))
    assert isinstance(result, TranscriptError)
    assert 1 == result.line
    assert str(result).startswith(expected)


def test_read_conversations_keeps_a_raw_line_separator_inside_a_string() -> None:
    """U+2028 inside a JSON string is not a line break for JSONL."""
    [read] = list(read_conversations('[{"role":"user","content":"a\u2028b"}]\n', "openai"))
    assert not isinstance(read, TranscriptError)
    assert (1, [Chat(ChatMessage.user("a\u2028b"))]) == (read.line, bare(read.history))


def test_write_conversation_is_compact_unescaped_and_deterministic() -> None:
    """One line, no trailing newline, non-ASCII kept, keys in the documented order."""
    history = [ChatMessage.system("règle"), ChatMessage.user("é")]
    assert (
        '[{"role":"system","content":"règle"},{"role":"user","content":"é"}]',
        '{"system":"règle","messages":[{"role":"user","content":"é"}]}',
    ) == (write_conversation(history, "openai"), write_conversation(history, "anthropic"))


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=conversation_histories())
def test_e11_responses_export_of_items_equals_that_of_their_chat_messages(
    history: list[ConversationMessage],
) -> None:
    """Items exported directly (ADR-0056) give what their chat messages give, bare ones too."""
    assert to_openai_responses(to_chat_messages(history)) == to_openai_responses(history)


def test_e11_one_responses_item_converts_as_a_list_of_it() -> None:
    """from_openai_responses_item(i) == from_openai_responses([i])[0], errors included."""
    items = [item for raw in fixture_lines("responses") for item in raw]
    items.append({"type": "web_search_call", "id": "ws_1", "status": "completed"})
    assert [from_openai_responses([i])[0] for i in items] == [
        from_openai_responses_item(i) for i in items
    ]
    for bad in ({"type": "function_call", "name": "f", "arguments": "{}"}, "text", {"role": 3}):
        with pytest.raises(TranscriptError) as whole:
            from_openai_responses([bad])
        with pytest.raises(TranscriptError) as one:
            from_openai_responses_item(bad)
        assert str(whole.value) == str(one.value)


def test_e12_canonical_text_of_a_written_text_is_that_text_as_a_plain_str() -> None:
    """A text canonical_json wrote is kept as it is (a plain str); any other is rewritten."""
    written = canonical_json({"b": [1.0, "é"], "a": None})
    kept = canonical_text(written)
    assert (str, '{"a":null,"b":[1.0,"é"]}') == (type(kept), kept)
    assert (str, '{"a":1}') == (type(canonical_text('{ "a" : 1 }')),
                                 canonical_text('{ "a" : 1 }'))
    message = ChatMessage("user", "hi", extra=canonical_json({"id": "m"}))
    assert str is type(message.extra)


def test_e12_canonical_text_memo_gives_the_same_answer_and_keeps_no_error() -> None:
    """The memo of short texts answers as the conversion does (any spelling of the same JSON,
    the canonical text itself, a long text past the memo) and never remembers a refusal."""
    from turnledger.domain import blocks

    memo, chars = blocks._CANONICAL, blocks._MEMO_CHARS  # noqa: SLF001
    spellings = ['{ "b" : [1, "é"], "a" : null }', '{"b":[1,"é"],"a":null}',
                 '{"a":null,"b":[1,"é"]}']
    for _ in range(2):  # first converted, then answered by the memo
        assert {canonical_text(s) for s in spellings} == {'{"a":null,"b":[1,"é"]}'}
        assert all(type(canonical_text(s)) is str for s in spellings)
    long_text = '{ "x" : "' + "y" * 2 * chars + '" }'
    assert canonical_text(long_text) == '{"x":"' + "y" * 2 * chars + '"}'
    assert long_text not in memo
    for _ in range(2):
        with pytest.raises(InvalidMessage, match="not JSON text"):
            canonical_text('{"a": }')
    assert '{"a": }' not in memo


def test_e12_canonical_text_memo_stays_bounded() -> None:
    """Texts past `_MEMO_SIZE` empty the memo rather than grow it; answers stay right."""
    from turnledger.domain import blocks

    memo, size = blocks._CANONICAL, blocks._MEMO_SIZE  # noqa: SLF001
    for n in range(size + 10):
        assert canonical_text(f'{{ "n" : {n} }}') == f'{{"n":{n}}}'
    assert len(memo) <= size + 1
    assert canonical_text('{ "n" : 3 }') == '{"n":3}'


def test_e11_an_openai_tool_call_with_null_content_keeps_its_tool_use_in_anthropic() -> None:
    """OpenAI's ``"content": null`` beside tool calls (its usual form) is kept for OpenAI's
    exact form; written as Anthropic it must not erase the ``tool_use`` block (it did: the
    call was dropped and its result left an orphan), and the OpenAI form keeps its null."""
    line = [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."}]
    history = from_openai_chat(line)
    assert to_anthropic(history)["messages"][1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}}]}
    assert to_openai_chat(history) == line
