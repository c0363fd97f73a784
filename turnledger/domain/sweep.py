"""The orphan sweep: the last safety net for tool pairing in inconsistent histories (R36, R37).

Whole-turn trimming (R35) already keeps every tool call with its result. A restored session or
one modified outside turnledger may still hold a tool result with no call, or a call with no
result, which providers reject. The sweep removes both:

* A tool result answers the most recent earlier tool call with the same id that is still
  unanswered, at any earlier position of the history. A result with no such call is an orphan and
  is removed; so is every result after the first for one call (duplicates). A tool message whose
  content is not a tool envelope has no id to pair and is removed too, with no id recorded.
* A tool call that no later result answers is removed from its assistant message. When some calls
  of the message are answered, the message keeps exactly those; when none is, the message becomes
  a plain assistant message with its text, or is removed when the text is empty or blank. When an
  id is called again before the first call was answered, the older call is superseded: the next
  result answers the newer one.
* A *signed* step (an assistant message with a thinking block that carries a signature, or a
  redacted thinking block) is never cut: the provider checks the signature and wants its thinking
  with the tool_use it preceded. It is kept whole when every call of it is answered and removed
  whole otherwise, text and answered calls included; the results of those calls then answer
  nothing and are removed too.

Everything else (system, user, breadcrumb, ``[Tool results]`` carriers, plain assistant text) is
never touched. On a consistent history the sweep returns the very same message objects, in the
same order, and reports nothing (R37).

`sweep_orphans` works on provider-facing `ChatMessage` history, `sweep_conversation_orphans` on
the structured `ConversationMessage` history; for any structured history ``h``,
``to_chat_messages(sweep_conversation_orphans(h).history)`` equals
``sweep_orphans(to_chat_messages(h)).history`` and both report the same counts and ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Generic, TypeAlias, TypeVar

import attrs

from turnledger.domain.blocks import RedactedThinkingBlock, ThinkingBlock
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.messages import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ConversationMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    assistant_envelope,
    chat_tool_call_id,
    chat_tool_calls,
)

__all__ = [
    "SweepResult", "answered_ids", "called_ids", "pairs_among_themselves",
    "sweep_conversation_orphans", "sweep_orphans", "unanswered_calls", "with_calls",
]

M = TypeVar("M")


@attrs.frozen
class SweepResult(Generic[M]):
    """What the orphan sweep kept and what it removed (R36).

    ``history``: the swept history. ``removed``: how many provider-facing messages were removed
    entirely, counted in `ChatMessage` units for both sweeps (each `ToolResult` of a `ToolResults`
    counts as one, as it is one tool message once sent); an assistant message that only lost
    some of its calls, or was reduced to its text, is not counted here, its call ids are listed
    in ``orphan_tool_call_ids``. ``orphan_tool_call_ids``: ids of the removed results and removed
    calls, in history order, each once. ``removed_indices``: positions, in the input history, of
    the items removed entirely. ``rewritten``: ``(position in the input, replacement)`` for each
    item that was kept in a reduced form.
    """

    history: tuple[M, ...]
    removed: int
    orphan_tool_call_ids: tuple[str, ...]
    removed_indices: tuple[int, ...] = ()
    rewritten: tuple[tuple[int, M], ...] = ()


# --- pairing, shared by both sweeps ---------------------------------------------------------

@attrs.frozen
class _Calls:
    """An assistant item that calls tools; ``whole``: a signed step, kept or removed whole."""

    text: str | None
    calls: tuple[ToolCall, ...]
    whole: bool = False


def _is_signed(item: AssistantToolCalls) -> bool:
    """True for a step whose blocks a provider signed: a thinking block with its signature, or
    a redacted thinking block (R36: such a step is kept whole or removed whole)."""
    return any(
        isinstance(block, RedactedThinkingBlock)
        or (isinstance(block, ThinkingBlock) and block.signature)
        for block in item.blocks
    )


def _calls_of(item: AssistantToolCalls) -> _Calls:
    return _Calls(item.text, item.tool_calls, _is_signed(item))


@attrs.frozen
class _Result:
    """One tool result; ``call_id`` is None when the content carries no id to pair."""

    call_id: str | None


_Slot: TypeAlias = _Calls | _Result | None
_ResultKey: TypeAlias = tuple[int, int]  # (item index, result index within the item)


@attrs.frozen
class _Pairing:
    answered: dict[int, frozenset[str]]  # item index -> ids of its calls that have a result
    kept_results: frozenset[_ResultKey]


def _pair(entries: Iterable[tuple[int, int, _Slot]]) -> _Pairing:
    """Match results to calls over ``(item, sub-index, slot)`` in history order, then remove
    the signed steps with a call left unanswered whole (their calls answer nothing) and match
    again, until none is left: removing calls only ever leaves more results unanswered."""
    entries = list(entries)
    removed: set[int] = set()
    while True:
        pairing = _pair_once(entries, removed)
        cut = {
            index for index, _, slot in entries
            if isinstance(slot, _Calls) and slot.whole and index not in removed
            and len(pairing.answered.get(index, ())) < len(slot.calls)
        }
        if not cut:
            return pairing
        removed |= cut


def _pair_once(entries: Sequence[tuple[int, int, _Slot]], removed: set[int]) -> _Pairing:
    """Match results to calls in one pass; the items in ``removed`` call nothing."""
    unanswered: dict[str, int] = {}  # call id -> index of the newest item that made that call
    answered: dict[int, set[str]] = {}
    kept: set[_ResultKey] = set()
    for index, sub, slot in entries:
        if isinstance(slot, _Calls):
            if index in removed:
                continue
            # A newer call with the same id supersedes an unanswered older one: a later result
            # answers the call just before it, and the older call stays an orphan.
            unanswered.update((call.id, index) for call in slot.calls)
        elif isinstance(slot, _Result) and slot.call_id is not None:
            caller = unanswered.pop(slot.call_id, None)
            if caller is not None:  # otherwise no call, or already answered: an orphan
                answered.setdefault(caller, set()).add(slot.call_id)
                kept.add((index, sub))
    return _Pairing({k: frozenset(v) for k, v in answered.items()}, frozenset(kept))


def _chat_slot(message: ChatMessage) -> _Slot:
    # The recorded structure decides (issue 8); a bare message is read by the seed's rule.
    if message.role == "tool":
        return _Result(chat_tool_call_id(message))
    parsed = chat_tool_calls(message)
    if parsed is None:
        return None
    item = message.item
    return _Calls(*parsed, whole=isinstance(item, AssistantToolCalls) and _is_signed(item))


def _plain_text(text: str | None) -> str | None:
    """The text an assistant item keeps when all its calls go; None when blank."""
    # A blank assistant message says nothing and some providers reject it: drop it instead.
    return text if text is not None and text.strip() else None


def _dedupe(ids: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(ids))


@attrs.define
class _Outcome(Generic[M]):
    """Accumulates the sweep's output while walking the history once."""

    history: list[M] = attrs.Factory(list)
    removed: int = 0
    orphan_ids: list[str] = attrs.Factory(list)
    removed_indices: list[int] = attrs.Factory(list)
    rewritten: list[tuple[int, M]] = attrs.Factory(list)

    def keep(self, item: M) -> None:
        self.history.append(item)

    def rewrite(self, index: int, item: M) -> None:
        self.history.append(item)
        self.rewritten.append((index, item))

    def drop(self, index: int, messages: int = 1) -> None:
        self.removed += messages
        self.removed_indices.append(index)

    def result(self) -> SweepResult[M]:
        return SweepResult(
            tuple(self.history),
            self.removed,
            _dedupe(self.orphan_ids),
            tuple(self.removed_indices),
            tuple(self.rewritten),
        )


def _split_calls(slot: _Calls, answered: frozenset[str]) -> tuple[tuple[ToolCall, ...], list[str]]:
    """The answered calls of ``slot`` and the ids of the others, both in call order."""
    kept = tuple(call for call in slot.calls if call.id in answered)
    return kept, [call.id for call in slot.calls if call.id not in answered]


def _sweep_chat_item(
    index: int, message: ChatMessage, slot: _Slot, pairing: _Pairing, out: _Outcome[ChatMessage]
) -> None:
    """Apply the pairing to one ChatMessage (also used for a `Chat` in structured history)."""
    if isinstance(slot, _Calls):
        kept, orphans = _split_calls(slot, pairing.answered.get(index, frozenset()))
        out.orphan_ids.extend(orphans)
        if not orphans:
            out.keep(message)
        elif slot.whole:  # a signed step goes whole (R36): none of its calls is answered
            out.drop(index)
        elif isinstance(message.item, AssistantToolCalls):
            _rewrite_item(index, message.item, kept, out)
        elif kept:
            out.rewrite(index, attrs.evolve(message, content=assistant_envelope(slot.text, kept)))
        elif (text := _plain_text(slot.text)) is not None:
            out.rewrite(index, ChatMessage.assistant_text(text))
        else:
            out.drop(index)
    elif isinstance(slot, _Result) and (index, 0) not in pairing.kept_results:
        if slot.call_id is not None:
            out.orphan_ids.append(slot.call_id)
        out.drop(index)
    else:
        out.keep(message)


def _rewrite_item(
    index: int, item: AssistantToolCalls, kept: tuple[ToolCall, ...], out: _Outcome[ChatMessage]
) -> None:
    """Sweep the chat form of a tool-call item: its blocks and provider fields stay."""
    if kept:
        out.rewrite(index, ChatMessage.of_item(item.keeping(frozenset(c.id for c in kept))))
    elif (plain := item.remainder()) is not None:
        out.rewrite(index, plain)
    else:
        out.drop(index)


# --- the two sweeps -------------------------------------------------------------------------

def sweep_orphans(history: Sequence[ChatMessage]) -> SweepResult[ChatMessage]:
    """Remove tool results without a call and tool calls without a result (R36, R37).

    See the module docstring for the pairing rule. A consistent history comes back as the same
    message objects with ``removed == 0`` and no orphan ids.
    """
    slots = [_chat_slot(message) for message in history]
    pairing = _pair((index, 0, slot) for index, slot in enumerate(slots))
    out: _Outcome[ChatMessage] = _Outcome()
    for index, (message, slot) in enumerate(zip(history, slots)):
        _sweep_chat_item(index, message, slot, pairing, out)
    return out.result()


def _conversation_entries(
    history: Sequence[ConversationMessage], chat_slots: dict[int, _Slot]
) -> Iterator[tuple[int, int, _Slot]]:
    for index, item in enumerate(history):
        match item:
            case AssistantToolCalls():
                yield index, 0, _calls_of(item)
            case ToolResults(results=results):
                for sub, result in enumerate(results):
                    yield index, sub, _Result(result.tool_call_id)
            case Chat(message=message):
                # A tool or tool-calling assistant ChatMessage appended as-is (a session wraps
                # ChatMessages in Chat) pairs exactly like its flat form.
                chat_slots[index] = _chat_slot(message)
                yield index, 0, chat_slots[index]


def _sweep_step(
    index: int, item: AssistantToolCalls, pairing: _Pairing, out: _Outcome[ConversationMessage]
) -> None:
    """Apply the pairing to one structured tool-call step."""
    slot = _calls_of(item)
    kept, orphans = _split_calls(slot, pairing.answered.get(index, frozenset()))
    out.orphan_ids.extend(orphans)
    if not orphans:
        out.keep(item)
    elif slot.whole:  # a signed step goes whole (R36): no call of it is answered
        out.drop(index)
    elif kept:
        out.rewrite(index, item.keeping(frozenset(c.id for c in kept)))
    elif (plain := item.remainder()) is not None:
        out.rewrite(index, Chat(plain))
    else:
        out.drop(index)


def sweep_conversation_orphans(
    history: Sequence[ConversationMessage],
) -> SweepResult[ConversationMessage]:
    """The orphan sweep on structured history, with the semantics of `sweep_orphans` (R36, R37).

    Orphan `ToolResult` entries are dropped from their `ToolResults`, which is removed when left
    empty. An `AssistantToolCalls` keeps its answered calls (and its reasoning content); with
    none answered it becomes ``Chat(ChatMessage.assistant(text))`` when its text is not blank
    (the reasoning content is then lost, as a plain message cannot carry it) and is removed
    otherwise. A `Chat` is swept as its ChatMessage would be. ``removed`` counts ChatMessage
    units, see `SweepResult`.
    """
    chat_slots: dict[int, _Slot] = {}
    pairing = _pair(_conversation_entries(history, chat_slots))
    out: _Outcome[ConversationMessage] = _Outcome()
    for index, item in enumerate(history):
        match item:
            case AssistantToolCalls():
                _sweep_step(index, item, pairing, out)
            case ToolResults(results=results):
                kept_results = tuple(
                    result
                    for sub, result in enumerate(results)
                    if (index, sub) in pairing.kept_results
                )
                out.orphan_ids.extend(
                    result.tool_call_id
                    for sub, result in enumerate(results)
                    if (index, sub) not in pairing.kept_results
                )
                if len(kept_results) == len(results):
                    out.keep(item)
                elif kept_results:
                    out.rewrite(index, ToolResults(kept_results))
                    out.removed += len(results) - len(kept_results)
                else:
                    out.drop(index, messages=len(results))
            case Chat(message=message):
                flat: _Outcome[ChatMessage] = _Outcome()
                _sweep_chat_item(index, message, chat_slots[index], pairing, flat)
                out.orphan_ids.extend(flat.orphan_ids)
                if flat.removed:
                    out.drop(index)
                elif flat.rewritten:
                    out.rewrite(index, Chat(flat.history[0]))
                else:
                    out.keep(item)
            case _:  # a ChatMessage (sweep_orphans takes those), a dict, None...
                raise InvalidMessage(
                    f"history[{index}] must be a Chat, AssistantToolCalls or ToolResults, got "
                    f"{type(item).__name__} (sweep_orphans sweeps ChatMessage lists)")
    return out.result()


def unanswered_calls(history: Sequence[ChatMessage]) -> tuple[str, ...]:
    """Ids of the tool calls of ``history`` that no later result answers, in history order,
    each once: the calls the sweep removes for want of a result (R36). A signed step removed
    whole for one of them does not make its answered calls unanswered."""
    entries = [(index, 0, _chat_slot(message)) for index, message in enumerate(history)]
    pairing = _pair_once(entries, set())
    return _dedupe(
        call.id
        for index, _, slot in entries
        if isinstance(slot, _Calls)
        for call in slot.calls
        if call.id not in pairing.answered.get(index, ())
    )


def called_ids(item: ConversationMessage | None) -> tuple[str, ...]:
    """The ids of the tool calls ``item`` makes, in call order (none for None)."""
    slots = [slot for _, _, slot in _conversation_entries([item] if item else [], {})]
    return tuple(call.id for slot in slots if isinstance(slot, _Calls) for call in slot.calls)


def answered_ids(item: ConversationMessage | None) -> tuple[str, ...]:
    """The call ids the tool results of ``item`` answer, in order (none for None)."""
    slots = [slot for _, _, slot in _conversation_entries([item] if item else [], {})]
    return tuple(
        slot.call_id for slot in slots if isinstance(slot, _Result) and slot.call_id is not None
    )


def with_calls(item: ConversationMessage, ids: frozenset[str]) -> ConversationMessage | None:
    """``item`` as the sweep leaves it when only its calls ``ids`` are answered: itself, its
    step with the other calls left out, its text, or None (R36; a signed step is whole or
    None). What a restored item must be (E5)."""
    answers = [ToolResults(tuple(ToolResult(i, "") for i in ids))] if ids else []
    swept = sweep_conversation_orphans([item, *answers])
    if 0 in swept.removed_indices:
        return None
    return dict(swept.rewritten).get(0, item)


def pairs_among_themselves(items: Sequence[ConversationMessage]) -> bool:
    """True when `sweep_conversation_orphans` finds nothing in ``items`` (R36): every call
    answered by one later result, every result answering one earlier call.

    Decided in one pass for the common turn (structured calls and results with distinct
    ids); any other shape (a flat tool `Chat`, an id called twice) asks the sweep itself.
    A compaction asks it of every turn it summarises (ADR-0076).
    """
    unanswered: set[str] = set()
    for item in items:
        match item:
            case AssistantToolCalls(tool_calls=calls):
                for call in calls:
                    if call.id in unanswered:
                        return _swept_nothing(items)
                    unanswered.add(call.id)
            case ToolResults(results=results):
                for result in results:
                    if result.tool_call_id not in unanswered:
                        return _swept_nothing(items)
                    unanswered.discard(result.tool_call_id)
            case Chat(message=message):
                if message.role == "tool" or chat_tool_calls(message) is not None:
                    return _swept_nothing(items)
    return not unanswered


def _swept_nothing(items: Sequence[ConversationMessage]) -> bool:
    result = sweep_conversation_orphans(items)
    return not result.removed_indices and not result.rewritten
