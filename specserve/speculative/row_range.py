"""Rows of a target forward's outputs kept by reference until a draft reads them.

With --spec-schedule most steps may not draft, and each small tensor operation costs µs (it runs on
caches the step's weights just evicted, docs/speed.md), so the drafters that read the target's
features (DFlash / DSpark taps, EAGLE-3 / MTP features) slice them only when a draft feeds them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RowRange:
    """Rows [start, start + n) of each tensor in `tensors` (one forward's outputs, [N, ...] each)."""
    tensors: tuple[torch.Tensor, ...]
    start: int
    n: int

    def rows(self) -> list[torch.Tensor]:
        return [t[self.start:self.start + self.n] for t in self.tensors]

    def addresses(self) -> list[int]:
        """Where the range's first row of each tensor is, for a native call that reads the rows in place
        (float32 tensors with contiguous rows, as the native forward writes its taps)."""
        return [t.data_ptr() + self.start * t.stride(0) * t.element_size() for t in self.tensors]

    def part(self, first: int, n: int) -> "RowRange":
        """Rows [first, first + n) of this range."""
        return RowRange(self.tensors, self.start + first, n)


def joined_rows(ranges: list[RowRange]) -> torch.Tensor:
    """The first tensor's rows of every range, in order, as one [sum n, ...] tensor: a slice where they are
    consecutive rows of one tensor (a drafter's queued rows and pending row usually are), else a copy."""
    first = ranges[0]
    t, end = first.tensors[0], first.start + first.n
    for r in ranges[1:]:
        if r.tensors[0] is not t or r.start != end:
            return torch.cat([r.rows()[0] for r in ranges])
        end += r.n
    return t[first.start:end]
