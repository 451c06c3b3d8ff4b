"""Tensor names in GGUF files <-> specserve's (Hugging Face) parameter names, per architecture.

The GGUF names are those of llama.cpp's `src/llama-arch.cpp` (LLM_TENSOR_* names) as its converter
`convert_hf_to_gguf.py` writes them: `token_embd`, `blk.N.attn_q`, `output_norm`, ... EAGLE-3 and
DFlash/DSpark drafters add `fc`, `enc.output_norm`, `blk.0.attn_norm_2`, `d2t`, `markov_w1/2` and
`conf_proj` (`src/models/eagle3.cpp`, `src/models/dflash.cpp`).

One more convention: for the `llama` and `eagle3` architectures the converter permutes the rows of
the q and k projections (`LlamaModel.permute`), because llama.cpp rotates interleaved pairs of
dimensions there while Hugging Face rotates the two halves of each head. `permute_rows` and
`unpermute_rows` convert between the two.
"""
from __future__ import annotations

import torch

TARGET_ARCHS = ("llama", "qwen2", "qwen3")
EAGLE3_ARCH = "eagle3"
BLOCK_DRAFTER_ARCH = "dflash"            # llama.cpp's one architecture for DFlash and DSpark
PERMUTED_ARCHS = ("llama", EAGLE3_ARCH)  # q/k rows in llama.cpp's interleaved RoPE order
ROPE_FREQS = "rope_freqs.weight"         # llama3 RoPE: per-dimension frequency divisors

# one decoder layer: Hugging Face suffix -> GGUF suffix
LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.gate_proj.bias": "ffn_gate.bias",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.up_proj.bias": "ffn_up.bias",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.down_proj.bias": "ffn_down.bias",
}
EAGLE3_LAYER = {**LAYER, "hidden_norm.weight": "attn_norm_2.weight"}

TARGET_GLOBAL = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
EAGLE3_GLOBAL = {
    "fc.weight": "fc.weight",
    "input_norm.weight": "enc.output_norm.weight",    # norm_before_fc
    "norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "embed_tokens.weight": "token_embd.weight",
    "d2t": "d2t",
}
BLOCK_DRAFTER_GLOBAL = {
    "fc.weight": "fc.weight",
    "hidden_norm.weight": "enc.output_norm.weight",
    "norm.weight": "output_norm.weight",
    "markov_head.markov_w1.weight": "markov_w1.weight",
    "markov_head.markov_w2.weight": "markov_w2.weight",
    "confidence_head.proj.weight": "conf_proj.weight",
    "confidence_head.proj.bias": "conf_proj.bias",
    # copies of the target's matrices some drafts ship; specserve uses the target's own
    "embed_tokens.weight": "token_embd.weight",
    "lm_head.weight": "output.weight",
}


def tensor_names(arch: str, n_layers: int) -> dict[str, str]:
    """Every tensor name an `arch` model with n_layers layers may have: specserve name -> GGUF name."""
    if arch in TARGET_ARCHS:
        names, layer, prefix = dict(TARGET_GLOBAL), LAYER, "model.layers.{}."
    elif arch == EAGLE3_ARCH:
        names, layer, prefix = dict(EAGLE3_GLOBAL), EAGLE3_LAYER, "layers.{}."
    elif arch == BLOCK_DRAFTER_ARCH:
        names, layer, prefix = dict(BLOCK_DRAFTER_GLOBAL), LAYER, "layers.{}."
    else:
        raise ValueError(f"no tensor names for architecture {arch!r}")
    for i in range(n_layers):
        for ours, theirs in layer.items():
            names[prefix.format(i) + ours] = f"blk.{i}.{theirs}"
    return names


def permuted_heads(arch: str, name: str, n_heads: int, n_kv_heads: int) -> int | None:
    """How many heads the rows of tensor `name` (specserve name) are permuted over in `arch`'s GGUF
    files, or None when they are stored as they are."""
    if arch not in PERMUTED_ARCHS:
        return None
    if name.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
        return n_heads
    if name.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
        return n_kv_heads
    return None


def permute_rows(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Hugging Face q/k rows (two halves per head) -> llama.cpp's order (interleaved pairs per head)."""
    rows = weight.shape[0]
    return (weight.reshape(n_heads, 2, rows // n_heads // 2, *weight.shape[1:])
            .transpose(1, 2).reshape(weight.shape).contiguous())


def unpermute_rows(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The inverse of permute_rows."""
    rows = weight.shape[0]
    return (weight.reshape(n_heads, rows // n_heads // 2, 2, *weight.shape[1:])
            .transpose(1, 2).reshape(weight.shape).contiguous())
