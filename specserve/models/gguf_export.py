"""Models and drafters -> GGUF files llama.cpp's llama-server loads (`specserve export-gguf`).

What is written mirrors llama.cpp's converter (`convert_hf_to_gguf.py`, `conversion/llama.py`,
`conversion/qwen.py`) so that files from either tool are interchangeable:

  model (llama / qwen2 / qwen3, also a draft-simple draft)  -> architecture llama / qwen2 / qwen3
  EAGLE-3 draft                                             -> architecture eagle3
  DFlash or DSpark draft                                    -> architecture dflash (+ Markov / confidence heads)

Drafters carry their target's tokenizer. The names and layouts are in gguf_names.py, the
hyperparameter keys in gguf_config.py, the tokenizer keys in gguf_tokenizer.py. What llama.cpp
cannot run is refused here with the reason instead of written as a file that would load wrongly.
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..errors import ModelLoadError
from .block_drafter import BlockDrafter, load_block_drafter
from .block_drafter_format import ANCHOR_FIRST
from .config import ModelConfig, read_json
from .eagle3_format import ARCHITECTURES as EAGLE3_LAYOUTS
from .eagle3_format import load_eagle3
from .eagle3_model import Eagle3Draft
from .gguf_config import ARRAY, BOOL, I32, U32, hparam_entries, rope_entries
from .gguf_names import (BLOCK_DRAFTER_ARCH, EAGLE3_ARCH, PERMUTED_ARCHS, ROPE_FREQS, permuted_heads, permute_rows,
                         tensor_names)
from .gguf_tokenizer import tokenizer_entries
from .gguf_writer import GgufOut
from .loader import Checkpoint
from .tokenizer import Tokenizer
from .transformer import CausalLM

log = logging.getLogger("specserve")


def _write_tensors(out: GgufOut, state: dict[str, torch.Tensor], cfg: ModelConfig, arch: str, n_layers: int) -> None:
    """Every tensor of `state` under its GGUF name, q/k rows in llama.cpp's order where `arch` wants it."""
    names = tensor_names(arch, n_layers)
    for name, tensor in state.items():
        if name not in names:
            raise ModelLoadError(f"tensor {name!r} has no place in a GGUF {arch} file")
        heads = permuted_heads(arch, name, cfg.num_attention_heads, cfg.num_key_value_heads)
        out.tensor(names[name], permute_rows(tensor, heads) if heads else tensor)


def _rope_freqs(out: GgufOut, cfg: ModelConfig, arch: str) -> None:
    freqs = rope_entries(cfg, arch)[1]
    if freqs is not None:
        out.tensor(ROPE_FREQS, freqs)


def export_model(src: Path, out_path: Path, outtype) -> Path:
    """A llama / qwen2 / qwen3 folder (a target, or a draft-simple draft) -> one GGUF file."""
    model = CausalLM.from_pretrained(src, dtype=torch.float32)
    cfg = model.config
    arch = cfg.family
    out = GgufOut(arch, outtype)
    out.add(hparam_entries(cfg, arch))
    if arch in PERMUTED_ARCHS:        # the converter's LlamaModel also writes these two
        out.add([(f"{arch}.vocab_size", cfg.vocab_size, U32), (f"{arch}.rope.dimension_count", cfg.head_dim, U32)])
    out.add(tokenizer_entries(src, cfg.vocab_size))
    _write_tensors(out, model.state_dict(), cfg, arch, cfg.num_hidden_layers)
    _rope_freqs(out, cfg, arch)
    return out.write(out_path, src)


def _target(target_dir: Path) -> tuple[CausalLM, Tokenizer]:
    target = CausalLM.from_pretrained(target_dir, dtype=torch.float32)
    return target, Tokenizer(target_dir)


def check_eagle3_servable(head: Eagle3Draft, taps: tuple[int, ...], where: str) -> None:
    """llama.cpp's eagle3 graph: one Llama-style layer, three target features, no EAGLE-3.1 extras."""
    opts, cfg = head.opts, head.config
    problems = []
    if len(head.layers) != 1:
        problems.append(f"{len(head.layers)} decoder layers (llama.cpp runs exactly one)")
    if cfg.qk_norm:
        problems.append("q/k norms (a Qwen3-style layer; llama.cpp's eagle3 layer is Llama-style)")
    if not opts.use_aux or len(taps) != 3:
        problems.append("not three target features (llama.cpp reads exactly three layers)")
    if opts.fc_norm:
        problems.append("per-feature fc norms (EAGLE-3.1 fc_norm)")
    if opts.norm_output:
        problems.append("norm_output (EAGLE-3.1 feeds back norm(h); llama.cpp feeds back h)")
    if opts.fc_bias:
        problems.append("a bias on fc")
    if problems:
        raise ModelLoadError(f"{where} cannot be written for llama.cpp: it has {'; '.join(problems)}")


def export_eagle3(src: Path, target_dir: Path, out_path: Path, outtype) -> Path:
    target, _ = _target(target_dir)
    head, taps = load_eagle3(src, target)
    where = f"EAGLE-3 draft {src}"
    check_eagle3_servable(head, taps, where)
    if target.config.num_hidden_layers - 1 in taps:
        log.warning("%s reads the target's last layer: llama.cpp takes that feature from the nextn hidden state, "
                    "which its llama / qwen2 / qwen3 graphs do not fill, so it drafts there with that feature empty "
                    "(output stays lossless, acceptance drops)", where)
    cfg, opts = head.config, head.opts
    out = GgufOut(EAGLE3_ARCH, outtype)
    out.add([(f"{EAGLE3_ARCH}.target_layers", [t + 1 for t in taps], ARRAY, I32),     # inputs of layers
             (f"{EAGLE3_ARCH}.target_hidden_size", opts.target_hidden_size, U32),
             (f"{EAGLE3_ARCH}.norm_before_residual", opts.norm_before_residual, BOOL),
             (f"{EAGLE3_ARCH}.norm_before_fc", opts.norm_before_fc, BOOL)])
    out.add(hparam_entries(cfg, EAGLE3_ARCH))
    out.add([(f"{EAGLE3_ARCH}.vocab_size", opts.vocab_size, U32),
             (f"{EAGLE3_ARCH}.rope.dimension_count", cfg.head_dim, U32)])
    out.add(tokenizer_entries(target_dir, target.config.vocab_size))
    state = dict(head.state_dict())
    d2t = state.pop("d2t")
    _write_tensors(out, state, cfg, EAGLE3_ARCH, 1)
    _rope_freqs(out, cfg, EAGLE3_ARCH)
    if opts.draft_vocab_size != opts.vocab_size or bool(d2t.any()):
        out.tensor("d2t", head.target_ids().to(torch.int64))          # absolute target ids
    return out.write(out_path, src)


def check_block_drafter_servable(drafter: BlockDrafter, n_target_layers: int, where: str) -> None:
    """llama.cpp's dflash graph: Qwen3-style layers (q/k norms, no biases), reading inputs of target layers."""
    cfg = drafter.config.backbone
    if not cfg.qk_norm or cfg.qkv_bias or cfg.o_bias or cfg.mlp_bias:
        raise ModelLoadError(f"{where} cannot be written for llama.cpp: its draft layers are {cfg.family}-style, "
                             "but llama.cpp's dflash architecture runs Qwen3-style layers (q/k norms, no biases)")
    if n_target_layers - 1 in drafter.config.target_layer_ids:
        # common/speculative.cpp extracts inputs of target layers only; the last layer's output is none
        raise ModelLoadError(f"{where} cannot be written for llama.cpp: it reads the target's last layer "
                             f"({n_target_layers - 1}), and llama.cpp's DFlash path can only read inputs of layers "
                             f"0..{n_target_layers - 1}")


def export_block_drafter(src: Path, target_dir: Path, out_path: Path, outtype) -> Path:
    target, tokenizer = _target(target_dir)
    drafter = load_block_drafter(src, target, tokenizer=tokenizer, dtype=torch.float32)
    config = drafter.config
    check_block_drafter_servable(drafter, target.config.num_hidden_layers, f"{config.method} draft {src}")
    out = GgufOut(BLOCK_DRAFTER_ARCH, outtype)
    out.add(hparam_entries(config.backbone, BLOCK_DRAFTER_ARCH))
    out.add([(f"{BLOCK_DRAFTER_ARCH}.block_size", config.block_size, U32),
             (f"{BLOCK_DRAFTER_ARCH}.target_layers", [i + 1 for i in config.target_layer_ids], ARRAY, I32),
             (f"{BLOCK_DRAFTER_ARCH}.sample_from_anchor", config.layout == ANCHOR_FIRST, BOOL),
             (f"{BLOCK_DRAFTER_ARCH}.has_confidence_head", config.has_confidence_head, BOOL)])
    out.add(tokenizer_entries(target_dir, target.config.vocab_size, {"mask": config.mask_token_id}))
    _write_tensors(out, drafter.state_dict(), config.backbone, BLOCK_DRAFTER_ARCH, config.backbone.num_hidden_layers)
    _rope_freqs(out, config.backbone, BLOCK_DRAFTER_ARCH)
    return out.write(out_path, src)


# ---------------------------------------------------------------------------------------------- any folder
MODEL, EAGLE3, BLOCK_DRAFTER, MTP = "model", "eagle3", "dflash/dspark", "mtp"


def source_kind(src: Path) -> str:
    """What a folder holds: a model (target or draft-simple), an EAGLE-3, a DFlash/DSpark or an MTP drafter."""
    if not src.is_dir():
        raise ModelLoadError(f"model folder not found: {src}" if not src.exists() else
                             f"{src} is not a folder (export-gguf reads Hugging Face folders)")
    raw = read_json(src / "config.json", "config.json")
    if not any(src.glob("*.safetensors")) and (src / "pytorch_model.bin").is_file():
        return EAGLE3                              # the original EAGLE layout is the only .bin specserve reads
    keys = Checkpoint(src).keys()
    stripped = {k[len("model."):] if k.startswith("model.") else k for k in keys}
    if any("eh_proj" in k or "mtp_layers." in k for k in keys) and "model.embed_tokens.weight" not in keys:
        return MTP
    if {"fc.weight", "hidden_norm.weight"} <= stripped:
        return BLOCK_DRAFTER
    arch = (raw.get("architectures") or [""])[0]
    if "d2t" in keys or "fc.weight" in stripped or any(k.startswith("midlayer.") for k in keys) \
            or arch in set(EAGLE3_LAYOUTS) - {"LlamaForCausalLM"}:
        return EAGLE3
    return MODEL


def export_gguf(src: str | Path, out_path: str | Path, outtype, target_dir: str | Path | None = None,
                ) -> tuple[str, Path]:
    """(kind, written path) for any folder specserve reads; drafters need their target's folder."""
    src, out_path = Path(src), Path(out_path)
    kind = source_kind(src)
    if kind == MTP:
        raise ModelLoadError(f"{src} is an MTP head (draft-mtp): llama.cpp cannot serve it, because its llama / "
                             "qwen2 / qwen3 models have no MTP head (it runs MTP only for architectures that ship "
                             "one, such as DeepSeek or GLM); there is no GGUF form to write")
    if kind == MODEL:
        return kind, export_model(src, out_path, outtype)
    if target_dir is None:
        raise ModelLoadError(f"{src} is a drafter ({kind}): give its target model folder with --target-model-dir "
                             "(the draft is checked against it and carries its tokenizer)")
    target_dir = Path(target_dir)
    if kind == EAGLE3:
        return kind, export_eagle3(src, target_dir, out_path, outtype)
    return kind, export_block_drafter(src, target_dir, out_path, outtype)
