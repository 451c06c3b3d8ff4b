"""Run under torchrun by tests/test_data_parallel.py: train a draft-simple drafter for a few steps
through the same functions `specserve train-draft` uses, and save its float32 weights from rank 0
(the command itself saves bfloat16, too coarse to compare trajectories). float32 precision: bf16
products change with the batch's shape, and Adam's first steps amplify any difference to the
size of the learning rate.

    torchrun --nproc-per-node N tests/support/chain_data_parallel.py TARGET DATA OUT STEPS
"""
import sys
from pathlib import Path

import torch

from specserve.train.data_parallel import DataParallel
from specserve.train.draft_loop import LoopSettings, optimize
from specserve.train.draft_windows import split_samples
from specserve.train.drafter_common import DrafterJob, load_frozen_target
from specserve.train.regen_data import load_regen_dataset
from specserve.train.train_draft_simple import build_draft, distillation_step


def main(target_dir: str, data: str, out: str, steps: str) -> None:
    dp = DataParallel.from_environment()
    torch.manual_seed(0)
    train_samples, eval_samples = split_samples(load_regen_dataset(data), 2, 0)
    job = DrafterJob(target_dir=Path(target_dir), out_dir=Path(out), train_samples=train_samples,
                     eval_samples=eval_samples, loop=LoopSettings(steps=int(steps), lr=1e-3, warmup=1),
                     batch_size=4, seq_len=48, dp=dp, precision="f32")
    target = load_frozen_target(job.target_dir)
    draft, _ = build_draft(target, 1, "first,last")
    draft.train()
    optimize(draft, distillation_step(job, target, draft), job.loop, lambda _: None, dp)
    if dp.is_main:
        torch.save({k: v.detach().clone() for k, v in draft.state_dict().items()}, out)
    dp.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
