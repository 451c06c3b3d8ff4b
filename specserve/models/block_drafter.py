"""The DFlash / DSpark draft network (docs/reference/dflash-dspark.md §1.4-§1.10, §3.2-§3.3).

A decoder layer stack (Qwen3-, Llama- or Qwen2-style: block_drafter_backbone.py) that reads the
target instead of its own past:
  ctx = hidden_norm(fc(cat(taps)))       once per call, for the newly committed positions;
  every layer attends, NON-causally, from the block rows to [context K/V ; block K/V], where the
  context K/V are k_norm(k_proj(ctx)) and v_proj(ctx) (no input_layernorm on the context; k_norm
  only for Qwen3-style stacks; the projections' biases, if any, apply to context rows as to block rows);
  the block is [anchor, MASK, ..., MASK] embedded with the TARGET's embedding, and the final-normed
  rows go through the TARGET's lm_head. Neither is copied: `attach_target` keeps references (with
  --quant-draft the draft rows go through a quantized copy of the lm_head).
Two forwards compute the same thing:
  * `forward_cached`: serving; per slot a static cache of context K/V that persists across steps;
    the block's own K/V are written after the context and simply not counted (the "crop");
  * `forward_train`: all anchors of a sequence in one pass with the per-anchor visibility mask
    (context strictly before the anchor, bidirectional inside the block).
The optional DSpark heads (Markov bias, confidence) are plain modules used by speculative/markov_chain.py.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

from ..errors import ModelLoadError
from .block_drafter_format import (ANCHOR_FIRST, SHARED_TENSORS, BlockDrafterConfig, check_compatible, normalized_config,
                                   read_block_drafter)
from .kv_cache import KVCache
from .loader import parse_dtype
from .rope import RotaryEmbedding, apply_rope
from .step_batch import KEY_BLOCK
from ..kernels import library, use_native_kernels
from ..kernels.packed import PackedLinear
from .native_block_call import NativeBlockCall
from .native_decoder import NativeLayers
from .transformer import ACTIVATIONS, DecoderLayer, RMSNorm, ServingWeights, linear, new_embedding, rms_norm


# the Markov bias of every token is tabled for vocabularies up to this (64 MiB at 4096 tokens; 151k
# tokens would need 91 GB)
MARKOV_TABLE_MAX_VOCAB = 4096


class MarkovHead(nn.Module):
    """bias(prev) = markov_w2(markov_w1[prev]): a rank-r bigram correction of the draft logits."""

    def __init__(self, vocab_size: int, rank: int):
        super().__init__()
        self.markov_w1 = new_embedding(vocab_size, rank)
        self.markov_w2 = nn.Linear(rank, vocab_size, bias=False)

    def forward(self, prev_tokens: torch.Tensor) -> torch.Tensor:
        return self.markov_w2(self.markov_w1(prev_tokens))

    def _converted(self) -> tuple:
        """(float32 W1 [V, r], float32 W2^T [r, V], bfloat16 W2^T), converted once per weight version."""
        w1, w2 = self.markov_w1.weight, self.markov_w2.weight
        key = (w1.data_ptr(), w1._version, w2.data_ptr(), w2._version)
        cached = getattr(self, "_serving_cache", None)
        if cached is None or cached[0] != key:
            w2t = w2.detach().float().t().contiguous()
            cached = (key, w1.detach().float(), w2t, w2t.bfloat16())
            self._serving_cache = cached
        return cached[1:]

    def serving_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 W1 and W2^T for the PyTorch chain."""
        w1, w2t, _ = self._converted()
        return w1, w2t

    def native_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """float32 W1, bfloat16 W2^T (half the bytes: the bias reads all of W2 at every block position) and,
        for vocabularies up to MARKOV_TABLE_MAX_VOCAB, the float32 table of every token's bias [V, V] for the
        native chain (kernels/native/block_draft.cpp): with it a draft position reads one row of 4V bytes
        instead of W2's 2rV, and gets the same bits."""
        w1, _, w2t_bf16 = self._converted()
        vocab, rank = w1.shape
        if vocab > MARKOV_TABLE_MAX_VOCAB:
            return w1, w2t_bf16, None
        cached = getattr(self, "_table_cache", None)
        if cached is None or cached[0] is not w2t_bf16:
            table = torch.empty(vocab, vocab, dtype=torch.float32)
            library().ss_markov_table(w1.data_ptr(), w2t_bf16.data_ptr(), rank, vocab, table.data_ptr())
            cached = self._table_cache = (w2t_bf16, table)
        return w1, w2t_bf16, cached[1]


class ConfidenceHead(nn.Module):
    """A logit of P(draft k accepted | drafts before it accepted) from [h_k ; markov_w1[prev_k]]."""

    def __init__(self, in_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.proj(features.to(self.proj.weight.dtype)).squeeze(-1)


@dataclass
class SharedTargetWeights:
    """The target's embedding and output matrices, borrowed (never registered as parameters)."""
    embed: torch.Tensor
    lm_head: torch.Tensor


class BlockDrafter(nn.Module):
    def __init__(self, config: BlockDrafterConfig):
        super().__init__()
        cfg = config.backbone
        self.config = config
        self.cfg = cfg
        hidden = cfg.hidden_size
        self.fc = nn.Linear(len(config.target_layer_ids) * hidden, hidden, bias=False)
        self.hidden_norm = RMSNorm(hidden, cfg.rms_norm_eps)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(hidden, cfg.rms_norm_eps)
        self.markov_head = MarkovHead(cfg.vocab_size, config.markov_rank) if config.markov_rank else None
        self.confidence_head = (ConfidenceHead(hidden + (config.markov_rank if config.confidence_with_markov else 0))
                                if config.has_confidence_head else None)
        self.act = ACTIVATIONS[cfg.hidden_act]
        self.shared: SharedTargetWeights | None = None
        self.rope: RotaryEmbedding | None = None
        self.serving: list[ServingWeights] | None = None     # built by new_cache()
        self.native: NativeLayers | None = None               # built by new_cache() on the native kernels
        self.packed_fc: PackedLinear | None = None
        self.quant: str | None = None
        self.target_ref: tuple = ()                           # (target,): the native draft call uses its packed lm_head
        self._call: NativeBlockCall | None = None             # built at the first native call after new_cache
        self.vocab_ids: torch.Tensor | None = None            # --spec-draft-vocab: the target id of each lm_head row
        self._cut_head: torch.Tensor | None = None            # ... and those rows of the target's lm_head

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, config: BlockDrafterConfig, target, dtype=None, tokenizer=None) -> "BlockDrafter":
        """Load the draft weights of `config` and attach the target's embedding / lm_head."""
        check_compatible(config, target.config, tokenizer)
        dtype = parse_dtype(dtype, target.dtype)
        with torch.device("meta"):
            model = cls(config)
        state = {}
        for name, param in model.state_dict().items():
            if name not in config.key_map:
                raise ModelLoadError(f"tensor {name!r} missing from draft checkpoint {config.model_dir}")
            state[name] = config.checkpoint.get(config.key_map[name], dtype, tuple(param.shape))
        unknown = sorted(set(config.key_map) - set(state) - set(SHARED_TENSORS))
        if unknown:
            raise ModelLoadError(f"draft checkpoint {config.model_dir} has tensors this network does not use: "
                                 f"{', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''}")
        model.load_state_dict(state, assign=True)
        for head in (model.markov_head, model.confidence_head):    # small heads run in float32
            if head is not None:
                head.float()
        model.to(device=target.device)
        model.eval().requires_grad_(False)
        model.attach_target(target)
        return model

    def attach_target(self, target) -> None:
        self.shared = SharedTargetWeights(target.model.embed_tokens.weight, target.lm_head_weight)
        self.target_ref = (target,)

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    def _rope(self, n_positions: int) -> RotaryEmbedding:
        cfg = self.cfg
        if self.rope is None or self.rope.cos.shape[0] < n_positions:
            self.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, cfg.max_position_embeddings,
                                        max(n_positions, 64), self.device)
        return self.rope

    def _cos_sin(self, positions: torch.Tensor):
        """float32 cos/sin rows for the serving forward."""
        return self._rope(int(positions.max()) + 1).gather(positions, seq_len=int(positions.max()) + 1)

    # ------------------------------------------------------------------ shared pieces
    def cut_vocab(self, kept: torch.Tensor) -> None:
        """Draft among these target ids only (--spec-draft-vocab; before new_cache packs the lm_head): the
        logits, the Markov bias and q then have one column per kept token, and drafts are mapped back."""
        self.vocab_ids = kept.to(torch.int64).contiguous()
        self._cut_head = self.shared.lm_head[self.vocab_ids].contiguous()

    def logits(self, hidden_normed: torch.Tensor) -> torch.Tensor:
        """Target lm_head over draft rows (its vocab_ids rows when cut), float32 [..., V or kept]."""
        head = self.shared.lm_head if self._cut_head is None else self._cut_head
        shape = hidden_normed.shape
        flat = hidden_normed.reshape(-1, shape[-1])
        return linear(flat.to(head.dtype), head).float().view(*shape[:-1], -1)

    def draft_rows(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., nb, H] block outputs -> the rows that predict drafts 1..n (the layout decides)."""
        return hidden if self.config.layout == ANCHOR_FIRST else hidden[..., 1:, :]

    def block_rows_for(self, n_drafts: int) -> int:
        return n_drafts if self.config.layout == ANCHOR_FIRST else n_drafts + 1

    def confidence_logits(self, hidden_rows: torch.Tensor, prev_tokens: torch.Tensor) -> torch.Tensor:
        """hidden_rows [..., n, H] (final-normed, the rows that give the drafts), prev_tokens [..., n]."""
        feats = hidden_rows.float()
        if self.config.confidence_with_markov:
            feats = torch.cat([feats, self.markov_head.markov_w1(prev_tokens).float()], dim=-1)
        return self.confidence_head(feats)

    def confidence(self, hidden_rows: "torch.Tensor | np.ndarray", prev_tokens) -> np.ndarray:
        """sigmoid(confidence_logits) for serving, float32 numpy [..., n]. The head is one linear layer, so
        the Markov feature's part of it is a table over the vocabulary (W1 w_markov), and a draft's
        confidences are a matrix-vector product and a gather in numpy: as PyTorch operations right after
        the draft call they cost 240 µs a draft at one slot."""
        w_hidden, per_token, bias = self.confidence_weights()
        rows = hidden_rows if isinstance(hidden_rows, np.ndarray) else hidden_rows.detach().float().cpu().numpy()
        logits = rows @ w_hidden + bias
        if per_token is not None:
            logits += per_token[np.asarray(prev_tokens)]
        return 1.0 / (1.0 + np.exp(-logits))

    def confidence_weights(self) -> tuple:
        """(w over the hidden row [H], per-token Markov term [V] or None, bias) as float32 numpy, converted
        once per weight version."""
        proj = self.confidence_head.proj
        w1 = self.markov_head.markov_w1.weight if self.config.confidence_with_markov else None
        key = tuple((t.data_ptr(), t._version) for t in (proj.weight, proj.bias, w1) if t is not None)
        cached = getattr(self, "_confidence_cache", None)
        if cached is None or cached[0] != key:
            w = proj.weight.detach().float().cpu()[0]
            hidden = self.cfg.hidden_size
            per_token = None if w1 is None else (w1.detach().float().cpu() @ w[hidden:]).numpy()
            cached = (key, w[:hidden].numpy().copy(), per_token, float(proj.bias.detach()[0]))
            self._confidence_cache = cached
        return cached[1:]

    # ------------------------------------------------------------------ serving forward
    def new_cache(self, n_slots: int, max_ctx: int) -> KVCache:
        """Context K/V per slot (float32, like the target's), with room for one block past max_ctx."""
        cfg = self.cfg
        if self.native is None and use_native_kernels(self.device, self.quant):
            target = self.target_ref[0]
            target.prepare_native()
            self.native = NativeLayers(self.layers, cfg, self.quant)
            # --quant-draft: the draft rows also go through a quantized copy of the target's lm_head (its
            # bytes are a large part of a draft call's); the target's own when it is quantized the same way
            head = PackedLinear(self._cut_head, None, self.quant) if self._cut_head is not None else \
                target.native.head if self.quant in (None, target.quant) else \
                PackedLinear(self.shared.lm_head, None, self.quant)
            self.native.set_io(self.shared.embed, self.norm.weight, head)
            self.packed_fc = PackedLinear(self.fc.weight, None, self.quant)
        self._call = None           # the native call takes the heads' weights again at its first use
        if self.serving is None and self.native is None:
            self.serving = [layer.serving_weights(cfg) for layer in self.layers]
        self._rope(max_ctx + self.config.block_size + 1)
        return KVCache(cfg.num_hidden_layers, n_slots, cfg.num_key_value_heads, max_ctx + self.config.block_size + 1,
                       cfg.head_dim, torch.float32, self.device)

    def forward_cached(self, cache: KVCache, ctx_feats: torch.Tensor | None, ctx_slots: torch.Tensor | None,
                       ctx_positions: torch.Tensor | None, slots: list[int], pos0: torch.Tensor,
                       block_tokens: torch.Tensor) -> torch.Tensor:
        """Commit new context rows, then run one block per slot. Returns final-normed [S, nb, H].

        ctx_feats [C, m*H] with their slots and positions (any order, any count per slot);
        block_tokens [S, nb] at positions pos0[s] .. pos0[s]+nb-1 (the anchor at pos0).
        Linear layers run in the model dtype; q/k/v, RoPE, the cache and attention in float32,
        as in the target's serving forward.
        """
        if self.native is not None:
            return self.native_call().forward(cache, ctx_feats, ctx_slots, ctx_positions, slots, pos0,
                                               block_tokens)
        cfg = self.cfg
        n_heads, n_kv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        group, eps, q_size, kv_size = n_heads // n_kv, cfg.rms_norm_eps, cfg.q_size, cfg.kv_size
        n_slots, nb = block_tokens.shape
        cap = cache.capacity
        heads = torch.arange(n_kv, device=self.device)

        slot_t = torch.as_tensor(slots, dtype=torch.int64, device=self.device)
        positions = (pos0.unsqueeze(1) + torch.arange(nb, device=self.device)).reshape(-1)
        row_slots = slot_t.repeat_interleave(nb)
        n_ctx = 0
        if ctx_feats is not None and ctx_feats.shape[0]:
            # context rows go through each layer's k/v projection together with the block rows
            ctx = rms_norm(linear(ctx_feats.to(self.dtype), self.fc.weight), self.hidden_norm.weight, eps)
            n_ctx = ctx.shape[0]
            positions = torch.cat([ctx_positions, positions])
            row_slots = torch.cat([ctx_slots, row_slots])
        cos, sin = self._cos_sin(positions)
        cache_index = ((row_slots.unsqueeze(1) * n_kv + heads) * cap + positions.unsqueeze(1)).reshape(-1)
        key_len = -(-int(pos0.max() + nb) // KEY_BLOCK) * KEY_BLOCK
        # every block row sees the slot's whole committed context and the whole block (non-causal)
        hidden_keys = torch.arange(key_len, device=self.device).view(1, -1) >= (pos0 + nb).unsqueeze(1)
        hidden_keys = hidden_keys.view(n_slots, 1, 1, 1, key_len)
        if slots == list(range(slots[0], slots[0] + n_slots)):
            select = slice(slots[0], slots[0] + n_slots)
        else:
            select = slot_t
        scale = d ** -0.5

        x = F.embedding(block_tokens.reshape(-1), self.shared.embed).to(self.dtype)
        n_rows = x.shape[0]
        for layer_id, w in enumerate(self.serving):
            k_cache, v_cache = cache.k[layer_id], cache.v[layer_id]
            h = rms_norm(x, w.input_norm, eps)
            if n_ctx:                   # no input_layernorm on the context (docs/reference/dflash-dspark.md §1.5)
                h = torch.cat([ctx, h])
            qkv = linear(h, w.qkv_w, w.qkv_b).float()
            qk = qkv[:, :q_size + kv_size].reshape(-1, n_heads + n_kv, d)
            if w.qk_norm is not None:          # Qwen3-style stacks only
                qk = F.rms_norm(qk, (d,), None, eps) * w.qk_norm
            qk = apply_rope(qk, cos, sin)
            k_cache.view(-1, d).index_copy_(0, cache_index, qk[:, n_heads:].reshape(-1, d))
            v_cache.view(-1, d).index_copy_(0, cache_index, qkv[:, q_size + kv_size:].reshape(-1, d))
            keys = k_cache[select, :, :key_len]
            values = v_cache[select, :, :key_len]
            q = (qk[n_ctx:, :n_heads] * scale).view(n_slots, nb, n_kv, group, d).permute(0, 2, 3, 1, 4)
            scores = torch.matmul(q.reshape(n_slots, n_kv, group * nb, d), keys.transpose(-1, -2))
            probs = torch.softmax(scores.view(n_slots, n_kv, group, nb, key_len).masked_fill_(hidden_keys,
                                                                                             float("-inf")), dim=-1)
            out = torch.matmul(probs.view(n_slots, n_kv, group * nb, key_len), values)
            out = out.view(n_slots, n_kv, group, nb, d).permute(0, 3, 1, 2, 4).reshape(n_rows, n_heads * d)
            x = x + linear(out.to(x.dtype), w.o_w, w.o_b)
            h = rms_norm(x, w.post_norm, eps)
            gate, up = linear(h, w.gate_up_w, w.gate_up_b).split(cfg.intermediate_size, dim=-1)
            x = x + linear(self.act(gate) * up, w.down_w, w.down_b)
        return rms_norm(x, self.norm.weight, eps).view(n_slots, nb, -1)

    def prepare_native_call(self) -> None:
        """Build the native call now, after new_cache, rather than in the first draft (which a request would
        wait for: DSpark's Markov table takes about 45 ms at 4096 tokens)."""
        if self.native is not None:
            self.native_call()

    def native_call(self) -> NativeBlockCall:
        """The native call, made after new_cache packed the layers (it takes the heads' weights then too)."""
        if self._call is None:
            self._call = NativeBlockCall(self)
        return self._call

    def draft_native(self, cache, ctx_feats, ctx_slots, ctx_positions, slots, pos0, block_tokens, n_draft: int,
                     anchors: np.ndarray, markov: bool, temperatures=None, uniforms=None, confidence: bool = False,
                     samplers=None):
        """The whole draft in one native call: (the block's final-normed rows [S, nb, H], tokens [S, n],
        logits [S, n, V] after the Markov bias, q [S, n, target vocabulary] of the sampled slots or None, the confidence
        head's predictions [S, n] (numpy) when `confidence`, else None); all but q are overwritten by the next
        draft of the same shape. Index arrays (slots, positions, block tokens, anchors) may be numpy arrays."""
        return self.native_call().draft(cache, ctx_feats, ctx_slots, ctx_positions, slots, pos0, block_tokens,
                                         n_draft, anchors, markov, temperatures, uniforms, confidence, samplers)

    # ------------------------------------------------------------------ training forward
    def forward_train(self, ctx_feats: torch.Tensor, anchors: torch.Tensor, block_tokens: torch.Tensor,
                      ) -> torch.Tensor:
        """All blocks of a batch of sequences in one differentiable pass.

        ctx_feats [Bz, T, m*H] (target taps at positions 0..T-1), anchors [Bz, N] (block n starts at
        position anchors[:, n]), block_tokens [Bz, N, nb]. Returns final-normed [Bz, N, nb, H].
        Block n sees context positions < anchors[:, n] and its own nb rows, nothing else.
        """
        cfg = self.cfg
        n_heads, n_kv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bsz, seq = ctx_feats.shape[:2]
        n_blocks, nb = block_tokens.shape[1:]
        n_q = n_blocks * nb
        device = ctx_feats.device
        ctx = self.hidden_norm(self.fc(ctx_feats.to(self.dtype)))
        block_pos = (anchors.unsqueeze(-1) + torch.arange(nb, device=device)).reshape(bsz, n_q)
        ctx_pos = torch.arange(seq, device=device)
        rope = self._rope(int(max(seq, int(block_pos.max()) + 1)) + 1)
        cos_q, sin_q = (t.to(self.dtype) for t in rope.gather(block_pos.reshape(-1)))
        cos_c, sin_c = (t.to(self.dtype) for t in rope.gather(ctx_pos))
        cos_c, sin_c = cos_c.repeat(bsz, 1), sin_c.repeat(bsz, 1)

        block_of_q = torch.arange(n_q, device=device) // nb
        ctx_visible = ctx_pos.view(1, 1, seq) < anchors.repeat_interleave(nb, dim=1).unsqueeze(-1)   # [Bz, Q, T]
        own_block = (block_of_q.view(-1, 1) == block_of_q.view(1, -1)).expand(bsz, n_q, n_q)
        mask = torch.cat([ctx_visible, own_block], dim=-1).unsqueeze(1)                          # [Bz, 1, Q, T+Q]

        x = F.embedding(block_tokens.reshape(bsz, n_q), self.shared.embed).to(self.dtype)
        for layer in self.layers:
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(bsz * n_q, n_heads, d)
            k_b = attn.k_proj(h).view(bsz * n_q, n_kv, d)
            k_c = attn.k_proj(ctx).view(bsz * seq, n_kv, d)
            if cfg.qk_norm:
                q, k_b, k_c = attn.q_norm(q), attn.k_norm(k_b), attn.k_norm(k_c)
            q, k_b = apply_rope(q, cos_q, sin_q), apply_rope(k_b, cos_q, sin_q)
            k_c = apply_rope(k_c, cos_c, sin_c)
            keys = torch.cat([k_c.view(bsz, seq, n_kv, d), k_b.view(bsz, n_q, n_kv, d)], dim=1).transpose(1, 2)
            values = torch.cat([attn.v_proj(ctx).view(bsz, seq, n_kv, d),
                                attn.v_proj(h).view(bsz, n_q, n_kv, d)], dim=1).transpose(1, 2)
            out = F.scaled_dot_product_attention(q.view(bsz, n_q, n_heads, d).transpose(1, 2), keys, values,
                                                 attn_mask=mask, is_causal=False, enable_gqa=n_kv != n_heads)
            x = x + attn.o_proj(out.transpose(1, 2).reshape(bsz, n_q, n_heads * d))
            h = layer.post_attention_layernorm(x)
            x = x + layer.mlp.down_proj(self.act(layer.mlp.gate_proj(h)) * layer.mlp.up_proj(h))
        return self.norm(x).view(bsz, n_blocks, nb, -1)

    def init_weights(self, std: float = 0.02, seed: int = 0) -> None:
        """Random initialisation for training; the Markov bias and the confidence head start at zero."""
        gen = torch.Generator().manual_seed(seed)
        for name, param in self.named_parameters():
            with torch.no_grad():
                if name.endswith("norm.weight"):
                    param.fill_(1.0)
                elif name.endswith(".bias") or name.startswith(("markov_head.markov_w2", "confidence_head")):
                    param.zero_()
                else:
                    param.copy_(torch.randn(param.shape, generator=gen) * std)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json")


def save_block_drafter(model: BlockDrafter, out_dir: str | Path, dtype: torch.dtype = torch.bfloat16,
                       extra_config: dict | None = None, tokenizer_from: str | Path | None = None) -> Path:
    """Write config.json (every key explicit) and model.safetensors, without embedding or lm_head
    (the target's are used), plus the target's tokenizer files when `tokenizer_from` is given.
    The Markov head is written in `dtype` too: it is V x r x 2 numbers (over a quarter of a 3-layer drafter
    in float32) and the native chain reads W2 as bfloat16 anyway. The tiny confidence head stays float32.
    Loading runs both heads in float32."""
    out_dir = Path(out_dir)
    if tokenizer_from is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in TOKENIZER_FILES:
            if (Path(tokenizer_from) / name).is_file():
                shutil.copyfile(Path(tokenizer_from) / name, out_dir / name)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {}
    for name, tensor in model.state_dict().items():
        keep_fp32 = name.startswith("confidence_head.")
        state[name] = tensor.detach().to(torch.float32 if keep_fp32 else dtype).contiguous().cpu()
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config = normalized_config(model.config)
    config["torch_dtype"] = str(dtype).replace("torch.", "")
    config.update(extra_config or {})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out_dir


def load_block_drafter(model_dir, target, layout: str | None = None, tokenizer=None, dtype=None) -> BlockDrafter:
    """Detect the format of `model_dir`, check it against `target` and load it."""
    return BlockDrafter.from_pretrained(read_block_drafter(model_dir, layout), target, dtype, tokenizer)
