"""`specserve train-draft --method M`: train a drafter for a target on target-regenerated data.

Each method is a trainer module under specserve/train/ listed in TRAINERS; a module provides
  HELP                      one line for --help
  add_arguments(group)      its own options (prefixed by the method name in their help)
  train(job) -> dict        job: train/drafter_common.DrafterJob; returns a summary (also written as JSON)
The data is a regen_data.py file (`python -m specserve.train.regen_data`), split here into
training samples and held-out samples whose prompts measure the trained drafter's acceptance.
"""
from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
from pathlib import Path

import torch

from ..errors import OptionError
from ..llm import BUNDLED_MODEL

TRAINERS = {
    "draft-simple": "specserve.train.train_draft_simple",
    "eagle3": "specserve.train.train_eagle3",
    "mtp": "specserve.train.train_mtp",
}


def _trainer(method: str):
    return importlib.import_module(TRAINERS[method])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", required=True, choices=sorted(TRAINERS), help="which drafter to train")
    parser.add_argument("--target", default=str(BUNDLED_MODEL), help="target model folder (default: bundled)")
    parser.add_argument("--data", required=True, help="regenerated data file (specserve.train.regen_data)")
    parser.add_argument("--out", required=True, help="output folder for the drafter")
    parser.add_argument("--steps", type=int, default=1500, help="optimiser steps (fixes the LR schedule)")
    parser.add_argument("--max-minutes", type=float, default=0.0,
                        help="wall-clock budget: the schedule also follows elapsed time and the run ends when it "
                             "is spent (0 = steps only)")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    parser.add_argument("--warmup", type=int, default=50, help="warmup steps")
    parser.add_argument("--batch-size", type=int, default=8, help="windows per step")
    parser.add_argument("--seq-len", type=int, default=512, help="tokens per window")
    parser.add_argument("--eval-samples", type=int, default=16, help="held-out samples for measuring acceptance")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0 = PyTorch's default)")
    for method, module in TRAINERS.items():
        _trainer(method).add_arguments(parser.add_argument_group(f"{method} options"))


def load_samples(path: Path):
    try:
        from ..train.regen_data import load_regen_dataset
    except ImportError as exc:                 # pragma: no cover - regen_data ships with the bundled model
        raise OptionError(f"cannot read {path}: specserve.train.regen_data is not available ({exc})") from None
    return load_regen_dataset(path)


def _command_line(args) -> str:
    """The command as typed (for the model card), or the essential options when called from Python."""
    if "train-draft" in sys.argv:
        rest = sys.argv[sys.argv.index("train-draft") + 1:]
        return "specserve train-draft " + " ".join(map(shlex.quote, rest))
    return (f"specserve train-draft --method {args.method} --target {args.target} --data {args.data} "
            f"--out {args.out} --steps {args.steps}")


def run(args) -> int:
    from ..train.draft_loop import LoopSettings
    from ..train.draft_windows import split_samples
    from ..train.drafter_common import DrafterJob

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    data = Path(args.data)
    if not data.is_file():
        raise OptionError(f"data file not found: {data} (make it with python -m specserve.train.regen_data)")
    torch.manual_seed(args.seed)
    samples = load_samples(data)
    train_samples, eval_samples = split_samples(samples, args.eval_samples, args.seed)
    options = {k: v for k, v in vars(args).items()}
    job = DrafterJob(target_dir=Path(args.target), out_dir=Path(args.out), train_samples=train_samples,
                     eval_samples=eval_samples,
                     loop=LoopSettings(steps=args.steps, lr=args.lr, warmup=args.warmup, max_minutes=args.max_minutes),
                     batch_size=args.batch_size, seq_len=args.seq_len, seed=args.seed,
                     command=_command_line(args),
                     data_path=str(data), options=options, log=lambda m: print(m, flush=True))
    summary = _trainer(args.method).train(job)
    (job.out_dir / "training_summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary["acceptance"]))
    return 0
