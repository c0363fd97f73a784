"""The ``turnledger`` command: thin — parse, call the package, print.

Exit codes: 0 success, 1 a check failed (verify found violations, a stored record is corrupt),
2 bad usage or bad input (one-line reason on stderr; a rejected import line is bad input, the
other lines are still imported: docs/cli.md, Exit codes), 3 the store is unavailable (it cannot
be reached, or a wait ran into a limit of its URL such as ``lock_timeout``: trying again later
may succeed).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn, TextIO, TypeVar
from uuid import UUID

from turnledger.domain.errors import (
    CorruptRecord,
    SessionActive,
    StoreUnavailable,
    TurnledgerError,
    bounded,
)
from turnledger.replay.formats import AGENT_FORMATS, AUTO, FORMATS
from turnledger.store import DEFAULT_STORE_URL

if TYPE_CHECKING:
    from turnledger.domain.budget import ProviderProfile, Route, RuntimeProfile

__all__ = ["main"]

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
T = TypeVar("T")
RULES_DOC = "docs/behaviour.md"
"""Where the rule ids the output cites (R1-R40, E1-E12) are explained, one anchor per id."""


class UsageError(Exception):
    """Bad usage or bad input: exit 2 with a one-line reason."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


# --- output helpers ------------------------------------------------------------------------

def _table(rows: Sequence[Sequence[object]], headers: Sequence[str], out: TextIO) -> None:
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("  ".join(c.rjust(w) if _numeric(c) and n else c.ljust(w)
                        for c, w in zip(row, widths)).rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)


def _cell(value: object) -> str:
    from turnledger.replay.timeline import printable

    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return printable(str(value))  # stored text must not drive the terminal


def _numeric(text: str) -> bool:
    return text.replace(",", "").replace(".", "").replace("-", "").isdigit()


class _Progress:
    """A one-line progress bar on stderr, only when stderr is a terminal."""

    def __init__(self, label: str, stream: TextIO = sys.stderr) -> None:
        self.label = label
        self.stream = stream
        self.enabled = stream.isatty()
        self.shown = False

    def __call__(self, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        if total:
            filled = int(30 * min(done, total) / total)
            bar = "#" * filled + "." * (30 - filled)
            text = f"\r{self.label} [{bar}] {done:,}/{total:,}"
        else:
            text = f"\r{self.label} {done:,}"
        self.stream.write(text)
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def _dump_json(value: object, out: TextIO) -> None:
    print(json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2), file=out)


# --- commands -------------------------------------------------------------------------------

def _keys(args: argparse.Namespace) -> dict[str, Any]:
    """The keys for `open_store`: ``--key-file`` / ``--audit-key-file``, else the
    environment (TURNLEDGER_KEY, TURNLEDGER_AUDIT_KEY), which `open_store` reads itself."""
    from turnledger.store.keys import read_key_file

    keys: dict[str, Any] = {}
    if getattr(args, "key_file", None):
        keys["key"] = read_key_file(args.key_file, "key")
    if getattr(args, "audit_key_file", None):
        keys["audit_key"] = read_key_file(args.audit_key_file, "audit key")
    return keys


def _audit_key(args: argparse.Namespace) -> bytes | None:
    from turnledger.store.keys import parse_key
    from turnledger.store.session import AUDIT_KEY_VARIABLE

    given = _keys(args).get("audit_key")
    if given is not None:
        return bytes(given)
    text = os.environ.get(AUDIT_KEY_VARIABLE)
    return parse_key(text, "audit key") if text else None


def _master_key(args: argparse.Namespace) -> bytes | None:
    from turnledger.store.keys import parse_key
    from turnledger.store.session import KEY_VARIABLE

    given = _keys(args).get("key")
    if given is not None:
        return bytes(given)
    text = os.environ.get(KEY_VARIABLE)
    return parse_key(text, "key") if text else None


def _salvage_keys(args: argparse.Namespace) -> dict[str, bytes | None]:
    """The keys a salvage of an encrypted or keyed store reads with."""
    return {"key": _master_key(args), "audit_key": _audit_key(args)}


def _open(args: argparse.Namespace, **options: Any) -> Any:
    from turnledger.store.session import open_store

    return open_store(args.store, **_keys(args), **options)


def _open_for_reading(args: argparse.Namespace, **options: Any) -> Any:
    """The store for a command that writes no event; a read-only SQLite store is opened
    read-only (``mode=ro``) rather than refused. ``args.read_only`` says which happened.
    A SQLite file that does not exist is a usage error: a read command never creates a store."""
    from turnledger.store.session import open_store

    keys = _keys(args)  # a bad key file is said first, whatever the store
    _require_store_file(args.store)
    args.read_only = False
    try:
        store = open_store(args.store, **keys, **options)
    except TurnledgerError as error:
        fallback = _read_only_url(args.store)
        if fallback is None:
            raise
        try:
            store = open_store(fallback, **keys, **options)
        except TurnledgerError:
            raise error from None
        args.read_only = True
        return store
    args.read_only = _read_only(store)  # mode=ro given
    return store


def _open_existing(args: argparse.Namespace, command: str, **options: Any) -> Any:
    """The store for a command that changes an existing store (forget, purge, rekey,
    rechain, projections run): a SQLite file that does not exist is a usage error (a mistyped
    path would otherwise be a new, empty store the command reports on as done), and so is a
    store opened read-only."""
    from turnledger.store.session import open_store

    keys = _keys(args)  # a bad key file is said first, whatever the store
    _require_store_file(args.store, f"{command} changes an existing store and never creates "
                                    "one")
    store = open_store(args.store, **keys, **options)
    if _read_only(store):
        store.close()
        raise UsageError(f"{command} writes to the store, which is opened read-only "
                         "(mode=ro); open it without mode=ro")
    return store


def _read_only(store: Any) -> bool:
    """Whether ``store`` was opened read-only (SQLite's ``mode=ro``)."""
    return bool(getattr(store.backend.database, "read_only", False))


def _sqlite_file(url: str) -> str | None:
    """The file a ``sqlite://`` URL names; None for another store or an in-memory database."""
    import urllib.parse

    scheme, _, rest = url.partition("://")
    if scheme.lower() != "sqlite" or not rest.startswith("/") or "mode=memory" in rest:
        return None
    path = urllib.parse.unquote(rest[1:].partition("?")[0])
    return None if path in ("", ":memory:") else os.path.abspath(path)


def _require_store_file(url: str, why: str = "a read command never creates one") -> None:
    path = _sqlite_file(url)
    if path is not None and not os.path.exists(path):
        raise UsageError(f"no store at {path} ({why}; check --store or TURNLEDGER_STORE)")


def _read_only_url(url: str) -> str | None:
    """``url`` with ``mode=ro`` when it names an existing SQLite file that may not be written
    here (its file or directory); None otherwise."""
    import urllib.parse

    scheme, _, rest = url.partition("://")
    if scheme.lower() != "sqlite" or not rest.startswith("/") or "mode=" in rest:
        return None
    path = os.path.abspath(urllib.parse.unquote(rest[1:].partition("?")[0]))
    writable = os.access(path, os.W_OK) and os.access(os.path.dirname(path), os.W_OK)
    if not os.path.isfile(path) or writable:
        return None
    return f"{url}{'&' if '?' in rest else '?'}mode=ro"


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from turnledger.demo import run_demo
    from turnledger.projections.analytics import Analytics
    from turnledger.store.backends.port import redact_url

    with _open(args) as store:
        print(f"store: {redact_url(args.store)}", file=out)
        session = run_demo(store, out)
        with Analytics(store.backend) as analytics:
            analytics.catch_up()
            stats = [s for s in analytics.session_stats() if s["session_id"] == session.id]
        print("\n== stats (turnledger stats) ==", file=out)
        _print_session_stats(stats, out)
    if args.store.lower().startswith("memory:"):
        print("\nnext: memory:// keeps nothing once this command ends; run the demo on a file "
              "to replay it: turnledger --store sqlite:///demo.db demo", file=out)
    else:
        print(f"\nnext: turnledger --store {redact_url(args.store)} replay {session.id}",
              file=out)
    print(f"rule ids such as R18 are explained in {RULES_DOC} (e.g. {RULES_DOC}#r18)", file=out)
    return EXIT_OK


def _print_session_stats(rows: list[dict[str, Any]], out: TextIO) -> None:
    columns = [
        ("session", "session_id"), ("appends", "appends"),
        ("trims budget", "trims_token_budget"), ("trims turns", "trims_turn_limit"),
        ("msgs dropped", "messages_dropped"), ("tokens dropped", "tokens_dropped"),
        ("prepared", "requests_prepared"), ("rejected", "requests_rejected"),
        ("overflows", "overflow_recoveries"), ("swept", "orphans_removed"),
        ("peak tokens", "peak_estimated_tokens"), ("peak window", "peak_window"),
    ]
    table_rows = [
        [str(r.get(k, ""))[:8] if k == "session_id" else r.get(k) for _, k in columns]
        for r in rows
    ]
    _table(table_rows, [h for h, _ in columns], out)


def _import_profile(
    args: argparse.Namespace,
) -> tuple[RuntimeProfile | None, tuple[ProviderProfile, ...], Route | None]:
    from turnledger.profiles import load_profile_document

    if not args.profile:
        return None, (), None
    document = load_profile_document(args.profile)
    return document.runtime, document.providers, document.route


def _live_changes(events: Sequence[Any]) -> list[str]:
    """What recording as a live runtime changed: truncations (R38) and trims (R27a)."""
    from turnledger.domain.events import MessageAppended, TrimDecided

    found: list[str] = []
    trims: dict[str, list[int]] = {}
    for event in events:
        if isinstance(event, MessageAppended) and event.original_chars is not None:
            found.append(f"message {event.position}: a tool result of {event.original_chars:,} "
                         "characters was truncated (R38)")
        elif isinstance(event, TrimDecided):
            counts = trims.setdefault(f"{event.reason} trims of the {event.view} view", [0, 0, 0])
            counts[0] += 1
            counts[1] += event.dropped_turns
            counts[2] += event.dropped_messages
    found += [f"{n} {what} dropped {turns} turns ({messages} messages)"
              for what, (n, turns, messages) in trims.items()]
    return found


_IMPORT_NAMESPACE = b"turnledger import v1\n"
"""Names the session a line is imported as: the same line (its format and JSON value) imported
the same way (profile file, --as-live) is the same session, so importing a file again skips
what already landed."""


def _line_session_id(conversation: Any, args: argparse.Namespace) -> UUID:
    import hashlib

    from turnledger.domain.blocks import canonical_json

    profile = Path(args.profile).read_bytes() if args.profile else b""
    digest = hashlib.sha256(_IMPORT_NAMESPACE)
    for part in (conversation.format.encode(), hashlib.sha256(profile).digest(),
                 b"live" if args.as_live else b"as recorded",
                 canonical_json(conversation.raw).encode("utf-8", "surrogatepass")):
        digest.update(len(part).to_bytes(8, "big") + part)
    return UUID(bytes=digest.digest()[:16], version=5)


def _import_line(
    store: Any, conversation: Any, args: argparse.Namespace, settings: tuple[Any, Any, Any]
) -> dict[str, Any]:
    """Record one parsed line as a session, whole or not at all; what it imported, or
    ``skipped`` when the store holds that line already (a session of the line's id)."""
    from turnledger.domain.errors import ConcurrencyConflict
    from turnledger.domain.turns import is_turn_start_item
    from turnledger.replay.transcripts import changes

    profile, providers, route = settings
    session_id = None if args.again else _line_session_id(conversation, args)
    history = conversation.history
    row = {"line": conversation.line, "format": conversation.format,
           "detected": args.format == AUTO, "messages": len(history),
           "turns": sum(1 for item in history if is_turn_start_item(item))}
    try:
        session = store.import_conversation(
            history, profile, providers, route, as_live=args.as_live, session_id=session_id
        )
    except ConcurrencyConflict:
        return {**row, "session": str(session_id), "skipped": True, "warnings": []}
    warnings = changes(conversation, conversation.format)
    if args.as_live:
        warnings += _live_changes(session.events())
    return {**row, "session": session.id, "skipped": False, "warnings": warnings}


def cmd_import(args: argparse.Namespace, out: TextIO) -> int:
    from turnledger.providers import TranscriptError
    from turnledger.replay.transcripts import read_conversations, stream_lines

    path = Path(args.file)
    try:
        handle = path.open("rb")
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    settings = _import_profile(args)
    rows: list[dict[str, Any]] = []
    rejected: list[str] = []
    progress = _Progress("importing")
    with handle:
        try:
            lines = read_conversations(stream_lines(handle), args.format)
            first = next(lines, None)
        except (OSError, TranscriptError) as error:
            raise UsageError(f"cannot read {path}: {error}") from None
        if first is None:
            print(f"turnledger: warning: {path} holds no conversation (no line that is not "
                  "blank): nothing imported, no store opened", file=sys.stderr)
            if args.json:
                _dump_json({"imported": [], "skipped": [], "rejected": []}, out)
            return EXIT_OK
        if args.store.lower().startswith("memory:"):
            print("turnledger: warning: memory:// keeps nothing once this command ends: "
                  "import into a sqlite:/// or postgresql:// store to keep it", file=sys.stderr)
        _import_lines(args, out, itertools.chain((first,), lines), path, settings, rows, rejected,
                      progress)
    progress.close()
    if args.json:
        _dump_json({"imported": [r for r in rows if not r["skipped"]],
                    "skipped": [r for r in rows if r["skipped"]], "rejected": rejected}, out)
    return EXIT_USAGE if rejected else EXIT_OK


def _import_lines(
    args: argparse.Namespace, out: TextIO, lines: Iterable[Any], path: Path, settings: Any,
    rows: list[dict[str, Any]], rejected: list[str], progress: Any,
) -> None:
    from turnledger.providers import TranscriptError

    # The store is opened at the first line that can be recorded: a file of refused lines
    # leaves no store file behind (issue 36).
    with contextlib.ExitStack() as opened:
        store = None
        try:
            for parsed in lines:
                if isinstance(parsed, TranscriptError):
                    _reject(rejected, f"{path}:{parsed}")
                    continue
                progress(parsed.line, None)
                if store is None:
                    store = opened.enter_context(_open(args))
                try:
                    row = _import_line(store, parsed, args, settings)
                except TurnledgerError as error:  # e.g. a lone surrogate: none of it stored
                    _reject(rejected, f"{path}:line {parsed.line}: {error}")
                    continue
                rows.append(row)
                if not args.json:
                    _print_import(row, out)  # as it commits: an interrupted import says so
        except (OSError, TranscriptError) as error:
            raise UsageError(f"cannot read {path}: {error}") from None


def _reject(rejected: list[str], reason: str) -> None:
    rejected.append(reason)
    print(f"turnledger: rejected {reason}", file=sys.stderr, flush=True)


def _count(number: int, noun: str) -> str:
    """``1 turn``, ``2 turns``, ``1,000 turns``."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _print_import(row: dict[str, Any], out: TextIO) -> None:
    if row["skipped"]:
        print(f"{row['session']}\tline {row['line']}: already imported, skipped (--again "
              "imports it anyway)", file=out, flush=True)
        return
    read_as = f" (read as {row['format']})" if row["detected"] else ""
    print(f"{row['session']}\tline {row['line']}: {_count(row['messages'], 'message')}, "
          f"{_count(row['turns'], 'turn')}{read_as}", file=out, flush=True)
    for warning in row["warnings"]:
        print(f"turnledger: warning: line {row['line']}: {warning}", file=sys.stderr,
              flush=True)


def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    from turnledger.replay.transcripts import record_of, write_record, write_view

    with _open_for_reading(args) as store:
        if args.view == "chat":
            line, left_out = write_view(store.read_state(args.session).chat_view(), args.format)
        else:
            _require_session(store, args.session)
            pages = store.event_pages(args.session)
            line, left_out = write_record(record_of(e for page in pages for e in page),
                                          args.format)
    print(line, file=out)
    for entry in left_out:
        print(f"turnledger: warning: message {entry.message}: {entry.what} left out: "
              f"{entry.reason}", file=sys.stderr)
    return EXIT_OK


def _require_session(store: Any, session: str) -> None:
    """Raise `SessionNotFound` unless the store holds ``session`` (reads its head only)."""
    from turnledger.domain.errors import SessionNotFound
    from turnledger.store.session import parse_session_id

    uuid = parse_session_id(session)
    if store.backend.head(uuid)[0] == 0:
        raise SessionNotFound(f"no session {uuid} in this store")


def _salvaging(args: argparse.Namespace, read: Callable[[Any], T]) -> tuple[T, bool]:
    """``read(backend)`` on the store; on a damaged SQLite store, on what can be salvaged.

    The second value is True when the store was damaged: each unreadable row or region is
    reported on stderr (the caller exits 1).
    """
    from turnledger.store.salvage import salvage_sqlite

    try:
        with _open_for_reading(args) as store:
            return read(store.backend), False
    except Exception as error:
        path = _damaged_path(args, error)
        if path is None:
            raise
        print(f"turnledger: damaged store: {_one_line(error)}; reading what can be salvaged",
              file=sys.stderr)
        salvage = salvage_sqlite(path, **_salvage_keys(args))
    with salvage:
        for damage in salvage.damage:
            print(f"turnledger: skipped: session {damage.session_id} version {damage.version}: "
                  f"{damage.detail}", file=sys.stderr)
        return read(salvage.backend), True


def _damaged_path(args: argparse.Namespace, error: BaseException) -> str | None:
    """The SQLite file behind ``--store`` when ``error`` says its bytes are damaged."""
    from turnledger.store.salvage import damaged_sqlite_path, is_damage

    return damaged_sqlite_path(args.store) if is_damage(error) else None


def cmd_sessions(args: argparse.Namespace, out: TextIO) -> int:
    from turnledger.replay.timeline import session_summaries
    from turnledger.store.session import parse_session_id

    after = None if args.after is None else parse_session_id(args.after)
    # One more than the page: a next page is announced only when there is one.
    limit = None if args.limit is None else args.limit + 1
    rows, damaged = _salvaging(
        args, lambda backend: session_summaries(backend, after=after, limit=limit)
    )
    status = EXIT_CHECK_FAILED if damaged else EXIT_OK
    if args.limit is not None and len(rows) > args.limit:
        rows = rows[:args.limit]
        print(f"turnledger: next page: sessions --after {rows[-1]['session_id']} "
              f"--limit {args.limit}", file=sys.stderr)
    if args.json:
        _dump_json(rows, out)
        return status
    if not rows:
        print("no sessions", file=out)
        return status
    _table(
        [[r["session_id"], r["started_at"], r["legacy"], r["events"], r["messages"],
          r["trims"], r["requests"], r["route"]] for r in rows],
        ["session", "started", "legacy", "events", "messages", "trims", "requests", "route"],
        out,
    )
    return status


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    from turnledger.domain.messages import to_chat_messages
    from turnledger.replay.timeline import printable, timeline, views_at

    with _open_for_reading(args) as store:
        events = store.events_of(args.session)
    if args.at is not None or args.view is not None:
        at = len(events) if args.at is None else args.at
        if not 1 <= at <= len(events):
            raise UsageError(f"--at must be between 1 and {len(events)}, got {at}")
        chat, conversation = views_at(events, at)
        view = args.view or "chat"
        messages = chat if view == "chat" else to_chat_messages(conversation)
        if args.json:
            payload = [
                {"role": m.role, "content": m.content, "attachments": list(m.attachments),
                 "synthetic": m.synthetic}
                for m in messages
            ]
            _dump_json({"session": args.session, "at": at, "view": view, "messages": payload},
                       out)
        else:
            print(f"{view} view of {args.session} as of event {at} "
                  f"({len(messages)} messages)", file=out)
            for m in messages:
                text = m.content if len(m.content) <= 160 else m.content[:157] + "..."
                print(f"[{m.role}{'*' if m.synthetic else ''}] {printable(text)}", file=out)
        return EXIT_OK
    entries = timeline(events)
    if args.json:
        print("[" + ",\n".join(e.to_json() for e in entries) + "]", file=out)
    else:
        _table([[e.position, e.timestamp.strftime("%H:%M:%S.%f")[:-3], e.type, e.summary]
                for e in entries], ["#", "time", "event", "summary"], out)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    from turnledger.replay.audit import verify, verify_salvaged
    from turnledger.replay.timeline import printable

    progress = _Progress("verifying")
    ids = [args.session] if args.session else None
    anchor = _read_anchor(args.anchor) if args.anchor else None
    try:
        store = _open_for_reading(args, allow_unkeyed=True)
    except TurnledgerError as error:  # a file too damaged to open: verify what can be read
        path = _damaged_path(args, error)
        if path is None:
            raise
        report = verify_salvaged(path, error, ids, progress=progress, **_salvage_keys(args))
    else:
        with store:
            report = verify(store.backend, ids, progress=progress)
            if anchor is not None:
                report = _with_anchor(report, store.backend, anchor, _audit_key(args))
    progress.close()
    if args.json:
        print(report.to_json(), file=out)
    else:
        for v in report.violations:
            print(f"VIOLATION {printable(str(v))}", file=out)
        for note in report.notes:
            print(f"NOTE {printable(str(note))}", file=out)
        if report.violations:
            rules = sorted({v.rule.requirement for v in report.violations})
            links = ", ".join(f"{RULES_DOC}#{r.lower()}" for r in rules)
            print(f"see {links} for the rules above", file=out)
        status = "OK" if report.ok else f"FAILED ({len(report.violations)} violations)"
        print(f"verified {report.sessions_checked:,} sessions, {report.events_checked:,} events "
              f"in {report.seconds:.2f} s: {status}", file=out)
    return EXIT_OK if report.ok else EXIT_CHECK_FAILED


def _read_anchor(path: str) -> dict[str, Any]:
    from turnledger.replay.anchor import load_anchor

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read the anchor {path}: {error}") from None
    return load_anchor(text)


def _with_anchor(report: Any, backend: Any, anchor: dict[str, Any], audit_key: Any) -> Any:
    import attrs

    from turnledger.replay.anchor import check_anchor

    found = check_anchor(backend, anchor, audit_key)
    return attrs.evolve(report, violations=(*report.violations, *found))


def cmd_anchor(args: argparse.Namespace, out: TextIO) -> int:
    from turnledger.replay.anchor import take_anchor

    audit_key = _audit_key(args)
    if audit_key is None:
        print("turnledger: warning: no audit key: the anchor holds plain SHA-256 values, which "
              "anyone who can write the store can compute again; give --audit-key-file or "
              "TURNLEDGER_AUDIT_KEY to MAC it (ADR-0048)", file=sys.stderr)
    with _open_for_reading(args) as store:
        anchor = take_anchor(store.backend, audit_key)
    text = json.dumps(anchor, sort_keys=True, indent=2)
    if args.output:
        _write_private(Path(args.output), text + "\n")
        kind = anchor["mac"]["kind"]
        print(f"anchored {len(anchor['sessions']):,} sessions and the log up to notification "
              f"{anchor['log']['notification_id']:,} ({kind}) in {args.output}; keep it "
              "where the store's writers cannot change it", file=out)
    else:
        print(text, file=out)
    return EXIT_OK


def _write_private(path: Path, text: str, *, replace: bool = True) -> None:
    """Write ``text`` to ``path``, readable by its owner only (`write_private`); ``replace``
    False: an existing file is refused, left as it was."""
    from turnledger.files import write_private

    try:
        write_private(path, text, replace=replace)
    except FileExistsError:
        raise UsageError(f"{path} exists: keygen never overwrites a file (it may hold the key "
                         "a store needs to be read); choose a new name") from None
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from None


def cmd_keygen(args: argparse.Namespace, out: TextIO) -> int:
    from turnledger.store.keys import new_key_text

    key = new_key_text()
    if args.output:
        _write_private(Path(args.output), key + "\n", replace=False)
        print(f"wrote a new key to {args.output} (mode 0600)", file=out)
    else:
        print(key, file=out)
    return EXIT_OK


def cmd_forget(args: argparse.Namespace, out: TextIO) -> int:
    with _open_existing(args, "forget") as store:
        changed = store.forget(args.session, reason=args.reason,
                               if_idle_for=args.if_idle_since)
    if changed:
        print(f"forgot session {args.session}: its data key was destroyed, its content can no "
              "longer be read; its chain, event count and analytics counters remain", file=out)
    else:
        print(f"session {args.session} was already forgotten", file=out)
    return EXIT_OK


def cmd_purge(args: argparse.Namespace, out: TextIO) -> int:
    with _open_existing(args, "purge") as store:
        if not store.encrypted:
            from turnledger.store.backends.port import redact_url
            from turnledger.store.keys import NotEncrypted

            raise NotEncrypted(f"{redact_url(args.store)} is not encrypted: purge forgets "
                               "sessions by destroying their data keys; give the store's key")
        age = f"{args.older_than.total_seconds() / 86400:g} days"
        # A session whose key is already destroyed is finished whatever its age: nobody can
        # read it any more, and until its SessionForgotten is recorded `verify` fails.
        unfinished = store.unfinished_forgets()
        for session_id in unfinished:
            print(f"{'finishing' if args.yes else 'would finish'} the interrupted forget of "
                  f"{session_id} (its data key is destroyed, SessionForgotten is missing)",
                  file=out)
            if args.yes:
                store.forget(session_id, reason="finishing an interrupted forget")
        idle = store.idle(args.older_than)
        verb = "forgetting" if args.yes else "would forget"
        active: list[str] = []
        for found in idle:
            clock = "" if found.clock == "database" else ", by its writer's clock"
            print(f"{verb} {found.session_id} (last written "
                  f"{found.last_written.isoformat(timespec='seconds')}{clock})", file=out)
            if args.yes:
                try:  # only at the version judged idle, checked where its key is destroyed
                    store.forget(found.session_id, reason=f"retention: idle longer than {age}",
                                 if_version=found.version)
                except SessionActive:
                    active.append(found.session_id)
                    print(f"kept {found.session_id}: written during the purge", file=out)
        if args.yes:  # also when nothing was left: a purge killed before its last step
            store.erase_destroyed_keys()
    count = len(unfinished) + len(idle) - len(active)
    if not count and not active:
        print(f"no session is idle longer than {age}", file=out)
    elif not args.yes:
        print(f"{_count(count, 'session')}; run again with --yes to forget them", file=out)
    else:
        kept = f"; kept {_count(len(active), 'session')} written meanwhile" if active else ""
        print(f"forgot {_count(count, 'session')}{kept}", file=out)
    return EXIT_OK


def cmd_rekey(args: argparse.Namespace, out: TextIO) -> int:
    from turnledger.store.keys import WrongKey, key_id, parse_key, read_key_file

    if args.new_key_file:
        new_key = read_key_file(args.new_key_file, "new key")
    elif os.environ.get("TURNLEDGER_NEW_KEY"):
        new_key = parse_key(os.environ["TURNLEDGER_NEW_KEY"], "new key")
    else:
        raise UsageError("give the new key: --new-key-file FILE or TURNLEDGER_NEW_KEY")
    new_id = key_id(new_key, "master")
    try:
        store = _open_existing(args, "rekey")
    except WrongKey:
        if not _opens_with(args, new_key):
            raise
        # Rekey re-wraps everything in one transaction (ADR-0066): this is a run again
        # after one that committed, whose answer may never have been seen.
        print(f"the store is under the new key (id {new_id}) already: an earlier rekey "
              "finished; nothing to do", file=out)
        return EXIT_OK
    earlier = [read_key_file(path, "old key") for path in args.old_key_file or ()]
    with store:
        count = store.rekey(new_key, earlier=earlier)
    print(f"re-wrapped {count:,} data keys under the new key (id {new_id}); no event was "
          "rewritten; open the store with the new key from now on", file=out)
    return EXIT_OK


def _opens_with(args: argparse.Namespace, key: bytes) -> bool:
    """Whether the store of ``args`` opens with ``key`` as its master key."""
    from turnledger.store.session import open_store

    try:
        open_store(args.store, **(_keys(args) | {"key": key})).close()
    except TurnledgerError:
        return False
    return True


def cmd_rechain(args: argparse.Namespace, out: TextIO) -> int:
    from turnledger.store.rechain import chained_under, rechain

    audit_key = _audit_key(args)
    if audit_key is None:
        raise UsageError("give the audit key to chain under: TURNLEDGER_AUDIT_KEY or "
                         "--audit-key-file")
    if not args.yes:
        print("rechain rewrites the chain value of every record under the audit key (after "
              "checking the unkeyed chain) and drops the snapshots; run again with --yes",
              file=out)
        return EXIT_OK
    with _open_existing(args, "rechain", allow_unkeyed=True) as store:
        already = chained_under(store.backend, audit_key)
        count = rechain(store.backend, audit_key)
    if already:
        print("the store keeps the keyed chain of this audit key already: an earlier rechain "
              "finished; nothing to do", file=out)
    else:
        print(f"re-chained {count:,} records under the audit key; take an anchor now "
              "(`turnledger anchor --output FILE`)", file=out)
    return EXIT_OK


def _statistics(backend: Any) -> Any:
    from turnledger.projections.analytics import statistics

    progress = _Progress("catching up")
    found = statistics(backend, progress)
    progress.close()
    return found


def cmd_stats(args: argparse.Namespace, out: TextIO) -> int:
    found, damaged = _salvaging(args, _statistics)
    sessions, routes, totals = found.sessions, found.routes, found.totals
    status = EXIT_CHECK_FAILED if damaged else EXIT_OK
    if found.not_updated:
        print(f"turnledger: the analytics tables were not updated "
              f"({_safe(_one_line(found.not_updated), args.store)}); these statistics were "
              "counted from what is committed, and the tables lag until `stats` or "
              "`projections run` can write", file=sys.stderr)
    if args.read_only:
        print("turnledger: the store is read-only: statistics computed from its events; "
              "its analytics tables were neither read nor updated", file=sys.stderr)
    if args.json:
        _dump_json({"sessions": sessions, "routes": routes, "totals": totals}, out)
        return status
    print("per session", file=out)
    _print_session_stats(sessions, out)
    print("\nper route", file=out)
    _table(
        [[r["provider"], r["model"], r.get("appends"), r.get("trims_token_budget"),
          r.get("trims_turn_limit"), r.get("messages_dropped"), r.get("tokens_dropped"),
          r.get("requests_prepared"), r.get("requests_rejected"), r.get("overflow_recoveries"),
          r.get("peak_estimated_tokens")] for r in routes],
        ["provider", "model", "appends", "trims budget", "trims turns", "msgs dropped",
         "tokens dropped", "prepared", "rejected", "overflows", "peak tokens"],
        out,
    )
    _print_compaction_stats(sessions, out)
    _print_usage_stats(sessions, out)
    print("\ntotals: " + ", ".join(f"{k} {_cell(v)}" for k, v in sorted(totals.items())),
          file=out)
    return status


_REFUSALS: Final = "summary_refusals_"


def _print_compaction_stats(rows: list[dict[str, Any]], out: TextIO) -> None:
    """The compaction counters per session (issue 24, C7), when a session compacted."""
    from turnledger.projections.analytics import COMPACTION_COLUMNS

    compacted = [r for r in rows if any(r.get(c) for c in COMPACTION_COLUMNS)]
    if not compacted:
        return
    print("\ncompaction per session (tokens saved: C7)", file=out)
    _table(
        [[str(r["session_id"])[:8], r.get("summaries"), r.get("summary_tokens_saved"),
          ", ".join(f"{k.removeprefix(_REFUSALS)} {r[k]:,}" for k in COMPACTION_COLUMNS
                    if k.startswith(_REFUSALS) and r.get(k)) or "-",
          r.get("tool_result_clearings"), r.get("tool_results_cleared"),
          r.get("tool_result_tokens_saved")] for r in compacted],
        ["session", "summaries", "summary tokens saved", "summaries refused", "clearings",
         "results cleared", "clearing tokens saved"],
        out,
    )


def _print_usage_stats(rows: list[dict[str, Any]], out: TextIO) -> None:
    """What the providers billed per session, when a usage was recorded (issue 35): the cache
    hit rate (input read from the cache) and the estimate against the bill."""
    billed = [r for r in rows if r.get("usage_records")]
    if not billed:
        return

    def share(part: int, whole: int) -> str:
        return f"{100 * part / whole:.1f} %" if whole else "-"

    print("\nprovider usage per session (issue 35: input counts cached tokens too)", file=out)
    _table(
        [[str(r["session_id"])[:8], r["usage_records"], r["billed_input_tokens"],
          r["cache_read_tokens"], share(r["cache_read_tokens"], r["billed_input_tokens"]),
          r["cache_write_tokens"], r["billed_output_tokens"], r["billed_estimated_tokens"],
          share(r["billed_estimated_tokens"], r["billed_input_tokens"])] for r in billed],
        ["session", "billed requests", "input", "cache read", "cache hit", "cache write",
         "output", "estimated", "estimate/bill"],
        out,
    )


def _compaction_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The compaction settings ``what-if`` was given (issue 24, issue 35)."""
    compaction: dict[str, Any] = {}
    if args.clear_tool_results is not None:
        compaction["clear_tool_results"] = args.clear_tool_results
    if args.keep_tool_result_turns is not None:
        compaction["keep_tool_result_turns"] = args.keep_tool_result_turns
    if args.low_water is not None:  # issue 35: "none" gives back the spec's trim
        compaction["low_water"] = None if args.low_water == "none" else args.low_water
    if args.learn_estimate is not None:  # issue 35: C10
        compaction["learn_estimate"] = args.learn_estimate
    return compaction


def cmd_what_if(args: argparse.Namespace, out: TextIO) -> int:
    import attrs

    from turnledger.domain.events import SessionStarted
    from turnledger.replay.whatif import what_if

    summarizer = _summarizer(args)  # a bad import string fails before the store is read
    with _open_for_reading(args) as store:
        events = store.events_of(args.session)
    started = events[0]
    assert isinstance(started, SessionStarted)
    changes: dict[str, Any] = {}
    if args.max_context_tokens is not None:
        changes["max_context_tokens"] = args.max_context_tokens
    if args.context_compact_ratio is not None:
        _warn_unset_ratio("--context-compact-ratio", args.context_compact_ratio)
        changes["context_compact_ratio"] = args.context_compact_ratio
    if args.max_history_messages is not None:
        changes["max_history_messages"] = args.max_history_messages
    compaction = _compaction_changes(args)
    if compaction:
        changes["compaction"] = attrs.evolve(started.profile.compaction, **compaction)
    profile = attrs.evolve(started.profile, **changes)
    report = what_if(events, profile, summarizer=summarizer)
    if args.json:
        print(report.to_json(), file=out)
        return EXIT_OK
    rows = report.rows()
    if rows:
        _table([list(r.values()) for r in rows], list(rows[0].keys()), out)
    lines = report.compaction_lines()
    if lines:
        print("\nwhat-if compactions, by request:", file=out)
        for line in lines:
            print(f"  {_cell(line)}", file=out)
    print("\n" + report.summary(), file=out)
    return EXIT_OK


def _summarizer(args: argparse.Namespace) -> Any:
    """The `Summarizer` named by ``--summarizer MODULE:CALLABLE`` (None without one)."""
    if args.summarizer is None:
        if args.summarizer_timeout is not None:
            raise UsageError("--summarizer-timeout needs --summarizer: it is the summarizer's "
                             "time limit")
        return None
    return import_summarizer(args.summarizer, args.summarizer_timeout)


def import_summarizer(spec: str, timeout: float | None = None) -> Any:
    """The `Summarizer` an import string names: ``MODULE:ATTRIBUTE`` (``ATTRIBUTE`` may be
    dotted), imported with the working directory on the path (as uvicorn does). A
    `Summarizer` is taken as it is; a plain callable ``summarize(turns, previous)`` is named
    by its ``summarizer_name`` attribute, else by ``spec``. ``timeout``: seconds (default
    the Summarizer's). `UsageError` naming what is wrong otherwise."""
    import importlib

    import attrs

    from turnledger.store.summaries import DEFAULT_SUMMARY_TIMEOUT, Summarizer

    where = f"--summarizer {spec!r}"
    module_name, sep, attribute = spec.strip().partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"{where}: expected MODULE:CALLABLE, e.g. mypackage.summaries:summarize")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UsageError(f"{where}: cannot import module {module_name!r}: {error}") from None
    except Exception as error:  # the module's own code failed: say how, not a traceback
        raise UsageError(f"{where}: importing module {module_name!r} raised "
                         f"{type(error).__name__}: {error}") from None
    found: object = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise UsageError(
                f"{where}: module {module_name!r} has no attribute {attribute!r}") from None
    if isinstance(found, Summarizer):
        return found if timeout is None else attrs.evolve(found, timeout=timeout)
    if not callable(found):
        raise UsageError(f"{where}: {attribute!r} is of type {type(found).__name__}, not callable "
                         "(summarize(turns, previous) -> str, or a turnledger.Summarizer)")
    name = getattr(found, "summarizer_name", None) or spec.strip()
    return Summarizer(str(name), found,
                      DEFAULT_SUMMARY_TIMEOUT if timeout is None else timeout)


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    from turnledger.domain.events import SessionStarted
    from turnledger.replay.report import report

    summarizer = _summarizer(args)
    if summarizer is not None and not args.what_if:
        raise UsageError("--summarizer needs --what-if: it summarises the turns the what-if "
                         "profile drops")
    with _open_for_reading(args) as store:
        events = store.events_of(args.session)
    started = events[0]
    assert isinstance(started, SessionStarted)
    profile = _what_if_profile(started.profile, args.what_if) if args.what_if else None
    if args.output == "-":  # standard output, as other tools read "-"
        out.write(report(events, None, what_if=profile, summarizer=summarizer))
        return EXIT_OK
    text = report(events, args.output, what_if=profile, summarizer=summarizer)
    print(f"wrote {args.output} ({len(text.encode('utf-8')):,} bytes): open it in a browser",
          file=out)
    return EXIT_OK


_WHAT_IF_KEYS: dict[str, Callable[[str], object]] = {
    "max_context_tokens": int,
    "context_compact_ratio": float,
    "max_history_messages": int,
    "max_tool_result_chars": int,
    "history_pruning.enabled": lambda text: {"true": True, "false": False}[text.lower()],
    "history_pruning.max_tokens": int,
    "compaction.clear_tool_results": lambda text: {"true": True, "false": False}[text.lower()],
    "compaction.keep_tool_result_turns": int,
    "compaction.low_water": float,
    "compaction.learn_estimate": lambda text: {"true": True, "false": False}[text.lower()],
}
_OPTIONAL_KEYS = frozenset({"max_context_tokens", "context_compact_ratio", "max_history_messages",
                            "compaction.low_water"})


def _warn_unset_ratio(option: str, ratio: float) -> None:
    """A ratio outside (0, 1] is unset (R14): what the user typed is not what runs."""
    if not 0 < ratio <= 1:
        print(f"turnledger: warning: {option} {ratio:g} is outside (0, 1]: taken as unset "
              "(R14), the budget stays max_context_tokens", file=sys.stderr)


def _what_if_profile(profile: RuntimeProfile, pairs: Sequence[str]) -> RuntimeProfile:
    """``profile`` with the ``key=value`` changes of ``--what-if`` (a usage error names a bad
    key or value; `InvalidProfile` one the profile refuses)."""
    import attrs

    changes: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {"history_pruning": {}, "compaction": {}}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in _WHAT_IF_KEYS:
            known = ", ".join(_WHAT_IF_KEYS)
            raise UsageError(f"--what-if {pair!r}: expected KEY=VALUE with KEY one of {known}")
        try:
            value = None if key in _OPTIONAL_KEYS and text.strip().lower() == "none" else (
                _WHAT_IF_KEYS[key](text.strip()))
        except (ValueError, KeyError):
            raise UsageError(f"--what-if {key}: not a valid value: {text!r}") from None
        if key == "context_compact_ratio" and value is not None:
            _warn_unset_ratio("--what-if context_compact_ratio", float(str(value)))
        group, dot, field = key.partition(".")
        if dot:
            groups[group][field] = value
        else:
            changes[key] = value
    for group, fields in groups.items():
        if fields:
            changes[group] = attrs.evolve(getattr(profile, group), **fields)
    return attrs.evolve(profile, **changes)


def cmd_projections_run(args: argparse.Namespace, out: TextIO) -> int:
    stop = threading.Event()
    # A follower's SIGTERM or Ctrl-C may come while the store opens or during the first
    # catch-up (a large log on PostgreSQL takes seconds): from the start, it ends the batch in
    # progress.
    restore = _stop_on_signals(stop) if args.follow else (lambda: None)
    try:
        _run_projections(args, out, stop)
    finally:
        restore()
    return EXIT_OK


def _run_projections(args: argparse.Namespace, out: TextIO, stop: threading.Event) -> None:
    """Catch up, then (``--follow``) follow until ``stop`` is set or Ctrl-C."""
    from turnledger.projections.analytics import Analytics

    progress = _Progress("catching up")
    with _open_existing(args, "projections run") as store:
        analytics = Analytics(store.backend)
        try:
            applied = analytics.catch_up(progress=progress, stop=stop)
            progress.close()
            print(f"applied {applied:,} events", file=out)
            if not args.follow:
                return
            if not stop.is_set():
                print("following new events (Ctrl-C to stop)", file=out)
                out.flush()
                with contextlib.suppress(KeyboardInterrupt):
                    analytics.follow(poll_interval=args.interval, stop=stop)
            print("stopped", file=out)
        finally:
            analytics.close()


def _stop_on_signals(stop: threading.Event) -> Callable[[], None]:
    """Make SIGTERM and SIGINT (Ctrl-C) set ``stop`` (until the returned function restores
    the old handlers); a second Ctrl-C interrupts at once.

    A follower runs as a service: its manager stops it with SIGTERM, which must end it like
    Ctrl-C (exit 0, connections closed) instead of killing it mid-batch. Ctrl-C is not left to
    raise `KeyboardInterrupt` wherever the follower happens to be: raised between a lock's
    acquire and its release (a driver's, a pool's), it left the process unable to close its
    store and hanging (once in CI: no exit 30 s after SIGINT). Signal handlers can only be
    installed from the main thread; elsewhere (``main()`` called in-process) this does
    nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_interrupt(signum: int, frame: Any) -> None:
        if stop.is_set():  # asked twice: the user means now
            raise KeyboardInterrupt
        stop.set()

    previous_term = signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    previous_int = signal.signal(signal.SIGINT, on_interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)

    return restore


# --- parser ---------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """The ``turnledger`` parser: global options, then one subcommand (``args.func`` runs it)."""
    from turnledger import __version__

    parser = _Parser(
        prog="turnledger",
        description="Event-sourced conversation history for LLM agent runtimes.",
        epilog=f"Exit codes: 0 success, 1 a check failed, 2 bad usage or bad input, 3 the store "
        f"is unavailable (unreachable, or busy past a limit of its URL). {_IDS_HELP}",
    )
    parser.add_argument(
        "--store",
        default=os.environ.get("TURNLEDGER_STORE", DEFAULT_STORE_URL),
        help=f"store URL: sqlite:///path.db, memory://, postgresql://user@host:port/db "
        f"(default: $TURNLEDGER_STORE, else {DEFAULT_STORE_URL})",
    )
    _add_key_options(parser, False)
    parser.add_argument("--version", action="version", version=f"turnledger {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    _add_transcript_commands(sub)
    _add_audit_commands(sub)
    _add_analytics_commands(sub)
    _add_privacy_commands(sub)
    from turnledger.server.cli import add_server_commands  # argparse only (issue 37)

    add_server_commands(sub)
    for command in sub.choices.values():
        _add_key_options(command, True)
    return parser


def _add_key_options(parser: argparse.ArgumentParser, local: bool) -> None:
    """``--key-file`` and ``--audit-key-file``, before the command or after it (``local``:
    a subcommand's copy, which does not overwrite what was given before the command)."""
    default = argparse.SUPPRESS if local else None
    parser.add_argument("--key-file", metavar="FILE", default=default,
                        help="the store's encryption key (base64 or hex text, or 32 raw bytes); "
                        "default: $TURNLEDGER_KEY")
    parser.add_argument("--audit-key-file", metavar="FILE", default=default,
                        help="the audit key of a keyed hash chain; default: "
                        "$TURNLEDGER_AUDIT_KEY")


_IDS_HELP = (
    f"Rule ids in the output (R24, E2, ...) are explained in {RULES_DOC}, one heading per id "
    f"(e.g. {RULES_DOC}#r24)."
)

_Subparsers = Any  # argparse's _SubParsersAction, which it does not export


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _add_transcript_commands(sub: _Subparsers) -> None:
    p = sub.add_parser("demo", help="run a scripted agent session and narrate every trim",
                       description="Record a scripted agent session (tool loops, images, a "
                       "turn-limit trim, a token-budget trim, a provider overflow) in the store "
                       "and narrate each step, then print its stats.",
                       epilog=_IDS_HELP)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("import", help="import transcripts (one conversation per JSONL line)",
                       description="Import a JSONL file of conversations, one per line, each as "
                       "a new session recorded as the file says (no truncation, no trimming: "
                       "the profile applies when a request is prepared). The file is read line "
                       "by line; each line's session id is printed as it commits, with its "
                       "messages and turns, and a warning for anything export would not give "
                       "back. A line already imported into the store is skipped, saying so "
                       "(--again imports it anyway). A rejected line is reported with its "
                       "number and reason and nothing of it is stored; the other lines are "
                       "imported; exit 2 when a line was rejected.")
    p.add_argument("file", help="JSONL file: one conversation per line (a provider's message "
                   "list, or a request object holding it)")
    p.add_argument("--format", default=AUTO, choices=(*FORMATS, *AGENT_FORMATS, AUTO),
                   help="the provider format of the lines: openai (Chat Completions "
                   "messages), anthropic (system + messages), responses (Responses input "
                   "items), bedrock (Bedrock Converse system + messages), gemini (Gemini "
                   "contents, google-genai's or the REST API's field names), claude-code, "
                   "codex or gemini-cli (a coding agent's whole transcript: each of its "
                   "sessions one session), or auto (default: "
                   "each line is read in the format it is written in); a line plainly in "
                   "another format than the one named, or holding a block of no shape of its "
                   "format, is refused")
    p.add_argument("--again", action="store_true",
                   help="import a line even when the store holds it already (a new session)")
    p.add_argument("--profile", help="TOML profile for the imported sessions")
    p.add_argument("--as-live", action="store_true",
                   help="record as a live runtime would: truncate long tool results (R38) and "
                   "apply the turn limit on each user message (R27a), with a warning for each "
                   "change")
    _add_json(p)
    p.set_defaults(func=cmd_import)
    _add_export_commands(sub)


def _add_export_commands(sub: _Subparsers) -> None:
    p = sub.add_parser("export", help="a session's record as one JSONL line",
                       description="Print a session's record as one JSONL line in a provider "
                       "format: every message recorded, a trailing tool call still waiting for "
                       "its result included, popped messages left out (docs/behaviour.md "
                       "#e13); an imported session gives its line back. What the format cannot "
                       "carry (another provider's signed thinking, ...) is left out and named "
                       "on stderr. --view chat prints what the model would see instead: the "
                       "chat view, trimmed, with its breadcrumb.")
    p.add_argument("session", help="session id or a unique prefix of one (`turnledger "
                   "sessions`)")
    p.add_argument("--format", required=True, choices=FORMATS,
                   help="the provider format to write")
    p.add_argument("--view", choices=("record", "chat"), default="record",
                   help="record (default): every recorded message; chat: what the model sees")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("sessions", help="list sessions with counts",
                       description="List the sessions in the store with their event, message, "
                       "trim and request counts and their route, oldest first; --limit and "
                       "--after list one page (only its sessions' events are read).")
    p.add_argument("--limit", type=_positive_int, metavar="N",
                   help="list at most N sessions (default: all)")
    p.add_argument("--after", metavar="SESSION",
                   help="start after this session (the last id of the previous page)")
    _add_json(p)
    p.set_defaults(func=cmd_sessions)


def _add_audit_commands(sub: _Subparsers) -> None:
    p = sub.add_parser("replay", help="a session's timeline, or a view as of an event",
                       description="Print a session's timeline (one line per event), or, with "
                       "--at or --view, its chat or conversation view as of an event.",
                       epilog=_IDS_HELP)
    p.add_argument("session", help="session id or a unique prefix of one (`turnledger "
                   "sessions` lists them)")
    p.add_argument("--at", type=int, metavar="N", help="event position (1 = first event)")
    p.add_argument("--view", choices=("chat", "conversation"),
                   help="which view to rebuild (default: chat)")
    _add_json(p)
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("verify", help="audit: rebuild views, check invariants and hash chains",
                       description="Audit the store: rebuild every view, check the invariants, "
                       "hash chains and snapshots. Exit 1 when a violation is found.",
                       epilog=_IDS_HELP)
    p.add_argument("session", nargs="?", help="check only this session (default: all)")
    p.add_argument("--anchor", metavar="FILE",
                   help="also check the store against an anchor (`turnledger anchor`): "
                   "deleted sessions and deleted newest records are violations")
    _add_json(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("what-if", help="replay a session under another profile (writes nothing)",
                       description="Replay a session under its own profile with the given "
                       "settings changed, and compare the requests; nothing is written.")
    p.add_argument("session", help="session id or a unique prefix of one (`turnledger "
                   "sessions` lists them)")
    p.add_argument("--max-context-tokens", type=_non_negative_int, metavar="N",
                   help="absolute token budget (R12; 0 disables proactive token trimming)")
    p.add_argument("--context-compact-ratio", type=float, metavar="R",
                   help="budget as a share of the model's context window, in (0, 1] (R13)")
    p.add_argument("--max-history-messages", type=_non_negative_int, metavar="N",
                   help="turn limit in complete user turns (R28; 0 keeps only the last turn)")
    p.add_argument("--clear-tool-results", action=argparse.BooleanOptionalAction,
                   default=None, help="clear older tool results before a budget trim (C1)")
    p.add_argument("--keep-tool-result-turns", type=_non_negative_int, metavar="N",
                   help="newest turns whose tool results are never cleared (C1; at least 1)")
    p.add_argument("--low-water", type=_low_water, metavar="F",
                   help="a forced trim drops to F x the budget / turn limit, F in (0, 1), so "
                   "the kept prefix holds until the next one (issue 35); none: the spec's trim")
    p.add_argument("--learn-estimate", action=argparse.BooleanOptionalAction, default=None,
                   help="budget trims count each estimated token as the provider billed the "
                   "session's newest requests (C10; needs recorded usage)")
    _add_summarizer(p)
    _add_json(p)
    p.set_defaults(func=cmd_what_if)
    _add_report_command(sub)


def _add_report_command(sub: _Subparsers) -> None:
    p = sub.add_parser("report", help="a session's context at a glance, as one HTML file",
                       description="Write one self-contained HTML file (inline SVG and CSS, no "
                       "script, nothing fetched) showing the session's context over time, its "
                       "turns coloured by fate, the timeline and the totals; with --what-if, "
                       "the same session under another profile side by side. Writes nothing "
                       "to the store.", epilog=_IDS_HELP)
    p.add_argument("session", help="session id or a unique prefix of one (`turnledger "
                   "sessions` lists them)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.html",
                   help="the HTML file to write (mode 0600); - writes it to standard output")
    p.add_argument("--what-if", action="append", metavar="KEY=VALUE",
                   help="compare with the recorded profile changed (repeatable): "
                   "max_context_tokens, context_compact_ratio, max_history_messages, "
                   "max_tool_result_chars, history_pruning.enabled, history_pruning.max_tokens, "
                   "compaction.clear_tool_results, compaction.keep_tool_result_turns, "
                   "compaction.low_water, compaction.learn_estimate (none unsets the first "
                   "three and the low water)")
    _add_summarizer(p)
    p.set_defaults(func=cmd_report)


def _add_summarizer(p: argparse.ArgumentParser) -> None:
    p.add_argument("--summarizer", metavar="MODULE:CALLABLE",
                   help="summarise the turns a what-if budget trim drops that no recorded "
                   "summary covers, with this callable summarize(turns, previous) -> str or "
                   "turnledger.Summarizer, imported from the working directory (C8); without "
                   "it, only the recorded summaries are reused")
    p.add_argument("--summarizer-timeout", type=_positive_float, metavar="SECONDS",
                   help="the summarizer's time limit (default 30; past it the plain trim is "
                   "recorded as a refusal)")


def _add_analytics_commands(sub: _Subparsers) -> None:
    p = sub.add_parser("stats", help="the analytics projections",
                       description="Bring the analytics tables up to date, then print per-session "
                       "and per-route statistics and totals. When another process holds the "
                       "store's write lock past the URL's lock_timeout, the tables are left as "
                       "they are and the statistics are counted from what is committed (said on "
                       "stderr; exit 0).")
    _add_json(p)
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("projections", help="maintain the analytics tables",
                       description="Maintain the analytics tables in the store's database.")
    psub = p.add_subparsers(dest="projections_command", metavar="ACTION", parser_class=_Parser)
    psub.required = True
    run = psub.add_parser("run", help="bring the analytics tables up to date",
                          description="Apply the events not yet counted to the analytics "
                          "tables; with --follow, keep applying new events until stopped. "
                          "Waits for another process's write lock at most the URL's "
                          "lock_timeout, then exits 3 (store unavailable).")
    run.add_argument("--follow", action="store_true", help="keep following new events")
    run.add_argument("--interval", type=float, default=0.5, help="poll interval in seconds")
    run.set_defaults(func=cmd_projections_run)
    _add_key_options(run, True)


def _add_privacy_commands(sub: _Subparsers) -> None:
    p = sub.add_parser("keygen", help="print a new random key (encryption or audit)",
                       description="Print a new random 32-byte key as base64, for "
                       "TURNLEDGER_KEY, TURNLEDGER_AUDIT_KEY or a key file.")
    p.add_argument("--output", metavar="FILE", help="write it to FILE (mode 0600) instead")
    p.set_defaults(func=cmd_keygen)

    p = sub.add_parser("forget", help="erase a session's content (destroy its data key)",
                       description="Destroy the session's data key and record "
                       "SessionForgotten: its content becomes unreadable for everyone; its "
                       "chain still verifies and its analytics counters stay. Needs an "
                       "encrypted store.")
    p.add_argument("session", help="session id or a unique prefix of one (`turnledger "
                   "sessions` lists them)")
    p.add_argument("--reason", default="", help="why (recorded in the SessionForgotten event)")
    p.add_argument("--if-idle-since", type=_age, metavar="AGE", default=None,
                   help="forget it only if nobody wrote it for AGE (e.g. 90d), judged as "
                   "purge judges and checked where its key is destroyed: a session written "
                   "meanwhile is kept (exit 1)")
    p.set_defaults(func=cmd_forget)

    p = sub.add_parser("purge", help="forget the sessions idle longer than an age",
                       description="List the sessions nobody wrote for the given age "
                       "(PostgreSQL: by the server's clock; SQLite: by the machine's); with "
                       "--yes, forget them (retention). A session written after it was listed "
                       "is kept: each forget checks, where it destroys the key, that the "
                       "session is still at the version judged idle.")
    p.add_argument("--older-than", required=True, type=_age, metavar="AGE",
                   help="an age such as 90d, 12h, 2w, 30m")
    p.add_argument("--yes", action="store_true", help="forget them (default: only list)")
    p.set_defaults(func=cmd_purge)

    p = sub.add_parser("rekey", help="rotate the master key (re-wrap every data key)",
                       description="Re-wrap every session's data key under a new master key, "
                       "in one transaction; no event is rewritten.")
    p.add_argument("--new-key-file", metavar="FILE",
                   help="the new key (default: $TURNLEDGER_NEW_KEY)")
    p.add_argument("--old-key-file", metavar="FILE", action="append",
                   help="an earlier master key some data keys are still wrapped by (verify "
                   "names their key id: a store re-keyed under running writers before "
                   "ADR-0098); repeatable")
    p.set_defaults(func=cmd_rekey)

    p = sub.add_parser("anchor", help="print head digests to keep outside the store",
                       description="Record every session's last version and chain value and "
                       "the log's last notification and chain value, MAC'd with the audit key; "
                       "`verify --anchor FILE` then detects deleted records and sessions.")
    p.add_argument("--output", metavar="FILE", help="write it to FILE (mode 0600)")
    p.set_defaults(func=cmd_anchor)

    p = sub.add_parser("rechain", help="move a store to a keyed (HMAC) hash chain",
                       description="Check the unkeyed chain, then rewrite every record's chain "
                       "value as HMAC-SHA256 under the audit key and drop the snapshots.")
    p.add_argument("--yes", action="store_true", help="do it (default: only explain)")
    p.set_defaults(func=cmd_rechain)


_AGE_UNITS: dict[str, int] = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _age(text: str) -> Any:
    from datetime import timedelta

    number, unit = text[:-1], text[-1:].lower()
    if unit not in _AGE_UNITS or not number.isdigit():
        raise argparse.ArgumentTypeError(
            f"an age is a whole number and a unit (s, m, h, d, w), e.g. 90d; got {text!r}"
        )
    return timedelta(seconds=int(number) * _AGE_UNITS[unit])


def _positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def _non_negative_int(text: str) -> int:
    return _int_at_least(text, 0)


def _int_at_least(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
    return value


def _low_water(text: str) -> float | str:
    """``--low-water``: a number (the profile checks it is in (0, 1)), or ``none``."""
    if text.strip().lower() == "none":
        return "none"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or none: {text!r}") from None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace, TextIO], int] = args.func
    try:
        if not args.store.strip():
            raise UsageError("the store URL is empty (--store, or TURNLEDGER_STORE set to "
                             f"nothing): give one, e.g. sqlite:///path.db; unset, it is "
                             f"{DEFAULT_STORE_URL}")
        _resolve_session_prefixes(args)
        return func(args, out or sys.stdout)
    except CorruptRecord as error:
        print(f"turnledger: corrupt store: {_safe(_one_line(error), args.store)}",
              file=sys.stderr)
        return EXIT_CHECK_FAILED
    except SessionActive as error:  # forget --if-idle-since: the idleness check failed
        print(f"turnledger: {_one_line(error)}", file=sys.stderr)
        return EXIT_CHECK_FAILED
    except (UsageError, TurnledgerError) as error:
        # No message names the store's password, whoever wrote it (a driver, the library).
        print(f"turnledger: error: {_safe(_one_line(error), args.store)}", file=sys.stderr)
        return EXIT_UNAVAILABLE if isinstance(error, StoreUnavailable) else EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        return 130


def _resolve_session_prefixes(args: argparse.Namespace) -> None:
    """A unique prefix of a session id works wherever an id does (``SESSION``, ``--after``):
    `stats` shows 8 characters. A whole id is taken as it is, without reading the store."""
    for name in ("session", "after"):
        text = getattr(args, name, None)
        if not isinstance(text, str) or _is_session_id(text) or not _is_hex_prefix(text):
            continue  # a whole id, or no id at all: the command says what is wrong with it
        with _open_for_reading(args) as store:
            ids = store.sessions()
        setattr(args, name, _unique_prefix(text, ids))


def _is_session_id(text: str) -> bool:
    try:
        UUID(text)
    except ValueError:
        return False
    return True


def _is_hex_prefix(text: str) -> bool:
    digits = text.strip().replace("-", "")
    return bool(digits) and all(c in "0123456789abcdefABCDEF" for c in digits)


def _unique_prefix(text: str, ids: Sequence[str]) -> str:
    """The one session id that starts with ``text`` (hyphens and case aside)."""
    wanted = text.strip().lower().replace("-", "")
    found = [i for i in ids if wanted and i.replace("-", "").startswith(wanted)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise UsageError(f"no session id starts with {text!r} (see `turnledger sessions`)")
    shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
    raise UsageError(f"session {text!r} is ambiguous: {len(found)} session ids start with it "
                     f"({shown}); give more of the id")


def _safe(text: str, url: str) -> str:
    """An error text fit for the terminal: no password of ``url``, no control character."""
    from turnledger.replay.timeline import printable
    from turnledger.store.backends.port import redact_text

    return printable(redact_text(text, url))


def _one_line(error: BaseException) -> str:
    return bounded(" ".join(str(error).split()))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
