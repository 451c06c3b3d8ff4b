"""draft-dflash and draft-dspark: block drafters that read the target's hidden states.

Per slot the proposer keeps the draft's context: the tap features of every committed target
position, injected once as keys/values of every draft layer and kept in a static per-slot cache
across steps. The target's forward writes every row's taps into the tap store by slot and position
(models/tap_store.py); at a draft, the slot's positions from its draft cache's length up to the
anchor are committed (a rejected draft's row is past them), and go into the draft cache then.
`draft()` runs ONE draft forward for all requesting slots, each with a block of the
same size (the block-uniformity the Markov chain needs): the trained block, or the shorter draft
length `--spec-schedule` expects to verify; the driver truncates each slot to its own cap
afterwards. On the native kernels that forward, the lm_head over the draft rows, the Markov chain
and the confidence head are one C call (models/block_drafter.py:draft_native).

DFlash drafts greedily (one-hot verification) unless `--spec-dflash-sample sample`; its
`--spec-draft-p-min` cuts a block at the draft's own top probability. DSpark (dspark.py) is this
class with a Markov chain and a confidence head.
"""
from __future__ import annotations

import logging

import numpy as np
import torch

from ..errors import OptionError
from ..models.block_drafter import load_block_drafter
from ..models.block_drafter_format import LAYOUTS
from ..option import Option, read_options
from .base import Draft, DraftRequest, Proposer, ProposerContext
from .confidence_schedule import confident_prefix_lengths
from .draft_options import draft_settings
from .draft_vocab import draft_vocab_ids
from .markov_chain import BlockChain, draft_uniforms, run_block_chain

log = logging.getLogger("specserve.speculative")

SAMPLE_MODES = ("auto", "greedy", "sample")


class DFlash(Proposer):
    name = "draft-dflash"
    model_drafter = needs_draft_model = True
    uses_markov = False
    confidence_wanted = False        # the draft call evaluates DSpark's confidence head (DFlash has none)
    options = [
        Option(("--spec-dflash-layout",), "spec_dflash_layout", str, "auto",
               "draft-dflash/draft-dspark: block layout: auto (from the checkpoint), bonus-anchor "
               "(z-lab, B-1 drafts per block) or anchor-first (DeepSpec, B drafts)"),
        Option(("--spec-dflash-sample",), "spec_dflash_sample", str, "auto",
               "draft-dflash/draft-dspark at temperature > 0: auto (DSpark samples its Markov chain, DFlash "
               "drafts greedily), greedy, or sample (drafts sampled at the request's temperature, verified "
               "by rejection sampling with their q)"),
    ]

    def __init__(self, ctx: ProposerContext):
        super().__init__(ctx)
        if not ctx.draft_model_dir:
            raise OptionError(f"--spec-type {self.name} needs a draft model folder (-md DIR)")
        own = read_options(DFlash.options, ctx.options, prefix="spec_dflash_")
        if own.sample not in SAMPLE_MODES:
            raise OptionError(f"--spec-dflash-sample must be one of {', '.join(SAMPLE_MODES)}, got {own.sample!r}")
        self.sample_mode = own.sample
        layout = own.layout or "auto"
        if layout not in ("auto",) + LAYOUTS:
            raise OptionError(f"--spec-dflash-layout must be auto, {' or '.join(LAYOUTS)}, got {layout!r}")
        self.settings = draft_settings(ctx.options)
        self.drafter = load_block_drafter(ctx.draft_model_dir, ctx.target, layout, ctx.tokenizer)
        if self.settings.vocab:
            self.drafter.cut_vocab(draft_vocab_ids(self.settings, ctx))
        config = self.drafter.config
        if self.uses_markov and not config.markov_rank:
            raise OptionError(f"{ctx.draft_model_dir} has no Markov head (a DFlash draft): use --spec-type "
                              f"draft-dflash")
        if not self.uses_markov and config.markov_rank:
            raise OptionError(f"{ctx.draft_model_dir} has a Markov head (a DSpark draft): use --spec-type "
                              f"draft-dspark")
        self.taps = tuple(config.target_layer_ids)
        self.n_draft = min(self.settings.n_max, config.max_drafts)
        if self.settings.n_max > config.max_drafts:
            log.info("%s: --spec-draft-n-max %d clamped to the trained block (%d drafts, %s layout)",
                     self.name, self.settings.n_max, config.max_drafts, config.layout)
        self.n_min, self.p_min = self.settings.n_min, self.settings.p_min
        self.mask_token_id = config.mask_token_id
        self.drafter.quant = self.settings.quant_draft
        self.cache = self.drafter.new_cache(ctx.n_slots, ctx.max_ctx)
        self.drafter.prepare_native_call()
        self._check_confidence_options()

    def _check_confidence_options(self) -> None:
        """DFlash: p_min applies to the draft's own top probability (known before the token is drawn)."""

    def max_draft(self) -> int:
        return self.n_draft

    def max_draft_sampled(self) -> int:
        return min(self.n_draft, self.settings.n_max_sampled)

    # ------------------------------------------------------------------ context
    def begin(self, slot: int, prompt: np.ndarray) -> None:
        # the prompt's taps are in the store; they enter the draft cache at the slot's first draft
        self.cache.clear(slot)

    def release(self, slot: int) -> None:
        self.cache.clear(slot)

    def _new_context(self, req: DraftRequest) -> int:
        """Where the slot's new context rows start: the draft cache's length (the rows up to the anchor are
        committed), or 0 after restarting a cache that is ahead of the anchor (out of step)."""
        start = self.cache.length(req.slot)
        if start > req.pos0:
            log.warning("%s: slot %d draft context out of step (%d rows for position %d); restarting it",
                        self.name, req.slot, start, req.pos0)
            self.cache.clear(req.slot)
            return 0
        return start

    # ------------------------------------------------------------------ drafting
    def draft(self, requests: list[DraftRequest]) -> dict[int, Draft]:
        n_sampled = self.max_draft_sampled()
        if n_sampled == self.n_draft or all(r.temperature <= 0 for r in requests):
            return self._draft_block(requests, self.n_draft)
        # a block is one length for all its slots: greedy and sampled slots draft in separate calls
        greedy, sampled = [r for r in requests if r.temperature <= 0], [r for r in requests if r.temperature > 0]
        return {**(self._draft_block(greedy, self.n_draft) if greedy else {}), **self._draft_block(sampled, n_sampled)}

    def _draft_block(self, requests: list[DraftRequest], block_drafts: int) -> dict[int, Draft]:
        reqs, chunks = list(requests), []
        for req in reqs:
            start = self._new_context(req)
            if start < req.pos0:
                chunks.append((req.slot, start, req.pos0))
        # a block no longer than the scheduler's draft length: fewer rows to draft (not the slots' own caps,
        # which differ between slots: a slot's drafts must not depend on the others in the batch)
        n_draft = min(block_drafts, reqs[0].n_scheduled) if reqs[0].n_scheduled > 0 else block_drafts
        sampling = [self._samples(r) for r in reqs]
        hidden, chain = self._run_block(reqs, chunks, sampling, n_draft)
        for r in reqs:     # context committed up to the anchor; the block's rows are dropped (the crop)
            self.cache.lengths[r.slot] = r.pos0
        confidence = self._confidence(hidden, chain)
        lengths = None if confidence is None else \
            self._choose_lengths(reqs, np.full(len(reqs), n_draft, dtype=np.int64), confidence)
        tokens = chain.tokens.tolist()
        confidence = None if confidence is None else confidence.tolist()
        out = {}
        for i, req in enumerate(reqs):
            n = n_draft if lengths is None else int(lengths[i])
            if n == 0 or n < self.n_min:
                continue
            q = self._target_q(chain.q[i, :n]) if sampling[i] else None
            out[req.slot] = Draft(tokens[i][:n], q, None if confidence is None else confidence[i][:n])
        return out

    def _target_q(self, q):
        """A draft's q over the target's vocabulary: as drawn, or scattered from the kept tokens' columns when
        the lm_head was cut (--spec-draft-vocab; the other tokens have probability 0). The native call's
        (numpy) is already laid out so."""
        ids = self.drafter.vocab_ids
        if ids is None or isinstance(q, np.ndarray):
            return q
        return torch.zeros(q.shape[0], self.ctx.target.config.vocab_size, dtype=q.dtype,
                           device=q.device).index_copy_(1, ids.to(q.device), q)

    def _run_block(self, reqs: list[DraftRequest], chunks, sampling: list[bool], n_draft: int):
        """One draft forward of n_draft drafts for every slot: (the block's final-normed rows [S, nb, H],
        BlockChain)."""
        drafter = self.drafter
        if drafter.native is not None:      # one native call: layers, lm_head and chain
            return self._run_native(reqs, chunks, sampling, n_draft)
        anchors = np.array([r.id_last for r in reqs], dtype=np.int64)
        block = np.full((len(reqs), drafter.block_rows_for(n_draft)), self.mask_token_id, dtype=np.int64)
        block[:, 0] = anchors
        feats = ctx_slots = ctx_positions = None
        if chunks:
            feats = torch.cat([self.store.rows(slot, start, end, self.taps) for slot, start, end in chunks])
            ctx_slots = torch.cat([torch.full((end - start,), slot) for slot, start, end in chunks])
            ctx_positions = torch.cat([torch.arange(start, end) for _, start, end in chunks])
        device = drafter.device
        feats, ctx_slots, ctx_positions = (None if a is None else a.to(device) for a in (feats, ctx_slots, ctx_positions))
        pos0 = torch.tensor([r.pos0 for r in reqs], dtype=torch.int64, device=device)
        anchors, block = (torch.from_numpy(a).to(device) for a in (anchors, block))
        hidden = drafter.forward_cached(self.cache, feats, ctx_slots, ctx_positions, [r.slot for r in reqs], pos0, block)
        temps = uniforms = None
        if any(sampling):
            temps = torch.tensor([r.temperature if s else 0.0 for r, s in zip(reqs, sampling)], device=device)
            uniforms = draft_uniforms([r.generator for r in reqs], sampling, n_draft)
        markov = drafter.markov_head if self.uses_markov else None
        return hidden, run_block_chain(drafter.logits(drafter.draft_rows(hidden)[:, :n_draft]), anchors, markov,
                                       temps, uniforms, drafter.vocab_ids, reqs)

    def _run_native(self, reqs: list[DraftRequest], chunks, sampling: list[bool], n_draft: int):
        """_run_block on the native kernels: the inputs written into the call's buffers for this shape (each
        small numpy or torch operation right after the target's forward costs µs), the context rows read
        where the target's forward wrote them."""
        call = self.drafter.native_call()
        nb = self.drafter.block_rows_for(n_draft)
        shape = call.shape(len(reqs), nb, n_draft)
        chain = shape.chain
        anchors, pos0 = [r.id_last for r in reqs], [r.pos0 for r in reqs]
        shape.index[:] = ([r.slot for r in reqs], pos0)
        shape.block[:, 1:] = self.mask_token_id
        shape.block[:, 0] = chain.anchors[:] = anchors
        ctx_slots, ctx_positions, chunk_rows, addresses = [], [], [], []
        for slot, start, end in chunks:     # (the store's rows are this drafter's taps: no other proposer taps)
            ctx_slots += [slot] * (end - start)
            ctx_positions += range(start, end)
            chunk_rows.append(end - start)
            addresses.append(self.store.row_address(slot, start))
        shape.set_context(chunk_rows, addresses, ctx_slots, ctx_positions)
        sampled = draft_uniforms([r.generator for r in reqs], sampling, n_draft, chain.uniforms) is not None
        if sampled:
            chain.temperatures[:] = [r.temperature if on else 0.0 for r, on in zip(reqs, sampling)]
            chain.set_samplers(reqs)
        call.run(shape, self.cache, max(pos0) + nb, self.uses_markov, sampled, self.confidence_wanted)
        return shape.hidden, BlockChain(chain.tokens_np, chain.logits, chain.anchors, chain.q_np if sampled else None,
                                        chain.confidence if self.confidence_wanted else None)

    def _samples(self, req: DraftRequest) -> bool:
        """Whether this slot's drafts are sampled (and carry q) rather than greedy."""
        if req.temperature <= 0 or req.generator is None:
            return False
        if self.sample_mode == "auto":
            return self.uses_markov
        return self.sample_mode == "sample"

    def _confidence(self, hidden: torch.Tensor, chain) -> np.ndarray | None:
        """DFlash: the draft's top probability per position (temperature 1), used by p_min."""
        if self.p_min <= 0:
            return None
        return torch.softmax(chain.logits, dim=-1).amax(dim=-1).cpu().numpy()

    def _choose_lengths(self, reqs, lengths: np.ndarray, confidence: np.ndarray) -> np.ndarray:
        if self.p_min > 0:
            lengths = np.minimum(lengths, confident_prefix_lengths(confidence, self.p_min))
        return lengths
