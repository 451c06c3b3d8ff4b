"""draft-eagle3: an EAGLE-3 head drafts from the target's hidden states (docs/reference/eagle3-mtp.md §1,
docs/reference/llamacpp-speculative.md §5.6). `-md DIR` is the draft folder in any public layout
(models/eagle3_format.py) or a GGUF file.

The head reads the residual stream at the target layers its checkpoint names (taps), projects
them with `fc`, and chains on its own hidden state; the bookkeeping is shared with
draft-mtp (hidden_chain.py). Drafted ids of a reduced draft vocabulary are mapped with d2t.
"""
from __future__ import annotations

import torch

from ..errors import OptionError
from ..models.eagle3_format import load_eagle3
from ..models.tap_store import FINAL
from .base import ProposerContext
from .hidden_chain import HiddenChainProposer


class Eagle3Proposer(HiddenChainProposer):
    name = "draft-eagle3"
    needs_draft_model = True

    def __init__(self, ctx: ProposerContext):
        super().__init__(ctx)
        if not ctx.draft_model_dir:
            raise OptionError("--spec-type draft-eagle3 needs the EAGLE-3 draft: -md / --spec-draft-model DIR")
        self.head, taps = load_eagle3(ctx.draft_model_dir, ctx.target)
        # the taps in the checkpoint's concatenation order, or the final state without aux taps
        self.taps = tuple(taps) if self.head.opts.use_aux else (FINAL,)
        self.serve_head(self.head.target_ids())

    def project(self, features: torch.Tensor) -> torch.Tensor:
        if not self.head.opts.use_aux:
            return features
        return self.head.project([features])          # fc over the concatenated taps
