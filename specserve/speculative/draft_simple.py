"""draft-simple: a separate small model of the same vocabulary drafts autoregressively
(llama.cpp `common_speculative_impl_draft_simple`, docs/reference/llamacpp-speculative.md §5.5).

The draft model is loaded with the target's model code (`-md DIR` or a GGUF file, any supported family)
and keeps its own KV cache with one slot per engine slot. It is fed lazily: before
drafting, each slot's draft cache is compared with the committed tokens, rolled back to
the longest common prefix (that drops rejected draft rows) and fed what it has not seen,
followed by the last sampled token, in the first step of the batched draft loop.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import OptionError
from ..models.step_batch import StepBatch
from ..models.transformer import CausalLM
from .base import Draft, DraftRequest, Proposer, ProposerContext
from .draft_chain import ChainRows, one_call_chain, run_chain
from .draft_options import draft_settings
from .draft_vocab import draft_vocab_ids
from .vocab_compat import check_vocab_compatible


class DraftSimple(Proposer):
    name = "draft-simple"
    model_drafter = needs_draft_model = True

    def __init__(self, ctx: ProposerContext):
        super().__init__(ctx)
        if not ctx.draft_model_dir:
            raise OptionError("--spec-type draft-simple needs a draft model: -md / --spec-draft-model DIR")
        target = ctx.target
        self.settings = draft_settings(ctx.options)
        self.picks: dict = {}                # ChainPick buffers of the one-call chain, by shape
        self.model = CausalLM.from_pretrained(ctx.draft_model_dir, dtype=target.dtype, device=target.device)
        check_vocab_compatible(ctx.tokenizer, target.config.vocab_size, ctx.draft_model_dir,
                               self.model.config.vocab_size)
        self.target_vocab = target.config.vocab_size
        self.draft_vocab = self.model.config.vocab_size
        self.model.quant = self.settings.quant_draft
        self.cache = self.model.new_cache(ctx.n_slots, ctx.max_ctx)
        self.id_map = self._cut_vocab() if self.settings.vocab else None    # lm_head row -> target id
        # the tokens whose rows are in each slot's draft cache (valid up to cache.length(slot))
        self.seen = np.zeros((ctx.n_slots, self.cache.capacity + 1), dtype=np.int64)
        self.agreed = [0] * ctx.n_slots      # per slot: cache rows known to equal the committed tokens

    def _cut_vocab(self) -> torch.Tensor:
        """--spec-draft-vocab: the kept ids, the lm_head rows the native forward keeps (the PyTorch forward's
        logits are cut to them in _step)."""
        if self.draft_vocab != self.target_vocab:
            raise OptionError(f"--spec-draft-vocab needs a draft model with the target's vocabulary "
                              f"({self.draft_vocab} against {self.target_vocab} tokens)")
        kept = draft_vocab_ids(self.settings, self.ctx)
        if self.model.native is not None:
            self.model.native.cut_lm_head(kept)
        return kept

    def _catch_up_rows(self, req: DraftRequest) -> ChainRows:
        tokens, slot, seen = req.tokens, req.slot, self.seen[req.slot]
        n = min(self.cache.length(slot), len(tokens))     # id_last is always fed: its row drafts d1
        # rows below `agreed` hold committed tokens: only the rows after them (the last drafts) are compared
        start = min(self.agreed[slot], n)
        common = n
        if start < n:
            diff = np.flatnonzero(seen[start:n] != tokens[start:n])
            common = start + int(diff[0]) if diff.size else n
        self.cache.truncate(slot, common)
        self.agreed[slot] = len(tokens) + 1                # id_last, fed now, is committed by the verify
        fed = np.empty(len(tokens) + 1 - common, dtype=np.int64)
        fed[:-1], fed[-1] = tokens[common:], req.id_last
        seen[common:common + len(fed)] = fed               # (trusted only up to the cache's length)
        return ChainRows(slot, fed, common)

    def _step(self, batch: StepBatch, hidden):
        tokens = batch.tokens
        for seg in batch.segments:
            self.seen[seg.slot, seg.pos0:seg.pos0 + seg.n_rows] = tokens[seg.start:seg.start + seg.n_rows].numpy()
        if self.draft_vocab < self.target_vocab:
            # a target token the draft cannot embed is fed as id 0 (the draft still runs; only quality suffers)
            batch.tokens = torch.where(tokens < self.draft_vocab, tokens, torch.zeros_like(tokens))
        out = self.model.forward_step(batch, self.cache)
        logits = out.logits
        if logits is not None and self.draft_vocab > self.target_vocab:
            logits = logits[:, :self.target_vocab]          # never draft a token the target cannot take
        if logits is not None and self.id_map is not None and logits.shape[-1] != len(self.id_map):
            logits = logits[:, self.id_map]
        return logits, None

    def draft(self, requests: list[DraftRequest]) -> dict[int, Draft]:
        first = [self._catch_up_rows(req) for req in requests]
        if self._one_call():
            return one_call_chain(requests, first, self._step, self.settings, self._chain_call, self.target_vocab,
                                  self.picks)
        return run_chain(requests, first, self._step, self.settings, self.target_vocab, self.id_map)

    def _one_call(self) -> bool:
        """Whether the whole chain can run as one native call: the same vocabulary, and RoPE tables
        indexed by position."""
        model = self.model
        return (model.native is not None and self.draft_vocab == self.target_vocab
                and model.rope.rope_type != "dynamic")

    def _chain_call(self, batch: StepBatch, hidden, n_more: int, pick) -> torch.Tensor:
        """one_call_chain's call: every draft step in one native call, recording the drafts it feeds back (the
        rows of `batch` are recorded already, by _catch_up_rows)."""
        drafts = self.model.native.draft_chain(batch, self.cache, n_more, pick)
        for seg, tokens in zip(batch.segments, drafts.numpy()):
            end = seg.pos0 + seg.n_rows
            self.seen[seg.slot, end:end + n_more] = tokens[:n_more]          # the drafts fed back
        return drafts

    def release(self, slot: int) -> None:
        self.cache.clear(slot)
        self.agreed[slot] = 0

    def max_draft(self) -> int:
        return self.settings.n_max
