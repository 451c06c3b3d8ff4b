"""Small checkpoints that expose GGUF conventions: one per target architecture, each with a RoPE scaling
kind and bias / tying choice, and q/k projections whose every row holds its own row index, so the
row order a GGUF file stores them in can be read off its first column.

scripts/record_gguf_conventions.py converts these with llama.cpp's converter and records what it wrote
(tests/data/gguf_conventions.json); tests/test_gguf_conventions.py checks `specserve export-gguf`
writes the same."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from specserve.models.config import config_from_dict
from specserve.models.transformer import CausalLM

from .models import tiny_config, write_tokenizer

PROBES = {
    "llama": dict(family="llama", attention_bias=True, tie_word_embeddings=False,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 64}),
    "qwen2": dict(family="qwen2", rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                "original_max_position_embeddings": 128}),
    "qwen3": dict(family="qwen3", tie_word_embeddings=False, rope_scaling={"rope_type": "linear", "factor": 2.0}),
}
ROW_PROBED = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.bias")


def write_probe(out: Path, name: str, seed: int = 0) -> Path:
    """The probe checkpoint `name` (a key of PROBES) in Hugging Face layout, with a byte-level BPE tokenizer."""
    spec = dict(PROBES[name])
    family = spec.pop("family")
    raw = tiny_config(family, vocab_size=320, **spec)
    model = CausalLM(config_from_dict(raw))
    model.init_weights(std=0.1, seed=seed)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    for key, value in state.items():
        if key.endswith(ROW_PROBED):
            rows = torch.arange(value.shape[0], dtype=torch.float32)
            state[key] = (rows if value.dim() == 1 else rows[:, None].expand_as(value)).contiguous()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(raw))
    write_tokenizer(out)
    return out
