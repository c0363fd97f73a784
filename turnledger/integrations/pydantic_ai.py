"""pydantic-ai agents on turnledger sessions (issue 22).

Needs ``pip install 'turnledger[pydantic-ai]'`` (pydantic-ai-slim).

- **Conversions** (`from_pydantic_ai`, `to_pydantic_ai`): pydantic-ai's ``ModelRequest`` /
  ``ModelResponse`` ⇄ turnledger messages, losslessly (ADR-0081). A request becomes one
  message per run of parts (a system prompt, a user prompt — its multimodal content as typed
  blocks, images as `ImageBlock` — the tool returns as one `ToolResults`, a retry feedback as a
  ``[Tool results]`` carrier of the same turn, R2); a response becomes one assistant message
  (text, thinking and opaque parts as blocks, tool calls as `ToolCall`). Every field turnledger
  does not interpret is kept beside it under ``"pydantic_ai"``. "Equal" is pydantic-ai's own
  JSON form (``ModelMessagesTypeAdapter``): a message that would not come back with the same
  JSON, or a part kind with no turnledger form, is refused by name (`InvalidMessage`), never
  stored changed or dropped.
- **History**: `TurnledgerHistory`, a pydantic-ai capability
  (``Agent(model, capabilities=[history])``). Before every model request of a run — the first
  and each one between tool steps (R24) — it records what the run added since the last request
  (one transaction), decides and records the trims a request would make (turn limit, token
  budget, orphan sweep: `Session.fit_window`) and sends the model that window: whole turns,
  the breadcrumb when older turns were cut, no tool result without its call; it ends with
  the run's current request (what other runs of the conversation recorded after it waits for
  the run's next request), as pydantic-ai requires. The run's own
  message list is left whole (only the request's copy is replaced), and when the run ends its
  last messages (the final answer) are recorded too. ``history.messages()`` is the window as
  pydantic-ai messages: the ``message_history`` of the next run, in this process or another.

A run's messages are told apart from the history given to it by where they stand: from the
first message stamped with the run's ``run_id`` on (`_of_run`); what was passed as
``message_history`` is not recorded again (record an outside history once with
`TurnledgerHistory.record`). Store calls run in a worker thread (`off_loop`), the window's
messages built in the event loop's thread while the step's commit waits (ADR-0093); a write that
loses a race to another writer is decided again on the newer state (`retrying`, ADR-0065).
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

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
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.messages import (
    TOOL_RESULTS_PREFIX,
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
    conflict_budget,
    conversation_of,
    fit_then_build,
    fit_window,
    grouped,
    off_loop,
    open_session,
    retrying,
    user_side,
)
from turnledger.store.session import Session, Store
from turnledger.store.summaries import Summarizer, SummaryFunction, as_summarizer

try:
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
    )
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import RunContext
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "turnledger.integrations.pydantic_ai needs pydantic-ai: "
        "pip install 'turnledger[pydantic-ai]'"
    ) from error

__all__ = ["TurnledgerHistory", "from_pydantic_ai", "to_pydantic_ai"]

Json = dict[str, Any]
R = TypeVar("R")
_KEY = "pydantic_ai"  # the fields turnledger does not interpret, beside those it does
_CARRIER = TOOL_RESULTS_PREFIX + "\n"  # a retry feedback continues its turn (R2)
_EPOCH = "1970-01-01T00:00:00Z"  # the breadcrumb's time when its request has none

# Response parts with no client-side counterpart: kept whole, as opaque blocks (a server tool
# call carries its own return; a file, a compaction or a speech part is content).
_OPAQUE_RESPONSE_KINDS = frozenset({
    "builtin-tool-call", "builtin-tool-return", "compaction", "file", "speech",
})
# Items of a user prompt's content kept whole, as opaque blocks.
_OPAQUE_USER_ITEMS = frozenset({
    "audio-url", "video-url", "document-url", "binary", "uploaded-file", "cache-point",
    "structured-content",
})


def _dump(messages: Sequence[ModelMessage], *, compact: bool = False) -> list[Json]:
    """pydantic-ai's own JSON form of ``messages`` (``compact``: without null fields)."""
    dumped: list[Json] = ModelMessagesTypeAdapter.dump_python(
        list(messages), mode="json", exclude_none=compact
    )
    return dumped


def _ns(fields: Json) -> str:
    """The ``extra`` text holding ``fields`` under this integration's key ("" for none)."""
    return canonical_json({_KEY: fields}) if fields else ""


def _fields(extra: str) -> Json:
    value = extra_fields(extra).get(_KEY)
    return value if isinstance(value, dict) else {}


def _json_text(value: Any) -> tuple[str, bool]:
    """(text, was it JSON): a str as it is, any other value as its compact JSON."""
    return (value, False) if isinstance(value, str) else (compact_json(value), True)


# --- pydantic-ai -> turnledger ----------------------------------------------------------------


def _user_block(item: Any, where: str) -> ContentBlock:
    if isinstance(item, str):
        return TextBlock(item)
    kind = item.get("kind") if isinstance(item, dict) else None
    rest = dict(item) if isinstance(item, dict) else {}
    if kind == "text-content":
        return TextBlock(rest.pop("content"), extra=_ns(rest))
    if kind == "image-url":
        return ImageBlock(rest.pop("url"), extra=_ns(rest))
    if kind == "binary" and str(rest.get("media_type", "")).startswith("image/"):
        data, media_type = rest.pop("data"), rest.pop("media_type")
        return ImageBlock(data=data, media_type=media_type, extra=_ns(rest))
    if kind in _OPAQUE_USER_ITEMS:
        return OpaqueBlock(canonical_json({_KEY: item}))
    raise InvalidMessage(f"{where}: user content of kind {kind!r} has no turnledger form; "
                         "it was not recorded")


def _request_piece(part: Json, where: str) -> ConversationMessage | ToolResult:
    kind = part.pop("part_kind")
    if kind == "system-prompt":
        return Chat(ChatMessage("system", part.pop("content"), extra=_ns(part)))
    if kind == "user-prompt":
        content = part.pop("content")
        if isinstance(content, str):
            return Chat(ChatMessage("user", content, extra=_ns(part)))
        blocks = [_user_block(item, f"{where}.content[{i}]") for i, item in enumerate(content)]
        return Chat(ChatMessage.from_blocks("user", blocks, extra=_ns(part)))
    if kind == "tool-return":
        text, was_json = _json_text(part.pop("content", None))
        call_id, name = part.pop("tool_call_id"), part.pop("tool_name")
        return ToolResult(call_id, text, name, extra=_ns(part | {"json_content": was_json}))
    if kind == "retry-feedback":
        text, was_json = _json_text(part.pop("content"))
        fields = part | {"json_content": was_json}
        return Chat(ChatMessage("user", _CARRIER + text, extra=_ns(fields)))
    raise InvalidMessage(f"{where}: a request part of kind {kind!r} has no turnledger form; "
                         "it was not recorded")


def _with_header(piece: ConversationMessage | ToolResult, header: Json) -> Any:
    """``piece`` carrying its request's own fields: the first piece of each request does."""
    if isinstance(piece, ToolResult):
        fields = _fields(piece.extra) | {"request": header}
        return ToolResult(piece.tool_call_id, piece.content, piece.tool_name,
                          extra=_ns(fields))
    assert isinstance(piece, Chat)  # a request's pieces are chats and tool results
    message = piece.message
    return Chat(ChatMessage(message.role, message.content, blocks=message.blocks,
                            extra=_ns(_fields(message.extra) | {"request": header}),
                            envelope=message.envelope))


def _from_request(raw: Json, where: str) -> list[ConversationMessage]:
    parts = raw.pop("parts")
    if not parts:
        raise InvalidMessage(f"{where}: a ModelRequest without parts has no turnledger form")
    out: list[ConversationMessage] = []
    results: list[ToolResult] = []
    for i, part in enumerate(parts):
        piece = _request_piece(dict(part), f"{where}.parts[{i}]")
        if i == 0:
            piece = _with_header(piece, raw)
        if isinstance(piece, ToolResult):
            results.append(piece)
            continue
        if results:
            out.append(ToolResults(tuple(results)))
            results = []
        out.append(piece)
    if results:
        out.append(ToolResults(tuple(results)))
    return out


def _response_block(part: Json, where: str) -> ContentBlock | ToolCall:
    kind = part.pop("part_kind")
    if kind == "text":
        return TextBlock(part.pop("content"), extra=_ns(part))
    if kind == "thinking":
        signature = part.pop("signature", None)
        if signature == "":
            part["signature"] = ""  # an explicit empty signature stays explicit
        return ThinkingBlock(part.pop("content"), signature or "", extra=_ns(part))
    if kind == "tool-call":
        args = part.pop("args", None)
        form = "none" if args is None else "text" if isinstance(args, str) else "object"
        arguments = "{}" if args is None else _json_text(args)[0]
        return ToolCall(part.pop("tool_call_id"), part.pop("tool_name"), arguments,
                        extra=_ns(part | {"args": form}))
    if kind in _OPAQUE_RESPONSE_KINDS:
        return OpaqueBlock(canonical_json({_KEY: part | {"part_kind": kind}}))
    raise InvalidMessage(f"{where}: a response part of kind {kind!r} has no turnledger form; "
                         "it was not recorded")


def _from_response(raw: Json, where: str) -> ConversationMessage:
    blocks = [_response_block(dict(p), f"{where}.parts[{i}]")
              for i, p in enumerate(raw.pop("parts"))]
    extra = _ns({"response": raw})
    if any(isinstance(b, ToolCall) for b in blocks):
        return AssistantToolCalls.from_blocks(blocks, extra=extra)
    content = [b for b in blocks if not isinstance(b, ToolCall)]
    return Chat(ChatMessage.from_blocks("assistant", content, extra=extra))


def _convert(raw: Json, where: str) -> list[ConversationMessage]:
    raw = dict(raw)
    kind = raw.get("kind")
    if kind == "request":
        return _from_request(raw, where)
    if kind == "response":
        return [_from_response(raw, where)]
    raise InvalidMessage(f"{where}: not a pydantic-ai ModelRequest or ModelResponse")


def from_pydantic_ai(messages: Iterable[ModelMessage]) -> list[ConversationMessage]:
    """The turnledger messages of pydantic-ai messages (module doc), each checked to come back.

    "The same" is pydantic-ai's own save and load: a deprecated ``RetryPromptPart`` comes back
    as the part pydantic-ai loads it as. Raises `InvalidMessage` naming the message (and part)
    when one is not a pydantic-ai message, holds a part kind turnledger has no form for, or
    would not come back with the same JSON; nothing is converted with a loss.
    """
    return _from_pydantic_ai(messages)[0]


_Built = tuple[tuple[Piece, ...], ModelMessage]
"""The pieces of a converted message and the pydantic-ai message its check validated."""


def _from_pydantic_ai(
    messages: Iterable[ModelMessage],
) -> tuple[list[ConversationMessage], list[_Built]]:
    """`from_pydantic_ai`, with the messages its check validated (`BuiltOnce.seed`)."""
    messages = list(messages)
    if all(isinstance(m, ModelRequest | ModelResponse) for m in messages):
        try:
            # The messages as given, when they come back as they are (`_converted`); else as
            # pydantic-ai itself saves and loads them (a legacy part loads as its successor).
            return _converted(messages)
        except Exception:  # said below, of the messages as pydantic-ai loads them
            pass
    try:
        loaded = ModelMessagesTypeAdapter.validate_json(
            ModelMessagesTypeAdapter.dump_json(messages))
    except Exception as error:  # pydantic's errors name the bad field
        raise InvalidMessage(f"not pydantic-ai messages: {error}") from None
    return _converted(loaded)


def _converted(messages: list[ModelMessage]) -> tuple[list[ConversationMessage], list[_Built]]:
    """`_from_pydantic_ai` of ``messages`` as they are: each message converted from its
    compact JSON (no null fields) and checked to come back with its full JSON, as
    `to_pydantic_ai` would build it (`_message_json`, validated by pydantic-ai). When the
    built JSON is the compact JSON itself, that is two plain checks: the two are equal (no
    validation), and pydantic-ai loads the compact JSON back to the full JSON (one validation
    of the messages that left null fields out; none when they left none out)."""
    try:
        compact, full = _dump(messages, compact=True), _dump(messages)
    except Exception as error:  # pydantic's errors name the bad field
        raise InvalidMessage(f"not pydantic-ai messages: {error}") from None
    out: list[ConversationMessage] = []
    checked: list[_Built] = []
    same: dict[int, tuple[Piece, ...]] = {}  # the messages whose window JSON is their compact
    for i, raw in enumerate(compact):
        converted = _convert(raw, f"messages[{i}]")
        # Grouped as a window groups them: a window's provider messages carry these very
        # items (`BuiltOnce`), so no round trip through provider messages is needed.
        groups = grouped(converted, _opens_request)
        built = [_message_json(group) for group in groups]
        if built == [raw]:
            same[i] = groups[0]
        else:  # checked whole (a null kept, say)
            back = _validated(built)
            if _dump(back) != [full[i]]:
                raise InvalidMessage(f"messages[{i}] ({raw.get('kind')}) would not come back "
                                     "with the same JSON; it was not recorded")
            checked.append((groups[0], back[0]))
        out.extend(converted)
    dropped = [i for i in same if compact[i] != full[i]]  # their null fields left out
    if dropped:
        loaded = _validated([compact[i] for i in dropped])
        for i, message, dumped in zip(dropped, loaded, _dump(loaded), strict=True):
            if dumped != full[i]:
                raise InvalidMessage(f"messages[{i}] ({compact[i].get('kind')}) would not come "
                                     "back with the same JSON; it was not recorded")
            checked.append((same[i], message))
    return out, checked


# --- turnledger -> pydantic-ai ----------------------------------------------------------------


def _user_item(block: ContentBlock) -> Any:
    rest = _fields(block.extra) if not isinstance(block, OpaqueBlock) else {}
    match block:
        case TextBlock(text=text):
            return rest | {"content": text} if rest else text
        case ImageBlock(url=url) if url:
            return rest | {"url": url}
        case ImageBlock():
            return rest | {"data": block.data, "media_type": block.media_type}
        case OpaqueBlock():
            return _fields(block.json)
    raise InvalidMessage(f"a {type(block).__name__} has no pydantic-ai user content form")


def _request_part(message: ChatMessage) -> Json:
    fields = _fields(message.extra)
    fields.pop("request", None)
    if message.synthetic or (message.role == "user" and not fields):  # breadcrumb, plain user
        return {"part_kind": "user-prompt", "content": message.content}
    if message.role == "system":
        return fields | {"part_kind": "system-prompt", "content": message.content}
    if message.content.startswith(_CARRIER) and "json_content" in fields:
        text = message.content[len(_CARRIER):]
        feedback = json.loads(text) if fields.pop("json_content") else text
        return fields | {"part_kind": "retry-feedback", "content": feedback}
    content: Any = ([_user_item(b) for b in message.blocks] if message.blocks
                    else message.content)
    return fields | {"part_kind": "user-prompt", "content": content}


def _return_part(result: ToolResult) -> Json:
    fields = _fields(result.extra)
    fields.pop("request", None)
    was_json = fields.pop("json_content", False)
    content = json.loads(result.content) if was_json else result.content
    return fields | {"part_kind": "tool-return", "tool_call_id": result.tool_call_id,
                     "tool_name": result.tool_name, "content": content}


def _response_part(block: ContentBlock | ToolCall) -> Json:
    match block:
        case ToolCall():
            fields = _fields(block.extra)
            form = fields.pop("args", "text")
            args = (None if form == "none" else json.loads(block.arguments) if form == "object"
                    else block.arguments)
            return fields | {"part_kind": "tool-call", "tool_call_id": block.id,
                             "tool_name": block.name, "args": args}
        case TextBlock(text=text):
            return _fields(block.extra) | {"part_kind": "text", "content": text}
        case ThinkingBlock(thinking=thinking, signature=signature):
            part = {"part_kind": "thinking", "content": thinking}
            if signature:
                part["signature"] = signature
            return part | _fields(block.extra)
        case OpaqueBlock():
            return _fields(block.json)
    raise InvalidMessage(f"a {type(block).__name__} has no pydantic-ai response part form")


def _response(message: ConversationMessage) -> Json:
    blocks: list[ContentBlock | ToolCall]
    if isinstance(message, AssistantToolCalls):
        extra, blocks = message.extra, list(message.blocks)
        if not blocks:  # recorded by another runtime: its text, then its calls
            blocks = [TextBlock(message.text)] if message.text else []
            blocks += message.tool_calls
    else:
        assert isinstance(message, Chat)  # the other messages of a window are requests'
        extra, blocks = message.message.extra, list(message.message.blocks)
        if not blocks and message.message.content:  # recorded by another runtime: its text
            blocks = [TextBlock(message.message.content)]
    header: Json = _fields(extra).get("response", {})
    return header | {"kind": "response", "parts": [_response_part(b) for b in blocks]}


@functools.lru_cache(maxsize=4096)
def _opens_request(extra: str) -> bool:
    """Whether a request part with this ``extra`` starts a request of its own (it carries
    that request's fields); memoised: a window is grouped again at every model call."""
    return _fields(extra).get("request") is not None


def _message_json(pieces: tuple[Piece, ...]) -> Json:
    """pydantic-ai's JSON of the message built from ``pieces`` (`grouped`); a request takes
    the fields its first piece carries (none for the breadcrumb)."""
    first, index = pieces[0]
    if not user_side(first):
        return _response(first)
    if isinstance(first, ToolResults):
        extra = first.results[index].extra
    else:
        assert isinstance(first, Chat)
        extra = "" if first.message.synthetic else first.message.extra
    request: Json = (_fields(extra).get("request") or {}) | {"kind": "request", "parts": []}
    for message, i in pieces:
        if isinstance(message, ToolResults):
            request["parts"].append(_return_part(message.results[i]))
            continue
        assert isinstance(message, Chat)
        part = _request_part(message.message)
        if message.message.synthetic:  # the same window gives the same JSON (E12)
            part["timestamp"] = request.get("timestamp") or _EPOCH
        request["parts"].append(part)
    return request


def _validated(out: list[Json]) -> list[ModelMessage]:
    try:
        return ModelMessagesTypeAdapter.validate_json(json.dumps(out))
    except ValueError as error:
        raise InvalidMessage(f"the recorded messages do not make pydantic-ai messages: "
                             f"{error}") from None


def to_pydantic_ai(history: Iterable[ChatMessage | ConversationMessage]) -> list[ModelMessage]:
    """The pydantic-ai messages of a turnledger window or history (the inverse of
    `from_pydantic_ai`); the breadcrumb is a user prompt of the request it opens. Messages
    another runtime recorded come back as the plain parts of their role."""
    groups = grouped(conversation_of(list(history)), _opens_request)
    return _validated([_message_json(group) for group in groups])


def _fresh(message: ModelMessage) -> ModelMessage:
    """A copy of a cached message with a parts list of its own: pydantic-ai edits a request of
    the history it is given by replacing its fields (``parts``, ``instructions``), never a part
    in place. A copy of the instance's fields, ~3x cheaper than `copy.copy`."""
    copied: ModelMessage = object.__new__(type(message))
    copied.__dict__.update(message.__dict__)
    copied.parts = list(message.parts)  # type: ignore[assignment]
    return copied


# --- the window of one run -------------------------------------------------------------------


def _parts_json(message: ModelMessage) -> list[Json]:
    return _dump([message])[0]["parts"]  # type: ignore[no-any-return]


def _ends_with(items: Sequence[Any], tail: Sequence[Any]) -> bool:
    return list(items[len(items) - len(tail):]) == list(tail)


def _of_run(messages: Sequence[ModelMessage], run_id: str) -> list[ModelMessage]:
    """The messages of run ``run_id`` in its message list: from its first message stamped with
    its id on. The history it was given stands before them; every message after is the run's,
    whatever its own ``run_id`` says: pydantic-ai keeps an id a model set on its reply, and a
    reply object a model reuses keeps the id of the run that first stamped it."""
    for i, message in enumerate(messages):
        if message.run_id == run_id:
            return list(messages[i:])
    return []


def _ending_with_run(
    window: list[ModelMessage], messages: Sequence[ModelMessage], run_id: str
) -> list[ModelMessage]:
    """``window`` (the conversation's) as run ``run_id`` may send it: ending with the run's
    current request, the last of ``messages``.

    Other writers of the conversation may have recorded after that request (pydantic-ai
    refuses a history ending with a reply; one ending with another run's request would be
    answered in this run): those newer messages are left out of this request, as if they came
    after it. When newer turns have trimmed the run's own turn away, the run's messages so far
    follow the window (its turn whole: each call with its result)."""
    if not messages or not isinstance(messages[-1], ModelRequest):
        return window
    current = messages[-1].parts
    for i in range(len(window) - 1, -1, -1):
        message = window[i]
        if not isinstance(message, ModelRequest) or message.run_id != run_id:
            continue
        # A breadcrumb may open the request: a suffix. Equal parts first (no dump): a
        # request rebuilt from the record is most often equal to the run's own.
        if _ends_with(message.parts, current) or _ends_with(
                _parts_json(message), _parts_json(messages[-1])):
            return window[: i + 1]
    return [m for m in window if m.run_id != run_id] + _of_run(messages, run_id)


# --- the capability ---------------------------------------------------------------------------


class TurnledgerHistory(AbstractCapability[Any]):
    """A pydantic-ai capability that keeps an agent's history in a turnledger session (module
    doc). ``TurnledgerHistory.open(store, "user-42")`` names the conversation (restored, or
    started with ``profile``/``providers``/``route``); ``TurnledgerHistory(session)`` takes one.

    A write that loses a race to another writer of the session is decided again on the newer
    state, for at most ``conflict_budget_seconds`` (default 30; 0: once), then raises
    `ConcurrencyConflict` saying so; nothing of a call that raised is recorded (ADR-0065).

    ``summarizer`` (a `Summarizer` or a bare callable; issue 24): every window (before each
    model request, and `messages`) shows the turns a token-budget trim drops as its summary
    in place of the breadcrumb (`TurnsSummarized`; when it fails, the plain trim and
    `SummaryRefused`). None: the session's own `Session.summarizer`.
    """

    def __init__(
        self,
        session: Session,
        *,
        conflict_budget_seconds: float = CONFLICT_BUDGET_SECONDS,
        summarizer: Summarizer | SummaryFunction | None = None,
    ) -> None:
        self.session = session
        self._budget = conflict_budget(conflict_budget_seconds)
        self.summarizer = as_summarizer(summarizer)
        self._recorded: dict[str, int] = {}  # run id -> how many of its messages are recorded
        self._lock = threading.Lock()
        # Each window message's pydantic-ai message, built once; handed out as copies.
        self._built = BuiltOnce(
            _opens_request, lambda groups: _validated([_message_json(g) for g in groups]),
            _fresh)

    @classmethod
    def open(
        cls,
        store: Store,
        session_id: str,
        *,
        profile: RuntimeProfile | None = None,
        providers: Sequence[ProviderProfile] = (),
        route: Route | None = None,
        conflict_budget_seconds: float = CONFLICT_BUDGET_SECONDS,
        summarizer: Summarizer | SummaryFunction | None = None,
    ) -> TurnledgerHistory:
        """The history of the conversation ``session_id`` (`open_session`: I/O)."""
        summarizer = as_summarizer(summarizer)  # refused before any I/O
        session = open_session(store, session_id, profile=profile, providers=providers,
                               route=route)
        return cls(session, conflict_budget_seconds=conflict_budget_seconds,
                   summarizer=summarizer)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a session: not buildable from an agent spec

    # -- blocking API --

    def messages(self) -> list[ModelMessage]:
        """The window now, as pydantic-ai messages (the trims it takes are recorded): the
        ``message_history`` of the next run."""
        window = self._retrying(
            "messages", lambda: fit_window(self.session, self.summarizer))
        return self._to_pydantic_ai(window)

    def record(self, messages: Sequence[ModelMessage]) -> None:
        """Record ``messages`` in one transaction (`InvalidMessage`: none of them)."""
        converted = from_pydantic_ai(messages)  # once: a retry only records again
        if converted:
            self._retrying("record", lambda: self.session.extend(converted))

    def window(self, messages: Sequence[ModelMessage], run_id: str) -> list[ModelMessage]:
        """Record the messages of run ``run_id`` not recorded yet and return the window, in
        one transaction, ending with the run's current request (`_ending_with_run`)."""
        with self._lock:
            converted, count = self._unrecorded(messages, run_id)
            window = self._fit(converted)
            self._recorded[run_id] = count
        return _ending_with_run(self._to_pydantic_ai(window), messages, run_id)

    def _unrecorded(
        self, messages: Sequence[ModelMessage], run_id: str
    ) -> tuple[list[ConversationMessage], int]:
        """The messages of run ``run_id`` in ``messages`` not recorded yet, converted once (a
        retry only records again), and how many of its messages there are with them. What
        the conversion's check validated is kept for the window (`BuiltOnce.seed`)."""
        ours = _of_run(messages, run_id)
        converted, checked = _from_pydantic_ai(ours[self._recorded.get(run_id, 0):])
        self._built.seed(checked)
        return converted, len(ours)

    def _fit(
        self, converted: Sequence[ConversationMessage], decided: Decided | None = None
    ) -> list[ChatMessage]:
        """Record ``converted`` and the trims of the window, in one transaction; the window
        (``decided``: as `Session.fit_window` takes it)."""
        return self._retrying(
            "messages", lambda: fit_window(self.session, self.summarizer, converted, decided))

    def _to_pydantic_ai(self, window: Sequence[ChatMessage]) -> list[ModelMessage]:
        """`to_pydantic_ai` of ``window``, each message built and validated once."""
        return self._built(window)

    def _record_run(self, messages: Sequence[ModelMessage], run_id: str) -> None:
        with self._lock:
            done = self._recorded.get(run_id, 0)
            ours = _of_run(messages, run_id)
            self.record(ours[done:])
            self._recorded[run_id] = len(ours)

    def _retrying(self, what: str, write: Callable[[], R]) -> R:
        return retrying(write, f"{what} of session {self.session.id}", self._budget)

    # -- the pydantic-ai hooks --

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Record the run's new messages and send the model the window (the run keeps its
        own list whole). What runs in a worker thread is the transaction (`_fit`), not the
        conversions: pydantic-ai's messages are made and read in the event loop's thread,
        and converting them there was ~0.8 ms a call cheaper than in a worker, whose
        processor core had not touched them (`benchmarks.agent_step`); the window's messages
        are built while the transaction waits on the database (`fit_then_build`). A run's
        model requests come one after another, so its count of recorded messages needs no
        lock."""
        run_id, messages = ctx.run_id or "", request_context.messages
        converted, count = self._unrecorded(messages, run_id)
        window = await fit_then_build(functools.partial(self._fit, converted),
                                      self._to_pydantic_ai)
        self._recorded[run_id] = count
        request_context.messages = _ending_with_run(window, messages, run_id)
        return request_context

    async def after_run(
        self, ctx: RunContext[Any], *, result: AgentRunResult[Any]
    ) -> AgentRunResult[Any]:
        """Record what the run added after its last model request (its final answer)."""
        await off_loop(self._record_run, result.all_messages(), ctx.run_id or "")
        with self._lock:
            self._recorded.pop(ctx.run_id or "", None)
        return result
