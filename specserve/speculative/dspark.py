"""draft-dspark: DFlash's block drafter (dflash.py) plus DSpark's two heads.

The low-rank Markov head makes the block a chain (each draft conditioned on the one before it,
speculative/markov_chain.py); at temperature > 0 the chain is sampled and its distributions q go to
rejection sampling. The confidence head predicts each position's acceptance: `--spec-draft-p-min`
cuts a block at the first position predicted below P, and with `--spec-schedule` (or its alias
`--spec-dspark-schedule`) drafts carry the predictions, which the batch scheduler
(speculative/acceptance_schedule.py, the paper's Algorithm 1) uses instead of its estimate from history.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import OptionError
from ..option import Option
from .dflash import DFlash


class DSpark(DFlash):
    name = "draft-dspark"
    uses_markov = True
    options = [
        Option(("--spec-dspark-schedule",), "spec_dspark_schedule", bool, False,
               "draft-dspark: --spec-schedule fed by the confidence head (the per-position acceptance it "
               "predicts replaces the scheduler's estimate from history; DSpark's Algorithm 1)"),
        Option(("--spec-dspark-cost-table",), "spec_dspark_cost_table", str, None,
               "draft-dspark: the same as --spec-schedule-cost-table"),
    ]

    def _check_confidence_options(self) -> None:
        opts = self.ctx.options
        # with a scheduler, drafts carry the confidence head's predictions for it to use
        self.schedule = bool(opts.get("spec_dspark_schedule") or opts.get("spec_schedule"))
        has_head = self.drafter.confidence_head is not None
        self.confidence_wanted = has_head and (self.p_min > 0 or self.schedule)
        if self.p_min > 0 and not has_head:
            raise OptionError(f"--spec-draft-p-min {self.p_min} needs a confidence head, and the DSpark draft "
                              f"{self.ctx.draft_model_dir} has none (set it to 0)")
        if opts.get("spec_dspark_schedule") and not has_head:
            raise OptionError(f"--spec-dspark-schedule needs a confidence head, and the DSpark draft "
                              f"{self.ctx.draft_model_dir} has none (--spec-schedule estimates from history)")

    def _confidence(self, hidden: torch.Tensor, chain) -> np.ndarray | None:
        if not self.confidence_wanted:
            return None
        if chain.confidence is not None:        # the native draft call evaluated the head
            return chain.confidence
        prev = chain.prev
        rows = self.drafter.draft_rows(hidden.detach().float().cpu().numpy())[:, :prev.shape[1]]
        return self.drafter.confidence(rows, prev)
