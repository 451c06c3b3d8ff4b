"""`specserve train-draft`: train a drafter for a target model.

Each training method is one line in METHODS ("name": "module:function"); the function takes
the parsed arguments. DFlash and DSpark share the block-drafter trainer.
"""
from __future__ import annotations

import argparse
import importlib
import shlex

METHODS = {
    "dflash": "specserve.commands.train_draft:run_block_drafter",
    "dspark": "specserve.commands.train_draft:run_block_drafter",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", required=True, choices=sorted(METHODS), help="which drafter to train")
    parser.add_argument("--target", required=True, help="target model folder")
    parser.add_argument("--out", required=True, help="output folder (also holds checkpoints; rerun to resume)")
    parser.add_argument("--data", help="target-regenerated data file (specserve.train.regen_data); built from "
                                       "the target when it does not exist")
    parser.add_argument("--data-samples", type=int, default=0, help="samples to generate when building --data")
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=4, help="sequences per step")
    parser.add_argument("--max-len", type=int, default=512, help="tokens per sequence (longer ones are cut)")
    parser.add_argument("--anchors", type=int, default=64, help="random blocks per sequence")
    parser.add_argument("--block-size", type=int, default=8, help="block size B (anchor-first: B drafts)")
    parser.add_argument("--layers", type=int, default=2, help="draft layers")
    parser.add_argument("--taps", type=int, default=3, help="target layers read (build_target_layer_ids)")
    parser.add_argument("--markov-rank", type=int, default=64, help="DSpark Markov head rank")
    parser.add_argument("--no-confidence-head", action="store_true", help="DSpark without the confidence head")
    parser.add_argument("--no-init-from-target", action="store_true",
                        help="random initialisation instead of copies of the target's last layers")
    parser.add_argument("--lr", type=float, default=6e-4, help="peak learning rate (AdamW, cosine)")
    parser.add_argument("--gamma", type=float, default=4.0, help="position weight decay exp(-k/gamma)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints and evals")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0 = PyTorch's default)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def command_line(args) -> str:
    """The options of this run as a command line (recorded in the model card)."""
    parts = ["specserve", "train-draft"]
    for key, value in vars(args).items():
        if key in ("command",) or value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        parts += [flag] if value is True else [flag, shlex.quote(str(value))]
    return " ".join(parts)


def run_block_drafter(args) -> int:
    from ..train.block_trainer import BlockTrainConfig, BlockTrainer
    cfg = BlockTrainConfig(
        method=args.method, target_dir=args.target, out_dir=args.out, data_path=args.data,
        data_samples=args.data_samples, steps=args.steps, batch_size=args.batch_size, max_len=args.max_len,
        anchors=args.anchors, block_size=args.block_size, num_layers=args.layers, num_taps=args.taps,
        markov_rank=args.markov_rank, confidence_head=not args.no_confidence_head,
        init_from_target=not args.no_init_from_target, lr=args.lr, gamma=args.gamma,
        seed=args.seed, checkpoint_every=args.checkpoint_every, threads=args.threads,
        command=command_line(args))
    final = BlockTrainer(cfg, progress=not args.no_progress).train()
    print(f"wrote {args.out}: held-out tau_prob {final.get('tau_prob', 1):.3f}, "
          f"tau_greedy {final.get('tau_greedy', 1):.3f}")
    return 0


def run(args) -> int:
    module, func = METHODS[args.method].split(":")
    return getattr(importlib.import_module(module), func)(args)
