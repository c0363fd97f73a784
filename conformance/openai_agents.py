"""The OpenAI Agents SDK's own session tests, run against `TurnledgerSession` (issue 22).

``python -m conformance.openai_agents`` downloads the source distribution of the installed
``openai-agents`` (``pip download --no-binary :all: --no-deps openai-agents==VERSION``) into a
temporary directory, extracts it there and runs with pytest, in that tree, its session tests:
every test of ``tests/memory/test_session*.py`` and the runner tests elsewhere under
``tests/`` (top level) whose body names ``SQLiteSession``. The SDK's ``SQLiteSession`` is
swapped for a `TurnledgerSession` by a plugin (`conformance._openai_agents_plugin`); nothing of
the SDK is copied into this repository.

Exit status: 0 when every test passes or fails only as listed in `EXCLUDED` (each with its
reason: tests of ``SQLiteSession``'s private connection bookkeeping or of its own tables);
1 when any other test fails or errs; 2 when the source cannot be had or pytest cannot run.
An excluded test that passes is reported (the list may shrink) but does not fail the step.

Options: ``--sdist FILE`` uses a downloaded ``.tar.gz`` instead of fetching one (offline);
``--keep DIR`` extracts there and leaves it; ``-k EXPR`` passes a selection to pytest.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PLUGIN = "conformance._openai_agents_plugin"

_CONNECTIONS = ("SQLiteSession's private per-thread connection registry (_connections, "
                "_connections_lock, _get_connection): turnledger's store owns its connections")
_OWN_ROWS = ("writes undecodable JSON rows into SQLiteSession's own agent_messages table, "
             "which SQLiteSession then skips; turnledger never skips a corrupt record, it "
             "raises CorruptRecord naming the session and position (E11)")
_OWN_TABLES = ("probes SQLiteSession's own tables (agent_sessions, agent_messages) with raw SQL "
               "for a left-open write lock; a turnledger transaction is one store call "
               "(E3), its rollback tested in tests/integration")
_M = "tests/memory/test_session.py::"

EXCLUDED: dict[str, str] = {
    _M + "test_sqlite_session_close_closes_worker_thread_connections": _CONNECTIONS,
    _M + "test_sqlite_session_reaps_connections_from_exited_worker_threads": _CONNECTIONS,
    _M + "test_sqlite_session_closes_retired_connections_before_the_next_allocation":
        _CONNECTIONS,
    _M + "test_sqlite_session_keeps_connections_of_live_worker_threads": _CONNECTIONS,
    _M + "test_sqlite_session_rollback_failure_evicts_connection": _CONNECTIONS,
    _M + "test_sqlite_session_close_retries_quarantined_connection": _CONNECTIONS,
    _M + "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome":
        _CONNECTIONS + "; what it proves (a cancelled write settles before the cancellation "
        "is raised) is test_i22_a_cancelled_write_is_settled_before_the_cancellation_is_raised",
    _M + "test_sqlite_session_file_lock_is_shared_across_instances":
        "asserts the identity of SQLiteSession's process-wide lock per database file (_lock)",
    _M + "test_sqlite_session_closed_rejects_empty_add_items":
        "matches SQLiteSession's own message text ('SQLiteSession is closed'); TurnledgerSession "
        "raises SessionClosed, a RuntimeError naming itself (test_i22_close_ends_the_object_...)",
    _M + "test_sqlite_session_pop_item_skips_corrupt_most_recent": _OWN_ROWS,
    _M + "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": _OWN_ROWS,
    _M + "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _OWN_ROWS,
    _M + "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": _OWN_ROWS,
    _M + "test_sqlite_session_failed_add_items_releases_write_lock": _OWN_TABLES,
    _M + "test_sqlite_session_failed_clear_session_rolls_back": _OWN_TABLES,
    _M + "test_sqlite_session_failed_pop_item_releases_write_lock": _OWN_TABLES,
    "tests/test_run_impl_resume_paths.py::test_handoff_resume_after_cancelled_compaction_commits":
        "pauses a compaction inside SQLiteSession's private row writer (_insert_items)",
}
"""Test node id (relative to the SDK's root, without parameters) -> why it cannot pass."""


def _fetch(version: str, into: Path) -> Path:
    """The sdist of ``openai-agents==version``, downloaded with pip into ``into``."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
               "--no-deps", f"openai-agents=={version}", "-d", str(into)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    found = sorted(into.glob("openai_agents-*.tar.gz"))
    if done.returncode != 0 or not found:
        raise SystemExit(f"error: pip download of openai-agents=={version} failed "
                         f"(exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return found[0]


def _extract(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    roots = [p for p in into.iterdir() if p.is_dir() and (p / "tests").is_dir()]
    if len(roots) != 1:
        raise SystemExit(f"error: {sdist.name} holds no single source tree with tests/")
    return roots[0]


def _tests_naming(path: Path, name: str) -> list[str]:
    """The test functions (``Class::test`` inside classes) of ``path`` whose source names
    ``name``."""
    source = path.read_text(encoding="utf-8")
    found: list[str] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef) and child.name.startswith("Test"):
                visit(child, f"{prefix}{child.name}::")
            elif (isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                  and child.name.startswith("test")
                  and name in (ast.get_source_segment(source, child) or "")):
                found.append(prefix + child.name)

    visit(ast.parse(source), "")
    return found


def select(root: Path) -> list[str]:
    """The node ids to run, relative to ``root`` (module doc)."""
    tests = root / "tests"
    ids = [str(p.relative_to(root)) for p in sorted((tests / "memory").glob("test_session*.py"))]
    for path in sorted(tests.glob("test_*.py")):
        if "SQLiteSession" in path.read_text(encoding="utf-8"):
            relative = path.relative_to(root)
            ids += [f"{relative}::{test}" for test in _tests_naming(path, "SQLiteSession")]
    return ids


def _run(root: Path, ids: list[str], report: Path, selection: str | None) -> int:
    env = dict(os.environ)
    # The SDK's tree first (its ``tests`` package), then this repository (the plugin).
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(REPO), env.get("PYTHONPATH", "")])
    env.setdefault("OPENAI_API_KEY", "sk-test-no-network")
    command = [sys.executable, "-m", "pytest", "-q", "-p", PLUGIN, "-p", "no:cacheprovider",
               "-o", "addopts=", f"--junitxml={report}", "-W", "ignore::DeprecationWarning",
               *ids]
    if selection:
        command += ["-k", selection]
    return subprocess.run(command, cwd=root, env=env, check=False).returncode


def _outcomes(report: Path) -> tuple[dict[str, str], set[str]]:
    """node id (``file::test[params]``) -> passed / failed / skipped; and the node ids that
    built a `TurnledgerSession` in place of ``SQLiteSession``."""
    outcomes: dict[str, str] = {}
    swapped: set[str] = set()
    for case in ET.parse(report).getroot().iter("testcase"):
        classname = case.get("classname", "")
        parts = classname.split(".")
        # junit classnames are dotted: tests.memory.test_session[.TestClass]
        module = [p for p in parts if not p[:1].isupper()]
        classes = [p for p in parts if p[:1].isupper()]
        node = "/".join(module) + ".py::" + "".join(f"{c}::" for c in classes) + case.get(
            "name", "")
        if any(p.get("name") == "turnledger_sessions" and p.get("value") not in (None, "0")
               for p in case.iter("property")):
            swapped.add(node)
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[node] = "failed"
        elif case.find("skipped") is not None:
            outcomes[node] = "skipped"
        else:
            outcomes[node] = "passed"
    return outcomes, swapped


def _excluded(node: str) -> str | None:
    return EXCLUDED.get(node.split("[", 1)[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.openai_agents",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", type=Path, help="a downloaded openai-agents .tar.gz")
    parser.add_argument("--keep", type=Path, help="extract here and keep it")
    parser.add_argument("-k", dest="selection", help="a pytest -k expression")
    args = parser.parse_args(argv)
    try:
        version = importlib.metadata.version("openai-agents")
    except importlib.metadata.PackageNotFoundError:
        print("error: openai-agents is not installed (pip install -e '.[dev]')", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tl-conformance-") as scratch:
        work = args.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        sdist = args.sdist or _fetch(version, work)
        root = _extract(sdist, work)
        ids = select(root)
        report = work / "report.xml"
        code = _run(root, ids, report, args.selection)
        if not report.exists():
            print(f"error: pytest did not run (exit {code})", file=sys.stderr)
            return 2
        outcomes, swapped = _outcomes(report)
    return _judge(version, outcomes, swapped)


def _judge(version: str, outcomes: dict[str, str], swapped: set[str]) -> int:
    """Exit status of the step (module doc); also 1 when no test built a TurnledgerSession
    (the swap did not happen: the SDK's own class was tested)."""
    passed = sorted(n for n, o in outcomes.items() if o == "passed")
    skipped = sorted(n for n, o in outcomes.items() if o == "skipped")
    failed = sorted(n for n, o in outcomes.items() if o == "failed")
    expected = [n for n in failed if _excluded(n)]
    unexpected = [n for n in failed if not _excluded(n)]
    stale = [n for n in passed if _excluded(n)]
    print(f"\nopenai-agents {version}: {len(outcomes)} session tests against TurnledgerSession: "
          f"{len(passed)} passed, {len(expected)} excluded (failed as listed), "
          f"{len(skipped)} skipped, {len(unexpected)} failed; "
          f"{len(swapped & set(passed))} of the passing ones built TurnledgerSessions")
    for node in expected:
        print(f"  excluded {node}: {_excluded(node)}")
    for node in stale:
        print(f"  note: listed as excluded but passed: {node}")
    for node in unexpected:
        print(f"  FAILED {node}")
    if not swapped:
        print("  FAILED: no test built a TurnledgerSession (the SQLiteSession swap did not "
              "happen)")
        return 1
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
