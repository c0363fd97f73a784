"""``turnledger import`` decodes and judges each line on its own (issue 19, point 7).

One invalid UTF-8 byte rejects its line only: the other lines are imported and the command
exits 2 (a rejected line is bad input, DECISIONS 10). A file that starts with a UTF-16 byte
order mark (what Windows PowerShell 5 writes) is read as UTF-16; a UTF-32 one is refused with
one line naming the encoding; a UTF-16 file without a mark gets a reason that says so per line.

The commands run through the CLI's ``main`` in this process; the UTF-8 one with a byte order
mark runs as subprocesses, so the non-ASCII text also crosses a real stdout.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cli, describe, imported_ids

LINES: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "héllo ☃ 𝄞"}, {"role": "assistant", "content": "hi"}],
    [{"role": "user", "content": "second"}, {"role": "assistant", "content": "ੁĀ"}],
    [{"role": "user", "content": "third"}],
]
"""Three good lines; "ੁĀ" holds the two bytes of a UTF-16 LE line feed across two characters."""


def _jsonl(lines: list[list[dict[str, Any]]], newline: str = "\n") -> str:
    return "".join(json.dumps(line, ensure_ascii=False) + newline for line in lines)


def _import(cli: Cli, tmp_path: Path, data: bytes, *, spawn: bool = False) -> Any:
    path = tmp_path / "chats.jsonl"
    path.write_bytes(data)
    return path, (cli.spawn if spawn else cli.run)("import", path, "--format", "openai")


def _exported(cli: Cli, session_ids: list[str], *, spawn: bool = False) -> list[Any]:
    return [json.loads(cli.ok("export", i, "--format", "openai", spawn=spawn))
            for i in session_ids]


def _errors(stderr: str) -> list[str]:
    return [e for e in stderr.splitlines() if "warning" not in e]


def test_i19_p7_an_invalid_utf8_byte_rejects_its_line_and_the_others_are_imported(
    cli: Cli, tmp_path: Path
) -> None:
    """A Latin-1 byte in line 2: lines 1 and 3 are imported, line 2 is named, exit 2."""
    good = _jsonl(LINES[:1]).encode() + b'[{"role": "user", "content": "caf\xe9"}]\n'
    path, result = _import(cli, tmp_path, good + _jsonl(LINES[2:]).encode())
    assert 2 == result.returncode, describe(result)
    assert [LINES[0], LINES[2]] == _exported(cli, imported_ids(result.stdout))
    assert [f"turnledger: rejected {path}:line 2: not valid UTF-8: byte 0xe9 at byte 34 of "
            "the line (invalid continuation byte)"] == _errors(result.stderr)


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_i19_p7_a_utf16_file_with_its_byte_order_mark_is_imported(
    sqlite_cli: Cli, tmp_path: Path, codec: str
) -> None:
    """UTF-16 with its mark and CRLF line ends (PowerShell's ``>``): every line, exactly."""
    bom = codecs.BOM_UTF16_LE if codec.endswith("le") else codecs.BOM_UTF16_BE
    _, result = _import(sqlite_cli, tmp_path, bom + _jsonl(LINES, "\r\n").encode(codec))
    assert (0, "") == (result.returncode, result.stderr), describe(result)
    assert LINES == _exported(sqlite_cli, imported_ids(result.stdout))


def test_i19_p7_a_utf8_byte_order_mark_is_not_part_of_the_first_line(
    sqlite_cli: Cli, tmp_path: Path
) -> None:
    """A UTF-8 file that starts with a byte order mark: every line is imported."""
    _, result = _import(sqlite_cli, tmp_path, codecs.BOM_UTF8 + _jsonl(LINES).encode(),
                        spawn=True)
    assert (0, "") == (result.returncode, result.stderr), describe(result)
    assert LINES == _exported(sqlite_cli, imported_ids(result.stdout), spawn=True)


def test_i19_p7_a_lone_surrogate_in_utf16_rejects_its_line_only(
    sqlite_cli: Cli, tmp_path: Path
) -> None:
    """A lone high surrogate in line 1 of a UTF-16 LE file: lines 2 and 3 are imported."""
    text = _jsonl(LINES).replace("hi", "h\ud800i", 1)
    data = codecs.BOM_UTF16_LE + text.encode("utf-16-le", errors="surrogatepass")
    path, result = _import(sqlite_cli, tmp_path, data)
    assert 2 == result.returncode, describe(result)
    assert LINES[1:] == _exported(sqlite_cli, imported_ids(result.stdout))
    [error] = _errors(result.stderr)
    assert error.startswith(f"turnledger: rejected {path}:line 1: not valid UTF-16: a lone "
                            "surrogate U+D800 at character "), error


def test_i19_p7_a_utf32_file_is_refused_naming_its_encoding(
    sqlite_cli: Cli, tmp_path: Path
) -> None:
    """UTF-32 (with its mark) is refused in one line that names it; nothing is imported, and
    no store is created for it."""
    data = codecs.BOM_UTF32_LE + _jsonl(LINES).encode("utf-32-le")
    path, result = _import(sqlite_cli, tmp_path, data)
    assert (2, "") == (result.returncode, result.stdout), describe(result)
    assert [f"turnledger: error: cannot read {path}: the file is UTF-32 LE (it starts with "
            "that byte order mark); import reads UTF-8, or UTF-16 with its byte order mark: "
            "convert it first, e.g. with iconv -f UTF-32 -t UTF-8"] == result.stderr.splitlines()
    listed = sqlite_cli.run("sessions", "--json")  # refused before any store was opened
    assert 2 == listed.returncode, describe(listed)
    assert listed.stderr.startswith("turnledger: error: no store at "), describe(listed)


def test_i19_p7_a_utf16_file_without_its_mark_is_named_as_such_on_each_line(
    sqlite_cli: Cli, tmp_path: Path
) -> None:
    """UTF-16 LE without a mark: each line is rejected with a reason that suggests it."""
    data = _jsonl(LINES).encode("utf-16-le")
    path, result = _import(sqlite_cli, tmp_path, data)
    assert (2, "") == (result.returncode, result.stdout), describe(result)
    reason = ("holds NUL bytes: is the file UTF-16 or UTF-32 without a byte order mark? "
              "import reads UTF-8, or UTF-16 that starts with its byte order mark")
    pieces = range(1, data.count(b"\n") + 2)  # split on line-feed bytes: it is read as UTF-8
    assert [f"turnledger: rejected {path}:line {n}: {reason}" for n in pieces] == (
        _errors(result.stderr))
