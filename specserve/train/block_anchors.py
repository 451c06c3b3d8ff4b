"""Random anchors and blocks for block-drafter training (docs/reference/dflash-dspark.md §4.2, §4.4).

Per sequence, anchors are drawn uniformly without replacement from the positions p whose token
and next token are both in the trained (regenerated) part, sorted, and padded with dummy blocks
(keep = False). Block n is [tokens[a_n], MASK, ..., MASK] at positions a_n .. a_n + B - 1; its
draft rows predict tokens[a_n + 1], tokens[a_n + 2], ... (both layouts draft the tokens after
the anchor; they differ in which output rows do it). Labels past the sequence end are invalid,
and only a contiguous valid prefix of each block is trained (DeepSpec's cumprod).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class BlockBatch:
    tokens: torch.Tensor        # [Bz, T] int64, padded with 0
    lengths: torch.Tensor       # [Bz]
    anchors: torch.Tensor       # [Bz, N] int64 (dummy blocks: 0)
    keep: torch.Tensor          # [Bz, N] bool
    block_tokens: torch.Tensor  # [Bz, N, nb]
    labels: torch.Tensor        # [Bz, N, n] int64: tokens[a + 1 + k] (0 where invalid)
    valid: torch.Tensor         # [Bz, N, n] bool: label exists, block kept, contiguous prefix

    def rows(self, part: slice) -> "BlockBatch":
        """The sequences `part` of the batch (a data-parallel rank's share; the padding stays the
        global batch's, so every row is computed exactly as in the whole batch)."""
        return BlockBatch(*(getattr(self, f.name)[part] for f in fields(self)))


def sample_anchors(n_prompt: int, length: int, n_anchors: int, generator: torch.Generator
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted anchors in [max(n_prompt, 0), length - 2] and a keep mask, padded to n_anchors."""
    first = max(n_prompt, 0)
    candidates = max(0, length - 1 - first)
    take = min(n_anchors, candidates)
    anchors = torch.zeros(n_anchors, dtype=torch.int64)
    keep = torch.zeros(n_anchors, dtype=torch.bool)
    if take:
        chosen = torch.randperm(candidates, generator=generator)[:take] + first
        anchors[:take] = chosen.sort().values
        keep[:take] = True
    return anchors, keep


def make_block_batch(sequences: list[tuple[torch.Tensor, int]], n_anchors: int, n_block_rows: int, n_drafts: int,
                     mask_token_id: int, generator: torch.Generator) -> BlockBatch:
    """sequences: (tokens [L] int64, n_prompt). n_block_rows = B; n_drafts = rows that predict drafts."""
    bsz = len(sequences)
    longest = max(int(t.shape[0]) for t, _ in sequences)
    tokens = torch.zeros(bsz, longest, dtype=torch.int64)
    lengths = torch.zeros(bsz, dtype=torch.int64)
    anchors = torch.zeros(bsz, n_anchors, dtype=torch.int64)
    keep = torch.zeros(bsz, n_anchors, dtype=torch.bool)
    for i, (seq, n_prompt) in enumerate(sequences):
        tokens[i, :seq.shape[0]] = seq
        lengths[i] = seq.shape[0]
        anchors[i], keep[i] = sample_anchors(n_prompt, int(seq.shape[0]), n_anchors, generator)
    block = torch.full((bsz, n_anchors, n_block_rows), mask_token_id, dtype=torch.int64)
    block[:, :, 0] = tokens.gather(1, anchors)
    label_pos = anchors.unsqueeze(-1) + 1 + torch.arange(n_drafts)                     # [Bz, N, n]
    in_seq = label_pos < lengths.view(-1, 1, 1)
    labels = tokens.gather(1, label_pos.clamp(max=longest - 1).view(bsz, -1)).view(bsz, n_anchors, n_drafts)
    valid = (in_seq & keep.unsqueeze(-1)).long().cumprod(dim=-1).bool()
    return BlockBatch(tokens, lengths, anchors, keep, block, labels.masked_fill(~valid, 0), valid)
