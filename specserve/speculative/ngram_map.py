"""ngram-map-k and ngram-map-k4v: per-slot maps from key n-grams to the m-grams that
followed them (llama.cpp `common_ngram_map`, docs/reference/llamacpp-speculative.md §5.2).

The key is the last n-1 tokens in the cache plus id_last. A match is looked up first
through a 262144-slot table of 32-bit LCG hashes of earlier n-grams (first writer wins,
so it may return an older occurrence), then by a linear search over the positions not
hashed yet; new positions are hashed after every search. Each matched key keeps a hit
counter and, for k4v, up to four distinct continuations with their counts: k4v drafts
only when one continuation occurs at least twice as often as all others together.
A draft is never longer than the last accepted length of the continuation it came from.
The map lives as long as the slot; begin() decides what a new request keeps of it.

Two options choose between llama.cpp's behaviour and another (docs/ngram.md):
  * begin (`--spec-ngram-map-*-begin`): llama.cpp trusts that a slot's new prompt continues
    what the map indexed (the prefix llama-server keeps cached) and leaves the positions below
    its cleanup point as they were. `check` (default) compares the new prompt with that history
    and starts the cleanup at the first token that differs, so an unrelated request is indexed
    from scratch; `trust` is llama.cpp's rule. Either way a prompt shorter than the last one is
    cleaned up as llama.cpp's #23936 does, and a history shorter than what the map saw restarts
    the map instead of aborting (#21233).
  * k4v draft (`--spec-ngram-map-k4v-draft`): `latest` (default, llama.cpp) copies the tokens
    after the key's latest occurrence whatever continuation won the vote; `winner` copies the
    winning continuation's own tokens (llama.cpp PR #28431).
The hashing and searches are vectorised; per-token Python work is limited to the few
positions where the key occurs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import OptionError
from ..option import Option, read_options
from .base import DraftRequest, TokenProposer
from .ngram_search import common_prefix_len, ngram_positions

KEY_MAP_SIZE = 262144
MAX_VALUES = 4
MAX_COUNT = 16380            # hit and occurrence counters saturate here
LCG32_FACTOR = 2654435761
DOMINANCE = 2                # k4v: best continuation must occur >= 2x all others together
BEGIN_MODES = ("check", "trust")          # trust: llama.cpp's begin()
DRAFT_MODES = ("latest", "winner")        # latest: llama.cpp's k4v draft


def lcg32_hash(tokens) -> int:
    """32-bit LCG hash of one n-gram: h = h * 2654435761 + t (mod 2^32)."""
    h = 0
    for t in tokens:
        h = (h * LCG32_FACTOR + int(t)) & 0xFFFFFFFF
    return h


def lcg32_hashes(tokens: np.ndarray, n: int, lo: int, hi: int) -> np.ndarray:
    """lcg32_hash(tokens[j:j+n]) for every j in [lo, hi], vectorised (uint32 wraps mod 2^32)."""
    count = hi - lo + 1
    window = tokens[lo:hi + n].astype(np.uint32)
    h = np.zeros(count, dtype=np.uint32)
    factor = np.uint32(LCG32_FACTOR)
    for i in range(n):
        h = h * factor + window[i:i + count]
    return h


@dataclass
class MapValue:
    value_idx: int = 0        # where this continuation starts (0 = empty slot)
    value_num: int = 0        # occurrences counted
    n_accepted: int = 0       # last accepted length of a draft from it (bounds the next draft)


@dataclass
class MapKey:
    key_idx: int              # a position where the key n-gram occurs
    stat_idx: int = 0         # continuations are counted up to here
    key_num: int = 0          # successful lookups of this key
    values: list[MapValue] = field(default_factory=list)


class NgramMap:
    """The map of one slot."""

    def __init__(self, n: int, m: int, key_only: bool, min_hits: int, begin: str = "check", draft: str = "latest"):
        self.n, self.m, self.key_only, self.min_hits = n, m, key_only, min_hits
        self.trust_prefix = begin == "trust"      # llama.cpp's begin(): no check of the new prompt
        self.draft_latest = draft == "latest"     # llama.cpp's k4v: copy after the latest match
        self.key_map = np.zeros(KEY_MAP_SIZE, dtype=np.uint32)
        self.reset()

    def reset(self) -> None:
        self.key_map[:] = 0
        self.key_map_last_idx = 0
        self.keys: list[MapKey] = []
        self.key_positions = np.empty(0, dtype=np.int64)   # key_idx of each key, for a vectorised lookup
        self.size_last_begin = 0
        self.idx_last_check = 0
        self.history = np.empty(0, dtype=np.int64)         # the longest token history the map has indexed
        self.last_draft: tuple[MapKey, int] | None = None

    def _new_values(self) -> list[MapValue]:
        return [MapValue(0, 0, self.m) for _ in range(MAX_VALUES)]

    def _keys_changed(self) -> None:
        self.key_positions = np.fromiter((k.key_idx for k in self.keys), dtype=np.int64, count=len(self.keys))

    # ------------------------------------------------------------------ begin
    def begin(self, tokens: np.ndarray) -> None:
        n, m = self.n, self.m
        size_begin = len(tokens)
        cleanup = self.size_last_begin
        if cleanup > size_begin:                        # the prompt shrank (llama.cpp #23936)
            cleanup = size_begin - n - m if size_begin > n + m else 0
        stale = size_begin < self.idx_last_check
        if not self.trust_prefix:
            # llama.cpp assumes everything below `assumed` is unchanged; check it
            assumed = cleanup if stale else len(self.history)
            shared = common_prefix_len(self.history, tokens)
            if shared < assumed:
                cleanup = min(cleanup, shared - n - m if shared > n + m else 0)
                stale = True
        if stale:
            self.key_map[self.key_map >= cleanup] = 0
            self.key_map_last_idx = cleanup - 1 if cleanup > 0 else 0
            self._drop_from(cleanup)
        self.idx_last_check = size_begin
        self.size_last_begin = size_begin
        self.history = tokens
        self.last_draft = None

    def _drop_from(self, cleanup: int) -> None:
        """Forget keys and continuations at positions >= cleanup (llama.cpp's begin() refresh)."""
        kept = []
        for key in self.keys:
            if key.key_idx >= cleanup:
                continue
            if not self.key_only:
                # surviving continuations move to the front; freed slots become empty
                live = [v for v in key.values if v.value_idx != 0 and v.value_idx < cleanup]
                key.values = live + [MapValue(0, 0, self.m) for _ in range(MAX_VALUES - len(live))]
                if key.values[0].value_idx == 0:
                    continue
            kept.append(key)
        self.keys = kept
        self._keys_changed()

    # ------------------------------------------------------------------ draft
    def draft(self, inp: np.ndarray, sampled: int) -> list[int]:
        self.last_draft = None
        n, m = self.n, self.m
        length = len(inp)
        if length < 2 * n + m:
            return []
        if self.idx_last_check > length or self.size_last_begin > length:
            self.reset()            # llama.cpp aborts here; a history that went backwards restarts the map
        self.idx_last_check = length
        key = np.append(inp[length - n + 1:], sampled).astype(inp.dtype)
        last_start = length - n - m - 1
        match = 0
        # (1) hash probe
        probe = int(self.key_map[lcg32_hash(key) % KEY_MAP_SIZE])
        if probe != 0 and probe < last_start and np.array_equal(inp[probe:probe + n], key):
            match = probe
        # (2) positions of the begin() prompt not hashed yet, then (3) the newer positions
        old_lo, old_hi = self.key_map_last_idx + 1, self.size_last_begin - n - m - 1
        has_old = self.size_last_begin > n + m + 1
        new_lo, new_hi = max(self.size_last_begin, self.key_map_last_idx) + 1, last_start
        if match == 0 and has_old:
            found = ngram_positions(inp, key, old_lo, old_hi)
            match = int(found[-1]) if len(found) else 0
        if match == 0:
            found = ngram_positions(inp, key, new_lo, new_hi)
            match = int(found[-1]) if len(found) else 0
        self._insert_hashes(inp, ([(old_lo, old_hi)] if has_old else []) + [(new_lo, new_hi)])
        self.key_map_last_idx = max(last_start, self.key_map_last_idx)
        self.history = inp
        if match == 0:
            return []
        return self._draft_from_match(inp, key, match)

    def _insert_hashes(self, inp: np.ndarray, ranges: list[tuple[int, int]]) -> None:
        """Hash positions (each range in descending order); an occupied table slot is never overwritten."""
        parts = [np.arange(hi, lo - 1, -1) for lo, hi in ranges if hi >= lo]
        if not parts:
            return
        positions = np.concatenate(parts)
        hashes = np.concatenate([lcg32_hashes(inp, self.n, lo, hi)[::-1] for lo, hi in ranges if hi >= lo])
        slots, first = np.unique(hashes % KEY_MAP_SIZE, return_index=True)
        empty = self.key_map[slots] == 0
        self.key_map[slots[empty]] = positions[first[empty]]

    def _find_key(self, inp: np.ndarray, key: np.ndarray) -> MapKey | None:
        """The first stored key whose n-gram (read from the current history) equals `key`."""
        if not self.keys:
            return None
        n = self.n
        windows = self.key_positions[:, None] + np.arange(n)
        inside = windows[:, -1] < len(inp)
        equal = inside & (inp[np.minimum(windows, len(inp) - 1)] == key).all(axis=1)
        hit = np.flatnonzero(equal)
        return self.keys[int(hit[0])] if len(hit) else None

    def _draft_from_match(self, inp: np.ndarray, key: np.ndarray, match: int) -> list[int]:
        n, m = self.n, self.m
        cur = self._find_key(inp, key)
        if cur is None:
            cur = MapKey(match, 0, 0, self._new_values())
            self.keys.append(cur)
            self.key_positions = np.append(self.key_positions, match)
        cur.key_num = min(cur.key_num + 1, MAX_COUNT)
        if self.key_only:                   # ngram-map-k: min_hits is not checked (as in llama.cpp)
            take = min(m, cur.values[0].n_accepted)
            self.last_draft = (cur, 0)
            return inp[match + n:match + n + take].tolist()
        if cur.key_num < self.min_hits:
            return []
        self._count_values(inp, key, cur, match)
        counts = [v.value_num for v in cur.values]
        best = max(range(MAX_VALUES), key=lambda v: (counts[v], -v)) if any(counts) else 0
        others = sum(counts) - counts[best]
        if others > 0 and counts[best] < DOMINANCE * others:
            return []
        value = cur.values[best]
        take = min(m, value.n_accepted)
        self.last_draft = (cur, best)
        start = match + n if self.draft_latest else value.value_idx
        return inp[start:start + take].tolist()

    def _count_values(self, inp: np.ndarray, key: np.ndarray, cur: MapKey, match: int) -> None:
        """Count the continuations after every occurrence of the key in [stat_idx, match] (both ends)."""
        n, m = self.n, self.m
        for i in ngram_positions(inp, key, cur.stat_idx, match).tolist():
            start = i + n
            slot = -1
            for v, value in enumerate(cur.values):
                if value.value_idx == 0:
                    cur.values[v] = MapValue(start, 0, m)
                    slot = v
                    break
                if value.value_idx + m <= len(inp) and start + m <= len(inp) and \
                        np.array_equal(inp[start:start + m], inp[value.value_idx:value.value_idx + m]):
                    slot = v
                    break
            if slot >= 0:              # a fifth distinct continuation is not counted
                cur.values[slot].value_num = min(cur.values[slot].value_num + 1, MAX_COUNT)
        cur.stat_idx = match

    # ------------------------------------------------------------------ accept
    def accept(self, n_accepted: int) -> None:
        if self.last_draft is not None:
            key, v = self.last_draft
            key.values[v].n_accepted = n_accepted


def map_options(kind: str) -> list[Option]:
    prefix = f"spec_ngram_map_{kind.replace('-', '_')}"
    flag = f"--spec-ngram-map-{kind}"
    hits_note = " (unused by ngram-map-k, as in llama.cpp)" if kind == "k" else ""
    options = [
        Option((f"{flag}-size-n",), f"{prefix}_size_n", int, 12, f"ngram-map-{kind}: length of the key n-gram"),
        Option((f"{flag}-size-m",), f"{prefix}_size_m", int, 48,
               f"ngram-map-{kind}: length of the drafted m-gram"),
        Option((f"{flag}-min-hits",), f"{prefix}_min_hits", int, 1,
               f"ngram-map-{kind}: lookups of a key before it drafts{hits_note}"),
        Option((f"{flag}-begin",), f"{prefix}_begin", str, "check",
               f"ngram-map-{kind}: what a slot's new prompt does to its map: check (compare it with the history "
               "the map indexed and index it from the first token that differs) or trust (assume it continues "
               "that history, as llama.cpp does)"),
    ]
    if kind == "k4v":
        options.append(Option((f"{flag}-draft",), f"{prefix}_draft", str, "latest",
                              "ngram-map-k4v: which tokens a draft copies: latest (those after the key's latest "
                              "occurrence, as llama.cpp does) or winner (those of the continuation that won the "
                              "vote, as llama.cpp PR #28431 proposes)"))
    return options


class NgramMapK(TokenProposer):
    name = "ngram-map-k"
    kind = "k"
    key_only = True
    options = map_options("k")

    def __init__(self, ctx):
        super().__init__(ctx)
        own = read_options(self.options, ctx.options, prefix=f"spec_ngram_map_{self.kind}_")
        self.n, self.m, self.min_hits = own.size_n, own.size_m, own.min_hits
        flag = f"--spec-ngram-map-{self.kind}"
        if self.n < 1 or self.m < 1:
            raise OptionError(f"{flag}-size-n and -size-m must be >= 1 (got {self.n} and {self.m})")
        if own.begin not in BEGIN_MODES:
            raise OptionError(f"{flag}-begin must be one of {', '.join(BEGIN_MODES)}, got {own.begin!r}")
        self.begin_mode, self.draft_mode = own.begin, getattr(own, "draft", DRAFT_MODES[0])
        if self.draft_mode not in DRAFT_MODES:
            raise OptionError(f"{flag}-draft must be one of {', '.join(DRAFT_MODES)}, got {self.draft_mode!r}")
        self.maps: list[NgramMap | None] = [None] * ctx.n_slots

    def _map(self, slot: int) -> NgramMap:
        if self.maps[slot] is None:          # allocated on first use (1 MiB hash table per slot)
            self.maps[slot] = NgramMap(self.n, self.m, self.key_only, self.min_hits, self.begin_mode,
                                       self.draft_mode)
        return self.maps[slot]

    def begin(self, slot: int, prompt: np.ndarray) -> None:
        self._map(slot).begin(prompt)

    def draft_tokens(self, req: DraftRequest) -> list[int]:
        return self._map(req.slot).draft(req.tokens, req.id_last)

    def accept(self, slot: int, n_accepted: int, is_other: bool) -> None:
        if not is_other and self.maps[slot] is not None:
            self.maps[slot].accept(n_accepted)

    def max_draft(self) -> int:
        return self.m


class NgramMapK4v(NgramMapK):
    name = "ngram-map-k4v"
    kind = "k4v"
    key_only = False
    options = map_options("k4v")
