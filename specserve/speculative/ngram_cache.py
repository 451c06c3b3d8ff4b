"""ngram-cache: draft from n-gram statistics (llama.cpp `ngram-cache` type,
docs/reference/llamacpp-speculative.md §5.4): a per-slot context cache built from the slot's own
tokens, plus optional dynamic and static caches loaded from llama.cpp cache files
(`--lookup-cache-dynamic`, `--lookup-cache-static`, read-only while serving, shared by all slots).
Drafts are at most 8 tokens, as in llama.cpp.

As in llama.cpp, the context cache is updated with each chunk of new tokens on its own,
so n-grams that straddle two chunks are not counted. Unlike llama.cpp (whose begin() is
a no-op, so a slot keeps the previous request's n-grams and skips the new prompt's first
tokens), each request starts with a fresh context cache.
"""
from __future__ import annotations

import numpy as np

from ..option import Option, read_options
from .base import DraftRequest, TokenProposer
from .ngram_cache_store import NGRAM_MAX, NGRAM_MIN, NgramCache, cache_draft

N_DRAFT = 8


class NgramCacheProposer(TokenProposer):
    name = "ngram-cache"
    options = [
        Option(("-lcs", "--lookup-cache-static"), "lookup_cache_static", str, None,
               "ngram-cache: static n-gram cache file (from `specserve lookup create` or llama-lookup-create)"),
        Option(("-lcd", "--lookup-cache-dynamic"), "lookup_cache_dynamic", str, None,
               "ngram-cache: dynamic n-gram cache file (read-only while serving)"),
    ]

    def __init__(self, ctx):
        super().__init__(ctx)
        own = read_options(self.options, ctx.options, prefix="lookup_cache_")
        static_path, dynamic_path = own.static, own.dynamic
        self.static = NgramCache.load(static_path, "static lookup cache (--lookup-cache-static)") \
            if static_path else NgramCache()
        self.dynamic = NgramCache.load(dynamic_path, "dynamic lookup cache (--lookup-cache-dynamic)") \
            if dynamic_path else NgramCache()
        self.context = [NgramCache() for _ in range(ctx.n_slots)]
        self.cache_size = [0] * ctx.n_slots       # tokens of the slot's history already counted

    def begin(self, slot: int, prompt: np.ndarray) -> None:
        self.context[slot].clear()
        self.cache_size[slot] = 0

    def draft_one(self, slot: int, tokens: np.ndarray, id_last: int) -> list[int]:
        context = self.context[slot]
        if self.cache_size[slot] < len(tokens) + 1:
            new = np.append(tokens[self.cache_size[slot]:], id_last)
            context.update(new, NGRAM_MIN, NGRAM_MAX, len(new))
            self.cache_size[slot] = len(tokens) + 1
        tail = np.append(tokens[-(NGRAM_MAX - 1):], id_last)
        return cache_draft(tail, N_DRAFT, context, self.dynamic, self.static)

    def draft_tokens(self, req: DraftRequest) -> list[int]:
        return self.draft_one(req.slot, req.tokens, req.id_last)

    def max_draft(self) -> int:
        return N_DRAFT
