"""What a draft call costs, by the number of drafting slots and the draft length, as measured.

`--spec-schedule` (acceptance_schedule.py) weighs a draft call against the tokens it brings, and
picks the draft length as well as whether to draft: a block of 3 costs a block drafter about half
a block of 6 at four slots, where Algorithm 1 keeps 2-3 tokens of each draft anyway.

Steady calls (every drafting slot also drafted the step before) make a running mean per
(slots, length); a catch-up call only stands in, as an upper bound, while its slot count has no
steady one. Times are made non-decreasing in the length (noise: a short draft measured while the
caches were cold), and at most a shorter one's scaled in proportion to the length (a slow outlier at a
length that is then not drafted again would otherwise never be corrected). An unmeasured length is
worked out between the two nearest measured lengths
of the same slot count; below them in proportion to the shortest (about right at many slots: DSpark
at 4 slots takes 0.8 ms for 3 drafts, 1.6 ms for 6; too cheap at one slot, where a call has a fixed
part); above them as the longest. Both guesses are optimistic on purpose: drafting at a length
measures it, so a guess that is too cheap is corrected by the calls it leads to, while one too dear
would never be tried. An unmeasured slot count is worked out between the nearest measured
counts (batched drafting is cheap: a call for 4 slots costs 1.1-1.9x one for 1 slot on the bundled
model, so counts are not scaled), else from the nearest count.
"""
from __future__ import annotations

MEASURED_AFTER = 3  # steady calls before a slot count counts as measured: a fresh engine's first ones run slow
                    # (first-call costs), and at 2 slots one of them made drafting look 1.5x dearer than it is


class DraftCost:
    def __init__(self):
        # per slot count, length -> the running mean of steady calls; and the fastest catch-up call, which
        # stands in only while its count has no steady call (tables by count: the scheduler asks for an
        # estimate every drafting step, right after a note, and working it out from (slots, length) keys
        # cost 10-20 µs)
        self.steady: dict[int, dict[int, float]] = {}
        self.unsteady: dict[int, dict[int, float]] = {}
        self.steady_calls: dict[int, int] = {}              # per slot count, how many steady calls
        self.most_slots = 0                                 # the largest slot count measured (MEASURED_AFTER)
        self.estimates: dict[tuple[int, int], float] = {}   # seconds() answers since the last note()

    def note(self, seconds: float, n_slots: int, length: int, steady: bool) -> None:
        self.estimates.clear()
        if steady:
            table = self.steady.setdefault(n_slots, {})
            known = table.get(length, seconds)
            weight = 0.5 if seconds < known else 0.1        # the first calls run slow (cold caches), spikes happen
            table[length] = (1 - weight) * known + weight * seconds
            calls = self.steady_calls[n_slots] = self.steady_calls.get(n_slots, 0) + 1
            if calls >= MEASURED_AFTER:
                self.most_slots = max(self.most_slots, n_slots)
        elif length not in self.steady.get(n_slots, ()):
            table = self.unsteady.setdefault(n_slots, {})
            table[length] = min(seconds, table.get(length, seconds))

    def forget(self, n_slots: int) -> None:
        """Drop this slot count's timings, to be measured afresh (`most_slots` stays)."""
        for table in (self.steady, self.unsteady, self.steady_calls):
            table.pop(n_slots, None)
        self.estimates.clear()

    def seconds(self, n_slots: int, length: int) -> float:
        """Estimated draft call for n_slots slots and drafts of `length` tokens (0 before any was measured);
        kept until the next measurement (a draft-or-not decision asks for every candidate length)."""
        key = (n_slots, length)
        if key not in self.estimates:
            self.estimates[key] = self._estimate(n_slots, length)
        return self.estimates[key]

    def _table(self, n_slots: int) -> dict[int, float] | None:
        return self.steady.get(n_slots) or self.unsteady.get(n_slots)

    def _estimate(self, n_slots: int, length: int) -> float:
        if n_slots <= 0:
            return 0.0
        table = self._table(n_slots)
        if table:
            return self._at_length(table, length)
        counts = sorted(n for n in {*self.steady, *self.unsteady} if self._table(n))
        if not counts:
            return 0.0
        below = [n for n in counts if n < n_slots]
        above = [n for n in counts if n > n_slots]
        if below and above:
            lo, hi = below[-1], above[0]
            t_lo, t_hi = self._at_length(self._table(lo), length), self._at_length(self._table(hi), length)
            return t_lo + (t_hi - t_lo) * (n_slots - lo) / (hi - lo)
        return self._at_length(self._table(below[-1] if below else above[0]), length)

    @staticmethod
    def _at_length(table: dict[int, float], length: int) -> float:
        by_length, last = {}, None
        for ln, t in sorted(table.items()):
            if last is not None:
                # never less than a shorter draft, never more than it scaled in proportion to the length
                # (a call has a fixed part): a slow outlier at a length not drafted since is capped
                t = min(max(t, by_length[last]), by_length[last] * ln / last)
            by_length[ln], last = t, ln
        if length in by_length:
            return by_length[length]
        shorter = [ln for ln in by_length if ln < length]
        longer = [ln for ln in by_length if ln > length]
        if shorter and longer:
            lo, hi = max(shorter), min(longer)
            return by_length[lo] + (by_length[hi] - by_length[lo]) * (length - lo) / (hi - lo)
        if longer:                                  # shorter than any measured: in proportion to the length
            return by_length[min(longer)] * length / min(longer)
        return by_length[max(shorter)]              # longer than any measured: no dearer than the longest
