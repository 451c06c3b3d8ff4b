"""The profiled step-cost table: a line per band of 16 row counts (the AMX kernels' row tile)."""
import pytest

from specserve.speculative.step_cost import ROW_TILE, StepCostTable, fit_by_row_tile


def test_each_row_tile_band_gets_its_own_line():
    """Within a band the medians' noise is smoothed to a line; across bands the jump stays (one line
    through every count had put each of 16 rows at twice its cost)."""
    rows = [1, 2, 4, 8, 12, 16, 17, 20, 26, 32, 33]
    noise = [0.0, 3e-6, -3e-6, 2e-6, -2e-6, 0.0, 0.0, 4e-6, -4e-6, 0.0, 0.0]
    truth = [500e-6 + 10e-6 * r + (150e-6 if r > ROW_TILE else 0.0) + (150e-6 if r > 2 * ROW_TILE else 0.0)
             for r in rows]
    fitted = fit_by_row_tile(rows, [t + n for t, n in zip(truth, noise)])
    for r, f, t in zip(rows, fitted, truth):
        assert f == pytest.approx(t, abs=5e-6), r
    first = [f for r, f in zip(rows, fitted) if r <= ROW_TILE]
    assert all(b - a == pytest.approx(10e-6 * (r2 - r1), abs=1e-6)
               for (a, r1), (b, r2) in zip(zip(first, rows), zip(first[1:], rows[1:])))
    table = StepCostTable(rows, fitted)           # (made-up costs: the table keeps their jump, nothing is timed)
    assert 1 / table.steps_per_second(17) - 1 / table.steps_per_second(16) > 100e-6


def test_a_band_that_gets_cheaper_is_flat():
    assert fit_by_row_tile([1, 8, 16], [0.003, 0.002, 0.001]) == [0.002, 0.002, 0.002]
