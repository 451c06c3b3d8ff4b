"""Lossless verification of one slot's draft against the target's rows.

Rows: row i holds the target's prediction for the token after (id_last, d_1..d_i),
so row i verifies draft token d_{i+1} and the last row gives the bonus token.
Every function returns the emitted tokens: the accepted draft prefix followed by
one target token (the correction at the first rejection, or the bonus).

* greedy: accept while d_i == argmax;
* one-hot drafts (no q): sample y_i from the target and accept while y_i == d_i
  ("sample and compare", llama.cpp's rule; exactly the target distribution);
* drafts with q: accept d_i with probability min(1, p(d_i)/q(d_i)); at the first
  rejection emit a sample of norm(max(0, p - q)); if all pass, a bonus from p.
`verify` picks the rule; with an empty draft every rule is plain decoding of one token.
"""
from __future__ import annotations

import numpy as np
import torch

from ..kernels import sampling as native_sampling
from ..random_stream import draw_uniforms
from ..sampling import SamplingParams, on_native_kernels, sample_rows, target_probs


def verify(logits: torch.Tensor, draft: list[int], q_probs: torch.Tensor | np.ndarray | None, params: SamplingParams,
           generator: torch.Generator | None, argmax: list[int] | None = None, first_row: int = 0) -> list[int]:
    """The tokens one slot emits from its rows of logits (rows first_row .. first_row + len(draft)): the
    accepted draft prefix, then one token of the target's. `argmax` may carry every row's greedy token,
    already computed (a decode step then touches no tensor at all)."""
    end = first_row + len(draft) + 1
    if params.greedy:
        return verify_greedy(draft, argmax[first_row:end] if argmax is not None
                             else logits[first_row:end].argmax(dim=-1).tolist())
    if on_native_kernels(logits):      # one call; a row's distribution only once the drafts before it passed
        return native_sampling.verify_logits(logits, draft, q_probs, params.top_k, params.top_p, params.min_p,
                                             params.temperature, generator, first_row)
    q_probs = torch.from_numpy(q_probs) if isinstance(q_probs, np.ndarray) else q_probs
    probs = target_probs(logits[first_row:end], params)
    if not draft:
        return [int(sample_rows(probs, generator)[0])]
    if q_probs is None:
        return verify_sample_compare(draft, probs, generator)
    return verify_rejection(draft, probs, q_probs, generator)


def verify_greedy(draft: list[int], target_argmax: list[int]) -> list[int]:
    n_acc = 0
    for tok, best in zip(draft, target_argmax):
        if tok != best:
            break
        n_acc += 1
    return draft[:n_acc] + [target_argmax[n_acc]]


def verify_sample_compare(draft: list[int], probs: torch.Tensor, generator: torch.Generator) -> list[int]:
    """probs: [k+1, V], the target's sampling distribution per row."""
    samples = sample_rows(probs, generator).tolist()
    return verify_greedy(draft, samples)


def verify_rejection(draft: list[int], probs: torch.Tensor, q_probs: torch.Tensor,
                     generator: torch.Generator) -> list[int]:
    """probs: [k+1, V] target; q_probs: [k, V], the distributions the draft tokens were drawn from.
    (The native kernels run this rule from the logits: kernels/sampling.verify_logits, same uniforms.)"""
    k = len(draft)
    if k == 0:
        return [int(sample_rows(probs[:1], generator)[0])]
    idx = torch.tensor(draft, dtype=torch.int64).unsqueeze(-1)
    p_tok = probs[:k].gather(-1, idx).squeeze(-1)
    q_tok = q_probs[:k].float().gather(-1, idx).squeeze(-1)
    u = torch.from_numpy(draw_uniforms(generator, k))
    accepted = (q_tok > 0) & (u * q_tok.double() <= p_tok.double())
    rejected = (~accepted).nonzero()
    n_acc = int(rejected[0]) if rejected.numel() else k
    if n_acc == k:
        return draft + [int(sample_rows(probs[k:k + 1], generator)[0])]
    residual = (probs[n_acc] - q_probs[n_acc].float()).clamp_min(0)
    total = residual.sum()
    if not total > 0:            # p == q: the rejection had probability 0; fall back to p
        residual = probs[n_acc]
    return draft[:n_acc] + [int(sample_rows((residual / residual.sum()).unsqueeze(0), generator)[0])]
