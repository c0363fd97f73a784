"""Transcript import and export (OpenAI, Anthropic): conversions, line-numbered errors, round trips.

The vendor-format rules the tests hold the code to: images in user text are ``[IMAGE:ref]``
markers (R21), a tool's images are its declared attachments (R22), the breadcrumb exports as a
plain user message (R31), and bad input gets a clear error that loses nothing else (E11).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.strategies import chat_histories
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
from turnledger.replay.formats import (
    FORMATS,
    TranscriptError,
    from_anthropic,
    from_openai,
    read_jsonl,
    to_anthropic,
    to_openai,
    write_jsonl_line,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts"
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
    "rkJggg=="
)
PNG_URL = f"data:image/png;base64,{PNG}"


def S(text: str) -> Chat:
    return Chat(ChatMessage.system(text))


def U(text: str) -> Chat:
    return Chat(ChatMessage.user(text))


def A(text: str) -> Chat:
    return Chat(ChatMessage.assistant(text))


def read_fixture(fmt: str) -> dict[int, list[ConversationMessage] | TranscriptError]:
    text = (FIXTURES / f"{fmt}.jsonl").read_text(encoding="utf-8")
    return dict(read_jsonl(text, fmt))


# --- OpenAI fixture -------------------------------------------------------------------------


def test_e11_openai_fixture_reports_the_malformed_line_and_parses_the_others() -> None:
    """Line 5 (a tool call without a function name) is an error naming it; lines 1-4 and 6 parse."""
    parsed = read_fixture("openai")
    assert [1, 2, 3, 4, 5, 6] == sorted(parsed)
    error = parsed[5]
    assert isinstance(error, TranscriptError)
    assert 5 == error.line
    assert "line 5: message 1: tool_calls[0].function.name missing" == str(error)
    assert [1, 2, 3, 4, 6] == [n for n, v in sorted(parsed.items()) if isinstance(v, list)]


def test_openai_fixture_plain_conversation() -> None:
    """A system, user, assistant conversation imports as three Chat messages, accents kept."""
    expected = [
        S("You are a terse assistant."),
        U("Bonjour ! Quelle heure est-il à Paris ?"),
        A("Il est 14 h 05 à Paris."),
    ]
    assert expected == read_fixture("openai")[1]


def test_openai_fixture_multi_step_tool_calls() -> None:
    """Request-body object; developer -> system; parallel calls, then a second tool step."""
    expected = [
        S("Use the tools; answer in one line."),
        U("How big is the repo, and what is in README.md?"),
        AssistantToolCalls(
            None,
            (
                ToolCall("call_du", "shell", '{"cmd": "du -sh ."}'),
                ToolCall("call_cat", "read_file", '{"path": "README.md"}'),
            ),
        ),
        ToolResults(
            (
                ToolResult("call_du", "4.2M\t.", "shell"),
                ToolResult("call_cat", "# demo\nA demo project.", "read_file"),
            )
        ),
        AssistantToolCalls(
            "Let me also count the files.",
            (ToolCall("call_wc", "shell", '{"cmd": "git ls-files | wc -l"}'),),
        ),
        ToolResults((ToolResult("call_wc", "37", "shell"),)),
        A("4.2 MB, 37 files; README.md says: A demo project."),
    ]
    assert expected == read_fixture("openai")[2]


def test_r21_openai_fixture_user_images_become_markers() -> None:
    """image_url parts (object and string forms) become [IMAGE:url] lines of the user text."""
    expected = [
        U(f"What is in this picture?\n[IMAGE:https://example.com/cat.jpg]\n[IMAGE:{PNG_URL}]"),
        A("A cat on a sofa, and a one-pixel image."),
    ]
    assert expected == read_fixture("openai")[3]


def test_r22_openai_fixture_tool_image_part_becomes_an_attachment() -> None:
    """A tool's image part is a declared attachment; marker text in its output stays text."""
    expected = [
        S("You are a browser agent."),
        U("Take a screenshot of the home page."),
        AssistantToolCalls(
            None, (ToolCall("call_shot", "screenshot", '{"url":"https://example.com"}'),)
        ),
        ToolResults(
            (
                ToolResult(
                    "call_shot", "saved [IMAGE:/tmp/home.png]", "screenshot", ("/tmp/home.png",)
                ),
            )
        ),
        A("Here is the home page: a header and a login form."),
    ]
    assert expected == read_fixture("openai")[4]


# --- OpenAI import: details and errors ------------------------------------------------------


def test_openai_consecutive_tool_messages_form_one_batch_and_unknown_ids_have_no_name() -> None:
    """Consecutive tool messages are one ToolResults; a result without its call has no tool name."""
    messages: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": "orphan", "content": "x"},
        {"role": "tool", "tool_call_id": "orphan2", "content": None},
        {"role": "user", "content": "hi"},
    ]
    expected = [
        ToolResults((ToolResult("orphan", "x"), ToolResult("orphan2", ""))),
        U("hi"),
    ]
    assert expected == from_openai(messages)


def test_openai_assistant_reasoning_content_is_kept_on_tool_steps() -> None:
    """reasoning_content (DeepSeek-style) is kept on AssistantToolCalls."""
    messages: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "think",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        }
    ]
    expected = [AssistantToolCalls(None, (ToolCall("c", "f", "{}"),), "think")]
    assert expected == from_openai(messages)


def test_openai_empty_tool_calls_list_is_a_plain_assistant_message() -> None:
    """tool_calls: [] (some SDKs emit it) is a plain assistant message; null content is empty."""
    assert [A("")] == from_openai([{"role": "assistant", "content": None, "tool_calls": []}])


def test_r31_openai_breadcrumb_text_imports_as_a_real_user_message() -> None:
    """A transcript cannot prove turnledger inserted the breadcrumb: it is a real user message."""
    [item] = from_openai([{"role": "user", "content": BREADCRUMB_TEXT}])
    assert isinstance(item, Chat)
    assert False is item.message.synthetic


def _call(**function: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", **function}]}


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ({"role": "user"}, "messages must be a list, got dict"),
        ([["user", "hi"]], "message 0: must be an object, got list"),
        ([{"content": "hi"}], "message 0: role missing"),
        ([{"role": "function", "content": "x"}], "message 0: role 'function' is not supported"),
        ([{"role": "user"}], "message 0: content missing"),
        (
            [{"role": "user", "content": 3}],
            "message 0: content must be a string or a list of parts",
        ),
        (
            [{"role": "user", "content": [{"type": "text"}]}],
            "message 0: content[0].text missing",
        ),
        (
            [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}],
            "message 0: content[0].type 'input_audio' is not supported here",
        ),
        (
            [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "/a"}}]}],
            "message 0: content[0].type 'image_url' is not supported here",
        ),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
            "message 0: content[0].image_url.url missing",
        ),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": "http://[::1]/a"}]}],
            "message 0: content[0] cannot be kept as an [IMAGE:...] marker",
        ),
        (
            [{"role": "user", "content": "q"}, _call(function={"arguments": "{}"})],
            "message 1: tool_calls[0].function.name missing",
        ),
        (
            [_call(function={"name": "f", "arguments": {"a": 1}})],
            "message 0: tool_calls[0].function.arguments must be a string, got dict",
        ),
        ([_call(function="f")], "message 0: tool_calls[0].function must be an object, got str"),
        ([_call()], "message 0: tool_calls[0].function missing"),
        (
            [_call(type="custom", function={"name": "f", "arguments": "{}"})],
            "message 0: tool_calls[0].type must be 'function', got 'custom'",
        ),
        (
            [{"role": "assistant", "content": None, "tool_calls": [{"id": "", "function": {}}]}],
            "message 0: tool_calls[0].id must not be empty",
        ),
        (
            [{"role": "assistant", "content": None, "tool_calls": {"id": "c"}}],
            "message 0: tool_calls must be a list, got dict",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c", "function": {"name": "f", "arguments": "{}"}},
                        {"id": "c", "function": {"name": "g", "arguments": "{}"}},
                    ],
                }
            ],
            "message 0: tool_calls has a duplicate id 'c'",
        ),
        (
            [{"role": "assistant", "content": None, "function_call": {"name": "f"}}],
            "message 0: function_call (the legacy form) is not supported",
        ),
        ([{"role": "tool", "content": "x"}], "message 0: tool_call_id missing"),
        (
            [{"role": "tool", "tool_call_id": 7, "content": "x"}],
            "message 0: tool_call_id must be a string, got int",
        ),
    ],
)
def test_e11_openai_bad_input_names_the_message_and_field(messages: Any, expected: str) -> None:
    """Every malformed message or field is a TranscriptError naming its index and path."""
    with pytest.raises(TranscriptError) as caught:
        from_openai(messages)
    assert str(caught.value).startswith(expected)
    assert caught.value.line is None


def test_e11_transcript_error_is_an_invalid_message_and_a_value_error() -> None:
    """TranscriptError belongs to the InvalidMessage family, so callers can catch either."""
    error = TranscriptError("message 0: role missing", line=3)
    assert (True, True, 3, "line 3: message 0: role missing", "message 0: role missing") == (
        isinstance(error, InvalidMessage),
        isinstance(error, ValueError),
        error.line,
        str(error),
        error.reason,
    )


# --- OpenAI export --------------------------------------------------------------------------


def test_r22_to_openai_unpacks_envelopes_and_declares_tool_images() -> None:
    """Envelopes become tool_calls/tool messages; attachments become image_url parts."""
    history = [
        ChatMessage.system("sys"),
        ChatMessage.user("shot please"),
        ChatMessage.assistant(assistant_envelope(None, [ToolCall("c1", "shot", '{"w":1}')])),
        ChatMessage.tool(tool_envelope("c1", "saved"), ["/tmp/a.png"]),
        ChatMessage.tool(tool_envelope("c2", ""), ["https://x/b.png"]),
        ChatMessage.tool("plain output"),
        ChatMessage.assistant("done"),
    ]
    expected = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "shot please"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "shot", "arguments": '{"w":1}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [
                {"type": "text", "text": "saved"},
                {"type": "image_url", "image_url": {"url": "/tmp/a.png"}},
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c2",
            "content": [{"type": "image_url", "image_url": {"url": "https://x/b.png"}}],
        },
        {"role": "tool", "tool_call_id": "unknown", "content": "plain output"},
        {"role": "assistant", "content": "done"},
    ]
    assert expected == to_openai(history)


def test_r21_to_openai_sends_loadable_user_markers_as_image_parts_only() -> None:
    """Loadable markers become image_url parts; placeholders and tool marker text stay text."""
    history = [
        ChatMessage.user("look\n[IMAGE:/a.png]\n[IMAGE:...] and [IMAGE:photo.png]"),
        ChatMessage.user("[IMAGE:...]"),
        ChatMessage.tool(tool_envelope("c", "[IMAGE:/b.png]")),
    ]
    expected = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "/a.png"}},
                {"type": "text", "text": "[IMAGE:...] and [IMAGE:photo.png]"},
            ],
        },
        {"role": "user", "content": "[IMAGE:...]"},
        {"role": "tool", "tool_call_id": "c", "content": "[IMAGE:/b.png]"},
    ]
    assert expected == to_openai(history)


def test_r21_to_openai_splits_a_line_around_an_inline_marker() -> None:
    """A marker inside a line is still sent as an image; its line is split around it."""
    expected = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see "},
                {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
                {"type": "text", "text": " here"},
            ],
        }
    ]
    assert expected == to_openai([ChatMessage.user("see [IMAGE:https://x/a.png] here")])


def test_r31_breadcrumb_exports_as_a_plain_user_message() -> None:
    """The synthetic breadcrumb is an ordinary user message in both vendor formats."""
    history = [ChatMessage.breadcrumb(), ChatMessage.user("hi")]
    expected = (
        [{"role": "user", "content": BREADCRUMB_TEXT}, {"role": "user", "content": "hi"}],
        {
            "messages": [
                {"role": "user", "content": BREADCRUMB_TEXT},
                {"role": "user", "content": "hi"},
            ]
        },
    )
    assert expected == (to_openai(history), to_anthropic(history))


def test_export_rejects_what_is_not_a_chat_message() -> None:
    """Structured messages must go through to_chat_messages first: a clear InvalidMessage."""
    with pytest.raises(InvalidMessage, match=r"history\[0\] must be a ChatMessage, got Chat"):
        to_openai([U("hi")])  # type: ignore[list-item]


# --- Anthropic fixture ----------------------------------------------------------------------


def test_e11_anthropic_fixture_reports_the_truncated_line_and_parses_the_others() -> None:
    """Line 4 (truncated JSON) is an error naming it; lines 1-3 and 5 parse."""
    parsed = read_fixture("anthropic")
    error = parsed[4]
    assert isinstance(error, TranscriptError)
    assert 4 == error.line
    assert str(error).startswith("line 4: invalid JSON: Unterminated string")
    assert [1, 2, 3, 5] == [n for n, v in sorted(parsed.items()) if isinstance(v, list)]


def test_anthropic_fixture_system_string_and_text_blocks() -> None:
    """The system field is a leading system message; text blocks join into the text."""
    expected = [
        S("You are a terse assistant."),
        U("Bonjour ! Quelle heure est-il à Paris ?"),
        A("Il est 14 h 05 à Paris."),
    ]
    assert expected == read_fixture("anthropic")[1]


def test_anthropic_fixture_multi_step_tool_use() -> None:
    """tool_use/tool_result, thinking as reasoning, system blocks, a tool error with user text."""
    expected = [
        S("Use the tools.\nAnswer in one line."),
        U("How big is the repo, and what is in README.md?"),
        AssistantToolCalls(
            "Checking.",
            (
                ToolCall("toolu_du", "shell", '{"cmd":"du -sh ."}'),
                ToolCall("toolu_cat", "read_file", '{"path":"README.md"}'),
            ),
            "I need du and cat.",
        ),
        ToolResults(
            (
                ToolResult("toolu_du", "4.2M\t.", "shell"),
                ToolResult("toolu_cat", "# demo\nA demo project.", "read_file"),
            )
        ),
        AssistantToolCalls(
            None, (ToolCall("toolu_wc", "shell", '{"cmd":"git ls-files | wc -l"}'),)
        ),
        ToolResults((ToolResult("toolu_wc", "git: not a repository", "shell"),)),
        U("It is not a git checkout, just count the files."),
        A("4.2 MB; README.md says: A demo project."),
    ]
    assert expected == read_fixture("anthropic")[2]


def test_r21_anthropic_fixture_base64_image_becomes_a_data_url_marker() -> None:
    """A base64 image block is a data: URL marker, in block order with the text."""
    expected = [U(f"[IMAGE:{PNG_URL}]\nWhat is in this picture?"), A("A one-pixel image.")]
    assert expected == read_fixture("anthropic")[3]


def test_r22_anthropic_fixture_url_image_and_tool_result_image() -> None:
    """A url image block is a marker; a tool_result's image block is a declared attachment."""
    expected = [
        S("You are a browser agent."),
        U("Compare the home page with this mock-up:\n[IMAGE:https://example.com/mockup.png]"),
        AssistantToolCalls(
            None, (ToolCall("toolu_shot", "screenshot", '{"url":"https://example.com"}'),)
        ),
        ToolResults((ToolResult("toolu_shot", "saved", "screenshot", (PNG_URL,)),)),
        A("They match."),
    ]
    assert expected == read_fixture("anthropic")[5]


# --- Anthropic import: details and errors ---------------------------------------------------


def test_anthropic_results_of_consecutive_user_messages_share_one_batch() -> None:
    """Two user messages holding only tool_result blocks give one ToolResults."""
    conversation = [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                {"type": "tool_use", "id": "b", "name": "g", "input": {"_raw": "not json"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b", "content": "2"}]},
    ]
    expected = [
        AssistantToolCalls(None, (ToolCall("a", "f", "{}"), ToolCall("b", "g", "not json"))),
        ToolResults((ToolResult("a", "", "f"), ToolResult("b", "2", "g"))),
    ]
    assert expected == from_anthropic(conversation)


def test_anthropic_redacted_thinking_is_dropped_and_plain_reply_loses_no_text() -> None:
    """redacted_thinking is opaque; an assistant reply without tool_use is a Chat message."""
    conversation = {
        "messages": [
            {
                "role": "assistant",
                "content": [
                    {"type": "redacted_thinking", "data": "xyz"},
                    {"type": "text", "text": "a"},
                    {"type": "text", "text": "b"},
                ],
            }
        ]
    }
    assert [A("a\nb")] == from_anthropic(conversation)


@pytest.mark.parametrize(
    ("conversation", "expected"),
    [
        ({"system": "x"}, "messages missing"),
        ({"messages": {}}, "messages must be a list, got dict"),
        ({"system": 3, "messages": []}, "system must be a string or a list of text blocks"),
        (
            {"system": [{"type": "image"}], "messages": []},
            "system[0].type 'image' is not supported",
        ),
        ([{"role": "system", "content": "x"}], "message 0: role 'system' is not supported"),
        ([{"role": "user"}], "message 0: content missing"),
        ([{"role": "user", "content": [{"text": "x"}]}], "message 0: content[0].type missing"),
        (
            [{"role": "user", "content": [{"type": "document", "source": {}}]}],
            "message 0: content[0].type 'document' is not supported in a user message",
        ),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}],
            "message 0: content[0].source.type 'file' is not supported",
        ),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}],
            "message 0: content[0].source.media_type missing",
        ),
        (
            [{"role": "user", "content": [{"type": "image"}]}],
            "message 0: content[0].source missing",
        ),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "id": "c", "input": {}}]}],
            "message 0: content[0].name missing",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "c", "name": "f", "input": "{}"}],
                }
            ],
            "message 0: content[0].input must be an object, got str",
        ),
        (
            [{"role": "assistant", "content": [{"type": "image", "source": {}}]}],
            "message 0: content[0].type 'image' is not supported in an assistant message",
        ),
        (
            [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}],
            "message 0: content[0].tool_use_id missing",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "c", "is_error": "yes"}],
                }
            ],
            "message 0: content[0].is_error must be a bool, got str",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "c",
                            "content": [{"type": "tool_use"}],
                        }
                    ],
                }
            ],
            "message 0: content[0].content[0].type 'tool_use' is not supported",
        ),
    ],
)
def test_e11_anthropic_bad_input_names_the_message_and_field(
    conversation: Any, expected: str
) -> None:
    """Every malformed message, block or field is a TranscriptError naming where it is."""
    with pytest.raises(TranscriptError) as caught:
        from_anthropic(conversation)
    assert str(caught.value).startswith(expected)


# --- Anthropic export -----------------------------------------------------------------------


def test_r22_to_anthropic_collects_system_and_merges_tool_results() -> None:
    """Leading and late system text go to system; consecutive tool results are one user message."""
    history = [
        ChatMessage.system("rules"),
        ChatMessage.user("go"),
        ChatMessage.assistant(
            assistant_envelope(
                "on it", [ToolCall("c1", "shell", '{"cmd": "ls"}'), ToolCall("c2", "f", "oops")]
            )
        ),
        ChatMessage.tool(tool_envelope("c1", "a.txt"), [PNG_URL]),
        ChatMessage.system("late rule"),
        ChatMessage.tool(tool_envelope("c2", "")),
        ChatMessage.assistant("done"),
    ]
    expected = {
        "system": "rules\n\nlate rule",
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "on it"},
                    {"type": "tool_use", "id": "c1", "name": "shell", "input": {"cmd": "ls"}},
                    {"type": "tool_use", "id": "c2", "name": "f", "input": {"_raw": "oops"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "c1",
                        "content": [
                            {"type": "text", "text": "a.txt"},
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": PNG,
                                },
                            },
                        ],
                    },
                    {"type": "tool_result", "tool_use_id": "c2"},
                ],
            },
            {"role": "assistant", "content": "done"},
        ],
    }
    assert expected == to_anthropic(history)


def test_r21_to_anthropic_user_images_become_url_or_base64_blocks() -> None:
    """data: URLs become base64 sources, other refs url sources; empty text blocks are left out."""
    history = [ChatMessage.user(f"[IMAGE:https://x/a.png]\n\n[IMAGE:{PNG_URL}]\ncaption")]
    expected = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                    {"type": "text", "text": "caption"},
                ],
            }
        ]
    }
    assert expected == to_anthropic(history)


def test_to_anthropic_non_object_json_arguments_are_wrapped_raw() -> None:
    """Arguments that parse to a JSON array are not an Anthropic input object: wrapped as _raw."""
    history = [ChatMessage.assistant(assistant_envelope(None, [ToolCall("c", "f", "[1, 2]")]))]
    expected = {
        "messages": [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "c", "name": "f", "input": {"_raw": "[1, 2]"}}
                ],
            }
        ]
    }
    assert expected == to_anthropic(history)


# --- JSONL ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["gemini", "OpenAI", ""])
def test_e11_unknown_format_is_a_value_error_naming_it(fmt: str) -> None:
    """read_jsonl and write_jsonl_line reject an unknown format at the call, naming it."""
    with pytest.raises(ValueError, match=f"unknown transcript format '{fmt}'"):
        read_jsonl("[]", fmt)
    with pytest.raises(ValueError, match=f"unknown transcript format '{fmt}'"):
        write_jsonl_line([], fmt)


def test_formats_lists_both_vendors() -> None:
    """FORMATS names the two supported formats, in a fixed order."""
    assert ("openai", "anthropic") == FORMATS


@pytest.mark.parametrize("fmt", FORMATS)
def test_e11_read_jsonl_skips_blank_lines_and_keeps_line_numbers(fmt: str) -> None:
    """Blank lines are skipped, numbering stays 1-based on the file, CRLF endings are fine."""
    text = '\n[{"role":"user","content":"a"}]\r\n   \n[]\n'
    expected = [(2, [U("a")]), (4, [])]
    assert expected == list(read_jsonl(text, fmt))


@pytest.mark.parametrize(
    ("fmt", "line", "expected"),
    [
        ("openai", "42", 'line 1: expected a JSON list of messages or an object with a "messages"'),
        ("openai", '{"model": "x"}', "line 1: expected a JSON list of messages or an object with"),
        ("anthropic", '"hi"', "line 1: expected a JSON list of messages or an object with"),
        ("anthropic", '{"model": "x"}', "line 1: messages missing"),
        ("openai", "[{", "line 1: invalid JSON"),
        ("openai", '[{"role": "user", "content": 1}]', "line 1: message 0: content must be"),
    ],
)
def test_e11_read_jsonl_names_what_is_wrong_with_a_line(fmt: str, line: str, expected: str) -> None:
    """Wrong shapes, bad JSON and invalid messages are errors naming the line."""
    [(number, result)] = list(read_jsonl(line, fmt))
    assert isinstance(result, TranscriptError)
    assert (1, 1) == (number, result.line)
    assert str(result).startswith(expected)


def test_read_jsonl_keeps_a_raw_line_separator_inside_a_string() -> None:
    """U+2028 inside a JSON string is not a line break for JSONL."""
    text = '[{"role":"user","content":"a\u2028b"}]\n'
    assert [(1, [U("a\u2028b")])] == list(read_jsonl(text, "openai"))


def test_write_jsonl_line_is_compact_unescaped_and_deterministic() -> None:
    """One line, no trailing newline, non-ASCII kept, keys in the documented order."""
    history = [ChatMessage.system("règle"), ChatMessage.user("é")]
    expected = (
        '[{"role":"system","content":"règle"},{"role":"user","content":"é"}]',
        '{"system":"règle","messages":[{"role":"user","content":"é"}]}',
    )
    assert expected == (write_jsonl_line(history, "openai"), write_jsonl_line(history, "anthropic"))


# --- round trips ----------------------------------------------------------------------------

_free_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="[{"),
    max_size=20,
)
_line_text = _free_text.map(lambda t: t.replace("\n", " ").replace("\r", " "))
_refs = st.sampled_from(
    (
        "/tmp/shot.png",
        "https://example.com/cat.jpg",
        "C:\\pics\\a.png",
        "\\\\server\\share\\b.png",
        PNG_URL,
    )
)
_names = st.sampled_from(("shell", "read_file", "browse"))
_arguments = st.dictionaries(
    st.text(alphabet="abcxyz_", min_size=1, max_size=5),
    st.integers(-5, 5) | _line_text,
    max_size=3,
).map(lambda d: json.dumps(d, ensure_ascii=False, separators=(",", ":")))


@st.composite
def _user_texts(draw: st.DrawFn, *, blank_lines: bool) -> str:
    """User text whose loadable markers stand on lines of their own, as imports write them."""
    line = _line_text if blank_lines else _line_text.filter(bool)
    lines = draw(
        st.lists(st.one_of(line, _refs.map(lambda r: f"[IMAGE:{r}]")), min_size=1, max_size=4)
    )
    return "\n".join(lines)


@st.composite
def _vendor_histories(draw: st.DrawFn, *, anthropic: bool) -> list[ConversationMessage]:
    """Histories made only of the features both vendor formats carry without loss."""
    history: list[ConversationMessage] = []
    if draw(st.booleans()):
        history.append(S(draw(_free_text.filter(bool))))
    for t in range(draw(st.integers(0, 4))):
        history.append(U(draw(_user_texts(blank_lines=not anthropic))))
        for step in range(draw(st.integers(0, 2))):
            calls = tuple(
                ToolCall(f"call_{t}_{step}_{j}", draw(_names), draw(_arguments))
                for j in range(draw(st.integers(1, 3)))
            )
            history.append(AssistantToolCalls(draw(st.none() | _free_text.filter(bool)), calls))
            history.append(
                ToolResults(
                    tuple(
                        ToolResult(
                            c.id, draw(_free_text), c.name, tuple(draw(st.lists(_refs, max_size=2)))
                        )
                        for c in calls
                    )
                )
            )
        if draw(st.booleans()):
            history.append(A(draw(_free_text)))
        if not anthropic and draw(st.booleans()):
            history.append(S(draw(_free_text)))  # a late system message stays where it is
    return history


@given(_vendor_histories(anthropic=False))
def test_r22_openai_round_trip_gives_back_the_history(history: list[ConversationMessage]) -> None:
    """from_openai(to_openai(to_chat_messages(x))) == x, images and attachments included."""
    assert history == from_openai(to_openai(to_chat_messages(history)))


@given(_vendor_histories(anthropic=False))
def test_openai_round_trip_through_jsonl_text(history: list[ConversationMessage]) -> None:
    """Writing a JSONL line and reading it back gives the same history."""
    line = write_jsonl_line(to_chat_messages(history), "openai")
    assert [(1, history)] == list(read_jsonl(line + "\n", "openai"))


@given(_vendor_histories(anthropic=True))
def test_r22_anthropic_round_trip_gives_back_the_history(
    history: list[ConversationMessage],
) -> None:
    """from_anthropic(to_anthropic(...)) == x for one leading system and compact JSON arguments."""
    line = write_jsonl_line(to_chat_messages(history), "anthropic")
    assert [(1, history)] == list(read_jsonl(line, "anthropic"))


@given(chat_histories())
def test_r21_exported_user_images_are_the_ones_the_estimate_charges(
    history: list[ChatMessage],
) -> None:
    """User images the estimate charges (R21) and every tool attachment (R22) are image parts."""
    expected = sum(
        image_count(m, current_turn=True) if m.role == "user" else len(m.attachments)
        for m in history
    )
    exported = to_openai(history)
    actual = sum(
        1
        for m in exported
        if isinstance(m["content"], list)
        for part in m["content"]
        if part["type"] == "image_url"
    )
    assert expected == actual
