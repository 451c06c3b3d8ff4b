"""EAGLE-3 and DFlash / DSpark drafters from GGUF files, as the config dict and tensors the
folder loaders (eagle3_format.py, block_drafter_format.py) already understand.

llama.cpp's conventions (`convert_hf_to_gguf.py`, `src/models/eagle3.cpp`, `src/models/dflash.cpp`,
`common/speculative.cpp`):
  * `eagle3.target_layers` and `dflash.target_layers` are inputs of target layers (Hugging Face
    `hidden_states` indices): specserve's tap = id - 1;
  * EAGLE-3's `d2t` holds absolute target ids (the checkpoints' offsets + the draft id);
  * DFlash and DSpark share the `dflash` architecture; a Markov head (`markov_w1/2`) makes a DSpark
    draft, `dflash.sample_from_anchor` picks the block layout (absent: the z-lab bonus-anchor layout,
    or anchor-first when there is a Markov head), and the mask token is `tokenizer.ggml.mask_token_id`.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..errors import ModelLoadError
from .gguf_checkpoint import GgufCheckpoint
from .gguf_config import layer_params
from .gguf_file import GgufFile
from .gguf_names import BLOCK_DRAFTER_ARCH, EAGLE3_ARCH

# metadata that changes the DFlash network in ways specserve's BlockDrafter does not implement, with the
# values that leave it unchanged
_DFLASH_NEUTRAL = {"attention.causal": (False,), "embedding_scale": (1.0,), "logit_scale": (1.0,),
                   "final_logit_softcapping": (0.0,), "attention.sliding_window": (0,), "attention.value_scale": (1.0,),
                   "rope.dimension_sections": (), "hyper_connection.count": (0,), "conv_kernel_size": (0,)}


def _open(path: str | Path, arch: str, what: str) -> GgufFile:
    f = GgufFile(path)
    if f.architecture != arch:
        raise ModelLoadError(f"{f.path} is not {what} GGUF: its architecture is {f.architecture!r}, expected {arch!r}")
    return f


def _vocab_size(f: GgufFile, arch: str, fallback_tensor: str | None = None) -> int:
    value = f.value(f"{arch}.vocab_size", None)
    if value is None and "tokenizer.ggml.tokens" in f:
        value = len(f.value("tokenizer.ggml.tokens"))
    if value is None and fallback_tensor in f.tensors:
        value = f.shape(fallback_tensor)[0]
    if value is None:
        raise ModelLoadError(f"{f.path}: cannot tell the vocabulary size (no {arch}.vocab_size, no tokenizer)")
    return int(value)


def eagle3_from_gguf(path: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config dict in the SpecForge layout with top-level input-of-layer ids, tensors under Eagle3Draft's names)."""
    f = _open(path, EAGLE3_ARCH, "an EAGLE-3")
    params = layer_params(f, EAGLE3_ARCH)
    ids = f.value(f"{EAGLE3_ARCH}.target_layers", None)
    if not ids:
        raise ModelLoadError(f"{f.path}: metadata key {EAGLE3_ARCH}.target_layers is missing")
    draft_vocab = f.shape("d2t")[0] if "d2t" in f.tensors else None
    ckpt = GgufCheckpoint(f, EAGLE3_ARCH, params["num_hidden_layers"], params["num_attention_heads"],
                          params["num_key_value_heads"],
                          convert={"d2t": lambda t: t.to(torch.int64) - torch.arange(t.numel(), dtype=torch.int64)})
    norm_before_fc = bool(f.value(f"{EAGLE3_ARCH}.norm_before_fc", False))
    if norm_before_fc != ("input_norm.weight" in ckpt):
        raise ModelLoadError(f"{f.path}: {EAGLE3_ARCH}.norm_before_fc is {str(norm_before_fc).lower()} but tensor "
                             f"enc.output_norm.weight is {'missing' if norm_before_fc else 'present'}")
    vocab = _vocab_size(f, EAGLE3_ARCH, "token_embd.weight")
    raw = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", **params,
        "vocab_size": vocab,
        "draft_vocab_size": draft_vocab or (ckpt.shape("lm_head.weight")[0] if "lm_head.weight" in ckpt else vocab),
        "target_hidden_size": int(f.value(f"{EAGLE3_ARCH}.target_hidden_size", params["hidden_size"])),
        "norm_before_residual": bool(f.value(f"{EAGLE3_ARCH}.norm_before_residual", False)),
        "eagle_aux_hidden_state_layer_ids": [int(i) for i in ids],
        "use_aux_hidden_state": True, "tie_word_embeddings": False,
    }
    return raw, {name: ckpt.get(name) for name in ckpt.keys()}


def block_drafter_from_gguf(path: str | Path) -> tuple[dict, GgufCheckpoint]:
    """(config dict with every DFlash / DSpark key read_block_drafter looks for, checkpoint under module names)."""
    f = _open(path, BLOCK_DRAFTER_ARCH, "a DFlash / DSpark")
    arch = BLOCK_DRAFTER_ARCH
    for key, neutral in _DFLASH_NEUTRAL.items():
        value = f.value(f"{arch}.{key}", None)
        if value is not None and value not in neutral:
            raise ModelLoadError(f"{f.path}: {arch}.{key} = {value!r} changes the DFlash network in a way specserve "
                                 "does not implement")
    act = f.value(f"{arch}.hidden_act", "silu")
    if act != "silu":
        raise ModelLoadError(f"{f.path}: {arch}.hidden_act {act!r} is not supported (silu)")
    if "d2t" in f.tensors:
        raise ModelLoadError(f"{f.path}: reduced draft vocabularies (tensor d2t) are not supported for DFlash / DSpark")
    params = layer_params(f, arch)
    ids = f.value(f"{arch}.target_layers", None)
    if not ids:
        raise ModelLoadError(f"{f.path}: metadata key {arch}.target_layers is missing")
    ckpt = GgufCheckpoint(f, arch, params["num_hidden_layers"], params["num_attention_heads"],
                          params["num_key_value_heads"])
    mask = f.value("tokenizer.ggml.mask_token_id", None)
    raw = {
        "architectures": ["DFlashGGUF"], "model_type": "qwen3", **params,
        "vocab_size": _vocab_size(f, arch, "token_embd.weight"),
        "block_size": int(f.value(f"{arch}.block_size", 16)),
        "target_layer_ids": [int(i) - 1 for i in ids],
        "mask_token_id": None if mask is None else int(mask),
        "tie_word_embeddings": False, "attention_bias": False,
    }
    anchor = f.value(f"{arch}.sample_from_anchor", None)
    if anchor is not None:
        raw["sample_from_anchor"] = bool(anchor)
    return raw, ckpt
