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
    buffers reused by every call of this shape (`set` before each).

    temperatures [S] and uniforms [S, n] (both or neither) make slots with T > 0 sample; their q [S, n, V]
    (the distributions drawn from, which the verifier reads in the same engine step) is filled too.
    With confidence weights the confidence head's predictions [S, n] (numpy) are filled as well."""

    def __init__(self, n_slots: int, n_draft: int, vocab: int):
        self.n_slots, self.n_draft, self.vocab = n_slots, n_draft, vocab
        self.tokens = torch.empty(n_slots, n_draft, dtype=torch.int64)
        self.logits = torch.empty(n_slots, n_draft, vocab, dtype=torch.float32)
        self.confidence = np.empty((n_slots, n_draft), dtype=np.float32)
        self.anchors = np.empty(n_slots, dtype=np.int64)
        self.w1 = self.w2t = self.markov_table = self.temperatures = self.uniforms = self.q = None
        self.confidence_weights = None
        self.q_buffer: torch.Tensor | None = None

    def set(self, anchors, markov_weights=None, temperatures=None, uniforms=None,
            confidence_weights: tuple | None = None) -> None:
        """The next call's inputs: anchors [S] (numpy or torch); DSpark's Markov head as float32 W1 [V, r],
        bfloat16 W2^T [r, V] and the bias table or None (MarkovHead.native_weights), or None; the sampling
        inputs, temperatures [S] and uniforms [S, n] (numpy arrays or tensors); and the confidence head's
        (w over the draft row, per-token Markov term or None, bias), float32 numpy."""
        self.anchors[:] = anchors if isinstance(anchors, np.ndarray) else anchors.cpu().numpy()
        self.w1, self.w2t, self.markov_table = (None, None, None) if markov_weights is None else markov_weights
        self.temperatures = None if uniforms is None else np.ascontiguousarray(temperatures, dtype=np.float32)
        self.uniforms = None if uniforms is None else np.ascontiguousarray(uniforms, dtype=np.float64)
        if uniforms is None:
            self.q = None
        else:
            if self.q_buffer is None:
                self.q_buffer = torch.empty(self.n_slots, self.n_draft, self.vocab)
            self.q = self.q_buffer
        self.confidence_weights = confidence_weights

    def fill(self, step: capi.BlockDraft, first_draft_row: int) -> None:
        step.first_draft_row, step.n_draft = first_draft_row, self.n_draft
        step.logits, step.tokens = self.logits.data_ptr(), self.tokens.data_ptr()
        step.w2t, step.w1, step.markov_table = _ptr(self.w2t), _ptr(self.w1), _ptr(self.markov_table)
        step.rank = 0 if self.w1 is None else self.w1.shape[1]
        step.anchors = self.anchors.ctypes.data
        step.q = _ptr(self.q)
        step.temperature, step.uniforms = (None, None) if self.uniforms is None else \
            (self.temperatures.ctypes.data, self.uniforms.ctypes.data)
        if self.confidence_weights is None:
            step.conf_w = step.conf_per_token = step.confidence = None
        else:
            w, per_token, bias = self.confidence_weights
            step.conf_w, step.conf_bias, step.confidence = w.ctypes.data, bias, self.confidence.ctypes.data
            step.conf_per_token = None if per_token is None else per_token.ctypes.data

    @staticmethod
    def clear(step: capi.BlockDraft) -> None:
        """A call without drafting (a reused struct): the layers alone."""
        step.logits = step.tokens = None
        step.n_draft = 0
