"""Static per-slot KV cache: one preallocated buffer per layer, a length per slot.

Rolling back rejected draft rows is just `truncate(slot, n)`: attention masks keys by
position, so stale rows past a slot's length are never read and are overwritten later.
The buffer's layout belongs to the forward that writes it: the PyTorch path keeps keys as
[position, head_dim] rows; the native kernels store them transposed in blocks of 16 positions
([head_dim, 16] per block, same size) so that 16 scores are one pass of vector FMAs.
"""
from __future__ import annotations

import torch

from .step_batch import KEY_BLOCK


class KVCache:
    def __init__(self, n_layers: int, n_slots: int, n_kv_heads: int, max_ctx: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device=None, v_dtype: torch.dtype | None = None):
        # the buffer is rounded up so attention can always read whole key blocks
        self.capacity = -(-max_ctx // KEY_BLOCK) * KEY_BLOCK
        shape = (n_layers, n_slots, n_kv_heads, self.capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=v_dtype or dtype, device=device)
        self.n_slots = n_slots
        self.max_ctx = max_ctx
        self.lengths = [0] * n_slots

    def length(self, slot: int) -> int:
        return self.lengths[slot]

    def truncate(self, slot: int, length: int) -> None:
        """Keep the first `length` positions of `slot` (0 clears it)."""
        if length < 0 or length > self.lengths[slot]:
            raise ValueError(f"cannot truncate slot {slot} of length {self.lengths[slot]} to {length}")
        self.lengths[slot] = length

    def clear(self, slot: int) -> None:
        self.lengths[slot] = 0
