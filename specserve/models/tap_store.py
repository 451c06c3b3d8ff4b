"""The target's hidden states that drafters read, kept per slot by position, as the KV cache is.

DFlash / DSpark read the residual stream after some target layers ("taps") for every committed
position of a slot's context; EAGLE-3 reads taps too, MTP (and EAGLE-3 without aux taps) the final
normed hidden state. The target's forward writes each row's taps straight into this store at
(slot, position) (the native forward in C, from the rows' slots and positions), so a step costs no
Python for a drafter that does not draft this step, and a drafter reads a slot's rows
[start, end) when it drafts. Rows past a slot's committed length may hold rejected drafts'
states; drafters read only committed positions, which are never written again while the request
lasts (a new request in the slot writes from position 0).

Layout: [slots, capacity, layers * hidden], one column block of `hidden` per entry of `layers`
(sorted tap layers, then FINAL when a drafter wants the final normed state): the concatenation
EAGLE-3's and DFlash's fc read, so a drafter reading all the columns gets a slice, not a copy.
Size: slots x capacity x layers x hidden x 4 bytes (the bundled model with 4 slots, 1024 positions
and 3 taps: 12 MiB).
"""
from __future__ import annotations

import ctypes

import torch

FINAL = -2          # the final normed hidden state, as a tap "layer" (-1 is the embedding output)


class TapStore:
    def __init__(self, layers: tuple[int, ...], n_slots: int, capacity: int, hidden: int):
        self.layers = tuple(layers)
        self.hidden = hidden
        self.capacity = capacity
        self.width = len(self.layers) * hidden
        self.data = torch.empty(n_slots, capacity, self.width, dtype=torch.float32)
        self.per_slot = self.data.unbind(0)                 # [capacity, width] views, made once
        self.c_layers = (ctypes.c_int32 * len(self.layers))(*self.layers)
        self.row_bytes = self.width * 4
        self.slot_addresses = [t.data_ptr() for t in self.per_slot]
        self.per_slot_np = [t.numpy() for t in self.per_slot]

    @classmethod
    def for_drafters(cls, taps: tuple[int, ...], n_slots: int, capacity: int, hidden: int):
        """The store for these taps (FINAL among them: the final state), or None when no drafter reads any."""
        layers = tuple(sorted(set(taps) - {FINAL})) + ((FINAL,) if FINAL in taps else ())
        return cls(layers, n_slots, capacity, hidden) if layers else None

    def rows(self, slot: int, start: int, end: int, layers: tuple[int, ...] | None = None) -> torch.Tensor:
        """[end - start, len(layers) * hidden] the slot's rows at positions [start, end), the column blocks
        of `layers` in that order (default: all): a slice when they are all of them in store order, else
        a copy. Contiguous either way (native calls read them in place)."""
        block = self.per_slot[slot][start:end]
        if layers is None or tuple(layers) == self.layers:
            return block
        h = self.hidden
        parts = [block[:, i * h:(i + 1) * h] for i in (self.layers.index(layer) for layer in layers)]
        return parts[0].contiguous() if len(parts) == 1 else torch.cat(parts, dim=-1)

    def numpy_rows(self, slot: int, start: int, end: int):
        """`rows(slot, start, end)` as a numpy view (slicing one costs a tenth of slicing a tensor)."""
        return self.per_slot_np[slot][start:end]

    def row_address(self, slot: int, position: int) -> int:
        """Where the slot's row at `position` starts (all the store's layers, as `rows` gives them)."""
        return self.slot_addresses[slot] + position * self.row_bytes

    def write(self, row_slots: torch.Tensor, positions: torch.Tensor, states: dict[int, torch.Tensor]) -> None:
        """The PyTorch forward's rows: states[layer] [N, hidden] for every layer of the store."""
        rows = torch.cat([states[layer].float() for layer in self.layers], dim=-1)
        self.data[row_slots, positions] = rows
