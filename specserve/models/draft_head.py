"""What the small draft heads (EAGLE-3, MTP) share: a decoder-layer config, RoPE tables, and a
float32 KV cache over their own layers, run with the same batch-invariant layer code as the target
(the native kernels on the CPU, else PyTorch operations)."""
from __future__ import annotations

import ctypes

import torch
import torch.nn as nn

from .config import ModelConfig
from .kv_cache import KVCache
from .rope import RotaryEmbedding
from .step_batch import StepBatch
from ..kernels import capi, library, use_native_kernels
from ..kernels.packed import PackedLinear
from .native_decoder import NativeLayers, causal_attention, commit_lengths, draft_buffer, refill_causal_attention
from .transformer import ACTIVATIONS, ServingWeights, float32_copy, linear, rope_tables, serving_cache


class DraftHead(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.act = ACTIVATIONS[cfg.hidden_act]
        self.rope: RotaryEmbedding | None = None
        self.serving: list[ServingWeights] | None = None     # built by new_cache()
        self.native: NativeLayers | None = None               # built by new_cache() on the native kernels
        self.packed: dict[str, PackedLinear] = {}
        self.quant: str | None = None
        self._drafts: dict = {}                               # draft_chain's outputs by shape

    def decoder_layers(self) -> list[nn.Module]:
        raise NotImplementedError

    def chain_parts(self) -> dict:
        """What the native draft chain reads besides the layers (kernels.h, ss_head_chain): the embedding,
        final norm and lm_head name, the norms of the two input parts, proj's and fc's names (or None) and
        flags."""
        raise NotImplementedError

    def head_linears(self) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
        """The head's own linear layers outside the decoder layers: name -> (weight, bias)."""
        raise NotImplementedError

    def apply_linear(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """x [..., k] through linear `name`: packed native weights (float32 out) when serving on them."""
        flat = x.reshape(-1, x.shape[-1])
        packed = self.packed.get(name)
        if packed is not None and not torch.is_grad_enabled():
            out = packed(flat)
        else:
            weight, bias = self.head_linears()[name]
            out = linear(flat.to(weight.dtype), weight, bias)
        return out.reshape(*x.shape[:-1], -1)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def new_cache(self, n_slots: int, max_ctx: int) -> KVCache:
        native = self.native is not None or use_native_kernels(self.device, self.quant)
        cache = serving_cache(self, self.decoder_layers(), n_slots, max_ctx, torch_weights=not native)
        if native and self.native is None:
            self.native = NativeLayers(self.decoder_layers(), self.config, self.quant)
            self.packed = {name: PackedLinear(w, b, self.quant) for name, (w, b) in self.head_linears().items()}
            self._chain = self._chain_struct()
            # what the chain struct's attention points into, in a list: setting an nn.Module attribute at every
            # draft goes through Module.__setattr__ (1.3 % of an MTP run's time at one slot)
            self._chain_attn_for: list = [(None, None)]
        return cache

    def _chain_struct(self) -> capi.HeadChain:
        """The constant part of ss_head_chain; the embedding, final norm and lm_head go into the C model."""
        parts = self.chain_parts()
        self.native.set_io(parts["embed"], parts["final_norm"], self.packed[parts["head"]])
        norms = [float32_copy(parts["embed_norm"]).contiguous(), float32_copy(parts["hidden_norm"]).contiguous()]
        self.native.keep += norms
        chain = capi.HeadChain(embed_norm=norms[0].data_ptr(), hidden_norm=norms[1].data_ptr(),
                               hidden_first=parts.get("hidden_first", False),
                               zero_embed_at_pos0=parts.get("zero_embed_at_pos0", False),
                               residual_normed=parts.get("residual_normed", False),
                               feed_normed=parts.get("feed_normed", False))
        if parts.get("proj"):
            chain.proj = self.packed[parts["proj"]].struct
        if parts.get("fc"):
            chain.fc = self.packed[parts["fc"]].struct
        return chain

    def chain_projects(self) -> bool:
        """Whether the native chain takes the target's features and applies fc itself."""
        return self.native is not None and bool(self._chain.fc.data)

    def draft_chain(self, batch: StepBatch, hidden: torch.Tensor, cache: KVCache, n_more: int,
                    id_map: torch.Tensor | None = None, pick=None) -> torch.Tensor:
        """Drafts [S, 1 + n_more] (target ids through id_map) in one native call: `batch` with its input
        hidden rows (output rows: each slot's last row, in slot order), then n_more steps that feed each
        slot's draft with its output hidden row (target features when `chain_projects()`); `pick` (a
        ChainPick; None: the argmax) picks the drafts.
        The cache lengths include every fed row."""
        hidden = hidden.float().contiguous()
        keep: list = []
        chain = self._chain
        chain.n_rows, chain.tokens, chain.hidden_in = batch.n_tokens, batch.tokens.data_ptr(), hidden.data_ptr()
        attn_for = self._chain_attn_for
        attn_for[0] = refill_causal_attention(chain, attn_for[0], self.rope, batch, cache, keep)
        chain.n_out, chain.out_rows = batch.output_rows.shape[0], batch.output_rows.data_ptr()
        chain.id_map = 0 if id_map is None else id_map.data_ptr()
        drafts = draft_buffer(self._drafts, batch.output_rows.shape[0], 1 + n_more)
        library().ss_head_draft_chain(self.native.model_ref, ctypes.byref(chain), n_more,
                                      None if pick is None else pick.ref, drafts.data_ptr())
        for seg in batch.segments:
            cache.lengths[seg.slot] = seg.pos0 + seg.n_rows + n_more
        return drafts

    def native_layers(self, batch: StepBatch, cache: KVCache, x: torch.Tensor,
                      first_input: torch.Tensor | None = None) -> torch.Tensor:
        """Every decoder layer over float32 rows x (in place) on the native kernels; `first_input`
        replaces layer 0's normed input. Returns x."""
        keep: list = []
        attn = causal_attention(self.rope, batch, cache, keep)
        for index in range(len(self.native.layers)):
            self.native.layer(index, x, attn, input=first_input if index == 0 else None)
        commit_lengths(batch, cache)
        return x

    def begin_step(self, batch: StepBatch, cache: KVCache):
        """Prepare the batch for this head's cache; returns the float32 RoPE rows (cos, sin)."""
        cfg = self.config
        batch.prepare(cfg.num_key_value_heads, cache.capacity, cfg.num_attention_heads // cfg.num_key_value_heads)
        return rope_tables(self.rope, batch)

    @staticmethod
    def end_step(batch: StepBatch, cache: KVCache) -> None:
        for seg in batch.segments:
            cache.lengths[seg.slot] = seg.pos0 + seg.n_rows
