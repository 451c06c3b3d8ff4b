"""Draft distributions that are zero outside a few candidates per row: a draft chain's q, the softmax over
its top-10 (draft_chain.py), kept as those candidates instead of [k, vocab] rows.

The native verification reads them as they are (kernels/sampling.verify_logits); building dense rows
after every draft call cost more than the draw itself. `dense()` gives the [k, vocab] rows the PyTorch
verification and tests use; both give the same numbers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class CandidateQ:
    ids: np.ndarray          # [k, width] int64 token ids
    probs: np.ndarray        # [k, width] float32, each row summing to 1 over its ids
    vocab: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.ids.shape[0], self.vocab)

    def __getitem__(self, rows: slice) -> "CandidateQ":
        """The first rows (Draft.truncate): q_probs[:n]."""
        return CandidateQ(self.ids[rows], self.probs[rows], self.vocab)

    def dense(self) -> torch.Tensor:
        q = torch.zeros(self.ids.shape[0], self.vocab)
        q.numpy()[np.arange(self.ids.shape[0])[:, None], self.ids] = self.probs
        return q


def dense_q(q) -> torch.Tensor | None:
    """q as [k, vocab] rows, whichever form it came in (a native block draft's are numpy)."""
    if isinstance(q, np.ndarray):
        return torch.from_numpy(q)
    return q.dense() if isinstance(q, CandidateQ) else q
