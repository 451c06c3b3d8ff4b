"""`--spec-schedule`: how many drafts of each slot to verify, for every spec type.

Speculation costs target rows: at one slot a draft row is almost free, with many slots the
forward is compute-bound and a long, rarely accepted draft (an n-gram match, say) slows every
request in the batch. This generalises DSpark's hardware-aware prefix scheduler (Algorithm 1,
spec/confidence_schedule.py) to drafters without a confidence head: the per-position
acceptance chance of a slot's draft is estimated from that slot's own history (running
averages of P(draft j accepted | drafts before it accepted), started from the averages over
all slots), and drafts are admitted across the batch while the expected tokens per second
(R + sum of admitted survival) * SPS(R + admitted) improve, stopping at the first
non-improvement. A draft that carries a confidence (DSpark) uses it instead.

Lossless: which drafts are verified depends on the history and the confidence head, never on
whether the drafted token itself is right, and cutting a draft short never changes what the
verifier emits for the rows it does verify.

A slot whose drafts are all cut still learns: the first token of its unverified draft is
compared with the token the target emitted (`observe_unverified`), so its estimate recovers
when its drafts start to match again.
"""
from __future__ import annotations

import numpy as np

from .base import Draft
from .confidence_schedule import schedule_prefix_lengths
from .step_cost import StepCostTable

PRIOR = 0.5          # acceptance chance assumed before any observation
SLOT_DECAY = 0.7     # weight of the old estimate per observation (a slot's own history)
GLOBAL_DECAY = 0.95  # the same for the all-slots average new requests start from


class AcceptanceScheduler:
    def __init__(self, n_slots: int, n_positions: int, cost_table: StepCostTable):
        self.cost_table = cost_table
        n_positions = max(1, n_positions)
        self.global_rate = np.full(n_positions, PRIOR)
        self.rate = np.full((n_slots, n_positions), PRIOR)   # P(accept j | j reached), per slot
        self.draft_seconds = 0.0                             # running mean of a whole draft call

    def begin(self, slot: int) -> None:
        self.rate[slot] = self.global_rate

    def note_draft_time(self, seconds: float) -> None:
        self.draft_seconds = seconds if self.draft_seconds == 0 else 0.9 * self.draft_seconds + 0.1 * seconds

    def steps_per_second(self, rows: int) -> float:
        return 1.0 / (1.0 / self.cost_table.steps_per_second(rows) + self.draft_seconds)

    def lengths(self, slots: list[int], drafts: list[Draft]) -> np.ndarray:
        """How many tokens of each draft to verify."""
        n = min(max(len(d.tokens) for d in drafts), self.rate.shape[1])
        confidence = np.zeros((len(drafts), n))
        for i, (slot, d) in enumerate(zip(slots, drafts)):
            k = min(len(d.tokens), n)
            if d.confidence is not None:
                confidence[i, :k] = np.asarray(d.confidence[:k].float().cpu(), dtype=np.float64)
            else:
                confidence[i, :k] = self.rate[slot, :k]
        caps = np.asarray([min(len(d.tokens), n) for d in drafts])
        return schedule_prefix_lengths(confidence, self.steps_per_second, caps)

    def observe(self, slot: int, n_drafted: int, n_accepted: int) -> None:
        """A verified draft: positions before n_accepted were accepted, position n_accepted rejected."""
        reached = min(n_accepted + 1, n_drafted, self.rate.shape[1])
        outcome = (np.arange(reached) < n_accepted).astype(np.float64)
        self._update(slot, reached, outcome)

    def observe_unverified(self, slot: int, first_matched: bool) -> None:
        self._update(slot, 1, np.asarray([1.0 if first_matched else 0.0]))

    def _update(self, slot: int, reached: int, outcome: np.ndarray) -> None:
        if reached <= 0:
            return
        self.rate[slot, :reached] = SLOT_DECAY * self.rate[slot, :reached] + (1 - SLOT_DECAY) * outcome
        self.global_rate[:reached] = GLOBAL_DECAY * self.global_rate[:reached] + (1 - GLOBAL_DECAY) * outcome
