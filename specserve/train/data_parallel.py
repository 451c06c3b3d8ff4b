"""Data-parallel training across processes with torch.distributed (one rank per process).

`torchrun --nproc-per-node N -m specserve train-draft ...` starts N ranks; each one builds the same
global batch (the data order and random anchors are functions of the seed and step), keeps its own
contiguous share of the rows, and DistributedDataParallel averages the gradients. Losses that are
means over rows are normalised by the *global* row count (or weight), so the averaged gradient is
the gradient of the global batch's loss: N ranks take the same optimizer steps as one process, to
float rounding. Only rank 0 writes files. Without torchrun's environment (WORLD_SIZE unset or 1)
everything here is a no-op and nothing is initialised.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from ..errors import OptionError


@dataclass(frozen=True)
class DataParallel:
    rank: int = 0
    world: int = 1

    @classmethod
    def from_environment(cls) -> "DataParallel":
        """The rank and world size torchrun exported; joins the process group when there are several
        ranks (gloo on CPU, nccl when this rank has a GPU)."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        if not dist.is_initialized():
            backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group(backend)
        return cls(dist.get_rank(), dist.get_world_size())

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def check_batch(self, batch_size: int) -> None:
        if batch_size < self.world:
            raise OptionError(f"--batch-size {batch_size} is the global batch and must be at least the number "
                              f"of ranks ({self.world}): every rank needs a row")

    def share(self, n_rows: int) -> slice:
        """This rank's contiguous rows of a global batch of n_rows (the first ranks take one more
        when n_rows does not divide)."""
        base, extra = divmod(n_rows, self.world)
        start = self.rank * base + min(self.rank, extra)
        return slice(start, start + base + (1 if self.rank < extra else 0))

    def denominator(self, local_total: torch.Tensor | float) -> torch.Tensor:
        """Divide this rank's sum by this to get its share of the global mean: the global total /
        world, because DDP averages the ranks' gradients (world 1: the local total itself)."""
        total = torch.as_tensor(local_total, dtype=torch.float32).detach().clone()
        if self.distributed:
            dist.all_reduce(total)
            total = total / self.world
        return total.clamp_min(1e-8)

    def latest(self, seconds: float) -> float:
        """The largest of the ranks' clocks: decisions taken on elapsed time must agree on every rank."""
        if not self.distributed:
            return seconds
        value = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return float(value)

    def average(self, metrics: dict[str, float]) -> dict[str, float]:
        """Metric values averaged over ranks (exact for losses normalised by `denominator`; the mean
        of the ranks' values for per-row rates). Every rank must pass the same keys."""
        if not self.distributed or not metrics:
            return metrics
        keys = sorted(metrics)
        values = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
        dist.all_reduce(values)
        return {k: float(v) / self.world for k, v in zip(keys, values)}

    def wrap(self, module: torch.nn.Module, loss_fn: Callable) -> Callable:
        """loss_fn(*args) computed through DistributedDataParallel when there are several ranks, so that
        backward() averages the gradients of `module`'s parameters across ranks."""
        if not self.distributed:
            return loss_fn
        return torch.nn.parallel.DistributedDataParallel(_LossModule(module, loss_fn))

    def gather(self, items: list) -> list:
        """Every rank's list, concatenated in rank order, on every rank."""
        if not self.distributed:
            return list(items)
        parts: list = [None] * self.world
        dist.all_gather_object(parts, items)
        return [item for part in parts for item in part]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def close(self, wait: bool = True) -> None:
        """Leave the process group. With `wait`, every rank arrives before any tears it down: a rank that
        destroyed the group while rank 0 was still writing files aborted now and then inside gloo
        ("terminate called without an active exception"). After an error the others may never arrive."""
        if self.distributed and dist.is_initialized():
            if wait:
                dist.barrier()
            dist.destroy_process_group()

    def __enter__(self) -> "DataParallel":
        return self

    def __exit__(self, error_type, *_) -> None:
        self.close(wait=error_type is None)


class _LossModule(torch.nn.Module):
    """DDP hooks the parameters of the module it wraps and syncs gradients for graphs built inside
    its forward(); the trainers' losses call the drafter's methods directly, so forward() is the
    loss function itself with the drafter registered as a submodule."""

    def __init__(self, module: torch.nn.Module, loss_fn: Callable):
        super().__init__()
        self.module = module
        self.loss_fn = loss_fn

    def forward(self, *args):
        return self.loss_fn(*args)
