"""-p/-f text as llama.cpp's tools read it (commands/prompt_text.py): escapes and a file's trailing newline."""
import argparse

import pytest

from specserve.commands.prompt_text import add_text_options, process_escapes, text_from_args
from specserve.errors import OptionError


@pytest.mark.parametrize("raw, text", [
    (r"def f():\n    return 1", "def f():\n    return 1"),
    (r"a\tb\rc", "a\tb\rc"),
    (r"it\'s \"q\" \\n", "it's \"q\" \\n"),          # an escaped backslash is one backslash, then n
    (r"\x41\x62!", "Ab!"),
    (r"\x4", r"\x4"),                                   # needs two characters after \x
    (r"\xg1 \q", r"\xg1 \q"),                           # not escapes: the backslash stays
    (r"\x 9|\x-1", "\t|\ufffd"),                        # strtol reads " 9" and "-1" (byte 0xFF)
    ("ends with \\", "ends with \\"),
    ("é\\t", "é\t"),
])
def test_escapes_as_llama_cpp(raw, text):
    assert process_escapes(raw) == text


def _args(*argv):
    parser = argparse.ArgumentParser()
    add_text_options(parser, "text")
    return parser.parse_args(list(argv))


def test_file_loses_one_trailing_newline_and_escapes_unless_told(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a\\tb\n\n", encoding="utf-8")
    assert text_from_args(_args("-f", str(path))) == "a\tb\n"
    assert text_from_args(_args("-f", str(path), "--no-escape")) == "a\\tb\n"
    assert text_from_args(_args("-p", "x\\ny")) == "x\ny"
    assert text_from_args(_args("-p", "x\\ny\n")) == "x\ny\n"          # -p keeps its newline
    with pytest.raises(OptionError, match="not both"):
        text_from_args(_args("-p", "x", "-f", str(path)))
    with pytest.raises(OptionError, match="text file not found"):
        text_from_args(_args("-f", str(tmp_path / "missing.txt")), "text")
