"""Popping every kept turn, then trimming again: the session goes on, live and restored.

Found by a snapshot property test: after pops removed the message the conversation window
started at, that start was no longer a turn start; a later trim of the chat window summarised
the log around it (ADR-0030), and the next append (or the snapshot) raised ``ValueError:
position 1 is not a turn start of the region`` — a session that could no longer be appended
to. The index now forgets before such a start at once (`SessionState.pop`).
"""

from __future__ import annotations

from pathlib import Path

from turnledger import (
    ChatMessage,
    RuntimeProfile,
    Session,
    ToolResult,
    ToolResults,
    open_store,
)
from turnledger.replay.audit import verify

PROFILE = RuntimeProfile(max_context_tokens=191, max_history_messages=2)


def _pops_then_trims(s: Session) -> None:
    s.append(ChatMessage.user(""))
    s.append(ChatMessage.user("a [IMAGE:photo.png] [IMAGE:/x.png]"))
    s.append(ChatMessage.user("b [IMAGE:...]"))  # the turn limit keeps two turns
    assert s.pop() is not None
    assert s.pop() is not None  # the message the window starts at
    s.append(ChatMessage.user("c"))
    s.append(ChatMessage.user("d"))
    s.append(ToolResults((  # results nobody asked for: the request sweeps them
        ToolResult("call_a", "x", "shell", ("https://example.com/chart.png", "/tmp/shot.png")),
        ToolResult("call_b", "y", "shell", ("https://example.com/chart.png", "/img/d.svg")),
    )))
    s.prepare_request()  # the budget trims the chat window past the popped start


def test_r27a_r31_a_session_whose_kept_turns_were_popped_trims_and_appends_on(
    tmp_path: Path,
) -> None:
    """Appends, requests and snapshots after the pops work; the restored session shows and
    decides the same; the log verifies."""
    url = f"sqlite:///{tmp_path / 'pops.db'}"
    with open_store(url, snapshot_messages=1) as store:
        live = store.start_session(profile=PROFILE)
        _pops_then_trims(live)
        live.append(ChatMessage.user("e"))
        live.append(ChatMessage.assistant("f"))
        live.append(ChatMessage.user("g"))
        request = live.prepare_request()
        session_id = live.id
        assert verify(store.backend).ok
    with open_store(url) as store:
        restored = store.restore(session_id)
        assert restored.chat_view() == live.chat_view()
        assert restored.conversation_view() == live.conversation_view()
        restored.append(ChatMessage.assistant("h"))
        assert [m.content for m in restored.chat_view()][-2:] == ["g", "h"]
        assert request.messages[-1].content == "g"
        assert verify(store.backend).ok
