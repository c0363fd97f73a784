"""`decode_lines`: a transcript file's bytes decoded line by line (issue 19, point 7)."""

from __future__ import annotations

import codecs

from turnledger.domain.providers import TranscriptError
from turnledger.replay.transcripts import decode_lines


def _texts(lines: list[str | TranscriptError]) -> list[str]:
    return [str(line) if isinstance(line, TranscriptError) else line for line in lines]


def test_i19_p7_utf8_lines_are_decoded_each_on_its_own() -> None:
    """A bad byte fails its line only; the lines keep their numbers."""
    lines = decode_lines(b"one\n\xfftwo\nthree")
    assert ["one", "line 2: not valid UTF-8: byte 0xff at byte 1 of the line (invalid start "
            "byte)", "three"] == _texts(lines)


def test_i19_p7_utf16_is_decoded_before_it_is_split() -> None:
    """The bytes of a UTF-16 LE line feed across two characters do not split the line."""
    text = "ੁĀ\n[]"
    assert b"\n\x00" in "ੁĀ".encode("utf-16-le")
    assert ["ੁĀ", "[]"] == decode_lines(codecs.BOM_UTF16_LE + text.encode("utf-16-le"))


def test_i19_p7_an_odd_byte_at_the_end_of_utf16_fails_the_last_line() -> None:
    """A UTF-16 file cut in the middle of a character: its last line is an error."""
    data = codecs.BOM_UTF16_BE + "one\ntwo".encode("utf-16-be")[:-1]
    assert ["one", "line 2: not valid UTF-16: the file ends in the middle of a character (an "
            "odd number of bytes)"] == _texts(decode_lines(data))
