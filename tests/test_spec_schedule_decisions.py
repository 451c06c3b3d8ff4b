"""--spec-schedule's draft-or-not decisions from its timings: what a draft call and the rest of a step
cost, what drafting achieved (the realized records), exploring, and the checks of a first "no"."""
import numpy as np
import pytest

from support.scheduling import measure_slot_count
from specserve.speculative.acceptance_schedule import (DECIDE_EVERY, EXPLORE_EVERY, EXPLORE_SHARE, PLAIN_EVERY,
                                                       REALIZED_MIN, RECHECK_AFTER, AcceptanceScheduler)
from specserve.speculative.draft_cost import MEASURED_AFTER
from specserve.speculative.realized_records import REALIZED_RECENT
from specserve.speculative.step_cost import StepCostTable


def test_drafting_stops_when_it_cannot_pay_for_itself():
    table = StepCostTable([1, 64], [0.01, 0.01 + 63 * 0.0005])
    sched = AcceptanceScheduler(4, 3, table)
    slots, caps = [0, 1, 2, 3], [3] * 4
    measure_slot_count(sched, slots, caps, 0.002)
    for slot in range(4):
        for _ in range(5):
            sched.observe(slot, 3, 3)
    assert all(sched.drafting_slots(slots, caps) == slots for _ in range(8))
    for slot in range(4):                                            # the drafts stop being accepted
        for _ in range(100):
            sched.observe(slot, 3, 0)
    decisions = [sched.drafting_slots(slots, caps) for _ in range(EXPLORE_EVERY * 15)]
    first_no = decisions.index([])
    assert first_no < DECIDE_EVERY                                   # the cached answer is re-evaluated soon
    explored = [i for i, d in enumerate(decisions) if d and i > first_no]
    # from then on only exploring steps draft (drafting would pay in well predicted text), EXPLORE_EVERY
    # apart (no step time was noted, so none costs anything), each for the slot with the least to catch
    # up on: the one that drafted last
    assert set(np.diff(explored)) == {EXPLORE_EVERY} and sched.upside > 0
    assert [decisions[i] for i in explored[:3]] == [[0], [0], [0]]
    sched.last_drafted[2] = sched.n_decisions
    assert next(d for d in (sched.drafting_slots(slots, caps) for _ in range(2 * EXPLORE_EVERY)) if d) == [2]
    assert sched.exploring and sched.draft_length == sched.upside_length     # as far as good drafts would pay
    # with no new observation, a "no" is not worked out again (it could not change)
    calls = []
    monkey = sched._drafting_pays
    sched._drafting_pays = lambda *a: calls.append(1) or monkey(*a)
    [sched.drafting_slots(slots, caps) for _ in range(EXPLORE_EVERY - 2)]
    assert calls == [] and sched.drafting_slots(slots[:3], caps[:3]) == [] and calls == [1]
    sched._drafting_pays = monkey
    for slot in range(4):                                            # accepted again: soon every step drafts
        for _ in range(40):
            sched.observe(slot, 3, 3)
    decisions = [sched.drafting_slots(slots, caps) for _ in range(40)][DECIDE_EVERY:]
    # (but for REALIZED_MIN steps in PLAIN_EVERY kept plain while no step without drafting was timed)
    assert all(d == slots for d in decisions if d) and 0 < decisions.count([]) <= (40 // PLAIN_EVERY + 1) * REALIZED_MIN
    # a draft call as slow as 100 steps could not pay even for perfect drafts: no exploring at all
    sched.draft_cost.steady[4][3] = 1.0
    sched.draft_cost.estimates.clear()
    sched.observe(0, 3, 3)
    decisions = [sched.drafting_slots(slots, caps) for _ in range(EXPLORE_EVERY * 15)]
    assert sched.upside == 0 and not any(decisions[DECIDE_EVERY:])


def test_what_drafting_achieves_has_the_last_word():
    """Rows look free to the model and its draft calls cheap (timed at 1 ms when measured), so it drafts;
    but timed steps say drafting emits a token in more time than plain steps do: it stops, and the model,
    scaled by how wrong it was, is not believed again until that scale fades."""
    sched = AcceptanceScheduler(4, 3, StepCostTable([1, 64], [0.01, 0.01]))
    slots, caps = [0, 1, 2, 3], [3] * 4
    measure_slot_count(sched, slots, caps, 0.001)
    for slot in range(4):
        for _ in range(10):
            sched.observe(slot, 3, 2)

    def run(n):
        """n steps; a drafting step takes 0.05 s for its 4 x 3 tokens (0.04 s of it drafting, which the model's
        draft-call table never hears of), a plain one 0.01 s for 4."""
        chosen = []
        for _ in range(n):
            chosen.append(sched.drafting_slots(slots, caps))
            for slot in (range(4) if chosen[-1] else []):
                sched.observe(slot, 3, 2)
            sched.note_step(0.05 if chosen[-1] else 0.01, 16 if chosen[-1] else 4, 4, 0.04 if chosen[-1] else 0.0,
                            tokens=12 if chosen[-1] else 4)
        return chosen

    first = run(2 * PLAIN_EVERY + 2 * DECIDE_EVERY + 2)
    plain = [i for i, d in enumerate(first) if not d]
    # the model drafted, but for REALIZED_MIN plain steps in PLAIN_EVERY (the first after drafting not timed),
    # until both records were long enough ...
    assert plain[0] >= PLAIN_EVERY // 2 and plain[1:REALIZED_MIN] == list(range(plain[0] + 1, plain[0] + REALIZED_MIN))
    assert plain[REALIZED_MIN] == plain[0] + PLAIN_EVERY
    assert first[:plain[0]] == [slots] * plain[0] and len(plain) < len(first) // 2
    # the drafting record is every step of the "yes", its plain checks included: between 0.6x (drafting steps
    # alone) and 1
    assert (0.01 / 4) / (0.05 / 12) < sched.realized_speedup(4) < 0.8
    assert first[-DECIDE_EVERY:] == [[]] * DECIDE_EVERY and sched.last_decision is False    # ... then stopped
    # once the record is stale the model decides again, scaled by the 0.6x achieved where it promised more:
    # still no; drafting for every slot comes back only as that scale fades, and timing says no again
    later = run(REALIZED_RECENT + 2 * DECIDE_EVERY)
    assert sched.realized_speedup(4) is None and sched.calibration_ratio(4) < 0.6
    assert not any(d == slots for d in later) and sched.last_decision is False
    much_later = run(1500)
    assert any(d == slots for d in much_later) and sched.last_decision is False


def test_draft_time_comes_from_steady_calls_and_each_larger_slot_count_is_measured():
    sched = AcceptanceScheduler(8, 3, StepCostTable([1, 64], [0.01, 0.04]))
    assert sched.draft_time(4) == 0.0
    # a call that catches the slots up (on their prompts) only stands in until a steady one is timed
    assert sched.drafting_slots([0, 1], [3, 3]) == [0, 1] and not sched.steady
    sched.note_draft_time(0.05, 2)
    assert sched.draft_time(2) == 0.05
    assert sched.drafting_slots([0, 1], [3, 3]) == [0, 1] and sched.steady
    sched.note_draft_time(0.002, 2)
    assert sched.draft_time(2) == 0.002
    sched.drafting_slots([0, 1], [3, 3])
    sched.note_draft_time(0.009, 2)                                  # a slower call moves it a little
    assert 0.002 < sched.draft_time(2) < 0.003
    sched.draft_cost.steady[2][3] = 0.002
    sched.draft_cost.estimates.clear()
    # one slot: priced as the smallest measured count (a call for fewer slots costs no more)
    assert sched.draft_time(1) == 0.002
    # four slots: not scaled up from two (batched drafting is cheap), measured with every slot drafting
    measure_slot_count(sched, [0, 1, 2, 3], [3] * 4, 0.003)
    assert sched.draft_time(4) == pytest.approx(0.003)
    assert sched.draft_time(3) == pytest.approx(0.0025)              # between two measured counts
    sched.begin(2)                                                   # a new request: its first draft catches up
    sched.drafting_slots([0, 1, 2, 3], [3] * 4)
    assert not sched.steady


def test_the_rest_of_a_step_is_learnt_per_kind_from_steady_steps():
    """What a step costs beyond its forward and draft call: a drafting step's is learnt from steady steps only
    (a catch-up step, and an engine's first, run slow), its first samples keeping the lowest; a plain step is
    never priced at a drafting step's rest (that made a fresh 4-slot engine draft where it lost)."""
    table = StepCostTable([1, 64], [0.001, 0.001 + 63 * 0.0001])
    sched = AcceptanceScheduler(4, 3, table)
    slots, caps = [0, 1, 2, 3], [3] * 4
    forward = 1.0 / table.steps_per_second(16)
    for rest in (0.05, 0.004, 0.002, 0.003):       # the catch-up step, then steady ones
        sched.drafting_slots(slots, caps)
        sched.note_draft_time(0.001, 4)
        sched.note_step(forward + 0.001 + rest, 16, 4, 0.001, tokens=8)
    assert sched.other_seconds(True) == pytest.approx(0.002, rel=0.05)
    assert sched.other_seconds(False) == 0.0        # no plain step yet: not the drafting steps' rest


def test_an_exploring_step_spaces_the_next_by_what_it_cost():
    table = StepCostTable([1, 64], [0.001, 0.004])
    sched = AcceptanceScheduler(4, 3, table)
    slots, caps = [0, 1, 2, 3], [3] * 4
    measure_slot_count(sched, slots, caps, 0.0005)
    for slot in range(4):                                            # drafts are rejected: drafting does not pay
        for _ in range(40):
            sched.observe(slot, 3, 0)
    step = 1.0 / table.steps_per_second(4)
    explored_at = []
    for i in range(3000):
        chosen = sched.drafting_slots(slots, caps)
        explore = sched.exploring
        if chosen:
            sched.note_draft_time(step * 20 if explore else 0.0005, len(chosen))
        # an exploring step costs 20 plain steps (the drafter catches up on its slot's context)
        sched.note_step(step * (21 if explore else 1), 4 + 3 * len(chosen), 4, step * 20 if explore else 0.0)
        if explore:
            explored_at.append(i)
    # exploring spends at most EXPLORE_SHARE x upside (<= 1) of the time: 20 steps' cost every >= 200 steps
    assert sched.upside > 0 and len(explored_at) >= 2
    assert np.all(np.diff(explored_at) >= 20 / (EXPLORE_SHARE * min(sched.upside, 1.0)) - 1)
    # a step with prompt rows (a new request's chunk) or one that ended a request says nothing about the per-step cost
    other = list(sched.other)
    sched.note_step(1.0, 4, 4, 0.0, irregular=True)
    assert sched.other == other


def test_an_exploration_that_pays_for_itself_is_followed_by_another():
    """Acceptance comes in bursts: an exploration whose draft was accepted emits more tokens than plain steps
    would in its time (its catch-up aside), and the next one, with the drafter caught up, comes right after,
    each with news for the rates, until the answer turns to drafting."""
    table = StepCostTable([1, 64], [0.001, 0.001])
    sched = AcceptanceScheduler(1, 3, table)
    measure_slot_count(sched, [0], [3], 0.0005)
    for _ in range(40):
        sched.observe(0, 3, 0)                      # drafts were rejected: no drafting
    decisions = []
    for i in range(200):
        chosen = sched.drafting_slots([0], [3])
        explore = sched.exploring
        decisions.append("explore" if explore else "draft" if chosen else "plain")
        if chosen:                                  # now every draft is accepted; the first catches up
            sched.observe(0, 3, 3)
        first = explore and decisions[-2:-1] != ["explore"]
        sched.note_step(0.001 + (0.01 if first else 0.0005) * bool(chosen), 4 if chosen else 1, 1,
                        (0.01 if first else 0.0005) * bool(chosen), tokens=4 if chosen else 1)
    start = decisions.index("explore")
    assert start >= EXPLORE_EVERY and decisions[start + 1] == "explore"
    assert "draft" in decisions[start:start + 4 * DECIDE_EVERY] and decisions[-1] == "draft"


def test_the_first_timed_plain_steps_are_news_for_a_no():
    """A first "no" can come before any plain step was timed, pricing a plain step's rest at 0: in a server, where
    streaming makes that rest large, the first timed plain steps make the answer be worked out again."""
    table = StepCostTable([1, 64], [0.001, 0.001])
    sched = AcceptanceScheduler(1, 3, table)
    for _ in range(MEASURED_AFTER + 1):            # drafting steps whose rest (the tokens' streaming) is 3 ms
        sched.drafting_slots([0], [3])
        sched.note_draft_time(0.0003, 1)
        sched.observe(0, 3, 3)
        sched.note_step(0.0043, 4, 1, 0.0003, tokens=4)
    decisions = []
    for _ in range(4 * DECIDE_EVERY):
        chosen = sched.drafting_slots([0], [3])
        decisions.append(bool(chosen))
        if chosen:
            sched.note_draft_time(0.0003, 1)
            sched.observe(0, 3, 3)
        sched.note_step(0.0043 if chosen else 0.004, 4 if chosen else 1, 1, 0.0003 if chosen else 0.0,
                        tokens=4 if chosen else 1)
    assert decisions[0] is False and all(decisions[-DECIDE_EVERY:])


def test_a_first_no_on_slow_first_timings_is_checked_once():
    """A slot count's first drafting steps run slow (an engine's first calls, a server's first requests): a "no"
    decided on them is checked once, RECHECK_AFTER seconds of steps later, by timing draft calls afresh."""
    table = StepCostTable([1, 64], [0.001, 0.001])
    sched = AcceptanceScheduler(1, 3, table)
    measure_slot_count(sched, [0], [3], 0.02)                 # the first draft calls: 20 steps' time each
    for _ in range(40):
        sched.observe(0, 3, 3)
    plain_steps = round(RECHECK_AFTER / 0.001)
    decisions = []
    for _ in range(plain_steps + 2 * MEASURED_AFTER + 2 * DECIDE_EVERY):
        chosen = sched.drafting_slots([0], [3])
        decisions.append(bool(chosen))
        if chosen:
            sched.note_draft_time(0.0002, 1)        # warm now: a fifth of a step
            sched.observe(0, 3, 3)
        sched.note_step(0.0012 if chosen else 0.001, 4 if chosen else 1, 1, 0.0002 if chosen else 0.0,
                        tokens=4 if chosen else 1)
    assert not any(decisions[:plain_steps - DECIDE_EVERY]) and all(decisions[-DECIDE_EVERY:])
    assert sched.draft_time(1, 3) < 0.001
