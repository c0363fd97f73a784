"""turnledger: event-sourced conversation history for LLM agent runtimes.

The public surface of API.md, re-exported. See README.md for a tour.
"""

__version__ = "0.1.0"

from turnledger.domain.budget import (
    DEFAULT_CONTEXT_TOKENS,
    DEFAULT_MAX_HISTORY_TURNS,
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
from turnledger.domain.decider import PreparedRequest, request_digest
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
from turnledger.domain.estimate import IMAGE_TOKEN_ESTIMATE, estimate_history_tokens
from turnledger.domain.events import (
    BreadcrumbInserted,
    DomainEvent,
    HistoryTrimmed,
    MessageAppended,
    OrphansSwept,
    OverflowRecovered,
    OverflowReported,
    OverflowUnrecoverable,
    RequestPrepared,
    RequestRejected,
    RouteSelected,
    SessionStarted,
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
from turnledger.domain.overflow import is_context_window_exceeded
from turnledger.domain.sweep import SweepResult, sweep_conversation_orphans, sweep_orphans
from turnledger.domain.trimming import (
    DEFAULT_MAX_MESSAGE_ROWS,
    TrimResult,
    trim_conversation_to_recent_turns,
    trim_to_recent_message_rows,
    trim_to_recent_turn_count,
    trim_to_recent_turns,
)
from turnledger.domain.truncate import DEFAULT_MAX_TOOL_RESULT_CHARS, truncate_tool_result
from turnledger.profiles import load_profile, load_profile_document
from turnledger.projections.analytics import Analytics
from turnledger.replay.audit import VerifyReport, Violation, verify
from turnledger.replay.timeline import TimelineEntry, timeline, views_at
from turnledger.replay.whatif import WhatIfReport, what_if
from turnledger.store.backend import InvalidStoreURL, StoreUnavailable, retry_on_conflict
from turnledger.store.session import Session, Store, open_store

__all__ = [
    "BREADCRUMB_TEXT",
    "DEFAULT_CONTEXT_TOKENS",
    "DEFAULT_MAX_HISTORY_TURNS",
    "DEFAULT_MAX_MESSAGE_ROWS",
    "DEFAULT_MAX_TOOL_RESULT_CHARS",
    "IMAGE_TOKEN_ESTIMATE",
    "Analytics",
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
    "InvalidStoreURL",
    "MessageAppended",
    "OrphansSwept",
    "OverflowRecovered",
    "OverflowReported",
    "OverflowUnrecoverable",
    "PreparedRequest",
    "ProfileDocument",
    "ProviderProfile",
    "RequestPrepared",
    "RequestRejected",
    "ResolvedRoute",
    "Route",
    "RouteSelected",
    "RuntimeProfile",
    "Session",
    "SessionNotFound",
    "SessionStarted",
    "Store",
    "StoreUnavailable",
    "SweepResult",
    "TimelineEntry",
    "ToolCall",
    "ToolResult",
    "ToolResults",
    "TrimDecided",
    "TrimResult",
    "TurnledgerError",
    "UnansweredToolCalls",
    "VerifyReport",
    "Violation",
    "WhatIfReport",
    "effective_context_budget",
    "estimate_history_tokens",
    "from_chat_messages",
    "is_context_window_exceeded",
    "load_profile",
    "load_profile_document",
    "open_store",
    "request_digest",
    "request_window",
    "resolve_capacity",
    "resolve_route",
    "retry_on_conflict",
    "sweep_conversation_orphans",
    "sweep_orphans",
    "timeline",
    "to_chat_messages",
    "trim_conversation_to_recent_turns",
    "trim_to_recent_message_rows",
    "trim_to_recent_turn_count",
    "trim_to_recent_turns",
    "truncate_tool_result",
    "verify",
    "views_at",
    "what_if",
]
