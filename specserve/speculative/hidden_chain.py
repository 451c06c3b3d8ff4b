"""Shared serving logic of the hidden-state drafters (draft-eagle3, draft-mtp).

Both heads consume pairs (token at position P+1, target feature at position P) written
at draft memory position P, in their own one-slot-per-engine-slot KV cache, and chain on
their own output hidden state (docs/reference/eagle3-mtp.md §1.6, §3.1;
docs/reference/llamacpp-speculative.md §5.6, §5.7).

Bookkeeping per slot, as llama.cpp does it:
  * `process(batch)`, replayed per slot when the slot next drafts or accepts
    (deferred_batches.py): the rows of each slot's segment give features f[0..n-1]. Pairs
    (tok[k+1], f[k]) are complete and queued; the last row's token successor is not known
    yet, so (f[n-1], its position) becomes the *pending* row. A previous pending row is
    completed with the segment's first token.
  * `accept(slot, n_accepted)`: only the first 1 + n_accepted verify rows were kept, so the
    pending row becomes verify row n_accepted and queued pairs past it are dropped.
  * `draft()`: the queued rows plus the seed row (id_last, pending feature) are fed in the
    first step of the batched chain (draft_chain.run_chain); rows the draft cache already
    holds correctly are never fed twice, stale chain rows are truncated away.
The features are stored as the target gives them and projected (EAGLE-3's fc) when a draft feeds them,
by the native chain itself where it runs as one call.
"""
from __future__ import annotations

import logging
import numpy as np
import torch

from ..models.step_batch import StepBatch
from .base import Draft, DraftRequest, Proposer, ProposerContext, TargetBatch
from .deferred_batches import DeferredBatches, KeptBatch
from .draft_chain import ChainRows, one_call_chain, run_chain
from .draft_options import draft_settings
from .row_range import RowRange, joined_rows

log = logging.getLogger("specserve.speculative")


class SlotRows:
    """One slot's queued (token, feature) pairs and its pending row."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.tokens: list[np.ndarray] = []
        self.hidden: list[RowRange] = []
        self.queue_pos0 = 0                  # position of the first queued row
        self.n_queued = 0
        self.pending: RowRange | None = None
        self.pending_pos = -1
        self.verify_pos0 = -1
        self.verify: RowRange | None = None
        self.fed = 0                         # draft cache rows [0, fed) are known correct
        self.broken = False                  # state lost mid-request: no drafts until the next request

    def queue(self, tokens: np.ndarray, hidden: RowRange, pos0: int) -> None:
        skip = max(0, self.fed - pos0)       # rows the draft cache already holds
        if skip >= tokens.shape[0]:
            return
        tokens, hidden, pos0 = tokens[skip:], hidden.part(skip, hidden.n - skip), pos0 + skip
        if self.n_queued == 0:
            self.queue_pos0 = pos0
        elif pos0 != self.queue_pos0 + self.n_queued:
            raise RuntimeError(f"draft rows are not contiguous: queued up to position "
                               f"{self.queue_pos0 + self.n_queued}, next at {pos0}")
        self.tokens.append(tokens)
        self.hidden.append(hidden)
        self.n_queued += tokens.shape[0]

    def drop_from(self, pos: int) -> None:
        """Forget queued rows at positions >= pos."""
        left = pos - self.queue_pos0
        if self.n_queued <= left:
            return
        tokens, hidden = [], []
        for t, h in zip(self.tokens, self.hidden):
            if left <= 0:
                break
            m = min(left, t.shape[0])
            tokens.append(t[:m])
            hidden.append(h.part(0, m))
            left -= m
        self.tokens, self.hidden = tokens, hidden
        self.n_queued = sum(t.shape[0] for t in tokens)


class HiddenChainProposer(Proposer):
    """Base class: subclasses load `self.head` (forward_step over a StepBatch), make `self.cache`
    with `self.head.new_cache`, and implement `features()`."""

    id_map: torch.Tensor | None = None      # draft vocabulary id -> target id (EAGLE-3 d2t)
    model_drafter = True

    def __init__(self, ctx: ProposerContext):
        super().__init__(ctx)
        self.settings = draft_settings(ctx.options)
        self.picks: dict = {}                # ChainPick buffers of the one-call chain, by shape
        self.slots = [SlotRows() for _ in range(ctx.n_slots)]
        self.deferred = DeferredBatches(ctx.n_slots, self._replay)
        self.target_vocab = ctx.target.config.vocab_size

    # subclasses -----------------------------------------------------------------
    def features(self, kept: KeptBatch) -> torch.Tensor:
        """[N, F] the target's features for every row of a kept target batch, as stored until a draft."""
        raise NotImplementedError

    def project(self, features: torch.Tensor) -> torch.Tensor:
        """Stored features [n, F] -> the head's input hidden rows [n, H]. Applied only to the rows a draft
        feeds: with --spec-schedule most steps may not draft."""
        return features

    def head_step(self, batch: StepBatch, hidden: torch.Tensor):
        """(logits of the output rows [n_out, V or Vd], next hidden of the output rows)."""
        return self.head.forward_step(batch, hidden, self.cache)

    def clear_cache(self, slot: int) -> None:
        self.cache.clear(slot)

    def truncate_cache(self, slot: int, length: int) -> bool:
        if self.cache.length(slot) < length:
            return False
        self.cache.truncate(slot, length)
        return True

    # Proposer -------------------------------------------------------------------
    def process(self, batch: TargetBatch) -> None:
        self.deferred.add(batch)

    def _replay(self, kept: KeptBatch, seg, slot: int) -> None:
        """One batch's rows of one slot (DeferredBatches): queue the completed pairs, keep the pending row."""
        st = self.slots[slot]
        if seg.pos0 == 0:
            st.reset()
            self.clear_cache(slot)
        if st.broken:
            return
        if kept.derived is None:
            kept.derived = (self.features(kept), kept.step.tokens.numpy())
        feats, tokens = kept.derived
        toks = tokens[seg.start:seg.start + seg.n_rows]
        rows = RowRange((feats,), seg.start, seg.n_rows)
        try:
            if st.pending is not None and st.pending_pos == seg.pos0 - 1:
                st.queue(toks[:1], st.pending, st.pending_pos)
            if seg.n_rows > 1:
                st.queue(toks[1:], rows.part(0, seg.n_rows - 1), seg.pos0)
        except RuntimeError:
            log.exception("draft state of slot %d lost; it drafts again from its next request", slot)
            st.reset()
            st.broken = True
            return
        st.pending, st.pending_pos = rows.part(seg.n_rows - 1, 1), seg.pos0 + seg.n_rows - 1
        st.verify_pos0, st.verify = seg.pos0, rows

    def accept(self, slot: int, n_accepted: int, is_other: bool) -> None:
        self.deferred.catch_up(slot)
        st = self.slots[slot]
        if st.verify is None:
            return
        i = min(n_accepted, st.verify.n - 1)
        st.pending, st.pending_pos = st.verify.part(i, 1), st.verify_pos0 + i
        st.drop_from(st.pending_pos)

    def draft(self, requests: list[DraftRequest]) -> dict[int, Draft]:
        first, one_call = [], self._one_call()
        project = self.project if not (one_call and self.head.chain_projects()) else None   # else the chain does
        for req in requests:
            self.deferred.catch_up(req.slot)
            st = self.slots[req.slot]
            if st.broken or st.pending is None or st.pending_pos != req.pos0 - 1:
                continue
            start = st.queue_pos0 if st.n_queued else st.pending_pos
            if start != min(st.fed, st.pending_pos) or not self.truncate_cache(req.slot, start):
                continue
            tokens = np.concatenate(st.tokens + [np.array([req.id_last], dtype=np.int64)])
            hidden = joined_rows(st.hidden + [st.pending])
            if project is not None:
                hidden = project(hidden)
            first.append(ChainRows(req.slot, tokens, start, hidden))
            st.tokens, st.hidden, st.n_queued = [], [], 0
            st.fed = st.pending_pos + 1          # the seed row pairs the pending feature with id_last: final
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
        self.slots[slot].reset()
        self.clear_cache(slot)
        self.deferred.skip(slot)

    def max_draft(self) -> int:
        return self.settings.n_max
