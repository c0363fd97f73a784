"""One agent process of the issue-33 tests: it writes while an operator changes the store.

Usage: ``python admin_writer_child.py URL KEYS_FILE OUT_FILE STOP_FILE MODE [SESSIONS_FILE]``.

KEYS_FILE holds ``{"key": ..., "audit_key": ...}`` (either may be null): the keys the process
opens the store with, read again whenever the store refuses it (`StoreChanged`, `WrongKey`,
`AuditKeyRequired`, `UnkeyedChain`): the operator hands the new keys to the agents, which
reopen — as a deployment would restart them. MODE ``new`` starts a new session per message
(each needs a new data key); ``existing`` appends to the sessions listed in SESSIONS_FILE
(one id a line), round robin. After each append returned, the process prints one JSON line to
OUT_FILE (flushed): ``{"session": ID, "text": TEXT, "at": UNIX_TIME}``; each refusal prints
``{"refused": ERROR_CLASS}``. It stops when STOP_FILE exists, or after 60 s
(``TL_I33_AGENT_SECONDS``: the longer runs of `benchmarks.admin_under_writers`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import turnledger as tl
from turnledger.domain import errors
from turnledger.domain.errors import (
    AuditKeyRequired,
    ConcurrencyConflict,
    SessionForgottenError,
    UnkeyedChain,
    WrongKey,
)

# The same child measures a tree from before ADR-0098 (`benchmarks.admin_under_writers
# --before`), which has no StoreChanged.
_REOPEN: tuple[type[Exception], ...] = (
    getattr(errors, "StoreChanged", WrongKey), WrongKey, AuditKeyRequired, UnkeyedChain
)
_LIMIT = float(os.environ.get("TL_I33_AGENT_SECONDS", "60"))


def _open(url: str, keys_file: Path, stop: Path) -> tl.Store | None:
    """The store opened with the keys of KEYS_FILE, tried again while they do not fit (the
    operator has not handed out the new ones yet); None once STOP_FILE exists."""
    while not stop.exists():
        keys = json.loads(keys_file.read_text())
        try:
            return tl.open_store(url, key=keys.get("key"), audit_key=keys.get("audit_key"))
        except _REOPEN:
            time.sleep(0.05)
    return None


def main(argv: list[str]) -> int:
    url, keys_file, out_file, stop_file, mode = argv[:5]
    sessions = Path(argv[5]).read_text().split() if len(argv) > 5 else []
    keys, stop = Path(keys_file), Path(stop_file)
    deadline = time.monotonic() + _LIMIT
    store = _open(url, keys, stop)
    live: dict[str, tl.Session] = {}
    count = 0
    with open(out_file, "a", encoding="utf-8") as out:
        while store is not None and not stop.exists() and time.monotonic() < deadline:
            count += 1
            text = f"{mode}-{count}-{time.time_ns()}"
            session_id = ""
            try:
                if mode == "new":
                    session = store.start_session()
                    session_id = session.id
                    session.append(tl.ChatMessage.user(text))
                else:
                    if not sessions:  # every one was forgotten: wait to be stopped
                        time.sleep(0.05)
                        continue
                    session_id = sessions[count % len(sessions)]
                    session = live.get(session_id) or store.restore(session_id)
                    live[session_id] = session
                    session.append(tl.ChatMessage.user(text))
            except _REOPEN as error:
                out.write(json.dumps({"refused": type(error).__name__}) + "\n")
                out.flush()
                store.close()
                live.clear()
                store = _open(url, keys, stop)
                continue
            except SessionForgottenError:
                sessions.remove(session_id)
                live.pop(session_id, None)
                continue
            except ConcurrencyConflict:
                live.pop(session_id, None)  # restored again next time
                continue
            out.write(json.dumps({"session": session_id, "text": text, "at": time.time()})
                      + "\n")
            out.flush()
    if store is not None:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
