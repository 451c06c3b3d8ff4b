"""What a serving forward returns."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ForwardOutput:
    logits: torch.Tensor | None                      # [n_out, V] float32
    # the residual stream after the tapped layers, one column block of H per layer in `tap_layers` order:
    # [N, layers * H], the layout EAGLE-3's and DFlash's fc read (one tensor: each small allocation right
    # after a forward costs µs, and the taps are written on every step whether a draft reads them or not)
    taps: torch.Tensor | None = None
    tap_layers: tuple[int, ...] = ()
    final_hidden: torch.Tensor | None = None          # [N, H] after the final norm
    argmax: torch.Tensor | None = None                # [n_out] int64, when the forward computed it

    def tap(self, layer: int) -> torch.Tensor:
        """[N, H] the residual stream after `layer` (-1: the embedding output)."""
        return tap_columns(self.taps, self.tap_layers, (layer,))


def tap_columns(taps: torch.Tensor, tap_layers: tuple[int, ...], wanted: tuple[int, ...]) -> torch.Tensor:
    """The column blocks of `wanted` layers, in that order: `taps` itself when they are all of them in
    its order (the usual case: one drafter), else a copy."""
    if tuple(wanted) == tuple(tap_layers):
        return taps
    hidden = taps.shape[1] // len(tap_layers)
    blocks = [taps[:, i * hidden:(i + 1) * hidden] for i in (tap_layers.index(layer) for layer in wanted)]
    return blocks[0].contiguous() if len(blocks) == 1 else torch.cat(blocks, dim=-1)
