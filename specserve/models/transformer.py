"""The decoder (Llama / Qwen2 / Qwen3 families) in plain PyTorch.

Parameter names equal the Hugging Face ones, so `state_dict()` is a valid checkpoint.
Two forwards:
  * `forward_step(batch, cache)`: the serving path over a flat StepBatch of rows from
    several slots, with the static KV cache. On the CPU it runs on the native kernels
    (native_decoder.py: one C call per step); otherwise on the PyTorch operations below,
    with fused q/k/v and gate/up weights and padded, batch-invariant shapes (step_batch.py);
  * `forward_full(tokens)`: a plain causal forward over [B, T] for training.
Both can return the residual stream after any layers ("taps", -1 = embedding output)
and the final-normed hidden state, which is what the drafters read.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig, load_config
from .forward_output import ForwardOutput
from .gguf_checkpoint import open_gguf_model
from .gguf_file import is_gguf
from .kv_cache import KVCache
from .loader import Checkpoint, parse_dtype
from .rope import RotaryEmbedding, apply_rope
from .step_batch import MIN_ROWS, AttentionGroup, StepBatch
from .tap_store import FINAL, TapStore
from ..errors import ModelLoadError, OptionError
from ..kernels import mode as kernels_mode
from ..kernels import requested as kernels_requested
from ..kernels import use_native_kernels
from ..kernels.capi import CACHE_TYPES
from .native_decoder import NativeDecoder, rms_norm_rows

ACTIVATIONS = {
    "silu": F.silu, "swish": F.silu, "relu": F.relu, "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
}


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear whose per-row result does not depend on how many rows are in the batch.

    bfloat16 GEMMs are batch-invariant as they are. float32 BLAS picks a different kernel
    below MIN_ROWS rows; padding keeps every float32 call on one path.
    """
    n = x.shape[0]
    if n >= MIN_ROWS or x.dtype == torch.bfloat16:
        return F.linear(x, weight, bias)
    padded = torch.cat([x, x.new_zeros((MIN_ROWS - n,) + tuple(x.shape[1:]))])
    return F.linear(padded, weight, bias)[:n]


def float32_copy(weight: torch.Tensor) -> torch.Tensor:
    """weight as float32, converted once per tensor version (norm weights of bf16 models, on float32 rows);
    the copy lives on the tensor itself, so it goes when the weight goes."""
    if weight.dtype == torch.float32:
        return weight
    cached = getattr(weight, "_float32_copy", None)
    if cached is None or cached[0] != weight._version:
        cached = (weight._version, weight.detach().float())
        weight._float32_copy = cached
    return cached[1]


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    if x.dtype == torch.float32:        # float32 rows (the native path) with weights of any dtype
        weight = None if weight is None else float32_copy(weight)
        if x.device.type == "cpu" and not torch.is_grad_enabled() and kernels_mode() == "native":
            # serving: one kernel call; between native calls the PyTorch operator costs 20-50 µs
            return rms_norm_rows(x.reshape(-1, x.shape[-1]), weight, eps).view(x.shape)
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    out = F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)
    return out * weight if weight is not None else out


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.q_size, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.kv_size, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.kv_size, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.q_size, cfg.hidden_size, bias=cfg.o_bias)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=cfg.mlp_bias)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias)


@dataclass
class ServingWeights:
    """One layer's weights as the serving forward uses them (fused, no module lookups)."""
    input_norm: torch.Tensor
    qkv_w: torch.Tensor
    qkv_b: torch.Tensor | None
    qk_norm: torch.Tensor | None          # [heads + kv_heads, head_dim]: q_norm rows then k_norm rows
    o_w: torch.Tensor
    o_b: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up_w: torch.Tensor
    gate_up_b: torch.Tensor | None
    down_w: torch.Tensor
    down_b: torch.Tensor | None


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def serving_weights(self, cfg: ModelConfig) -> ServingWeights:
        """Concatenate q/k/v and gate/up once; the separate parameters become views of them."""
        attn, mlp = self.self_attn, self.mlp

        def fuse(projs):
            weight = torch.cat([p.weight for p in projs]).detach()
            for p, part in zip(projs, weight.split([p.out_features for p in projs])):
                p.weight.data = part
            bias = torch.cat([p.bias for p in projs]).detach() if projs[0].bias is not None else None
            return weight, bias

        qkv_w, qkv_b = fuse([attn.q_proj, attn.k_proj, attn.v_proj])
        gate_up_w, gate_up_b = fuse([mlp.gate_proj, mlp.up_proj])
        qk_norm = None
        if cfg.qk_norm:
            qk_norm = torch.cat([attn.q_norm.weight.detach().float().expand(cfg.num_attention_heads, -1),
                                 attn.k_norm.weight.detach().float().expand(cfg.num_key_value_heads, -1)])
        return ServingWeights(self.input_layernorm.weight.detach(), qkv_w, qkv_b, qk_norm,
                              attn.o_proj.weight.detach(), _detach(attn.o_proj.bias),
                              self.post_attention_layernorm.weight.detach(), gate_up_w, gate_up_b,
                              mlp.down_proj.weight.detach(), _detach(mlp.down_proj.bias))


def _detach(t):
    return None if t is None else t.detach()


def rope_tables(rope: RotaryEmbedding, batch: StepBatch):
    """float32 cos/sin rows for the batch's positions (dynamic NTK scaling depends on each slot's length)."""
    if rope.rope_type != "dynamic":
        return rope.gather(batch.positions)
    cos, sin = [], []
    for seg in batch.segments:
        pos = batch.positions[seg.start:seg.start + seg.n_rows]
        c, s = rope.gather(pos, seq_len=seg.pos0 + seg.n_rows)
        cos.append(c)
        sin.append(s)
    return torch.cat(cos), torch.cat(sin)


def cached_attention(qkv: torch.Tensor, qk_norm: torch.Tensor | None, cfg: ModelConfig, cos: torch.Tensor,
                     sin: torch.Tensor, batch: StepBatch, cache: KVCache, layer_id: int) -> torch.Tensor:
    """Attention of the batch's rows over layer `layer_id` of a KV cache, from float32 q/k/v rows [N, q+2kv].

    Writes the rows' keys and values into the cache and returns the float32 context rows
    [N, heads*head_dim]. `batch.prepare` must have been called for this cache.
    """
    n_heads, n_kv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    q_size, kv_size = cfg.q_size, cfg.kv_size
    n_rows = batch.n_tokens
    qk = qkv[:, :q_size + kv_size].reshape(n_rows, n_heads + n_kv, d)
    if qk_norm is not None:
        qk = F.rms_norm(qk, (d,), None, cfg.rms_norm_eps) * qk_norm
    qk = apply_rope(qk, cos, sin)
    k_cache, v_cache = cache.k[layer_id], cache.v[layer_id]
    cache_index = batch.extra["cache_index"]
    k_cache.view(-1, d).index_copy_(0, cache_index, qk[:, n_heads:].reshape(n_rows * n_kv, d))
    v_cache.view(-1, d).index_copy_(0, cache_index, qkv[:, q_size + kv_size:].reshape(n_rows * n_kv, d))
    q = qk[:, :n_heads] * d ** -0.5
    if len(batch.groups) == 1:
        return _group_attention(q, batch.groups[0], k_cache, v_cache, n_kv)
    ctx = q.new_empty(n_rows, n_heads * d)
    for g in batch.groups:
        ctx.index_copy_(0, g.rows, _group_attention(q.index_select(0, g.rows), g, k_cache, v_cache, n_kv))
    return ctx


def _group_attention(q: torch.Tensor, g: AttentionGroup, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     n_kv: int) -> torch.Tensor:
    """One attention group: scaled q rows [n, heads, d] -> context rows [n, heads*d]."""
    n_heads, d = q.shape[1], q.shape[2]
    group = n_heads // n_kv
    n_slots, q_rows, key_len = g.n_slots, g.n_rows_padded, g.key_len
    keys = k_cache[g.slot_select, :, :key_len]
    values = v_cache[g.slot_select, :, :key_len]
    if g.pad_index is not None:
        q = q.new_zeros(n_slots * q_rows, n_heads, d).index_copy_(0, g.pad_index, q)
    # [S, Q, kv, group, d] -> [S, kv, group*Q, d]: the queries of one kv head share its keys
    q = q.reshape(n_slots, q_rows, n_kv, group, d).permute(0, 2, 3, 1, 4).reshape(n_slots, n_kv, group * q_rows, d)
    scores = torch.matmul(q, keys.transpose(-1, -2)).view(n_slots, n_kv, group, q_rows, key_len)
    probs = torch.softmax(scores.masked_fill_(~g.attn_mask, float("-inf")), dim=-1)
    ctx = torch.matmul(probs.view(n_slots, n_kv, group * q_rows, key_len), values)
    ctx = ctx.view(n_slots, n_kv, group, q_rows, d).permute(0, 3, 1, 2, 4).reshape(n_slots * q_rows, n_heads * d)
    if g.pad_index is not None:
        ctx = ctx.index_select(0, g.pad_index)
    return ctx


def mlp_step(w: ServingWeights, x: torch.Tensor, cfg: ModelConfig, act) -> torch.Tensor:
    """x + MLP(post_attention_layernorm(x))."""
    h = rms_norm(x, w.post_norm, cfg.rms_norm_eps)
    gate, up = linear(h, w.gate_up_w, w.gate_up_b).split(cfg.intermediate_size, dim=-1)
    return x + linear(act(gate) * up, w.down_w, w.down_b)


def decoder_layer_step(w: ServingWeights, x: torch.Tensor, cfg: ModelConfig, act, cos, sin, batch: StepBatch,
                       cache: KVCache, layer_id: int) -> torch.Tensor:
    """One pre-norm decoder layer over the batch's rows, reading and extending `cache` layer `layer_id`."""
    h = rms_norm(x, w.input_norm, cfg.rms_norm_eps)
    qkv = linear(h, w.qkv_w, w.qkv_b).float()
    ctx = cached_attention(qkv, w.qk_norm, cfg, cos, sin, batch, cache, layer_id)
    x = x + linear(ctx.to(x.dtype), w.o_w, w.o_b)
    return mlp_step(w, x, cfg, act)


def serving_cache(model: nn.Module, layers, n_slots: int, max_ctx: int, torch_weights: bool = True,
                  cache_types: tuple[str, str] = ("f32", "f32")) -> KVCache:
    """Ready `model` (with .config, .rope, .serving, .device) to serve up to max_ctx positions
    with `layers`: RoPE tables long enough, the PyTorch path's fused weights (unless
    `torch_weights` is False) and a KV cache for them (float32 unless `cache_types` says otherwise:
    llama.cpp's names for the keys' and the values' element types; others need the native kernels)."""
    cfg = model.config
    if model.rope is None or model.rope.cos.shape[0] < max_ctx:
        model.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling,
                                     cfg.max_position_embeddings, max(max_ctx, 64), model.device)
    if model.serving is None and torch_weights:
        model.serving = [layer.serving_weights(cfg) for layer in layers]
    k_dtype, v_dtype = (getattr(torch, CACHE_TYPES[t][0]) for t in cache_types)
    return KVCache(len(layers), n_slots, cfg.num_key_value_heads, max_ctx, cfg.head_dim, k_dtype, model.device,
                   v_dtype=v_dtype)


def new_embedding(num: int, dim: int) -> nn.Embedding:
    """nn.Embedding, randomly initialised except on the meta device (a model built there to load a
    checkpoint into), where the init's first call imports torch._dynamo: about a second of every load."""
    if torch.empty(0).device.type == "meta":
        return nn.Embedding(num, dim, _weight=torch.empty(num, dim))
    return nn.Embedding(num, dim)


class Decoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = new_embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class CausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.model = Decoder(cfg)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.act = ACTIVATIONS[cfg.hidden_act]
        self.rope: RotaryEmbedding | None = None
        self.serving: list[ServingWeights] | None = None     # built by new_cache()
        self.native: NativeDecoder | None = None              # the native-kernel forward, built by new_cache()
        self.quant: str | None = None                         # weight quantization of the native forward
        self.model_dir: Path | None = None

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, model_dir: str | Path, dtype=None, device=None) -> "CausalLM":
        """A model folder (Hugging Face layout) or a GGUF file."""
        if is_gguf(model_dir):
            cfg, checkpoint = open_gguf_model(model_dir)
        else:
            cfg, checkpoint = load_config(model_dir), None
        if dtype is None or dtype == "auto":
            # the checkpoint's dtype, except float16, which is slow on CPUs
            dtype = torch.bfloat16 if str(cfg.torch_dtype) in ("bfloat16", "torch.bfloat16") else torch.float32
        dtype = parse_dtype(dtype)
        checkpoint = checkpoint or Checkpoint(model_dir)
        with torch.device("meta"):
            model = cls(cfg)
        state = {}
        for name, param in model.state_dict().items():
            state[name] = checkpoint.get(name, dtype, tuple(param.shape))
        if cfg.tie_word_embeddings and "lm_head.weight" in checkpoint and model.lm_head is None:
            pass  # tied: the embedding is the head; a stored copy is ignored
        model.load_state_dict(state, assign=True)
        model.to(device=device)
        model.eval().requires_grad_(False)
        model.model_dir = Path(model_dir)
        model.checkpoint = checkpoint
        return model

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.embedding(tokens, self.model.embed_tokens.weight)

    def logits(self, hidden_normed: torch.Tensor) -> torch.Tensor:
        return linear(hidden_normed, self.lm_head_weight).float()

    def new_cache(self, n_slots: int, max_ctx: int, cache_types: tuple[str, str] = ("f32", "f32")) -> KVCache:
        """A KV cache for the serving forward: float32 keys and values unless `cache_types` (keys, values:
        f32, f16 or bf16) says otherwise; attention always computes in float32.

        On the CPU with the native kernels enabled, the first call packs the weights for them.
        """
        native = self.prepare_native()
        if not native and tuple(cache_types) != ("f32", "f32"):
            raise OptionError(f"KV cache types {'/'.join(cache_types)} need the native CPU kernels "
                              f"(kernels: {kernels_requested()}, device: {self.device})")
        return serving_cache(self, self.model.layers, n_slots, max_ctx, torch_weights=not native,
                             cache_types=cache_types)

    def prepare_native(self) -> bool:
        """Pack the weights for the native kernels if this model serves on them; False: PyTorch path."""
        if self.native is None and use_native_kernels(self.device, self.quant):
            self.native = NativeDecoder(self, self.quant)
        return self.native is not None

    # ------------------------------------------------------------------ serving forward
    def forward_step(self, batch: StepBatch, cache: KVCache, taps=(), want_final_hidden: bool = False,
                     store: TapStore | None = None) -> ForwardOutput:
        """Rows of several slots through the model, reading and writing their cache. With `store`, the
        rows' states that the store keeps go there (by slot and position) instead of into the output.

        Linear layers run in the model dtype; q/k/v, RoPE, the cache and attention in float32.
        """
        if self.native is not None:
            return self.native.forward_step(batch, cache, taps, want_final_hidden, store)
        if store is not None:
            taps = tuple(layer for layer in store.layers if layer != FINAL)
            want_final_hidden = FINAL in store.layers
        cfg = self.config
        eps = cfg.rms_norm_eps
        batch.prepare(cfg.num_key_value_heads, cache.capacity, cfg.num_attention_heads // cfg.num_key_value_heads)
        cos, sin = rope_tables(self.rope, batch)
        out_taps: dict[int, torch.Tensor] = {}

        x = self.embed(batch.tokens)
        if -1 in taps:
            out_taps[-1] = x
        for layer_id, w in enumerate(self.serving):
            x = decoder_layer_step(w, x, cfg, self.act, cos, sin, batch, cache, layer_id)
            if layer_id in taps:
                out_taps[layer_id] = x
        for seg in batch.segments:
            cache.lengths[seg.slot] = seg.pos0 + seg.n_rows
        logits = final = None
        if want_final_hidden:
            final = rms_norm(x, self.model.norm.weight, eps)
            if batch.output_rows.numel():
                logits = self.logits(final.index_select(0, batch.output_rows))
        elif batch.output_rows.numel():
            rows = x.index_select(0, batch.output_rows)
            logits = self.logits(rms_norm(rows, self.model.norm.weight, eps))
        if store is not None:
            store.write(batch.row_slots, batch.positions, {**out_taps, FINAL: final})
            return ForwardOutput(logits)
        tap_layers = tuple(sorted(out_taps))
        tapped = torch.cat([out_taps[layer] for layer in tap_layers], dim=-1) if tap_layers else None
        return ForwardOutput(logits, tapped, tap_layers, final)

    # ------------------------------------------------------------------ training / scoring forward
    def forward_full(self, tokens: torch.Tensor, taps=(), positions: torch.Tensor | None = None):
        """Causal forward over [B, T] without a cache. Returns (final-normed hidden [B,T,H], taps)."""
        cfg = self.config
        bsz, seq = tokens.shape
        if self.rope is None or self.rope.cos.shape[0] < seq:
            self.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling,
                                        cfg.max_position_embeddings, max(seq, cfg.max_position_embeddings),
                                        self.device)
        if positions is None:
            positions = torch.arange(seq, device=tokens.device)
        cos, sin = self.rope.gather(positions, seq_len=int(positions.max()) + 1)
        cos, sin = cos.to(self.dtype), sin.to(self.dtype)
        n_heads, n_kv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        x = self.model.embed_tokens(tokens)
        out_taps = {-1: x} if -1 in taps else {}
        for layer_id, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(bsz, seq, n_heads, d)
            k = attn.k_proj(h).view(bsz, seq, n_kv, d)
            v = attn.v_proj(h).view(bsz, seq, n_kv, d)
            if cfg.qk_norm:
                q, k = attn.q_norm(q), attn.k_norm(k)
            q = apply_rope(q.reshape(bsz * seq, n_heads, d), cos.repeat(bsz, 1), sin.repeat(bsz, 1))
            k = apply_rope(k.reshape(bsz * seq, n_kv, d), cos.repeat(bsz, 1), sin.repeat(bsz, 1))
            q = q.view(bsz, seq, n_heads, d).transpose(1, 2)
            k = k.view(bsz, seq, n_kv, d).transpose(1, 2)
            v = v.transpose(1, 2)
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=n_kv != n_heads)
            x = x + attn.o_proj(ctx.transpose(1, 2).reshape(bsz, seq, n_heads * d))
            h = layer.post_attention_layernorm(x)
            x = x + layer.mlp.down_proj(self.act(layer.mlp.gate_proj(h)) * layer.mlp.up_proj(h))
            if layer_id in taps:
                out_taps[layer_id] = x
        return self.model.norm(x), out_taps

    def init_weights(self, std: float = 0.02, seed: int = 0) -> None:
        """Random initialisation for training from scratch (and for test checkpoints)."""
        init_weights(self, std, seed)


def init_weights(module: nn.Module, std: float = 0.02, seed: int = 0) -> None:
    """Norm weights 1, biases 0, everything else N(0, std^2), from a seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    for name, param in module.named_parameters():
        if any(part.endswith("norm") for part in name.split(".")[:-1]):
            nn.init.ones_(param)
        elif name.endswith(".bias"):
            nn.init.zeros_(param)
        else:
            with torch.no_grad():
                param.copy_(torch.randn(param.shape, generator=gen) * std)


def check_vocab(model: CausalLM, token_id: int, what: str) -> None:
    if not 0 <= token_id < model.config.vocab_size:
        raise ModelLoadError(f"{what} {token_id} is outside the vocabulary (size {model.config.vocab_size})")
