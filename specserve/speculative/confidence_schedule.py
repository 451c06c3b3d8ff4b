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


def schedule_prefix_lengths(confidence, steps_per_second: Callable[[int], float],
                            max_lengths=None, early_stop: bool = True) -> np.ndarray:
    """Algorithm 1. confidence [R, n] (an array or nested lists); steps_per_second(total rows) from the
    profiled table; max_lengths [R] caps each request (positions past it are not candidates).
    Returns [R] lengths.

    early_stop=False admits the candidates up to the best throughput of any count instead of stopping at
    the first that does not improve it: step costs jump where the rows fill a new tile of the kernels, and a
    stop there kept 4 slots' drafts at 16 rows where 40 paid more. Only for confidences that do not come
    from the drafts themselves (estimates from history), or drafts verified greedily: for sampled
    verification whether a draft is verified must not depend on a later draft's confidence, which depends
    on the draft before it (the paper's Appendix A).

    Plain floats and one sort, no numpy: the serving path runs this every drafting step, right after a
    forward, where each numpy call costs µs (at 4 slots the array version took 150 µs a call)."""
    rows = confidence.tolist() if isinstance(confidence, np.ndarray) else confidence
    caps = None if max_lengths is None else \
        max_lengths if isinstance(max_lengths, list) else np.asarray(max_lengths).reshape(-1).tolist()
    candidates = []             # (-survival, request, position): descending survival, ties in prefix order
    for r, row in enumerate(rows):
        survival = 1.0
        for j in range(len(row) if caps is None else min(len(row), int(caps[r]))):
            c = row[j]
            survival *= 0.0 if not c > 0.0 else 1.0 if c > 1.0 else c
            if not survival > 0:
                break
            candidates.append((-survival, r, j))
    candidates.sort()
    n_req = len(rows)
    lengths = [0] * n_req
    best = n_req * steps_per_second(n_req) if n_req else 0.0
    expected = float(n_req)
    admitted = 0
    for i, (neg_survival, r, _) in enumerate(candidates):
        expected -= neg_survival
        throughput = expected * steps_per_second(n_req + i + 1)
        if throughput > best:
            best, admitted = throughput, i + 1
        elif early_stop:
            break
    for _, r, _ in candidates[:admitted]:
        lengths[r] += 1
    return np.array(lengths, dtype=np.int64)
