"""A random-weight Qwen3 checkpoint at a realistic size, for speed comparisons that must not fit in cache.

The default shape is about 306M parameters (hidden 1024, 24 layers, 16 query / 8 key-value heads of 64,
intermediate 3072, the bundled 4096-token vocabulary, tied embeddings), stored in bfloat16 next to the
bundled tokenizer, so both specserve and llama.cpp's converter read it as a normal Qwen3 folder.

    .venv/bin/python benchmarks/random_qwen3.py runs/qwen3-306m
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from specserve.llm import BUNDLED_MODEL
from specserve.models.config import config_from_dict
from specserve.models.transformer import CausalLM

SHAPE_306M = {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 24, "num_attention_heads": 16,
              "num_key_value_heads": 8, "head_dim": 64}


def write_random_qwen3(out: Path, seed: int = 0, **shape) -> Path:
    """Write (once) a random Qwen3 folder with the bundled tokenizer; returns the folder."""
    out = Path(out)
    if (out / "model.safetensors").is_file():
        return out
    raw = json.loads((BUNDLED_MODEL / "config.json").read_text())
    raw.update(SHAPE_306M)
    raw.update(shape)
    raw["layer_types"] = ["full_attention"] * raw["num_hidden_layers"]
    raw["max_window_layers"] = raw["num_hidden_layers"]
    out.mkdir(parents=True, exist_ok=True)
    model = CausalLM(config_from_dict(raw))
    model.init_weights(std=0.02, seed=seed)
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors.tmp"), metadata={"format": "pt"})
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(BUNDLED_MODEL / name, out / name)
    (out / "config.json").write_text(json.dumps(raw, indent=2))
    (out / "model.safetensors.tmp").rename(out / "model.safetensors")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = write_random_qwen3(args.out, args.seed)
    n_params = sum(p.numel() for p in CausalLM.from_pretrained(path).parameters())
    print(f"{path}: {n_params / 1e6:.0f}M parameters")
