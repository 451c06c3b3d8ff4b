"""The target's sampling distribution and the draws from it, on the native kernels (sampler.cpp).

Same chain as specserve.sampling.target_probs (llama.cpp's order: top-k, then top-p and min-p on
the temperature-1 distribution of what is left, then the temperature), in one call per batch of
rows instead of a dozen PyTorch operations per row.
"""
from __future__ import annotations

import ctypes
import threading

import torch

from . import library


def sampling_probs(logits: torch.Tensor, top_k: int, top_p: float, min_p: float, temperature: float,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """float32 rows [R, V] -> the distribution each row samples from [R, V] (written into `out` if given)."""
    x = logits.float().contiguous()
    probs = torch.empty_like(x) if out is None else out
    library().ss_sampling_probs(x.data_ptr(), x.shape[0], x.shape[1], top_k, top_p, min_p, temperature,
                                probs.data_ptr())
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of probs [R, V], from uniforms drawn with the request's generator."""
    p = probs.float().contiguous()
    uniforms = torch.rand(p.shape[0], generator=generator, dtype=torch.float64)
    tokens = torch.empty(p.shape[0], dtype=torch.int64)
    library().ss_sample(p.data_ptr(), p.shape[0], p.shape[1], uniforms.data_ptr(), tokens.data_ptr())
    return tokens


_scratch = threading.local()      # per thread: a probs buffer by shape, for draws that return only tokens


def sample_logits(logits: torch.Tensor, top_k: int, top_p: float, min_p: float, temperature: float,
                  generator: torch.Generator | None) -> list[int]:
    """One token per row of float32 logits [R, V]: `sample(sampling_probs(...))` with the same uniforms,
    without a tensor made or returned per call. Plain decoding samples once per token, right after the
    forward has evicted everything else from the caches, where each small tensor operation costs
    several µs; this path has three."""
    rows, vocab = logits.shape
    buffers = getattr(_scratch, "buffers", None)
    if buffers is None:
        buffers = _scratch.buffers = {}
    probs = buffers.get((rows, vocab))
    if probs is None:
        probs = buffers[(rows, vocab)] = torch.empty(rows, vocab)
    sampling_probs(logits, top_k, top_p, min_p, temperature, out=probs)
    uniforms = torch.rand(rows, generator=generator, dtype=torch.float64)
    tokens = (ctypes.c_int64 * rows)()
    library().ss_sample(probs.data_ptr(), rows, vocab, uniforms.data_ptr(), ctypes.addressof(tokens))
    return list(tokens)


def verify_rejection(draft: list[int], probs: torch.Tensor, q_probs: torch.Tensor,
                     generator: torch.Generator | None) -> list[int]:
    """speculative.verify.verify_rejection in one call, with the same uniforms (k + 1 of the generator)."""
    k = len(draft)
    p = probs.float().contiguous()
    q = q_probs[:k].float().contiguous()
    vocab = p.shape[-1]
    # the kernel indexes rows by the vocabulary: a malformed draft must fail here, not read past q
    if p.dim() != 2 or p.shape[0] < k + 1 or q.shape != (k, vocab) or any(not 0 <= t < vocab for t in draft):
        raise ValueError(f"draft of {k} tokens with q {tuple(q_probs.shape)} does not fit the target's "
                         f"rows {tuple(p.shape)}")
    tokens = torch.tensor(draft, dtype=torch.int64)
    uniforms = torch.rand(k + 1, generator=generator, dtype=torch.float64)
    token = ctypes.c_int64()
    n = library().ss_verify_rejection(p.data_ptr(), q.data_ptr(), k, p.shape[1], tokens.data_ptr(),
                                      uniforms.data_ptr(), ctypes.byref(token))
    return draft[:n] + [token.value]
