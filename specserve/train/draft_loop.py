"""The optimisation loop the drafter trainers share: AdamW, linear warmup then cosine decay,
gradient clipping and one progress line every few steps. Under torchrun the loss goes through
DistributedDataParallel (data_parallel.py) and only rank 0 logs.

The schedule runs over `steps`; with a wall-clock cap (`max_minutes`) its progress is the
larger of the step fraction and the time fraction, so a run on a busy machine still decays
its learning rate fully and ends on time (on an idle machine the step count decides, and a
command gives the same schedule everywhere)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import torch

from .data_parallel import DataParallel

@dataclass
class LoopSettings:
    steps: int = 1000
    lr: float = 1e-3
    warmup: int = 50
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    max_minutes: float = 0.0        # 0 = no wall-clock cap
    log_every: int = 25


def progress(settings: LoopSettings, step: int, elapsed_s: float) -> float:
    """Fraction of the run done: by steps, or by wall-clock time when that is further along."""
    frac = step / max(settings.steps, 1)
    if settings.max_minutes:
        frac = max(frac, elapsed_s / (settings.max_minutes * 60))
    return min(frac, 1.0)


def lr_at(settings: LoopSettings, step: int, elapsed_s: float = 0.0) -> float:
    if step < settings.warmup:
        return settings.lr * (step + 1) / settings.warmup
    warm = settings.warmup / max(settings.steps, 1)
    frac = (progress(settings, step, elapsed_s) - warm) / max(1 - warm, 1e-9)
    return settings.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(max(frac, 0.0), 1.0))))


def optimize(model: torch.nn.Module, step_fn: Callable[[int], dict], settings: LoopSettings,
             log: Callable[[str], None] = print, dp: DataParallel = DataParallel()) -> dict:
    """Train model's parameters; step_fn(step) -> {"loss": tensor to minimise, other names: floats
    to report}, computed on this rank's rows with losses normalised by dp.denominator."""
    params = [p for p in model.parameters() if p.requires_grad]
    loss_fn = dp.wrap(model, step_fn)
    if not dp.is_main:
        log = _quiet
    optimizer = torch.optim.AdamW(params, lr=settings.lr, betas=(0.9, 0.95), weight_decay=settings.weight_decay)
    t0 = time.perf_counter()
    sums: dict[str, float] = {}
    count = 0
    last: dict = {}
    step = 0
    def elapsed_s() -> float:      # the same on every rank: the schedule and the stop must agree
        return dp.latest(time.perf_counter() - t0) if settings.max_minutes else time.perf_counter() - t0

    for step in range(settings.steps):
        lr = lr_at(settings, step, elapsed_s())
        for group in optimizer.param_groups:
            group["lr"] = lr
        out = loss_fn(step)
        loss = out.pop("loss")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, settings.grad_clip)
        optimizer.step()
        out["loss"] = float(loss.detach())
        for k, v in dp.average(out).items():
            sums[k] = sums.get(k, 0.0) + float(v)
        count += 1
        elapsed = elapsed_s()
        if (step + 1) % settings.log_every == 0 or step + 1 == settings.steps:
            last = {k: v / count for k, v in sums.items()}
            metrics = " ".join(f"{k} {v:.4f}" for k, v in last.items())
            log(f"step {step + 1:5d}/{settings.steps} lr {lr:.2e} {metrics} "
                f"elapsed {elapsed / 60:.1f} min")
            sums, count = {}, 0
        if settings.max_minutes and elapsed >= settings.max_minutes * 60:
            log(f"stopping at step {step + 1}: the {settings.max_minutes:g}-minute budget is spent")
            break
    return {"steps": step + 1, "minutes": (time.perf_counter() - t0) / 60, "final_metrics": last}


def _quiet(_message: str) -> None:
    pass
