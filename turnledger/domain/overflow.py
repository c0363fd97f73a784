"""Recognise a provider's context-window overflow from its error (R26).

A provider that rejects a request because it is too large says so in prose, and each one words it
differently. `is_context_window_exceeded` matches the ten phrases R26 lists, plus the
phrases below that providers actually send, ignoring case, so the runtime can start the reactive
recovery of R25.

Recognised, from error text and from the fields of their SDKs' exceptions:

* OpenAI and Azure OpenAI ("maximum context length", "exceeds the context window",
  code ``context_length_exceeded``); DeepSeek, OpenRouter, vLLM, Mistral and other
  OpenAI-compatible servers ("maximum context length", vLLM's "longer than the maximum model
  length");
* Anthropic, direct or via Bedrock/Vertex ("prompt is too long", "exceed context limit",
  413 ``request_too_large``);
* Google Gemini and Vertex AI ("exceeds the maximum number of tokens allowed");
* AWS Bedrock ("Input is too long for requested model", a botocore ``ValidationException``);
* Cohere ("too many tokens"), xAI ("maximum prompt length is"), Groq ("reduce the length of
  the messages"), Moonshot/Kimi ("exceeded model token limit"), Ollama ("input length exceeds the
  context length"), llama.cpp server ("exceeds the available context size",
  ``exceed_context_size_error``), LM Studio and MiniMax.

Provider SDKs wrap errors, so for an exception the whole ``__cause__`` / ``__context__`` chain
(and the members of exception groups) is searched. SDK exceptions are read duck-typed, with no
SDK import: ``status_code`` / ``status``, ``code``, ``type``, ``message``, ``body`` and ``details``
(nested ``error: {code, type, message}`` dicts or JSON text), ``response`` (``.json()`` /
``.text``, or botocore's ``{'Error': {'Code', 'Message'}, 'ResponseMetadata': ...}``) and
gRPC-style ``code()`` / ``details()``. The outermost exception that carries such fields decides:
a rate limit, quota or auth error (401, 403, 429, ``rate_limit_exceeded``,
``ThrottlingException``, ``RESOURCE_EXHAUSTED``, ...) is not an overflow whatever its text says
(Bedrock's throttling text is "Too many tokens, please wait"); an overflow code or 413 is one;
otherwise its own messages are matched. A bare string has no fields, so only its text counts.
"""

from __future__ import annotations

import inspect
import json
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Final

import attrs

__all__ = [
    "OVERFLOW_PATTERNS",
    "PROVIDER_OVERFLOW_PATTERNS",
    "exception_chain",
    "is_context_window_exceeded",
]

OVERFLOW_PATTERNS: Final[tuple[str, ...]] = (
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
"""The R26 phrases, lower case and with single spaces, as matched after normalisation."""

# Phrases providers send that none of the R26 phrases covers, each with where it comes from.
PROVIDER_OVERFLOW_PATTERNS: Final[tuple[str, ...]] = (
    "context_length_exceeded",  # OpenAI / Azure / Groq error code, echoed in str(SDK error)
    "exceed_context_size_error",  # llama.cpp server error type
    "request_too_large",  # Anthropic 413 error type
    "exceeds the maximum number of tokens allowed",  # Google Gemini, Vertex AI
    "exceed context limit",  # Anthropic: input length and `max_tokens` exceed context limit
    "exceeds model context window",  # Anthropic 413: Request size exceeds model context window
    "maximum prompt length is",  # xAI
    "reduce the length of the messages",  # Groq, OpenAI-compatible servers
    "exceeded model token limit",  # Moonshot / Kimi
    "model max length exceeded",  # Moonshot (older models)
    "too long to fit into the model",  # vLLM
    "longer than the maximum model length",  # vLLM V1 engine
    "input length exceeds the context length",  # Ollama
    "greater than the context length",  # LM Studio
    "context window exceeds limit",  # MiniMax
)

_OVERFLOW_CODES: Final = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "request_too_large"}
)
# Rate limits, quotas, auth and overload: retrying later (or fixing a key) helps, trimming not.
_NOT_OVERFLOW_CODES: Final = frozenset({
    "rate_limit_exceeded", "rate_limit_error", "insufficient_quota", "throttlingexception",
    "servicequotaexceededexception", "resource_exhausted", "too_many_requests",
    "overloaded_error", "authentication_error", "permission_error", "invalid_api_key",
})
_NOT_OVERFLOW_STATUSES: Final = frozenset({401, 403, 429})
_PAYLOAD_TOO_LARGE: Final = 413

_FIELD_NAMES: Final = ("status_code", "status", "code", "type")  # on the exception itself
_MESSAGE_NAMES: Final = ("message", "error", "body", "details")
_PAYLOAD_CODE_KEYS: Final = frozenset(
    {"code", "type", "status", "status_code", "httpstatuscode", "reason", "__type"}
)
_PAYLOAD_TEXT_KEYS: Final = frozenset(
    {"message", "msg", "detail", "details", "error", "errormessage", "raw"}
)
_MAX_PAYLOAD_DEPTH: Final = 6

# Enough for any real wrapping depth (SDK -> HTTP client -> retry layer -> runtime); the bound
# only exists so that a pathological, programmatically built chain cannot make us loop for long.
_MAX_EXCEPTIONS: Final = 64


def _normalise(text: str) -> str:
    # casefold() is the Unicode-correct case-insensitive form; collapsing whitespace runs lets a
    # message that was wrapped across lines (or double-spaced) still match its phrase.
    return " ".join(text.split()).casefold()


def _matches(text: str) -> bool:
    normalised = _normalise(text)
    return any(pattern in normalised for pattern in OVERFLOW_PATTERNS) or any(
        phrase in normalised for phrase in PROVIDER_OVERFLOW_PATTERNS
    )


def _text_of(error: BaseException) -> str:
    # A broken __str__ in some third-party exception must not turn a diagnosis into a new crash.
    try:
        return str(error)
    except Exception:
        return ""


def _linked(error: BaseException) -> Iterator[BaseException]:
    if error.__cause__ is not None:
        yield error.__cause__
    if error.__context__ is not None:
        yield error.__context__
    if isinstance(error, BaseExceptionGroup):
        yield from error.exceptions


def exception_chain(error: BaseException) -> list[BaseException]:
    """``error`` and every exception linked to it, breadth first (outermost first), each once."""
    seen: set[int] = set()
    found: list[BaseException] = []
    queue: deque[BaseException] = deque([error])
    while queue and len(found) < _MAX_EXCEPTIONS:
        current = queue.popleft()
        if id(current) in seen:  # cause/context chains can form cycles
            continue
        seen.add(id(current))
        found.append(current)
        queue.extend(_linked(current))
    return found


def _field(owner: object, name: str) -> object:
    """``owner.name``, called when it is a getter method (gRPC's ``code()``); None on failure."""
    try:
        value = getattr(owner, name, None)
        if callable(value) and not isinstance(value, type):
            if inspect.iscoroutinefunction(value):  # aiohttp's json(): awaiting is I/O
                return None
            value = value()
    except Exception:  # a property or getter of a third-party object must not crash us
        return None
    return value


@attrs.define
class _Evidence:
    """What one exception says about itself: HTTP statuses, error codes, messages."""

    statuses: set[int] = attrs.field(factory=set)
    codes: set[str] = attrs.field(factory=set)
    texts: list[str] = attrs.field(factory=list)

    @property
    def structured(self) -> bool:
        return bool(self.statuses or self.codes)

    def add_code(self, value: object) -> None:
        """Record a status (an int in the HTTP range) or a code (a str or an enum's name)."""
        if isinstance(value, bool):
            return
        if isinstance(value, int):
            if 100 <= value <= 599:
                self.statuses.add(value)
            return
        name = value if isinstance(value, str) else getattr(value, "name", None)
        if isinstance(name, str) and name:
            self.codes.add(name.casefold())

    def add_payload(self, payload: object, depth: int = 0) -> None:
        """Walk a JSON-like error body: codes and statuses, then messages, nested dicts too."""
        if depth > _MAX_PAYLOAD_DEPTH:
            return
        if isinstance(payload, str):
            self._add_text(payload, depth)
        elif isinstance(payload, Mapping):
            for key, value in payload.items():
                self._add_entry(str(key).casefold(), value, depth)
        elif isinstance(payload, list | tuple):
            for item in payload:
                self.add_payload(item, depth + 1)

    def _add_entry(self, key: str, value: object, depth: int) -> None:
        if isinstance(value, Mapping | list | tuple):
            self.add_payload(value, depth + 1)
        elif key in _PAYLOAD_CODE_KEYS:
            self.add_code(value)
        elif key in _PAYLOAD_TEXT_KEYS and isinstance(value, str):
            self.texts.append(value)

    def _add_text(self, text: str, depth: int) -> None:
        # SDKs that do not parse the body (Mistral's SDKError, a raw response text) keep JSON.
        if text.lstrip().startswith(("{", "[")):
            try:
                self.add_payload(json.loads(text), depth + 1)
            except ValueError:
                pass
            else:
                return
        self.texts.append(text)

    def add_response(self, response: object) -> None:
        """An HTTP response (requests/httpx style) or botocore's parsed response dict."""
        if response is None:
            return
        if isinstance(response, Mapping):
            self.add_payload(response)
            return
        for name in ("status_code", "status"):
            self.add_code(_field(response, name))
        body = _field(response, "json")
        if body is None:
            body = _field(response, "text")  # httpx raises until the body was read
        self.add_payload(body)


def _evidence(error: BaseException) -> _Evidence:
    evidence = _Evidence(texts=[_text_of(error)])
    for name in _FIELD_NAMES:
        evidence.add_code(_field(error, name))
    for name in _MESSAGE_NAMES:
        evidence.add_payload(_field(error, name))
    evidence.add_response(_field(error, "response"))
    return evidence


def _verdict(evidence: _Evidence) -> bool:
    """The answer of an exception that carries provider fields (status, code, type)."""
    if evidence.codes & _NOT_OVERFLOW_CODES or evidence.statuses & _NOT_OVERFLOW_STATUSES:
        return False
    if evidence.codes & _OVERFLOW_CODES or _PAYLOAD_TOO_LARGE in evidence.statuses:
        return True
    return any(_matches(text) for text in evidence.texts)


def _exception_is_overflow(error: BaseException) -> bool:
    chain = [_evidence(current) for current in exception_chain(error)]
    for evidence in chain:
        if evidence.structured:  # the outermost provider error is the failure being handled
            return _verdict(evidence)
    return any(_matches(text) for evidence in chain for text in evidence.texts)


def is_context_window_exceeded(error: BaseException | str) -> bool:
    """True when a provider error says the request exceeded the model's context window (R26).

    ``error`` is the error text, or the exception itself: then its message, its provider fields
    (status code, error code and type, body, response; read duck-typed, see the module
    docstring) and those of the exceptions it was raised from (``__cause__``, ``__context__``,
    exception-group members; at most 64, cycles tolerated) are examined. The outermost
    exception that carries provider fields decides, so a 429 rate limit or a 401/403 is never an
    overflow. Matching ignores case and treats any run of whitespace as one space.

    Raises:
        TypeError: ``error`` is neither a str nor an exception.
    """
    if isinstance(error, str):
        return _matches(error)
    if isinstance(error, BaseException):
        return _exception_is_overflow(error)
    raise TypeError(f"error must be a str or an exception, got {type(error).__name__}")
