"""The target's sampling distribution and the draws from it, on the native kernels (sampler.cpp).

Same chain as specserve.sampling.target_probs (llama.cpp's order: top-k, then top-p and min-p on
the temperature-1 distribution of what is left, then the temperature), in one call per batch of
rows instead of a dozen PyTorch operations per row.
"""
from __future__ import annotations

import ctypes

import numpy as np
import torch

from . import library
from ..random_stream import draw_uniforms


def sampling_probs(logits: torch.Tensor, top_k: int, top_p: float, min_p: float, temperature: float) -> torch.Tensor:
    """float32 rows [R, V] -> the distribution each row samples from [R, V]."""
    x = logits.float().contiguous()
    probs = torch.empty_like(x)
    library().ss_sampling_probs(x.data_ptr(), x.shape[0], x.shape[1], top_k, top_p, min_p, temperature,
                                probs.data_ptr())
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of probs [R, V], from uniforms drawn with the request's generator."""
    p = probs.float().contiguous()
    uniforms = draw_uniforms(generator, p.shape[0])
    tokens = torch.empty(p.shape[0], dtype=torch.int64)
    library().ss_sample(p.data_ptr(), p.shape[0], p.shape[1], uniforms.ctypes.data, tokens.data_ptr())
    return tokens


def verify_logits(logits: torch.Tensor, draft: list[int], q_probs, top_k: int, top_p: float, min_p: float,
                  temperature: float, generator: torch.Generator | None, first_row: int = 0) -> list[int]:
    """One slot's verification in one call, from its logits rows [first_row, first_row + k + 1) of [R, V]
    (speculative/verify.py; read in place, not sliced): rejection sampling with q_probs [>= k, V] (a tensor,
    or numpy: a native draft's q rows), sample and compare (which with no draft is plain sampling) without.
    Same k + 1 uniforms of the generator as `sample(sampling_probs(...))` and the rejection rule, but a
    row's distribution is worked out only when the drafts before it were accepted, and no tensor is made
    per call beyond the uniforms: right after a forward, each small tensor operation costs several µs."""
    k = len(draft)
    x = logits if logits.dtype == torch.float32 and logits.is_contiguous() else logits.float().contiguous()
    vocab = x.shape[-1]
    q, q_ptr = None, None
    if isinstance(q_probs, np.ndarray):     # a native draft's q rows (numpy: cheaper to slice)
        q = np.ascontiguousarray(q_probs[:k], dtype=np.float32)
        fits = q.shape == (k, vocab)
        q_ptr = q.ctypes.data
    elif q_probs is not None:
        q = q_probs[:k]
        q = q if q.dtype == torch.float32 and q.is_contiguous() else q.float().contiguous()
        fits = tuple(q.shape) == (k, vocab)
        q_ptr = q.data_ptr()
    # the kernel reads k + 1 rows and q's k rows (it checks the tokens against the vocabulary itself)
    if x.dim() != 2 or x.shape[0] < first_row + k + 1 or (q is not None and not fits):
        raise ValueError(_misfit(draft, q_probs, logits))
    uniforms = draw_uniforms(generator, k + 1)
    token = ctypes.c_int64()
    n = library().ss_verify_logits(x.data_ptr() + first_row * vocab * 4, k, vocab, top_k, top_p, min_p, temperature,
                                   q_ptr, (ctypes.c_int64 * max(k, 1))(*draft), uniforms.ctypes.data,
                                   ctypes.byref(token))
    if n < 0:
        raise ValueError(_misfit(draft, q_probs, logits))
    return draft[:n] + [token.value]


def _misfit(draft: list[int], q_probs: torch.Tensor | None, logits: torch.Tensor) -> str:
    return (f"draft {draft} with q {None if q_probs is None else tuple(q_probs.shape)} does not fit the target's "
            f"rows {tuple(logits.shape)}")
