"""ngram-mod: one hash pool shared by all slots maps every n-gram of the histories to
the token that followed it; drafts chain lookups (llama.cpp `common_ngram_mod`,
docs/reference/llamacpp-speculative.md §5.3).

Pool: 4M int32 entries (16 MiB), index = 64-bit LCG rolling hash of the n-gram
(h = h * 6364136223846793005 + t, wrapping mod 2^64) mod 2^22. There is no key check,
so a collision drafts a wrong token (verification rejects it). `used` counts writes to
occupied entries (llama.cpp's occupancy measure). The pool is wiped when occupancy
exceeds 25 % after a prompt is added in begin(), and after 5 consecutive drafts of a
slot had fewer than a quarter of their tokens accepted.

On the native kernels adding n-grams and drafting are one call each (kernels/native/ngram_mod.cpp);
elsewhere adding a long prompt hashes all its n-grams with vectorised uint64 arithmetic, and a draft
rolls the hash forward one token at a time in Python.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from .. import kernels
from ..errors import OptionError
from ..option import Option, read_options
from .base import DraftRequest, TokenProposer

log = logging.getLogger("specserve.speculative")

POOL_SIZE = 4 * 1024 * 1024
EMPTY = -1
LCG64_FACTOR = 6364136223846793005
MASK64 = (1 << 64) - 1
ADD_CHUNK = 32               # new n-grams are added once more than this many tokens are pending
OCCUPANCY_RESET = 0.25
LOW_ACCEPT_FRACTION = 0.25
LOW_ACCEPT_STREAK = 5


def lcg64_hashes(tokens: np.ndarray, n: int) -> np.ndarray:
    """The rolling hash of every window tokens[j:j+n], j = 0..len-n (uint64, wraps mod 2^64)."""
    count = len(tokens) - n + 1
    if count <= 0:
        return np.empty(0, dtype=np.uint64)
    window = np.asarray(tokens).astype(np.uint64)
    h = np.zeros(count, dtype=np.uint64)
    factor = np.uint64(LCG64_FACTOR)
    for i in range(n):
        h = h * factor + window[i:i + count]
    return h


class NgramModPool:
    """The hash pool; adds and drafts run in one native call each on the native kernels, else in numpy and
    Python (the same entries, counts and drafts)."""

    def __init__(self, n: int, size: int = POOL_SIZE):
        self.n = n
        self.size = size
        self.entries = np.full(size, EMPTY, dtype=np.int32)
        self._entries_address = self.entries.ctypes.data          # (reset refills it in place)
        self._out = np.empty(0, dtype=np.int64)
        self.used = 0
        self.top_power = pow(LCG64_FACTOR, n - 1, 1 << 64)    # to roll the oldest token out

    def reset(self) -> None:
        self.entries.fill(EMPTY)
        self.used = 0

    def add_range(self, tokens: np.ndarray, start: int, stop: int) -> None:
        """Add n-gram tokens[i:i+n] -> tokens[i+n] for i in [start, stop), in order."""
        if stop <= start:
            return
        if kernels.mode() != "native":
            return self._add_numpy(tokens, start, stop)
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        self.used += kernels.library().ss_ngram_mod_add(self._entries_address, self.size, tokens.ctypes.data, start,
                                                        stop, self.n)

    def _add_numpy(self, tokens: np.ndarray, start: int, stop: int) -> None:
        n = self.n
        index = (lcg64_hashes(tokens[start:stop + n - 1], n) % np.uint64(self.size)).astype(np.int64)
        values = np.asarray(tokens[start + n:stop + n], dtype=np.int32)
        # each entry keeps its last write; every write to an occupied entry counts as "used"
        slots, first_from_end = np.unique(index[::-1], return_index=True)
        last = len(index) - 1 - first_from_end
        was_empty = int(np.count_nonzero(self.entries[slots] == EMPTY))
        self.used += len(index) - was_empty
        self.entries[slots] = values[last]

    def hash(self, tokens) -> int:
        h = 0
        for t in tokens:
            h = (h * LCG64_FACTOR + (int(t) & MASK64)) & MASK64
        return h

    def roll(self, h: int, out_token: int, in_token: int) -> int:
        """Hash of the window shifted by one token."""
        return ((h - (int(out_token) & MASK64) * self.top_power) * LCG64_FACTOR + (int(in_token) & MASK64)) & MASK64

    def get(self, h: int) -> int:
        return int(self.entries[h % self.size])

    def draft(self, context, n_min: int, n_max: int) -> list[int]:
        """Chain lookups from the last n tokens of `context` (a list or an int64 array); [] if fewer than n_min
        are found."""
        if kernels.mode() != "native":
            return self._draft_python(context, n_min, n_max)
        if len(self._out) < n_max:
            self._out = np.empty(n_max, dtype=np.int64)
        window = np.ascontiguousarray(context[-self.n:], dtype=np.int64)
        found = kernels.library().ss_ngram_mod_draft(self._entries_address, self.size, window.ctypes.data, self.n,
                                                     n_min, n_max, self._out.ctypes.data)
        return self._out[:found].tolist()

    def _draft_python(self, context, n_min: int, n_max: int) -> list[int]:
        n = self.n
        window = [int(t) for t in context[-n:]]
        h = self.hash(window)
        out: list[int] = []
        for i in range(n_max):
            token = self.get(h)
            if token == EMPTY:
                if i < n_min:
                    return []
                break
            out.append(token)
            h = self.roll(h, window[i], token)
            window.append(token)
        return out


@dataclass
class SlotState:
    i_last: int = 0           # n-grams before this position are in the pool
    n_draft_last: int = 0     # length of the last draft (before the caller's cap)
    n_low: int = 0            # consecutive low-acceptance drafts


class NgramMod(TokenProposer):
    name = "ngram-mod"
    options = [
        Option(("--spec-ngram-mod-n-match",), "spec_ngram_mod_n_match", int, 24,
               "ngram-mod: length of the n-gram looked up (1..1024)"),
        Option(("--spec-ngram-mod-n-min",), "spec_ngram_mod_n_min", int, 48,
               "ngram-mod: drafts that break off before this many tokens are dropped (1..1024)"),
        Option(("--spec-ngram-mod-n-max",), "spec_ngram_mod_n_max", int, 64,
               "ngram-mod: most tokens drafted (1..1024)"),
    ]

    def __init__(self, ctx):
        super().__init__(ctx)
        own = read_options(self.options, ctx.options, prefix="spec_ngram_mod_")
        for opt, value in zip(self.options, vars(own).values()):
            if not 1 <= value <= 1024:
                raise OptionError(f"{opt.flags[0]} must be in 1..1024 (got {value})")
        self.n, self.n_min, self.n_max = own.n_match, own.n_min, own.n_max
        if self.n < 16:
            log.warning("ngram-mod: n_match=%d is small; expect poor drafts (llama.cpp PR #19164)", self.n)
        self.pool = NgramModPool(self.n)
        self.window = np.empty(self.n, dtype=np.int64)         # the n tokens a draft looks up, refilled
        self.slots = [SlotState() for _ in range(ctx.n_slots)]

    def begin(self, slot: int, prompt: np.ndarray) -> None:
        state = self.slots[slot]
        state.i_last = 0
        state.n_draft_last = 0
        if len(prompt) < self.n:
            return
        self.pool.add_range(prompt, 0, len(prompt) - self.n)
        state.i_last = len(prompt) - self.n
        occupancy = self.pool.used / self.pool.size
        log.debug("ngram_mod occupancy = %d/%d (%.2f)", self.pool.used, self.pool.size, occupancy)
        if occupancy > OCCUPANCY_RESET:
            log.info("ngram-mod: pool occupancy %.2f exceeds %.2f - resetting", occupancy, OCCUPANCY_RESET)
            self.pool.reset()

    def draft_one(self, slot: int, tokens: np.ndarray, id_last: int) -> list[int]:
        state = self.slots[slot]
        state.n_draft_last = 0
        length = len(tokens)
        n = self.n
        if length < n:
            return []
        if state.i_last + ADD_CHUNK < length:
            self.pool.add_range(tokens, state.i_last, length - n)
            state.i_last = length - n
        window = self.window
        window[:n - 1] = tokens[length - n + 1:]
        window[n - 1] = id_last
        out = self.pool.draft(window, self.n_min, self.n_max)
        state.n_draft_last = len(out)
        return out

    def draft_tokens(self, req: DraftRequest) -> list[int]:
        return self.draft_one(req.slot, req.tokens, req.id_last)

    def accept(self, slot: int, n_accepted: int, is_other: bool) -> None:
        if is_other:
            return
        state = self.slots[slot]
        if state.n_draft_last <= 0:
            return
        if n_accepted / state.n_draft_last < LOW_ACCEPT_FRACTION:
            state.n_low += 1
            if state.n_low >= LOW_ACCEPT_STREAK:
                log.debug("ngram-mod: low acceptance streak (%d) - resetting", state.n_low)
                self.pool.reset()
                state.n_low = 0
                state.i_last = 0
        else:
            state.n_low = 0

    def max_draft(self) -> int:
        return self.n_max
