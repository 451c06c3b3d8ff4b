"""The EAGLE-3 draft head (docs/reference/eagle3-mtp.md §1.1, §1.6).

    g        = fc(cat(target features))                    only for target features
    z        = cat(input_layernorm(embed(token)), hidden_norm(g))       [N, 2H]
    residual = g, or hidden_norm(g) with norm_before_residual
    h        = layer-0 attention(z) + residual, then its MLP; extra layers are plain decoder layers
    logits   = lm_head(norm(h))                            [N, Vd]; target id = draft id + d2t[draft id]
    fed back = h (EAGLE-3) or norm(h) (EAGLE-3.1 norm_output)

Parameter names are the canonical ones of eagle3_format (`layers.0.*` = `midlayer.*`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig
from .draft_head import DraftHead
from .kv_cache import KVCache
from .step_batch import StepBatch
from .transformer import (DecoderLayer, RMSNorm, cached_attention, decoder_layer_step, linear, mlp_step,
                          new_embedding, rms_norm)


@dataclass
class Eagle3Options:
    vocab_size: int                  # target vocabulary V (embedding rows)
    draft_vocab_size: int            # Vd (lm_head rows)
    target_hidden_size: int          # Ht
    n_aux: int = 3                   # target features concatenated into fc
    use_aux: bool = True             # False: no fc, the target's final hidden is the input
    fc_bias: bool = False
    fc_norm: bool = False            # EAGLE-3.1: RMSNorm(Ht) per feature before fc
    norm_before_fc: bool = False     # one RMSNorm(n_aux*Ht) before fc
    norm_before_residual: bool = False
    norm_output: bool = False        # EAGLE-3.1: feed norm(h) back


def first_layer(cfg: ModelConfig) -> DecoderLayer:
    """A decoder layer whose q/k/v read 2H features (embedding ++ hidden), plus hidden_norm."""
    layer = DecoderLayer(cfg)
    attn, width = layer.self_attn, 2 * cfg.hidden_size
    attn.q_proj = nn.Linear(width, cfg.q_size, bias=cfg.qkv_bias)
    attn.k_proj = nn.Linear(width, cfg.kv_size, bias=cfg.qkv_bias)
    attn.v_proj = nn.Linear(width, cfg.kv_size, bias=cfg.qkv_bias)
    layer.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
    return layer


class Eagle3Draft(DraftHead):
    def __init__(self, cfg: ModelConfig, opts: Eagle3Options, n_layers: int = 1, own_embedding: bool = False,
                 own_lm_head: bool = True):
        super().__init__(cfg)
        self.opts = opts
        hidden, eps = cfg.hidden_size, cfg.rms_norm_eps
        feat = opts.n_aux * opts.target_hidden_size
        self.fc = nn.Linear(feat, hidden, bias=opts.fc_bias) if opts.use_aux else None
        self.fc_norm = (nn.ModuleList(RMSNorm(opts.target_hidden_size, eps) for _ in range(opts.n_aux))
                        if opts.fc_norm else None)
        self.input_norm = RMSNorm(feat, eps) if opts.norm_before_fc else None
        self.embed_tokens = new_embedding(opts.vocab_size, hidden) if own_embedding else None
        self.layers = nn.ModuleList([first_layer(cfg)] + [DecoderLayer(cfg) for _ in range(n_layers - 1)])
        self.norm = RMSNorm(hidden, eps)
        self.lm_head = nn.Linear(hidden, opts.draft_vocab_size, bias=False) if own_lm_head else None
        self.register_buffer("d2t", torch.zeros(opts.draft_vocab_size, dtype=torch.int64))
        self.shared_embedding: torch.Tensor | None = None     # the target's, when the draft ships none
        self.shared_lm_head: torch.Tensor | None = None

    def decoder_layers(self):
        return list(self.layers)

    @property
    def embedding_weight(self) -> torch.Tensor:
        return self.embed_tokens.weight if self.embed_tokens is not None else self.shared_embedding

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.lm_head.weight if self.lm_head is not None else self.shared_lm_head

    def cut_lm_head(self, rows: torch.Tensor) -> None:
        """Keep only these lm_head rows (--spec-draft-vocab; before new_cache packs it). The proposer maps the
        kept rows to target ids itself: d2t stays as loaded."""
        if self.lm_head is not None:
            self.lm_head.weight = nn.Parameter(self.lm_head.weight.data[rows].contiguous(), requires_grad=False)
        else:
            self.shared_lm_head = self.shared_lm_head[rows].contiguous()

    def target_ids(self) -> torch.Tensor:
        """[Vd] target token id of each draft vocabulary id."""
        return torch.arange(self.opts.draft_vocab_size, device=self.d2t.device) + self.d2t

    # ------------------------------------------------------------------ pieces shared with training
    def project(self, features: list[torch.Tensor]) -> torch.Tensor:
        """Target features (one [.., Ht] tensor per aux layer) -> g [.., H]."""
        if self.fc is None:
            return features[0]
        x = torch.cat(features, dim=-1)
        if self.input_norm is not None:
            x = self.input_norm(x)
        if self.fc_norm is not None:
            x = torch.cat([norm(part) for norm, part in zip(self.fc_norm, x.chunk(self.opts.n_aux, dim=-1))], -1)
        return self.apply_linear("fc", x)

    def layer0_inputs(self, embedded: torch.Tensor, hidden: torch.Tensor):
        """(z = cat(input_layernorm(e), hidden_norm(g)) [.., 2H], residual [.., H])."""
        layer, eps = self.layers[0], self.config.rms_norm_eps
        hidden_normed = rms_norm(hidden, layer.hidden_norm.weight, eps)
        z = torch.cat([rms_norm(embedded, layer.input_layernorm.weight, eps), hidden_normed], dim=-1)
        return z, (hidden_normed if self.opts.norm_before_residual else hidden)

    def normed_and_next(self, h: torch.Tensor):
        """(norm(h) for the lm_head, the hidden fed to the next chained step)."""
        normed = rms_norm(h, self.norm.weight, self.config.rms_norm_eps)
        return normed, (normed if self.opts.norm_output else h)

    def output(self, h: torch.Tensor):
        """(logits [.., Vd] float32, hidden fed to the next step)."""
        normed, next_hidden = self.normed_and_next(h)
        return self.apply_linear("lm_head", normed).float(), next_hidden

    def head_linears(self):
        linears = {"lm_head": (self.lm_head_weight, None)}
        if self.fc is not None:
            linears["fc"] = (self.fc.weight, self.fc.bias)
        return linears

    # ------------------------------------------------------------------ serving
    def forward_step(self, batch: StepBatch, hidden: torch.Tensor, cache: KVCache):
        """Rows (token, input hidden) at the batch positions; returns (logits, next hidden) of the output rows."""
        cfg = self.config
        if self.native is not None:
            z, residual = self.layer0_inputs(F.embedding(batch.tokens, self.embedding_weight).float(), hidden.float())
            x = self.native_layers(batch, cache, residual.clone(), first_input=z.contiguous())
            if not batch.output_rows.numel():
                return None, None
            return self.output(x.index_select(0, batch.output_rows))
        cos, sin = self.begin_step(batch, cache)
        z, residual = self.layer0_inputs(F.embedding(batch.tokens, self.embedding_weight), hidden.to(self.dtype))
        w0 = self.serving[0]
        qkv = linear(z, w0.qkv_w, w0.qkv_b).float()
        ctx = cached_attention(qkv, w0.qk_norm, cfg, cos, sin, batch, cache, 0)
        x = residual + linear(ctx.to(residual.dtype), w0.o_w, w0.o_b)
        x = mlp_step(w0, x, cfg, self.act)
        for layer_id in range(1, len(self.serving)):
            x = decoder_layer_step(self.serving[layer_id], x, cfg, self.act, cos, sin, batch, cache, layer_id)
        self.end_step(batch, cache)
        if not batch.output_rows.numel():
            return None, None
        return self.output(x.index_select(0, batch.output_rows))

    def chain_parts(self):
        layer = self.layers[0]
        return {"embed": self.embedding_weight, "final_norm": self.norm.weight, "head": "lm_head",
                "embed_norm": layer.input_layernorm.weight, "hidden_norm": layer.hidden_norm.weight,
                "residual_normed": self.opts.norm_before_residual, "feed_normed": self.opts.norm_output,
                # fc inside the chain when nothing normalises the features before it (else project() runs it)
                "fc": "fc" if self.fc is not None and self.input_norm is None and self.fc_norm is None else None}
