"""The drafting half of a block drafter's native call (kernels/native/block_draft.cpp): the buffers the
kernel fills with the drafts and their logits, and the inputs of DSpark's Markov chain."""
from __future__ import annotations

import numpy as np
import torch

from ..kernels import capi


def _ptr(t: torch.Tensor | None):
    return None if t is None else t.data_ptr()


class NativeChain:
    """Outputs tokens [S, n] and logits [S, n, V] (Markov-biased when a head is given) of a draft call, in
    buffers reused by every call of this shape, which the call's struct points at once (`point`).

    Its inputs are buffers too, written in place before each call: anchors [S], and for slots that sample,
    temperatures [S] (0: greedy), the rest of their samplers (top_k, top_p, min_p [S]: `set_samplers`) and
    uniforms [S, n]; their q [S, n, target vocabulary] (the distributions drawn from, laid out as the verifier
    reads them,
    which the verifier reads in the same engine step) is filled too. `set` says which of them the call
    reads. With confidence weights the confidence head's predictions [S, n] are filled as well.
    `tokens_np` and `q_np` are numpy views of the tokens and q (slicing them costs a tenth of a tensor's)."""

    def __init__(self, n_slots: int, n_draft: int, vocab: int, q_vocab: int):
        self.n_slots, self.n_draft, self.vocab = n_slots, n_draft, vocab
        self.tokens = torch.empty(n_slots, n_draft, dtype=torch.int64)
        self.tokens_np = self.tokens.numpy()
        self.logits = torch.empty(n_slots, n_draft, vocab, dtype=torch.float32)
        self.confidence = np.empty((n_slots, n_draft), dtype=np.float32)
        self.anchors = np.empty(n_slots, dtype=np.int64)
        self.temperatures = np.zeros(n_slots, dtype=np.float32)
        self.top_k = np.zeros(n_slots, dtype=np.int32)
        self.top_p = np.ones(n_slots, dtype=np.float32)
        self.min_p = np.zeros(n_slots, dtype=np.float32)
        self.uniforms = np.zeros((n_slots, n_draft), dtype=np.float64)
        self.q_buffer = torch.empty(n_slots, n_draft, q_vocab)      # over the target's vocabulary
        self.q_np = self.q_buffer.numpy()
        self.q: torch.Tensor | None = None          # q_buffer after a call that sampled, else None

    def point(self, step: capi.BlockDraft, first_draft_row: int) -> None:
        """Point the struct at this chain's buffers (once: each field set and address costs about a µs)."""
        step.first_draft_row, step.n_draft = first_draft_row, self.n_draft
        step.logits, step.tokens = self.logits.data_ptr(), self.tokens.data_ptr()
        step.anchors, step.q = self.anchors.ctypes.data, self.q_buffer.data_ptr()
        step.q_vocab = self.q_buffer.shape[2]
        self._sampling_ptrs = tuple(a.ctypes.data for a in (self.temperatures, self.top_k, self.top_p, self.min_p,
                                                            self.uniforms))

    def set_samplers(self, requests) -> None:
        """Each slot's top_k, top_p and min_p from its request (a DraftRequest; None: no filter)."""
        for i, r in enumerate(requests):
            self.top_k[i], self.top_p[i], self.min_p[i] = (0, 1.0, 0.0) if r is None else (r.top_k, r.top_p, r.min_p)

    def set(self, step: capi.BlockDraft, markov_ptrs: tuple, sampling: bool, confidence: tuple | None) -> None:
        """What the next call reads besides the buffers: DSpark's Markov head as (W1, W2^T, table or None
        addresses, rank) or None; whether the temperatures and uniforms are read (some slot samples); the
        confidence head's (w, per-token term or None, bias) as float32 numpy, or None."""
        if markov_ptrs is None:
            step.w2t = step.w1 = step.markov_table = None
            step.rank = 0
        else:
            step.w1, step.w2t, step.markov_table, step.rank = markov_ptrs
        step.temperature, step.top_k, step.top_p, step.min_p, step.uniforms = \
            self._sampling_ptrs if sampling else (None,) * 5
        self.q = self.q_buffer if sampling else None
        if confidence is None:
            step.conf_w = step.conf_per_token = step.confidence = None
        else:
            w, per_token, bias = confidence
            step.conf_w, step.conf_bias, step.confidence = w.ctypes.data, bias, self.confidence.ctypes.data
            step.conf_per_token = None if per_token is None else per_token.ctypes.data

    @staticmethod
    def markov_ptrs(markov_weights) -> tuple | None:
        """(W1, W2^T, table) tensors (MarkovHead.native_weights) as the addresses `set` takes."""
        if markov_weights is None:
            return None
        w1, w2t, table = markov_weights
        return w1.data_ptr(), w2t.data_ptr(), _ptr(table), w1.shape[1]

    @staticmethod
    def clear(step: capi.BlockDraft) -> None:
        """A call without drafting: the layers alone."""
        step.logits = step.tokens = None
        step.n_draft = 0
