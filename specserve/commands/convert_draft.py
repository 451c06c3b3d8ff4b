"""`specserve convert-draft SRC --target-model-dir T --out DIR`: a DFlash / DSpark checkpoint in
any supported format (z-lab, DeepSpec, SpecForge) -> a self-contained folder that states every
setting explicitly (backbone model_type and attention_bias, layout, block size, taps, mask token,
heads), holds only the draft's own tensors (the target's embedding and lm_head copies are
dropped) and the target's tokenizer files.
The draft is checked against the target first, so the written folder is known to fit it."""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ..errors import OptionError
from ..models.block_drafter import load_block_drafter, save_block_drafter
from ..models.loader import parse_dtype
from ..models.tokenizer import Tokenizer
from ..models.transformer import CausalLM


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", help="draft checkpoint folder (config.json + safetensors)")
    parser.add_argument("--target-model-dir", required=True, help="the target model folder the draft serves")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--layout", default="auto", choices=["auto", "bonus-anchor", "anchor-first"],
                        help="block layout to record (auto: detected from the checkpoint)")
    parser.add_argument("--dtype", default="bfloat16", help="dtype of the written weights "
                                                            "(the small confidence head stays float32)")


def run(args) -> int:
    out = Path(args.out)
    if out.resolve() == Path(args.src).resolve():
        raise OptionError("--out must differ from the source folder")
    target_dir = Path(args.target_model_dir)
    target = CausalLM.from_pretrained(target_dir, dtype="float32")
    tokenizer = Tokenizer(target_dir) if (target_dir / "tokenizer.json").is_file() else None
    drafter = load_block_drafter(args.src, target, args.layout, tokenizer, dtype=torch.float32)
    if drafter.config.num_target_layers is None:      # older z-lab configs omit it; record the target's
        drafter.config.num_target_layers = target.config.num_hidden_layers
    save_block_drafter(drafter, out, parse_dtype(args.dtype), tokenizer_from=target_dir,
                       extra_config={"converted_from": drafter.config.format})
    config = drafter.config
    print(f"wrote {out}: {config.method} draft ({config.format} format), {config.backbone.family} backbone (from the "
          f"{config.backbone_from}), {config.layout} layout, block {config.block_size} ({config.max_drafts} drafts), "
          f"taps {config.target_layer_ids}, mask token {config.mask_token_id}")
    return 0
