"""Issue 36 point 1: an import refuses what no reader of the record could give back.

A Bedrock Converse line (``{"text": ...}`` blocks with no ``type``) was read as another format,
stored, and then exported empty by every format with exit 0. Now it is read as what it is
(``bedrock``, tests/e2e/test_cli_import_bedrock.py); named as another format, or holding a block
of no format's shape, the line is refused, naming its number and the first block that did not
fit; nothing of it is stored, and a file of refused lines leaves no store behind.
"""

from __future__ import annotations

from pathlib import Path

from turnledger.domain.providers import TranscriptError
from turnledger.replay.transcripts import read_conversations

from .conftest import Cli, describe, imported_ids, run_main, write_jsonl

CONVERSE = {
    "system": [{"text": "You are terse."}],
    "messages": [
        {"role": "user", "content": [{"text": "What is 2+2?"}]},
        {"role": "assistant", "content": [
            {"text": "4"}, {"toolUse": {"toolUseId": "t1", "name": "calc", "input": {}}}]},
    ],
}
GOOD = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def test_i36_p1_a_block_of_no_shape_of_the_format_is_refused_and_nothing_stored(
    tmp_path: Path,
) -> None:
    """Exit 2, the line and the first block named, and no store file created (nothing to
    store): a block with no ``type`` that is no Converse block either."""
    line = [{"role": "user", "content": [{"text": "hi", "lang": "en"}]}]
    path = write_jsonl(tmp_path / "odd.jsonl", line)
    database = tmp_path / "store.db"
    result = run_main(["--store", f"sqlite:///{database}", "import", str(path)], cwd=tmp_path)

    assert 2 == result.returncode, describe(result)
    assert "" == result.stdout
    assert (f"turnledger: rejected {path}:line 1: message 0, block 0 has no type, so it is no "
            'block of the openai format: {"text":"hi","lang":"en"}; nothing of this line was '
            "stored (is it another provider's format?)\n") == result.stderr
    assert not database.exists()


def test_i36_p1_a_converse_line_named_as_another_format_is_refused_naming_bedrock(
    tmp_path: Path,
) -> None:
    """The Converse line of the issue, imported as anthropic (its top-level system) before:
    refused, with the format it is in; no store file."""
    path = write_jsonl(tmp_path / "converse.jsonl", CONVERSE)
    database = tmp_path / "store.db"
    result = run_main(["--store", f"sqlite:///{database}", "import", str(path), "--format",
                       "anthropic"], cwd=tmp_path)

    assert 2 == result.returncode, describe(result)
    assert (f"turnledger: rejected {path}:line 1: not the anthropic format: its system blocks "
            "have no type (Bedrock Converse), which is the bedrock format (use --format "
            "bedrock, or --format auto)\n") == result.stderr
    assert not database.exists()


def test_i36_p1_the_good_lines_beside_it_are_imported_and_export_whole(
    cli: Cli, tmp_path: Path
) -> None:
    """Only the refused line is left out; the others are stored and give their line back."""
    odd = [{"role": "user", "content": [{"text": "What is 2+2?", "lang": "en"}]}]
    path = write_jsonl(tmp_path / "mixed.jsonl", GOOD, odd, GOOD)
    result = cli.run("import", path, "--format", "openai")

    assert 2 == result.returncode, describe(result)
    ids = imported_ids(result.stdout)
    assert 2 == len(ids)
    assert [f"turnledger: rejected {path}:line 2: message 0, block 0 has no type, so it is no "
            'block of the openai format: {"text":"What is 2+2?","lang":"en"}; nothing of this '
            "line was stored (is it another provider's format?)"] == result.stderr.splitlines()
    exported = cli.run("export", ids[0], "--format", "openai")
    assert (0, "") == (exported.returncode, exported.stderr)
    assert '[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]\n' == (
        exported.stdout)


def test_i36_p1_a_message_its_format_gives_nothing_back_of_is_refused() -> None:
    """A system prompt of blocks no format's system takes (here a typed block Anthropic's
    system prompt cannot hold) would export as nothing: the line is refused, not stored."""
    line = ('{"system": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}],'
            ' "messages": [{"role": "user", "content": "hi"}]}')
    [found] = list(read_conversations(line, "anthropic"))

    assert isinstance(found, TranscriptError)
    assert found.line == 1
    assert str(found).startswith("line 1: message 0 of the record: the anthropic format could "
                                 "give nothing of it back ("), str(found)
    assert str(found).endswith("); nothing of this line was stored"), str(found)
