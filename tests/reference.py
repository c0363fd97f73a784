"""A reference fold that holds a session's whole conversation window (ADR-0076).

The library has one form of session state: it summarises the conversation window before the
chat window (`Region`). This reference never does, so every view and decision reads held
items only: what the summarised form must agree with, event for event (the lockstep property
test, `tests/unit/test_compact_state.py`). It lives in the tests, not in the library.
"""

from __future__ import annotations

import attrs

from turnledger.domain.budget import RuntimeProfile, session_pricing
from turnledger.domain.messages import ConversationMessage
from turnledger.domain.state import SessionState
from turnledger.domain.window import CONVERSATION_ROWS, Window, WindowIndex, conversation_rows


@attrs.define(eq=False)
class WholeIndex(WindowIndex[ConversationMessage]):
    """A `WindowIndex` that forgets what no view shows but never summarises."""

    def compact_before(self, position: int) -> None:
        """Hold everything: the reference's one difference."""


def _whole_index() -> WindowIndex[ConversationMessage]:
    return WholeIndex(CONVERSATION_ROWS)


@attrs.define
class WholeState(SessionState):
    """A `SessionState` whose index is a `WholeIndex`, from its start and after a clear."""

    index: WindowIndex[ConversationMessage] = attrs.field(factory=_whole_index)

    def start(self, profile: RuntimeProfile) -> None:
        self.profile = profile
        self.index = WholeIndex(conversation_rows(session_pricing(profile)))

    def clear(self, next_position: int) -> None:
        self.index = WholeIndex(self.index.rows, base=next_position)
        self.conversation = self.chat = Window(next_position)
