"""Unit tests for turnledger.domain.overflow: recognising provider overflow errors (R26)."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable
from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnledger.domain.overflow import (
    OVERFLOW_PATTERNS,
    PROVIDER_OVERFLOW_PATTERNS,
    is_context_window_exceeded,
)

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
    """Upper-casing text, or wrapping it in an exception, never changes the answer.

    A text is an overflow exactly when it holds an R26 phrase or one of the providers' own
    overflow phrases (issue 8: the seed's list extended, see docs/behaviour.md#r26).
    """
    expected = is_context_window_exceeded(text)
    assert expected == is_context_window_exceeded(text.upper())
    assert expected == is_context_window_exceeded(RuntimeError(text))
    phrases = R26_PHRASES + PROVIDER_OVERFLOW_PATTERNS
    assert expected == any(p in " ".join(text.split()).lower() for p in phrases)


# --- provider table (issue 8 point 7) ----------------------------------------------------------
#
# Each row: the provider, the error exactly as that provider words it (a string, or a fake
# exception shaped like its SDK's: plain classes with the same attribute names, no SDK import),
# and where the text was seen. Numbers and ids are those of the cited report.


class FakeOpenAIError(Exception):
    """Shaped like ``openai.APIStatusError`` (also the groq SDK, and OpenAI-compatible servers
    reached through the openai SDK): ``body`` is the inner ``error`` object, ``code``/``type``
    are copied from it."""

    def __init__(self, status_code: int, error: dict[str, object]) -> None:
        super().__init__(f"Error code: {status_code} - {{'error': {error!r}}}")
        self.status_code = status_code
        self.body = error
        self.message = str(error.get("message", ""))
        self.code = error.get("code")
        self.type = error.get("type")
        self.param = error.get("param")


class FakeAnthropicError(Exception):
    """Shaped like ``anthropic.APIStatusError``: ``status_code``, the whole JSON ``body``."""

    def __init__(self, status_code: int, body: dict[str, object]) -> None:
        super().__init__(f"Error code: {status_code} - {body!r}")
        self.status_code = status_code
        self.body = body
        self.message = str(self)


class FakeBotocoreClientError(Exception):
    """Shaped like ``botocore.exceptions.ClientError``: a parsed ``response`` dict."""

    def __init__(self, code: str, message: str, status: int, operation: str) -> None:
        super().__init__(
            f"An error occurred ({code}) when calling the {operation} operation: {message}"
        )
        self.response = {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        }
        self.operation_name = operation


class FakeGenaiAPIError(Exception):
    """Shaped like ``google.genai.errors.APIError``: int ``code``, str ``status``,
    ``message`` and ``details`` (the response JSON)."""

    def __init__(self, code: int, status: str, message: str) -> None:
        self.code = code
        self.status = status
        self.message = message
        self.details = {"error": {"code": code, "message": message, "status": status}}
        super().__init__(f"{code} {status}. {self.details}")


class FakeMistralSDKError(Exception):
    """Shaped like ``mistralai`` ``SDKError``: ``status_code``, raw JSON text in ``body``."""

    def __init__(self, status_code: int, body: str) -> None:
        super().__init__(f"API error occurred: Status {status_code}")
        self.status_code = status_code
        self.body = body
        self.message = str(self)


class FakeCohereApiError(Exception):
    """Shaped like ``cohere.core.ApiError``: ``status_code``, parsed ``body``, ``headers``."""

    def __init__(self, status_code: int, body: dict[str, object]) -> None:
        super().__init__(f"status_code: {status_code}, body: {body}")
        self.status_code = status_code
        self.body = body
        self.headers: dict[str, str] = {}


class FakeOllamaResponseError(Exception):
    """Shaped like ``ollama.ResponseError``: ``error`` text and ``status_code`` (-1: unknown)."""

    def __init__(self, error: str, status_code: int = -1) -> None:
        super().__init__(error)
        self.error = error
        self.status_code = status_code


class FakeGrpcStatus(enum.Enum):
    INVALID_ARGUMENT = 3
    RESOURCE_EXHAUSTED = 8


class FakeGrpcError(Exception):
    """Shaped like ``grpc.RpcError`` (the xai-sdk client): ``code()`` and ``details()`` getters;
    its str() says nothing useful."""

    def __init__(self, status: FakeGrpcStatus, details: str) -> None:
        super().__init__("<_InactiveRpcError of RPC that terminated>")
        self._status, self._details = status, details

    def code(self) -> FakeGrpcStatus:
        return self._status

    def details(self) -> str:
        return self._details


class FakeResponse:
    """Shaped like ``httpx.Response`` / ``requests.Response``: ``status_code``, ``json()``."""

    def __init__(self, status_code: int, payload: object) -> None:
        self.status_code = status_code
        self._payload = payload

    def json(self) -> object:
        return self._payload


class FakeHTTPStatusError(Exception):
    """Shaped like ``httpx.HTTPStatusError``: a generic message and the ``response``."""

    def __init__(self, response: FakeResponse) -> None:
        super().__init__(f"Client error '{response.status_code}' for url 'https://…'")
        self.response = response


class Case(NamedTuple):
    provider: str
    error: str | BaseException
    source: str


OVERFLOW_CASES = [
    Case("OpenAI chat", "This model's maximum context length is 128000 tokens. However, your "
         "messages resulted in 204308 tokens. Please reduce the length of the messages.",
         "https://github.com/webtimemachine/wtm2/issues/579"),
    Case("OpenAI SDK error", FakeOpenAIError(400, {
        "message": "This model's maximum context length is 8192 tokens. However, you requested "
        "8213 tokens (6683 in the messages, 730 in the functions, and 800 in the completion). "
        "Please reduce the length of the messages, functions, or completion.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}),
        "https://github.com/FoundationAgents/OpenManus/issues/62"),
    Case("OpenAI Responses", "Your input exceeds the context window of this model. Please adjust "
         "your input and try again.",
         "badlogic/pi-mono packages/ai/src/utils/overflow.ts (OpenAI Responses example)"),
    Case("Azure OpenAI (REST through httpx)", FakeHTTPStatusError(FakeResponse(400, {"error": {
        "message": "This model's maximum context length is 4097 tokens. However, your messages "
        "resulted in 4301 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages",
        "code": "context_length_exceeded"}})),
        "https://github.com/xtekky/gpt4free/issues/137 (body); Azure-style nesting: "
        "BerriAI/litellm litellm/litellm_core_utils/exception_mapping_utils.py"),
    Case("Anthropic", "prompt is too long: 202128 tokens > 200000 maximum",
         "https://github.com/stackblitz/bolt.new/issues/1748"),
    Case("Anthropic SDK error", FakeAnthropicError(400, {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 202609 tokens > 200000 maximum"}}),
        "https://github.com/stackblitz-labs/bolt.diy/issues/401"),
    Case("Anthropic input + max_tokens", "input length and `max_tokens` exceed context limit: "
         "90402 + 116650 > 204648, decrease input length or `max_tokens` and try again",
         "https://github.com/stackblitz/bolt.new/issues/7414"),
    Case("Anthropic 413 request_too_large", FakeAnthropicError(413, {"error": {
        "type": "request_too_large", "message": "Request exceeds the maximum size"}}),
        "https://github.com/anthropics/anthropic-sdk-python/issues/938"),
    Case("Anthropic 413 context window", '413 {"type":"error","error":{"type":'
         '"invalid_request_error","message":"Request size exceeds model context window"}}',
         "https://github.com/anthropics/claude-code/issues/6380"),
    Case("Google Gemini", "The input token count (1054016) exceeds the maximum number of tokens "
         "allowed (1048576).", "https://github.com/google-gemini/gemini-cli/issues/13006"),
    Case("Google Gemini (google-genai error)", FakeGenaiAPIError(400, "INVALID_ARGUMENT",
         "The input token count (132478) exceeds the maximum number of tokens allowed (131072)."),
         "https://github.com/google-gemini/gemini-cli/issues/4118"),
    Case("Google Vertex AI", "The input token count (4417490) exceeds the maximum number of "
         "tokens allowed (1048576).",
         "https://github.com/google-gemini/gemini-cli/issues/8132 (PredictionService logs)"),
    Case("AWS Bedrock (botocore)", FakeBotocoreClientError(
        "validationException", "Input is too long for requested model.", 400,
        "InvokeModelWithResponseStream"), "https://github.com/aws-samples/bedrock-chat/issues/95"),
    Case("AWS Bedrock Converse", "The model returned the following errors: Input is too long "
         "for requested model.", "https://github.com/continuedev/continue/issues/9592"),
    Case("Mistral (SDKError, raw body)", FakeMistralSDKError(400, '{"object":"error","message":'
         '"Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 '
         'maximum context length","type":"invalid_request_message_error","param":null,'
         '"code":null}'), "badlogic/pi-mono packages/ai/src/utils/overflow.ts (Mistral wording)"),
    Case("Cohere (ApiError)", FakeCohereApiError(400, {"message": "too many tokens: total number "
         "of tokens (prompt and prediction) cannot exceed 2048 - received 6354. Try using a "
         "shorter prompt or a smaller max_tokens value."}),
         "https://github.com/cohere-ai/sandbox-topically/issues/4"),
    Case("xAI", "This model's maximum prompt length is 131072 but the request contains 136973 "
         "tokens.", "https://github.com/cline/cline/issues/3120"),
    Case("xAI (gRPC error)", FakeGrpcError(FakeGrpcStatus.INVALID_ARGUMENT, "This model's maximum "
         "prompt length is 131072 but the request contains 136973 tokens."),
         "https://github.com/cline/cline/issues/3120 (text); grpc.RpcError code()/details()"),
    Case("Groq (groq SDK error)", FakeOpenAIError(400, {
        "message": "Please reduce the length of the messages or completion.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}),
        "vasistacv/Omnimind_AI CONTEXT_FIX_COMPLETE.md"),
    Case("Groq", "Please reduce the length of the messages or completion.",
         "badlogic/pi-mono packages/ai/src/utils/overflow.ts (Groq example)"),
    Case("DeepSeek", FakeOpenAIError(400, {
        "message": "This model's maximum context length is 65536 tokens. However, you requested "
        "66343 tokens (62247 in the messages, 4096 in the completion). Please reduce the length "
        "of the messages or completion.", "type": "invalid_request_error", "param": None,
        "code": "invalid_request_error"}), "https://github.com/FoundationAgents/OpenManus/issues/79"),
    Case("Moonshot / Kimi", FakeOpenAIError(400, {
        "message": "Invalid request: Your request exceeded model token limit: 262144 "
        "(requested: 269030)", "type": "invalid_request_error"}),
         "https://github.com/MoonshotAI/kimi-cli/issues/2011"),
    Case("Moonshot (older models)", "model max length exceeded, max length:8192",
         "https://github.com/MoonshotAI/MoonshotAI-Cookbook/issues/18"),
    Case("OpenRouter", "This endpoint's maximum context length is 65536 tokens. However, you "
         "requested about 92208 tokens (60833 of text input, 10042 of tool input, 21333 in the "
         'output). Please reduce the length of either one, or use the "middle-out" transform to '
         "compress your prompt automatically.",
         "https://github.com/musistudio/claude-code-router/issues/252"),
    Case("OpenRouter (Bedrock behind it)", FakeOpenAIError(400, {
        "message": "Provider returned error", "code": 400, "metadata": {
            "raw": '{"message":"input length and `max_tokens` exceed context limit: 149674 + '
            '64000 > 204658, decrease input length or `max_tokens` and try again"}',
            "provider_name": "Amazon Bedrock"}}),
        "https://github.com/egoist/chatwise-releases/issues/917"),
    Case("Ollama (ResponseError)", FakeOllamaResponseError(
        "the input length exceeds the context length"),
        "jeastham1993/zettel-system docs/compound/infrastructure/"
        "INFRA-001-ollama-embedding-context-limit.md"),
    Case("llama.cpp server (500 + type)", FakeOpenAIError(500, {
        "code": 500, "message": "the request exceeds the available context size. try increasing "
        "the context size or enable context shift", "type": "exceed_context_size_error",
        "n_prompt_tokens": 1407, "n_ctx": 256}), "https://github.com/ggml-org/llama.cpp/pull/15780"),
    Case("llama.cpp server (body text)", '{"error":{"code":400,"message":"the request exceeds the '
         'available context size. try increasing the context size or enable context shift",'
         '"type":"exceed_context_size_error","n_prompt_tokens":14429,"n_ctx":8192}}',
         "https://github.com/oobabooga/textgen/issues/7257"),
    Case("vLLM", "This model's maximum context length is 16384 tokens. However, you requested "
         "122946 tokens (112946 in the messages, 10000 in the completion). Please reduce the "
         "length of the messages or completion.", "https://github.com/vllm-project/vllm/issues/20409"),
    Case("vLLM (through the openai SDK)", FakeOpenAIError(400, {
        "object": "error", "message": "This model's maximum context length is 6048 tokens. "
        "However, you requested 6616 tokens (568 in the messages, 6048 in the completion). "
        "Please reduce the length of the messages or completion.", "type": "BadRequestError",
        "param": None, "code": 400}), "https://github.com/ogx-ai/ogx/issues/4534"),
    Case("vLLM (multimodal prompt)", "The prompt (total length 25938) is too long to fit into the "
         "model (context length 4096). Make sure that `max_model_len` is no smaller than the "
         "number of text tokens plus multimodal tokens.",
         "https://github.com/vllm-project/vllm/issues/12165"),
    Case("vLLM V1 engine", "The decoder prompt (length 2048) plus the number of requested output "
         "tokens (at least 1) is longer than the maximum model length of 2048.",
         "vllm-project/vllm tests/v1/e2e/test_context_length.py"),
    Case("LM Studio", "tokens to keep from the initial prompt is greater than the context length",
         "badlogic/pi-mono packages/ai/src/utils/overflow.ts (LM Studio example)"),
    Case("MiniMax", "invalid params, context window exceeds limit",
         "badlogic/pi-mono packages/ai/src/utils/overflow.ts (MiniMax example)"),
]

NOT_OVERFLOW_CASES = [
    Case("OpenAI 429 TPM (text)", "Request too large for gpt-4o on tokens per min (TPM): Limit "
         "30000, Requested 342389. The input or output tokens must be reduced in order to run "
         "successfully.", "https://github.com/vanna-ai/vanna-flask/issues/11"),
    Case("OpenAI 429 TPM (SDK error)", FakeOpenAIError(429, {
        "message": "Request too large for gpt-4o in organization org-VDAWofJASuLH0vVz8o9tiQZr on "
        "tokens per min (TPM): Limit 30000, Requested 30601. The input or output tokens must be "
        "reduced in order to run successfully. Visit https://platform.openai.com/account/"
        "rate-limits to learn more.", "type": "tokens", "param": None,
        "code": "rate_limit_exceeded"}), "https://github.com/vanderschaarlab/climb/issues/1"),
    Case("Groq 413 TPM (a 413 that is a rate limit)", FakeOpenAIError(413, {
        "message": "Request too large for model `llama-3.1-70b-versatile` in organization "
        "`org_01hw8f0aa0ekmrn70ffm2zkdv1` on tokens per minute (TPM): Limit 6000, Requested "
        "14368, please reduce your message size and try again. Visit "
        "https://console.groq.com/docs/rate-limits for more information.", "type": "tokens",
        "code": "rate_limit_exceeded"}), "https://github.com/assafelovic/gpt-researcher/issues/985"),
    Case("Groq 429 TPD", "Rate limit reached for model `llama-3.3-70b-versatile` in organization "
         "`org_01kjh7p9n8f1qs6nz2bz77vy6b` service tier `on_demand` on tokens per day (TPD): "
         "Limit 100000, Used 97050, Requested 3619. Please try again in 9m38.016s.",
         "https://github.com/continuedev/continue/issues/10920"),
    Case("Anthropic 429 input tokens per minute", FakeAnthropicError(429, {"type": "error",
         "error": {"type": "rate_limit_error", "message": "This request would exceed the rate "
                   "limit for your organization (d3f27ff7-9afe-4ee2-9645-76ecfc73c2b7) of 40,000 "
                   "input tokens per minute. For details, refer to: https://docs.anthropic.com/"
                   "en/api/rate-limits. You can see the response headers for current usage. "
                   "Please reduce the prompt length or the maximum tokens requested, or try again "
                   "later."}}), "https://github.com/bhouston/mycoder/issues/62"),
    Case("AWS Bedrock throttling (botocore)", FakeBotocoreClientError(
        "ThrottlingException", "Too many tokens, please wait before trying again.", 429,
        "InvokeModel"), "https://github.com/anthropics/claude-code/issues/236"),
    Case("AWS Bedrock throttling (Anthropic Bedrock SDK)", FakeAnthropicError(
        429, {"message": "Too many tokens, please wait before trying again."}),
        "https://github.com/anthropics/claude-code/issues/236"),
    Case("Google Gemini 429 quota", FakeGenaiAPIError(429, "RESOURCE_EXHAUSTED", "You exceeded "
         "your current quota, please check your plan and billing details. For more information "
         "on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."),
         "https://github.com/google-gemini/gemini-cli/issues/8437"),
    Case("Google 429 (gRPC)", FakeGrpcError(FakeGrpcStatus.RESOURCE_EXHAUSTED,
         "Resource has been exhausted (e.g. check quota)."),
         "https://github.com/google/generative-ai-docs/issues/438"),
    Case("Azure OpenAI 429", "Requests to the ChatCompletions_Create Operation under Azure OpenAI "
         "API version 2024-05-01-preview have exceeded token rate limit of your current OpenAI S0 "
         "pricing tier. Please retry after 86400 seconds.",
         "https://github.com/alex-wolf-ps/dbchatprov2/issues/2"),
    Case("OpenAI 401", FakeOpenAIError(401, {"message": "Incorrect API key provided: sk-abc. You "
         "can find your API key at https://platform.openai.com/account/api-keys.",
         "type": "invalid_request_error", "code": "invalid_api_key"}),
         "https://help.openai.com/en/articles/6891781-error-code-401-incorrect-api-key-provided"),
    Case("Anthropic 401", FakeAnthropicError(401, {"type": "error", "error": {
        "type": "authentication_error", "message": "There's an issue with your API key."}}),
        "https://docs.claude.com/en/api/errors"),
    Case("Anthropic 529 overloaded", FakeAnthropicError(529, {"type": "error", "error": {
        "type": "overloaded_error", "message": "Overloaded"}}),
        "https://docs.llmgateway.io/troubleshooting/anthropic-529-overloaded"),
    Case("OpenAI 500", "The server had an error while processing your request.",
         "https://w3cschool.cn/openai_api/openai-api-error-codes.html (OpenAI error codes guide)"),
    Case("Azure content filter", "The response was filtered due to the prompt triggering Azure "
         "OpenAI's content management policy.", "BerriAI/litellm litellm/litellm_core_utils/"
         "exception_mapping_utils.py is_azure_content_policy_violation_error"),
    Case("OpenAI invalid model", FakeOpenAIError(404, {"message": "The model `gpt-4o` does not "
         "exist or you do not have access to it.", "type": "invalid_request_error",
         "param": None, "code": "model_not_found"}), "https://github.com/shobrook/wut/issues/14"),
    Case("Bedrock output cap (not the context)", "The maximum tokens you requested exceeds the "
         "model limit of 32768", "https://github.com/charmbracelet/crush/issues/946"),
    Case("Groq max_tokens cap", "max_tokens must be less than or equal to 16384, the maximum "
         "value for max_tokens is less than the context_window for this model",
         "https://github.com/RooCodeInc/Roo-Code/issues/5729"),
    Case("Bedrock malformed input", "Malformed input request: #/stopSequences: expected type: "
         "JSONArray, found: String, please reformat your input and try again.",
         "https://github.com/langgenius/dify/pull/3326"),
]


@pytest.mark.parametrize("case", OVERFLOW_CASES, ids=[c.provider for c in OVERFLOW_CASES])
def test_r26_provider_overflow_is_recognised(case: Case) -> None:
    """Each provider's real overflow error (text or SDK-shaped exception) is an overflow."""
    assert case.source
    assert True is is_context_window_exceeded(case.error)


@pytest.mark.parametrize("case", NOT_OVERFLOW_CASES, ids=[c.provider for c in NOT_OVERFLOW_CASES])
def test_r26_rate_limit_auth_server_and_other_errors_are_not_overflows(case: Case) -> None:
    """Rate limits (tokens-per-minute included), auth, overload, filters: never an overflow."""
    assert case.source
    assert False is is_context_window_exceeded(case.error)


def test_r26_some_sdk_errors_are_recognised_only_through_their_fields() -> None:
    """Without reading body/response/details, three table rows would be missed: str() of an
    httpx error, of Mistral's SDKError and of a gRPC error does not carry the provider text."""
    text_only = {c.provider for c in OVERFLOW_CASES
                 if not isinstance(c.error, str) and not is_context_window_exceeded(str(c.error))}
    assert {"Azure OpenAI (REST through httpx)", "Mistral (SDKError, raw body)",
            "xAI (gRPC error)"} == text_only


def test_r26_overflow_code_decides_without_a_known_phrase() -> None:
    """An SDK error whose code says context_length_exceeded is an overflow, whatever its text."""
    error = FakeOpenAIError(400, {"message": "Blabla", "type": "context_length_exceeded"})
    assert True is is_context_window_exceeded(error)


def test_r26_bare_bedrock_throttling_text_is_an_r26_match() -> None:
    """Trade-off: a bare string has no status, so R26's "too many tokens" matches Bedrock's
    throttling text; only its exception's fields (429, ThrottlingException) tell it apart."""
    assert True is is_context_window_exceeded("Too many tokens, please wait before trying again.")


def test_r26_wrapper_repeating_a_rate_limit_text_is_not_an_overflow() -> None:
    """A runtime error re-raised with the SDK error's text is judged by the SDK error (429)."""
    throttled = FakeBotocoreClientError(
        "ThrottlingException", "Too many tokens, please wait before trying again.", 429,
        "Converse")
    wrapper = RuntimeError(f"provider failed: {throttled}")
    wrapper.__cause__ = throttled
    assert False is is_context_window_exceeded(wrapper)


def test_r26_outermost_provider_error_decides_the_chain() -> None:
    """A retry that hit 529 then an overflow is an overflow; an overflow then 429 is not."""
    overloaded = FakeAnthropicError(529, {"error": {"type": "overloaded_error"}})
    overflow = FakeAnthropicError(400, {"error": {"message": "prompt is too long: 5 > 4"}})
    overflow.__context__ = overloaded
    assert True is is_context_window_exceeded(overflow)

    rate_limited = FakeAnthropicError(429, {"error": {"type": "rate_limit_error"}})
    rate_limited.__context__ = FakeAnthropicError(400, {"error": {"message": "prompt is too long"}})
    assert False is is_context_window_exceeded(rate_limited)


def test_r26_broken_provider_fields_do_not_crash() -> None:
    """A response whose json() raises and a property that raises are skipped, not propagated."""

    class Unread:
        status_code = 400

        def json(self) -> object:
            raise RuntimeError("response not read")

        @property
        def text(self) -> str:
            raise RuntimeError("response not read")

    error = FakeHTTPStatusError(FakeResponse(400, None))
    error.response = Unread()  # type: ignore[assignment]
    assert False is is_context_window_exceeded(error)
    error.args = ("maximum context length is 10 tokens",)
    assert True is is_context_window_exceeded(error)
