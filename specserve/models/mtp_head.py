"""A multi-token-prediction head carried by a target checkpoint (docs/reference/eagle3-mtp.md §3.1, §3.3).

    e  = embed(token), zeroed at position 0 (as vLLM does)
    x  = proj(cat(enorm(e), hnorm(h)))      DeepSeek-style nextn: [embedding, hidden]
       = proj(cat(hnorm(h), enorm(e)))      MiMo mtp_layers:     [hidden, embedding]
    h' = decoder block(x)                   a layer of the target's own family
    n  = out_norm(h');  logits = head(n);   fed back to the next chained step: n (post-norm)

h is the target's final, post-norm hidden state at the previous position. Names follow
DeepSeek (enorm / hnorm / eh_proj / shared_head); mtp_format maps MiMo's names onto them.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig
from .draft_head import DraftHead
from .kv_cache import KVCache
from .step_batch import StepBatch
from .transformer import DecoderLayer, RMSNorm, decoder_layer_step, rms_norm


class MtpHead(DraftHead):
    def __init__(self, cfg: ModelConfig, hidden_first: bool = False):
        super().__init__(cfg)
        hidden, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.hidden_first = hidden_first
        self.enorm = RMSNorm(hidden, eps)
        self.hnorm = RMSNorm(hidden, eps)
        self.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.block = DecoderLayer(cfg)
        self.out_norm = RMSNorm(hidden, eps)
        # plain tensors (not parameters): the target's unless the checkpoint ships its own
        self.embedding: torch.Tensor | None = None
        self.head: torch.Tensor | None = None

    def decoder_layers(self):
        return [self.block]

    # ------------------------------------------------------------------ pieces shared with training
    def combine(self, embedded: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        eps = self.config.rms_norm_eps
        embedded = embedded.masked_fill((positions == 0).unsqueeze(-1), 0.0)
        e = rms_norm(embedded, self.enorm.weight, eps)
        h = rms_norm(hidden, self.hnorm.weight, eps)
        x = torch.cat([h, e] if self.hidden_first else [e, h], dim=-1)
        return self.apply_linear("eh_proj", x)

    def head_linears(self):
        return {"eh_proj": (self.eh_proj.weight, None), "head": (self.head, None)}

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.head

    def cut_lm_head(self, rows: torch.Tensor) -> None:
        """Keep only these lm_head rows (--spec-draft-vocab; before new_cache packs it)."""
        self.head = self.head[rows].contiguous()

    def normed_and_next(self, h: torch.Tensor):
        """(out_norm(h) for the head, the same post-norm hidden fed to the next chained step)."""
        normed = rms_norm(h, self.out_norm.weight, self.config.rms_norm_eps)
        return normed, normed

    def output(self, h: torch.Tensor):
        """(logits [.., V] float32, post-norm hidden fed back)."""
        normed, next_hidden = self.normed_and_next(h)
        return self.apply_linear("head", normed).float(), next_hidden

    # ------------------------------------------------------------------ serving
    def forward_step(self, batch: StepBatch, hidden: torch.Tensor, cache: KVCache):
        if self.native is not None:
            x = self.combine(F.embedding(batch.tokens, self.embedding).float(), hidden.float(), batch.positions)
            x = self.native_layers(batch, cache, x.contiguous())
            if not batch.output_rows.numel():
                return None, None
            return self.output(x.index_select(0, batch.output_rows))
        cos, sin = self.begin_step(batch, cache)
        x = self.combine(F.embedding(batch.tokens, self.embedding), hidden.to(self.dtype), batch.positions)
        x = decoder_layer_step(self.serving[0], x, self.config, self.act, cos, sin, batch, cache, 0)
        self.end_step(batch, cache)
        if not batch.output_rows.numel():
            return None, None
        return self.output(x.index_select(0, batch.output_rows))

    def chain_parts(self):
        return {"embed": self.embedding, "final_norm": self.out_norm.weight, "head": "head",
                "embed_norm": self.enorm.weight, "hidden_norm": self.hnorm.weight, "proj": "eh_proj",
                "hidden_first": self.hidden_first, "zero_embed_at_pos0": True, "feed_normed": True}
