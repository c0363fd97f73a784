"""Google ADK agents on turnledger sessions (issue 22; ``pip install 'turnledger[google-adk]'``).

- **Conversions** (`from_genai`, `to_genai`; from `turnledger.integrations.google_adk_messages`):
  ``google.genai.types.Content`` ⇄ turnledger messages through the provider format
  `turnledger.domain.formats.genai` (ADR-0081); a content that would not come back with the same
  JSON is refused (`InvalidMessage`).
- **Callbacks**: `TurnledgerCallback` (``LlmAgent(..., before_model_callback=callback,
  after_model_callback=callback.after_model)``). Before every model call (R24) it records the
  contents ADK added since the last call and the trims a request would make, in one
  transaction (`Session.fit_window`), and replaces ``llm_request.contents`` with that window;
  ADK's own session keeps every event. ``after_model`` records each reply without function
  calls as it arrives; a reply with calls is recorded by the next model call, with its
  responses (docs/integrations/google-adk.md: ``include_contents="none"``). The reply's
  ``usage_metadata`` (Gemini's usage, issue 35) is recorded by the same worker call as
  answering the window the callback handed to that model call (`record_usage`; a reply
  without it records none).

One turnledger session per ADK session (`session_uuid`), or the ``session_id`` given; what
is new is told per ADK session (`_new_contents`, `after_recorded`). ADK's system instruction
lives in the request's config: neither recorded nor trimmed. Store calls run in a worker thread
(`off_loop`), the conversions in the event loop's (ADR-0092), the window built while the
step's commit waits (`fit_then_build`, ADR-0093); a lost race is decided again (ADR-0065).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple, Unpack

from turnledger.domain.blocks import canonical_json
from turnledger.domain.errors import TurnledgerError
from turnledger.domain.formats import Json
from turnledger.domain.formats.genai import genai_content_json, genai_opens, unanswered_calls
from turnledger.domain.messages import ChatMessage, ToolCall
from turnledger.domain.usage import Usage
from turnledger.integrations import (
    Asked,
    BuiltOnce,
    Decided,
    IntegrationOptions,
    OptionKeywords,
    SessionsByName,
    WaitingUsages,
    after_recorded,
    fit_then_build,
    missing_extra,
    off_loop,
)
from turnledger.integrations.google_adk_messages import (
    checked_from_genai,
    dump_content,
    fresh_content,
    from_genai,
    to_genai,
)
from turnledger.integrations.google_adk_messages import (
    validated as _validated,  # by this name: what each window build validates with
)
from turnledger.store.session import Session, Store

try:
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise missing_extra("google_adk", "google-adk", "google-adk") from error

__all__ = ["TurnledgerCallback", "from_genai", "to_genai"]


def _pending(session: Session, contents: Sequence[types.Content]) -> list[ToolCall]:
    """The calls awaiting a response: a whole-window scan, so only for a function part."""
    parts = any(p.function_call or p.function_response for c in contents for p in c.parts or [])
    return unanswered_calls(session.chat_view()) if parts else []


def _has_calls(content: types.Content) -> bool:
    """Whether a reply calls functions: then the next model call records it (`record_reply`)."""
    return any(part.function_call is not None for part in content.parts or [])


def _seed(session: Session) -> str:
    """What makes the ids of id-less calls converted for ``session`` now its own (`GenaiCalls`)."""
    return f"{session.id}/{session.next_position}"


_ALIGN = 8  # recorded contents lined up at most: a longer repeated run resolves to its end

def _aligned(
    contents: Sequence[types.Content], recorded: Sequence[Json], *, whole: bool = False
) -> int | None:
    """The index after the newest recorded content where the most recorded contents (up to
    `_ALIGN`) line up (`after_recorded`: a question asked again after a turn with no reply
    recorded, ``[..., A, Q, Q]`` against ``A, Q``, is new); None when none is. ``whole``:
    ``recorded`` is the whole record, which ends at the beginning of ``contents`` it is."""
    most = min(_ALIGN, len(recorded))
    if whole and len(contents) >= most and all(
            dump_content(contents[i]) == recorded[i] for i in range(most)):
        return most  # the record is the beginning of these contents
    return after_recorded(contents, recorded, key=dump_content, most=_ALIGN)


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
    """Where the contents not recorded yet begin. ``seen`` (this object's last record of this
    ADK session): after the last content seen, at its index or its last occurrence; on the
    first call of a new ``invocation`` its ``user_content`` is new too (with
    ``include_contents="none"`` contents restart at each invocation, and a question asked
    again after a turn with no reply recorded would pass the index check). Without ``seen``
    (a new object: another process), ``recorded`` decides (`_new_after_recorded`); with
    several writers the newest recorded content may be another writer's."""
    if seen is None:
        return _new_after_recorded(contents, recorded)
    if 0 < seen.number <= len(contents) and dump_content(contents[seen.number - 1]) == seen.last:
        start = seen.number
    else:
        start = _aligned(contents, [seen.last]) or 0
    if (invocation is not None and user_content is not None
            and seen.invocation not in (None, invocation)):
        found = _aligned(contents, [dump_content(user_content)])
        if found is not None:
            start = min(start, found - 1)
    return start


def _new_after_recorded(
    contents: Sequence[types.Content], recorded: Sequence[types.Content]
) -> int:
    """After the newest recorded content where the record lines up (`_aligned`); else
    (another writer recorded last) after the last content but the newest equal to a recorded
    one; else all are new (a fresh ADK session continuing the conversation)."""
    if not recorded:
        return 0
    found = _aligned(contents, [dump_content(c) for c in recorded[-_ALIGN:]],
                     whole=len(recorded) <= _ALIGN)
    if found is not None:
        return found
    known = {canonical_json(dump_content(c)) for c in recorded}
    return after_recorded(contents[:-1], [known],
                          same=lambda c, texts: canonical_json(dump_content(c)) in texts) or 0


# --- the callback -----------------------------------------------------------------------------


class TurnledgerCallback(SessionsByName):
    """An ADK ``before_model_callback`` keeping the agent's history in turnledger (module
    doc). ``options`` (`IntegrationOptions`, or its fields as keywords): how sessions start,
    the summarizer (issue 24) and the conflict budget (ADR-0065)."""

    def __init__(
        self, store: Store, *, session_id: str | None = None,
        options: IntegrationOptions | None = None, **keywords: Unpack[OptionKeywords],
    ) -> None:
        super().__init__(store, session_id=session_id, options=options, **keywords)
        # ADK session name -> what this object saw recorded of it: what tells its new contents
        # from those it recorded (`_new_contents`).
        self._seen: dict[str | None, _Seen] = {}
        # Each window content's genai Content, built once; handed out as copies (`fresh_content`).
        self._built = BuiltOnce(
            genai_opens, lambda groups: _validated([genai_content_json(g) for g in groups]),
            fresh_content)
        # (ADK session, invocation, agent) -> the window handed to its model call, until the
        # call's reply arrives: what the reply's usage answers (issue 35).
        self._asked: Asked[tuple[str, str, str], list[ChatMessage]] = Asked()
        self._usages = WaitingUsages()  # recorded by the next store call (`_record_usages`)

    def session_for(self, name: str | None = None) -> Session:
        """The turnledger session of the ADK session ``name`` (or of ``session_id``)."""
        name = self.session_id or name
        if not name:
            raise TurnledgerError("TurnledgerCallback needs a session_id or an ADK session")
        return self._session_named(name)

    def contents(self, name: str | None = None) -> list[types.Content]:
        """The window now, as genai contents (the trims it takes are recorded)."""
        session = self.session_for(name)
        self._record_usages()  # before this fit: each answers the window fitted before it
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
        self._record_usages()  # before this fit: each answers the window fitted before it
        return self._retrying(session, "the model callback", functools.partial(
            self._record_new, session, contents, name, invocation, user_content, decided))

    def _record_usages(self) -> None:
        """Record the usages of the replies that arrived since the last store call."""
        self._usages.record(self.options.conflict_budget_seconds)

    def _record_new(
        self, session: Session, contents: Sequence[types.Content], name: str | None,
        invocation: str | None, user_content: types.Content | None, decided: Decided | None,
    ) -> list[ChatMessage]:
        # Judged on each attempt: after a conflict, another writer may have recorded them.
        seen = self._seen.get(name)
        recorded = to_genai(session.conversation_view()) if seen is None else []
        start = _new_contents(contents, seen, recorded, invocation, user_content)
        new, checked = checked_from_genai(
            contents[start:], _pending(session, contents[start:]), _seed(session))
        self._built.seed(checked)  # the window's contents of them, validated by the check
        # The step's new contents and the window's trims: one transaction.
        window = self._window(session, new, decided)
        # Noted only once they landed: a conflict recorded nothing, and the retry judges
        # these contents again on the newer state.
        if invocation is None and seen is not None:
            invocation = seen.invocation
        if contents:
            self._seen[name] = _Seen(len(contents), dump_content(contents[-1]), invocation)
        elif seen is not None:
            self._seen[name] = seen._replace(invocation=invocation)
        return window

    def _genai_of(self, window: Sequence[ChatMessage]) -> list[types.Content]:
        """`to_genai` of ``window``, each content built and validated once per object."""
        return self._built(window)

    def record_reply(self, content: types.Content, name: str | None = None) -> None:
        """Record a model reply as it arrives (so the log has the run's last answer). A reply
        with function calls is recorded by the next model call with its responses, in one
        transaction: no restore sweeps a call whose response is still being computed."""
        self._record_usages()
        if _has_calls(content):
            return
        session = self.session_for(name)

        def write() -> None:
            new, checked = checked_from_genai([content], _pending(session, [content]),
                                              _seed(session))
            session.extend(new)
            self._built.seed(checked)

        self._retrying(session, "the reply callback", write)
        seen = self._seen.get(name)  # ADK appends the reply to this session's contents
        self._seen[name] = _Seen((seen.number if seen else 0) + 1, dump_content(content),
                                 seen.invocation if seen else None)

    async def __call__(
        self, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Replace ``llm_request.contents`` with the window; None: ADK calls the model. Only
        the recording runs in a worker; the window is built in the loop's thread, where ADK
        reads it, while the commit waits (`fit_then_build`)."""
        name = callback_context.session.id
        window, llm_request.contents = await fit_then_build(
            functools.partial(self._recorded_window, list(llm_request.contents), name,
                              callback_context.invocation_id, callback_context.user_content),
            self._with_genai)
        self._asked.hold(
            (name, callback_context.invocation_id, callback_context.agent_name), window)
        return None

    def _with_genai(
        self, window: list[ChatMessage]
    ) -> tuple[list[ChatMessage], list[types.Content]]:
        return window, self._genai_of(window)

    async def after_model(
        self, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """An ADK ``after_model_callback``: record the reply (a streamed chunk waits for its
        whole reply) and its ``usage_metadata``, as answering the window this callback handed
        to the call, by the reply's own store call or else the next model call's (a reply
        without usage records none); None: ADK keeps the reply as it is."""
        content = llm_response.content
        if not llm_response.partial:
            name = callback_context.session.id
            window = self._asked.take(
                (name, callback_context.invocation_id, callback_context.agent_name))
            usage = llm_response.usage_metadata
            if window is not None and usage is not None:
                self._usages.add(self.session_for(name), window,
                                 functools.partial(Usage.of, usage))
        # Decided here, not in the worker thread: a reply with calls (most replies of a tool
        # loop) records nothing, and the hop alone cost 0.35-1.2 ms.
        if (content is not None and content.parts and not llm_response.partial
                and not _has_calls(content)):
            await off_loop(self.record_reply, content, callback_context.session.id)
        return None
