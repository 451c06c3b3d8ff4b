"""Block-drafter losses and acceptance estimates (docs/reference/dflash-dspark.md §3.3, §4.5).

With position weights w_k = exp(-k / gamma) over the draft positions of each block:
  L_ce   = sum w * CE(draft', label) / sum w                      (draft' includes the Markov bias)
  L_l1   = sum w * |softmax(draft') - softmax(target)|_1 / sum w  (full L1 = 2 x total variation)
  L_conf = sum w * BCE(conf_logit, c*) / sum w,  c* = clamp(1 - L1/2, 0, 1), detached
DFlash trains L_ce alone; DSpark 0.1 L_ce + 0.9 L_l1 + 1.0 L_conf.
c*_k is the probability that draft k is accepted by rejection sampling at T=1 given the earlier
ones were, so tau_prob = 1 + sum_k prod_{i<=k} c*_i estimates the T=1 acceptance length, and the
same product over argmax agreements with the target (tau_greedy) estimates it at T=0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LossWeights:
    ce: float
    l1: float
    conf: float


LOSS_WEIGHTS = {"draft-dflash": LossWeights(1.0, 0.0, 0.0), "draft-dspark": LossWeights(0.1, 0.9, 1.0)}


def block_losses(draft_logits: torch.Tensor, target_logits: torch.Tensor, labels: torch.Tensor,
                 positions: torch.Tensor, conf_logits: torch.Tensor | None, weights: LossWeights,
                 gamma: float, denominator: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 ) -> tuple[torch.Tensor, dict, torch.Tensor, torch.Tensor]:
    """Rows are the valid draft positions of all blocks, flattened: logits [M, V], labels/positions [M].
    `denominator` turns the rows' weight sum into the normaliser (data-parallel training passes
    DataParallel.denominator, which makes it global).

    Returns (total loss, scalar metrics, c* [M], argmax agreement with the target [M])."""
    w = torch.exp(-positions.float() / gamma)
    w_sum = denominator(w.sum()) if denominator is not None else w.sum().clamp_min(1e-8)
    ce = F.cross_entropy(draft_logits, labels, reduction="none")
    draft_p = torch.softmax(draft_logits, dim=-1)
    target_p = torch.softmax(target_logits, dim=-1)
    l1 = (draft_p - target_p).abs().sum(dim=-1)
    accept = (1 - 0.5 * l1).clamp(0, 1).detach()
    loss_ce = (w * ce).sum() / w_sum
    loss_l1 = (w * l1).sum() / w_sum
    total = weights.ce * loss_ce + weights.l1 * loss_l1
    metrics = {"loss_ce": float(loss_ce.detach()), "loss_l1": float(loss_l1.detach())}
    if conf_logits is not None:
        bce = F.binary_cross_entropy_with_logits(conf_logits.float(), accept, reduction="none")
        loss_conf = (w * bce).sum() / w_sum
        total = total + weights.conf * loss_conf
        metrics["loss_conf"] = float(loss_conf.detach())
    # greedy acceptance: the draft's argmax is the target's argmax (what T=0 verification checks)
    match = (draft_logits.argmax(dim=-1) == target_logits.argmax(dim=-1)).float()
    metrics["loss"] = float(total.detach())
    return total, metrics, accept, match


def acceptance_estimates(accept: torch.Tensor, match: torch.Tensor, valid: torch.Tensor) -> dict:
    """accept / match scattered into block shape [.., N, n] (0 where invalid); valid [.., N, n].

    Per-position rates average over valid positions; tau estimates use blocks whose every
    position is valid (blocks cut by the sequence end would understate them)."""
    valid_f = valid.float()
    n = valid.shape[-1]
    per_pos = (accept * valid_f).sum(dim=tuple(range(valid.dim() - 1))) / valid_f.sum(
        dim=tuple(range(valid.dim() - 1))).clamp_min(1)
    full = valid.all(dim=-1)
    matched = (match * valid_f).sum(dim=tuple(range(valid.dim() - 1))) / valid_f.sum(
        dim=tuple(range(valid.dim() - 1))).clamp_min(1)
    out = {f"accept_rate@{k}": float(per_pos[k]) for k in range(n)}          # T=1: P(rejection sampling accepts)
    out.update({f"match_rate@{k}": float(matched[k]) for k in range(n)})     # T=0: draft argmax == target argmax
    if full.any():
        out["tau_prob"] = 1 + float(accept[full].cumprod(dim=-1).sum(dim=-1).mean())
        out["tau_greedy"] = 1 + float(match[full].cumprod(dim=-1).sum(dim=-1).mean())
    return out
