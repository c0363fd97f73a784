"""A system message a trim kept from the dropped turns is retained: never popped (R4, R9,
ADR-0041), whether the session is live or restored from its snapshot.

Found by `tests/unit/test_compact_state.py`: a live session popped such a message while the
index still held it at its log position (it forgets in amortised steps), and the same
session restored from a snapshot (which forgets at once) popped nothing.
"""

from __future__ import annotations

from pathlib import Path

from turnledger import (
    AssistantToolCalls,
    Chat,
    ChatMessage,
    RuntimeProfile,
    Session,
    ToolCall,
    ToolResult,
    ToolResults,
    open_store,
)
from turnledger.replay.audit import verify

PROFILE = RuntimeProfile(max_context_tokens=40, max_history_messages=2)


def _script(session: Session) -> None:
    """Turns, a late system message, then trims by the turn limit that drop its turn."""
    append = session.append
    append(ChatMessage.user("q1"))
    append(AssistantToolCalls(None, (ToolCall("call_1", "shell", "{}"),)))
    append(ToolResults((ToolResult("call_1", "", "shell"),)))
    append(ChatMessage.user("q2"))
    append(ChatMessage.system("sys late"))
    append(ChatMessage.user("q3"))
    append(ChatMessage.assistant("a3"))
    append(ChatMessage.user("q4"))


def test_r4_r9_a_retained_late_system_message_is_not_popped_live_or_restored(
    tmp_path: Path,
) -> None:
    """After the turns are popped, the late system message the trims kept stays: the live
    session and the restored one (snapshot after every message) both answer None, show the
    same view, and the log verifies."""
    url = f"sqlite:///{tmp_path / 'pop.db'}"
    popped: dict[str, list[object]] = {}
    views = {}
    with open_store(url, snapshot_messages=1) as store:
        live = store.start_session(profile=PROFILE)
        _script(live)
        other = store.start_session(profile=PROFILE)
        _script(other)
        popped["live"] = [live.pop() for _ in range(4)]
        views["live"] = live.conversation_view()
    with open_store(url, snapshot_messages=1) as store:
        restored = store.restore(other.id)
        popped["restored"] = [restored.pop() for _ in range(4)]
        views["restored"] = restored.conversation_view()
        assert verify(store.backend).ok
    kept = Chat(ChatMessage.system("sys late"))
    for name in ("live", "restored"):
        assert [type(m).__name__ for m in popped[name][:3]] == ["Chat", "Chat", "Chat"], name
        assert popped[name][3] is None, name
        assert kept in views[name], name
    assert views["live"] == views["restored"]
