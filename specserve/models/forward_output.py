"""What a serving forward returns."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ForwardOutput:
    logits: torch.Tensor | None                      # [n_out, V] float32
    taps: dict[int, torch.Tensor] = field(default_factory=dict)   # layer -> [N, H]
    final_hidden: torch.Tensor | None = None          # [N, H] after the final norm
    argmax: torch.Tensor | None = None                # [n_out] int64, when the forward computed it
