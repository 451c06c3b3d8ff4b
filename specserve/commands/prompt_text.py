"""The text a command reads from -p/--prompt or -f/--file, the way llama.cpp's tools read it
(common/arg.cpp): a file loses one trailing newline, and unless --no-escape is given, the escape
sequences \\n \\r \\t \\' \\" \\\\ and \\xHH become the characters they stand for (common.cpp
string_process_escapes). So `specserve lookup create -f corpus.txt` counts the tokens
llama-lookup-create counts, and `generate -p "a\\nb"` prompts with a newline as llama-completion does."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import OptionError

_HEX = b"0123456789abcdefABCDEF"
_SIMPLE_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("'"): b"'", ord('"'): b'"',
                   ord("\\"): b"\\"}


def add_text_options(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("-p", "--prompt", help=f"{what} given on the command line")
    parser.add_argument("-f", "--file", help=f"read the {what} from a file (one trailing newline is dropped, as "
                                             "llama.cpp's -f does)")
    parser.add_argument("-e", "--escape", dest="escape", action="store_true", default=True,
                        help="process escape sequences (\\n, \\r, \\t, \\', \\\", \\\\, \\xHH) in the text, as "
                             "llama.cpp does")
    parser.add_argument("--no-escape", dest="escape", action="store_false", help="take the text as it is")


def process_escapes(text: str) -> str:
    """llama.cpp's string_process_escapes, on the UTF-8 bytes of `text`."""
    data, out, i = text.encode("utf-8"), bytearray(), 0
    while i < len(data):
        byte = data[i]
        if byte != ord("\\") or i + 1 >= len(data):
            out.append(byte)
            i += 1
            continue
        code = data[i + 1]
        if code in _SIMPLE_ESCAPES:
            out += _SIMPLE_ESCAPES[code]
            i += 2
        elif code == ord("x") and i + 3 < len(data) and _hex_pair(data[i + 2:i + 4]) is not None:
            out.append(_hex_pair(data[i + 2:i + 4]) & 0xFF)
            i += 4
        else:                                  # not an escape: the backslash stays
            out += data[i:i + 2]
            i += 2
    return out.decode("utf-8", errors="replace")


def _hex_pair(chars: bytes) -> int | None:
    """The value C's strtol(chars, 16) reads when it consumes both characters, else None: two hex digits,
    or one after a space or a sign."""
    if len(chars) != 2 or chars[1:] not in _HEX:
        return None
    first, digit = chars[:1], int(chars[1:], 16)
    if first in _HEX:
        return int(chars, 16)
    if first in b" \t\n\v\f\r+":
        return digit
    return -digit if first == b"-" else None


def text_from_args(args, what: str = "prompt") -> str:
    """The text of -f/--file (UTF-8) or of -p/--prompt; a clear error without either or with both."""
    if args.file and args.prompt is not None:
        raise OptionError(f"give the {what} with -p/--prompt or with -f/--file, not both")
    if args.file:
        path = Path(args.file)
        if not path.is_file():
            raise OptionError(f"{what} file not found: {path}")
        text = path.read_text(encoding="utf-8").removesuffix("\n")
    elif args.prompt is not None:
        text = args.prompt
    else:
        raise OptionError(f"give the {what} with -p/--prompt or -f/--file")
    return process_escapes(text) if getattr(args, "escape", True) else text
