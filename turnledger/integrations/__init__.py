"""Optional doorways into agent frameworks (extras only).

- `turnledger.integrations.openai_agents`: a session for the OpenAI Agents SDK
  (``pip install 'turnledger[openai-agents]'``);
- `turnledger.integrations.langchain`: a chat message history, a trimming step for LangGraph
  and LCEL, and LangChain message conversions (``pip install 'turnledger[langchain]'``).

Nothing here is imported by ``import turnledger``; each module imports its framework only when
it needs it, so the core keeps its four runtime dependencies.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import ParamSpec, TypeVar
from uuid import NAMESPACE_URL, UUID, uuid5

from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile
from turnledger.domain.errors import ConcurrencyConflict, SessionNotFound
from turnledger.store.session import Session, Store

__all__ = ["off_loop", "open_session", "session_uuid"]

P = ParamSpec("P")
R = TypeVar("R")

_NAMESPACE = uuid5(NAMESPACE_URL, "https://turnledger/integrations/session")


def session_uuid(name: str) -> UUID:
    """The turnledger session id of a framework's session or thread name.

    A UUID text is taken as it is; any other name maps to the same UUID every time (UUID5), so
    a conversation called ``"user-42"`` is found again by another process.
    """
    try:
        return UUID(name)
    except (ValueError, TypeError, AttributeError):
        return uuid5(_NAMESPACE, str(name))


async def off_loop(function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run a blocking store call in a worker thread, so the event loop never waits on I/O."""
    return await asyncio.to_thread(functools.partial(function, *args, **kwargs))


def open_session(
    store: Store,
    session_id: str,
    *,
    profile: RuntimeProfile | None = None,
    providers: Sequence[ProviderProfile] = (),
    route: Route | None = None,
) -> Session:
    """The turnledger session named ``session_id`` (`session_uuid`): restored when the store
    has it, else started with ``profile``, ``providers`` and ``route``."""
    uuid = session_uuid(session_id)
    for _ in range(2):
        try:
            return store.restore(uuid)
        except SessionNotFound:
            pass
        try:
            return store.start_session(profile, providers, route, session_id=uuid)
        except ConcurrencyConflict:
            continue  # another process started it first: restore theirs
    return store.restore(uuid)
