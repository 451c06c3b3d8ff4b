"""--spec-schedule's measured draft-call cost by (drafting slots, draft length)."""
import pytest

from specserve.speculative.draft_cost import MEASURED_AFTER, DraftCost


def test_steady_calls_make_the_estimate_and_catch_up_calls_only_stand_in():
    cost = DraftCost()
    assert cost.seconds(4, 3) == 0.0 and cost.most_slots == 0
    cost.note(0.050, 4, 3, steady=False)                    # a catch-up call: an upper bound meanwhile
    cost.note(0.080, 4, 3, steady=False)
    assert cost.seconds(4, 3) == 0.050 and cost.most_slots == 0
    cost.note(0.004, 4, 3, steady=True)
    assert cost.seconds(4, 3) == 0.004 and cost.most_slots == 0     # measured after MEASURED_AFTER steady calls
    for _ in range(MEASURED_AFTER - 1):
        cost.note(0.004, 4, 3, steady=True)
    assert cost.most_slots == 4
    cost.note(0.090, 4, 3, steady=False)                    # no longer read once a steady call is known
    cost.note(0.014, 4, 3, steady=True)                     # a slower call moves the mean a little
    assert cost.seconds(4, 3) == pytest.approx(0.005)
    cost.note(0.001, 4, 3, steady=True)                     # a faster one half way
    assert cost.seconds(4, 3) == pytest.approx(0.003)


def test_lengths_are_interpolated_scaled_and_never_cheaper_when_longer():
    cost = DraftCost()
    cost.note(0.006, 4, 2, steady=True)
    assert cost.seconds(4, 1) == pytest.approx(0.003)               # shorter: in proportion to the length
    assert cost.seconds(4, 5) == 0.006                              # longer: as the longest measured
    cost.note(0.012, 4, 6, steady=True)
    assert cost.seconds(4, 4) == pytest.approx(0.009)               # between two measured lengths
    cost.note(0.020, 4, 1, steady=True)                             # noise: a short draft measured slow
    assert cost.seconds(4, 2) == cost.seconds(4, 1) == pytest.approx(0.020)
    assert cost.seconds(4, 6) == pytest.approx(0.020)


def test_slot_counts_are_interpolated_not_scaled():
    cost = DraftCost()
    cost.note(0.002, 1, 3, steady=True)
    cost.note(0.004, 4, 3, steady=True)
    assert cost.seconds(2, 3) == pytest.approx(0.002 + 0.002 / 3)   # between the measured counts
    assert cost.seconds(8, 3) == 0.004                              # the nearest count: batching is cheap
    assert cost.seconds(4, 1) == pytest.approx(0.004 / 3)           # each count scaled by its own lengths
    cost.note(0.050, 2, 3, steady=False)                            # a catch-up call stands in for its count
    assert cost.seconds(2, 3) == 0.050
    cost.note(0.003, 2, 1, steady=True)                             # ... until the count has a steady call
    assert cost.seconds(2, 3) == 0.003


def test_a_slow_outlier_at_a_longer_length_is_capped_by_a_shorter_one():
    """A first call measured slow (cold caches) at a length the scheduler then stops choosing would never
    be corrected: a longer draft is priced at most as a shorter one scaled in proportion to the length."""
    cost = DraftCost()
    cost.note(0.002, 1, 2, steady=True)
    cost.note(0.050, 1, 6, steady=True)
    assert cost.seconds(1, 6) == pytest.approx(0.006)
    assert cost.seconds(1, 4) == pytest.approx(0.004)
