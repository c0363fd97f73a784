"""turnledger: event-sourced conversation history for LLM agent runtimes.

The public surface, re-exported (docs/api.md lists it). See README.md for a tour.

A name is imported from its module when it is first used (PEP 562): ``import turnledger`` and
``turnledger --help`` load no store, driver, audit or report code until a command or a call
needs it (issue 20). ``_HOMES`` says where each name lives; the ``TYPE_CHECKING`` block says
the same to type checkers, and ``tests/unit/test_public_surface.py`` holds the two and
``__all__`` to each other.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_HOMES: dict[str, tuple[str, ...]] = {
    "turnledger.domain.blocks": (
        "ContentBlock", "DocumentBlock", "ImageBlock", "OpaqueBlock", "RedactedThinkingBlock",
        "ServerToolResult", "ServerToolUse", "TextBlock", "ThinkingBlock", "canonical_json",
    ),
    "turnledger.domain.bodies": ("APIS", "LeftOut", "fit_messages"),
    "turnledger.domain.budget": (
        "DEFAULT_CONTEXT_TOKENS", "DEFAULT_MAX_HISTORY_TURNS", "Compaction", "HistoryPruning",
        "ProfileDocument",
        "ProviderProfile", "ResolvedRoute", "Route", "RuntimeProfile", "effective_context_budget",
        "request_window", "resolve_capacity", "resolve_route",
    ),
    "turnledger.domain.decider": ("PreparedRequest", "request_digest"),
    "turnledger.domain.errors": (
        "AppendInDoubt", "AppendRefused", "AuditKeyRequired", "ConcurrencyConflict",
        "ContextWindowExceeded", "CorruptRecord", "InvalidKey", "InvalidMessage", "InvalidProfile",
        "InvalidStoreURL",
        "KeyRequired", "NotEncrypted", "SessionExists", "SessionForgottenError", "SessionNotFound",
        "SessionActive", "StoreChanged", "StoreUnavailable", "TranscriptError", "TurnledgerError",
        "UnansweredToolCalls",
        "UnkeyedChain", "WrongKey",
    ),
    "turnledger.domain.estimate": ("IMAGE_TOKEN_ESTIMATE", "estimate_history_tokens"),
    "turnledger.domain.findings": ("Finding", "Rule", "Violation"),
    "turnledger.domain.events": (
        "BreadcrumbInserted", "DomainEvent", "HistoryCleared", "HistoryTrimmed", "MessageAppended",
        "MessagePopped", "OrphansSwept", "OverflowRecovered", "OverflowReported",
        "OverflowUnrecoverable", "RequestPrepared", "RequestRejected", "RouteSelected",
        "SessionForgotten", "SessionStarted", "SummaryRefusal", "SummaryRefused",
        "ToolCallsRestored", "ToolResultsCleared", "TrimDecided", "TurnsSummarized",
    ),
    "turnledger.domain.messages": (
        "BREADCRUMB_TEXT", "AssistantToolCalls", "Chat", "ChatMessage", "ConversationMessage",
        "ToolCall", "ToolResult", "ToolResults", "from_chat_messages", "to_chat_messages",
    ),
    "turnledger.domain.overflow": ("is_context_window_exceeded",),
    "turnledger.domain.pricing": ("Pricing",),
    "turnledger.domain.sweep": ("SweepResult", "sweep_conversation_orphans", "sweep_orphans"),
    "turnledger.domain.trimming": (
        "DEFAULT_MAX_MESSAGE_ROWS", "TrimResult", "trim_conversation_to_recent_turns",
        "trim_to_recent_message_rows", "trim_to_recent_turn_count", "trim_to_recent_turns",
    ),
    "turnledger.domain.truncate": ("DEFAULT_MAX_TOOL_RESULT_CHARS", "truncate_tool_result"),
    "turnledger.profiles": ("load_profile", "load_profile_document"),
    "turnledger.projections.analytics": ("Analytics",),
    "turnledger.providers": (
        "from_anthropic", "from_openai_chat", "from_openai_responses",
        "to_anthropic", "to_openai_chat", "to_openai_responses",
    ),
    "turnledger.replay.audit": ("VerifyReport", "verify"),
    "turnledger.replay.report": ("report",),
    "turnledger.replay.timeline": ("TimelineEntry", "timeline", "views_at"),
    "turnledger.replay.whatif": ("WhatIfReport", "what_if"),
    "turnledger.store.backend": ("retry_on_conflict",),
    "turnledger.store.session": ("Session", "SessionView", "Store", "open_store"),
    "turnledger.store.summaries": ("Summarizer",),
}
_HOME_OF: dict[str, str] = {name: home for home, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    """``turnledger.NAME``: imported from its module on first use, then kept here."""
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module 'turnledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from turnledger.domain.blocks import (
        ContentBlock,
        DocumentBlock,
        ImageBlock,
        OpaqueBlock,
        RedactedThinkingBlock,
        ServerToolResult,
        ServerToolUse,
        TextBlock,
        ThinkingBlock,
        canonical_json,
    )
    from turnledger.domain.bodies import (
        APIS,
        LeftOut,
        fit_messages,
    )
    from turnledger.domain.budget import (
        DEFAULT_CONTEXT_TOKENS,
        DEFAULT_MAX_HISTORY_TURNS,
        Compaction,
        HistoryPruning,
        ProfileDocument,
        ProviderProfile,
        ResolvedRoute,
        Route,
        RuntimeProfile,
        effective_context_budget,
        request_window,
        resolve_capacity,
        resolve_route,
    )
    from turnledger.domain.decider import (
        PreparedRequest,
        request_digest,
    )
    from turnledger.domain.errors import (
        AppendInDoubt,
        AppendRefused,
        AuditKeyRequired,
        ConcurrencyConflict,
        ContextWindowExceeded,
        CorruptRecord,
        InvalidKey,
        InvalidMessage,
        InvalidProfile,
        InvalidStoreURL,
        KeyRequired,
        NotEncrypted,
        SessionActive,
        SessionExists,
        SessionForgottenError,
        SessionNotFound,
        StoreChanged,
        StoreUnavailable,
        TranscriptError,
        TurnledgerError,
        UnansweredToolCalls,
        UnkeyedChain,
        WrongKey,
    )
    from turnledger.domain.estimate import (
        IMAGE_TOKEN_ESTIMATE,
        estimate_history_tokens,
    )
    from turnledger.domain.events import (
        BreadcrumbInserted,
        DomainEvent,
        HistoryCleared,
        HistoryTrimmed,
        MessageAppended,
        MessagePopped,
        OrphansSwept,
        OverflowRecovered,
        OverflowReported,
        OverflowUnrecoverable,
        RequestPrepared,
        RequestRejected,
        RouteSelected,
        SessionForgotten,
        SessionStarted,
        SummaryRefusal,
        SummaryRefused,
        ToolCallsRestored,
        ToolResultsCleared,
        TrimDecided,
        TurnsSummarized,
    )
    from turnledger.domain.findings import (
        Finding,
        Rule,
        Violation,
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
    from turnledger.domain.pricing import (
        Pricing,
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
        load_profile_document,
    )
    from turnledger.projections.analytics import (
        Analytics,
    )
    from turnledger.providers import (
        from_anthropic,
        from_openai_chat,
        from_openai_responses,
        to_anthropic,
        to_openai_chat,
        to_openai_responses,
    )
    from turnledger.replay.audit import (
        VerifyReport,
        verify,
    )
    from turnledger.replay.report import (
        report,
    )
    from turnledger.replay.timeline import (
        TimelineEntry,
        timeline,
        views_at,
    )
    from turnledger.replay.whatif import (
        WhatIfReport,
        what_if,
    )
    from turnledger.store.backend import retry_on_conflict
    from turnledger.store.session import (
        Session,
        SessionView,
        Store,
        open_store,
    )
    from turnledger.store.summaries import Summarizer

__all__ = [
    "APIS",
    "BREADCRUMB_TEXT",
    "DEFAULT_CONTEXT_TOKENS",
    "DEFAULT_MAX_HISTORY_TURNS",
    "DEFAULT_MAX_MESSAGE_ROWS",
    "DEFAULT_MAX_TOOL_RESULT_CHARS",
    "IMAGE_TOKEN_ESTIMATE",
    "Analytics",
    "AppendInDoubt",
    "AppendRefused",
    "AssistantToolCalls",
    "AuditKeyRequired",
    "BreadcrumbInserted",
    "Chat",
    "ChatMessage",
    "Compaction",
    "ConcurrencyConflict",
    "ContentBlock",
    "ContextWindowExceeded",
    "ConversationMessage",
    "CorruptRecord",
    "DocumentBlock",
    "DomainEvent",
    "Finding",
    "HistoryCleared",
    "HistoryPruning",
    "HistoryTrimmed",
    "ImageBlock",
    "InvalidKey",
    "InvalidMessage",
    "InvalidProfile",
    "InvalidStoreURL",
    "KeyRequired",
    "LeftOut",
    "MessageAppended",
    "MessagePopped",
    "NotEncrypted",
    "OpaqueBlock",
    "OrphansSwept",
    "OverflowRecovered",
    "OverflowReported",
    "OverflowUnrecoverable",
    "PreparedRequest",
    "Pricing",
    "ProfileDocument",
    "ProviderProfile",
    "RedactedThinkingBlock",
    "RequestPrepared",
    "RequestRejected",
    "ResolvedRoute",
    "Route",
    "RouteSelected",
    "Rule",
    "RuntimeProfile",
    "ServerToolResult",
    "ServerToolUse",
    "Session",
    "SessionActive",
    "SessionExists",
    "SessionForgotten",
    "SessionForgottenError",
    "SessionNotFound",
    "SessionStarted",
    "SessionView",
    "Store",
    "StoreChanged",
    "StoreUnavailable",
    "Summarizer",
    "SummaryRefusal",
    "SummaryRefused",
    "SweepResult",
    "TextBlock",
    "ThinkingBlock",
    "TimelineEntry",
    "ToolCall",
    "ToolCallsRestored",
    "ToolResult",
    "ToolResults",
    "ToolResultsCleared",
    "TranscriptError",
    "TrimDecided",
    "TrimResult",
    "TurnledgerError",
    "TurnsSummarized",
    "UnansweredToolCalls",
    "UnkeyedChain",
    "VerifyReport",
    "Violation",
    "WhatIfReport",
    "WrongKey",
    "canonical_json",
    "effective_context_budget",
    "estimate_history_tokens",
    "fit_messages",
    "from_anthropic",
    "from_chat_messages",
    "from_openai_chat",
    "from_openai_responses",
    "is_context_window_exceeded",
    "load_profile",
    "load_profile_document",
    "open_store",
    "report",
    "request_digest",
    "request_window",
    "resolve_capacity",
    "resolve_route",
    "retry_on_conflict",
    "sweep_conversation_orphans",
    "sweep_orphans",
    "timeline",
    "to_anthropic",
    "to_chat_messages",
    "to_openai_chat",
    "to_openai_responses",
    "trim_conversation_to_recent_turns",
    "trim_to_recent_message_rows",
    "trim_to_recent_turn_count",
    "trim_to_recent_turns",
    "truncate_tool_result",
    "verify",
    "views_at",
    "what_if",
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
