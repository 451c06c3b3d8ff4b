"""How many of each slot's drafts to verify, from DSpark's per-position confidences.

* `confident_prefix_lengths`: llama.cpp's `--spec-draft-p-min` rule (DeepSpec
  `_confident_prefix_length`): cut each block at the first position whose predicted
  acceptance is below P.
* `schedule_prefix_lengths`: the DSpark paper's hardware-aware prefix scheduler (Algorithm 1).
  With a_{r,j} = prod_{i<=j} c_{r,i} the chance that draft j of request r survives, candidates
  (r, j) are admitted in descending a order while the expected throughput
  (R + sum of admitted a) * SPS(R + admitted) keeps improving, and the search STOPS at the first
  non-improvement. The early stop is what keeps it lossless: whether draft j is verified never
  depends on draft j itself (the paper's Appendix A shows the bias without it).
"""
from __future__ import annotations

from typing import Callable

import numpy as np


def confident_prefix_lengths(confidence: np.ndarray, p_min: float) -> np.ndarray:
    """confidence [R, n] conditional acceptance per position -> [R] kept lengths."""
    below = confidence < p_min
    return np.where(below.any(axis=1), below.argmax(axis=1), confidence.shape[1])


def schedule_prefix_lengths(confidence: np.ndarray, steps_per_second: Callable[[int], float],
                            max_lengths: np.ndarray | None = None) -> np.ndarray:
    """Algorithm 1. confidence [R, n]; steps_per_second(total rows) from the profiled table;
    max_lengths [R] caps each request (positions past it are not candidates). Returns [R] lengths."""
    n_req, n = confidence.shape
    if n_req == 0 or n == 0:
        return np.zeros(n_req, dtype=np.int64)
    if n_req == 1:
        return np.array([_one_request_length(confidence[0], steps_per_second,
                                             n if max_lengths is None else int(np.asarray(max_lengths).reshape(-1)[0]))])
    survival = np.cumprod(np.clip(confidence.astype(np.float64), 0.0, 1.0), axis=1)
    req, pos = np.meshgrid(np.arange(n_req), np.arange(n), indexing="ij")
    valid = survival > 0
    if max_lengths is not None:
        valid &= pos < np.asarray(max_lengths).reshape(-1, 1)
    a, req, pos = survival[valid], req[valid], pos[valid]
    # descending survival; ties keep a request's earlier positions first (prefix order)
    order = np.lexsort((pos, req, -a))
    a, req = a[order], req[order]
    lengths = np.zeros(n_req, dtype=np.int64)
    best = n_req * steps_per_second(n_req)
    expected = float(n_req)
    for i in range(len(a)):
        expected += a[i]
        throughput = expected * steps_per_second(n_req + i + 1)
        if not throughput > best:
            break
        best = throughput
        lengths[req[i]] += 1
    return lengths


def _one_request_length(confidence: np.ndarray, steps_per_second: Callable[[int], float], cap: int) -> int:
    """Algorithm 1 for a single request, in plain floats (the serving path at one slot runs it every step,
    right after a forward, where each numpy call costs µs): its survival never grows along the draft, so
    the descending order is the position order and the search is one pass over the prefix."""
    best, expected, survival, length = steps_per_second(1), 1.0, 1.0, 0
    for j in range(min(cap, len(confidence))):
        survival *= min(max(float(confidence[j]), 0.0), 1.0)
        if not survival > 0:
            break
        expected += survival
        throughput = expected * steps_per_second(j + 2)
        if not throughput > best:
            break
        best, length = throughput, j + 1
    return length
