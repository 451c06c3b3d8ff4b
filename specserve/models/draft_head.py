"""What the small draft heads (EAGLE-3, MTP) share: a decoder-layer config, RoPE tables, and a
float32 KV cache over their own layers, run with the same batch-invariant layer code as the target."""
from __future__ import annotations

import torch
import torch.nn as nn

from .config import ModelConfig
from .kv_cache import KVCache
from .rope import RotaryEmbedding
from .step_batch import StepBatch
from .transformer import ACTIVATIONS, ServingWeights, rope_tables, serving_cache


class DraftHead(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.act = ACTIVATIONS[cfg.hidden_act]
        self.rope: RotaryEmbedding | None = None
        self.serving: list[ServingWeights] | None = None     # built by new_cache()

    def decoder_layers(self) -> list[nn.Module]:
        raise NotImplementedError

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def new_cache(self, n_slots: int, max_ctx: int) -> KVCache:
        return serving_cache(self, self.decoder_layers(), n_slots, max_ctx)

    def begin_step(self, batch: StepBatch, cache: KVCache):
        """Prepare the batch for this head's cache; returns the float32 RoPE rows (cos, sin)."""
        cfg = self.config
        batch.prepare(cfg.num_key_value_heads, cache.capacity, cfg.num_attention_heads // cfg.num_key_value_heads)
        return rope_tables(self.rope, batch)

    @staticmethod
    def end_step(batch: StepBatch, cache: KVCache) -> None:
        for seg in batch.segments:
            cache.lengths[seg.slot] = seg.pos0 + seg.n_rows
