"""SpecDriver: the enabled proposers in llama.cpp's fixed precedence, and their bookkeeping.

Mirrors `common_speculative_{begin,process,draft,accept}`: every proposer sees every
begin/process; drafting tries proposers in precedence order and the first non-empty
draft wins for a slot; the caller's cap truncates after drafting; counters follow
llama.cpp's semantics exactly (docs/reference/llamacpp-speculative.md §1.1, §2.1).
"""
from __future__ import annotations

import logging
import time

import numpy as np

from .acceptance_schedule import AcceptanceScheduler
from ..models.tap_store import TapStore
from .base import Draft, DraftRequest, Proposer, ProposerContext, TargetBatch
from .stats import ImplCounters
from .step_cost import StepCostTable, profile_step_cost

log = logging.getLogger("specserve.speculative")


class SpecDriver:
    """What the engine calls: begin (a prompt is in), draft, process (every target batch), verified
    (a slot's verdict), release (a slot freed), step_done (for the scheduler's step cost)."""

    def __init__(self, proposers: list[Proposer], n_slots: int, scheduler: AcceptanceScheduler | None = None,
                 store: TapStore | None = None):
        self.proposers = proposers
        self.counters = {p.name: ImplCounters() for p in proposers}
        self.last_impl: list[Proposer | None] = [None] * n_slots
        self.scheduler = scheduler
        self.n_drafted = [0] * n_slots                 # tokens of the slot's last verified draft
        self.unverified: dict[int, int] = {}           # slot -> first token of a draft the scheduler cut
        self.rows_verified = 0                         # rows the step being run verifies
        self.rows_generating = 0                       # ... of which the generating slots' own
        self.draft_seconds = 0.0                       # ... and its draft call took
        self.store = store                             # where the target's forward writes what drafters read
        # the proposers that look at every target batch (none of the shipped ones: they read the store)
        self.processors = [p for p in proposers if type(p).process is not Proposer.process]
        # the longest draft for a greedy request and for a sampled one (--spec-schedule weighs no longer ones;
        # not a request's remaining budget, which the drafts are truncated to: weighing lengths down to it at the
        # end of requests left a 4-slot engine drafting DFlash at T=0 at 1.17x where it paid 1.30x)
        self.caps = (self.max_draft(), max((p.max_draft_sampled() for p in proposers), default=0))
        # which proposers draft for sampled requests (--spec-draft-n-max-sampled 0: a model drafter does not)
        self.drafts_sampled = [p.max_draft_sampled() > 0 for p in proposers]

    @property
    def enabled(self) -> bool:
        return bool(self.proposers)

    def max_draft(self) -> int:
        return max((p.max_draft() for p in self.proposers), default=0)

    def begin(self, slot: int, prompt: np.ndarray, sampled: bool = False) -> None:
        """A request's prompt is in `slot`; `sampled`: it samples (T > 0) rather than decoding greedily."""
        if self.scheduler is not None:
            self.scheduler.begin(slot, sampled)
        for p in self.proposers:
            t0 = time.perf_counter()
            p.begin(slot, prompt)
            c = self.counters[p.name]
            c.t_begin_us += (time.perf_counter() - t0) * 1e6
            c.n_call_begin += 1

    def process(self, batch: TargetBatch) -> None:
        for p in self.processors:
            p.process(batch)

    def skips_drafting(self, n_slots: int) -> bool:
        """Whether no slot drafts this step whatever the requests: no proposer, or --spec-schedule already
        knows that none of n_slots generating slots drafts (a reused "no"; the step then counts as drafted
        for nothing). The caller then need not build the slots' requests."""
        if not self.proposers:
            return True
        if self.scheduler is None or not self.scheduler.skips(n_slots):
            return False
        self._new_step(n_slots)
        return True

    def _new_step(self, n_rows: int) -> None:
        self.unverified.clear()
        self.rows_verified = self.rows_generating = n_rows
        self.draft_seconds = 0.0

    def draft(self, requests: list[DraftRequest]) -> dict[int, Draft]:
        n_rows = len(requests)
        self._new_step(n_rows)
        if self.scheduler is not None and requests:
            # --spec-schedule: no drafting while it would cost more than it brings, but for one exploring slot
            chosen = self.scheduler.drafting_slots([r.slot for r in requests],
                                                   [self.caps[r.temperature > 0] for r in requests])
            if not chosen:
                return {}
            requests = [requests[i] for i in chosen]
            for r in requests:      # (the engine's requests are made per step: set, not copied)
                r.n_scheduled = self.scheduler.draft_length
        won: dict[int, tuple[Proposer, Draft]] = {}
        pending = list(requests)
        t_start = time.perf_counter()
        for p, sampled_ok in zip(self.proposers, self.drafts_sampled):
            if not pending:
                break
            offered = pending if sampled_ok else [r for r in pending if r.temperature <= 0]
            if not offered:
                continue
            c = self.counters[p.name]
            t0 = time.perf_counter()
            drafts = p.draft(offered)
            c.t_draft_us += (time.perf_counter() - t0) * 1e6
            c.n_call_draft += 1
            still = []
            for req in pending:
                d = drafts.get(req.slot)
                if d is None or not d.tokens:
                    still.append(req)
                    continue
                won[req.slot] = (p, d.truncate(req.n_max) if req.n_max > 0 else d)
            pending = still
        self.draft_seconds = time.perf_counter() - t_start
        if self.scheduler is not None:
            self.scheduler.note_draft_time(self.draft_seconds, len(requests))
            if won:
                self._schedule(won, all(r.temperature <= 0 for r in requests))
        results: dict[int, Draft] = {}
        self.rows_verified = n_rows + sum(len(d.tokens) for _, d in won.values())
        for slot, (p, d) in won.items():
            results[slot] = d
            self.last_impl[slot] = p
            self.n_drafted[slot] = len(d.tokens)
            c = self.counters[p.name]
            c.n_gen_drafts += 1
            c.n_gen_tokens += len(d.tokens)
        return results

    def _schedule(self, won: dict[int, tuple[Proposer, Draft]], greedy: bool) -> None:
        """--spec-schedule: cut the drafts to the lengths worth verifying; remember the ones cut to nothing.
        `greedy`: every request decodes greedily (then any choice of lengths leaves the output as it is)."""
        slots = list(won)
        lengths = self.scheduler.lengths(slots, [won[s][1] for s in slots], greedy)
        for slot, n in zip(slots, lengths.tolist()):
            p, d = won[slot]
            if n == 0:
                # (whether the target's token equals the draft's first is its acceptance for a greedy or a
                # one-hot draft, not for one verified with its q, accepted with min(1, p/q): a draft drawn
                # from p itself is always accepted, yet matches the target's draw only sum(p^2) of the time)
                if d.q_probs is None:
                    self.unverified[slot] = d.tokens[0]
                del won[slot]
            else:
                won[slot] = (p, d.truncate(n))

    def step_done(self, seconds: float, rows: int, tokens: int, finished: bool = False) -> None:
        """The engine finished a step with generating slots, a forward of `rows` rows (prompt chunks
        included) in which the generating slots emitted `tokens` and a request ended (`finished`) or not,
        for --spec-schedule's cost of a step."""
        if self.scheduler is not None:
            self.scheduler.note_step(seconds, self.rows_verified, self.rows_generating, self.draft_seconds,
                                     irregular=rows > self.rows_verified or finished, tokens=tokens)

    def verified(self, slot: int, n_drafted: int, n_accepted: int, first_emitted: int) -> None:
        """A generating slot was verified: n_accepted of its n_drafted tokens were kept, and the target's
        first emitted token was first_emitted (what a draft the scheduler cut would have had to match).
        Not called on steps that skipped drafting (`skips_drafting`): there is nothing to hear."""
        if n_drafted:
            self._accept(slot, n_accepted)
            return
        first = self.unverified.get(slot)
        if first is not None:
            self.scheduler.observe_unverified(slot, first == first_emitted)

    def _accept(self, slot: int, n_accepted: int) -> None:
        impl = self.last_impl[slot]
        if impl is None:
            return
        if self.scheduler is not None:
            self.scheduler.observe(slot, self.n_drafted[slot], n_accepted)
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
        return [self.counters[p.name].line(p.name) for p in self.proposers]

    def stats_dict(self) -> dict:
        return {p.name: self.counters[p.name].as_dict() for p in self.proposers}


class NullDriver(SpecDriver):
    """No speculation: the driver with no proposers, so the engine never asks whether there is one."""

    def __init__(self, n_slots: int = 1):
        super().__init__([], n_slots)


def build_driver(spec_types: list[str], ctx: ProposerContext) -> SpecDriver:
    """The driver for the enabled types, with the batch scheduler when --spec-schedule (or
    --spec-dspark-schedule) asks for one; NullDriver when no type is enabled."""
    from .registry import proposer_class
    if not spec_types:
        return NullDriver(ctx.n_slots)
    proposers = [proposer_class(name)(ctx) for name in spec_types]
    store = TapStore.for_drafters(tuple(t for p in proposers for t in p.taps), ctx.n_slots, ctx.max_ctx,
                                  ctx.target.config.hidden_size)
    for p in proposers:
        p.store = store
    opts = ctx.options
    scheduler = None
    if opts.get("spec_schedule") or opts.get("spec_dspark_schedule"):
        n_positions = max(p.max_draft() for p in proposers)
        path = opts.get("spec_schedule_cost_table") or opts.get("spec_dspark_cost_table")
        table = (StepCostTable.load(path) if path else
                 profile_step_cost(ctx.target, ctx.n_slots, ctx.n_slots * (n_positions + 1)))
        if not path:
            log.info("profiled the target's step cost for 1..%d rows", ctx.n_slots * (n_positions + 1))
        # a model drafter's draft costs more the longer it is (n-gram lookups do not)
        scheduler = AcceptanceScheduler(ctx.n_slots, n_positions, table,
                                        choose_length=any(p.model_drafter for p in proposers))
    return SpecDriver(proposers, ctx.n_slots, scheduler, store)
