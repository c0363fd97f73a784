"""A provider's usage read into one form (issue 35 point 3): `turnledger.providers.Usage`.

Each provider's usage is read from the SDK's own object (the packages the dev extra installs)
and from its dict; ``input_tokens`` always counts every input token billed, whatever the
provider's own sum. What cannot be what was billed is refused, naming what was wrong.
"""

from __future__ import annotations

import pytest

from tests.extras import need
from turnledger.errors import InvalidUsage
from turnledger.providers import Usage


def test_i35_p3_openai_chat_usage_object() -> None:
    """Chat's ``prompt_tokens`` already counts the cached ones."""
    need("openai")
    from openai.types.completion_usage import CompletionUsage, PromptTokensDetails

    usage = CompletionUsage(prompt_tokens=1_200, completion_tokens=80, total_tokens=1_280,
                            prompt_tokens_details=PromptTokensDetails(cached_tokens=1_024,
                                                                      cache_write_tokens=100))
    assert Usage("openai-chat", 1_200, 80, 1_024, 100) == Usage.of(usage)
    assert Usage("openai-chat", 1_200, 80, 0, 0) == Usage.of(
        {"prompt_tokens": 1_200, "completion_tokens": 80, "prompt_tokens_details": None})


def test_i35_p3_openai_responses_usage_object() -> None:
    need("openai")
    from openai.types.responses.response_usage import (
        InputTokensDetails,
        OutputTokensDetails,
        ResponseUsage,
    )

    usage = ResponseUsage(input_tokens=3_000, output_tokens=150, total_tokens=3_150,
                          input_tokens_details=InputTokensDetails(cached_tokens=2_048,
                                                                  cache_write_tokens=512),
                          output_tokens_details=OutputTokensDetails(reasoning_tokens=40))
    assert Usage("openai-responses", 3_000, 150, 2_048, 512) == Usage.of(usage)


def test_i35_p3_anthropic_usage_object_counts_cache_reads_and_writes_as_input() -> None:
    """Anthropic's ``input_tokens`` are only those after the last breakpoint: the cache read
    and the cache write are input billed too."""
    need("anthropic")
    from anthropic.types import Usage as AnthropicUsage

    usage = AnthropicUsage(input_tokens=50, output_tokens=300, cache_read_input_tokens=9_000,
                           cache_creation_input_tokens=700)
    read = Usage.of(usage)
    assert Usage("anthropic", 9_750, 300, 9_000, 700) == read
    assert 9_000 / 9_750 == read.cache_hit_rate
    nothing_cached = AnthropicUsage(input_tokens=50, output_tokens=3)  # both None
    assert Usage("anthropic", 50, 3, 0, 0) == Usage.of(nothing_cached)


def test_i35_p3_gemini_usage_metadata_in_both_spellings() -> None:
    need("google.genai")
    from google.genai import types

    metadata = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=4_000, cached_content_token_count=3_500, candidates_token_count=90,
        thoughts_token_count=10, total_token_count=4_100)
    assert Usage("gemini", 4_000, 100, 3_500, 0) == Usage.of(metadata)
    rest = {"promptTokenCount": 4_000, "cachedContentTokenCount": 3_500,
            "candidatesTokenCount": 90, "totalTokenCount": 4_090}
    assert Usage("gemini", 4_000, 90, 3_500, 0) == Usage.of(rest)


def test_i35_p3_plain_input_and_output_read_as_responses() -> None:
    """Responses and Anthropic mean the same by these two when nothing was cached."""
    assert Usage("openai-responses", 10, 2, 0, 0) == Usage.of(
        {"input_tokens": 10, "output_tokens": 2})


@pytest.mark.parametrize(
    ("usage", "message"),
    [
        ({"total": 3}, r"no OpenAI Chat, Responses, Anthropic or Gemini usage \(keys: total\)"),
        ({}, r"\(keys: none\)"),
        ("120 tokens", "must be a provider's usage object or a dict, got str"),
        ({"prompt_tokens": 10}, "usage has no completion_tokens"),
        ({"prompt_tokens": -1, "completion_tokens": 1}, "prompt_tokens must be a whole number"),
        ({"prompt_tokens": 1.5, "completion_tokens": 1}, "got 1.5"),
        ({"prompt_tokens": True, "completion_tokens": 1}, "got True"),
        ({"prompt_tokens": 10, "completion_tokens": 1,
          "prompt_tokens_details": {"cached_tokens": 11}},
         "11 input tokens read from or written to the cache, more than the 10 input"),
        ({"input_tokens": 5, "output_tokens": 1, "input_tokens_details": [1]},
         "input_tokens_details must be an object, got list"),
    ],
)
def test_i35_p3_a_usage_that_cannot_be_what_was_billed_is_refused(
    usage: object, message: str
) -> None:
    with pytest.raises(InvalidUsage, match=message):
        Usage.of(usage)


def test_i35_p3_usage_built_by_hand_is_checked_too() -> None:
    with pytest.raises(InvalidUsage, match="usage api must be one of"):
        Usage("bedrock", 1, 1)
    with pytest.raises(InvalidUsage, match="output_tokens must be a whole number"):
        Usage("anthropic", 1, -2)
    assert 0.0 == Usage("anthropic", 0, 0).cache_hit_rate


def test_i35_p3_a_langchain_usage_metadata_keeps_its_cache_counts() -> None:
    """An ``AIMessage.usage_metadata`` passed to `Usage.of` is read as LangChain's (its input
    total already holds the cache counts), not as a Responses usage that would lose them; the
    writes split by lifetime (langchain-anthropic) are summed."""
    from langchain_core.messages.ai import UsageMetadata

    metadata: UsageMetadata = {
        "input_tokens": 1_200, "output_tokens": 40, "total_tokens": 1_240,
        "input_token_details": {"cache_read": 900, "cache_creation": 100},
    }
    assert Usage("langchain", 1_200, 40, 900, 100) == Usage.of(metadata)
    split = {"input_tokens": 500, "output_tokens": 5, "total_tokens": 505,
             "input_token_details": {"cache_read": 0, "cache_creation": 0,
                                     "ephemeral_5m_input_tokens": 120,
                                     "ephemeral_1h_input_tokens": 30}}
    assert Usage("langchain", 500, 5, 0, 150) == Usage.of(split)
    with pytest.raises(InvalidUsage, match="cache_read"):
        Usage.of({**metadata, "input_token_details": {"cache_read": -1}})
