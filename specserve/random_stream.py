"""Per-request random numbers: a torch.Generator that also hands out float64 uniforms from a buffer.

Every sampled step draws a few uniforms (the verifier's, the draft chain's); as one torch.rand each, right
after a forward, they cost several µs apiece. The CPU generator's stream does not depend on how its draws
are split (rand(256) equals rand(3), rand(4), ... concatenated), so drawing CHUNK at a time and handing
them out in order gives the same numbers as a torch.rand per use, at one call per CHUNK.
"""
from __future__ import annotations

import numpy as np
import torch

CHUNK = 256


class RequestGenerator(torch.Generator):
    """A seeded torch.Generator with a buffer of its next uniforms. Draws made from it directly (e.g.
    torch.multinomial on the PyTorch path) come after the buffered ones."""

    def __new__(cls, seed: int):
        return super().__new__(cls)         # torch.Generator's own argument is a device

    def __init__(self, seed: int):
        super().__init__()
        self.manual_seed(seed)
        self._buffer = np.empty(0)
        self._next = 0

    def uniforms(self, n: int) -> np.ndarray:
        """The next n uniforms in [0, 1), float64 (a read-only view: never written afterwards)."""
        if self._next + n > self._buffer.shape[0]:
            fresh = torch.rand(max(CHUNK, n), generator=self, dtype=torch.float64).numpy()
            self._buffer = np.concatenate([self._buffer[self._next:], fresh])
            self._next = 0
        out = self._buffer[self._next:self._next + n]
        self._next += n
        return out


def draw_uniforms(generator: torch.Generator | None, n: int) -> np.ndarray:
    """n float64 uniforms from the generator (a RequestGenerator's buffer, else one torch.rand; None: torch's
    default generator)."""
    if isinstance(generator, RequestGenerator):
        return generator.uniforms(n)
    return torch.rand(n, generator=generator, dtype=torch.float64).numpy()
