"""ngram-cache: draft from n-gram statistics (llama.cpp `ngram-cache` type,
docs/reference/llamacpp-speculative.md §5.4): a per-slot context cache built from the slot's own
tokens, plus optional dynamic and static caches loaded from llama.cpp cache files
(`--lookup-cache-dynamic`, `--lookup-cache-static`, read-only while serving, shared by all slots).
Drafts are at most 8 tokens, as in llama.cpp.

As in llama.cpp, the context cache is updated with each chunk of new tokens on its own,
so n-grams that straddle two chunks are not counted.

What the context cache holds (`--spec-ngram-cache-context`, docs/ngram.md): `request` (default)
starts each request with a fresh cache counted from its whole prompt. `slot` is llama.cpp's rule:
begin() does nothing, so the cache and the count of tokens it has seen outlive the request; the
next prompt's first tokens, as many as the slot had counted, are never counted, and the previous
requests' n-grams keep drafting.
"""
from __future__ import annotations

import numpy as np

from ..errors import OptionError
from ..option import Option, read_options
from .base import DraftRequest, TokenProposer
from .ngram_cache_store import NGRAM_MAX, NGRAM_MIN, TIE_RULES, NgramCache, cache_draft

N_DRAFT = 8
CONTEXT_MODES = ("request", "slot")


class NgramCacheProposer(TokenProposer):
    name = "ngram-cache"
    options = [
        Option(("-lcs", "--lookup-cache-static"), "lookup_cache_static", str, None,
               "ngram-cache: static n-gram cache file (from `specserve lookup create` or llama-lookup-create)"),
        Option(("-lcd", "--lookup-cache-dynamic"), "lookup_cache_dynamic", str, None,
               "ngram-cache: dynamic n-gram cache file (read-only while serving)"),
        Option(("--spec-ngram-cache-context",), "spec_ngram_cache_context", str, "request",
               "ngram-cache: what the context cache counts: request (each request's own tokens, from its whole "
               "prompt) or slot (everything the slot counted since the server started, as llama.cpp does: a new "
               "prompt's first tokens, as many as the slot had counted, are skipped)"),
        Option(("--spec-ngram-cache-ties",), "spec_ngram_cache_ties", str, "libstdc++",
               "ngram-cache: which of equally scored tokens is drafted: libstdc++ (the first in the iteration "
               "order of GCC's std::unordered_map, as llama.cpp built on Linux does) or lowest-id"),
    ]

    def __init__(self, ctx):
        super().__init__(ctx)
        own = read_options(self.options, ctx.options)
        static_path, dynamic_path = own.lookup_cache_static, own.lookup_cache_dynamic
        if own.spec_ngram_cache_context not in CONTEXT_MODES:
            raise OptionError(f"--spec-ngram-cache-context must be one of {', '.join(CONTEXT_MODES)}, "
                              f"got {own.spec_ngram_cache_context!r}")
        self.per_request = own.spec_ngram_cache_context == "request"
        if own.spec_ngram_cache_ties not in TIE_RULES:
            raise OptionError(f"--spec-ngram-cache-ties must be one of {', '.join(TIE_RULES)}, "
                              f"got {own.spec_ngram_cache_ties!r}")
        self.ties = own.spec_ngram_cache_ties
        self.static = NgramCache.load(static_path, "static lookup cache (--lookup-cache-static)") \
            if static_path else NgramCache()
        self.dynamic = NgramCache.load(dynamic_path, "dynamic lookup cache (--lookup-cache-dynamic)") \
            if dynamic_path else NgramCache()
        self.context = [NgramCache() for _ in range(ctx.n_slots)]
        self.cache_size = [0] * ctx.n_slots       # tokens of the slot's history already counted

    def begin(self, slot: int, prompt: np.ndarray) -> None:
        if self.per_request:
            self.context[slot].clear()
            self.cache_size[slot] = 0

    def draft_one(self, slot: int, tokens: np.ndarray, id_last: int) -> list[int]:
        context = self.context[slot]
        if self.cache_size[slot] < len(tokens) + 1:
            new = np.append(tokens[self.cache_size[slot]:], id_last)
            context.update(new, NGRAM_MIN, NGRAM_MAX, len(new))
            self.cache_size[slot] = len(tokens) + 1
        tail = np.append(tokens[-(NGRAM_MAX - 1):], id_last)
        return cache_draft(tail, N_DRAFT, context, self.dynamic, self.static, self.ties)

    def draft_tokens(self, req: DraftRequest) -> list[int]:
        return self.draft_one(req.slot, req.tokens, req.id_last)

    def max_draft(self) -> int:
        return N_DRAFT
