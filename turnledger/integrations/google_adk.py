"""Google ADK agents on turnledger sessions (issue 22).

Needs ``pip install 'turnledger[google-adk]'`` (google-adk, with google-genai).

- **Conversions** (`from_genai`, `to_genai`): ``google.genai.types.Content`` ⇄ turnledger
  messages, losslessly (ADR-0081). A ``model`` content is one assistant message (text and
  thought parts as blocks, each ``function_call`` a `ToolCall`, code parts opaque blocks); a
  ``user`` content is one message per run of parts: its text and inline data as blocks (images
  as `ImageBlock`), its ``function_response`` parts as one `ToolResults`. Every field
  turnledger does not interpret is kept beside it under ``"google_adk"``; "equal" is
  google-genai's own JSON form. ADK strips the client-side call ids before the model sees the
  contents, so a call without an id gets a recorded one (``adk-…``, the same for the same
  contents and record, ADR-0099; given back as no id) and a
  response without an id answers the oldest unanswered call of its name. A part kind or a role
  with no turnledger form is refused by name (`InvalidMessage`), never dropped.
- **Callbacks**: `TurnledgerCallback`, an ADK ``before_model_callback``
  (``LlmAgent(..., before_model_callback=callback,
  after_model_callback=callback.after_model)``). Before every model call — the first of an
  invocation and each one between tool steps (R24) — it records the contents
  ADK added since the last call and the trims a request would make (`Session.fit_window`),
  in one transaction, and replaces ``llm_request.contents`` with that window:
  whole turns, the breadcrumb when older turns were cut, no function response without its call.
  ADK's own session keeps every event; only the request is trimmed. ``after_model`` records
  each reply without function calls as it arrives, so the log holds the run's last answer when
  the run ends; a reply with calls is recorded by the next model call, with its responses.
- **include_contents="none"**: with ``LlmAgent(include_contents="none")`` ADK puts only the
  current turn in the request (the user content that started the invocation and this turn's
  calls and responses) and turnledger's window supplies the history, so a step no longer pays
  ADK's rebuild of the whole history (``benchmarks.agent_step --parts adk``, its ``none``
  side). ADK's session still keeps every event. What is new is told as with the default
  contents (they restart at each invocation, so the index check fails and nothing after the
  last content seen is found: all of them are new); an invocation's user content equal to the
  last content seen (the same question after a turn with no reply recorded) is new too.

One turnledger session per ADK session (its id, named by `session_uuid`), or the one
``session_id`` given. What is new is told per ADK session: the contents after the last one
this object saw recorded for it (several ADK sessions, objects or processes may write one
conversation at once, so the newest recorded content may be another writer's). On this
object's first call for an ADK session (e.g. in a new process), the contents after the
newest recorded content, found where the record's last contents line up (so the same question
asked again after a turn with no reply recorded is new), else after the last one but the
newest that was
recorded (the ADK session restored while others wrote), else all of them (a new ADK session
continuing a conversation turnledger holds). ADK's system instruction lives in the
request's config, not its contents: it is neither recorded nor trimmed. Store calls run in a
worker thread (`off_loop`), the conversions in the event loop's (ADR-0092), the window's
contents built there while the step's commit waits on the database (`fit_then_build`,
ADR-0093); a write that loses a race is decided again (`retrying`, ADR-0065).
"""

from __future__ import annotations

import base64
import functools
import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from turnledger.domain.blocks import (
    ContentBlock,
    ImageBlock,
    OpaqueBlock,
    TextBlock,
    ThinkingBlock,
    canonical_json,
    extra_fields,
)
from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.errors import InvalidMessage, TurnledgerError
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    compact_json,
)
from turnledger.integrations import (
    CONFLICT_BUDGET_SECONDS,
    BuiltOnce,
    Decided,
    Piece,
    SessionsByName,
    conversation_of,
    fit_then_build,
    grouped,
    off_loop,
    user_side,
)
from turnledger.store.session import Session, Store
from turnledger.store.summaries import Summarizer, SummaryFunction

try:
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types
    from pydantic import BaseModel
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "turnledger.integrations.google_adk needs google-adk: "
        "pip install 'turnledger[google-adk]'"
    ) from error

__all__ = ["TurnledgerCallback", "from_genai", "to_genai"]

Json = dict[str, Any]
_KEY = "google_adk"
_OPAQUE_PARTS = ("inline_data", "file_data", "executable_code", "code_execution_result")
_SYNTHETIC = "synthetic_id"  # a call id turnledger gave: the content had none


def _ns(fields: Json) -> str:
    return canonical_json({_KEY: fields}) if fields else ""


def _fields(extra: str) -> Json:
    value = extra_fields(extra).get(_KEY)
    return value if isinstance(value, dict) else {}


def _dump(content: types.Content) -> Json:
    dumped: Json = content.model_dump(mode="json", exclude_none=True)
    return dumped


def _standard_b64(urlsafe: str) -> str:
    return base64.b64encode(base64.urlsafe_b64decode(urlsafe)).decode("ascii")


def _urlsafe_b64(standard: str) -> str:
    return base64.urlsafe_b64encode(base64.b64decode(standard)).decode("ascii")


def _kind(part: Json, where: str) -> str:
    for kind in ("text", "function_call", "function_response", *_OPAQUE_PARTS):
        if kind in part:
            return kind
    raise InvalidMessage(f"{where}: a part with {sorted(part) or 'no fields'} has no "
                         "turnledger form; it was not recorded")


# --- genai -> turnledger ----------------------------------------------------------------------


_ID_SPACE = uuid.UUID("5f0c6f4e-2f38-5b8e-9d3a-6a1d2f0c9b71")
"""The uuid5 namespace of the ids turnledger gives id-less calls and responses."""


class _Calls:
    """The unanswered calls of a conversation, oldest first: what an id-less response answers.

    A call without an id gets one (``adk-`` and 32 hex digits, as ADK's own), made from
    ``seed``, the content's and the part's index, the call and the ids still unanswered: the
    same contents converted again get the same ids (ADR-0099), and an id-less call made
    again while the first is unanswered gets another id (turnledger refuses a call whose id a
    call of the turn still awaits, ADR-0099)."""

    def __init__(self, pending: Iterable[ToolCall] = (), seed: str = "") -> None:
        self.pending = list(pending)
        self.seed = seed
        self.where = ""  # the content and part being converted: part of a made id

    def _made_id(self, kind: str, value: Json) -> str:
        pending = [c.id for c in self.pending]
        name = canonical_json([self.seed, self.where, kind, value, pending])
        return f"adk-{uuid.uuid5(_ID_SPACE, name).hex}"

    def call(self, call: Json) -> ToolCall:
        rest = dict(call)
        call_id = rest.pop("id", None)
        fields: Json = {"call": rest}
        if call_id is None:
            call_id, fields[_SYNTHETIC] = self._made_id("call", rest), True
        name, args = rest.pop("name", ""), rest.pop("args", None)
        fields["args"] = args is not None
        made = ToolCall(call_id, name, "{}" if args is None else compact_json(args),
                        extra=_ns(fields))
        self.pending.append(made)
        return made

    def answer(self, response: Json) -> ToolResult:
        rest = dict(response)
        call_id, name = rest.pop("id", None), rest.pop("name", "")
        value = rest.pop("response", None)
        fields: Json = {"response": rest, "value": value is not None}
        if call_id is None:
            match = next((c for c in self.pending if c.name == name), None)
            call_id = match.id if match else self._made_id("response", response)
            fields[_SYNTHETIC] = True
        self.pending = [c for c in self.pending if c.id != call_id]
        content = "{}" if value is None else compact_json(value)
        return ToolResult(call_id, content, name, extra=_ns(fields))


def _block(part: Json, kind: str) -> ContentBlock:
    rest = dict(part)
    if kind == "text":
        text = rest.pop("text")
        if rest.get("thought") is True:
            return ThinkingBlock(text, extra=_ns(rest))
        return TextBlock(text, extra=_ns(rest))
    blob = rest.get("inline_data") or {}
    if kind == "inline_data" and str(blob.get("mime_type", "")).startswith("image/") and set(
        blob) == {"data", "mime_type"}:
        rest.pop("inline_data")
        return ImageBlock(data=_standard_b64(blob["data"]), media_type=blob["mime_type"],
                          extra=_ns(rest | {"image": True}))
    return OpaqueBlock(canonical_json({_KEY: part}))


def _from_model(parts: list[Json], calls: _Calls, where: str) -> ConversationMessage:
    blocks: list[ContentBlock | ToolCall] = []
    for i, part in enumerate(parts):
        kind = _kind(part, f"{where}.parts[{i}]")
        if kind == "function_response":
            raise InvalidMessage(f"{where}.parts[{i}]: a function_response in a model content")
        if kind == "function_call":
            calls.where = f"{where}.parts[{i}]"
            rest = dict(part)
            call = calls.call(rest.pop("function_call"))
            if rest:  # e.g. the thought_signature a Gemini model gives its call
                call = ToolCall(call.id, call.name, call.arguments,
                                extra=_ns(_fields(call.extra) | {"part": rest}))
            blocks.append(call)
        else:
            blocks.append(_block(part, kind))
    extra = _ns({"start": True})
    if any(isinstance(b, ToolCall) for b in blocks):
        return AssistantToolCalls.from_blocks(blocks, extra=extra)
    return Chat(ChatMessage.from_blocks(
        "assistant", [b for b in blocks if not isinstance(b, ToolCall)], extra=extra))


def _from_user(parts: list[Json], calls: _Calls, where: str) -> list[ConversationMessage]:
    out: list[ConversationMessage] = []
    blocks: list[ContentBlock] = []
    results: list[ToolResult] = []

    def first() -> bool:
        return not out and not blocks and not results

    def flush_blocks() -> None:
        if blocks:
            start = {"start": True} if not out else {}
            out.append(Chat(ChatMessage.from_blocks("user", blocks, extra=_ns(start))))
            blocks.clear()

    def flush_results() -> None:
        if results:
            out.append(ToolResults(tuple(results)))
            results.clear()

    for i, part in enumerate(parts):
        kind = _kind(part, f"{where}.parts[{i}]")
        if kind == "function_call":
            raise InvalidMessage(f"{where}.parts[{i}]: a function_call in a user content")
        if kind == "function_response":
            flush_blocks()
            calls.where = f"{where}.parts[{i}]"
            rest = dict(part)
            result = calls.answer(rest.pop("function_response"))
            fields = _fields(result.extra) | ({"part": rest} if rest else {})
            if first():
                fields["start"] = True
            results.append(ToolResult(result.tool_call_id, result.content, result.tool_name,
                                      extra=_ns(fields)))
        else:
            flush_results()
            blocks.append(_block(part, kind))
    flush_blocks()
    flush_results()
    return out


def _convert(raw: Json, calls: _Calls, where: str) -> list[ConversationMessage]:
    role, parts = raw.get("role"), raw.get("parts") or []
    if set(raw) - {"role", "parts"}:
        raise InvalidMessage(f"{where}: content fields {sorted(set(raw) - {'role', 'parts'})} "
                             "have no turnledger form")
    if not parts:
        raise InvalidMessage(f"{where}: a content without parts has no turnledger form")
    if role == "model":
        return [_from_model(parts, calls, where)]
    if role == "user":
        return _from_user(parts, calls, where)
    raise InvalidMessage(f"{where}: a content of role {role!r} has no turnledger form "
                         "(use 'user' or 'model')")


def from_genai(
    contents: Iterable[types.Content], *, unanswered: Iterable[ToolCall] = (), seed: str = ""
) -> list[ConversationMessage]:
    """The turnledger messages of genai contents (module doc), each checked to come back.

    ``unanswered``: the calls recorded before these contents that still await a response
    (what an id-less ``function_response`` answers). ``seed``: what makes the ids of id-less
    calls differ from those of other conversions of the same contents (the callback passes
    the session and its next log position); the same arguments give the same ids. Raises
    `InvalidMessage` naming the content (and part) when one is not a ``Content``, holds a part
    or role with no turnledger form, or would not come back with the same JSON; nothing is
    converted with a loss.
    """
    return _from_genai(contents, unanswered, seed)[0]


_Built = tuple[tuple[Piece, ...], types.Content]
"""The pieces of a converted content and the genai content its check validated."""


def _from_genai(
    contents: Iterable[types.Content], unanswered: Iterable[ToolCall] = (), seed: str = ""
) -> tuple[list[ConversationMessage], list[_Built]]:
    """`from_genai`, with the contents its check validated (`BuiltOnce.seed`). Each content
    is checked as a window groups its messages (`grouped`): a window's provider messages
    carry these very items, so no round trip through provider messages is needed."""
    calls = _Calls(unanswered, seed)
    out: list[ConversationMessage] = []
    checked: list[_Built] = []
    for i, content in enumerate(contents):
        where = f"contents[{i}]"
        if not isinstance(content, types.Content):
            raise InvalidMessage(f"{where}: not a google.genai Content: "
                                 f"{type(content).__name__}")
        raw = _dump(content)
        converted = _convert(raw, calls, where)
        groups = grouped(converted, _starts)
        back = _validated([_content_json(group) for group in groups])
        if [_dump(c) for c in back] != [raw]:
            raise InvalidMessage(f"{where} would not come back with the same JSON; it was "
                                 "not recorded")
        checked.append((groups[0], back[0]))
        out.extend(converted)
    return out, checked


# --- turnledger -> genai ----------------------------------------------------------------------


def _part_of_block(block: ContentBlock | ToolCall) -> Json:
    match block:
        case ToolCall():
            fields = _fields(block.extra)
            call = dict(fields.get("call", {})) | {"name": block.name}
            if not fields.get(_SYNTHETIC):
                call["id"] = block.id
            if fields.get("args", True):
                call["args"] = json.loads(block.arguments)
            return dict(fields.get("part", {})) | {"function_call": call}
        case TextBlock(text=text):
            return _fields(block.extra) | {"text": text}
        case ThinkingBlock(thinking=thinking):
            return {"thought": True} | _fields(block.extra) | {"text": thinking}
        case ImageBlock():
            fields = _fields(block.extra)
            fields.pop("image", None)
            data = _urlsafe_b64(block.data) if block.data else ""
            return fields | {"inline_data": {"data": data, "mime_type": block.media_type}}
        case OpaqueBlock():
            return _fields(block.json)
    raise InvalidMessage(f"a {type(block).__name__} has no genai part form")


def _part_of_result(result: ToolResult) -> Json:
    fields = _fields(result.extra)
    response = dict(fields.get("response", {})) | {"name": result.tool_name}
    if not fields.get(_SYNTHETIC):
        response["id"] = result.tool_call_id
    if not fields:  # recorded by another runtime: its text as ADK wraps a tool's str result
        response["response"] = {"result": result.content}
    elif fields.get("value"):
        response["response"] = json.loads(result.content)
    return dict(fields.get("part", {})) | {"function_response": response}


def _user_parts(chat: ChatMessage) -> list[Json]:
    if chat.blocks:
        return [_part_of_block(b) for b in chat.blocks]
    return [{"text": chat.content}]


def _model_parts(message: ConversationMessage) -> list[Json]:
    if isinstance(message, AssistantToolCalls):
        blocks = list(message.blocks) or (
            ([TextBlock(message.text)] if message.text else []) + list(message.tool_calls))
        return [_part_of_block(b) for b in blocks]
    assert isinstance(message, Chat)  # the other messages of a window are user-side
    chat = message.message
    return [_part_of_block(b) for b in chat.blocks] or [{"text": chat.content}]


@functools.lru_cache(maxsize=4096)
def _starts(extra: str) -> bool:
    """Whether a user-side piece with this ``extra`` opens a user content of its own (it was
    the first of one); memoised: a window is grouped again at every model call."""
    return bool(_fields(extra).get("start"))


def _content_json(pieces: tuple[Piece, ...]) -> Json:
    """google-genai's JSON of the content built from ``pieces`` (`grouped`)."""
    first = pieces[0][0]
    if not user_side(first):
        return {"role": "model", "parts": _model_parts(first)}
    parts: list[Json] = []
    for message, i in pieces:
        if isinstance(message, ToolResults):
            parts.append(_part_of_result(message.results[i]))
        else:
            assert isinstance(message, Chat)
            parts += _user_parts(message.message)
    return {"role": "user", "parts": parts}


def _validated(out: list[Json]) -> list[types.Content]:
    try:
        return [types.Content.model_validate_json(json.dumps(raw)) for raw in out]
    except ValueError as error:
        raise InvalidMessage(f"the recorded messages do not make genai contents: "
                             f"{error}") from None


def to_genai(history: Iterable[ChatMessage | ConversationMessage]) -> list[types.Content]:
    """The genai contents of a turnledger window or history (the inverse of `from_genai`);
    the breadcrumb is a text part of the user content it opens; a system message (recorded by
    another runtime) is a user text part, since contents have no system role."""
    groups = grouped(conversation_of(list(history)), _starts)
    return _validated([_content_json(group) for group in groups])


# The setters of a pydantic model's instance slots: a copy sets them as pydantic's own
# ``__copy__`` does, without its checks or the attribute lookups of ``object.__setattr__``.
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def _copied(model: Any) -> Any:
    """A copy of a genai model with fields of its own (the values are the same objects); its
    extra and private fields are the model's (None: genai forbids extra fields and has no
    private ones). ~2.5x cheaper than `model_copy`, which does the same with more checks."""
    copied = object.__new__(type(model))
    _set_dict(copied, model.__dict__.copy())
    _set_fields_set(copied, model.__pydantic_fields_set__.copy())
    _set_extra(copied, model.__pydantic_extra__)
    _set_private(copied, model.__pydantic_private__)
    return copied


def _fresh_part(part: types.Part) -> types.Part:
    copied = _copied(part)
    fields = copied.__dict__
    for name in part.__pydantic_fields_set__:  # a validated part: its fields given, no others
        if isinstance(fields[name], BaseModel):  # function_call, inline_data, ...
            fields[name] = _copied(fields[name])
    return copied  # type: ignore[no-any-return]


def _fresh(content: types.Content) -> types.Content:
    """A copy of a cached content for a request. ADK and its model classes edit a request's
    contents in place: a content's parts (google_llm replaces them, lite_llm appends a fallback
    text to a user content's list), a part's fields (google_llm's ``part.inline_data = copy``)
    and a part's sub-models (remove_client_function_call_id sets a call's or a response's
    ``id`` to None, google_llm a blob's ``display_name``). So the content, each part and each
    sub-model of a part (function_call, function_response, inline_data, file_data, ...) are
    copied one level. Their values (a text, a call's args) are shared: ADK replaces them,
    never edits them in place, and shares them between its own request contents and session
    events. 0.6 ms for a 100-turn window, where a deep copy took 3.4 ms."""
    copied = _copied(content)
    if content.parts is not None:
        copied.__dict__["parts"] = [_fresh_part(p) for p in content.parts]
    return copied  # type: ignore[no-any-return]


# --- the callback -----------------------------------------------------------------------------


def _has_calls(content: types.Content) -> bool:
    """Whether a reply calls functions: then the next model call records it (`record_reply`)."""
    return any(part.function_call is not None for part in content.parts or [])


def _unanswered(window: Sequence[ChatMessage]) -> list[ToolCall]:
    """The calls of ``window`` no later result answers, oldest first; a result answers the
    newest earlier call of its id still unanswered (R36): an id answered once may be called
    again."""
    pending: list[ToolCall] = []
    for m in window:
        if isinstance(m.item, AssistantToolCalls):
            pending.extend(m.item.tool_calls)
        elif isinstance(m.item, ToolResult):
            answered = m.item.tool_call_id
            for k in range(len(pending) - 1, -1, -1):
                if pending[k].id == answered:
                    del pending[k]
                    break
    return pending


def _seed(session: Session) -> str:
    """What makes the ids of id-less calls converted for ``session`` now its own (`_Calls`)."""
    return f"{session.id}/{session.next_position}"


def _after_last(contents: Sequence[types.Content], target: Json) -> int | None:
    """The index after the last content whose JSON is ``target``; None when none is (`_aligned`
    of a record of one content)."""
    return _aligned(contents, [target], whole=False)


_ALIGN = 8
"""How many recorded contents `_aligned` lines up at most: enough to tell a question asked
again from the recorded one; a longer repeated run of contents resolves to its last place."""


def _aligned(
    contents: Sequence[types.Content], recorded: Sequence[Json], *, whole: bool
) -> int | None:
    """The index after the content that the newest recorded one is, where the most recorded
    contents (up to `_ALIGN`) line up with the contents before it, the last such place when
    several line up as well; None when no content is the newest recorded one. ``whole``:
    ``recorded`` is the whole record, and when it is the beginning of ``contents`` it ends
    there (a record of one question, asked again).

    By the newest recorded content alone, a question asked again after a turn that recorded
    no reply (an error, an empty reply) was taken for the recorded one, by a new callback
    object (a new process): ``[..., A, Q, Q]`` against a record ending ``A, Q``. Lined up,
    the record ends at the first ``Q``. Contents are dumped as they are compared, from the
    end (a long session's first call dumps a few)."""
    dumped: dict[int, Json] = {}

    def at(i: int) -> Json:
        if i not in dumped:
            dumped[i] = _dump(contents[i])
        return dumped[i]

    most = min(_ALIGN, len(recorded))
    if whole and len(contents) >= most and all(at(i) == recorded[i] for i in range(most)):
        return most  # the record is the beginning of these contents
    best: tuple[int, int] | None = None  # (recorded contents lined up, index after)
    for end in range(len(contents) - 1, -1, -1):
        if at(end) != recorded[-1]:
            continue
        n = 1
        while n < most and n <= end and at(end - n) == recorded[-1 - n]:
            n += 1
        if best is None or n > best[0]:
            best = (n, end + 1)
        if n == most:
            break  # no earlier place lines up more
    return None if best is None else best[1]


class _Seen(NamedTuple):
    """What one callback object saw recorded of an ADK session: how many of its contents, the
    JSON of the last of them, and the ADK invocation they were recorded in (None: unknown)."""

    number: int
    last: Json
    invocation: str | None


def _new_contents(
    contents: Sequence[types.Content], seen: _Seen | None, recorded: Sequence[types.Content],
    invocation: str | None = None, user_content: types.Content | None = None,
) -> int:
    """Where the contents not recorded yet begin.

    ``seen``: what this object saw recorded of this ADK session (`_Seen`). The ADK session's
    contents grow by appending, so the new ones follow the last one seen: at the same index, or
    (when ADK's contents changed before it) after its last occurrence. On this object's first
    call of a new ``invocation``, the invocation's ``user_content`` is new too: with
    ``include_contents="none"`` the contents restart at each invocation, so when the last turn
    ended with no reply recorded (an error, an empty reply) and the user asks the same again,
    the index check holds on the old turn. Without ``seen`` (the first call of this object for
    this ADK session, e.g. in a new process), ``recorded`` (the conversation's recorded
    contents) decides: they follow the content equal to the newest recorded one where the
    record lines up (`_aligned`: a question asked again after a turn with no reply recorded is
    new); else
    (another writer recorded last) the last content but the newest equal to a recorded one
    (the newest is this call's own: a question asked again is new); else all are new (a fresh
    ADK session continuing the conversation). Judging by the newest recorded content only
    would be wrong once this object has recorded: with several writers that content is
    another writer's, absent from these contents, and all of them would be recorded again."""
    if seen is None:
        return _new_after_recorded(contents, recorded)
    start = _new_after_seen(contents, seen)
    if (invocation is not None and user_content is not None
            and seen.invocation not in (None, invocation)):
        found = _after_last(contents, _dump(user_content))
        if found is not None:
            start = min(start, found - 1)
    return start


def _new_after_seen(contents: Sequence[types.Content], seen: _Seen) -> int:
    if 0 < seen.number <= len(contents) and _dump(contents[seen.number - 1]) == seen.last:
        return seen.number
    found = _after_last(contents, seen.last)
    return 0 if found is None else found


def _new_after_recorded(
    contents: Sequence[types.Content], recorded: Sequence[types.Content]
) -> int:
    if not recorded:
        return 0
    found = _aligned(contents, [_dump(c) for c in recorded[-_ALIGN:]],
                     whole=len(recorded) <= _ALIGN)
    if found is not None:
        return found
    known = {canonical_json(_dump(c)) for c in recorded}
    for i in range(len(contents) - 2, -1, -1):
        if canonical_json(_dump(contents[i])) in known:
            return i + 1
    return 0


class TurnledgerCallback(SessionsByName):
    """An ADK ``before_model_callback`` keeping the agent's history in turnledger (module doc).

    Sessions start with ``profile``, ``providers`` and ``route``. After a lost race with another
    writer, what is new is judged again on the newer state, for at most
    ``conflict_budget_seconds`` (default 30; 0: once), then `ConcurrencyConflict` (ADR-0065).
    ``summarizer`` (a `Summarizer` or a bare callable; issue 24): each window shows the turns
    a token-budget trim drops as its summary in place of the breadcrumb (`TurnsSummarized`;
    when it fails, the plain trim and `SummaryRefused`).
    """

    def __init__(
        self,
        store: Store,
        *,
        profile: RuntimeProfile | None = None,
        providers: Sequence[ProviderProfile] = (),
        route: Route | None = None,
        session_id: str | None = None,
        conflict_budget_seconds: float = CONFLICT_BUDGET_SECONDS,
        summarizer: Summarizer | SummaryFunction | None = None,
    ) -> None:
        super().__init__(store, profile=profile, providers=providers, route=route,
                         session_id=session_id, conflict_budget_seconds=conflict_budget_seconds,
                         summarizer=summarizer)
        # ADK session name -> what this object saw recorded of it: what tells its new contents
        # from those it recorded (`_new_contents`).
        self._seen: dict[str | None, _Seen] = {}
        # Each window content's genai Content, built once; handed out as copies (`_fresh`).
        self._built = BuiltOnce(
            _starts, lambda groups: _validated([_content_json(g) for g in groups]), _fresh)

    def session_for(self, name: str | None = None) -> Session:
        """The turnledger session of the ADK session ``name`` (or of ``session_id``)."""
        name = self.session_id or name
        if not name:
            raise TurnledgerError("TurnledgerCallback needs a session_id or an ADK session")
        return self._session_named(name)

    def contents(self, name: str | None = None) -> list[types.Content]:
        """The window now, as genai contents (the trims it takes are recorded)."""
        session = self.session_for(name)
        return self._genai_of(self._retrying(session, "contents", lambda: self._window(session)))

    def window(
        self, contents: Sequence[types.Content], name: str | None = None, *,
        invocation: str | None = None, user_content: types.Content | None = None,
    ) -> list[types.Content]:
        """Record what is new in ``contents`` (a conversation's contents so far, in order)
        and return the window the model should see. ``invocation``, ``user_content``: the ADK
        invocation's id and the user content that started it (`__call__` passes them)."""
        return self._genai_of(self._recorded_window(contents, name, invocation, user_content))

    def _recorded_window(
        self, contents: Sequence[types.Content], name: str | None,
        invocation: str | None = None, user_content: types.Content | None = None,
        decided: Decided | None = None,
    ) -> list[ChatMessage]:
        """`window`'s transaction: the new contents recorded, the window's provider messages
        (``decided``: `fit_then_build`)."""
        session = self.session_for(name)
        return self._retrying(
            session, "the model callback",
            lambda: self._record_new(session, contents, name, invocation, user_content,
                                     decided))

    def _record_new(
        self, session: Session, contents: Sequence[types.Content], name: str | None,
        invocation: str | None = None, user_content: types.Content | None = None,
        decided: Decided | None = None,
    ) -> list[ChatMessage]:
        # Judged on each attempt: after a conflict, another writer may have recorded them.
        seen = self._seen.get(name)
        recorded = to_genai(session.conversation_view()) if seen is None else []
        start = _new_contents(contents, seen, recorded, invocation, user_content)
        new, checked = _from_genai(contents[start:], _unanswered(session.chat_view()),
                                   _seed(session))
        self._built.seed(checked)  # the window's contents of them, validated by the check
        # The step's new contents and the window's trims: one transaction.
        window = self._window(session, new, decided)
        # Noted only once they landed: a conflict recorded nothing, and the retry judges
        # these contents again on the newer state.
        if invocation is None and seen is not None:
            invocation = seen.invocation
        if contents:
            self._seen[name] = _Seen(len(contents), _dump(contents[-1]), invocation)
        elif seen is not None:
            self._seen[name] = seen._replace(invocation=invocation)
        return window

    def _genai_of(self, window: Sequence[ChatMessage]) -> list[types.Content]:
        """`to_genai` of ``window``, each content built and validated once per object."""
        return self._built(window)

    def record_reply(self, content: types.Content, name: str | None = None) -> None:
        """Record a model reply as it arrives (so the log has the run's last answer).

        A reply with function calls is not recorded here: the next model call records it
        with its responses, in one transaction, so the log keeps each call next to its
        response even while other writers record into the conversation (and no restore
        sweeps a call whose response is still being computed)."""
        if _has_calls(content):
            return
        session = self.session_for(name)

        def write() -> None:
            new, checked = _from_genai([content], _unanswered(session.chat_view()),
                                       _seed(session))
            session.extend(new)
            self._built.seed(checked)

        self._retrying(session, "the reply callback", write)
        seen = self._seen.get(name)  # ADK appends the reply to this session's contents
        self._seen[name] = _Seen((seen.number if seen else 0) + 1, _dump(content),
                                 seen.invocation if seen else None)

    async def __call__(
        self, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Replace ``llm_request.contents`` with the window; None: ADK calls the model.

        The window's contents are built in the event loop's thread, where ADK reads them,
        while the recording's commit waits on the database, and only the recording runs in
        a worker (`fit_then_build`, as `TurnledgerHistory` does in pydantic-ai)."""
        name = callback_context.session.id
        llm_request.contents = await fit_then_build(
            functools.partial(self._recorded_window, list(llm_request.contents), name,
                              callback_context.invocation_id, callback_context.user_content),
            self._genai_of)
        return None

    async def after_model(
        self, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """An ADK ``after_model_callback``: record the reply (a streamed chunk waits for its
        whole reply); None: ADK keeps the reply as it is."""
        content = llm_response.content
        # Decided here, not in the worker thread: a reply with calls (most replies of a tool
        # loop) records nothing, and the hop alone cost 0.35-1.2 ms.
        if (content is not None and content.parts and not llm_response.partial
                and not _has_calls(content)):
            await off_loop(self.record_reply, content, callback_context.session.id)
        return None
