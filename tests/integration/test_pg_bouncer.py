"""ADR-0084: a PostgreSQL store works behind PgBouncer in transaction mode (``pooler=transaction``).

The test starts Debian's ``pgbouncer`` itself on a free localhost port with ``pool_mode =
transaction`` in front of the test database, and runs through it what a platform runs: appends
from several threads and processes, restores, a conflict between two writers of one session,
``projections run`` and ``--follow``, and ``verify`` — each checked against the same reads on a
direct connection. A small server pool (2) makes PgBouncer lend the same server connection to
many client connections, so that any session state the backend kept would leak or go missing.
Without the option the default stays as it was: startup ``options`` and session ``SET``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends import PG_URL, pg_execute
from tests.extras import need_program
from turnledger.domain.errors import ConcurrencyConflict, InvalidStoreURL
from turnledger.domain.messages import ChatMessage
from turnledger.projections.analytics import Analytics
from turnledger.store.session import open_store

pytestmark = pytest.mark.postgres

_REPO = Path(__file__).resolve().parents[2]
_CHILD = """
import sys
from turnledger.domain.messages import ChatMessage
from turnledger.store.session import open_store
with open_store(sys.argv[1]) as store:
    session = store.start_session()
    for i in range(int(sys.argv[2])):
        session.append(ChatMessage.user(f"process message {i}"))
    print(session.id)
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def bouncer_port() -> Iterator[int]:
    """PgBouncer in transaction mode on a free port (as ``nobody`` when run as root: it
    refuses to run as root), stopped at the end."""
    program = shutil.which("pgbouncer") or (  # Debian's is in /usr/sbin, not on every PATH
        "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK)
        else need_program("pgbouncer")
    )
    port = _free_port()
    folder = Path(tempfile.mkdtemp(prefix="tl-pgbouncer-"))
    folder.chmod(0o755)  # readable by nobody
    users = folder / "users.txt"
    users.write_text('"postgres" ""\n')
    ini = folder / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        "test = host=127.0.0.1 port=5432 dbname=test user=postgres\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {users}\n"
        "pool_mode = transaction\ndefault_pool_size = 2\nmax_client_conn = 200\n"
    )
    for path in (users, ini):
        path.chmod(0o644)
    command = [program, *(["-u", "nobody"] if os.geteuid() == 0 else []), str(ini)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                output = process.stdout.read().decode() if process.stdout else ""
                pytest.fail(f"pgbouncer did not start: {output[-2000:]}")
            time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def urls(bouncer_port: int, pg_schema: str) -> tuple[str, str]:
    """(through PgBouncer, direct) URLs of one new schema."""
    bounced = (
        f"postgresql://postgres@127.0.0.1:{bouncer_port}/test?schema={pg_schema}"
        "&pooler=transaction&pool_size=3&lock_timeout=5&statement_timeout=30"
    )
    return bounced, f"{PG_URL}?schema={pg_schema}"


def _cli(url: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnledger", "--store", url, *args],
        capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, "PYTHONPATH": str(_REPO)},
    )


def _untimed(text: str) -> str:
    return re.sub(r" in [0-9.]+ s", "", text)


def _views(url: str, ids: list[object]) -> dict[str, list[str]]:
    with open_store(url) as store:
        return {str(i): [m.content for m in store.restore(i).chat_view()] for i in ids}


def _stats(url: str) -> list[dict[str, object]]:
    with open_store(url) as store, Analytics(store.backend) as analytics:
        return sorted(analytics.session_stats(), key=lambda row: str(row["session_id"]))


def test_writes_reads_projections_and_verify_through_pgbouncer_equal_the_direct_ones(
    urls: tuple[str, str],
) -> None:
    bounced, direct = urls
    threads_n, per_thread = 4, 15
    with open_store(bounced) as store:
        sessions = [store.start_session() for _ in range(threads_n)]

        def write(index: int) -> None:
            for i in range(per_thread):
                sessions[index].append(ChatMessage.user(f"thread {index} message {i}"))

        workers = [threading.Thread(target=write, args=(i,)) for i in range(threads_n)]
        children = [
            subprocess.Popen([sys.executable, "-c", _CHILD, bounced, "10"],
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(_REPO)})
            for _ in range(2)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        child_ids = []
        for child in children:
            out, _ = child.communicate(timeout=120)
            assert child.returncode == 0
            child_ids.append(out.strip())

        # A conflict: two objects of one session, the stale one loses and reloads.
        first, second = store.restore(sessions[0].id), store.restore(sessions[0].id)
        first.append(ChatMessage.user("first wins"))
        with pytest.raises(ConcurrencyConflict):
            second.append(ChatMessage.user("stale"))
        second.append(ChatMessage.user("after reload"))

    ids: list[object] = [s.id for s in sessions] + child_ids
    through, straight = _views(bounced, ids), _views(direct, ids)
    assert through == straight
    assert [len(through[str(i)]) for i in ids] == [per_thread + 2] + [per_thread] * 3 + [10, 10]
    assert through[str(sessions[0].id)][-2:] == ["first wins", "after reload"]
    assert "stale" not in through[str(sessions[0].id)]

    assert _cli(bounced, "projections", "run").returncode == 0
    caught_up = _stats(bounced)
    assert caught_up == _stats(direct)
    assert sum(int(str(row["appends"])) for row in caught_up) == sum(map(len, through.values()))

    follower = subprocess.Popen(
        [sys.executable, "-m", "turnledger", "--store", bounced, "projections", "run",
         "--follow", "--interval", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(_REPO)},
    )
    try:
        with open_store(bounced) as store:
            later = store.start_session()
            for i in range(5):
                later.append(ChatMessage.user(f"followed {i}"))
        ids.append(later.id)
        expected = sum(map(len, _views(direct, ids).values()))
        deadline = time.monotonic() + 60
        while sum(int(str(row["appends"])) for row in _stats(direct)) < expected:
            assert follower.poll() is None, follower.communicate()
            assert time.monotonic() < deadline, "the follower behind PgBouncer did not catch up"
            time.sleep(0.1)
    finally:
        follower.send_signal(signal.SIGTERM)
        _, errors = follower.communicate(timeout=30)
    assert follower.returncode == 0, errors
    followed = _stats(bounced)
    with open_store(direct) as store, Analytics(store.backend) as analytics:
        analytics.rebuild()
    assert followed == _stats(direct)  # every event applied once: equal to a rebuild

    for session_id in (ids[0], ids[-1]):
        through_run, straight_run = (_cli(url, "verify", str(session_id))
                                     for url in (bounced, direct))
        assert through_run.returncode == straight_run.returncode == 0, through_run.stderr
        assert _untimed(through_run.stdout) == _untimed(straight_run.stdout)


def test_a_new_store_set_up_by_several_openers_at_once_through_pgbouncer(
    urls: tuple[str, str],
) -> None:
    """The setup lock is a transaction-level advisory lock behind a pooler: openers racing
    on a new schema all open it, and none sees a half-made table."""
    bounced, direct = urls
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            with open_store(bounced) as store:
                store.start_session().append(ChatMessage.user("hello"))
        except BaseException as error:  # reported below
            errors.append(error)

    workers = [threading.Thread(target=opener) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    with open_store(direct) as store:
        assert len(store.sessions()) == 4


def test_each_transaction_sets_its_own_timeouts_and_none_leaks_to_the_server_connection(
    urls: tuple[str, str],
) -> None:
    bounced, _ = urls
    with open_store(bounced) as store:
        datastore = store.backend.recorder.datastore
        with datastore.transaction() as cursor:
            cursor.execute("SELECT current_setting('lock_timeout') AS lock,"
                           " current_setting('statement_timeout') AS statement,"
                           " current_setting('idle_in_transaction_session_timeout') AS idle")
            assert cursor.fetchone() == {"lock": "5s", "statement": "30s", "idle": "5s"}
        with datastore.get_connection() as connection:  # a statement outside a transaction
            row = connection.execute("SELECT current_setting('statement_timeout') AS s").fetchone()
            assert row == {"s": "30s"}
    # The server connections PgBouncer lends keep the server's defaults.
    rows = pg_execute("SELECT count(*) FROM pg_stat_activity WHERE datname = 'test'"
                      " AND query LIKE 'SET idle_in_transaction%%'")
    assert rows[0][0] == 0


def test_the_lock_timeout_binds_the_pipelined_insert_behind_pgbouncer(
    bouncer_port: int, pg_schema: str
) -> None:
    """The URL's lock timeout reaches the library's insert (set in its transaction, queued
    with the BEGIN in the pipeline): an insert blocked by a table lock fails within it."""
    import psycopg

    from tests.backends import PG_CONNINFO
    from turnledger.store.backends.port import StoreUnavailable

    url = (f"postgresql://postgres@127.0.0.1:{bouncer_port}/test?schema={pg_schema}"
           "&pooler=transaction&lock_timeout=0.5")
    with open_store(url) as store:
        session = store.start_session()
        session.append(ChatMessage.user("before"))
        with psycopg.connect(PG_CONNINFO) as blocker:
            blocker.execute(f'LOCK TABLE "{pg_schema}".stored_events IN ACCESS EXCLUSIVE MODE')
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="lock_timeout"):
                session.append(ChatMessage.user("blocked"))
            assert time.monotonic() - started < 10
        assert [m.content for m in store.restore(session.id).chat_view()] == ["before"]


def test_an_encrypted_store_forgets_a_session_behind_pgbouncer(urls: tuple[str, str]) -> None:
    """The keys table (its search path set in each transaction), the rewrite, the snapshots'
    delete and the erasure's VACUUM (schema-qualified: it cannot run in a transaction)."""
    from turnledger.domain.errors import SessionForgottenError
    from turnledger.store.keys import new_key_text

    bounced, direct = urls
    key = new_key_text()
    with open_store(bounced, key=key, snapshot_interval=4) as store:
        gone, kept = store.start_session(), store.start_session()
        for i in range(6):
            gone.append(ChatMessage.user(f"secret {i}"))
            kept.append(ChatMessage.user(f"kept {i}"))
        assert store.forget(gone.id, reason="erasure request") is True
    for url in (bounced, direct):
        with open_store(url, key=key) as store:
            with pytest.raises(SessionForgottenError):
                store.restore(gone.id)
            assert len(store.restore(kept.id).chat_view()) == 6


def test_the_option_is_checked_and_the_default_keeps_session_settings(pg_schema: str) -> None:
    with pytest.raises(InvalidStoreURL, match="pooler must be one of none, transaction"):
        open_store(f"{PG_URL}?schema={pg_schema}&pooler=session")
    with open_store(f"{PG_URL}?schema={pg_schema}&lock_timeout=2") as store:
        pool = store.backend.recorder.datastore.pool
        # The library's idle timeout too, as a startup option rather than a SET (ADR-0089).
        assert pool.kwargs["options"] == (
            "-c lock_timeout=2000ms -c idle_in_transaction_session_timeout=5000ms"
        )
        assert "prepare_threshold" not in pool.kwargs
