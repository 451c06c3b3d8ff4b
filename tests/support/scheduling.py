"""Helpers for the --spec-schedule tests."""
from specserve.speculative.draft_cost import MEASURED_AFTER


def measure_slot_count(sched, slots, caps, seconds):
    """The first steps at a new slot count draft for every slot until MEASURED_AFTER steady calls (after the
    first, which catches up) timed it."""
    for _ in range(MEASURED_AFTER + 1):
        assert sched.drafting_slots(slots, caps) == list(range(len(slots)))
        sched.note_draft_time(seconds, len(slots))
