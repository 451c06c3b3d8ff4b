"""Pretraining loop for a small CausalLM on a packed token stream.

Deterministic by construction: fixed init seed, and the batch for step s is a pure
function of (seed, s), so a run resumed from a checkpoint sees exactly the data an
uninterrupted run would. Master weights and AdamW state stay float32; matmuls run
under CPU bfloat16 autocast.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ..models.config import config_from_dict
from ..models.transformer import CausalLM


@dataclass
class TrainConfig:
    steps: int
    seq_len: int = 1024
    batch_size: int = 4
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 200
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    grad_clip: float = 1.0
    seed: int = 1234
    bf16: bool = True
    compile: bool = True
    log_every: int = 25
    eval_every: int = 500
    eval_windows: int = 32
    checkpoint_minutes: float = 5.0

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.batch_size


def build_model(hf_config: dict, seed: int) -> CausalLM:
    """Random init: N(0, 0.02), residual-branch outputs scaled by 1/sqrt(2 * layers) (GPT-2)."""
    model = CausalLM(config_from_dict(hf_config))
    model.init_weights(std=0.02, seed=seed)
    scale = 1.0 / math.sqrt(2 * model.config.num_hidden_layers)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                param.mul_(scale)
    return model


class PackedBatches:
    """Windows of seq_len + 1 tokens cut from one packed stream, shuffled per epoch.

    Each epoch shifts the window grid by a different offset so that windows do not
    always start at the same tokens.
    """

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, seed: int):
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed
        self.n_windows = (tokens.size - 1 - seq_len) // seq_len
        if self.n_windows < batch_size:
            raise ValueError(f"{tokens.size} tokens are too few for batches of {batch_size}x{seq_len}")
        self._epoch, self._perm, self._offset = -1, None, 0

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self._epoch:
            rng = np.random.default_rng([self.seed, epoch])
            self._perm = rng.permutation(self.n_windows)
            self._offset = 0 if epoch == 0 else int(rng.integers(self.seq_len))
            self._epoch = epoch

    def epoch_of(self, step: int) -> float:
        return step * self.batch_size / self.n_windows

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = []
        for i in range(step * self.batch_size, (step + 1) * self.batch_size):
            self._set_epoch(i // self.n_windows)
            start = self._offset + int(self._perm[i % self.n_windows]) * self.seq_len
            rows.append(self.tokens[start:start + self.seq_len + 1])
        window = torch.from_numpy(np.stack(rows).astype(np.int64))
        return window[:, :-1], window[:, 1:]


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Linear warmup, then cosine decay to min_lr_ratio * lr at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


def lm_loss(model: CausalLM, inputs: torch.Tensor, targets: torch.Tensor, reduction: str = "mean"):
    hidden, _ = model.forward_full(inputs)
    logits = F.linear(hidden, model.lm_head_weight).float()
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1), reduction=reduction)


def make_optimizer(model: CausalLM, cfg: TrainConfig) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.ndim >= 2]      # matrices and the (tied) embedding
    no_decay = [p for p in model.parameters() if p.ndim < 2]    # norm gains
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=1e-8, foreach=True)


@torch.no_grad()
def evaluate(model: CausalLM, tokens: np.ndarray, seq_len: int, max_windows: int | None = None,
             bf16: bool = False, batch_size: int = 4) -> dict:
    """Mean next-token loss over non-overlapping windows (each token predicted once).

    With max_windows, a fixed, evenly spaced subset of the windows is used.
    """
    was_training = model.training
    model.eval()
    n_full = (tokens.size - 1) // seq_len
    starts = [i * seq_len for i in range(n_full)]
    if max_windows is not None and n_full > max_windows:
        starts = [starts[int(i * n_full / max_windows)] for i in range(max_windows)]
    chunks = [tokens[s:s + seq_len + 1] for s in starts]
    if max_windows is None and tokens.size - 1 > n_full * seq_len:
        chunks.append(tokens[n_full * seq_len:])     # the tail, so every token is scored
    total, count = 0.0, 0
    for i in range(0, len(chunks), batch_size):
        group = chunks[i:i + batch_size]
        by_len: dict[int, list] = {}
        for c in group:
            by_len.setdefault(len(c), []).append(c)
        for rows in by_len.values():
            window = torch.from_numpy(np.stack(rows).astype(np.int64))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = lm_loss(model, window[:, :-1], window[:, 1:], reduction="sum")
            total += float(loss)
            count += window[:, 1:].numel()
    model.train(was_training)
    mean = total / max(count, 1)
    return {"loss": mean, "perplexity": math.exp(mean), "tokens": count, "windows": len(chunks)}


def _save_checkpoint(path: Path, model, optimizer, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), **state}, tmp)
    os.replace(tmp, path)


def train(model: CausalLM, cfg: TrainConfig, train_tokens: np.ndarray, val_tokens: np.ndarray,
          work_dir: str | Path, resume: bool = False, log: Callable[[str], None] = print) -> dict:
    """Train in place; returns run statistics. Checkpoints go to work_dir/checkpoint.pt."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = work_dir / "checkpoint.pt"
    metrics_path = work_dir / "metrics.jsonl"
    torch.manual_seed(cfg.seed)
    optimizer = make_optimizer(model, cfg)
    batches = PackedBatches(train_tokens, cfg.seq_len, cfg.batch_size, cfg.seed)
    step, elapsed, recent = 0, 0.0, []
    if resume and ckpt_path.is_file():
        saved = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        if saved["train_config"] != asdict(cfg):
            raise ValueError(f"{ckpt_path} was written with a different training config; start without --resume")
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step, elapsed, recent = saved["step"], saved["elapsed"], saved["recent_losses"]
        log(f"resumed from {ckpt_path} at step {step}/{cfg.steps} ({elapsed / 60:.1f} min trained)")
    elif metrics_path.exists():
        metrics_path.unlink()

    model.train()
    loss_fn = torch.compile(lm_loss) if cfg.compile else lm_loss
    last_ckpt = time.monotonic()
    window_start, window_tokens = time.monotonic(), 0
    while step < cfg.steps:
        t0 = time.monotonic()
        inputs, targets = batches.batch(step)
        lr = lr_at(cfg, step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            loss = loss_fn(model, inputs, targets)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        window_tokens += cfg.tokens_per_step
        recent = (recent + [loss.detach().item()])[-100:]
        if not math.isfinite(recent[-1]):
            raise FloatingPointError(f"loss became {recent[-1]} at step {step}")

        record = None
        if step % cfg.log_every == 0 or step == cfg.steps:
            rate = window_tokens / max(time.monotonic() - window_start, 1e-9)
            window_start, window_tokens = time.monotonic(), 0
            eta = (cfg.steps - step) * cfg.tokens_per_step / max(rate, 1e-9)
            record = {"step": step, "loss": float(np.mean(recent[-cfg.log_every:])), "lr": lr,
                      "grad_norm": grad_norm, "tokens_per_s": rate, "epoch": batches.epoch_of(step),
                      "elapsed_min": elapsed / 60}
            log(f"step {step}/{cfg.steps} loss {record['loss']:.4f} lr {lr:.2e} gnorm {grad_norm:.2f} "
                f"{rate:.0f} tok/s epoch {record['epoch']:.2f} elapsed {elapsed / 60:.1f} min eta {eta / 60:.1f} min")
        if step % cfg.eval_every == 0 or step == cfg.steps:
            val = evaluate(model, val_tokens, cfg.seq_len, cfg.eval_windows, bf16=cfg.bf16)
            record = dict(record or {"step": step}, val_loss=val["loss"])
            log(f"step {step} held-out loss {val['loss']:.4f} (ppl {val['perplexity']:.2f}, "
                f"{val['tokens']} tokens)")
            window_start = time.monotonic()      # keep evaluation out of the tokens/s figure
        if record is not None:
            with open(metrics_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
        if time.monotonic() - last_ckpt >= cfg.checkpoint_minutes * 60 or step == cfg.steps:
            _save_checkpoint(ckpt_path, model, optimizer, {
                "step": step, "elapsed": elapsed + time.monotonic() - t0, "recent_losses": recent,
                "train_config": asdict(cfg)})
            last_ckpt = time.monotonic()
        elapsed += time.monotonic() - t0        # wall time, evaluation and checkpoints included
    return {"steps": step, "train_seconds": elapsed, "tokens_seen": step * cfg.tokens_per_step,
            "epochs": batches.epoch_of(step), "final_train_loss_avg100": float(np.mean(recent)),
            "metrics_path": str(metrics_path)}
