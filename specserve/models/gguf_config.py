"""GGUF hyperparameters (`{arch}.block_count`, `{arch}.attention.head_count`, ...) <-> the Hugging Face
config keys specserve's ModelConfig is built from.

Key names follow llama.cpp's `src/llama-arch.cpp` (LLM_KV_* names) and the values its converter
writes (`convert_hf_to_gguf.py`, `TextModel.set_gguf_parameters`). RoPE scaling: `linear` and `yarn`
are metadata; llama3 scaling is a `rope_freqs` tensor of per-dimension divisors.
"""
from __future__ import annotations

import gguf
import torch

from ..errors import ModelLoadError
from .config import ModelConfig
from .gguf_file import GgufFile
from .gguf_names import ROPE_FREQS
from .rope import llama3_freq_factors

U32, I32, F32, STR, BOOL, ARRAY = (gguf.GGUFValueType.UINT32, gguf.GGUFValueType.INT32, gguf.GGUFValueType.FLOAT32,
                                    gguf.GGUFValueType.STRING, gguf.GGUFValueType.BOOL, gguf.GGUFValueType.ARRAY)


def _uniform(value, key: str, where: str) -> int:
    """Per-layer arrays (some GGUFs store head_count_kv per layer) must hold one value here."""
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise ModelLoadError(f"{where}: {key} differs between layers ({value}); not supported")
        value = value[0]
    return int(value)


def _rope_scaling(f: GgufFile, arch: str, head_dim: int) -> dict | None:
    kind = str(f.value(f"{arch}.rope.scaling.type", "none"))
    if ROPE_FREQS in f.tensors:
        if kind != "none":
            raise ModelLoadError(f"{f.path}: both {ROPE_FREQS} and rope scaling type {kind!r}; not supported")
        factors = f.tensor(ROPE_FREQS).double().flatten()
        if factors.numel() != head_dim // 2:
            raise ModelLoadError(f"{f.path}: {ROPE_FREQS} has {factors.numel()} values, expected {head_dim // 2}")
        return {"rope_type": "freq_factors", "factors": factors.tolist()}
    if kind == "none":
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": f.value(f"{arch}.rope.scaling.factor")}
    if kind == "yarn":
        scaling = {"rope_type": "yarn", "factor": f.value(f"{arch}.rope.scaling.factor"),
                   "original_max_position_embeddings": int(f.value(f"{arch}.rope.scaling.original_context_length"))}
        for key, hf_key in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow"),
                            ("yarn_attn_factor", "attention_factor")):
            value = f.value(f"{arch}.rope.scaling.{key}", None)
            if value is not None:
                scaling[hf_key] = value
        return scaling
    raise ModelLoadError(f"{f.path}: rope scaling type {kind!r} is not supported (none, linear, yarn, or llama3 "
                         f"frequency factors)")


def layer_params(f: GgufFile, arch: str) -> dict:
    """The decoder-stack keys of a Hugging Face config from `{arch}.*` metadata."""
    where = str(f.path)
    hidden = int(f.value(f"{arch}.embedding_length"))
    heads = _uniform(f.value(f"{arch}.attention.head_count"), "head_count", where)
    head_dim = int(f.value(f"{arch}.attention.key_length", hidden // heads))
    value_dim = int(f.value(f"{arch}.attention.value_length", head_dim))
    if value_dim != head_dim:
        raise ModelLoadError(f"{where}: attention.value_length {value_dim} differs from key_length {head_dim}; "
                             "not supported")
    rope_dim = int(f.value(f"{arch}.rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise ModelLoadError(f"{where}: rope.dimension_count {rope_dim} is not the head size {head_dim} (partial "
                             "rotary embeddings are not supported)")
    return {
        "hidden_size": hidden,
        "intermediate_size": _uniform(f.value(f"{arch}.feed_forward_length"), "feed_forward_length", where),
        "num_hidden_layers": int(f.value(f"{arch}.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": _uniform(f.value(f"{arch}.attention.head_count_kv", heads), "head_count_kv", where),
        "head_dim": head_dim,
        "rms_norm_eps": f.value(f"{arch}.attention.layer_norm_rms_epsilon"),
        "max_position_embeddings": int(f.value(f"{arch}.context_length")),
        "rope_theta": f.value(f"{arch}.rope.freq_base", 10000.0),
        "rope_scaling": _rope_scaling(f, arch, head_dim),
        "hidden_act": "silu",           # llama.cpp's llama / qwen2 / qwen3 graphs use SiLU
    }


def special_token_ids(f: GgufFile) -> tuple[int | None, list[int]]:
    """(bos id, eos ids): EOS first, then end-of-turn / end-of-message tokens that also end generation."""
    bos = f.value("tokenizer.ggml.bos_token_id", None)
    eos = []
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        value = f.value(key, None)
        if value is not None and int(value) not in eos:
            eos.append(int(value))
    return (None if bos is None else int(bos)), eos


def target_config(f: GgufFile, arch: str) -> dict:
    """A Hugging Face config dict for a llama / qwen2 / qwen3 GGUF target."""
    raw = {"model_type": arch, **layer_params(f, arch)}
    embed = f.shape("token_embd.weight") if "token_embd.weight" in f.tensors else None
    vocab = f.value(f"{arch}.vocab_size", None)
    if vocab is None:
        vocab = embed[0] if embed else len(f.value("tokenizer.ggml.tokens", []))
    raw["vocab_size"] = int(vocab)
    raw["tie_word_embeddings"] = "output.weight" not in f.tensors
    if arch == "llama":
        raw["attention_bias"] = "blk.0.attn_q.bias" in f.tensors
        raw["mlp_bias"] = "blk.0.ffn_gate.bias" in f.tensors
    raw["torch_dtype"] = "bfloat16" if any(t.tensor_type == gguf.GGMLQuantizationType.BF16
                                           for t in f.tensors.values()) else "float32"
    raw["bos_token_id"], raw["eos_token_id"] = special_token_ids(f)
    return raw


# ---------------------------------------------------------------------------------------------- writing
def rope_entries(cfg: ModelConfig, arch: str) -> tuple[list[tuple], torch.Tensor | None]:
    """(metadata entries for RoPE scaling, the rope_freqs tensor or None) as llama.cpp expects them."""
    scaling = cfg.rope_scaling
    if not scaling:
        return [], None
    kind = scaling["rope_type"]
    if kind == "linear":
        return [(f"{arch}.rope.scaling.type", "linear", STR),
                (f"{arch}.rope.scaling.factor", scaling["factor"], F32)], None
    if kind == "yarn":
        entries = [(f"{arch}.rope.scaling.type", "yarn", STR), (f"{arch}.rope.scaling.factor", scaling["factor"], F32),
                   (f"{arch}.rope.scaling.original_context_length",
                    scaling.get("original_max_position_embeddings") or cfg.max_position_embeddings, U32)]
        for hf_key, key in (("attention_factor", "yarn_attn_factor"), ("beta_fast", "yarn_beta_fast"),
                            ("beta_slow", "yarn_beta_slow")):
            if scaling.get(hf_key) is not None:
                entries.append((f"{arch}.rope.scaling.{key}", scaling[hf_key], F32))
        return entries, None
    if kind == "llama3":
        return [], llama3_freq_factors(cfg.rope_theta, cfg.head_dim, scaling).float()
    if kind == "freq_factors":
        return [], torch.tensor(scaling["factors"], dtype=torch.float32)
    raise ModelLoadError(f"rope scaling {kind!r} has no GGUF form llama.cpp reads (dynamic NTK scaling is not "
                         "implemented there)")


def hparam_entries(cfg: ModelConfig, arch: str) -> list[tuple]:
    """(key, value, type) metadata of a decoder stack, in the order llama.cpp's converter writes them."""
    if cfg.hidden_act not in ("silu", "swish"):
        raise ModelLoadError(f"hidden_act {cfg.hidden_act!r} cannot be written: llama.cpp's {arch} graph uses SiLU")
    entries = [
        (f"{arch}.block_count", cfg.num_hidden_layers, U32),
        (f"{arch}.context_length", cfg.max_position_embeddings, U32),
        (f"{arch}.embedding_length", cfg.hidden_size, U32),
        (f"{arch}.feed_forward_length", cfg.intermediate_size, U32),
        (f"{arch}.attention.head_count", cfg.num_attention_heads, U32),
        (f"{arch}.attention.head_count_kv", cfg.num_key_value_heads, U32),
    ]
    entries += rope_entries(cfg, arch)[0]
    entries += [
        (f"{arch}.rope.freq_base", cfg.rope_theta, F32),
        (f"{arch}.attention.layer_norm_rms_epsilon", cfg.rms_norm_eps, F32),
        (f"{arch}.attention.key_length", cfg.head_dim, U32),
        (f"{arch}.attention.value_length", cfg.head_dim, U32),
    ]
    return entries
