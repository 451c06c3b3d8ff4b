"""Training windows over target-regenerated samples, shared by the drafter trainers.

A sample is the prompt followed by the target's own continuation (`tokens`, `n_prompt`,
see regen_data.py). A window is a slice of at most `seq_len` tokens that reaches into the
continuation; label position p (the target's distribution at p, predicting token p+1) is
trained only when token p+1 belongs to the continuation (a window may start after the
sample does: the drafter then sees less context, which only makes its task harder).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class WindowBatch:
    tokens: torch.Tensor      # [B, L] int64, right-padded with 0
    label_mask: torch.Tensor  # [B, L] bool: position p is trained (token p+1 is regenerated and present)


class WindowSampler:
    """Batches of `batch_size` random windows; `rows` keeps a data-parallel rank's share of each
    (every rank draws the whole global batch, so the random stream is the same at any world size)."""

    def __init__(self, samples, seq_len: int, batch_size: int, seed: int = 0, rows: slice = slice(None)):
        usable = [s for s in samples if len(s.tokens) > max(s.n_prompt, 1)]
        if not usable:
            raise ValueError("no training sample has a regenerated continuation")
        self.samples = usable
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.keep = rows
        self.rng = np.random.default_rng(seed)
        self.order = np.arange(0)
        self.cursor = 0
        self.epoch = 0

    def _next_index(self) -> int:
        if self.cursor >= len(self.order):
            self.order = self.rng.permutation(len(self.samples))
            self.cursor = 0
            self.epoch += 1
        i = int(self.order[self.cursor])
        self.cursor += 1
        return i

    def window(self, sample) -> tuple[np.ndarray, np.ndarray]:
        tokens = np.asarray(sample.tokens, dtype=np.int64)
        n = len(tokens)
        # label p is trained when p + 1 >= n_prompt and p + 1 < n
        first_label = max(sample.n_prompt - 1, 0)
        start = 0
        if n > self.seq_len:
            lo = max(0, first_label + 1 - self.seq_len + 1)
            hi = n - self.seq_len
            start = int(self.rng.integers(min(lo, hi), hi + 1))
        tokens = tokens[start:start + self.seq_len]
        pos = np.arange(len(tokens)) + start
        mask = (pos + 1 >= sample.n_prompt) & (pos + 1 < n)
        return tokens, mask

    def next_batch(self) -> WindowBatch:
        rows = [self.window(self.samples[self._next_index()]) for _ in range(self.batch_size)]
        length = max(len(t) for t, _ in rows)          # the global batch's padding
        rows = rows[self.keep]
        tokens = np.zeros((len(rows), length), dtype=np.int64)
        mask = np.zeros((len(rows), length), dtype=bool)
        for i, (t, m) in enumerate(rows):
            tokens[i, :len(t)] = t
            mask[i, :len(m)] = m
        return WindowBatch(torch.from_numpy(tokens), torch.from_numpy(mask))


def split_samples(samples, n_eval: int, seed: int = 0):
    """(train, eval) by a seeded shuffle; eval samples' prompts are used to measure acceptance."""
    order = np.random.default_rng(seed).permutation(len(samples))
    n_eval = min(n_eval, max(len(samples) // 5, 1)) if len(samples) > 1 else 0
    return [samples[i] for i in order[n_eval:]], [samples[i] for i in order[:n_eval]]
