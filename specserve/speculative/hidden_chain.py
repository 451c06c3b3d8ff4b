"""Shared serving logic of the hidden-state drafters (draft-eagle3, draft-mtp).

Both heads consume pairs (token at position P+1, target feature at position P) written
at draft memory position P, in their own one-slot-per-engine-slot KV cache, and chain on
their own output hidden state (docs/reference/eagle3-mtp.md §1.6, §3.1;
docs/reference/llamacpp-speculative.md §5.6, §5.7).

The target's forward writes every row's features into the tap store by slot and position
(models/tap_store.py), so nothing happens per step. At a draft for anchor position pos0 (id_last
not yet in the target's cache), every position before it is committed: the head's cache rows
[0, fed) are known correct, and the first step of the batched chain (draft_chain.run_chain) feeds
the pairs for positions fed .. pos0 - 1: (token at P+1, feature at P), the last one (id_last,
feature at pos0 - 1), the seed row. Rows the draft cache already holds correctly are never fed
twice, stale chain rows (past fed) are truncated away. The features are projected (EAGLE-3's fc)
when a draft feeds them, by the native chain itself where it runs as one call.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import OptionError
from ..models.step_batch import StepBatch
from ..models.tap_store import FINAL
from .base import Draft, DraftRequest, Proposer, ProposerContext
from .draft_chain import ChainRows, one_call_chain, run_chain
from .draft_options import draft_settings
from .draft_vocab import cut_rows, draft_vocab_ids


class HiddenChainProposer(Proposer):
    """Base class: subclasses load `self.head` (forward_step over a StepBatch), call `serve_head`, and
    say which target states the head reads (`taps`; default: the final normed state)."""

    id_map: torch.Tensor | None = None      # draft vocabulary id -> target id (EAGLE-3 d2t)
    model_drafter = True
    taps = (FINAL,)

    def __init__(self, ctx: ProposerContext):
        super().__init__(ctx)
        self.settings = draft_settings(ctx.options)
        self.picks: dict = {}                # ChainPick buffers of the one-call chain, by shape
        self.fed = [0] * ctx.n_slots         # per slot: the head's cache rows [0, fed) are known correct
        self.target_vocab = ctx.target.config.vocab_size

    # subclasses -----------------------------------------------------------------
    def project(self, features: torch.Tensor) -> torch.Tensor:
        """Stored features [n, F] -> the head's input hidden rows [n, H]. Applied only to the rows a draft
        feeds: with --spec-schedule most steps may not draft."""
        return features

    def head_step(self, batch: StepBatch, hidden: torch.Tensor):
        """(logits of the output rows [n_out, V or Vd], next hidden of the output rows)."""
        return self.head.forward_step(batch, hidden, self.cache)

    def serve_head(self, row_ids: torch.Tensor | None = None) -> None:
        """Set up the loaded `self.head` for serving: its weights' quantization, its lm_head cut to the
        --spec-draft-vocab tokens, its KV cache. row_ids: the target id each lm_head row drafts (None: row r
        drafts token r)."""
        ctx, settings = self.ctx, self.settings
        self.head.quant = settings.quant_draft
        if settings.vocab:
            row_ids = torch.arange(self.target_vocab) if row_ids is None else row_ids
            rows = cut_rows(row_ids, draft_vocab_ids(settings, ctx))
            if not len(rows):
                raise OptionError(f"--spec-draft-vocab {settings.vocab}: none of the {self.name} drafter's "
                                  f"{len(row_ids)} draft-vocabulary tokens is among them")
            self.head.cut_lm_head(rows)
            row_ids = row_ids[rows]
        if row_ids is not None and not torch.equal(row_ids, torch.arange(self.target_vocab)):
            self.id_map = row_ids.contiguous()
        self.cache = self.head.new_cache(ctx.n_slots, ctx.max_ctx)

    # Proposer -------------------------------------------------------------------
    def begin(self, slot: int, prompt: np.ndarray) -> None:
        self.fed[slot] = 0
        self.cache.clear(slot)

    def draft(self, requests: list[DraftRequest]) -> dict[int, Draft]:
        first, one_call = [], self._one_call()
        # the features are projected here unless the chain does it, or there is nothing to project (MTP)
        projects = type(self).project is not HiddenChainProposer.project
        project = self.project if projects and not (one_call and self.head.chain_projects()) else None
        for req in requests:
            if req.pos0 < 1:
                continue
            slot = req.slot
            start = min(self.fed[slot], req.pos0 - 1, self.cache.length(slot))
            self.cache.truncate(slot, start)
            tokens = np.empty(req.pos0 - start, dtype=np.int64)
            tokens[:-1], tokens[-1] = req.tokens[start + 1:req.pos0], req.id_last
            if project is None and self.taps == self.store.layers:      # a view, numpy: cheaper to slice and join
                hidden = self.store.numpy_rows(slot, start, req.pos0)
            else:
                hidden = self.store.rows(slot, start, req.pos0, self.taps)
                hidden = hidden if project is None else project(hidden)
            first.append(ChainRows(slot, tokens, start, hidden))
            self.fed[slot] = req.pos0            # the seed row pairs the last feature with id_last: final
        if not first:
            return {}
        if one_call:
            return one_call_chain(requests, first, self.head_step, self.settings, self._chain_call, self.target_vocab,
                                  self.picks)
        return run_chain(requests, first, self.head_step, self.settings, self.target_vocab, self.id_map)

    def _one_call(self) -> bool:
        """Whether the chain can run as one native call: RoPE tables indexed by position."""
        return (self.head.native is not None and self.head.rope.rope_type != "dynamic")

    def _chain_call(self, batch: StepBatch, hidden: torch.Tensor, n_more: int, pick) -> torch.Tensor:
        return self.head.draft_chain(batch, hidden, self.cache, n_more, self.id_map, pick)

    def release(self, slot: int) -> None:
        self.fed[slot] = 0
        self.cache.clear(slot)

    def max_draft(self) -> int:
        return self.settings.n_max
