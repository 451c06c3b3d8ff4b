"""`specserve train-draft --method M`: train a drafter for a target on target-regenerated data.

Two kinds of trainers:
  * block drafters (dflash, dspark): specserve/train/block_trainer.py, which runs its own loop,
    checkpoints (rerun to resume) and held-out evaluation;
  * chain drafters (draft-simple, eagle3, mtp): a module under specserve/train/ listed in
    TRAINERS, providing
      add_arguments(group)      its own options (prefixed by the method name in their help)
      train(job) -> dict        job: train/drafter_common.DrafterJob; returns a summary (also written as JSON)
The data is a regen_data.py file (`python -m specserve.train.regen_data`).
Under torchrun (`torchrun --nproc-per-node N -m specserve train-draft ...`) every method trains
data-parallel: train/data_parallel.py.
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
from ..models.block_drafter_backbone import DRAFT_ARCHS
from ..models.config import load_config
from ..train.data_parallel import DataParallel
from ..train.methods import BLOCK_METHODS, CHAIN_TRAINERS, METHODS, canonical_method

# defaults that differ by kind: (block drafters, chain drafters)
KIND_DEFAULTS = {"steps": (1000, 1500), "lr": (6e-4, 1e-3), "batch_size": (4, 8), "eval_samples": (32, 16),
                 "taps": (3, None)}


def _trainer(method: str):
    return importlib.import_module(CHAIN_TRAINERS[method])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", required=True, type=canonical_method, choices=METHODS,
                        help="which drafter to train, named by the --spec-type that serves it (the short names "
                             "dflash, dspark, eagle3 and mtp work too)")
    parser.add_argument("--target", default=str(BUNDLED_MODEL), help="target model folder (default: bundled)")
    parser.add_argument("--data", help="regenerated data file (specserve.train.regen_data); the block drafters build "
                                       "it from the target when it does not exist")
    parser.add_argument("--out", required=True, help="output folder for the drafter")
    parser.add_argument("--steps", type=int, help="optimiser steps (fixes the LR schedule; 1000 block, 1500 chain)")
    parser.add_argument("--lr", type=float, help="peak learning rate (6e-4 block, 1e-3 chain)")
    parser.add_argument("--batch-size", type=int, help="sequences per step (4 block, 8 chain); under torchrun the "
                                                       "global batch, split over the ranks")
    parser.add_argument("--seq-len", "--max-len", dest="seq_len", type=int, default=512,
                        help="tokens per sequence (longer ones are cut)")
    parser.add_argument("--eval-samples", type=int, help="held-out samples measuring acceptance (32 block, 16 chain)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-t", "--threads", type=int, default=0, help="CPU threads (0 = PyTorch's default)")

    block = parser.add_argument_group("draft-dflash / draft-dspark options")
    block.add_argument("--data-samples", type=int, default=0, help="samples to generate when building --data")
    block.add_argument("--anchors", type=int, default=64, help="random blocks per sequence")
    block.add_argument("--block-size", type=int, default=8, help="block size B (anchor-first: B drafts)")
    block.add_argument("--layers", type=int, default=2, help="draft layers")
    block.add_argument("--draft-arch", default="qwen3", choices=DRAFT_ARCHS,
                       help="the draft layers' family: qwen3 (q/k norm), llama (no q/k norm, no bias) or qwen2 "
                            "(q/k/v bias)")
    taps = block.add_mutually_exclusive_group()
    taps.add_argument("--taps", type=int, help="how many target layers are read, spread by build_target_layer_ids "
                                               "(default 3)")
    taps.add_argument("--tap-layers", default="",
                      help="the target layers read, e.g. 1,3,5 (outputs of those layers, in increasing order), "
                           "instead of --taps")
    block.add_argument("--markov-rank", type=int, default=64, help="DSpark Markov head rank")
    block.add_argument("--no-confidence-head", action="store_true", help="DSpark without the confidence head")
    block.add_argument("--no-init-from-target", action="store_true",
                       help="random initialisation instead of copies of the target's last layers")
    block.add_argument("--gamma", type=float, default=4.0, help="position weight decay exp(-k/gamma)")
    block.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints and evals")
    block.add_argument("--no-progress", action="store_true", help="no progress bar")

    chain = parser.add_argument_group("draft-simple / draft-eagle3 / draft-mtp options")
    chain.add_argument("--max-minutes", type=float, default=0.0,
                       help="wall-clock budget: the schedule also follows elapsed time and the run ends when it "
                            "is spent (0 = steps only)")
    chain.add_argument("--warmup", type=int, default=50, help="warmup steps")
    chain.add_argument("--tv-weight", type=float, default=0.0,
                       help="adds this weight x the total variation distance to the target's distribution to the "
                            "soft cross-entropy (1 - TV is the acceptance of a draft sampled at T=1)")
    chain.add_argument("--precision", choices=("bf16", "f32"), default="bf16",
                       help="the drafter's forward: bf16 autocast (default, faster) or f32 (slower; the same "
                            "weights at any torchrun world size, to float rounding)")
    readers = _readers([a for a in block._group_actions if a.dest != "no_progress"], BLOCK_METHODS)
    readers.update(_readers(chain._group_actions, tuple(CHAIN_TRAINERS)))
    for method in CHAIN_TRAINERS:
        first_new = len(chain._group_actions)
        _trainer(method).add_arguments(chain)
        readers.update(_readers(chain._group_actions[first_new:], (method,)))
    for method in CHAIN_TRAINERS:      # options a trainer reads from another's arguments (train_mtp: --ttt-depth)
        for dest in getattr(_trainer(method), "SHARED_OPTIONS", ()):
            flag, default, methods = readers[dest]
            readers[dest] = (flag, default, methods + (method,))
    parser.set_defaults(option_readers=readers)


def _readers(actions, methods: tuple[str, ...]) -> dict[str, tuple[str, object, tuple[str, ...]]]:
    """dest -> (flag, default, the methods that read it) for options only some methods read."""
    return {a.dest: (a.option_strings[0], a.default, methods) for a in actions}


def _command_line(args) -> str:
    """The command as typed (for the model card), or the essential options when called from Python."""
    if "train-draft" in sys.argv:
        rest = sys.argv[sys.argv.index("train-draft") + 1:]
        return "specserve train-draft " + " ".join(map(shlex.quote, rest))
    return (f"specserve train-draft --method {args.method} --target {args.target} --data {args.data} "
            f"--out {args.out} --steps {args.steps}")


def check_options(args, block: bool) -> None:
    """Values no trainer can use are errors here, not tracebacks later."""
    minimums = {"--steps": (args.steps, 1), "--batch-size": (args.batch_size, 1), "--seq-len": (args.seq_len, 8),
                "--eval-samples": (args.eval_samples, 0), "--threads": (args.threads, 0)}
    if block:
        minimums.update({"--block-size": (args.block_size, 1), "--layers": (args.layers, 1),
                         "--anchors": (args.anchors, 1), "--taps": (args.taps, 1),
                         "--markov-rank": (args.markov_rank, 0), "--checkpoint-every": (args.checkpoint_every, 1),
                         "--data-samples": (args.data_samples, 0)})
    for name, (value, minimum) in minimums.items():
        if value < minimum:
            raise OptionError(f"{name} must be at least {minimum}, got {value}")
    if not args.lr > 0:
        raise OptionError(f"--lr must be positive, got {args.lr}")
    # an option of other methods is an error, not silently ignored (--no-progress is harmless everywhere)
    for dest, (flag, default, methods) in getattr(args, "option_readers", {}).items():
        if args.method not in methods and getattr(args, dest, default) != default:
            raise OptionError(f"{flag} is an option of {', '.join(methods)}, not of {args.method}")
    if args.method == "draft-simple" and args.draft_layers < 1:
        raise OptionError(f"--draft-layers must be at least 1, got {args.draft_layers}")
    if block:
        n_layers = load_config(args.target).num_hidden_layers
        if args.taps > n_layers:
            raise OptionError(f"--taps {args.taps}: the target {args.target} has {n_layers} layers")
        args.tap_layers = tap_layers(args.tap_layers, n_layers)     # parsed once, read by run_block_drafter


def tap_layers(spec: str, n_layers: int) -> tuple[int, ...]:
    """--tap-layers as a tuple of layer indices (empty when not given)."""
    if not spec:
        return ()
    try:
        layers = tuple(int(x) for x in spec.split(","))
    except ValueError:
        raise OptionError(f"--tap-layers {spec!r}: expected comma-separated layer indices, e.g. 1,3,5") from None
    if any(not 0 <= x < n_layers for x in layers) or any(b <= a for a, b in zip(layers, layers[1:])):
        raise OptionError(f"--tap-layers {spec!r}: need increasing layer indices in 0..{n_layers - 1}")
    return layers


def run(args) -> int:
    kind = 0 if args.method in BLOCK_METHODS else 1
    for name, defaults in KIND_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, defaults[kind])
    check_options(args, block=kind == 0)
    with DataParallel.from_environment() as dp:
        dp.check_batch(args.batch_size)
        return run_block_drafter(args, dp) if kind == 0 else run_chain_drafter(args, dp)


def run_block_drafter(args, dp: DataParallel) -> int:
    from ..train.block_trainer import BlockTrainConfig, BlockTrainer
    cfg = BlockTrainConfig(
        method=args.method, target_dir=args.target, out_dir=args.out, data_path=args.data,
        data_samples=args.data_samples, steps=args.steps, batch_size=args.batch_size, max_len=args.seq_len,
        anchors=args.anchors, block_size=args.block_size, num_layers=args.layers, num_taps=args.taps,
        tap_layers=args.tap_layers,
        markov_rank=args.markov_rank, confidence_head=not args.no_confidence_head, draft_arch=args.draft_arch,
        init_from_target=not args.no_init_from_target, lr=args.lr, gamma=args.gamma, seed=args.seed,
        checkpoint_every=args.checkpoint_every, eval_samples=args.eval_samples, threads=args.threads,
        command=_command_line(args))
    final = BlockTrainer(cfg, progress=not args.no_progress, dp=dp).train()
    if dp.is_main:
        print(f"wrote {args.out}: held-out tau_prob {final.get('tau_prob', 1):.3f}, "
              f"tau_greedy {final.get('tau_greedy', 1):.3f}")
    return 0


def run_chain_drafter(args, dp: DataParallel) -> int:
    from ..train.draft_loop import LoopSettings
    from ..train.draft_windows import split_samples
    from ..train.drafter_common import DrafterJob
    from ..train.regen_data import load_regen_dataset

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if not args.data:
        raise OptionError("give the training data: --data FILE (make it with python -m specserve.train.regen_data)")
    data = Path(args.data)
    torch.manual_seed(args.seed)
    samples = load_regen_dataset(data)
    if args.eval_samples >= len(samples):
        raise OptionError(f"--eval-samples {args.eval_samples} leaves nothing to train on: {data} holds "
                          f"{len(samples)} samples")
    train_samples, eval_samples = split_samples(samples, args.eval_samples, args.seed)
    job = DrafterJob(target_dir=Path(args.target), out_dir=Path(args.out), train_samples=train_samples,
                     eval_samples=eval_samples,
                     loop=LoopSettings(steps=args.steps, lr=args.lr, warmup=args.warmup, max_minutes=args.max_minutes),
                     batch_size=args.batch_size, seq_len=args.seq_len, seed=args.seed,
                     command=_command_line(args),
                     data_path=str(data), options=dict(vars(args)), log=lambda m: print(m, flush=True), dp=dp,
                     precision=args.precision)
    summary = _trainer(args.method).train(job)
    if not dp.is_main:
        return 0
    (job.out_dir / "training_summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary["acceptance"]))
    return 0
