"""draft-mtp: the target's own multi-token-prediction head drafts (docs/reference/eagle3-mtp.md §3,
docs/reference/llamacpp-speculative.md §5.7). The head is read from the target checkpoint, or from
`-md DIR`, a head-only folder merged over the target checkpoint (models/mtp_format.py).

Each row pairs the next token with the target's final (post-norm) hidden state; chained
steps reuse the one head and feed back its own post-norm output. The bookkeeping is shared
with draft-eagle3 (hidden_chain.py).
"""
from __future__ import annotations

from ..models.mtp_format import load_mtp_head
from .base import ProposerContext
from .hidden_chain import HiddenChainProposer


class MtpProposer(HiddenChainProposer):
    name = "draft-mtp"

    def __init__(self, ctx: ProposerContext):
        super().__init__(ctx)
        self.head = load_mtp_head(ctx.target, ctx.draft_model_dir)
        self.serve_head()
