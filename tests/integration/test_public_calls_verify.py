"""Any sequence of public calls on a healthy store leaves a store that `verify` passes (issue 9.3).

A session is driven by random public calls — appends of user, assistant, system, tool-call and
tool-result messages in any order (results before their calls, calls never answered, ids reused,
both the structured and the provider-facing form), ``prepare_request``, ``recover_from_overflow``,
``select_route`` and ``restore`` — on a memory store (snapshot every 5 events) and on SQLite.
Whatever a call raises must be one of the documented refusals; afterwards `turnledger.audit.verify`
finds nothing (DECISIONS 7 and 11: the store never holds a request ``verify`` would reject).

Also the refusal itself: ``prepare_request`` while the newest turn has a tool call without its
result raises `UnansweredToolCalls` naming the ids, records a `RequestRejected` with that reason,
and records no `RequestPrepared`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turnledger
from tests.properties import examples
from turnledger import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ContextWindowExceeded,
    InvalidMessage,
    ProviderProfile,
    RequestPrepared,
    RequestRejected,
    Route,
    RuntimeProfile,
    ToolCall,
    ToolResult,
    ToolResults,
    open_store,
)
from turnledger.audit import verify
from turnledger.domain.events import RejectionReason
from turnledger.domain.messages import assistant_envelope, tool_envelope
from turnledger.errors import UnansweredToolCalls
from turnledger.store.backend import drop_memory_store
from turnledger.store.session import Session, Store

PROVIDERS = (
    ProviderProfile("wide", "w-1", 3_000),
    ProviderProfile("narrow", "n-1", 300),
)
ROUTES = (Route("wide", "w-1"), Route("narrow", "n-1"), Route("narrow", "unlisted"))
IDS = ("a", "b", "c")

_text = st.text(alphabet="ab xy", max_size=40)
_ids = st.lists(st.sampled_from(IDS), min_size=1, max_size=2, unique=True)

_call = st.tuples(st.just("call"), _ids, st.booleans())
_result = st.tuples(st.just("result"), _ids, st.booleans())
_step = st.one_of(
    st.tuples(st.just("user"), _text),
    st.tuples(st.just("assistant"), _text),
    st.tuples(st.just("system"), _text),
    _call,
    _result,
    st.tuples(st.just("prepare"), st.booleans()),
    st.tuples(st.just("overflow")),
    st.tuples(st.just("route"), st.sampled_from(range(len(ROUTES)))),
    st.tuples(st.just("restore")),
)
_profiles = st.builds(
    RuntimeProfile,
    max_context_tokens=st.sampled_from((None, 0, 60, 200)),
    max_history_messages=st.sampled_from((None, 0, 1, 3)),
    max_tool_result_chars=st.just(50),
)


def _append_call(session: Session, ids: list[str], as_chat: bool) -> None:
    calls = tuple(ToolCall(i, "shell", "{}") for i in ids)
    if as_chat:
        session.append(ChatMessage.assistant(assistant_envelope("calling", calls)))
    else:
        session.append(AssistantToolCalls("calling", calls))


def _append_result(session: Session, ids: list[str], as_chat: bool) -> None:
    if as_chat:
        for i in ids:
            session.append(ChatMessage.tool(tool_envelope(i, f"out {i} " * 10)))
    else:
        session.append(ToolResults(tuple(ToolResult(i, f"out {i} " * 10, "shell") for i in ids)))


def _call(session: Session, ids: list[str], as_chat: bool) -> None:
    """`_append_call`; a call with the id of a call still pending is refused (ADR-0099), a
    documented refusal: any other `InvalidMessage` fails the script."""
    try:
        _append_call(session, ids, as_chat)
    except InvalidMessage as error:
        if "no result answers yet" not in str(error):
            raise


def _run(store: Store, session: Session, step: tuple[Any, ...]) -> Session:
    """One public call; the documented refusals are part of the contract, anything else fails."""
    kind = step[0]
    try:
        match kind:
            case "user":
                session.append(ChatMessage.user(f"u {step[1]}"))
            case "assistant":
                session.append(Chat(ChatMessage.assistant(f"a {step[1]}")))
            case "system":
                session.append(ChatMessage.system(f"s {step[1]}"))
            case "call":
                _call(session, step[1], step[2])
            case "result":
                _append_result(session, step[1], step[2])
            case "prepare":
                session.prepare_request(final_summary=step[1])
            case "overflow":
                session.recover_from_overflow("maximum context length exceeded")
            case "route":
                session.select_route(ROUTES[step[1]])
            case "restore":
                return store.restore(session.id)
    except (UnansweredToolCalls, ContextWindowExceeded):
        pass
    return session


def _drive(
    store: Store, profile: RuntimeProfile, legacy: bool, steps: list[tuple[Any, ...]]
) -> str:
    session = store.start_session(profile=profile, providers=PROVIDERS, legacy=legacy)
    for step in steps:
        session = _run(store, session, step)
    return session.id


def _report(store: Store) -> list[str]:
    return [str(v) for v in verify(store.backend).violations]


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(profile=_profiles, legacy=st.booleans(), steps=st.lists(_step, max_size=25))
def test_r37_any_public_call_sequence_leaves_a_store_verify_passes(
    profile: RuntimeProfile, legacy: bool, steps: list[tuple[Any, ...]]
) -> None:
    """Appends in any order, requests, overflows, routes, restores: verify finds nothing."""
    name = f"verify-property-{uuid4().hex}"
    store = open_store(f"memory://{name}", snapshot_interval=5)
    try:
        _drive(store, profile, legacy, steps)
        assert [] == _report(store)
    finally:
        store.close()
        drop_memory_store(name)


@settings(
    max_examples=examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
)
@given(profile=_profiles, steps=st.lists(_step, max_size=15))
def test_r37_any_public_call_sequence_leaves_a_sqlite_store_verify_passes(
    tmp_path: Path, profile: RuntimeProfile, steps: list[tuple[Any, ...]]
) -> None:
    """The same property on SQLite, through a store opened again for the audit."""
    url = f"sqlite:///{tmp_path / uuid4().hex}.db"
    with open_store(url, snapshot_interval=5) as store:
        _drive(store, profile, False, steps)
    with open_store(url) as store:
        assert [] == _report(store)


@pytest.mark.parametrize("as_chat", [False, True])
def test_r18_prepare_refuses_a_newest_turn_with_unanswered_tool_calls(as_chat: bool) -> None:
    """An unanswered call in the newest turn: UnansweredToolCalls naming it, recorded, not sent."""
    with open_store("memory://") as store:
        session = store.start_session()
        session.append(ChatMessage.user("list the files"))
        _append_call(session, ["call_1", "call_2"], as_chat)
        _append_result(session, ["call_1"], as_chat)
        version = session.version
        with pytest.raises(UnansweredToolCalls) as raised:
            session.prepare_request()
        new = session.events(after_version=version)
        assert ("call_2",) == raised.value.tool_call_ids
        assert "call_2" in str(raised.value)
        assert [RequestRejected] == [type(e) for e in new if not _is_trim(e)]
        rejected = new[-1]
        assert isinstance(rejected, RequestRejected)
        assert (RejectionReason.UNANSWERED_TOOL_CALLS, ("call_2",)) == (
            rejected.reason, rejected.tool_call_ids
        )
        assert [] == [e for e in session.events() if isinstance(e, RequestPrepared)]
        assert [] == _report(store)
        # Once answered, the request goes out.
        _append_result(session, ["call_2"], as_chat)
        assert 4 == len(session.prepare_request().messages)  # user, calls, 2 results


def _is_trim(event: object) -> bool:
    return type(event).__name__ in {"TrimDecided", "BreadcrumbInserted", "HistoryTrimmed"}


def test_r18_unanswered_tool_calls_is_a_public_turnledger_error() -> None:
    """The refusal is exported from turnledger and is a TurnledgerError."""
    assert "UnansweredToolCalls" in turnledger.__all__
    assert issubclass(UnansweredToolCalls, turnledger.TurnledgerError)
