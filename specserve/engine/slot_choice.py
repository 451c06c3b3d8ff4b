"""Which free slot a new request takes, chosen as llama-server chooses
(tools/server/server-context.cpp, `get_available_slot`):

  1. the free slot whose tokens from its last request share the longest common prefix with the new
     prompt, counted as a fraction of the prompt, when that fraction exceeds the similarity
     threshold (`-sps/--slot-prompt-similarity`, 0.1 as in llama.cpp; 0 turns this off);
  2. otherwise the least recently released free slot; among slots never used, the highest-numbered
     (llama.cpp's comparison keeps the last slot of equally old ones).

Output never depends on the slot (the forward is batch-invariant); what a slot carries from one
request to the next is the state of the n-gram methods (docs/ngram.md), so a conversation that
comes back to its slot finds its n-grams there.
"""
from __future__ import annotations

import numpy as np


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


class SlotChooser:
    def __init__(self, n_slots: int, similarity: float = 0.1):
        self.similarity = similarity
        self.history: list[np.ndarray | None] = [None] * n_slots    # the tokens a slot held when released
        self.released_at = [-1] * n_slots
        self.clock = 0

    def release(self, slot: int, tokens: np.ndarray) -> None:
        self.history[slot] = np.array(tokens, dtype=np.int64)
        self.clock += 1
        self.released_at[slot] = self.clock

    def choose(self, free: list[int], prompt: np.ndarray) -> int:
        """One of the `free` slots (not empty) for a request with this prompt."""
        if self.similarity > 0 and len(prompt):
            best, best_share = None, 0.0
            for slot in free:
                held = self.history[slot]
                if held is None or not len(held):
                    continue
                share = common_prefix(held, prompt) / len(prompt)
                if share > best_share and share > self.similarity:
                    best, best_share = slot, share
            if best is not None:
                return best
        return max(free, key=lambda slot: (-self.released_at[slot], slot))
