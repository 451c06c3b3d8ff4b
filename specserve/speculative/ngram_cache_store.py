"""n-gram caches (llama.cpp common/ngram-cache, docs/reference/llamacpp-speculative.md §5.4): counts of the
tokens that followed each n-gram of 1..4 tokens, the drafting rule over a context,
a dynamic and a static cache, and llama.cpp's binary file format.

File format (little-endian int32, interchangeable with llama-lookup-create/-merge):
repeated records `[tokens[4]][ntokens][ntokens x (token, count)]`, where an n-gram
shorter than 4 tokens is padded with -1.

Ties: llama.cpp picks the first of equally scored tokens in its hash map's iteration order, which
depends on the C++ standard library it was built with. `ties="libstdc++"` reproduces GCC's (llama.cpp
on Linux; hash_map_order.py) from the order the tokens of each n-gram were first counted or loaded;
`ties="lowest-id"` gives a tie to the lowest token id, whatever order the cache was built, loaded or
merged in.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from ..errors import OptionError
from .hash_map_order import iteration_order, ngram_hash

NGRAM_MIN, NGRAM_MAX, NGRAM_STATIC = 1, 4, 2
TOKEN_NULL = -1
# drafting thresholds, indexed by n-gram size - 1
MIN_SAMPLE_LAX, MIN_PERCENT_LAX = (2, 2, 1, 1), (66, 50, 50, 50)
MIN_SAMPLE_STRICT, MIN_PERCENT_STRICT = (4, 3, 2, 2), (75, 66, 66, 66)

Ngram = tuple[int, int, int, int]
TIE_RULES = ("libstdc++", "lowest-id")
SAVE_ORDERS = ("insertion", "libstdc++")


def ngram_key(tokens) -> Ngram:
    tokens = [int(t) for t in tokens]
    return tuple(tokens + [TOKEN_NULL] * (NGRAM_MAX - len(tokens)))


class NgramCache:
    """n-gram -> {following token: count}; dicts keep insertion order, so save() after
    load() reproduces the file byte for byte."""

    def __init__(self):
        self.table: dict[Ngram, dict[int, int]] = {}
        self._orders: dict[Ngram, list[int]] = {}      # hash_order() memo; tokens are only ever added

    def __len__(self) -> int:
        return len(self.table)

    def get(self, ngram: Ngram) -> dict[int, int] | None:
        return self.table.get(ngram)

    def clear(self) -> None:
        self.table.clear()
        self._orders.clear()

    def hash_order(self, ngram: Ngram) -> list[int]:
        """The tokens after `ngram` in libstdc++'s iteration order of llama.cpp's hash map of them."""
        part = self.table[ngram]
        order = self._orders.get(ngram)
        if order is None or len(order) != len(part):
            order = self._orders[ngram] = iteration_order(part)
        return order

    def update(self, inp, nmin: int, nmax: int, nnew: int) -> None:
        """Count, for each size in nmin..nmax, the n-grams ending before each of the last
        `nnew` tokens of `inp` and the token that follows them."""
        length = len(inp)
        offset = max(0, length - nnew - nmax)        # only the tail of `inp` is read
        tail = np.asarray(inp[offset:], dtype=np.int64)
        for size in range(nmin, nmax + 1):
            start = max(length - nnew, size) - offset
            if start >= len(tail):
                continue
            # count (n-gram, next token) rows in C (Counter keeps first-occurrence order), then
            # fold them into the table: Python work per distinct row, not per position
            columns = [tail[start - size + k:len(tail) - size + k].tolist() for k in range(size)]
            columns.append(tail[start:].tolist())
            pad = (TOKEN_NULL,) * (NGRAM_MAX - size)
            for row, count in Counter(zip(*columns)).items():
                self._add(row[:size] + pad, row[size], count)

    def _add(self, ngram: Ngram, token: int, count: int) -> None:
        part = self.table.get(ngram)
        if part is None:
            self.table[ngram] = {token: count}
        else:
            part[token] = part.get(token, 0) + count

    def merge(self, other: "NgramCache") -> None:
        """Add another cache's counts to this one. What is new arrives in the order llama.cpp's merge adds
        it (common_ngram_cache_merge walks the other cache in its hash maps' order), so this cache's ties
        and its saved file stay llama.cpp's; a new n-gram's tokens keep their order (llama.cpp copies the map)."""
        for ngram in iteration_order(other.table, ngram_hash):
            part = other.table[ngram]
            mine = self.table.get(ngram)
            if mine is None:
                self.table[ngram] = dict(part)
                continue
            tokens = iteration_order(part) if any(t not in mine for t in part) else part
            for token in tokens:
                mine[token] = mine.get(token, 0) + part[token]

    # ------------------------------------------------------------------ files
    def to_bytes(self, order: str = "insertion") -> bytes:
        """The file. order: "insertion" (the records and tokens in the order they were first counted or
        loaded, so loading then saving a file reproduces it) or "libstdc++" (the order llama.cpp built with
        GCC writes a cache it counted: llama-lookup-create's file, byte for byte)."""
        if order not in SAVE_ORDERS:
            raise ValueError(f"unknown n-gram cache file order {order!r}; valid: {', '.join(SAVE_ORDERS)}")
        hashed = order == "libstdc++"
        words: list[int] = []
        for ngram in iteration_order(self.table, ngram_hash) if hashed else self.table:
            part = self.table[ngram]
            words.extend(ngram)
            words.append(len(part))
            for token in iteration_order(part) if hashed else part:
                words.append(token)
                words.append(part[token])
        return np.asarray(words, dtype="<i4").tobytes()

    def save(self, path: str | Path, order: str = "insertion") -> None:
        Path(path).write_bytes(self.to_bytes(order))

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "cache") -> "NgramCache":
        if len(data) % 4:
            raise OptionError(f"{source}: not an n-gram cache file (size {len(data)} is not a multiple of 4)")
        words = np.frombuffer(data, dtype="<i4").tolist()
        cache = cls()
        table = cache.table
        i, end = 0, len(words)
        while i < end:
            if i + 5 > end:
                raise OptionError(f"{source}: truncated record at byte {4 * i}")
            ngram = tuple(words[i:i + 4])
            n_tokens = words[i + 4]
            if n_tokens <= 0 or i + 5 + 2 * n_tokens > end:
                raise OptionError(f"{source}: corrupt record at byte {4 * i} ({n_tokens} tokens)")
            pairs = words[i + 5:i + 5 + 2 * n_tokens]
            i += 5 + 2 * n_tokens
            part: dict[int, int] = {}
            for token, count in zip(pairs[0::2], pairs[1::2]):
                if count <= 0:
                    raise OptionError(f"{source}: corrupt record (count {count}) before byte {4 * i}")
                part.setdefault(token, count)        # a repeated token or n-gram keeps its first entry
            table.setdefault(ngram, part)
        return cache

    @classmethod
    def load(cls, path: str | Path, what: str = "n-gram cache") -> "NgramCache":
        path = Path(path)
        if not path.is_file():
            raise OptionError(f"{what} file not found: {path}")
        return cls.from_bytes(path.read_bytes(), str(path))


# ---------------------------------------------------------------------- drafting
def _best(part: dict[int, int], score, order) -> tuple[int, int, int]:
    """(token, count, total) for the highest score. A tie goes to the first of the tied tokens in
    `order()` (the hash map's iteration order), or to the lowest token id when order is None."""
    scores = {t: score(t, c) for t, c in part.items()}
    top = max(scores.values())
    tied = [t for t, v in scores.items() if v == top]
    if len(tied) == 1:
        token = tied[0]
    elif order is None:
        token = min(tied)
    else:
        tied = set(tied)
        token = next(t for t in order() if t in tied)
    return token, part[token], sum(part.values())


def _order_of(cache: NgramCache, ngram: Ngram, ties: str):
    return (lambda: cache.hash_order(ngram)) if ties == "libstdc++" else None


def _draft_primary(cache: NgramCache, ngrams: list, part_static: dict[int, int],
                   min_sample, min_percent, ties: str) -> int | None:
    """Longest n-gram first; a candidate's count is weighted by 100x its static count if any."""
    def score(token, count):
        return count * (100 * part_static[token] if token in part_static else 1)

    for i in range(len(ngrams) - 1, -1, -1):
        part = cache.get(ngrams[i]) if ngrams[i] is not None else None
        if not part:
            continue
        token, count, total = _best(part, score, _order_of(cache, ngrams[i], ties))
        if total < min_sample[i] or 100 * count < min_percent[i] * total:
            continue
        return token
    return None


def _draft_static(static: NgramCache, ngram: Ngram, ties: str) -> int | None:
    part_static = static.get(ngram)
    if not part_static:
        return None
    token, count, total = _best(part_static, lambda t, c: c, _order_of(static, ngram, ties))
    i = NGRAM_STATIC - 1
    if total < MIN_SAMPLE_LAX[i] or 100 * count < MIN_PERCENT_LAX[i] * total:
        return None
    return token


def cache_draft(inp, n_draft: int, context: NgramCache, dynamic: NgramCache, static: NgramCache,
                ties: str = "lowest-id") -> list[int]:
    """Up to n_draft tokens continuing `inp` (llama.cpp common_ngram_cache_draft): each token
    from the context cache (lax thresholds), else the dynamic cache (strict), else the
    static cache alone. `ties`: one of TIE_RULES (see the module's docstring)."""
    if len(inp) < NGRAM_STATIC:
        return []
    tail = [int(t) for t in inp[-NGRAM_MAX:]]
    out: list[int] = []
    while len(out) < n_draft:
        static_key = ngram_key(tail[-NGRAM_STATIC:])
        part_static = static.get(static_key) or {}
        ngrams = [ngram_key(tail[-size:]) if size <= len(tail) else None
                  for size in range(NGRAM_MIN, NGRAM_MAX + 1)]
        token = _draft_primary(context, ngrams, part_static, MIN_SAMPLE_LAX, MIN_PERCENT_LAX, ties)
        if token is None:
            token = _draft_primary(dynamic, ngrams, part_static, MIN_SAMPLE_STRICT, MIN_PERCENT_STRICT, ties)
        if token is None:
            token = _draft_static(static, static_key, ties)
        if token is None:
            break
        out.append(token)
        tail = (tail + [token])[-NGRAM_MAX:]
    return out
