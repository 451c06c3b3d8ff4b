"""Proposers used only by tests: drafts whose quality the test controls.

They are real Proposer subclasses plugged in through the registry, so the engine,
driver and verifier under test are exactly the production ones.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from specserve.speculative.base import Draft, Proposer


class Oracle(Proposer):
    """Drafts the target's own greedy continuation, with some positions corrupted.

    Corruption is seeded from (position, last token), so drafts do not depend on the
    rest of the batch; accepted lengths therefore vary from 0 to the full draft.
    """
    name = "test-oracle"
    corrupt = 0.3
    n_draft = 5

    def draft(self, requests):
        out = {}
        target = self.ctx.target
        for req in requests:
            seq = list(req.tokens) + [req.id_last]
            rng = np.random.default_rng(req.pos0 * 7919 + req.id_last)
            k = int(rng.integers(1, self.n_draft + 1))
            tokens = []
            with torch.inference_mode():
                for _ in range(k):
                    hidden, _ = target.forward_full(torch.tensor([seq]))
                    nxt = int(target.logits(hidden[0, -1:]).argmax())
                    if rng.random() < self.corrupt:
                        nxt = int(rng.integers(0, target.config.vocab_size))
                    tokens.append(nxt)
                    seq.append(nxt)
            out[req.slot] = Draft(tokens)
        return out

    def max_draft(self):
        return self.n_draft


class FixedQ(Proposer):
    """Drafts k tokens sampled i.i.d. from a fixed distribution q (with or without passing q)."""
    name = "test-fixed-q"
    q = None            # set by the test: tensor [V]
    pass_q = True
    k = 2

    def draft(self, requests):
        out = {}
        for req in requests:
            tokens = torch.multinomial(self.q, self.k, replacement=True, generator=req.generator).tolist()
            q_probs = self.q.unsqueeze(0).expand(self.k, -1) if self.pass_q else None
            out[req.slot] = Draft(tokens, q_probs)
        return out

    def max_draft(self):
        return self.k


class TriggeredProposer(Proposer):
    """Base for proposers that act on the requests whose prompt holds `trigger`."""
    trigger = -1

    def __init__(self, ctx):
        super().__init__(ctx)
        self.flagged: set[int] = set()

    def begin(self, slot, prompt):
        if self.trigger in prompt:
            self.flagged.add(slot)
        else:
            self.flagged.discard(slot)

    def release(self, slot):
        self.flagged.discard(slot)

    def max_draft(self):
        return 1


class FaultyForTrigger(TriggeredProposer):
    """For requests whose prompt holds `trigger`, drafts with a malformed q, so verifying that
    request raises (at temperature > 0); other requests get no draft. Tests error isolation."""
    name = "test-faulty"
    trigger = 319

    def draft(self, requests):
        return {req.slot: Draft([5], q_probs=torch.zeros(1, 3)) for req in requests if req.slot in self.flagged}


class SlowForTrigger(TriggeredProposer):
    """Spends `delay` seconds in every step that runs a request whose prompt holds `trigger` (and never
    drafts), so that request takes seconds however fast the machine is: for timeout and abort tests."""
    name = "test-slow"
    trigger = 318
    delay = 0.002

    def process(self, batch):
        if any(seg.slot in self.flagged for seg in batch.step.segments):
            time.sleep(self.delay)

    def draft(self, requests):
        return {}
