"""`--spec-schedule`: how many drafts of each slot to verify, for every spec type.

Speculation costs target rows: at one slot a draft row is almost free, with many slots the
forward is compute-bound and a long, rarely accepted draft (an n-gram match, say) slows every
request in the batch. This generalises DSpark's hardware-aware prefix scheduler (Algorithm 1,
speculative/confidence_schedule.py) to drafters without a confidence head: the per-position
acceptance chance of a slot's draft is estimated from that slot's own history (decayed
counts of draft tokens accepted out of those reached, one rate for every position, started
from the counts over all slots), and drafts are admitted across the batch while the expected tokens per second
(R + sum of admitted survival) * SPS(R + admitted) improve, stopping at the first
non-improvement. A draft that carries a confidence (DSpark) uses it instead.

Lossless: which drafts are verified depends on the history and the confidence head, never on
whether the drafted token itself is right, and cutting a draft short never changes what the
verifier emits for the rows it does verify.

A slot whose drafts are all cut still learns: the first token of its unverified draft is
compared with the token the target emitted (`observe_unverified`), so its estimate recovers
when its drafts start to match again.

When even the best admissible drafts would not pay for the draft call itself (a model
drafter at high concurrency), the step does not draft at all (`drafting_slots`), except for
exploring steps at growing intervals, which keep the estimates and the draft time current. The
first draft and every exploring step draft for ONE slot, the one that drafted longest ago: a drafter catches up on
everything its slot produced since it last drafted, and a request that ends before its slot is
explored again never costs that catch-up. The draft time is estimated per number of drafting
slots (a count not measured yet is priced linearly from a smaller one, which overestimates it).
"""
from __future__ import annotations

import numpy as np

from .base import Draft
from .confidence_schedule import schedule_prefix_lengths
from .step_cost import StepCostTable

PRIOR = 0.5          # acceptance chance assumed before any observation ...
PRIOR_WEIGHT = 2.0   # ... worth this many observations
DECAY = 0.9          # weight kept by older observations at each verification of the slot
EXPLORE_EVERY = 8    # while drafting does not pay, still draft after this many steps (fresh estimates),
EXPLORE_MAX = 128    # ... the gap doubling up to this while it keeps not paying
DECIDE_EVERY = 4     # the draft-or-not decision is re-evaluated every this many steps (estimates move slowly)


class AcceptanceScheduler:
    def __init__(self, n_slots: int, n_positions: int, cost_table: StepCostTable):
        self.cost_table = cost_table
        self.n_positions = max(1, n_positions)
        # per slot, decayed counts of draft tokens accepted / tried (a tried token was reached:
        # every draft token before it was accepted); row n_slots pools all slots for new requests
        self.accepted = np.zeros(n_slots + 1)
        self.tried = np.zeros(n_slots + 1)
        self.draft_seconds: dict[int, float] = {}            # drafting slots -> running mean of a draft call
        self.other_seconds = 0.0                             # running mean of the rest of a step
        self.last_drafted = np.full(n_slots, -1)             # decision number of each slot's last draft
        self.n_decisions = 0
        self.explore_gap = EXPLORE_EVERY
        self.next_explore = 0
        self.last_decision: bool | None = None              # None: not worked out yet
        self.decided_for = (0, 0)                            # (slots, observations) it was worked out for
        self.n_observed = 0

    def rate(self, slot: int) -> float:
        """P(a draft token is accepted | the tokens before it were), the same at every position:
        positions a slot's drafts rarely reach would otherwise never be estimated."""
        return (self.accepted[slot] + PRIOR * PRIOR_WEIGHT) / (self.tried[slot] + PRIOR_WEIGHT)

    def begin(self, slot: int) -> None:
        pooled = len(self.accepted) - 1
        scale = min(1.0, 4.0 / max(self.tried[pooled], 1e-9))       # start with the weight of ~4 tokens
        self.accepted[slot] = self.accepted[pooled] * scale
        self.tried[slot] = self.tried[pooled] * scale

    def note_draft_time(self, seconds: float, n_slots: int) -> None:
        """Running estimate of a steady-state draft call for n_slots slots. A call that catches a
        drafter up on many tokens (the first after a prompt, or after steps without drafting) is slow
        once and says little about the next ones, so slower calls move the estimate little and much
        slower ones not at all; faster calls move it quickly."""
        known = self.draft_seconds.get(n_slots, 0.0)
        if known == 0:
            self.draft_seconds[n_slots] = seconds
        elif seconds < known:
            self.draft_seconds[n_slots] = 0.5 * known + 0.5 * seconds
        elif seconds < 3 * known:
            self.draft_seconds[n_slots] = 0.9 * known + 0.1 * seconds

    def draft_time(self, n_slots: int) -> float:
        """Estimated draft call for n_slots slots (0 before any was measured)."""
        known = self.draft_seconds
        if not known or n_slots <= 0:
            return 0.0
        if n_slots in known:
            return known[n_slots]
        below = [k for k in known if k < n_slots]
        if below:
            k = max(below)
            return known[k] * n_slots / k
        return known[min(known)]

    def note_step(self, seconds: float, rows: int, n_drafted: int) -> None:
        """A whole engine step that verified `rows` rows, drafting for n_drafted slots, took `seconds`:
        what the forward and the drafting do not explain (sampling, verification, streaming) is a
        fixed cost per step."""
        forward = 1.0 / self.cost_table.steps_per_second(rows)
        other = max(0.0, seconds - forward - self.draft_time(n_drafted))
        self.other_seconds = 0.9 * self.other_seconds + 0.1 * other

    def drafting_slots(self, slots: list[int], caps: list[int]) -> list[int]:
        """Which of these slots draft this step (indices into `slots`): all of them while drafting is
        expected to pay for the draft call itself (the expected tokens per second of a step that
        drafts and verifies what `lengths` would keep at each slot's estimated rate, against a step
        that only decodes); none while it is not, except that a step still drafts now and then for
        the slot that drafted longest ago (after EXPLORE_EVERY steps, then twice as long each time up
        to EXPLORE_MAX), so the estimates and the draft time stay measured. The answer is worked out
        again when the number of slots changes, and every DECIDE_EVERY steps when there are new
        observations; in between it is reused."""
        self.n_decisions += 1
        chosen = list(range(len(slots)))
        if not self.draft_seconds:              # the first draft measures a call for one slot
            chosen = [int(np.argmin(self.last_drafted[slots]))]
        elif self.last_decision is False and self.n_decisions >= self.next_explore:
            self.next_explore = self.n_decisions + self.explore_gap
            self.explore_gap = min(2 * self.explore_gap, EXPLORE_MAX)
            chosen = [int(np.argmin(self.last_drafted[slots]))]
        elif (self.last_decision is not None and self.decided_for[0] == len(slots)
              and (self.n_decisions % DECIDE_EVERY or self.decided_for[1] == self.n_observed)):
            chosen = chosen if self.last_decision else []       # nothing new to decide on
        else:
            self.decided_for = (len(slots), self.n_observed)
            was = self.last_decision
            self.last_decision = self._drafting_pays(slots, caps)
            if self.last_decision:
                self.explore_gap = EXPLORE_EVERY
            else:
                if was is not False:            # drafting just stopped paying: explore after EXPLORE_EVERY steps
                    self.next_explore = self.n_decisions + self.explore_gap
                chosen = []
        for i in chosen:
            self.last_drafted[slots[i]] = self.n_decisions
        return chosen

    def _drafting_pays(self, slots: list[int], caps: list[int]) -> bool:
        n = min(max(caps), self.n_positions)
        rates = np.asarray([self.rate(s) for s in slots])
        confidence = np.repeat(rates[:, None], n, axis=1)
        n_rows = len(slots)
        kept = schedule_prefix_lengths(confidence, self._rate_for(n_rows), np.minimum(caps, n))
        gain = sum(float(np.sum(r ** np.arange(1, k + 1))) for r, k in zip(rates, kept))
        plain = n_rows / (1.0 / self.cost_table.steps_per_second(n_rows) + self.other_seconds)
        return (n_rows + gain) * self.steps_per_second(n_rows + int(kept.sum()), n_rows) > plain

    def steps_per_second(self, rows: int, n_drafting: int) -> float:
        """Whole engine steps per second at `rows` verified rows with n_drafting slots drafting."""
        return 1.0 / (1.0 / self.cost_table.steps_per_second(rows) + self.draft_time(n_drafting) + self.other_seconds)

    def _rate_for(self, n_drafting: int):
        return lambda rows: self.steps_per_second(rows, n_drafting)

    def lengths(self, slots: list[int], drafts: list[Draft]) -> np.ndarray:
        """How many tokens of each draft to verify."""
        n = min(max(len(d.tokens) for d in drafts), self.n_positions)
        confidence = np.zeros((len(drafts), n))
        for i, (slot, d) in enumerate(zip(slots, drafts)):
            k = min(len(d.tokens), n)
            if d.confidence is not None:
                confidence[i, :k] = np.asarray(d.confidence[:k].float().cpu(), dtype=np.float64)
            else:
                confidence[i, :k] = self.rate(slot)
        caps = np.asarray([min(len(d.tokens), n) for d in drafts])
        return schedule_prefix_lengths(confidence, self._rate_for(len(drafts)), caps)

    def observe(self, slot: int, n_drafted: int, n_accepted: int) -> None:
        """A verified draft: n_accepted tokens accepted, then (if any was left) one rejected."""
        self._update(slot, n_accepted, min(n_accepted + 1, n_drafted))

    def observe_unverified(self, slot: int, first_matched: bool) -> None:
        self._update(slot, int(first_matched), 1)

    def _update(self, slot: int, accepted: int, tried: int) -> None:
        self.n_observed += 1
        for row in (slot, len(self.accepted) - 1):
            self.accepted[row] = DECAY * self.accepted[row] + accepted
            self.tried[row] = DECAY * self.tried[row] + tried
