"""Profile files: TOML loading and its errors (SPEC R11-R19, R28-R29, R38; E11)."""

from __future__ import annotations

import inspect
import math
import textwrap
from pathlib import Path

import pytest

import turnledger.domain.budget as budget_module
from turnledger.domain.budget import (
    HistoryPruning,
    ProfileDocument,
    ProviderProfile,
    ResolvedRoute,
    Route,
    RuntimeProfile,
    effective_context_budget,
    parse_profile_document,
    resolve_route,
)
from turnledger.domain.errors import InvalidProfile
from turnledger.profiles import load_profile, load_profile_document

FIXTURES = Path(__file__).parent.parent / "fixtures" / "profiles"


# --- valid files ----------------------------------------------------------------------------


def test_r11_full_fixture_loads_every_key() -> None:
    """full.toml yields exactly the runtime profile and providers it declares."""
    runtime, providers = load_profile(FIXTURES / "full.toml")
    expected_runtime = RuntimeProfile(
        max_context_tokens=100_000,
        context_compact_ratio=0.7,
        history_pruning=HistoryPruning(enabled=True, max_tokens=60_000),
        max_history_messages=20,
        max_tool_result_chars=12_000,
    )
    expected_providers = [
        ProviderProfile(
            "openai",
            "gpt-4o",
            128_000,
            {"fast": ("gpt-4o-mini", 64_000), "cheap": ("gpt-4o-nano", None)},
        ),
        ProviderProfile("local", "llama3"),
    ]
    assert (expected_runtime, expected_providers) == (runtime, providers)


def test_r19_full_fixture_document_has_the_default_route() -> None:
    """load_profile_document also returns the [route] table as a Route."""
    document = load_profile_document(FIXTURES / "full.toml")
    assert Route("openai", "fast") == document.route
    assert isinstance(document, ProfileDocument)


def test_r19_full_fixture_resolves_its_route_end_to_end() -> None:
    """The default route of full.toml resolves the alias window, budget and dispatched model."""
    document = load_profile_document(FIXTURES / "full.toml")
    assert document.route is not None
    actual = resolve_route(document.runtime, document.providers, document.route)
    # 0.7 x 64,000 = 44,800, under max_context_tokens (100,000) and pruning (60,000).
    expected = ResolvedRoute(
        Route("openai", "fast"), 64_000, 44_800, 64_000, dispatch_model="gpt-4o-mini"
    )
    assert expected == actual


def test_r11_empty_fixture_gives_defaults() -> None:
    """An empty file is a valid profile with every default and no provider or route."""
    document = load_profile_document(FIXTURES / "empty.toml")
    assert ProfileDocument(RuntimeProfile(), (), None) == document
    expected = (32_000, 50)
    assert expected == (
        effective_context_budget(document.runtime, None),
        document.runtime.max_history_turns,
    )


def test_r12_disabled_fixture_budget_is_zero() -> None:
    """max_context_tokens = 0 in a file disables the budget despite ratio and pruning."""
    runtime, _ = load_profile(FIXTURES / "disabled.toml")
    expected = (0, 0, 0)
    assert expected == (
        effective_context_budget(runtime, None),
        effective_context_budget(runtime, 128_000),
        runtime.max_history_turns,
    )


def test_r14_nan_ratio_in_a_file_is_unset_not_an_error() -> None:
    """context_compact_ratio = nan loads, and the budget ignores it."""
    runtime, providers = load_profile(FIXTURES / "ratio_nan.toml")
    assert runtime.context_compact_ratio is not None
    assert math.isnan(runtime.context_compact_ratio)
    expected = 32_000
    assert expected == effective_context_budget(runtime, providers[0].context_window)


def test_r13_integer_ratio_in_a_file_is_a_number() -> None:
    """context_compact_ratio = 1 loads as the whole window, capped by max_context_tokens."""
    runtime, providers = load_profile(FIXTURES / "integer_ratio.toml")
    expected = (1, 8_000, 50_000)
    assert expected == (
        runtime.context_compact_ratio,
        effective_context_budget(runtime, providers[0].context_window),
        effective_context_budget(runtime, None),
    )


def test_e11_load_profile_accepts_str_paths() -> None:
    """A str path works like a Path."""
    assert load_profile(FIXTURES / "full.toml") == load_profile(str(FIXTURES / "full.toml"))


def test_e11_documented_example_in_module_docstring_loads(tmp_path: Path) -> None:
    """The TOML example in budget.py's docstring (copied to the README) is a valid profile."""
    doc = inspect.getdoc(budget_module)
    assert doc is not None
    start = doc.index("::\n") + len("::\n")
    example = textwrap.dedent(doc[start : doc.index("\nErrors raise")])
    path = tmp_path / "example.toml"
    path.write_text(example, encoding="utf-8")
    document = load_profile_document(path)
    assert Route("openai", "fast") == document.route
    assert {"fast", "cheap"} == set(document.providers[0].aliases)
    expected = 8_192
    assert expected == effective_context_budget(document.runtime, 128_000)


def test_r19_parse_profile_document_from_mapping() -> None:
    """parse_profile_document builds the same document from already-parsed data."""
    data = {
        "max_context_tokens": 5,
        "providers": {"p": {"model": "m", "aliases": {"a": {"model": "n", "context_window": 9}}}},
        "route": {"provider": "p", "model": "a"},
    }
    expected = ProfileDocument(
        RuntimeProfile(max_context_tokens=5),
        (ProviderProfile("p", "m", None, {"a": ("n", 9)}),),
        Route("p", "a"),
    )
    assert expected == parse_profile_document(data)


def test_e11_parse_profile_document_names_its_source() -> None:
    """Errors from a mapping start with the given source, or <profile> by default."""
    with pytest.raises(InvalidProfile) as default:
        parse_profile_document({"bogus": 1})
    with pytest.raises(InvalidProfile) as named:
        parse_profile_document({"bogus": 1}, source="cli --profile")
    expected = ("<profile>: bogus: unknown key", "cli --profile: bogus: unknown key")
    assert expected == (
        str(default.value),
        str(named.value),
    )


def test_r19_route_to_undeclared_model_is_accepted() -> None:
    """A default route naming a model the provider does not declare loads (capacity unknown)."""
    document = parse_profile_document(
        {"providers": {"p": {"model": "m"}}, "route": {"provider": "p", "model": "other"}}
    )
    assert Route("p", "other") == document.route


# --- invalid files --------------------------------------------------------------------------

PROVIDER = '[providers.openai]\nmodel = "gpt-4o"\n'

INVALID = [
    # id, TOML text, dotted key the error must name
    ("unknown top-level key", "max_context_token = 1\n", "max_context_token"),
    ("unknown pruning key", "[history_pruning]\nenable = true\n", "history_pruning.enable"),
    ("unknown provider key", PROVIDER + "window = 1\n", "providers.openai.window"),
    (
        "unknown alias key",
        PROVIDER + '[providers.openai.aliases.fast]\nmodel = "m"\nwindow = 3\n',
        "providers.openai.aliases.fast.window",
    ),
    (
        "unknown route key",
        PROVIDER + '[route]\nprovider = "openai"\nmodel = "gpt-4o"\nweight = 1\n',
        "route.weight",
    ),
    ("negative max_context_tokens", "max_context_tokens = -1\n", "max_context_tokens"),
    ("negative max_history_messages", "max_history_messages = -3\n", "max_history_messages"),
    ("negative max_tool_result_chars", "max_tool_result_chars = -1\n", "max_tool_result_chars"),
    (
        "negative pruning max_tokens",
        "[history_pruning]\nmax_tokens = -5\n",
        "history_pruning.max_tokens",
    ),
    (
        "negative context_window",
        PROVIDER + "context_window = -1\n",
        "providers.openai.context_window",
    ),
    ("zero context_window", PROVIDER + "context_window = 0\n", "providers.openai.context_window"),
    (
        "negative alias window",
        PROVIDER + '[providers.openai.aliases]\nfast = { model = "m", context_window = -2 }\n',
        "providers.openai.aliases.fast.context_window",
    ),
    ("string ratio", 'context_compact_ratio = "0.5"\n', "context_compact_ratio"),
    ("bool ratio", "context_compact_ratio = true\n", "context_compact_ratio"),
    ("array ratio", "context_compact_ratio = [0.5]\n", "context_compact_ratio"),
    ("bool max_context_tokens", "max_context_tokens = true\n", "max_context_tokens"),
    ("float max_context_tokens", "max_context_tokens = 1.5\n", "max_context_tokens"),
    ("string max_context_tokens", 'max_context_tokens = "100"\n', "max_context_tokens"),
    ("bool max_history_messages", "max_history_messages = false\n", "max_history_messages"),
    ("string pruning switch", '[history_pruning]\nenabled = "yes"\n', "history_pruning.enabled"),
    ("integer pruning switch", "[history_pruning]\nenabled = 1\n", "history_pruning.enabled"),
    (
        "bool pruning max_tokens",
        "[history_pruning]\nmax_tokens = true\n",
        "history_pruning.max_tokens",
    ),
    ("pruning not a table", "history_pruning = 3\n", "history_pruning"),
    ("providers not a table", "providers = 3\n", "providers"),
    ("provider not a table", "[providers]\nopenai = 1\n", "providers.openai"),
    ("provider model not a string", "[providers.openai]\nmodel = 5\n", "providers.openai.model"),
    ("provider model empty", '[providers.openai]\nmodel = ""\n', "providers.openai.model"),
    (
        "bool context_window",
        PROVIDER + "context_window = true\n",
        "providers.openai.context_window",
    ),
    (
        "float context_window",
        PROVIDER + "context_window = 128000.0\n",
        "providers.openai.context_window",
    ),
    ("aliases not a table", PROVIDER + "aliases = 3\n", "providers.openai.aliases"),
    (
        "alias not a table",
        PROVIDER + '[providers.openai.aliases]\nfast = "gpt-4o-mini"\n',
        "providers.openai.aliases.fast",
    ),
    (
        "alias model not a string",
        PROVIDER + "[providers.openai.aliases]\nfast = { model = 1 }\n",
        "providers.openai.aliases.fast.model",
    ),
    (
        "alias key equal to the provider model",
        PROVIDER + '[providers.openai.aliases]\ngpt-4o = { model = "gpt-4o-mini" }\n',
        "providers.openai.aliases.gpt-4o",
    ),
    (
        "empty alias key",
        PROVIDER + '[providers.openai.aliases]\n"" = { model = "m" }\n',
        "providers.openai.aliases.",
    ),
    ("empty provider name", '[providers.""]\nmodel = "m"\n', "providers."),
    (
        "provider without model",
        "[providers.openai]\ncontext_window = 1\n",
        "providers.openai.model",
    ),
    (
        "alias without model",
        PROVIDER + "[providers.openai.aliases]\nfast = { context_window = 1 }\n",
        "providers.openai.aliases.fast.model",
    ),
    ("route not a table", 'route = "openai"\n', "route"),
    ("route without model", PROVIDER + '[route]\nprovider = "openai"\n', "route.model"),
    ("route without provider", PROVIDER + '[route]\nmodel = "gpt-4o"\n', "route.provider"),
    (
        "route provider not a string",
        PROVIDER + '[route]\nprovider = 1\nmodel = "m"\n',
        "route.provider",
    ),
    ("route model empty", PROVIDER + '[route]\nprovider = "openai"\nmodel = ""\n', "route.model"),
    (
        "route to an undeclared provider",
        PROVIDER + '[route]\nprovider = "opnai"\nmodel = "gpt-4o"\n',
        "route.provider",
    ),
    ("count too large to store", "max_context_tokens = 18446744073709551616\n",
     "max_context_tokens"),
    (
        "pruning count too large to store",
        "[history_pruning]\nmax_tokens = 9223372036854775808\n",
        "history_pruning.max_tokens",
    ),
    (
        "window too large to store",
        '[providers.openai]\nmodel = "m"\ncontext_window = 18446744073709551616\n',
        "providers.openai.context_window",
    ),
    ("integer ratio too large to store", "context_compact_ratio = 18446744073709551616\n",
     "context_compact_ratio"),
]


def _error_for(tmp_path: Path, text: str) -> tuple[Path, str]:
    path = tmp_path / "profile.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidProfile) as info:
        load_profile(path)
    return path, str(info.value)


@pytest.mark.parametrize(
    ("text", "key"), [pytest.param(*row[1:], id=row[0]) for row in INVALID]
)
def test_e11_invalid_profile_file_names_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    """Every invalid key raises InvalidProfile starting with '<file>: <dotted key>:'."""
    path, message = _error_for(tmp_path, text)
    assert f"{path}: {key}" == message[: len(f"{path}: {key}")]


def test_e11_unknown_key_message_is_complete(tmp_path: Path) -> None:
    """The unknown-key message reads '<file>: <key>: unknown key'."""
    path, message = _error_for(tmp_path, "[history_pruning]\nenable = true\n")
    assert f"{path}: history_pruning.enable: unknown key" == message


def test_e11_negative_count_message_shows_the_value(tmp_path: Path) -> None:
    """A negative count message names the key, what is expected and the value found."""
    path, message = _error_for(tmp_path, PROVIDER + "context_window = -1\n")
    expected = (
        f"{path}: providers.openai.context_window: must be a positive integer or absent, got -1"
    )
    assert expected == message


def test_e11_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    """A TOML syntax error names the file and the line tomllib reports."""
    path, message = _error_for(tmp_path, "max_history_messages = 3\nmax_context_tokens = \n")
    assert message.startswith(f"{path}: invalid TOML: ")
    assert "line 2" in message


def test_e11_duplicate_key_is_a_toml_error(tmp_path: Path) -> None:
    """A key set twice is rejected by the TOML parser, with its line."""
    path, message = _error_for(tmp_path, "max_context_tokens = 1\nmax_context_tokens = 2\n")
    expected = (True, True)
    assert expected == (message.startswith(f"{path}: invalid TOML: "), "line 2" in message)


def test_e11_missing_file_names_the_file(tmp_path: Path) -> None:
    """A missing file raises InvalidProfile naming the path, not FileNotFoundError."""
    path = tmp_path / "absent.toml"
    with pytest.raises(InvalidProfile) as info:
        load_profile(path)
    assert f"{path}: cannot read profile: No such file or directory" == str(info.value)


def test_e11_directory_instead_of_file_is_an_invalid_profile(tmp_path: Path) -> None:
    """A path that is a directory raises InvalidProfile naming it."""
    with pytest.raises(InvalidProfile) as info:
        load_profile(tmp_path)
    assert str(info.value).startswith(f"{tmp_path}: cannot read profile: ")


def test_e11_non_utf8_file_is_an_invalid_profile(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 raise InvalidProfile naming the file."""
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[providers.caf\xe9]\nmodel = "m"\n')
    with pytest.raises(InvalidProfile) as info:
        load_profile(path)
    assert str(info.value).startswith(f"{path}: invalid TOML")
