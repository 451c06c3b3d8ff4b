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
exploring steps, which keep the estimates current. An exploring step drafts for ONE slot, as far
as drafting would pay in well predicted text (the most it can learn per exploration), the one
that drafted last: a drafter catches up on everything its slot produced since it last drafted, so
that slot has the least to catch up on (the rates of all slots start from what every slot saw).
Explorations come at least EXPLORE_EVERY steps apart (but for the ones that pay, below), and never
before the steps since the last one took what it cost divided by EXPLORE_SHARE x upside, where the
upside is what drafting would bring over plain decoding in a run of well predicted text (speedup at
GOOD_RATE, less 1, at most 1). Exploring is worth much where drafting could win much (one slot; acceptance comes in bursts:
a loop the model falls into is drafted almost perfectly) and little where it could win little (a
slow drafter at high concurrency); where it could not win at all, there is none. An exploration that
paid for itself (more tokens than plain steps would emit in its time, with its draft call priced as a
caught-up one) is followed by another at once, and a due decision comes before it: one exploration in
a burst of well predicted text is one observation, and one at a time after an unlucky start kept a
1-slot DSpark engine from drafting for a whole run where drafting paid 1.4x.

The decision also picks the draft length: for model drafters, whose draft call costs more the more
tokens it drafts, the expected speedup is worked out at each candidate length up to the longest the
requests can draft (`caps`: the driver's, which know --spec-draft-n-max-sampled) with the measured
draft time at that length (draft_cost.py), and the best length goes to the drafters with the
requests (`DraftRequest.n_scheduled`: chains stop there, a block drafter drafts a shorter block).
At 4 slots on the bundled model Algorithm 1 keeps 2-3 tokens of a DSpark block of 6, whose second
half costs as much to draft as the first. A slot count without steady draft-time measurements is
measured first, at the longest length, when no larger count is: its first steps draft for every slot
(the first catches up, the next MEASURED_AFTER are steady). A first "no" at a slot count, decided on its
own measurement, is checked once: RECHECK_AFTER seconds of steps later the count is measured again and
decided on the new timings (its first drafting steps run slow: an engine's first calls, a server's
first requests). The first timed plain steps are news for a "no" too (until then a plain step's rest
is priced at 0, and in a server, which streams each token, it is not).

A step whose answer is a reused "no" is known before the slots' draft requests are built
(`skips`): the engine skips building them, which at many slots is most steps.

The model's inputs are timings, and on a shared or throttled machine they drift: the cost table is
profiled once, at start-up. So what drafting actually achieves has the last word: the seconds per
emitted token of every step while the answer is "yes" (drafting steps, the plain checks and the steps
after them that catch the drafter up: all of them are what drafting costs; not the catch-up after a
longer pause, which is what the "no" before it cost) and of steps without
drafting are kept per slot count (realized_records.py), and while both are recent and long enough the
yes-or-no follows them instead of the model (within REALIZED_BAND). Once the drafting record is stale
the model decides again, its expected speedup scaled by what the records achieved over it when last
compared (a model that was too optimistic is not believed the next time either; the scale fades back
to 1, so a wrong "no" ends, and it also scales the exploring budget); if it says yes, the next few drafting steps refresh the record. While it drafts with no recent record of steps without drafting,
REALIZED_MIN steps in PLAIN_EVERY do not, to make one (left alone the model drafted at 4 slots where
drafting ran at 0.6-0.8x); the first step without drafting after a drafting one is not timed (it runs on
caches the draft call cooled). While drafting, each timed step is news: a "yes" is worked out again every
DECIDE_EVERY steps even when no draft was verified (a drafter that finds nothing to draft). The
exploring budget is priced at the rate explorations saw where that is below GOOD_RATE (`upside_seen`).
"""
from __future__ import annotations

import math

import numpy as np

from .base import Draft
from .confidence_schedule import schedule_prefix_lengths
from .draft_cost import MEASURED_AFTER, DraftCost
from .realized_records import RealizedRecords
from .step_cost import StepCostTable

PRIOR = 0.5          # acceptance chance assumed before any observation ...
PRIOR_WEIGHT = 2.0   # ... worth this many observations
DECAY = 0.97         # weight kept by older observations at each verification of the slot
EXPLORE_EVERY = 8    # while drafting does not pay, still draft after this many steps (fresh estimates), ...
EXPLORE_SHARE = 0.05 # ... spending at most this share of the time times the upside (below) on exploring
GOOD_RATE = 0.9      # the upside: the speedup drafting would bring at this rate (a well predicted run), less 1 ...
EXPLORE_DECAY = 0.8  # ... but priced at the rate explorations saw when lower (each older one weighing this much
                     # less; at first 2 tokens at GOOD_RATE) ...
EXPLORE_FLOOR = 0.1  # ... though never below this share of the upside
DECIDE_EVERY = 4     # the draft-or-not decision is re-evaluated every this many steps (estimates move slowly)
KEEP_DRAFTING = 0.95 # while drafting, it stops only below this expected speedup (the model's estimate) ...
REALIZED_BAND = (1.0, 1.03)  # ... or below the first realized speedup, and starts only above the second (the
                     # records are measured, but their plain steps, taken between drafting ones, run slower
                     # than a stretch without drafting: at 4 slots and T=1, a band of 0.95-1.0 drafted on
                     # where whole runs lost)
REALIZED_MIN = 3     # a plain check is steps without drafting REALIZED_MIN in a row (the first is not counted) ...
PLAIN_EVERY = 16     # ... and while drafting with no recent record of steps without it, one comes every this many
RECHECK_AFTER = 0.25  # seconds of steps after a slot count's first "no", on its own measurement, it is measured again
                     # (its few drafting steps then cost at most ~2 % of the time)
DECISIVE = 1.25      # a calibrated expected speedup above this needs no plain checks (`_decisive`)
OTHER_FIRST = 3      # the rest of a step (`other`): its first this many samples of each kind keep the lowest
RESTART = 1.15       # a calibrated estimate above this starts drafting again once the records are stale (the
                     # estimate moves by 10-20 % with the rates' noise: at 1.0, a 4-slot engine at T=1 tried
                     # drafting again every ~250 decisions, each try first catching every slot up)


class AcceptanceScheduler:
    def __init__(self, n_slots: int, n_positions: int, cost_table: StepCostTable, choose_length: bool = True):
        self.cost_table = cost_table
        self.n_positions = max(1, n_positions)
        # the draft lengths weighed (draft_cost.py): all up to 8, then a geometric few; only the longest
        # for drafters whose draft costs the same at any length (the n-gram ones)
        self.candidate_lengths = sorted({n for n in (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48)
                                         if n < self.n_positions} | {self.n_positions}) \
            if choose_length else [self.n_positions]
        # per slot, decayed counts of draft tokens accepted / tried (a tried token was reached:
        # every draft token before it was accepted); rows n_slots and n_slots + 1 pool the slots'
        # greedy and sampled requests, where new requests of that kind start (acceptance at T > 0
        # is much lower than at T=0)
        # (plain lists: every step reads a few of them, where numpy scalars cost µs)
        self.accepted = [0.0] * (n_slots + 2)
        self.tried = [0.0] * (n_slots + 2)
        self.pool = [n_slots] * n_slots                      # each slot's pooled row
        self.draft_cost = DraftCost()                        # measured draft calls by (slots, length)
        # running means of the rest of a step (sampling, verification, bookkeeping), for steps that verify
        # no drafts [0] and steps that do [1]: verifying and accepting drafts costs ~0.1 ms more at 4 slots
        # (10 % of a step), and one mean for both made drafting look cheaper than it is
        self.other = [0.0, 0.0]
        self.other_samples = [0, 0]                          # ... and how many steps each has seen
        self.recheck_at: dict[int, float] = {}               # slots -> when (elapsed) a first "no" is checked (-1: now)
        self.last_drafted = [-1] * n_slots                   # decision number of each slot's last draft
        self.n_decisions = 0
        self.steady = False                                  # this step's drafting slots all drafted the step before
        self.next_explore = 0
        self.upside = 1.0                                    # speedup at GOOD_RATE, less 1 (worked out with a "no")
        self.upside_seen = 1.0                               # ... at the rate explorations saw (at most GOOD_RATE)
        self.exploring = False                               # this step explores
        self.draft_length = self.n_positions                 # how many tokens this step's drafts need at most
        self.paying_length = self.n_positions                # ... when drafting (worked out with "pays")
        self.upside_length = self.n_positions                # ... when exploring: where the upside is
        self.elapsed = 0.0                                   # seconds of all steps noted
        self.explore_ready_at = 0.0                          # ... before which no exploration starts
        self.answers: dict[int, bool] = {}                   # slots -> the last answer for that many
        self.decided_for = (0, 0)                            # (slots, observations) it was worked out for
        self.n_observed = 0                                  # observations: verified drafts, and timed steps while drafting
        self.drafted_last = False                            # the step before this one drafted
        # (slots, drafting) -> what the steps of a "yes" and the steps without drafting achieved (module docstring)
        self.realized = RealizedRecords()
        self.step_arms: tuple = ()                           # the records this step counts in: (slots, drafting)
        self.explored_slot = -1                              # the slot the last exploring step drafted for
        self.explore_seen = [GOOD_RATE * 2, 2.0]             # decayed draft tokens accepted / tried when exploring
        self.plain_check_at = -REALIZED_MIN                  # decision number where the last plain check began
        self.model_speedup = 1.0                             # the model's expected speedup at the last decision

    @property
    def last_decision(self) -> bool | None:
        """The answer for the slot count last decided for (None: not worked out yet)."""
        return self.answers.get(self.decided_for[0])

    def rate(self, slot: int) -> float:
        """P(a draft token is accepted | the tokens before it were), the same at every position:
        positions a slot's drafts rarely reach would otherwise never be estimated."""
        return (self.accepted[slot] + PRIOR * PRIOR_WEIGHT) / (self.tried[slot] + PRIOR_WEIGHT)

    def optimistic_rate(self, slot: int) -> float:
        """The rate one standard error up: drafting is how the estimate learns, not drafting teaches
        nothing, so a thin history should not stop it."""
        r, n = self.rate(slot), self.tried[slot] + PRIOR_WEIGHT
        return min(0.99, r + math.sqrt(r * (1 - r) / n))

    def begin(self, slot: int, sampled: bool = False) -> None:
        """A new request in `slot`: its estimate starts from the requests of its kind (greedy or sampled)."""
        pooled = self.pool[slot] = len(self.pool) + int(sampled)
        scale = min(1.0, 4.0 / max(self.tried[pooled], 1e-9))       # start with the weight of ~4 tokens
        self.accepted[slot] = self.accepted[pooled] * scale
        self.tried[slot] = self.tried[pooled] * scale
        self.last_drafted[slot] = -1            # its first draft catches up on the prompt

    def note_draft_time(self, seconds: float, n_slots: int) -> None:
        """This step's draft call, for n_slots slots at self.draft_length, took `seconds` (draft_cost.py)."""
        self.draft_cost.note(seconds, n_slots, self.draft_length, self.steady)

    def other_seconds(self, drafted: bool) -> float:
        """The rest of a step that verifies drafts (or not). A drafting step not measured yet costs what a plain
        one does, but never the other way round: plain steps priced at the drafting steps' 0.5 ms made a fresh
        4-slot engine draft on at 1.35x by the model where drafting ran at 0.65x (a plain step's rest is 0.03 ms)."""
        return self.other[1] or self.other[0] if drafted else self.other[0]

    def draft_time(self, n_slots: int, length: int | None = None) -> float:
        """Estimated draft call for n_slots slots and drafts of `length` tokens (default: the longest)."""
        return self.draft_cost.seconds(n_slots, self.n_positions if length is None else length)

    def note_step(self, seconds: float, rows: int, base_rows: int, draft_seconds: float,
                  irregular: bool = False, tokens: int = 0) -> None:
        """A whole engine step took `seconds`: `rows` verified rows, `base_rows` of them the slots' own,
        `draft_seconds` drafting, and the generating slots emitted `tokens`. What the forward and the
        drafting do not explain (sampling, verification, streaming) is a fixed cost per step, learnt
        from regular steps, as are the realized records: an `irregular` step had prompt rows (its forward
        is longer than the table's) or ended a request (its text and callbacks; a request's last step
        never drafts, so at 4 slots and T=1 those steps made plain steps look 20 % dearer than they are).
        What an exploring step cost beyond a plain one spaces the next exploration."""
        self.elapsed += seconds
        arms, self.step_arms = self.step_arms, ()
        if tokens > 0 and not irregular:
            self.realized.note(arms, seconds, tokens, self.n_decisions)
            if arms and self.last_decision:     # what drafting achieves is news to a "yes" (a "no" waits to explore)
                self.n_observed += 1
        arm = int(rows > base_rows)
        # (a drafting step learns only when steady: a catch-up step's forward runs on caches its draft call
        # cooled, and an engine's first drafting step, with its first-call costs, made the rest 0.5 ms at 2
        # slots where it is 0.1 ms; taken as the mean, that said "no" for good, since only drafting corrects it)
        if not irregular and (arm == 0 or self.steady):
            other = max(0.0, seconds - 1.0 / self.cost_table.steps_per_second(rows) - draft_seconds)
            mean, seen = self.other[arm], self.other_samples[arm]
            self.other_samples[arm] += 1
            if arm == 0 and seen < OTHER_FIRST:
                # news for a "no" decided before a plain step was timed (in a server a plain step's rest, its
                # streaming, is 10x what it is in process: priced at 0, a 1-slot server stopped drafting for good)
                self.n_observed += 1
            # the first few take the lowest (start-up spikes); then a finishing request is a spike, not a trend
            weight = 1.0 if seen == 0 or (seen < OTHER_FIRST and other < mean) else \
                0.2 if other < mean else 0.02
            self.other[arm] = (1 - weight) * mean + weight * other
        if self.exploring:
            self.exploring = False
            plain = 1.0 / self.cost_table.steps_per_second(base_rows) + self.other_seconds(False)
            # with its drafter caught up (a first exploration's draft call as a steady one's), against plain steps
            # for the tokens it emitted: an exploration into well predicted text pays for itself but for its
            # catch-up, and the next one, right after, has none
            draft = draft_seconds if self.steady else self.draft_time(1, self.draft_length)
            caught_up = seconds - draft_seconds + draft - plain * max(tokens, base_rows) / base_rows
            if not irregular and caught_up <= 0:
                self.next_explore = self.n_decisions + 1
                return
            cost = draft_seconds if irregular else max(0.0, seconds - plain)
            # (an upside the realized records did not bear out buys proportionally less exploring, and so does
            # one that explorations did not find)
            budget = EXPLORE_SHARE * min(self.upside_seen, 1.0) * self.calibration_ratio(self.decided_for[0])
            self.explore_ready_at = self.elapsed + cost / budget if budget > 0 else float("inf")

    def skips(self, n_slots: int) -> bool:
        """Whether this step is known not to draft before asking which slots do: the answer for this
        many slots is a reused "no" (no exploring, no new decision due). The step counts as decided;
        the engine then skips building the slots' draft requests (at many slots most steps are these)."""
        if self._due(n_slots) != "reuse" or self.last_decision:
            return False
        self.n_decisions += 1
        self.steady = False
        self.step_arms = () if self.drafted_last else ((n_slots, False),)
        self.drafted_last = False
        return True

    def _due(self, n_slots: int) -> str:
        """What the next decision for n_slots slots does: "measure" (draft for every slot: this many
        slots' draft call is not measured yet; fewer do not say), "explore", "reuse" the last answer
        (nothing new to decide on) or "decide"."""
        n = self.n_decisions + 1
        if n_slots > self.draft_cost.most_slots:
            return "measure"
        if self.recheck_at.get(n_slots, float("inf")) <= self.elapsed:
            return self._recheck(n_slots)
        if self.last_decision is not None and self.decided_for[0] == n_slots and \
                (n % DECIDE_EVERY or self.decided_for[1] == self.n_observed):
            # (a due decision comes first: explorations that pay follow each other, each with news)
            explore = self.last_decision is False and self.upside > 0 and n >= self.next_explore and \
                self.elapsed >= self.explore_ready_at
            return "explore" if explore else "reuse"
        return "decide"

    def _recheck(self, n_slots: int) -> str:
        """The check of a first "no" (`recheck_at`): this slot count's draft calls and drafting steps timed afresh
        (measured as at first), then a decision on them."""
        if self.recheck_at[n_slots] >= 0:
            self.recheck_at[n_slots] = -1.0
            self.draft_cost.forget(n_slots)
            self.other_samples[1] = 0
        if self.draft_cost.steady_calls.get(n_slots, 0) < MEASURED_AFTER:
            return "measure"
        del self.recheck_at[n_slots]
        self.decided_for = (0, self.n_observed)
        return "decide"

    def drafting_slots(self, slots: list[int], caps: list[int]) -> list[int]:
        """Which of these slots draft this step (indices into `slots`): all of them while this slot
        count's draft call is not measured yet, or while drafting is expected to pay for the draft
        call itself (the expected tokens per second of a step that drafts and verifies what `lengths`
        would keep at each slot's estimated rate, against a step that only decodes, at the draft
        length where that is best); none while it is not, except for exploring steps (module
        docstring). The answer is worked out again when the number of slots changes, and every
        DECIDE_EVERY steps when there are new observations; in between it is reused."""
        due = self._due(len(slots))
        self.n_decisions += 1
        chosen = list(range(len(slots)))
        self.draft_length = self.paying_length
        if due == "measure":
            self.draft_length = max(caps)
        elif due == "explore":
            self.next_explore = self.n_decisions + EXPLORE_EVERY
            self.exploring = True
            self.draft_length = self.upside_length      # as far as would pay in well predicted text
            chosen = [max(range(len(slots)), key=lambda i: self.last_drafted[slots[i]])]
            self.explored_slot = slots[chosen[0]]
        elif due == "reuse":
            chosen = chosen if self.last_decision and not self._plain_check(len(slots)) else []
        else:
            self.decided_for = (len(slots), self.n_observed)
            # the hysteresis starts from this slot count's last answer (a request that finished for a step
            # must not turn a 4-slot "no" into a "yes" that the 3-slot model gave); a slot count's first
            # answer is worked out as if drafting (the model is not calibrated yet, and the records need
            # drafting steps: a first "no" at 0.97x kept a fresh 4-slot engine from drafting at T=0 where it
            # paid 1.25x)
            first = len(slots) not in self.answers
            was = self.answers.get(len(slots), True)
            model_says = self._drafting_pays(slots, caps, was)
            self.answers[len(slots)] = self._calibrated(len(slots), model_says, was)
            if first and not self.last_decision and len(slots) in self.draft_cost.steady:
                # a first "no" rests on this slot count's first drafting steps, which run slow (an engine's
                # first calls; in a server, its first requests): priced so, a 1-slot server said "no" to DSpark
                # for good where drafting paid 1.26x. Only a "no" on its own measurement is checked, once.
                self.recheck_at[len(slots)] = self.elapsed + RECHECK_AFTER
            self.draft_length = self.paying_length
            if not self.last_decision:
                self._price_exploring(len(slots), self._longest(caps))
                if was is not False:            # drafting just stopped paying: explore after EXPLORE_EVERY steps
                    self.next_explore = self.n_decisions + EXPLORE_EVERY
                chosen = []
            elif self._plain_check(len(slots)):
                chosen = []
        if chosen:      # what the drafts can be (sampled requests draft less: --spec-draft-n-max-sampled)
            self.draft_length = min(self.draft_length, max(caps[i] for i in chosen))
        self.steady = bool(chosen) and all(self.last_drafted[slots[i]] == self.n_decisions - 1 for i in chosen)
        # a slot catching up after a pause longer than a plain check: what the "no" before cost, not drafting
        resumed = any(0 <= self.last_drafted[slots[i]] < self.n_decisions - REALIZED_MIN - 1 for i in chosen)
        for i in chosen:
            self.last_drafted[slots[i]] = self.n_decisions
        # the realized records (module docstring): every step of a "yes" (its plain checks, the catch-up after
        # them and a new request's first draft, which reads its prompt, included: they are what drafting
        # costs) but the catch-up after a longer pause (counted, a 16-step record after a 250-step pause said
        # 0.67x at 2 slots where drafting paid 1.17x, and the "no" it gave held for the run), and steps without
        # drafting but the first after a drafting one (it runs on caches the draft call cooled: at 4 slots and
        # T=1 such steps cost 0.275 ms a token against 0.206 in a stretch without drafting)
        n = len(slots)
        arms = [(n, True)] if self.last_decision and due in ("reuse", "decide") and not resumed else []
        if not chosen and not self.drafted_last and due != "measure":
            arms.append((n, False))
        self.step_arms = tuple(arms)
        self.drafted_last = bool(chosen)
        return chosen

    def _plain_check(self, n_slots: int) -> bool:
        """Whether this drafting step stays plain to record what steps without drafting achieve."""
        if self.realized.plain_is_recent(n_slots, self.n_decisions):
            return False
        since = self.n_decisions - self.plain_check_at
        if since < REALIZED_MIN:                # a check is REALIZED_MIN steps in a row
            return True
        if since < PLAIN_EVERY or self._decisive(n_slots):
            return False
        self.plain_check_at = self.n_decisions
        return True

    def _decisive(self, n_slots: int) -> bool:
        """Whether the model, scaled by what drafting achieved when last compared at this slot count, says
        drafting pays by more than its errors (DECISIVE): then no plain checks (at one slot they were 12 % of the
        steps, each followed by a catch-up, and cost a drafter paying 1.4x about 3 %)."""
        return self.realized.compared(n_slots) and self.model_speedup * self.calibration_ratio(n_slots) > DECISIVE

    def realized_speedup(self, n_slots: int) -> float | None:
        """What recent steps achieved at this slot count (realized_records.py); None while thin or old."""
        return self.realized.speedup(n_slots, self.n_decisions)

    def _calibrated(self, n_slots: int, model_says: bool, drafting: bool) -> bool:
        """The draft-or-not answer: what recent drafting and plain steps achieved, while both are recent;
        after that the model's expected speedup times what they achieved over it when last compared (a
        model that promised 2x where drafting achieved 0.8x is not believed the next time either)."""
        realized = self.realized_speedup(n_slots)
        if realized is not None:
            self.realized.calibrate(n_slots, realized, self.model_speedup, self.n_decisions)
            return realized > REALIZED_BAND[0 if drafting else 1]
        if not self.realized.compared():
            return model_says
        return self.model_speedup * self.calibration_ratio(n_slots) > (KEEP_DRAFTING if drafting else RESTART)

    def calibration_ratio(self, n_slots: int) -> float:
        """Realized over expected speedup when last compared at (or nearest) this slot count, faded towards 1
        (realized_records.py)."""
        return self.realized.ratio(n_slots, self.n_decisions)

    def _drafting_pays(self, slots: list[int], caps: list[int], drafting: bool) -> bool:
        """Whether drafting is expected to pay at the slots' (optimistic) rates."""
        rates = [self.optimistic_rate(s) for s in slots]
        # the draft length where drafting pays best: a shorter draft brings fewer tokens and costs less
        # to draft (draft_cost.py); after the first decision only the lengths next to the last best and
        # the longest are weighed (the best moves a step at a time, and a decision every few steps that
        # weighed them all cost a few per cent of a step)
        speedup, self.paying_length = max((self._speedup(rates, caps, length), length)
                                          for length in self._lengths_to_weigh(self._longest(caps)))
        self.model_speedup = speedup
        # a little hysteresis: estimates from a few dozen observations are noisy, and each switch from not
        # drafting to drafting first catches the drafter up
        return speedup > (KEEP_DRAFTING if drafting else 1.0)

    def _longest(self, caps: list[int]) -> int:
        """The longest draft weighed: the slots' longest cap, within the positions the scheduler tracks."""
        return min(max(caps), self.n_positions)

    def _price_exploring(self, n_slots: int, longest: int) -> None:
        """What drafting would bring in a run of well predicted text (GOOD_RATE), which sets the exploring
        budget; worked out with a "no" only (nothing else reads it, and a decision is tens of µs)."""
        good = [GOOD_RATE] * n_slots
        best_good, self.upside_length = max((self._speedup(good, [longest] * n_slots, length), length)
                                            for length in {self.paying_length, longest})
        self.upside = max(0.0, best_good - 1.0)
        # what explorations found: at 4 slots and T=1 sampled drafts are never that well accepted, and exploring
        # at GOOD_RATE's price cost the chains 3-5 % there
        seen = min(GOOD_RATE, self.explore_seen[0] / self.explore_seen[1])
        seen_speedup = self._speedup([seen] * n_slots, [longest] * n_slots, self.upside_length)
        self.upside_seen = max(EXPLORE_FLOOR * self.upside, seen_speedup - 1.0)

    def _lengths_to_weigh(self, longest: int) -> list[int]:
        lengths = sorted({min(n, longest) for n in self.candidate_lengths})
        if not self.answers:            # the first decision weighs them all
            return lengths
        at = lengths.index(self.paying_length) if self.paying_length in lengths else len(lengths) - 1
        return sorted({*lengths[max(0, at - 1):at + 2], lengths[-1]})

    def _speedup(self, rates: list[float], caps: list[int], length: int) -> float:
        """Expected tokens per second of a step that drafts `length` tokens (and verifies what `lengths`
        would keep at these rates) over one that only decodes."""
        n = min(max(caps), length)
        n_rows = len(rates)
        steps_per_second = self._rate_for(n_rows, length)
        kept = schedule_prefix_lengths([[r] * n for r in rates], steps_per_second, [min(c, n) for c in caps],
                                       early_stop=False).tolist()
        gain = sum(r ** j for r, k in zip(rates, kept) for j in range(1, k + 1))
        plain = n_rows / (1.0 / self.cost_table.steps_per_second(n_rows) + self.other_seconds(False))
        return (n_rows + gain) * steps_per_second(n_rows + sum(kept)) / plain

    def _rate_for(self, n_drafting: int, length: int):
        """Whole engine steps per second by verified rows, with n_drafting slots drafting `length` tokens
        (Algorithm 1 asks it for every candidate row count: the draft time is worked out once)."""
        fixed = self.draft_time(n_drafting, length) + self.other_seconds(True)
        seconds = self.cost_table.step_seconds(n_drafting * (1 + self.n_positions))
        return lambda rows: 1.0 / (seconds[rows] + fixed)

    def lengths(self, slots: list[int], drafts: list[Draft], greedy: bool = False) -> np.ndarray:
        """How many tokens of each draft to verify. Algorithm 1 stops at its first non-improvement only where
        that keeps it lossless: with the drafts' own confidences and a request that samples (`greedy`: none
        does; greedy verification emits the target's tokens whatever is verified)."""
        confidence, from_drafts = [], False
        for slot, d in zip(slots, drafts):
            k = min(len(d.tokens), self.n_positions)
            from_drafts |= d.confidence is not None
            confidence.append(d.confidence[:k] if d.confidence is not None else [self.rate(slot)] * k)
        return schedule_prefix_lengths(confidence, self._rate_for(len(drafts), self.draft_length),
                                       early_stop=from_drafts and not greedy)

    def observe(self, slot: int, n_drafted: int, n_accepted: int) -> None:
        """A verified draft: n_accepted tokens accepted, then (if any was left) one rejected."""
        self._update(slot, n_accepted, min(n_accepted + 1, n_drafted))

    def observe_unverified(self, slot: int, first_matched: bool) -> None:
        self._update(slot, int(first_matched), 1)

    def _update(self, slot: int, accepted: int, tried: int) -> None:
        self.n_observed += 1
        if self.exploring and slot == self.explored_slot:
            seen = self.explore_seen
            seen[0], seen[1] = EXPLORE_DECAY * seen[0] + accepted, EXPLORE_DECAY * seen[1] + tried
        for row in (slot, self.pool[slot]):
            self.accepted[row] = DECAY * self.accepted[row] + accepted
            self.tried[row] = DECAY * self.tried[row] + tried
