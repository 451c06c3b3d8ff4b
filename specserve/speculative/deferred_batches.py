"""Target batches a drafter keeps until a slot's context is needed, then replays slot by slot.

A model drafter's per-step bookkeeping (which of the forward's rows extend each slot's context)
costs tens of µs of Python per step. With --spec-schedule at high concurrency most steps do not
draft, and a request often ends before its slot drafts again, so doing that work eagerly is
mostly waste. `add` only keeps what a drafter may read later (the rows' tokens, taps and final
hidden states; not the logits); `catch_up(slot)` replays the batches the slot has not seen, in
order, before anything reads or changes the slot's state (a draft, an accept). A batch is dropped
once every slot with a request has replayed it; past LIMIT kept batches every slot is caught up,
so memory stays bounded.
"""
from __future__ import annotations

from typing import Any, Callable

from ..models.step_batch import StepBatch
from .base import TargetBatch

LIMIT = 256          # batches kept before every slot is caught up


class KeptBatch:
    """What a drafter may read of a target batch (not its logits): the rows, the taps and the final
    hidden states; its segments by slot (built when first replayed), and what the drafter derived from
    it once for all its slots (`derived`, e.g. the token ids as numpy). Plain attributes, no copies:
    one is made on every step, right after the forward, where each Python operation costs µs."""
    __slots__ = ("step", "taps", "tap_layers", "final_hidden", "is_prompt", "by_slot", "derived")

    def __init__(self, batch: TargetBatch):
        out = batch.out
        self.step: StepBatch = batch.step
        self.taps, self.tap_layers, self.final_hidden = out.taps, out.tap_layers, out.final_hidden
        self.is_prompt = batch.is_prompt
        self.by_slot: dict | None = None
        self.derived: Any = None


class DeferredBatches:
    def __init__(self, n_slots: int, replay: Callable[[KeptBatch, object, int], None]):
        """`replay(kept, segment, slot)` applies one batch's segment of one slot."""
        self.replay = replay
        self.kept: list[KeptBatch] = []
        self.base = 0                                   # number of the first kept batch
        self.next: list[int | None] = [None] * n_slots  # per slot: the next batch to replay (None: no request)

    def add(self, batch: TargetBatch) -> None:
        segments = batch.step.segments
        if not segments:
            return
        number = self.base + len(self.kept)
        for seg in segments:
            if self.next[seg.slot] is None:             # a new request's first rows
                self.next[seg.slot] = number
        self.kept.append(KeptBatch(batch))
        if len(self.kept) > LIMIT:
            for slot in range(len(self.next)):
                self.catch_up(slot)

    def catch_up(self, slot: int) -> None:
        if self.next[slot] is None:
            return
        for i in range(self.next[slot] - self.base, len(self.kept)):
            kept = self.kept[i]
            if kept.by_slot is None:
                kept.by_slot = {seg.slot: seg for seg in kept.step.segments}
            seg = kept.by_slot.get(slot)
            if seg is not None:
                self.replay(kept, seg, slot)
        self.next[slot] = self.base + len(self.kept)
        self._trim()

    def skip(self, slot: int) -> None:
        """The slot's request ended: it needs none of the kept batches until its next one."""
        self.next[slot] = None
        self._trim()

    def _trim(self) -> None:
        """Drop the batches every slot with a request has replayed."""
        pending = [n for n in self.next if n is not None]
        done = (min(pending) if pending else self.base + len(self.kept)) - self.base
        if done > 0:
            del self.kept[:done]
            self.base += done
