"""Coding agents' own transcripts as sessions (issue 36): Claude Code and Codex CLI.

These files are not one conversation per line: each line is one event of the agent's session
(a message, a piece of one, the agent's own bookkeeping), and one file holds a session (Claude
Code's sub-agent runs beside it). `read_agent_transcript` turns a whole file into the sessions it
holds, each the provider messages the agent sent its model, in file order, with what was not
recorded said. The mapping:

**Claude Code** (``~/.claude/projects/<project>/<session>.jsonl``; `CLAUDE_CODE`): the
``user`` and ``assistant`` records carry Anthropic messages (``message.role`` and
``message.content``); the records of one assistant message (Claude Code writes one per content
block, sharing ``message.id``) are joined into one message. Records with ``isSidechain`` are a
sub-agent's run: each sub-agent (``agentId``, else all the file's sidechain records) is a
session of its own. A compaction's summary (``isCompactSummary``) is the user message the agent
gave its model instead of the turns before; it is recorded as that message, and said. Not
recorded, and counted by kind: the other record types (``summary``, ``system``,
``file-history-snapshot``, ``progress``...), the synthetic error messages Claude Code shows but
never sent (``isApiErrorMessage``), and each record's metadata (uuids, timestamps, usage, cwd).

**Codex CLI** (``~/.codex/sessions/.../rollout-*.jsonl``; `CODEX`): the ``response_item``
records' payloads are the Responses items the agent sent and received, read as the
``responses`` format; the session's ``instructions`` (``session_meta``) are a system message
first; a ``compacted`` record's summary is a user message, as the agent gives it to its model.
Not recorded, and counted: ``event_msg`` and ``turn_context`` records (the agent's UI events
and per-turn settings) and Codex's own ``ghost_snapshot`` items (undo points, never sent).

**Gemini CLI** (``~/.gemini/tmp/<project>/chats/session-*.json``; `GEMINI_CLI`): one JSON
document (``sessionId``, ``messages``), not JSONL. A ``user`` message is a user content; a
``gemini`` message is a model content (its text, then a ``function_call`` per ``toolCalls``
entry) followed by a user content of the calls' results (each result's ``functionResponse``
parts, or its text as ``{"output": ...}``), read as the ``gemini`` format. Not recorded, and
counted: ``info``, ``error`` and ``warning`` messages (the CLI's own), thought summaries, token
counts, and a call with no result (cancelled: it stays unanswered, and a restore sweeps it).

A rewound or retried branch stays in the record as it happened (file order). Nothing here does
I/O.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, Final

from turnledger.domain.errors import InvalidMessage
from turnledger.domain.formats.genai import from_genai_json, snake_case_contents
from turnledger.domain.messages import Chat, ChatMessage, ConversationMessage
from turnledger.domain.providers import TranscriptError, from_anthropic, from_openai_responses
from turnledger.replay.formats import CLAUDE_CODE, CODEX, GEMINI_CLI

__all__ = ["detect_agent_format", "read_agent_transcript"]


_CLAUDE_TYPES: Final = frozenset({"user", "assistant", "system", "summary",
                                  "file-history-snapshot", "queue-operation", "progress"})
_CODEX_TYPES: Final = frozenset({"session_meta", "response_item", "event_msg", "turn_context",
                                 "compacted"})
_CODEX_UNSENT: Final = frozenset({"ghost_snapshot"})
_UNANSWERED: Final = "calls with no result"


class AgentSession:
    """One session of a transcript file: its ``history``, the number of the ``line`` it starts
    at, its id in the agent (``source_id``), the records it was read from (``raw``: what makes
    an import of the same session the same session) and ``notes`` (what was not recorded)."""

    __slots__ = ("history", "line", "notes", "raw", "source_id")

    def __init__(self, line: int, source_id: str, raw: list[Any],
                 history: list[ConversationMessage], notes: list[str]) -> None:
        self.line, self.source_id, self.raw = line, source_id, raw
        self.history, self.notes = history, notes


def detect_agent_format(value: object) -> str | None:
    """The agent transcript format a file's first record (or whole document) is in, or None
    (a conversation per line, `turnledger.replay.transcripts`)."""
    if not isinstance(value, dict):
        return None
    if "sessionId" in value and "projectHash" in value and isinstance(value.get("messages"),
                                                                       list):
        return GEMINI_CLI
    kind = value.get("type")
    if kind in _CODEX_TYPES and "payload" in value:
        return CODEX
    if kind in _CLAUDE_TYPES and ("sessionId" in value or "leafUuid" in value
                                  or "messageId" in value):
        return CLAUDE_CODE
    return None


def read_agent_transcript(
    lines: Iterable[str | TranscriptError], fmt: str
) -> Iterator[AgentSession | TranscriptError]:
    """The sessions of a whole transcript file in ``fmt`` (`AGENT_FORMATS`); a line that is not
    a JSON object, or a session whose messages have no turnledger form, yields its error (the
    other sessions are still read)."""
    if fmt == GEMINI_CLI:
        yield from _gemini_cli(lines)
        return
    records: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(lines, start=1):
        if isinstance(line, TranscriptError):
            yield line
            continue
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            yield TranscriptError(f"invalid JSON: {exc}", line=number)
            continue
        if not isinstance(value, dict):
            yield TranscriptError(f"a {fmt} record is a JSON object, got "
                                  f"{type(value).__name__}", line=number)
            continue
        records.append((number, value))
    if fmt == CLAUDE_CODE:
        yield from _claude_code(records)
    elif fmt == CODEX:
        yield from _codex(records)
    else:
        raise ValueError(f"unknown agent transcript format {fmt!r}")


def _counted(what: str, counts: Counter[str]) -> list[str]:
    if not counts:
        return []
    listed = ", ".join(f"{kind} ({count})" for kind, count in sorted(counts.items()))
    return [f"not recorded ({what}): {listed}"]


# --- Claude Code ----------------------------------------------------------------------------


def _claude_code(records: list[tuple[int, dict[str, Any]]]) -> Iterator[AgentSession |
                                                                         TranscriptError]:
    groups: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for number, record in records:
        if record.get("isSidechain") is True:
            key = f"sub-agent {record.get('agentId') or 'run'}"
        else:
            key = "main"
        groups.setdefault(key, []).append((number, record))
    for key, group in groups.items():
        yield _claude_session(key, group)


def _claude_session(key: str, group: list[tuple[int, dict[str, Any]]]) -> AgentSession | (
        TranscriptError):
    first = group[0][0]
    messages: list[dict[str, Any]] = []
    message_ids: list[object] = []
    skipped: Counter[str] = Counter()
    compactions = 0
    session_id = ""
    for number, record in group:
        session_id = session_id or str(record.get("sessionId") or "")
        kind = record.get("type")
        message = record.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, dict):
            skipped[f"{kind} records"] += 1
            continue
        if record.get("isApiErrorMessage") is True:
            skipped["synthetic error messages"] += 1
            continue
        role, content = message.get("role"), message.get("content")
        if role != kind or not isinstance(content, str | list):
            return TranscriptError(f"a {kind} record whose message has no {kind} role and "
                                   "content", line=number)
        if record.get("isCompactSummary") is True:
            compactions += 1
        if isinstance(content, list) and not content:
            continue
        same = (role == "assistant" and messages and messages[-1]["role"] == "assistant"
                and message.get("id") is not None and message_ids[-1] == message.get("id"))
        if same:
            previous = messages[-1]["content"]
            messages[-1]["content"] = _blocks(previous) + _blocks(content)
            continue
        messages.append({"role": role, "content": content})
        message_ids.append(message.get("id"))
    try:
        history = from_anthropic({"messages": messages})
    except (TranscriptError, InvalidMessage) as exc:
        return TranscriptError(f"{key}: {exc}", line=first)
    if not history:
        return TranscriptError(f"{key}: no message the agent sent its model", line=first)
    notes = _counted("the agent's own records", skipped)
    notes += _compaction_note(compactions)
    notes.append("not recorded: each record's uuids, timestamps, usage and working directory")
    raw = [record for _, record in group]
    source = f"{session_id} {key}" if key != "main" else session_id
    return AgentSession(first, source, raw, history, notes)


def _blocks(content: object) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


# --- Codex CLI ------------------------------------------------------------------------------


class _CodexRecords:
    """What the records of a Codex rollout say, in one pass."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.skipped: Counter[str] = Counter()
        self.session_id = ""
        self.instructions = ""
        self.compactions = 0

    def add(self, kind: object, payload: dict[str, Any]) -> None:
        if kind == "session_meta":
            self.session_id = self.session_id or str(payload.get("id") or "")
            text = payload.get("instructions")
            self.instructions = text if isinstance(text, str) else self.instructions
        elif kind == "response_item" and payload.get("type") in _CODEX_UNSENT:
            self.skipped[f"{payload.get('type')} items"] += 1
        elif kind == "response_item":
            self.items.append(payload)
        elif kind == "compacted" and isinstance(payload.get("message"), str):
            self.compactions += 1
            self.items.append({"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": payload["message"]}]})
        else:
            self.skipped[f"{kind} records"] += 1


def _codex(records: list[tuple[int, dict[str, Any]]]) -> Iterator[AgentSession |
                                                                   TranscriptError]:
    if not records:
        return
    first = records[0][0]
    read = _CodexRecords()
    for number, record in records:
        kind, payload = record.get("type"), record.get("payload")
        if not isinstance(payload, dict):
            yield TranscriptError(f"a codex record needs a payload object (type {kind!r})",
                                  line=number)
            return
        read.add(kind, payload)
    try:
        history = from_openai_responses(read.items)
    except TranscriptError as exc:
        yield TranscriptError(f"response items: {exc}", line=first)
        return
    if read.instructions:
        history.insert(0, Chat(ChatMessage.system(read.instructions)))
    if not history:
        yield TranscriptError("no message the agent sent its model", line=first)
        return
    notes = _counted("the agent's own records", read.skipped)
    if read.instructions:
        notes.append("the session's instructions are recorded as a system message first")
    notes += _compaction_note(read.compactions)
    notes.append("not recorded: each record's timestamp")
    yield AgentSession(first, read.session_id, [record for _, record in records], history,
                       notes)


def _compaction_note(count: int) -> list[str]:
    if not count:
        return []
    return [f"{count} compaction{'s' if count > 1 else ''}: the summary the agent gave its "
            "model is recorded as a user message; the turns before it stay in the record"]


# --- Gemini CLI -----------------------------------------------------------------------------


def _gemini_cli(lines: Iterable[str | TranscriptError]) -> Iterator[AgentSession |
                                                                   TranscriptError]:
    text: list[str] = []
    for line in lines:
        if isinstance(line, TranscriptError):
            yield line
            return
        text.append(line)
    try:
        document = json.loads("\n".join(text))
    except (ValueError, RecursionError) as exc:
        yield TranscriptError(f"a gemini-cli session is one JSON document: {exc}", line=1)
        return
    if detect_agent_format(document) != GEMINI_CLI:
        yield TranscriptError("a gemini-cli session is an object with sessionId, projectHash "
                              "and messages", line=1)
        return
    skipped: Counter[str] = Counter()
    contents: list[dict[str, Any]] = []
    for i, message in enumerate(document["messages"]):
        if not isinstance(message, dict):
            yield TranscriptError(f"messages[{i}] is not an object", line=1)
            return
        kind = message.get("type")
        if kind == "user":
            contents.append({"role": "user", "parts": _parts(message.get("content"))})
        elif kind == "gemini":
            contents += _gemini_turn(message, skipped)
        else:
            skipped[f"{kind} messages"] += 1
    try:
        history = from_genai_json(snake_case_contents(contents),
                                  seed=str(document.get("sessionId", "")))
    except InvalidMessage as exc:
        yield TranscriptError(str(exc), line=1)
        return
    if not history:
        yield TranscriptError("no message the agent sent its model", line=1)
        return
    unanswered = skipped.pop(_UNANSWERED, 0)
    notes = _counted("the CLI's own", skipped)
    if unanswered:
        notes.append(f"{unanswered} call{'s' if unanswered > 1 else ''} with no result (cancelled)"
                     " recorded unanswered: the chat view sweeps it (R36)")
    notes.append("not recorded: each message's id, timestamp, token counts and model")
    yield AgentSession(1, str(document["sessionId"]), [document], history, notes)


def _parts(content: object) -> list[Any]:
    """A message's ``content`` as parts: a string is one text part."""
    if isinstance(content, str):
        return [{"text": content}]
    if isinstance(content, dict):
        return [content]
    return list(content) if isinstance(content, list) else []


def _gemini_turn(message: dict[str, Any], skipped: Counter[str]) -> list[dict[str, Any]]:
    """The model content of a ``gemini`` message and the user content of its calls' results."""
    calls = [c for c in message.get("toolCalls") or () if isinstance(c, dict)]
    if message.get("thoughts"):
        skipped["thought summaries"] += len(message["thoughts"])
    parts = [p for p in _parts(message.get("content")) if p != {"text": ""}]
    parts += [{"functionCall": {"id": c.get("id"), "name": c.get("name"),
                                "args": c.get("args") or {}}} for c in calls]
    results: list[Any] = []
    for call in calls:
        result = call.get("result")
        if result is None:
            skipped[_UNANSWERED] += 1
            continue
        answered = [p for p in _parts(result) if isinstance(p, dict) and "functionResponse" in p]
        results += answered or [{"functionResponse": {
            "id": call.get("id"), "name": call.get("name"),
            "response": {"output": result if isinstance(result, str) else json.dumps(result)}}}]
    turn = [{"role": "model", "parts": parts}] if parts else []
    return turn + ([{"role": "user", "parts": results}] if results else [])
