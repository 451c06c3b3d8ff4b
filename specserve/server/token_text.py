"""Each token's exact bytes and printable text, for logprobs.

Decoding a single token is not enough: a byte-level BPE token can hold part of a UTF-8
character, and many such tokens would all decode to U+FFFD. The bytes come from the
vocabulary itself (GPT-2 byte-to-unicode mapping, or `<0xNN>` byte-fallback pieces); a
token whose bytes are not valid UTF-8 is shown as "bytes:\\xNN..." as OpenAI does.
"""
from __future__ import annotations

import re

from tokenizers import decoders

from ..models.tokenizer import Tokenizer

BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's reversible map of bytes to printable characters, inverted (char -> byte)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class TokenTexts:
    """Token id -> (text, bytes), cached. Used from the event loop thread only."""

    def __init__(self, tokenizer: Tokenizer | None):
        self.tokenizer = tokenizer
        self.byte_of = None
        self.added: set[int] = set()
        if tokenizer is not None:
            self.added = set(tokenizer.tok.get_added_tokens_decoder())
            if isinstance(tokenizer.tok.decoder, decoders.ByteLevel):
                self.byte_of = byte_level_alphabet()
        self.cache: dict[int, tuple[str, bytes]] = {}

    def token_bytes(self, token_id: int) -> bytes:
        piece = self.tokenizer.id_to_token(token_id) if self.tokenizer is not None else None
        if piece is None:
            return b""
        if token_id in self.added:
            return piece.encode("utf-8")
        if self.byte_of is not None and all(c in self.byte_of for c in piece):
            return bytes(self.byte_of[c] for c in piece)
        match = BYTE_FALLBACK.fullmatch(piece)
        if match:
            return bytes([int(match.group(1), 16)])
        return self.tokenizer.decode([token_id], skip_special_tokens=False).encode("utf-8")

    def get(self, token_id: int) -> tuple[str, bytes]:
        """(text, bytes) of one token; text is unique per distinct byte string."""
        hit = self.cache.get(token_id)
        if hit is None:
            raw = self.token_bytes(token_id)
            if not raw:
                text = f"<token {token_id}>"     # an id the tokenizer does not know (padded vocabularies)
            else:
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    text = "bytes:" + "".join(f"\\x{b:02x}" for b in raw)
            hit = self.cache[token_id] = (text, raw)
        return hit

    def __call__(self, token_id: int) -> str:
        return self.get(token_id)[0]
