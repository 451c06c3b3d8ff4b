"""One target forward's worth of rows from several slots, and the index tensors to run it.

Rows are flat ([N] tokens); each slot contributes one contiguous segment of rows at
consecutive positions starting at its current cache length (a prompt chunk, or the
last sampled token followed by its draft). The native kernels read just the per-row
columns (token, position, slot). The PyTorch path's attention runs on a padded
[slots, rows, keys] layout whose key length is rounded up to a multiple of KEY_BLOCK:
with that rounding and at least MIN_ROWS rows per matmul, every row's result is
bit-identical whatever else is in the batch (checked by tests/test_engine_lossless.py),
which is what makes greedy speculation exactly lossless.

Padding every slot to the longest segment would make one long draft (or a prompt chunk)
multiply the attention cost of all the one-row slots beside it, so slots are split into
attention groups by segment length (powers of two) when that saves enough padded rows; each
group is one padded matmul. A group reads its slots' keys as a slice of the cache (slots in
between get padding rows) unless copying its slots' keys is cheaper than that padding.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

KEY_BLOCK = 64
MIN_ROWS = 4
# A group reads a slice of the cache over its slot span, padding the slots in between, unless
# that padding costs more than copying its own slots' keys and values: per slot, a padded row costs
# `group` (query heads per kv head) key-dot-products per key, a copy about SPAN_COPY_COST.
SPAN_COPY_COST = 4


@dataclass
class Segment:
    slot: int
    start: int          # first row in the flat batch
    n_rows: int
    pos0: int           # position of the first row (= slot's cache length before the step)


@dataclass
class AttentionGroup:
    """Slots whose rows go through one padded attention matmul."""
    n_slots: int
    n_rows_padded: int              # Q: rows per slot in the padded layout
    key_len: int                    # Lk: keys attended (multiple of KEY_BLOCK)
    slot_select: slice | torch.Tensor
    rows: torch.Tensor | None       # the group's flat rows, in order (None: every row of the batch)
    pad_index: torch.Tensor | None  # group row -> padded row (None when no padding)
    attn_mask: torch.Tensor         # [S, 1, 1, Q, Lk] bool


def _bucket(n_rows: int) -> int:
    return 1 << max(0, (n_rows - 1).bit_length())


def split_by_length(segs: list[Segment], min_rows: int) -> list[list[Segment]]:
    """One group, or groups by power-of-two segment length when that saves padded rows."""
    padded = len(segs) * max(max(s.n_rows for s in segs), min_rows)
    buckets: dict[int, list[Segment]] = {}
    for s in segs:
        buckets.setdefault(_bucket(max(s.n_rows, min_rows)), []).append(s)
    grouped = sum(len(g) * max(max(s.n_rows for s in g), min_rows) for g in buckets.values())
    if len(buckets) == 1 or padded <= 1.5 * grouped + 32:
        return [segs]
    return [buckets[k] for k in sorted(buckets)]


@dataclass
class StepBatch:
    tokens: torch.Tensor            # [N] int64
    positions: torch.Tensor         # [N] int64
    segments: list[Segment]
    output_rows: torch.Tensor       # [n_out] int64 rows whose logits are needed
    groups: list[AttentionGroup] = field(default_factory=list)   # derived by prepare()
    extra: dict = field(default_factory=dict)
    row_slots: torch.Tensor | None = None    # [N] slot of each row (set by build)

    @property
    def n_tokens(self) -> int:
        return int(self.tokens.shape[0])

    @staticmethod
    def build(rows: list[tuple[int, list[int] | torch.Tensor, int]], outputs: list[int],
              device=None) -> "StepBatch":
        """rows: per slot (slot, token ids, pos0), in the order they go into the batch."""
        segments, tokens, positions, slots, start = [], [], [], [], 0
        for slot, ids, pos0 in rows:
            ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
            n = len(ids)
            segments.append(Segment(slot, start, n, pos0))
            tokens += ids
            positions += range(pos0, pos0 + n)
            slots += [slot] * n
            start += n
        # one numpy array viewed four ways: a decode step takes a few hundred microseconds, and right after
        # the forward each torch call runs on cold caches (numpy + from_numpy cost half a torch.tensor + split)
        flat = np.array(tokens + positions + slots + list(outputs), dtype=np.int64)
        ends = (start, 2 * start, 3 * start, flat.shape[0])
        parts = [torch.from_numpy(flat[a:b]) for a, b in zip((0,) + ends[:3], ends)]
        if device is not None and torch.device(device).type != "cpu":
            parts = [t.to(device) for t in parts]
        tokens_t, positions_t, slots_t, outputs_t = parts
        batch = StepBatch(tokens_t, positions_t, segments, outputs_t)
        batch.row_slots = slots_t
        return batch

    def prepare(self, n_kv_heads: int, capacity: int, group: int) -> None:
        """Compute the index tensors shared by every layer of the forward."""
        segs = self.segments
        device = self.tokens.device
        longest = max(s.pos0 + s.n_rows for s in segs)
        if longest > capacity:
            raise ValueError(f"batch reaches position {longest} beyond the cache capacity {capacity}")
        min_rows = -(-MIN_ROWS // group)
        parts = split_by_length(segs, min_rows)
        self.groups = [self._attention_group(part, min_rows, group, len(parts) == 1, device) for part in parts]
        # where each row's K/V goes in a layer's cache viewed as [slots*kv_heads*ctx, d]
        slot_of_row = torch.cat([torch.full((s.n_rows,), s.slot, dtype=torch.int64) for s in segs]).to(device)
        heads = torch.arange(n_kv_heads, device=device)
        flat = (slot_of_row.unsqueeze(1) * n_kv_heads + heads.unsqueeze(0)) * capacity + self.positions.unsqueeze(1)
        self.extra["cache_index"] = flat.reshape(-1)

    def _attention_group(self, segs: list[Segment], min_rows: int, group: int, whole: bool, device,
                         ) -> AttentionGroup:
        q_rows = max(max(s.n_rows for s in segs), min_rows)
        key_len = -(-max(s.pos0 + s.n_rows for s in segs) // KEY_BLOCK) * KEY_BLOCK
        slots = [s.slot for s in segs]
        lo, hi = min(slots), max(slots)
        missing = hi - lo + 1 - len(segs)
        if missing * q_rows * group <= SPAN_COPY_COST * len(segs):
            # a slice of the cache (no copy of the keys); slots in the span that are not in the
            # group get padding rows, computed and thrown away
            slot_select, place = slice(lo, hi + 1), [s.slot - lo for s in segs]
        else:
            slot_select, place = torch.tensor(slots, dtype=torch.int64, device=device), list(range(len(segs)))
        n_slots = hi - lo + 1 if isinstance(slot_select, slice) else len(segs)
        rows = None if whole else torch.cat([torch.arange(s.start, s.start + s.n_rows) for s in segs]).to(device)
        positions = self.positions if rows is None else self.positions.index_select(0, rows)
        if n_slots == len(segs) and place == list(range(n_slots)) and all(s.n_rows == q_rows for s in segs):
            pad_index = None
            padded_pos = positions.view(n_slots, q_rows)
        else:
            pad_index = torch.cat([torch.arange(s.n_rows, dtype=torch.int64) + p * q_rows
                                   for p, s in zip(place, segs)]).to(device)
            padded_pos = torch.zeros(n_slots * q_rows, dtype=torch.int64, device=device)
            padded_pos.index_copy_(0, pad_index, positions)
            padded_pos = padded_pos.view(n_slots, q_rows)
        keys = torch.arange(key_len, device=device)
        mask = (keys.view(1, 1, -1) <= padded_pos.unsqueeze(-1)).view(n_slots, 1, 1, q_rows, key_len)
        return AttentionGroup(n_slots, q_rows, key_len, slot_select, rows, pad_index, mask)
