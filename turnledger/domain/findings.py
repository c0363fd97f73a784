"""What an audit finds wrong: one plain value, whoever finds it (issue 20 point 5).

The store's chain check (`turnledger.store.mapper.verify_chain`, on every checked read and in
`EventStoreBackend.check_chain`) and the audit (`turnledger.audit.verify`) report the same
kind of thing — this session, at this position, breaks this rule, because of this — so they
report it as one `Finding`. A finding of the chain check also says what it found wrong with the
record (``kind``, a `ProblemKind`); the audit's own rules leave ``kind`` None.
`turnledger.audit.Violation` is the same class under the name the public API has always used.
"""

from __future__ import annotations

import enum
from typing import Final

import attrs

from turnledger.domain.errors import bounded

__all__ = ["Finding", "ProblemKind", "Rule", "Violation"]


class Rule(enum.StrEnum):
    """The rule a finding says was broken; the value names the requirement first.

    docs/behaviour.md explains each requirement under its id as anchor (``#e2``, ``#r31``).
    """

    HASH_CHAIN = "E2-hash-chain"
    MISSING_RECORD = "E2-missing-record"
    CORRUPT_RECORD = "E11-corrupt-record"
    SESSION_START = "E2-session-start"
    REPLAY = "E4-replay"
    SNAPSHOT = "E5-snapshot"
    DIGEST = "E6-digest"
    CAPACITY = "R18-capacity"
    BREADCRUMB = "R31-breadcrumb"
    TRIM_NOTICE = "R31-R34-trim-notice"
    TOOL_PAIRING = "R37-tool-pairing"
    ANCHOR = "E2-anchor"
    """The store disagrees with an anchor kept outside it (ADR-0048)."""
    KEYED_CHAIN = "E2-keyed-chain"
    """An audit key was given but the store keeps an unkeyed chain, or records of a keyed
    store are chained without the key (ADR-0047, ADR-0063)."""
    DATA_KEY = "E11-data-key"
    """A session's data key does not open under the store's master key: wrapped by another
    (a writer that kept an old key through a rekey before ADR-0098), or its row changed."""

    @property
    def requirement(self) -> str:
        """The id of the requirement the value names first: ``E2``, ``R31``…"""
        return self.value.split("-", 1)[0]


class ProblemKind(enum.StrEnum):
    """What the chain check found wrong with a record (ADR-0004)."""

    EDITED = "edited"
    MISSING = "missing"
    REORDERED = "reordered"
    UNDECODABLE = "undecodable"
    UNKEYED = "unkeyed"
    """In a keyed store, a record chained with the unkeyed sha256 chain (ADR-0047, ADR-0063)."""


RULE_OF_KIND: Final = {
    ProblemKind.EDITED: Rule.HASH_CHAIN,
    ProblemKind.REORDERED: Rule.HASH_CHAIN,
    ProblemKind.MISSING: Rule.MISSING_RECORD,
    ProblemKind.UNDECODABLE: Rule.CORRUPT_RECORD,
    ProblemKind.UNKEYED: Rule.KEYED_CHAIN,
}
"""The rule a record problem breaks."""


def _bounded_id(text: object) -> str:
    return bounded(str(text), 80)  # a damaged id column can hold anything


@attrs.frozen
class Finding:
    """One finding: ``session_id`` (UUID text), ``position`` (the record's version), the
    ``rule`` it breaks, why (``detail``), and for a record problem its ``kind``."""

    session_id: str = attrs.field(converter=_bounded_id)
    position: int
    rule: Rule
    detail: str = attrs.field(converter=bounded)
    """At most `turnledger.domain.errors.DETAIL_LIMIT` characters, whatever it quotes."""
    kind: ProblemKind | None = None
    """What the chain check found wrong with the record; None for a rule of the audit."""

    @classmethod
    def of_record(cls, session_id: object, position: int, kind: ProblemKind,
                  detail: str) -> Finding:
        """A problem of the record at ``position``, under the rule its kind breaks."""
        return cls(str(session_id), position, RULE_OF_KIND[kind], detail, kind)

    def __str__(self) -> str:
        return f"session {self.session_id} position {self.position}: [{self.rule}] {self.detail}"


Violation = Finding
"""The name the public API has always given a finding of `turnledger.audit.verify`."""
