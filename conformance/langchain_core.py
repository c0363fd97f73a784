"""langchain-core's own chat-history tests, run against turnledger's chat history (issue 22).

``python -m conformance.langchain_core [--store URL] [--workdir DIR]``

1. ``pip download --no-binary :all: --no-deps langchain-core==<installed>``: the source
   distribution of the installed version, whose ``tests/`` hold the chat-history tests
   (``tests/unit_tests/chat_history/`` and ``tests/unit_tests/runnables/test_history.py``,
   ``RunnableWithMessageHistory``); nothing of it is copied into this repository.
2. The test tools those tests import (blockbuster, pytest-asyncio, pytest-mock, within the
   bounds of the sdist's own ``test`` dependency group) go to a directory of the run
   (``pip install --target``), not into the environment.
3. pytest runs them with their own conftest (blockbuster: a blocking call on the event loop
   from langchain-core fails the test) and `conformance._langchain_core_swap`, which puts a
   turnledger history, on the store ``--store`` (default: a new SQLite file), in place of
   ``InMemoryChatMessageHistory``.

Exits 0 when every test passes except those in `EXCLUDED` (each with its reason); 1 on any
other failure, on an excluded test that passed (the list is stale), or when no test ran through
turnledger (the swap did not happen); 2 when the sources cannot be had.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

__all__ = ["EXCLUDED", "TESTS", "main"]

REPO = Path(__file__).resolve().parents[1]
TESTS = ("tests/unit_tests/chat_history", "tests/unit_tests/runnables/test_history.py")
TOOLS = ("blockbuster", "pytest-asyncio", "pytest-mock")
EXTRA_TOOLS = ("forbiddenfruit>=0.1.4",)  # blockbuster's one dependency (installed --no-deps)

EXCLUDED: dict[str, str] = {}
"""Test id (relative to the sdist's ``tests/unit_tests``) → why it may fail against turnledger.
Empty: every chat-history test of langchain-core passes."""

PYTEST_INI = """\
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
markers =
    requires: mark tests as requiring a specific library
    compile: mark placeholder test used to compile integration tests without running them
filterwarnings =
    ignore::langchain_core._api.beta_decorator.LangChainBetaWarning
"""
# Their pyproject's pytest settings without ``--snapshot-warn-unused`` (syrupy, which these
# tests do not use): a pytest.ini beside it takes precedence.


class Unavailable(Exception):
    """The sources or the test tools could not be had."""


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise Unavailable(f"pip {' '.join(args)} failed:\n{done.stdout}{done.stderr}")


def fetch_sources(version: str, workdir: Path) -> Path:
    """The extracted langchain-core sdist of ``version``; `Unavailable` if it has no tests."""
    dist = workdir / "dist"
    _pip("download", "--no-binary", ":all:", "--no-deps", "--quiet", "-d", str(dist),
         f"langchain-core=={version}")
    archives = sorted(dist.glob("langchain_core-*.tar.gz"))
    if not archives:
        raise Unavailable(f"pip downloaded no langchain-core {version} sdist into {dist}")
    with tarfile.open(archives[0]) as archive:
        archive.extractall(workdir / "src", filter="data")
    (root,) = (workdir / "src").iterdir()
    missing = [t for t in TESTS if not (root / t).exists()]
    if missing:
        raise Unavailable(f"the langchain-core {version} sdist has no {', '.join(missing)}")
    return root


def install_tools(root: Path, workdir: Path) -> Path:
    """The test tools, at the sdist's bounds, in a directory of their own."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    group = project.get("dependency-groups", {}).get("test", [])
    wanted = [r for r in group if re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0] in TOOLS]
    found = {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0] for r in wanted}
    wanted += [t for t in TOOLS if t not in found]  # unbounded if their group stops naming it
    target = workdir / "tools"
    _pip("install", "--quiet", "--no-deps", "--target", str(target), *wanted, *EXTRA_TOOLS)
    return target


def run_tests(
    root: Path, tools: Path, store_url: str, workdir: Path, *, eager: bool = False
) -> tuple[dict[str, str], dict[str, int]]:
    """Each test's outcome (passed, failed, error, skipped) and the turnledger histories it
    built."""
    (root / "pytest.ini").write_text(PYTEST_INI, encoding="utf-8")
    junit, built = workdir / "junit.xml", workdir / "built.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(tools), str(REPO), env.get("PYTHONPATH", "")) if p)
    env["TURNLEDGER_CONFORMANCE_STORE"] = store_url
    env["TURNLEDGER_CONFORMANCE_REPORT"] = str(built)
    env["LANGSMITH_TRACING"] = "false"
    env["TURNLEDGER_CONFORMANCE_EAGER"] = "1" if eager else "0"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "conformance._langchain_core_swap", f"--junitxml={junit}", *TESTS],
        cwd=root, env=env, check=False,
    )
    if not junit.exists():
        raise Unavailable("pytest wrote no report: it did not run (see its output above)")
    outcomes: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").removeprefix("tests.unit_tests.")
        name = f"{module.replace('.', '/')}.py::{case.get('name')}"
        kinds = {child.tag for child in case}
        outcomes[name] = next((k for k in ("error", "failure", "skipped") if k in kinds),
                              "passed").replace("failure", "failed")
    return outcomes, json.loads(built.read_text(encoding="utf-8"))


def judge(outcomes: dict[str, str], built: dict[str, int]) -> list[str]:
    """What makes the run fail (empty: it passes)."""
    problems = [f"{name}: {outcome}" for name, outcome in sorted(outcomes.items())
                if outcome in ("failed", "error") and name not in EXCLUDED]
    problems += [f"{name}: excluded ({EXCLUDED[name]}) but it passed: drop it from EXCLUDED"
                 for name, outcome in sorted(outcomes.items())
                 if outcome == "passed" and name in EXCLUDED]
    problems += [f"{name}: excluded but not run" for name in sorted(EXCLUDED)
                 if name not in outcomes]
    if not any(built.values()):
        problems.append("no test built a turnledger history: the swap did not happen")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.langchain_core",
                                     description=__doc__.split("\n", 1)[0])
    parser.add_argument("--store", help="turnledger store URL (default: a new SQLite file)")
    parser.add_argument("--workdir", type=Path, help="keep the sources and reports here")
    parser.add_argument("--eager", action="store_true",
                        help="control: open each history at construction (the blocking-call "
                             "checker must then fail the async RunnableWithMessageHistory tests)")
    args = parser.parse_args(argv)
    version = importlib.metadata.version("langchain-core")
    with tempfile.TemporaryDirectory(prefix="tl-conformance-langchain-") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        store_url = args.store or f"sqlite:///{workdir / 'conformance.db'}"
        try:
            root = fetch_sources(version, workdir)
            tools = install_tools(root, workdir)
            outcomes, built = run_tests(root, tools, store_url, workdir, eager=args.eager)
        except Unavailable as error:
            print(f"conformance.langchain_core: {error}", file=sys.stderr)
            return 2
    problems = judge(outcomes, built)
    counts = {k: sum(1 for o in outcomes.values() if o == k)
              for k in ("passed", "failed", "error", "skipped")}
    through = sum(1 for name, n in built.items() if n and "::" in name)
    print(f"langchain-core {version} chat-history tests on turnledger ({store_url}): "
          f"{len(outcomes)} run, {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['error']} errors, {counts['skipped']} skipped; {len(EXCLUDED)} excluded; "
          f"{through} built turnledger histories")
    for name in sorted(EXCLUDED):
        print(f"  excluded {name} ({outcomes.get(name, 'not run')}): {EXCLUDED[name]}")
    for problem in problems:
        print(f"  FAIL {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
