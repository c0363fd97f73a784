"""Hypothesis strategies for turnledger values and every domain event class (STYLE 8, E9).

`EVENT_STRATEGIES` maps each class of `turnledger.domain.events.EVENT_TYPES` to a strategy of
valid instances; `any_event` draws from all of them; `streams_with_every_type` draws one
session's stream (``SessionStarted`` at version 1, then one event of every class) ready to
append. Every value respects the attrs validators, so a strategy failing to build is a bug in
the strategy or in a validator, never flakiness.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID

import attrs
from hypothesis import strategies as st

from turnledger.domain.budget import (
    Compaction,
    HistoryPruning,
    ProviderProfile,
    Route,
    RuntimeProfile,
)
from turnledger.domain.events import (
    EVENT_TYPES,
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
    Purpose,
    RequestPrepared,
    RequestRejected,
    RouteReason,
    RouteSelected,
    SessionForgotten,
    SessionStarted,
    SummaryRefusal,
    SummaryRefused,
    ToolCallsRestored,
    ToolResultsCleared,
    TrimDecided,
    TrimReason,
    TrimTrigger,
    TurnsSummarized,
    UsageRecorded,
    View,
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
)
from turnledger.domain.usage import USAGE_APIS

__all__ = [
    "EVENT_STRATEGIES",
    "any_event",
    "chat_messages",
    "conversation_messages",
    "provider_profiles",
    "routes",
    "runtime_profiles",
    "streams_with_every_type",
    "timestamps",
    "with_position",
]

# Counts fit msgpack's 64-bit integers; the store refuses bigger ones with a ValueError.
counts = st.integers(min_value=0, max_value=2**63 - 1)
small_counts = st.integers(min_value=0, max_value=10_000)
windows = st.none() | st.integers(min_value=1, max_value=2**40)
texts = st.text(max_size=40)
names = st.text(min_size=1, max_size=12)
versions = st.integers(min_value=1, max_value=2**31)

timestamps = st.datetimes(
    min_value=datetime(1900, 1, 1),
    max_value=datetime(2200, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone.min]),
)
"""Aware datetimes in several zones: the store keeps the instant and returns it in UTC."""


# --- messages -------------------------------------------------------------------------------

attachments = st.lists(names, max_size=2).map(tuple)


@st.composite
def chat_messages(draw: st.DrawFn) -> ChatMessage:
    """Any valid ChatMessage, the breadcrumb and tool attachments included."""
    role = draw(st.sampled_from(["system", "user", "assistant", "tool", "breadcrumb"]))
    if role == "breadcrumb":
        return ChatMessage.breadcrumb()
    if role == "tool":
        return ChatMessage.tool(draw(texts), draw(attachments))
    content = draw(texts | st.just(BREADCRUMB_TEXT))  # a real message may say the same text
    return ChatMessage(role, content)


tool_calls = st.builds(ToolCall, id=names, name=texts, arguments=texts)
tool_results = st.builds(
    ToolResult, tool_call_id=names, content=texts, tool_name=texts, attachments=attachments
)
assistant_tool_calls = st.builds(
    AssistantToolCalls,
    text=st.none() | texts,
    tool_calls=st.lists(tool_calls, min_size=1, max_size=3, unique_by=lambda c: c.id).map(tuple),
    reasoning_content=st.none() | texts,
)
conversation_messages: st.SearchStrategy[ConversationMessage] = st.one_of(
    st.builds(Chat, message=chat_messages()),
    assistant_tool_calls,
    st.builds(ToolResults, results=st.lists(tool_results, min_size=1, max_size=3).map(tuple)),
)


# --- configuration --------------------------------------------------------------------------

ratios = st.none() | st.floats(allow_nan=False) | st.integers(min_value=-2, max_value=2)
"""Any number is a valid ratio (R14 treats the odd ones as unset); NaN is left out only
because NaN != NaN would make equal events compare unequal."""

runtime_profiles = st.builds(
    RuntimeProfile,
    max_context_tokens=st.none() | counts,
    context_compact_ratio=ratios,
    history_pruning=st.builds(HistoryPruning, enabled=st.booleans(), max_tokens=counts),
    max_history_messages=st.none() | counts,
    max_tool_result_chars=counts,
    compaction=st.builds(Compaction, clear_tool_results=st.booleans(),
                         keep_tool_result_turns=st.integers(1, 50)),
)


@st.composite
def provider_profiles(draw: st.DrawFn) -> ProviderProfile:
    """A provider with a window or none, and aliases whose keys differ from its model."""
    model = draw(names)
    keys = draw(st.lists(names.filter(lambda k: k != model), max_size=3, unique=True))
    aliases = {key: (draw(names), draw(windows)) for key in keys}
    return ProviderProfile(draw(names), model, draw(windows), aliases)


routes = st.builds(Route, provider=names, model=names)


# --- events ---------------------------------------------------------------------------------

def _event(cls: type[DomainEvent], **fields: st.SearchStrategy[object]) -> st.SearchStrategy[
    DomainEvent
]:
    return st.builds(
        cls, originator_id=st.uuids(), originator_version=versions, timestamp=timestamps, **fields
    )


EVENT_STRATEGIES: dict[type[DomainEvent], st.SearchStrategy[DomainEvent]] = {
    SessionStarted: _event(
        SessionStarted,
        profile=runtime_profiles,
        providers=st.lists(provider_profiles(), max_size=3).map(tuple),
        route=routes,
        legacy=st.booleans(),
    ),
    MessageAppended: _event(
        MessageAppended,
        position=counts,
        message=conversation_messages,
        original_chars=st.none() | counts,
    ),
    RouteSelected: _event(
        RouteSelected,
        route=routes,
        capacity=windows,
        budget=counts,
        window=counts,
        reason=st.sampled_from(RouteReason),
    ),
    TrimDecided: _event(
        TrimDecided,
        view=st.sampled_from(View),
        trigger=st.sampled_from(TrimTrigger),
        reason=st.sampled_from(TrimReason),
        first_kept_position=counts,
        dropped_messages=counts,
        dropped_turns=counts,
        kept_turns=counts,
        tokens_before=counts,
        tokens_after=counts,
        limit=counts,
        budget=st.none() | counts,
    ),
    BreadcrumbInserted: _event(
        BreadcrumbInserted, view=st.sampled_from(View), before_position=counts
    ),
    HistoryTrimmed: _event(
        HistoryTrimmed,
        dropped_messages=counts,
        kept_turns=counts,
        reason=st.sampled_from(TrimReason),
        tokens_before=st.none() | counts,
        tokens_after=st.none() | counts,
        budget=st.none() | counts,
    ),
    RequestPrepared: _event(
        RequestPrepared,
        purpose=st.sampled_from(Purpose),
        route=routes,
        capacity=windows,
        budget=counts,
        window=counts,
        estimated_tokens=counts,
        message_count=counts,
        digest=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
        tool_tokens=counts,
        hook_tokens=counts,
    ),
    RequestRejected: _event(
        RequestRejected,
        purpose=st.sampled_from(Purpose),
        route=routes,
        capacity=windows,
        window=counts,
        estimated_tokens=counts,
        message_count=counts,
        detail=texts,
    ),
    OverflowReported: _event(
        OverflowReported, error=texts, estimated_tokens=counts, target_tokens=counts
    ),
    OverflowRecovered: _event(OverflowRecovered, tokens_before=counts, tokens_after=counts),
    OverflowUnrecoverable: _event(OverflowUnrecoverable, detail=texts),
    OrphansSwept: _event(
        OrphansSwept,
        positions=st.lists(small_counts, max_size=4).map(tuple),
        orphan_tool_call_ids=st.lists(names, max_size=3).map(tuple),
        removed=small_counts,
        rewritten=st.lists(
            st.tuples(small_counts, conversation_messages), max_size=2
        ).map(tuple),
        restorable=st.lists(small_counts, max_size=3).map(tuple),
    ),
    ToolCallsRestored: _event(
        ToolCallsRestored,
        result_position=small_counts,
        tool_call_ids=st.lists(names, min_size=1, max_size=3).map(tuple),
        restored=st.lists(
            st.tuples(small_counts, conversation_messages), min_size=1, max_size=2
        ).map(tuple),
    ),
    MessagePopped: _event(MessagePopped, position=counts, message=conversation_messages),
    HistoryCleared: _event(HistoryCleared, next_position=counts, removed=counts),
    SessionForgotten: _event(SessionForgotten, reason=names),
    ToolResultsCleared: _event(
        ToolResultsCleared,
        positions=st.lists(small_counts, max_size=4).map(tuple),
        tool_call_ids=st.lists(names, max_size=3).map(tuple),
        rewritten=st.lists(
            st.tuples(small_counts, conversation_messages), max_size=2
        ).map(tuple),
        kept_turns=small_counts,
        tokens_before=counts,
        tokens_after=counts,
    ),
    TurnsSummarized: _event(
        TurnsSummarized,
        view=st.sampled_from(View),
        first_position=small_counts,
        last_position=small_counts,
        covers_from=small_counts,
        digest=names,
        text=names,
        summarizer=names,
        tokens=counts,
        replaced_tokens=counts,
    ),
    SummaryRefused: _event(
        SummaryRefused,
        first_position=small_counts,
        last_position=small_counts,
        summarizer=names,
        reason=st.sampled_from(SummaryRefusal),
        detail=names,
    ),
    UsageRecorded: _event(  # issue 35: counts are whole numbers of 0 or more
        UsageRecorded,
        request_position=small_counts,
        digest=names,
        estimated_tokens=counts,
        api=st.sampled_from(USAGE_APIS),
        input_tokens=counts,
        cache_read_tokens=counts,
        cache_write_tokens=counts,
        output_tokens=counts,
    ),
}



def inferred(cls: type[DomainEvent]) -> st.SearchStrategy[DomainEvent]:
    """A strategy for an event class nobody wrote one for (a new view-neutral event): its
    fields drawn from their types, the strategies above registered for the library's own
    values (issue 34: adding such an event touches no test file by hand)."""
    attrs.resolve_types(cls)
    return _event(cls)


st.register_type_strategy(ChatMessage, chat_messages())
st.register_type_strategy(Route, routes)
for _cls in EVENT_TYPES:
    EVENT_STRATEGIES.setdefault(_cls, inferred(_cls))

any_event: st.SearchStrategy[DomainEvent] = st.one_of(*EVENT_STRATEGIES.values())


def with_position(event: DomainEvent, session_id: UUID, version: int) -> DomainEvent:
    """``event`` moved to ``session_id`` at ``version`` (the rest unchanged)."""
    return attrs.evolve(event, originator_id=session_id, originator_version=version)


@st.composite
def streams_with_every_type(draw: st.DrawFn) -> list[DomainEvent]:
    """One session's events, versions 1..n: SessionStarted, then one event of every class."""
    session_id = draw(st.uuids())
    drawn = [draw(EVENT_STRATEGIES[SessionStarted])]
    drawn += [draw(EVENT_STRATEGIES[cls]) for cls in EVENT_TYPES]
    return [with_position(e, session_id, v) for v, e in enumerate(drawn, start=1)]
