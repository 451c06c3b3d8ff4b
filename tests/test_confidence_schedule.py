"""The DSpark prefix rules: p_min truncation and Algorithm 1 with its early stop, on hand-worked cases."""
import numpy as np
import pytest

from specserve.errors import OptionError
from specserve.speculative.confidence_schedule import confident_prefix_lengths, schedule_prefix_lengths
from specserve.speculative.step_cost import StepCostTable


def table(values: dict):
    return lambda rows: values[rows]


def test_p_min_cuts_at_the_first_low_position():
    conf = np.array([[0.9, 0.8, 0.3, 0.9], [0.2, 0.9, 0.9, 0.9], [0.9, 0.9, 0.9, 0.9]])
    assert confident_prefix_lengths(conf, 0.5).tolist() == [2, 0, 4]
    assert confident_prefix_lengths(conf, 0.0).tolist() == [4, 4, 4]


def test_appendix_a_early_stop_ignores_the_next_confidence():
    """Paper Appendix A: a1 = 0.8, SPS(1..3) = 1.0, 0.5, 0.45. Theta_1 = 0.9 < Theta_0 = 1.0, so the
    scheduler stops before looking at c2: the length is 0 whatever x1 made c2 be (0.9 or 0)."""
    sps = table({1: 1.0, 2: 0.5, 3: 0.45})
    assert schedule_prefix_lengths(np.array([[0.8, 0.9]]), sps).tolist() == [0]
    assert schedule_prefix_lengths(np.array([[0.8, 0.0]]), sps).tolist() == [0]
    # a global search (no early stop) would pick length 2 in the first case: Theta_2 = 2.52 * 0.45 = 1.134


def test_without_the_early_stop_admission_goes_past_a_cost_jump():
    """Step costs jump where the rows fill a new kernel tile: the early stop halts at the jump, admission up
    to the best count goes past it when the drafts beyond pay for it."""
    seconds = {rows: 1.0 + 0.01 * rows + (0.5 if rows > 4 else 0.0) for rows in range(1, 20)}
    sps = lambda rows: 1.0 / seconds[rows]  # noqa: E731
    conf = [[0.95] * 8]
    assert schedule_prefix_lengths(conf, sps).tolist() == [3]                       # 4 rows, then the jump
    assert schedule_prefix_lengths(conf, sps, early_stop=False).tolist() == [8]
    assert schedule_prefix_lengths([[0.3] * 8], sps, early_stop=False).tolist() == [3]   # the rest would not pay


def test_two_requests_admitted_by_survival_until_throughput_drops():
    # survival a: r0 = 0.9, 0.81, 0.405; r1 = 0.6, 0.54
    # admit (0,0): 2.9*0.95 = 2.755 > 2.0; (0,1): 3.71*0.9 = 3.339; (1,0): 4.31*0.7 = 3.017 -> stop
    conf = np.array([[0.9, 0.9, 0.5], [0.6, 0.9, 0.0]])
    sps = table({2: 1.0, 3: 0.95, 4: 0.9, 5: 0.7, 6: 0.65, 7: 0.6, 8: 0.55})
    assert schedule_prefix_lengths(conf, sps).tolist() == [2, 0]
    # with request 0 capped at one draft: (0,0) 2.755; (1,0) 3.5*0.9 = 3.15; (1,1) 4.04*0.7 = 2.828 -> stop
    assert schedule_prefix_lengths(conf, sps, np.array([1, 3])).tolist() == [1, 1]
    # a machine where rows are free verifies everything with non-zero survival
    flat = lambda rows: 1.0  # noqa: E731
    assert schedule_prefix_lengths(conf, flat).tolist() == [3, 2]


def test_step_cost_table():
    t = StepCostTable([1, 4, 8], [0.010, 0.008, 0.020])       # noisy: 4 rows measured faster than 1
    assert t.seconds.tolist() == [0.010, 0.010, 0.020]          # made non-decreasing
    assert t.steps_per_second(6) == pytest.approx(1 / 0.015)
    assert t.steps_per_second(16) == pytest.approx(1 / 0.040)   # linear growth past the table
    with pytest.raises(OptionError, match="matching, positive"):
        StepCostTable([1, 2], [0.1])


def _algorithm_1_numpy(confidence, steps_per_second, max_lengths):
    """Algorithm 1 written directly from the paper with numpy: every candidate's survival, one sort,
    admit while the throughput improves."""
    n_req, n = confidence.shape
    survival = np.cumprod(np.clip(confidence.astype(np.float64), 0.0, 1.0), axis=1)
    req, pos = np.meshgrid(np.arange(n_req), np.arange(n), indexing="ij")
    valid = (survival > 0) & (pos < max_lengths.reshape(-1, 1))
    a, req, pos = survival[valid], req[valid], pos[valid]
    order = np.lexsort((pos, req, -a))
    lengths, best, expected = np.zeros(n_req, dtype=np.int64), n_req * steps_per_second(n_req), float(n_req)
    for i, (a_i, r) in enumerate(zip(a[order], req[order])):
        expected += a_i
        throughput = expected * steps_per_second(n_req + i + 1)
        if not throughput > best:
            break
        best = throughput
        lengths[r] += 1
    return lengths


def test_algorithm_1_equals_the_numpy_formulation_on_random_cases():
    rng = np.random.default_rng(0)
    for _ in range(3000):
        n_req, n = int(rng.integers(1, 6)), int(rng.integers(1, 9))
        conf = rng.random((n_req, n))
        if rng.random() < 0.3:
            conf = np.round(conf, 1)            # ties in survival
        if rng.random() < 0.1:
            conf[rng.integers(n_req), rng.integers(n)] = 0.0
        if rng.random() < 0.1:
            conf = conf.astype(np.float32)
        base, slope = 1e-3 * (0.5 + rng.random()), 1e-5 * rng.random() * 20
        sps = lambda rows: 1.0 / (base + slope * rows)   # noqa: E731
        caps = rng.integers(0, n + 2, size=n_req)
        expected = _algorithm_1_numpy(conf, sps, caps)
        assert schedule_prefix_lengths(conf, sps, caps).tolist() == expected.tolist()
        assert schedule_prefix_lengths(conf.tolist(), sps, caps.tolist()).tolist() == expected.tolist()
