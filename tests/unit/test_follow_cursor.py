"""The follower's cursor against simulated commit orders (issue 23, ADR-0083).

`horizon_page` is the rule PostgreSQL's `follow_page` runs in SQL: rows after the cursor, in
(transaction id, notification id) order, below the oldest transaction still in progress. Here
transactions take their id when they begin (as ``pg_current_xact_id()`` does on the first
insert), draw notification ids from one sequence while others do too, and commit or roll back
in any order; readers read at any moment, with any page size, and resume from their cursor.
Whatever the schedule, every committed row is applied exactly once. The rule a follower used
before (rows after the last notification id) is shown to skip one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.properties import examples
from turnledger.store.backends.port import LogCursor, horizon_page


@dataclass
class _Server:
    """A database's view of transactions: ids, the sequence, what is committed."""

    next_xid: int = 3  # PostgreSQL's first normal transaction id
    next_id: int = 1
    running: dict[int, list[int]] = field(default_factory=dict)  # xid -> its ids
    committed: list[LogCursor] = field(default_factory=list)

    def begin(self) -> int:
        xid, self.next_xid = self.next_xid, self.next_xid + 1
        self.running[xid] = []
        return xid

    def insert(self, xid: int) -> None:
        self.running[xid].append(self.next_id)
        self.next_id += 1  # a sequence: ids are drawn in time order, never given back

    def end(self, xid: int, *, commit: bool) -> None:
        ids = self.running.pop(xid)
        if commit:
            self.committed.extend((xid, i) for i in ids)

    def horizon(self) -> int:
        """``pg_snapshot_xmin(pg_current_snapshot())``: the oldest transaction in progress."""
        return min(self.running, default=self.next_xid)


class _Follower:
    def __init__(self) -> None:
        self.cursor: LogCursor = (0, 0)
        self.applied: list[LogCursor] = []

    def read(self, server: _Server, limit: int, *, crash: bool = False) -> None:
        page = horizon_page(server.committed, server.horizon(), self.cursor, limit)
        if page and not crash:  # a follower killed before its commit applied nothing
            self.applied.extend(page)
            self.cursor = page[-1]


@st.composite
def _schedules(draw: st.DrawFn) -> list[tuple[str, int, int]]:
    """Transactions of 0-3 rows (0: one that writes elsewhere, holding the horizon back),
    their begin, inserts and end interleaved in any order, with reads anywhere."""
    sizes = draw(st.lists(st.integers(0, 3), min_size=1, max_size=6))
    tokens = [t for t, rows in enumerate(sizes) for _ in range(rows + 2)]
    tokens += [-1] * draw(st.integers(0, 10))
    order = draw(st.permutations(tokens))
    seen: dict[int, int] = {}
    steps: list[tuple[str, int, int]] = []
    for token in order:
        if token < 0:
            kind = draw(st.sampled_from(("read", "read", "crash")))
            steps.append((kind, draw(st.integers(0, 3)), draw(st.integers(1, 4))))
            continue
        seen[token] = seen.get(token, 0) + 1
        if seen[token] == 1:
            steps.append(("begin", token, 0))
        elif seen[token] < sizes[token] + 2:
            steps.append(("insert", token, 0))
        else:
            steps.append(("commit" if draw(st.booleans()) else "abort", token, 0))
    return steps


@settings(max_examples=examples(400))
@given(_schedules(), st.integers(1, 3))
def test_the_cursor_never_skips_or_repeats_whatever_the_commit_order(
    schedule: list[tuple[str, int, int]], followers: int
) -> None:
    server = _Server()
    readers = [_Follower() for _ in range(followers)]
    xids: dict[int, int] = {}
    for step, which, limit in schedule:
        if step == "begin":
            xids[which] = server.begin()
        elif step == "insert":
            server.insert(xids[which])
        elif step in ("commit", "abort"):
            server.end(xids[which], commit=step == "commit")
        else:
            readers[which % followers].read(server, limit, crash=step == "crash")
        for reader in readers:
            # Applied rows are final: none of them comes before a row not applied yet.
            done = set(reader.applied)
            pending = [r for r in server.committed if r not in done]
            assert all(r > reader.cursor for r in pending), (reader.cursor, pending)
    assert not server.running
    for reader in readers:
        while True:
            before = len(reader.applied)
            reader.read(server, 3)
            if len(reader.applied) == before:
                break
        assert len(reader.applied) == len(set(reader.applied)), "a row applied twice"
        assert sorted(reader.applied) == sorted(server.committed), "a row skipped"


def test_a_long_transaction_holds_the_readers_back_and_loses_nothing() -> None:
    server = _Server()
    long = server.begin()  # open while everything else happens
    reader = _Follower()
    for _ in range(5):
        xid = server.begin()
        server.insert(xid)
        server.end(xid, commit=True)
    reader.read(server, 100)
    assert reader.applied == []  # the cost: nothing below the long transaction's id yet
    server.end(long, commit=True)
    reader.read(server, 100)
    assert len(reader.applied) == 5


def test_the_id_cursor_skips_a_row_that_commits_late_and_the_horizon_waits_for_it() -> None:
    """Without the table lock, the old rule (rows after the last notification id applied)
    loses a row whose transaction commits after a later id's; the horizon waits for it."""
    server = _Server()
    early, late = server.begin(), server.begin()
    server.insert(early)  # id 1
    server.insert(late)  # id 2
    server.end(late, commit=True)
    reader = _Follower()
    last_id = max(i for _, i in server.committed)  # the old follower applies id 2
    reader.read(server, 10)
    assert reader.applied == []  # the early transaction is in progress: nothing after it
    server.end(early, commit=True)
    assert [i for _, i in server.committed if i > last_id] == []  # id 1: never read by id
    reader.read(server, 10)
    assert reader.applied == [(3, 1), (4, 2)]
