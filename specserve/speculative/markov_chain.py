"""DSpark's sequential stage: the Markov-biased chain over one block, for every slot at once.

    logits'_k = U_k + W2 · W1[prev_k],   prev_1 = anchor,  prev_k = draft k-1
(docs/reference/dflash-dspark.md §3.2, §3.5). Position k can only be computed once draft k-1 is
known, so the chain loops over the n block positions, but each step is one batched operation
over all slots. At temperature 0 a slot takes the argmax; at T > 0 it draws from q_k, its request's
sampler (top-k, top-p, min-p, then T) over logits'_k, with one uniform of its own generator per
position (the first token whose cumulative probability passes it), and the chain conditions on the
SAMPLED token. q_k travels with the draft: it is exactly the distribution draft k came from.
Without a Markov head (DFlash) every position is independent and the chain is one step. On the
native kernels the chain runs inside the drafter's one native call (kernels/native/block_draft.cpp).
Training uses the teacher-forced form (prev = ground truth), equal to the chain when the
drafts equal the teacher tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..random_stream import draw_uniforms
from ..sampling import SamplingParams, draw_with_uniform, target_probs



@dataclass
class BlockChain:
    """A block's drafts (tokens, anchors and q numpy from the native call, tensors from PyTorch)."""
    tokens: torch.Tensor | np.ndarray       # [S, n] int64 drafts
    logits: torch.Tensor                    # [S, n, V] float32 Markov-corrected logits, before temperature
    anchors: torch.Tensor | np.ndarray      # [S] int64
    q: torch.Tensor | np.ndarray | None = None    # [S, n, V] the distributions the sampled slots drew from
    confidence: np.ndarray | None = None    # [S, n] DSpark's confidence head, when the native call gave it

    @property
    def prev(self) -> np.ndarray:
        """[S, n] the token each position was conditioned on (anchor, d_1..d_{n-1}), as numpy: only the
        confidence head reads it, on the serving path, where numpy calls cost less than torch ones."""
        anchors, tokens = (np.asarray(t.cpu() if isinstance(t, torch.Tensor) else t) for t in (self.anchors, self.tokens))
        return np.concatenate([anchors[:, None], tokens[:, :-1]], axis=1)


def draft_uniforms(generators: list[torch.Generator | None], sampling: list[bool], n: int,
                   out: np.ndarray | None = None) -> np.ndarray | None:
    """Per-slot uniforms [S, n] float64 for the draws (zero rows for greedy slots), or None if no slot samples
    (numpy: the native call reads it in place, and a tensor made per draft costs µs); written into `out`
    [S, n] when given (a native call's buffer)."""
    if not any(sampling):
        return None
    if out is None:
        if len(generators) == 1:        # one slot (the common case): its uniforms as they are
            return draw_uniforms(generators[0], n)[None]
        out = np.empty((len(generators), n))
    for i, (gen, on) in enumerate(zip(generators, sampling)):
        out[i] = draw_uniforms(gen, n) if on else 0.0
    return out


def run_block_chain(base_logits: torch.Tensor, anchors: torch.Tensor, markov_head=None,
                    temperatures: torch.Tensor | None = None, uniforms: np.ndarray | None = None,
                    id_map: torch.Tensor | None = None, samplers: list | None = None) -> BlockChain:
    """base_logits [S, n, V] float32; anchors [S]; temperatures [S] (<= 0: greedy); uniforms from draft_uniforms;
    id_map [V] the token id of each logit column when the lm_head was cut to some tokens (tokens are token ids,
    logits and q keep the cut's columns); samplers [S] the slots' requests, whose top_k, top_p and min_p
    filter q (DraftRequest; None: no filter)."""
    n_slots, n, vocab = base_logits.shape
    id_map = None if id_map is None else id_map.to(base_logits.device)
    sampled = [] if uniforms is None else [s for s in range(n_slots) if float(temperatures[s]) > 0]
    q = torch.zeros(n_slots, n, vocab, device=base_logits.device) if sampled else None
    params = {}
    for s in sampled:
        r = samplers[s] if samplers else None
        params[s] = SamplingParams(temperature=float(temperatures[s]), **({} if r is None else dict(
            top_k=r.top_k, top_p=r.top_p, min_p=r.min_p)))

    def pick(logits_k: torch.Tensor, k: int) -> torch.Tensor:
        tokens = logits_k.argmax(dim=-1)
        for s in sampled:
            q[s, k] = target_probs(logits_k[s:s + 1], params[s])[0]
            tokens[s] = draw_with_uniform(q[s, k], float(uniforms[s, k]))
        return tokens if id_map is None else id_map[tokens]

    if markov_head is None:         # DFlash: positions are independent
        logits = base_logits.float()
        tokens = torch.stack([pick(logits[:, k], k) for k in range(n)], dim=1)
        return BlockChain(tokens, base_logits, anchors, q)
    w1, w2t = markov_head.serving_weights()
    if id_map is not None:
        w2t = w2t[:, id_map]
    tokens = torch.empty(n, n_slots, dtype=torch.int64, device=base_logits.device)
    logits = torch.empty(n, n_slots, vocab, dtype=torch.float32, device=base_logits.device)
    base_by_pos = base_logits.float().transpose(0, 1)
    prev_k = anchors.to(torch.int64)
    for k in range(n):
        torch.addmm(base_by_pos[k], w1[prev_k], w2t, out=logits[k])
        prev_k = pick(logits[k], k)
        tokens[k] = prev_k
    return BlockChain(tokens.t(), logits.transpose(0, 1), anchors, q)


def teacher_prev_tokens(anchors: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """The tokens each block position is conditioned on in training: [anchor, teacher[..., :-1]]."""
    return torch.cat([anchors.unsqueeze(-1), teacher[..., :-1]], dim=-1)


def teacher_forced_logits(base_logits: torch.Tensor, anchors: torch.Tensor, teacher: torch.Tensor,
                          markov_head) -> tuple[torch.Tensor, torch.Tensor]:
    """Training form: prev = [anchor, teacher[..., :-1]]. Returns (logits' [..., n, V], prev [..., n])."""
    prev = teacher_prev_tokens(anchors, teacher)
    return base_logits + markov_head(prev).float(), prev
