"""Issue 20 point 6: a surface a user can hold.

`turnledger.__all__` is the public API (ADR-0008). Each name is imported from its module on
first use (PEP 562), so the package says where every name lives twice: in ``_HOMES`` for the
interpreter and in a ``TYPE_CHECKING`` block for type checkers. These tests hold the two and
``__all__`` to each other and to docs/api.md, and check what a bare ``import turnledger`` and
``turnledger --help`` load (nothing of the store, its drivers, the audit or the report).
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import turnledger as tl

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "turnledger"


def _type_checking_blocks() -> list[ast.If]:
    """The package's ``if TYPE_CHECKING:`` blocks: the exported names', the moved names'."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    return [n for n in tree.body if isinstance(n, ast.If)
            and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"]


def _type_checking_imports(block: int = 0) -> dict[str, str]:
    """name -> module of the imports in the package's first ``if TYPE_CHECKING:`` block (the
    exported names), or in another one (``block=1``: the moved names)."""
    return {alias.name: node.module or "" for node in _type_checking_blocks()[block].body
            if isinstance(node, ast.ImportFrom) for alias in node.names}


def test_i20_p6_every_exported_name_has_one_home_the_type_checker_sees_too() -> None:
    homes = tl._HOME_OF  # noqa: SLF001 - the table this test holds to __all__
    assert set(tl.__all__) == set(homes)
    assert homes == _type_checking_imports()


@pytest.mark.parametrize("name", tl.__all__)
def test_i20_p6_each_exported_name_is_its_home_modules_object(name: str) -> None:
    home = importlib.import_module(tl._HOME_OF[name])  # noqa: SLF001
    assert getattr(tl, name) is getattr(home, name)


def test_i20_p6_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        tl.no_such_name  # noqa: B018 - the access is the test


def _loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=ROOT, check=True, timeout=60)
    return set(json.loads(result.stdout.splitlines()[-1]))


HEAVY = re.compile(r"^(eventsourcing|psycopg|sqlite3|cattrs|msgpack|turnledger\.(store\."
                   r"|replay\.(audit|report|timeline|whatif)|projections))")


def test_i20_p6_import_turnledger_loads_nothing_a_call_has_not_asked_for() -> None:
    assert [] == sorted(m for m in _loaded_after("import turnledger") if HEAVY.match(m))


def test_i20_p6_the_help_of_the_command_line_loads_no_store_driver_or_audit() -> None:
    code = ("import contextlib, io\nfrom turnledger import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    cli.main(['--help'])")
    assert [] == sorted(m for m in _loaded_after(code) if HEAVY.match(m))


def test_i20_p6_a_name_used_loads_its_home_and_what_it_needs() -> None:
    loaded = _loaded_after("import turnledger as tl\ntl.open_store")
    assert {"turnledger.store.session", "eventsourcing.persistence"} <= loaded


# --- docs/api.md --------------------------------------------------------------------------------

API_DOC = ROOT / "docs" / "api.md"
DOCUMENTED = re.compile(r"^- `(?:tl\.)?(\w+)`", re.M)


def test_i20_p6_docs_api_lists_every_exported_name_once_and_nothing_else() -> None:
    listed = DOCUMENTED.findall(API_DOC.read_text(encoding="utf-8"))
    assert sorted(set(listed)) == sorted(listed), "a name listed twice"
    assert (set(), set()) == (set(tl.__all__) - set(listed), set(listed) - set(tl.__all__))


# --- requirement ids ---------------------------------------------------------------------------

BEHAVIOUR = ROOT / "docs" / "behaviour.md"
RULE_ID = re.compile(r"\b([REKB][0-9]{1,2}a?)\b")


def test_i20_p6_every_rule_id_the_code_cites_is_a_heading_of_docs_behaviour() -> None:
    """An output line, an error or a docstring that cites ``R24`` can be looked up."""
    headings = set(re.findall(r"^### ([REKB][0-9]{1,2}a?) —", BEHAVIOUR.read_text("utf-8"),
                              re.M))
    cited = {(path.relative_to(ROOT).as_posix(), rule)
             for path in PACKAGE.rglob("*.py")
             for rule in RULE_ID.findall(path.read_text(encoding="utf-8"))}
    assert [] == sorted((path, rule) for path, rule in cited if rule not in headings)


# --- one errors module --------------------------------------------------------------------------

ERRORS = PACKAGE / "domain" / "errors.py"
BUILTIN_ERRORS = {"Exception", "ValueError", "TypeError", "RuntimeError", "LookupError",
                  "KeyError", "OSError", "BaseException"}
INTERNAL_ERRORS = {
    ("turnledger/cli.py", "UsageError"),  # the CLI's exit 2, never raised out
    # The server's answers: each becomes an HTTP error (404, 400) inside its request, never
    # raised out of the server (MalformedConversationId is a SessionNotFound for callers).
    ("turnledger/server/conversations.py", "NotFound"),
    ("turnledger/server/conversations.py", "Refused"),
    ("turnledger/server/ids.py", "MalformedConversationId"),
    ("turnledger/server/items.py", "ItemError"),
}


def _error_classes(path: Path, known: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
            and any(isinstance(base, ast.Name) and base.id in known for base in node.bases)]


def test_i20_p6_every_error_class_is_defined_in_the_errors_module() -> None:
    """One place to read what turnledger raises: `turnledger.domain.errors` (re-exported)."""
    known = BUILTIN_ERRORS | set(_error_classes(ERRORS, BUILTIN_ERRORS | {"TurnledgerError",
                                                                         "CorruptRecord",
                                                                         "InvalidMessage",
                                                                         "StoreUnavailable",
                                                                         "ReplayError"}))
    elsewhere = {(path.relative_to(ROOT).as_posix(), name)
                 for path in PACKAGE.rglob("*.py") if path != ERRORS
                 for name in _error_classes(path, known)}
    public = {(path, name) for path, name in elsewhere if not name.startswith("_")}
    assert set() == public - INTERNAL_ERRORS  # a private one is a module's own control flow


# --- documents the code cites --------------------------------------------------------------------

OUTSIDE = re.compile(r"\b(?:SPEC|DESIGN|STYLE|DECISIONS)(?:\.md)?\b(?! ?_)|\bAPI\.md\b")


def test_i20_p6_the_code_and_docs_cite_no_document_outside_the_repository() -> None:
    """SPEC.md, API.md, DESIGN.md, STYLE.md and DECISIONS.md are the team's, not the
    repository's: a reader of the code or the docs follows docs/behaviour.md, docs/api.md and
    the ADRs instead."""
    texts = [*PACKAGE.rglob("*.py"), *(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]
    cited = sorted(f"{path.relative_to(ROOT)}:{number}"
                   for path in texts
                   for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
                   if OUTSIDE.search(line.replace("SPEC_PRICING", "")))
    assert [] == cited


# --- issue 34 point 4: a top level a person can hold, six public submodules (ADR-0101) ----------

MOVED: dict[str, str] = tl._MOVED_TO  # noqa: SLF001 - the table these tests hold to the rest
SUBMODULES = sorted(set(MOVED.values()))

# What the top level has always promised (the README's and the command line's first names):
# the values, the pure functions, the profiles, the store, the first events and errors.
PROMISED = {
    "ChatMessage", "ToolCall", "ToolResult", "Chat", "AssistantToolCalls", "ToolResults",
    "ConversationMessage", "to_chat_messages", "InvalidMessage", "BREADCRUMB_TEXT",
    "IMAGE_TOKEN_ESTIMATE", "DEFAULT_CONTEXT_TOKENS", "DEFAULT_MAX_HISTORY_TURNS",
    "estimate_history_tokens", "trim_to_recent_turns", "trim_to_recent_turn_count",
    "trim_conversation_to_recent_turns", "TrimResult", "sweep_orphans", "SweepResult",
    "truncate_tool_result", "is_context_window_exceeded", "HistoryPruning", "RuntimeProfile",
    "ProviderProfile", "Route", "resolve_capacity", "effective_context_budget", "load_profile",
    "InvalidProfile", "open_store", "Store", "Session", "PreparedRequest", "DomainEvent",
    "ContextWindowExceeded", "MessageAppended", "TrimDecided", "BreadcrumbInserted",
    "HistoryTrimmed", "RequestPrepared", "RequestRejected", "RouteSelected", "OrphansSwept",
    "TurnledgerError", "SessionNotFound", "ConcurrencyConflict", "CorruptRecord",
    "UnansweredToolCalls",
}


def test_i34_p4_the_top_level_holds_60_names_or_fewer_and_every_promised_one() -> None:
    """A newcomer reads the top level whole: at most 60 names (123 before issue 34), and none of
    the names it has always promised left it."""
    assert len(tl.__all__) <= 60
    assert set() == PROMISED - set(tl.__all__)


def test_i34_p4_a_moved_name_left_the_top_level_for_a_public_submodule_that_lists_it() -> None:
    """Each moved name is in its new module's ``__all__`` and no longer in ``tl.__all__``; the
    second ``TYPE_CHECKING`` block types exactly the moved names, from their new modules, each
    imported ``as`` itself (so type checkers take it as exported)."""
    assert set() == set(MOVED) & set(tl.__all__)
    assert [] == sorted(name for name, home in MOVED.items()
                        if name not in importlib.import_module(home).__all__)
    assert MOVED == _type_checking_imports(block=1)
    aliases = [alias for node in _type_checking_blocks()[1].body
               if isinstance(node, ast.ImportFrom) for alias in node.names]
    assert [] == [alias.name for alias in aliases if alias.asname != alias.name]


@pytest.mark.parametrize("name", sorted(MOVED))
def test_i34_p4_a_moved_name_warns_on_each_use_naming_its_module_and_is_the_same_object(
    name: str,
) -> None:
    """``tl.NAME`` and ``from turnledger import NAME`` work for one release: the new module's
    own object, one `DeprecationWarning` per use, naming the module to import it from and
    pointing at the line that used it."""
    home = importlib.import_module(MOVED[name])
    namespace: dict[str, object] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every use, not once per line
        first = getattr(tl, name)
        second = getattr(tl, name)
        exec(f"from turnledger import {name}", namespace)
    expected = f"turnledger.{name} moved to {home.__name__}: import it from there"
    assert [DeprecationWarning] * 3 == [w.category for w in caught]
    assert [expected] * 3 == [str(w.message).split(" (", 1)[0] for w in caught]
    assert (getattr(home, name),) * 3 == (first, second, namespace[name])
    assert [__file__, __file__, "<string>"] == [w.filename for w in caught]


def test_i34_p4_dir_lists_the_current_names_and_the_submodules_not_the_moved_ones() -> None:
    """Completion leads to a moved name's new home; ``tl.audit`` works without an import."""
    listed = set(dir(tl))
    assert set(tl.__all__) <= listed
    assert {home.rsplit(".", 1)[1] for home in SUBMODULES} <= listed
    assert set() == set(MOVED) & listed


def test_i34_p4_a_bare_import_loads_no_submodule_and_a_use_loads_its_own() -> None:
    """``import turnledger`` loads none of the public submodules; ``tl.events`` loads that one
    and not the audit's reading side."""
    public = set(SUBMODULES)
    assert set() == _loaded_after("import turnledger") & public
    loaded = _loaded_after("import turnledger as tl\ntl.events.SessionStarted")
    assert {"turnledger.events"} == loaded & public
    assert "turnledger.replay.audit" not in loaded


@pytest.mark.parametrize("module", SUBMODULES)
def test_i34_p4_each_submodule_exports_names_that_resolve_and_docs_api_lists_them(
    module: str,
) -> None:
    """Each public submodule's ``__all__`` resolves, and its section of docs/api.md lists
    exactly those names, once each, in its table."""
    home = importlib.import_module(module)
    assert [] == [name for name in home.__all__ if not hasattr(home, name)]
    section = API_DOC.read_text(encoding="utf-8").split(f"\n## `{module}`\n", 1)[1]
    rows = re.findall(r"^\| `(\w+)` \|", section.split("\n## ", 1)[0], re.M)
    assert sorted(set(rows)) == sorted(rows), "a name listed twice"
    assert sorted(home.__all__) == sorted(rows)


def test_i34_p4_docs_api_lists_every_moved_name_with_its_new_module() -> None:
    """The page's table of moved names is the package's."""
    section = API_DOC.read_text(encoding="utf-8").split("\n## Moved from the top level", 1)[1]
    rows = re.findall(r"^\| `tl\.(\w+)` \| `([\w.]+)` \|$", section.split("\n## ", 1)[0], re.M)
    assert len(rows) == len(dict(rows))
    assert MOVED == dict(rows)
