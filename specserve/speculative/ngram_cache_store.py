"""n-gram caches (llama.cpp common/ngram-cache, docs/reference/llamacpp-speculative.md §5.4): counts of the
tokens that followed each n-gram of 1..4 tokens, the drafting rule over a context,
a dynamic and a static cache, and llama.cpp's binary file format.

File format (little-endian int32, interchangeable with llama-lookup-create/-merge):
repeated records `[tokens[4]][ntokens][ntokens x (token, count)]`, where an n-gram
shorter than 4 tokens is padded with -1.

Ties: llama.cpp picks the first of equally scored tokens in hash-map iteration order,
which is not reproducible. Here the lowest token id wins a tie, whatever order the
cache was built, loaded or merged in.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from ..errors import OptionError

NGRAM_MIN, NGRAM_MAX, NGRAM_STATIC = 1, 4, 2
TOKEN_NULL = -1
# drafting thresholds, indexed by n-gram size - 1
MIN_SAMPLE_LAX, MIN_PERCENT_LAX = (2, 2, 1, 1), (66, 50, 50, 50)
MIN_SAMPLE_STRICT, MIN_PERCENT_STRICT = (4, 3, 2, 2), (75, 66, 66, 66)

Ngram = tuple[int, int, int, int]


def ngram_key(tokens) -> Ngram:
    tokens = [int(t) for t in tokens]
    return tuple(tokens + [TOKEN_NULL] * (NGRAM_MAX - len(tokens)))


class NgramCache:
    """n-gram -> {following token: count}; dicts keep insertion order, so save() after
    load() reproduces the file byte for byte."""

    def __init__(self):
        self.table: dict[Ngram, dict[int, int]] = {}

    def __len__(self) -> int:
        return len(self.table)

    def get(self, ngram: Ngram) -> dict[int, int] | None:
        return self.table.get(ngram)

    def clear(self) -> None:
        self.table.clear()

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
        """Add another cache's counts to this one."""
        for ngram, part in other.table.items():
            mine = self.table.get(ngram)
            if mine is None:
                self.table[ngram] = dict(part)
                continue
            for token, count in part.items():
                mine[token] = mine.get(token, 0) + count

    # ------------------------------------------------------------------ files
    def to_bytes(self) -> bytes:
        words: list[int] = []
        for ngram, part in self.table.items():
            words.extend(ngram)
            words.append(len(part))
            for token, count in part.items():
                words.append(token)
                words.append(count)
        return np.asarray(words, dtype="<i4").tobytes()

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.to_bytes())

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
def _best(part: dict[int, int], score) -> tuple[int, int, int]:
    """(token, count, total) for the highest score; ties go to the lowest token id."""
    token = min(part, key=lambda t: (-score(t, part[t]), t))
    return token, part[token], sum(part.values())


def _draft_primary(cache: NgramCache, ngrams: list, part_static: dict[int, int],
                   min_sample, min_percent) -> int | None:
    """Longest n-gram first; a candidate's count is weighted by 100x its static count if any."""
    def score(token, count):
        return count * (100 * part_static[token] if token in part_static else 1)

    for i in range(len(ngrams) - 1, -1, -1):
        part = cache.get(ngrams[i]) if ngrams[i] is not None else None
        if not part:
            continue
        token, count, total = _best(part, score)
        if total < min_sample[i] or 100 * count < min_percent[i] * total:
            continue
        return token
    return None


def _draft_static(part_static: dict[int, int] | None) -> int | None:
    if not part_static:
        return None
    token, count, total = _best(part_static, lambda t, c: c)
    i = NGRAM_STATIC - 1
    if total < MIN_SAMPLE_LAX[i] or 100 * count < MIN_PERCENT_LAX[i] * total:
        return None
    return token


def cache_draft(inp, n_draft: int, context: NgramCache, dynamic: NgramCache, static: NgramCache) -> list[int]:
    """Up to n_draft tokens continuing `inp` (llama.cpp common_ngram_cache_draft): each token
    from the context cache (lax thresholds), else the dynamic cache (strict), else the
    static cache alone."""
    if len(inp) < NGRAM_STATIC:
        return []
    tail = [int(t) for t in inp[-NGRAM_MAX:]]
    out: list[int] = []
    while len(out) < n_draft:
        part_static = static.get(ngram_key(tail[-NGRAM_STATIC:])) or {}
        ngrams = [ngram_key(tail[-size:]) if size <= len(tail) else None
                  for size in range(NGRAM_MIN, NGRAM_MAX + 1)]
        token = _draft_primary(context, ngrams, part_static, MIN_SAMPLE_LAX, MIN_PERCENT_LAX)
        if token is None:
            token = _draft_primary(dynamic, ngrams, part_static, MIN_SAMPLE_STRICT, MIN_PERCENT_STRICT)
        if token is None:
            token = _draft_static(part_static)
        if token is None:
            break
        out.append(token)
        tail = (tail + [token])[-NGRAM_MAX:]
    return out
