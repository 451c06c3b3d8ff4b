"""`specserve export-gguf [SRC] [-o FILE] [--outtype TYPE]`: a model or drafter folder -> a GGUF file
llama.cpp's llama-server loads (-m for models, -md for drafters); `--bundled DIR` writes the bundled
model and every shipped drafter llama.cpp can serve. What is written: models/gguf_export.py."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..bundled import STDLIB_CODER, shipped_drafters
from ..errors import OptionError
from ..models.gguf_export import MTP, export_gguf, source_kind
from ..models.gguf_writer import OUTTYPES, parse_outtype

AUTO = "auto"
# the torch_dtype a checkpoint declares -> the output type `auto` picks
_AUTO_TYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", nargs="?", default=None,
                        help="model or drafter folder (Hugging Face layout; default: the bundled model)")
    parser.add_argument("-o", "--outfile", default=None,
                        help="output file (default: <folder name>-<outtype>.gguf in the current folder)")
    parser.add_argument("--outtype", default=AUTO, choices=[AUTO, *OUTTYPES],
                        help="tensor type of the weight matrices (norms and biases stay f32); auto: the checkpoint's "
                             "torch_dtype (f32, bf16 or f16)")
    parser.add_argument("--target-model-dir", default=None,
                        help="for EAGLE-3, DFlash and DSpark drafters: the target model folder they serve (checked "
                             "against it; its tokenizer goes into the file). Default: the bundled model")
    parser.add_argument("--bundled", default=None, metavar="DIR",
                        help="write the bundled model and every shipped drafter llama.cpp can serve into DIR "
                             "(stdlib-coder-<outtype>.gguf, stdlib-coder-{draft,eagle3,dflash,dspark}-<outtype>.gguf)")


def _outtype(name: str, src: Path) -> str:
    if name != AUTO:
        return name
    config = src / "config.json"
    declared = json.loads(config.read_text(encoding="utf-8")).get("torch_dtype") if config.is_file() else None
    return _AUTO_TYPES.get(str(declared).replace("torch.", ""), "f32")


def _export_one(src: Path, outfile: Path | None, outtype: str, target_dir: Path) -> None:
    outtype = _outtype(outtype, src)
    outfile = outfile or Path(f"{src.name}-{outtype}.gguf")
    kind, path = export_gguf(src, outfile, parse_outtype(outtype), target_dir)
    print(f"wrote {path}: {kind} from {src} ({outtype}, {path.stat().st_size / 1e6:.1f} MB)")


def _export_bundled(out_dir: Path, outtype: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    folders = [STDLIB_CODER] + [folder for folder, _ in shipped_drafters().values()]
    for src in folders:
        if source_kind(src) == MTP:
            print(f"skipped {src.name}: an MTP head, which llama.cpp cannot serve (its qwen3 model has no MTP head)")
            continue
        chosen = _outtype(outtype, src)
        _export_one(src, out_dir / f"{src.name}-{chosen}.gguf", chosen, STDLIB_CODER)


def run(args) -> int:
    target_dir = Path(args.target_model_dir) if args.target_model_dir else STDLIB_CODER
    if args.bundled:
        if args.src or args.outfile:
            raise OptionError("--bundled writes every bundled file; give no SRC or --outfile with it")
        _export_bundled(Path(args.bundled), args.outtype)
        return 0
    _export_one(Path(args.src) if args.src else STDLIB_CODER, Path(args.outfile) if args.outfile else None,
                args.outtype, target_dir)
    return 0
