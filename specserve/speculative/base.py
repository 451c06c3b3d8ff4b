"""The interface every speculative method implements (modelled on llama.cpp's
`common_speculative_impl`) and the objects passed through it.

A new method is one file with a Proposer subclass plus one line in registry.py.
The engine never calls a proposer directly; the SpecDriver does, in llama.cpp's order:
  begin(slot, prompt)      once per request, when its prompt has been processed
  process(batch)           after every target forward (all slots' rows; the taps are in `store`)
  draft(requests)          once per step for all slots that want a draft
  accept(slot, n, other)   after verifying a draft (other=True: another method drafted)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from ..models.step_batch import StepBatch
from ..models.tap_store import TapStore
from ..models.transformer import ForwardOutput
from ..option import Option
from ..sampling import SamplingParams
from .draft_options import draft_settings


@dataclass
class DraftRequest:
    slot: int
    n_max: int                        # caller cap (context / max_tokens budget); the driver truncates to it
    pos0: int                         # position id_last will take (= tokens already in the target cache)
    id_last: int                      # last sampled target token, not yet in the cache
    tokens: np.ndarray                # all tokens already in the target cache (int64, read-only view)
    temperature: float = 0.0          # the request's temperature (drafters that sample may use it)
    generator: torch.Generator | None = None   # the request's generator, for drafters that sample
    # --spec-schedule's draft length, the same for every slot of a step: more tokens would not be
    # verified, so a drafter need not draft them (0: no scheduler)
    n_scheduled: int = 0
    # the rest of the request's sampler: drafters that sample draw from the same chain over their logits
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    def sampler(self) -> SamplingParams:
        """The chain a sampled draft is drawn from (temperature, top-k, top-p, min-p)."""
        return SamplingParams(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p)


@dataclass
class Draft:
    tokens: list[int]
    # [k, V]: the distributions the tokens were sampled from (a native draft's: numpy)
    q_probs: torch.Tensor | np.ndarray | None = None
    confidence: list[float] | None = None     # [k]: predicted acceptance per position (DSpark)

    def truncate(self, n: int) -> "Draft":
        if len(self.tokens) <= n:
            return self
        return Draft(self.tokens[:n],
                     None if self.q_probs is None else self.q_probs[:n],
                     None if self.confidence is None else self.confidence[:n])


@dataclass
class TargetBatch:
    """What `process()` sees: the rows of one target forward and its outputs."""
    step: StepBatch
    out: ForwardOutput
    is_prompt: dict[int, bool] = field(default_factory=dict)   # slot -> True: its rows are a prompt chunk


@dataclass
class ProposerContext:
    """Everything a proposer may need at construction."""
    target: Any                        # CausalLM (shared embedding / lm_head, config)
    n_slots: int
    max_ctx: int
    options: dict[str, Any]            # all option values by dest name
    draft_model_dir: str | None = None
    tokenizer: Any = None


class Proposer:
    name: ClassVar[str] = "base"                  # the --spec-type name
    options: ClassVar[list[Option]] = []          # its own options (the CLI, server and docs list them)
    model_drafter: ClassVar[bool] = False         # drafts with a model and reads the --spec-draft-* options
    needs_draft_model: ClassVar[bool] = False     # cannot run without a draft model folder (-md)
    # the target states the proposer reads, in the order it reads them: layer outputs (-1: the embedding
    # output) and tap_store.FINAL (the final normed state)
    taps: tuple[int, ...] = ()
    store: TapStore | None = None                 # where it reads them, by slot and position (build_driver)

    def __init__(self, ctx: ProposerContext):
        self.ctx = ctx

    def begin(self, slot: int, prompt: np.ndarray) -> None:
        pass

    def process(self, batch: TargetBatch) -> None:
        pass

    def draft(self, requests: list[DraftRequest]) -> dict[int, Draft]:
        raise NotImplementedError

    def accept(self, slot: int, n_accepted: int, is_other: bool) -> None:
        pass

    def release(self, slot: int) -> None:
        """The request in `slot` ended (finished, aborted or failed)."""

    def max_draft(self) -> int:
        """Longest draft this proposer can return (sizes the per-position statistics)."""
        return draft_settings(self.ctx.options).n_max

    def max_draft_sampled(self) -> int:
        """Longest draft for a request sampled at T > 0: --spec-draft-n-max-sampled for a model drafter, none
        for an n-gram type with --spec-ngram-greedy-only."""
        if self.model_drafter:
            return draft_settings(self.ctx.options).n_max_sampled
        return 0 if self.ctx.options.get("spec_ngram_greedy_only") else self.max_draft()


class TokenProposer(Proposer):
    """A proposer that drafts each slot on its own from the slot's tokens (the draftless methods)."""

    def draft_tokens(self, req: DraftRequest) -> list[int]:
        raise NotImplementedError

    def draft(self, requests: list[DraftRequest]) -> dict[int, Draft]:
        out = {}
        for req in requests:
            tokens = self.draft_tokens(req)
            if tokens:
                out[req.slot] = Draft(tokens)
        return out
