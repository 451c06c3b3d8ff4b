"""The tensors of a GGUF file under specserve's (Hugging Face) names, with the interface of
loader.Checkpoint, so model and drafter code loads a .gguf as it loads a safetensors folder."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from ..errors import ModelLoadError
from .config import ModelConfig, config_from_dict
from .gguf_config import target_config
from .gguf_file import GgufFile
from .gguf_names import (BLOCK_DRAFTER_ARCH, EAGLE3_ARCH, ROPE_FREQS, TARGET_ARCHS, permuted_heads, tensor_names,
                         unpermute_rows)

# drafter architectures -> (what they hold, the spec types that read them)
DRAFTERS = {EAGLE3_ARCH: ("an EAGLE-3", "draft-eagle3"),
            BLOCK_DRAFTER_ARCH: ("a DFlash / DSpark", "draft-dflash or draft-dspark")}


class GgufCheckpoint:
    """Lazy, renamed view of a GgufFile: `get("model.layers.0.self_attn.q_proj.weight")` reads
    `blk.0.attn_q.weight`, undoes llama.cpp's q/k row order where the architecture has it, and
    applies any per-tensor conversion the caller registers (EAGLE-3's absolute `d2t`, for one)."""

    def __init__(self, f: GgufFile, arch: str, n_layers: int, n_heads: int, n_kv_heads: int,
                 convert: dict[str, Callable[[torch.Tensor], torch.Tensor]] | None = None):
        self.file = f
        self.model_dir = f.path
        self.arch = arch
        ours_of = {theirs: ours for ours, theirs in tensor_names(arch, n_layers).items()}
        unknown = sorted(n for n in f.tensors if n not in ours_of and n != ROPE_FREQS)
        if unknown:
            raise ModelLoadError(f"{f.path}: tensor(s) {', '.join(unknown[:5])} are not part of a {arch} model "
                                 f"specserve can run (a different variant, or more layers than block_count says)")
        self.weight_map = {ours_of[n]: n for n in f.tensors if n in ours_of}
        self._heads = {name: permuted_heads(arch, name, n_heads, n_kv_heads) for name in self.weight_map}
        self._convert = convert or {}

    def __contains__(self, name: str) -> bool:
        return name in self.weight_map

    def keys(self) -> list[str]:
        return list(self.weight_map)

    def gguf_name(self, name: str) -> str:
        theirs = self.weight_map.get(name)
        if theirs is None:
            raise ModelLoadError(f"tensor {name!r} missing from GGUF file {self.model_dir}")
        return theirs

    def shape(self, name: str) -> tuple[int, ...]:
        return self.file.shape(self.gguf_name(name))

    def get(self, name: str, dtype: torch.dtype | None = None, shape: tuple | None = None) -> torch.Tensor:
        theirs = self.gguf_name(name)
        tensor = self.file.tensor(theirs)
        if shape is not None and tuple(tensor.shape) != tuple(shape):
            raise ModelLoadError(f"tensor {theirs!r} ({name}) in {self.model_dir} has shape {tuple(tensor.shape)}, "
                                 f"expected {tuple(shape)}")
        heads = self._heads.get(name)
        if heads:
            tensor = unpermute_rows(tensor, heads)
        if name in self._convert:
            tensor = self._convert[name](tensor)
        if dtype is not None:
            tensor = tensor.to(dtype)
        return tensor

    def optional(self, name: str, dtype: torch.dtype | None = None, shape: tuple | None = None):
        return self.get(name, dtype, shape) if name in self else None


def open_gguf_model(path: str | Path) -> tuple[ModelConfig, GgufCheckpoint]:
    """(config, checkpoint) of a llama / qwen2 / qwen3 GGUF file used as a model (target or draft-simple)."""
    f = GgufFile(path)
    arch = f.architecture
    if arch in DRAFTERS:
        what, spec_types = DRAFTERS[arch]
        raise ModelLoadError(f"{f.path} holds {what} drafter, not a model: load it with -md and --spec-type "
                             f"{spec_types}")
    if arch not in TARGET_ARCHS:
        raise ModelLoadError(f"{f.path}: GGUF architecture {arch!r} is not supported; supported: "
                             f"{', '.join(TARGET_ARCHS)}")
    cfg = config_from_dict(target_config(f, arch), str(f.path))
    checkpoint = GgufCheckpoint(f, arch, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads)
    return cfg, checkpoint
