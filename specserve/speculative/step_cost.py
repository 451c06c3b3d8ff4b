"""The target's steps-per-second curve SPS(B) for B rows per forward, which the DSpark
scheduler trades against expected accepted tokens (paper §3.2.2: "profiled once during
engine initialization and stored as a lightweight cost table").

`profile_step_cost` times `forward_step` on a scratch cache, with the rows spread evenly over
the slots as verification batches are, and fits a straight line t(B) = a + b*B (b >= 0) to the
medians of each band of ROW_TILE row counts (`fit_by_row_tile`): within a band the cost grows
smoothly, and a smooth, non-increasing SPS keeps Algorithm 1's early stop from halting at a timing
blip; from band to band it jumps, as the kernels take rows a tile at a time. Any table is made non-increasing
(more rows never run faster). A table can be saved to and loaded from JSON
({"rows": [...], "seconds": [...]}) to skip profiling or to pin it. The proposer adds its own
per-step drafting time to the table's, so SPS is the rate of whole engine steps.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from ..errors import OptionError
from ..models.step_batch import StepBatch

ROW_TILE = 16       # rows the AMX kernels multiply at once: a step's cost jumps past each multiple


class StepCostTable:
    def __init__(self, rows: list[int], seconds: list[float]):
        if not rows or len(rows) != len(seconds) or any(s <= 0 for s in seconds):
            raise OptionError("a step cost table needs matching, positive 'rows' and 'seconds' lists")
        order = np.argsort(rows)
        self.rows = np.asarray(rows, dtype=np.int64)[order]
        self.seconds = np.maximum.accumulate(np.asarray(seconds, dtype=np.float64)[order])
        self._seconds: list[float] = []         # asked every engine step: worked out once per row count

    def steps_per_second(self, n_rows: int) -> float:
        """1 / step time at n_rows (linear interpolation; linear growth past the last entry)."""
        return 1.0 / self.step_seconds(n_rows)[n_rows]

    def step_seconds(self, n_rows: int) -> list[float]:
        """Step times for 0..n_rows rows (and maybe more) as a list to index: Algorithm 1 reads one per
        candidate row, every drafting step."""
        if len(self._seconds) <= n_rows:
            self._seconds = [self._interpolated(max(rows, 1)) for rows in range(2 * n_rows + 1)]
        return self._seconds

    def _interpolated(self, n_rows: int) -> float:
        last = int(self.rows[-1])
        if n_rows > last:
            return float(self.seconds[-1]) * n_rows / last
        return float(np.interp(n_rows, self.rows, self.seconds))

    @classmethod
    def load(cls, path: str | Path) -> "StepCostTable":
        path = Path(path)
        if not path.is_file():
            raise OptionError(f"step cost table not found: {path}")
        try:
            data = json.loads(path.read_text())
            return cls(list(data["rows"]), list(data["seconds"]))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise OptionError(f"step cost table {path} is not valid ({{'rows': [...], 'seconds': [...]}}): "
                              f"{exc}") from exc


def profile_step_cost(target, n_slots: int, max_rows: int, context: int = 128, repeats: int = 5,
                      max_points: int = 24, fit: bool = True) -> StepCostTable:
    """Median forward time for total row counts 1..max_rows (every count, or `max_points` spread
    geometrically when there are more), rows spread over the slots; fitted by row tile unless `fit` is
    False (the medians themselves, for benchmarks: without AMX the kernels take rows 4 at a time, and a line
    through 1-16 rows put 4 rows of the bundled target on a Zen 4 at 0.40 ms where they take 0.30)."""
    per_slot_max = -(-max_rows // n_slots)
    context = max(1, min(context, target.config.max_position_embeddings - per_slot_max - 1))
    cache = target.new_cache(n_slots, context + per_slot_max + 1)
    points = (list(range(1, max_rows + 1)) if max_rows <= max_points else
              sorted({int(round(r)) for r in np.geomspace(1, max_rows, max_points)} |
                     {r for tile_end in range(ROW_TILE, max_rows, ROW_TILE) for r in (tile_end, tile_end + 1)}))
    rows_timed, seconds = [], []
    with torch.inference_mode():
        for total in points:
            used = min(n_slots, total)
            per_slot = [total // used + (1 if i < total % used else 0) for i in range(used)]
            segments = [(slot, torch.ones(n, dtype=torch.int64), context) for slot, n in enumerate(per_slot)]
            times = []
            for _ in range(repeats + 1):
                for slot in range(used):
                    cache.lengths[slot] = context
                batch = StepBatch.build(segments, list(range(total)), device=target.device)
                t0 = time.perf_counter()
                target.forward_step(batch, cache)
                times.append(time.perf_counter() - t0)
            rows_timed.append(total)
            seconds.append(float(np.median(times[1:])))     # the first run warms up
    for slot in range(n_slots):
        cache.lengths[slot] = 0
    return StepCostTable(rows_timed, fit_by_row_tile(rows_timed, seconds) if fit else seconds)


def fit_by_row_tile(rows: list[int], seconds: list[float]) -> list[float]:
    """A straight line a + b*B (b >= 0) through the medians of each ROW_TILE band of row counts (1-16,
    17-32, ...), evaluated at `rows`: within a band the cost grows smoothly, and a smooth SPS keeps Algorithm
    1's early stop from halting at a timing blip; across bands it jumps (the AMX kernels take the rows 16 at
    a time: 20 rows cost 25 % more than 16, while 4 -> 16 cost 20 %), and one line through every band made
    16-row verification steps look 15 % dearer than they are, and each of their rows twice as dear."""
    fitted = [0.0] * len(rows)
    bands: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        bands.setdefault((r - 1) // ROW_TILE, []).append(i)
    for members in bands.values():
        x = np.asarray([rows[i] for i in members], dtype=np.float64)
        y = np.asarray([seconds[i] for i in members])
        if len(members) < 2:
            slope, intercept = 0.0, float(y[0])
        else:
            slope, intercept = np.polyfit(x, y, 1)
            slope = max(float(slope), 0.0)
            intercept = max(float(intercept), float(y.min()) * 0.5) if slope > 0 else float(np.median(y))
        for i in members:
            fitted[i] = intercept + slope * rows[i]
    return fitted
