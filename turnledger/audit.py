"""Looking back at what a store recorded, public (ADR-0101): the audit (`verify`, its report
and findings), the timeline and the views at any position, what-if, the HTML report, the
analytics tables and the digest that ties a sent request to its `RequestPrepared`.

The command line's ``verify``, ``replay``, ``what-if``, ``report`` and ``stats`` are these
functions. Importing this module loads the store's reading side; `import turnledger` does not.
"""

from turnledger.domain.decider import request_digest
from turnledger.domain.findings import Finding, ProblemKind, Rule, Violation
from turnledger.projections.analytics import Analytics
from turnledger.replay.audit import VerifyReport, verify
from turnledger.replay.report import report
from turnledger.replay.timeline import TimelineEntry, timeline, views_at
from turnledger.replay.whatif import WhatIfReport, what_if

__all__ = [
    "Analytics",
    "Finding",
    "ProblemKind",
    "Rule",
    "TimelineEntry",
    "VerifyReport",
    "Violation",
    "WhatIfReport",
    "report",
    "request_digest",
    "timeline",
    "verify",
    "views_at",
    "what_if",
]
