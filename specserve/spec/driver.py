"""SpecDriver: the enabled proposers in llama.cpp's fixed precedence, and their bookkeeping.

Mirrors `common_speculative_{begin,process,draft,accept}`: every proposer sees every
begin/process; drafting tries proposers in precedence order and the first non-empty
draft wins for a slot; the caller's cap truncates after drafting; counters follow
llama.cpp's semantics exactly (reference section 1.1 and 2.1).
"""
from __future__ import annotations

import time

import numpy as np

from .base import Draft, DraftRequest, Proposer, TargetBatch
from .stats import ImplCounters


class SpecDriver:
    def __init__(self, proposers: list[Proposer], n_slots: int):
        self.proposers = proposers
        self.counters = {p.name: ImplCounters() for p in proposers}
        self.last_impl: list[Proposer | None] = [None] * n_slots
        self.taps = tuple(sorted({t for p in proposers for t in p.taps}))
        self.needs_final_hidden = any(p.needs_final_hidden for p in proposers)

    @property
    def enabled(self) -> bool:
        return bool(self.proposers)

    def max_draft(self) -> int:
        return max((p.max_draft() for p in self.proposers), default=0)

    def begin(self, slot: int, prompt: np.ndarray) -> None:
        for p in self.proposers:
            t0 = time.perf_counter()
            p.begin(slot, prompt)
            c = self.counters[p.name]
            c.t_begin_us += (time.perf_counter() - t0) * 1e6
            c.n_call_begin += 1

    def process(self, batch: TargetBatch) -> None:
        for p in self.proposers:
            p.process(batch)

    def draft(self, requests: list[DraftRequest]) -> dict[int, Draft]:
        results: dict[int, Draft] = {}
        pending = list(requests)
        for p in self.proposers:
            if not pending:
                break
            c = self.counters[p.name]
            t0 = time.perf_counter()
            drafts = p.draft(pending)
            c.t_draft_us += (time.perf_counter() - t0) * 1e6
            c.n_call_draft += 1
            still = []
            for req in pending:
                d = drafts.get(req.slot)
                if d is None or not d.tokens:
                    still.append(req)
                    continue
                if req.n_max > 0:
                    d = d.truncate(req.n_max)
                results[req.slot] = d
                self.last_impl[req.slot] = p
                c.n_gen_drafts += 1
                c.n_gen_tokens += len(d.tokens)
            pending = still
        return results

    def accept(self, slot: int, n_accepted: int) -> None:
        impl = self.last_impl[slot]
        if impl is None:
            return
        c = self.counters[impl.name]
        t0 = time.perf_counter()
        c.record_accept(n_accepted)
        impl.accept(slot, n_accepted, False)
        c.n_call_accept += 1
        c.t_accept_us += (time.perf_counter() - t0) * 1e6
        for other in self.proposers:
            if other is not impl:
                other.accept(slot, n_accepted, True)

    def release(self, slot: int) -> None:
        for p in self.proposers:
            p.release(slot)

    def stats_lines(self) -> list[str]:
        return [self.counters[p.name].line(p.stats_name or p.name) for p in self.proposers]

    def stats_dict(self) -> dict:
        return {p.name: self.counters[p.name].as_dict() for p in self.proposers}
