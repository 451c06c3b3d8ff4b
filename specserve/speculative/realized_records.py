"""What drafting actually achieved, for `--spec-schedule` (acceptance_schedule.py).

Per slot count, two records of whole engine steps: those of a "yes" (drafting steps, plain checks and
the catch-ups after them) and those without drafting. Each keeps decayed seconds and tokens; their
seconds per token compared give the realized speedup, which decides while both records are long and
recent. Each comparison also leaves a calibration: realized over the model's expected speedup, by which
the model is scaled once the records are stale (faded back to 1 over time).
"""
from __future__ import annotations

REALIZED_DECAY = 0.995  # weight kept by older steps in each record's seconds and tokens (one window for both:
                     # the drafting record mixes drafting steps, plain checks and catch-ups, whose seconds and
                     # tokens differ together; seconds decayed by 0.9 and tokens by 0.995 judged drafting at one
                     # slot 0.87-0.94x where it ran 1.17x; and a window of a few hundred steps, since at T > 0
                     # acceptance differs from request to request: with 0.98 a poorly predicted request stopped
                     # drafting at one slot, and the "no" held into the next)
REALIZED_STEPS = (4, 16)  # the records decide once the plain one has this many steps and the drafting one this
                     # many (a few unlucky drafting steps said "stop" at 4 slots where drafting paid 1.2x, and
                     # the answer then stood until the record went stale) ...
REALIZED_RECENT = 128  # ... the last of them within this many decisions
CALIBRATION_FORGET = 1 / 1024  # share of the gap between the realized-over-model ratio and 1 forgotten per decision


class RealizedRecord:
    """What one kind of step (slot count, drafted or not) achieved: seconds and tokens decayed by
    REALIZED_DECAY, how many steps, and the decision of the last."""
    __slots__ = ("seconds", "tokens", "steps", "last")

    def __init__(self):
        self.seconds = self.tokens = 0.0
        self.steps = self.last = 0

    def note(self, seconds: float, tokens: int, decision: int) -> None:
        self.seconds = REALIZED_DECAY * self.seconds + seconds
        self.tokens = REALIZED_DECAY * self.tokens + tokens
        self.steps += 1
        self.last = decision

    def seconds_per_token(self) -> float:
        return self.seconds / self.tokens


class RealizedRecords:
    """The records by (slot count, drafted) and the calibration by slot count."""

    def __init__(self):
        self.records: dict[tuple[int, bool], RealizedRecord] = {}
        self.calibration: dict[int, tuple[float, int]] = {}   # slots -> (realized over model speedup, decision)

    def note(self, arms: tuple, seconds: float, tokens: int, decision: int) -> None:
        """A step of each of these kinds ((slots, drafted) pairs) took `seconds` and emitted `tokens`."""
        for arm in arms:
            record = self.records.get(arm)
            if record is None:
                record = self.records[arm] = RealizedRecord()
            record.note(seconds, tokens, decision)

    def plain_is_recent(self, n_slots: int, decision: int) -> bool:
        """Whether the record of steps without drafting is long enough and was added to in the last half of
        REALIZED_RECENT decisions (then no plain check is needed to keep it so)."""
        plain = self.records.get((n_slots, False))
        return plain is not None and plain.steps >= REALIZED_STEPS[0] and decision - plain.last <= REALIZED_RECENT // 2

    def speedup(self, n_slots: int, decision: int) -> float | None:
        """Seconds per emitted token of recent steps without drafting over those of recent drafting steps at
        this slot count; None while either record is thin or old."""
        plain, drafted = self.records.get((n_slots, False)), self.records.get((n_slots, True))
        if any(r is None or r.steps < REALIZED_STEPS[arm] or decision - r.last > REALIZED_RECENT
               for arm, r in enumerate((plain, drafted))):
            return None
        return plain.seconds_per_token() / drafted.seconds_per_token()

    def calibrate(self, n_slots: int, realized: float, model_speedup: float, decision: int) -> None:
        """A realized speedup compared with the model's expected one: the scale the model takes from now."""
        self.calibration[n_slots] = (min(max(realized / max(model_speedup, 1e-9), 0.1), 10.0), decision)

    def compared(self, n_slots: int | None = None) -> bool:
        """Whether this slot count (None: any) was ever compared."""
        return bool(self.calibration) if n_slots is None else n_slots in self.calibration

    def ratio(self, n_slots: int, decision: int) -> float:
        """Realized over expected speedup when last compared at this slot count, or at the nearest one that
        was compared (the model errs alike at 3 slots and at 4: uncalibrated, a request that finished turned a
        4-slot "no" into a 3-slot "yes" for a step or two, each first catching every slot up), faded towards 1
        by CALIBRATION_FORGET per decision since (1 before any comparison)."""
        if not self.calibration:
            return 1.0
        nearest = n_slots if n_slots in self.calibration else \
            min(self.calibration, key=lambda n: (abs(n - n_slots), -n))
        ratio, at = self.calibration[nearest]
        return 1.0 - (1.0 - ratio) * (1.0 - CALIBRATION_FORGET) ** (decision - at)
