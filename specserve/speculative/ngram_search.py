"""Vectorised n-gram search over a token history (shared by the n-gram methods)."""
from __future__ import annotations

import numpy as np


def ngram_positions(tokens: np.ndarray, pattern, lo: int, hi: int) -> np.ndarray:
    """Every j in [lo, hi] (ascending) with tokens[j:j+n] == pattern.

    Windows that would run past the end of `tokens` never match.
    """
    pattern = np.asarray(pattern)
    n = len(pattern)
    hi = min(hi, len(tokens) - n)
    lo = max(lo, 0)
    if n == 0 or hi < lo:
        return np.empty(0, dtype=np.int64)
    region = tokens[lo:hi + n]
    candidates = np.flatnonzero(region[:hi - lo + 1] == pattern[0])
    for offset in range(1, n):
        if not len(candidates):
            break
        candidates = candidates[region[candidates + offset] == pattern[offset]]
    return candidates + lo


def find_last_ngram(tokens: np.ndarray, pattern, last_start: int, first_start: int = 1) -> int:
    """Largest j in [first_start, last_start] with tokens[j:j+n] == pattern, or 0 if none."""
    found = ngram_positions(tokens, pattern, first_start, last_start)
    return int(found[-1]) if len(found) else 0


def common_prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two token arrays."""
    k = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:k]) != np.asarray(b[:k]))
    return int(diff[0]) if len(diff) else k
