"""What a serving forward returns."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ForwardOutput:
    logits: torch.Tensor | None                      # [n_out, V] float32
    # the residual stream after the tapped layers, one column block of H per layer in `tap_layers` order:
    # [N, layers * H] (the engine's forward writes them into a TapStore instead, tap_store.py)
    taps: torch.Tensor | None = None
    tap_layers: tuple[int, ...] = ()
    final_hidden: torch.Tensor | None = None          # [N, H] after the final norm
    argmax: torch.Tensor | None = None                # [n_out] int64, when the forward computed it

    def tap(self, layer: int) -> torch.Tensor:
        """[N, H] the residual stream after `layer` (-1: the embedding output)."""
        hidden = self.taps.shape[1] // len(self.tap_layers)
        i = self.tap_layers.index(layer)
        return self.taps[:, i * hidden:(i + 1) * hidden]
