"""DSpark's sequential stage: the Markov-biased chain over one block, for every slot at once.

    logits'_k = U_k + W2 · W1[prev_k],   prev_1 = anchor,  prev_k = draft k-1
(docs/reference/dflash-dspark.md §3.2, §3.5). Position k can only be computed once draft k-1 is
known, so the chain loops over the n block positions, but each step is one batched operation
over all slots. At temperature 0 a slot takes the argmax; at T > 0 it samples from
softmax(logits'_k / T) with its own generator (Gumbel-max with noise drawn per slot), and the
chain conditions on the SAMPLED token, so q_k is exactly the distribution draft k came from.
Without a Markov head (DFlash) every position is independent and the chain is one step. On the
native kernels the chain runs inside the drafter's one native call (kernels/native/block_draft.cpp).
Training uses the teacher-forced form (prev = ground truth), equal to the chain when the
drafts equal the teacher tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch



@dataclass
class BlockChain:
    tokens: torch.Tensor     # [S, n] int64 drafts
    logits: torch.Tensor     # [S, n, V] float32 Markov-corrected logits, before temperature
    anchors: torch.Tensor    # [S] int64

    @property
    def prev(self) -> torch.Tensor:
        """[S, n] the token each position was conditioned on (anchor, d_1..d_{n-1}); only the confidence
        head reads it, so it is not built for every draft."""
        return teacher_prev_tokens(self.anchors.to(torch.int64), self.tokens)


def gumbel_noise(generators: list[torch.Generator | None], sampling: list[bool], n: int, vocab: int,
                 device=None) -> torch.Tensor | None:
    """Per-slot Gumbel(0, 1) noise [S, n, V] (zero rows for greedy slots), or None if no slot samples."""
    if not any(sampling):
        return None
    rows = []
    for gen, on in zip(generators, sampling):
        if on:
            u = torch.rand(n, vocab, generator=gen)
            rows.append(-torch.log(-torch.log(u)))
        else:
            rows.append(torch.zeros(n, vocab))
    return torch.stack(rows).to(device)


def run_block_chain(base_logits: torch.Tensor, anchors: torch.Tensor, markov_head=None,
                    temperatures: torch.Tensor | None = None, noise: torch.Tensor | None = None) -> BlockChain:
    """base_logits [S, n, V] float32; anchors [S]; temperatures [S] (<= 0: greedy); noise from gumbel_noise."""
    n_slots, n, _ = base_logits.shape
    scale = None
    if temperatures is not None:
        scale = torch.where(temperatures > 0, temperatures, torch.ones_like(temperatures)).view(n_slots, 1).float()

    def pick(logits_k: torch.Tensor, k: int) -> torch.Tensor:
        if noise is None:           # greedy rows: dividing by a positive scale keeps the argmax
            return logits_k.argmax(dim=-1)
        return (logits_k / scale + noise[:, k]).argmax(dim=-1)

    if markov_head is None:         # DFlash: positions are independent, one vectorised pick
        if noise is None:
            tokens = base_logits.argmax(dim=-1)
        else:
            tokens = (base_logits / scale.unsqueeze(-1) + noise).argmax(dim=-1)
        return BlockChain(tokens, base_logits, anchors)
    w1, w2t = markov_head.serving_weights()
    tokens = torch.empty(n, n_slots, dtype=torch.int64, device=base_logits.device)
    logits = torch.empty(n, n_slots, base_logits.shape[-1], dtype=torch.float32, device=base_logits.device)
    base_by_pos = base_logits.float().transpose(0, 1)
    prev_k = anchors.to(torch.int64)
    for k in range(n):
        torch.addmm(base_by_pos[k], w1[prev_k], w2t, out=logits[k])
        prev_k = pick(logits[k], k)
        tokens[k] = prev_k
    return BlockChain(tokens.t(), logits.transpose(0, 1), anchors)


def teacher_prev_tokens(anchors: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """The tokens each block position is conditioned on in training: [anchor, teacher[..., :-1]]."""
    return torch.cat([anchors.unsqueeze(-1), teacher[..., :-1]], dim=-1)


def teacher_forced_logits(base_logits: torch.Tensor, anchors: torch.Tensor, teacher: torch.Tensor,
                          markov_head) -> tuple[torch.Tensor, torch.Tensor]:
    """Training form: prev = [anchor, teacher[..., :-1]]. Returns (logits' [..., n, V], prev [..., n])."""
    prev = teacher_prev_tokens(anchors, teacher)
    return base_logits + markov_head(prev).float(), prev
