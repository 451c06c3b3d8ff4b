"""ngram-simple: draft the m tokens that followed the most recent earlier occurrence of
the current n-gram (llama.cpp `common_ngram_simple_draft`, docs/reference/llamacpp-speculative.md §5.1).

The current n-gram is the last n-1 tokens in the cache plus id_last. Quirks kept on
purpose for parity: position 0 never matches, the history must be longer than n+m+1,
and a match needs at least n following tokens. The search is one vectorised pass.
"""
from __future__ import annotations

import numpy as np

from ..errors import OptionError
from ..option import Option, read_options
from .base import DraftRequest, TokenProposer
from .ngram_search import find_last_ngram


def ngram_simple_draft(tokens: np.ndarray, id_last: int, n: int, m: int) -> list[int]:
    length = len(tokens)
    if length <= n + m + 1:
        return []
    pattern = np.append(tokens[length - n + 1:], id_last).astype(tokens.dtype)
    match = find_last_ngram(tokens, pattern, length - n - 1)
    if match == 0:
        return []
    copy_max = min(m, length - (match + n))
    if copy_max < n:
        return []
    return tokens[match + n:match + n + copy_max].tolist()


class NgramSimple(TokenProposer):
    name = "ngram-simple"
    options = [
        Option(("--spec-ngram-simple-size-n",), "spec_ngram_simple_size_n", int, 12,
               "ngram-simple: length of the lookup n-gram"),
        Option(("--spec-ngram-simple-size-m",), "spec_ngram_simple_size_m", int, 48,
               "ngram-simple: length of the draft m-gram"),
        Option(("--spec-ngram-simple-min-hits",), "spec_ngram_simple_min_hits", int, 1,
               "ngram-simple: minimum hits (accepted for compatibility; unused, as in llama.cpp)"),
    ]

    def __init__(self, ctx):
        super().__init__(ctx)
        own = read_options(self.options, ctx.options, prefix="spec_ngram_simple_")
        self.n, self.m = own.size_n, own.size_m
        if self.n < 1 or self.m < 1:
            raise OptionError("--spec-ngram-simple-size-n and --spec-ngram-simple-size-m must be >= 1")

    def draft_tokens(self, req: DraftRequest) -> list[int]:
        return ngram_simple_draft(req.tokens, req.id_last, self.n, self.m)

    def max_draft(self) -> int:
        return self.m
