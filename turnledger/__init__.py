"""turnledger: event-sourced conversation history for LLM agent runtimes.

The public surface (docs/api.md lists it; ADR-0101): the names a newcomer needs first, here,
and six public submodules for the rest — `turnledger.events`, `.blocks`, `.providers`,
`.audit`, `.errors` and `.profiles`. See docs/guide/tour.md for a tour.

A name is imported from its module when it is first used (PEP 562): ``import turnledger`` and
``turnledger --help`` load no store, driver, audit or report code until a command or a call
needs it (issue 20). ``_HOMES`` says where each name lives; the first ``TYPE_CHECKING`` block
says the same to type checkers, and ``tests/unit/test_public_surface.py`` holds the two and
``__all__`` to each other.

The names that moved to a submodule (``_MOVED``) still work here for one release: the same
object, with a `DeprecationWarning` naming the new module on each use. Type checkers see them
as before (the second ``TYPE_CHECKING`` block), so a typed caller keeps passing while it moves.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_HOMES: dict[str, tuple[str, ...]] = {
    "turnledger.domain.budget": (
        "DEFAULT_CONTEXT_TOKENS", "DEFAULT_MAX_HISTORY_TURNS", "HistoryPruning", "ProviderProfile",
        "Route", "RuntimeProfile", "effective_context_budget", "resolve_capacity",
    ),
    "turnledger.domain.decider": ("PreparedRequest",),
    "turnledger.domain.errors": (
        "ConcurrencyConflict", "ContextWindowExceeded", "CorruptRecord", "InvalidMessage",
        "InvalidProfile", "SessionNotFound", "TurnledgerError", "UnansweredToolCalls",
    ),
    "turnledger.domain.estimate": ("IMAGE_TOKEN_ESTIMATE", "estimate_history_tokens"),
    "turnledger.domain.events": (
        "BreadcrumbInserted", "DomainEvent", "HistoryTrimmed", "MessageAppended", "OrphansSwept",
        "RequestPrepared", "RequestRejected", "RouteSelected", "TrimDecided",
    ),
    "turnledger.domain.messages": (
        "BREADCRUMB_TEXT", "AssistantToolCalls", "Chat", "ChatMessage", "ConversationMessage",
        "ToolCall", "ToolResult", "ToolResults", "from_chat_messages", "to_chat_messages",
    ),
    "turnledger.domain.overflow": ("is_context_window_exceeded",),
    "turnledger.domain.sweep": ("SweepResult", "sweep_conversation_orphans", "sweep_orphans"),
    "turnledger.domain.trimming": (
        "DEFAULT_MAX_MESSAGE_ROWS", "TrimResult", "trim_conversation_to_recent_turns",
        "trim_to_recent_message_rows", "trim_to_recent_turn_count", "trim_to_recent_turns",
    ),
    "turnledger.domain.truncate": ("DEFAULT_MAX_TOOL_RESULT_CHARS", "truncate_tool_result"),
    "turnledger.profiles": ("load_profile",),
    "turnledger.store.backend": ("retry_on_conflict",),
    "turnledger.store.session": ("Session", "SessionView", "Store", "open_store"),
    "turnledger.store.summaries": ("Summarizer",),
}
_HOME_OF: dict[str, str] = {name: home for home, names in _HOMES.items() for name in names}

_MOVED: dict[str, tuple[str, ...]] = {
    "turnledger.audit": (
        "Analytics", "Finding", "Rule", "TimelineEntry", "VerifyReport", "Violation",
        "WhatIfReport", "report", "request_digest", "timeline", "verify", "views_at", "what_if",
    ),
    "turnledger.blocks": (
        "ContentBlock", "DocumentBlock", "ImageBlock", "OpaqueBlock", "RedactedThinkingBlock",
        "ServerToolResult", "ServerToolUse", "TextBlock", "ThinkingBlock", "canonical_json",
    ),
    "turnledger.errors": (
        "AppendInDoubt", "AppendRefused", "AuditKeyRequired", "InvalidKey", "InvalidStoreURL",
        "KeyRequired", "NotEncrypted", "SessionActive", "SessionExists", "SessionForgottenError",
        "StoreChanged", "StoreUnavailable", "TranscriptError", "UnkeyedChain", "WrongKey",
    ),
    "turnledger.events": (
        "HistoryCleared", "MessagePopped", "OverflowRecovered", "OverflowReported",
        "OverflowUnrecoverable", "SessionForgotten", "SessionStarted", "SummaryRefusal",
        "SummaryRefused", "ToolCallsRestored", "ToolResultsCleared", "TurnsSummarized",
    ),
    "turnledger.profiles": (
        "Compaction", "Pricing", "ProfileDocument", "ResolvedRoute", "load_profile_document",
        "request_window", "resolve_route",
    ),
    "turnledger.providers": (
        "APIS", "LeftOut", "fit_messages", "from_anthropic", "from_openai_chat",
        "from_openai_responses", "to_anthropic", "to_openai_chat", "to_openai_responses",
    ),
}
"""The names that left the top level (issue 34), by the public module that has them now."""
_MOVED_TO: dict[str, str] = {name: home for home, names in _MOVED.items() for name in names}

_SUBMODULES: frozenset[str] = frozenset(home.rsplit(".", 1)[1] for home in _MOVED)
"""The public submodules: ``turnledger.audit`` works after a bare ``import turnledger``."""


def __getattr__(name: str) -> Any:
    """``turnledger.NAME``: imported from its module on first use, then kept here; a moved
    name is taken from its new module on each use, with a `DeprecationWarning` naming it."""
    home = _HOME_OF.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value
    moved = _MOVED_TO.get(name)
    if moved is not None:
        if not _probed_by_from_import():
            warnings.warn(
                f"turnledger.{name} moved to {moved}: import it from there "
                f"(from {moved} import {name}); the top-level name is deprecated and goes "
                "away in the next release",
                DeprecationWarning,
                stacklevel=2,
            )
        return getattr(importlib.import_module(moved), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'turnledger' has no attribute {name!r}")


def _probed_by_from_import() -> bool:
    """Whether ``__getattr__`` was called by the check ``from turnledger import NAME`` makes
    before it takes the name (importlib asks ``hasattr`` whether NAME is a submodule to
    import): that check is no use of the name, so one statement warns once, not twice."""
    import inspect  # only when a moved name is used: `import turnledger` stays light

    frame = inspect.currentframe()
    for _ in range(2):  # from this function's frame to __getattr__'s, then to its caller's
        frame = frame.f_back if frame is not None else None
    return frame is not None and frame.f_code.co_name == "_handle_fromlist"


def __dir__() -> list[str]:
    """The current names and the public submodules; not the moved names, so completion leads
    to their new homes."""
    return sorted({*globals(), *__all__, *_SUBMODULES})


if TYPE_CHECKING:
    from turnledger.domain.budget import (
        DEFAULT_CONTEXT_TOKENS,
        DEFAULT_MAX_HISTORY_TURNS,
        HistoryPruning,
        ProviderProfile,
        Route,
        RuntimeProfile,
        effective_context_budget,
        resolve_capacity,
    )
    from turnledger.domain.decider import (
        PreparedRequest,
    )
    from turnledger.domain.errors import (
        ConcurrencyConflict,
        ContextWindowExceeded,
        CorruptRecord,
        InvalidMessage,
        InvalidProfile,
        SessionNotFound,
        TurnledgerError,
        UnansweredToolCalls,
    )
    from turnledger.domain.estimate import (
        IMAGE_TOKEN_ESTIMATE,
        estimate_history_tokens,
    )
    from turnledger.domain.events import (
        BreadcrumbInserted,
        DomainEvent,
        HistoryTrimmed,
        MessageAppended,
        OrphansSwept,
        RequestPrepared,
        RequestRejected,
        RouteSelected,
        TrimDecided,
    )
    from turnledger.domain.messages import (
        BREADCRUMB_TEXT,
        AssistantToolCalls,
        Chat,
        ChatMessage,
        ConversationMessage,
        ToolCall,
        ToolResult,
        ToolResults,
        from_chat_messages,
        to_chat_messages,
    )
    from turnledger.domain.overflow import (
        is_context_window_exceeded,
    )
    from turnledger.domain.sweep import (
        SweepResult,
        sweep_conversation_orphans,
        sweep_orphans,
    )
    from turnledger.domain.trimming import (
        DEFAULT_MAX_MESSAGE_ROWS,
        TrimResult,
        trim_conversation_to_recent_turns,
        trim_to_recent_message_rows,
        trim_to_recent_turn_count,
        trim_to_recent_turns,
    )
    from turnledger.domain.truncate import (
        DEFAULT_MAX_TOOL_RESULT_CHARS,
        truncate_tool_result,
    )
    from turnledger.profiles import (
        load_profile,
    )
    from turnledger.store.backend import (
        retry_on_conflict,
    )
    from turnledger.store.session import (
        Session,
        SessionView,
        Store,
        open_store,
    )
    from turnledger.store.summaries import (
        Summarizer,
    )

if TYPE_CHECKING:  # the moved names, typed as they were for one release (ADR-0101)
    from turnledger.audit import Analytics as Analytics
    from turnledger.audit import Finding as Finding
    from turnledger.audit import Rule as Rule
    from turnledger.audit import TimelineEntry as TimelineEntry
    from turnledger.audit import VerifyReport as VerifyReport
    from turnledger.audit import Violation as Violation
    from turnledger.audit import WhatIfReport as WhatIfReport
    from turnledger.audit import report as report
    from turnledger.audit import request_digest as request_digest
    from turnledger.audit import timeline as timeline
    from turnledger.audit import verify as verify
    from turnledger.audit import views_at as views_at
    from turnledger.audit import what_if as what_if
    from turnledger.blocks import ContentBlock as ContentBlock
    from turnledger.blocks import DocumentBlock as DocumentBlock
    from turnledger.blocks import ImageBlock as ImageBlock
    from turnledger.blocks import OpaqueBlock as OpaqueBlock
    from turnledger.blocks import RedactedThinkingBlock as RedactedThinkingBlock
    from turnledger.blocks import ServerToolResult as ServerToolResult
    from turnledger.blocks import ServerToolUse as ServerToolUse
    from turnledger.blocks import TextBlock as TextBlock
    from turnledger.blocks import ThinkingBlock as ThinkingBlock
    from turnledger.blocks import canonical_json as canonical_json
    from turnledger.errors import AppendInDoubt as AppendInDoubt
    from turnledger.errors import AppendRefused as AppendRefused
    from turnledger.errors import AuditKeyRequired as AuditKeyRequired
    from turnledger.errors import InvalidKey as InvalidKey
    from turnledger.errors import InvalidStoreURL as InvalidStoreURL
    from turnledger.errors import KeyRequired as KeyRequired
    from turnledger.errors import NotEncrypted as NotEncrypted
    from turnledger.errors import SessionActive as SessionActive
    from turnledger.errors import SessionExists as SessionExists
    from turnledger.errors import SessionForgottenError as SessionForgottenError
    from turnledger.errors import StoreChanged as StoreChanged
    from turnledger.errors import StoreUnavailable as StoreUnavailable
    from turnledger.errors import TranscriptError as TranscriptError
    from turnledger.errors import UnkeyedChain as UnkeyedChain
    from turnledger.errors import WrongKey as WrongKey
    from turnledger.events import HistoryCleared as HistoryCleared
    from turnledger.events import MessagePopped as MessagePopped
    from turnledger.events import OverflowRecovered as OverflowRecovered
    from turnledger.events import OverflowReported as OverflowReported
    from turnledger.events import OverflowUnrecoverable as OverflowUnrecoverable
    from turnledger.events import SessionForgotten as SessionForgotten
    from turnledger.events import SessionStarted as SessionStarted
    from turnledger.events import SummaryRefusal as SummaryRefusal
    from turnledger.events import SummaryRefused as SummaryRefused
    from turnledger.events import ToolCallsRestored as ToolCallsRestored
    from turnledger.events import ToolResultsCleared as ToolResultsCleared
    from turnledger.events import TurnsSummarized as TurnsSummarized
    from turnledger.profiles import Compaction as Compaction
    from turnledger.profiles import Pricing as Pricing
    from turnledger.profiles import ProfileDocument as ProfileDocument
    from turnledger.profiles import ResolvedRoute as ResolvedRoute
    from turnledger.profiles import load_profile_document as load_profile_document
    from turnledger.profiles import request_window as request_window
    from turnledger.profiles import resolve_route as resolve_route
    from turnledger.providers import APIS as APIS
    from turnledger.providers import LeftOut as LeftOut
    from turnledger.providers import fit_messages as fit_messages
    from turnledger.providers import from_anthropic as from_anthropic
    from turnledger.providers import from_openai_chat as from_openai_chat
    from turnledger.providers import from_openai_responses as from_openai_responses
    from turnledger.providers import to_anthropic as to_anthropic
    from turnledger.providers import to_openai_chat as to_openai_chat
    from turnledger.providers import to_openai_responses as to_openai_responses

__all__ = [
    "BREADCRUMB_TEXT",
    "DEFAULT_CONTEXT_TOKENS",
    "DEFAULT_MAX_HISTORY_TURNS",
    "DEFAULT_MAX_MESSAGE_ROWS",
    "DEFAULT_MAX_TOOL_RESULT_CHARS",
    "IMAGE_TOKEN_ESTIMATE",
    "AssistantToolCalls",
    "BreadcrumbInserted",
    "Chat",
    "ChatMessage",
    "ConcurrencyConflict",
    "ContextWindowExceeded",
    "ConversationMessage",
    "CorruptRecord",
    "DomainEvent",
    "HistoryPruning",
    "HistoryTrimmed",
    "InvalidMessage",
    "InvalidProfile",
    "MessageAppended",
    "OrphansSwept",
    "PreparedRequest",
    "ProviderProfile",
    "RequestPrepared",
    "RequestRejected",
    "Route",
    "RouteSelected",
    "RuntimeProfile",
    "Session",
    "SessionNotFound",
    "SessionView",
    "Store",
    "Summarizer",
    "SweepResult",
    "ToolCall",
    "ToolResult",
    "ToolResults",
    "TrimDecided",
    "TrimResult",
    "TurnledgerError",
    "UnansweredToolCalls",
    "effective_context_budget",
    "estimate_history_tokens",
    "from_chat_messages",
    "is_context_window_exceeded",
    "load_profile",
    "open_store",
    "resolve_capacity",
    "retry_on_conflict",
    "sweep_conversation_orphans",
    "sweep_orphans",
    "to_chat_messages",
    "trim_conversation_to_recent_turns",
    "trim_to_recent_message_rows",
    "trim_to_recent_turn_count",
    "trim_to_recent_turns",
    "truncate_tool_result",
]


def _count_before_erasure(backend: Any) -> None:
    """The analytics counters, brought up to date before `Store.forget` erases a session: the
    package is the composition root, so the store runs this without importing a projection
    (ADR-0072); the projection is imported when a session is forgotten, not before."""
    from turnledger.projections.analytics import count_before_erasure

    count_before_erasure(backend)


def _register() -> None:
    import turnledger.store as store  # light: the hook registry and the default URL

    store.before_erasure(_count_before_erasure)


_register()
