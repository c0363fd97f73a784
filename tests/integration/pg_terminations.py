"""A fault campaign: PostgreSQL backends terminated while appends run (issue 19 point 4).

Writer threads share one store and append numbered messages, each to its own session, like the
worker threads of a server; every append goes through `retry_on_conflict`, and a caller that
gets `StoreUnavailable` retries the same message on the same session object (for up to
`RETRY_SECONDS`). Meanwhile a terminator calls ``pg_terminate_backend`` on the store's
connections at random moments, aiming in turn at an idle pooled connection (the next checkout
finds it dead), at one inside a transaction (between the INSERT and the COMMIT), at one running
a statement (the INSERT, the COMMIT, a read, the in-doubt check itself) and at all of them at
once. The store's connections are told apart by their ``application_name`` (libpq's
``PGAPPNAME``, set while the campaign runs), so nobody else's backend is touched.

The store reaches the server through `tests.tcp_proxy` with ``connect_timeout=1``; every
``blackout_every`` terminations the proxy cuts every connection and refuses new ones for
`BLACKOUT_SECONDS`, longer than the store keeps asking (`Limits.answer`): the outcome of an
append cut then truly cannot be known in time (`AppendInDoubt`), and the retry must settle it.

Right after each `StoreUnavailable`, an observer connection (never terminated, not proxied)
waits for the writers in flight (a SHARE lock on the events table) and counts the message's
copies: one more than before means the failed attempt stored it — a lie unless the store said
it could not tell (`AppendInDoubt`). At the end a fresh store reads every session: an
acknowledged message missing is lost, a message stored twice is duplicated.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.backends import PG_CONNINFO, PG_URL
from tests.tcp_proxy import CommitCuttingProxy
from turnledger.domain.events import MessageAppended
from turnledger.domain.messages import Chat, ChatMessage
from turnledger.store import backend as store_backend
from turnledger.store.backend import StoreUnavailable, retry_on_conflict
from turnledger.store.mapper import ZERO_CHAIN
from turnledger.store.session import Session, Store, open_store

__all__ = ["BLACKOUT_SECONDS", "RETRY_SECONDS", "Figures", "message_texts", "terminate_campaign"]

RETRY_SECONDS = 60.0
"""How long a caller retries one message before it gives up (counted, never expected)."""
BLACKOUT_SECONDS = 1.5
"""Length of a blackout: more than the 1 s the store keeps asking (``connect_timeout=1``)."""
_PAUSE = (0.0, 0.03)
"""Seconds between an acknowledged append and the next termination (uniform)."""
_PROGRESS_WAIT = 0.5
"""Seconds a terminator waits at most for an append to be acknowledged."""
_AIMS = ("idle", "idle in transaction", "active", "any", "all")


@dataclass
class Figures:
    """What one campaign counted."""

    acknowledged: int = 0
    unavailable: int = 0
    """Appends that raised `StoreUnavailable`."""
    unavailable_stored: int = 0
    """... of which the attempt stored the message all the same."""
    in_doubt: int = 0
    """... of which the store said it could not tell (`AppendInDoubt`)."""
    in_doubt_stored: int = 0
    gave_up: int = 0
    lost: int = 0
    duplicated: int = 0
    blackouts: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    """Terminations by what the backend was doing (its state, or the statement it ran)."""
    errors: Counter[str] = field(default_factory=Counter)
    """Errors other than `StoreUnavailable` an append raised (none expected)."""
    acknowledged_texts: set[str] = field(default_factory=set)

    @property
    def lied(self) -> int:
        """`StoreUnavailable` that said "nothing stored" of an attempt that stored."""
        return self.unavailable_stored - self.in_doubt_stored

    def summary(self) -> str:
        return (
            f"{self.acknowledged} appends acknowledged; {self.unavailable} StoreUnavailable, "
            f"{self.unavailable_stored} of them stored; {self.in_doubt} said in doubt "
            f"(AppendInDoubt), {self.in_doubt_stored} of those stored; {self.lost} lost, "
            f"{self.duplicated} duplicated, {self.gave_up} given up; "
            f"{sum(self.kills.values())} backends terminated, {self.blackouts} blackouts; "
            f"other errors: {dict(self.errors) or 'none'}"
        )


def terminate_campaign(
    proxy: CommitCuttingProxy,
    schema: str,
    *,
    writers: int = 4,
    messages: int = 40,
    blackout_every: int = 60,
    seed: int = 0,
) -> Figures:
    """Run the campaign (module doc) on a store in ``schema`` reached through ``proxy``."""
    url = (f"postgresql://postgres@127.0.0.1:{proxy.port}/test?schema={schema}"
           "&connect_timeout=1")
    victim = f"tl-victim-{uuid.uuid4().hex[:12]}"
    figures = Figures()
    lock = threading.Lock()
    with _application_name(victim), open_store(url) as store:
        sessions = [store.start_session() for _ in range(writers)]
        stop = threading.Event()
        terminator = threading.Thread(target=_terminate, args=(
            _Terminator(victim, proxy, blackout_every, random.Random(seed)), stop, figures, lock
        ))
        threads = [
            threading.Thread(target=_write, args=(store, s, w, messages, figures, lock))
            for w, s in enumerate(sessions)
        ]
        terminator.start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stop.set()
        terminator.join()
    _count_stored(f"{PG_URL}?schema={schema}", [s.id for s in sessions], figures)
    return figures


@contextlib.contextmanager
def _application_name(name: str) -> Iterator[None]:
    """Every libpq connection opened meanwhile without a name of its own is called ``name``."""
    before = os.environ.get("PGAPPNAME")
    os.environ["PGAPPNAME"] = name
    try:
        yield
    finally:
        if before is None:
            del os.environ["PGAPPNAME"]
        else:
            os.environ["PGAPPNAME"] = before


def _text(writer: int, seq: int) -> str:
    return f"w{writer}:{seq}"


def _write(
    store: Store, session: Session, writer: int, messages: int, figures: Figures,
    lock: threading.Lock,
) -> None:
    """One writer: append ``messages`` numbered messages, retrying each after a failure."""
    rng = random.Random(writer)
    with _Observer(store) as observer:
        for seq in range(messages):
            text = _text(writer, seq)
            append = functools.partial(session.append, ChatMessage.user(text))
            copies = 0  # of ``text`` stored so far: a failed attempt stored it if this grew
            deadline = time.monotonic() + RETRY_SECONDS
            while True:
                try:
                    retry_on_conflict(append)
                except StoreUnavailable as error:
                    now = observer.copies(session.id, text)
                    _count_failure(figures, lock, error, stored=now > copies)
                    copies = now
                except Exception as error:  # counted: the test names it
                    with lock:
                        figures.errors[f"{type(error).__name__}: {error}"] += 1
                else:
                    with lock:
                        figures.acknowledged += 1
                        figures.acknowledged_texts.add(text)
                    # A server's worker does something between two appends: without it an
                    # append of ~1 ms (ADR-0089) left the terminator a handful of chances.
                    time.sleep(rng.uniform(0, 0.02))
                    break
                if time.monotonic() > deadline:
                    with lock:
                        figures.gave_up += 1
                    break
                time.sleep(rng.uniform(0, 0.02))


def _count_failure(
    figures: Figures, lock: threading.Lock, error: StoreUnavailable, *, stored: bool
) -> None:
    doubt = _said_in_doubt(error)
    with lock:
        figures.unavailable += 1
        figures.unavailable_stored += stored
        figures.in_doubt += doubt
        figures.in_doubt_stored += stored and doubt
        if stored and not doubt:
            figures.errors[f"stored although: {error}"] += 1


def _said_in_doubt(error: StoreUnavailable) -> bool:
    """Whether ``error`` says that the outcome is unknown: `AppendInDoubt`; a tree from
    before issue 19 (``benchmarks.pg_terminations --before``) said so in words only."""
    in_doubt = getattr(store_backend, "AppendInDoubt", None)
    if in_doubt is None:
        return "cannot tell whether" in str(error)
    return isinstance(error, in_doubt)


class _Observer:
    """A connection of its own (never terminated, not proxied) that reads what is stored."""

    def __init__(self, store: Store) -> None:
        recorder: Any = store.backend.recorder
        self.table = f'"{recorder.datastore.schema}"."{recorder.events_table_name}"'
        self.mapper = store.backend.mapper

    def __enter__(self) -> _Observer:
        import psycopg

        self.connection = psycopg.connect(
            PG_CONNINFO, autocommit=True, application_name="tl-observer"
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.connection.close()

    def copies(self, session_id: str, text: str) -> int:
        """How many times ``text`` is stored in the session, once no insert is in flight."""
        with self.connection.transaction():
            # SHARE waits for every insert transaction (EXCLUSIVE) to end, a dying one too.
            self.connection.execute("SET LOCAL lock_timeout = '20s'")
            self.connection.execute(f"LOCK TABLE {self.table} IN SHARE MODE")
            rows = self.connection.execute(
                f"SELECT originator_version, topic, state FROM {self.table}"
                " WHERE originator_id = %s ORDER BY originator_version",
                (uuid.UUID(session_id),),
            ).fetchall()
        events = self.mapper.decode_rows(
            uuid.UUID(session_id), [(v, t, bytes(s)) for v, t, s in rows], 1, ZERO_CHAIN
        )
        return message_texts([event for event, _ in events]).count(text)


def message_texts(events: Iterable[object]) -> list[str]:
    """The texts of the plain messages among ``events``, in order."""
    return [
        e.message.message.content
        for e in events
        if isinstance(e, MessageAppended) and isinstance(e.message, Chat)
    ]


@dataclass
class _Terminator:
    victim: str
    proxy: CommitCuttingProxy
    blackout_every: int
    rng: random.Random


def _terminate(
    terminator: _Terminator, stop: threading.Event, figures: Figures, lock: threading.Lock
) -> None:
    """Terminate the victim's backends at random moments (about one per acknowledged
    append), with a blackout every ``blackout_every`` terminations, until ``stop``."""
    import psycopg

    rng = terminator.rng
    with psycopg.connect(
        PG_CONNINFO, autocommit=True, application_name="tl-terminator"
    ) as connection:
        kills = 0
        while not stop.is_set():
            _await_progress(figures, stop)
            time.sleep(rng.uniform(*_PAUSE))
            if kills >= terminator.blackout_every:
                kills = 0
                terminator.proxy.black_out(BLACKOUT_SECONDS)
                with lock:
                    figures.blackouts += 1
                stop.wait(BLACKOUT_SECONDS)
            aim = rng.choice(_AIMS)
            deadline = time.monotonic() + 0.05
            while not stop.is_set() and time.monotonic() < deadline:
                hit = _terminate_one(connection, terminator.victim, aim)
                if hit is not None:
                    kills += 1
                    with lock:
                        figures.kills[hit] += 1
                    break


def _await_progress(figures: Figures, stop: threading.Event) -> None:
    """Wait until one more append was acknowledged (at most `_PROGRESS_WAIT`): a campaign
    terminates about one backend per append, however slow the appends are."""
    seen = figures.acknowledged
    deadline = time.monotonic() + _PROGRESS_WAIT
    while figures.acknowledged == seen and time.monotonic() < deadline:
        if stop.wait(0.005):
            return


def _terminate_one(connection: Any, victim: str, aim: str) -> str | None:
    """Terminate one backend of ``victim`` doing ``aim`` (``all``: every one of them); what
    the first one was doing, or None when none was found."""
    state = "" if aim in ("any", "all") else " AND state = %(state)s"
    limit = "" if aim == "all" else " LIMIT 1"
    rows = connection.execute(
        "SELECT pid, state, left(query, 20) FROM pg_stat_activity"
        f" WHERE application_name = %(victim)s{state} ORDER BY random(){limit}",
        {"victim": victim, "state": aim},
    ).fetchall()
    for pid, _, _ in rows:
        connection.execute("SELECT pg_terminate_backend(%s)", (pid,))
    if not rows:
        return None
    _, found, query = rows[0]
    what = f"active: {(query.split() or ['?'])[0]}" if found == "active" else str(found)
    return f"all, the first {what}" if aim == "all" else what


def _count_stored(url: str, session_ids: list[str], figures: Figures) -> None:
    """Count lost and duplicated messages from a fresh store (not proxied)."""
    with open_store(url) as store:
        stored: Counter[str] = Counter()
        for session_id in session_ids:
            stored.update(message_texts(list(store.events_of(session_id))))
    figures.lost = sum(1 for text in figures.acknowledged_texts if stored[text] == 0)
    figures.duplicated = sum(count - 1 for count in stored.values() if count > 1)
