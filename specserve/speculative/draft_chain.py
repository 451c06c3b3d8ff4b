"""Batched autoregressive drafting shared by the model drafters (draft-simple, draft-eagle3, draft-mtp).

llama.cpp's draft loop (docs/reference/llamacpp-speculative.md §5.5-§5.7), for all drafting slots at once:
each step runs ONE draft forward over every still-drafting slot's rows; each slot then
looks at the top-10 candidates of its output row (softmax over those 10 at T=1), stops
before a token whose probability is below `--spec-draft-p-min`, appends the top-1 token,
and stops at `--spec-draft-n-max` (or the caller's cap). Drafts shorter than
`--spec-draft-n-min` are dropped. With `--spec-draft-sample` and a request temperature
T > 0 the token is instead drawn from the request's own sampler (top-k, top-p, min-p, then T) over
the draft's logits (one uniform of the request's generator: the first token whose cumulative
probability passes it), and that distribution is passed on as `Draft.q_probs` [k, vocab], so the
verifier can use true rejection sampling. It accepts a draft with probability sum(min(p, q)): the
closer q is to the target's own p, the more; llama.cpp's softmax over the top 10 leaves out all mass
past them (on the bundled model it accepted MTP's single draft 46 % of the time at T=1, where this q
is accepted 65 %).

A drafter provides a `step` function: given a StepBatch whose output rows are the last
row of each slot's segment (and, for hidden-state drafters, one input hidden row per
batch row), it returns the logits of the output rows and, optionally, the hidden state
to feed back with the next token.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from itertools import accumulate
from types import SimpleNamespace
from typing import Callable

import numpy as np
import torch

from ..kernels import capi
from ..models.step_batch import StepBatch
from ..random_stream import draw_uniforms
from ..sampling import draw_with_uniform, target_probs
from .base import Draft, DraftRequest

TOP_K = 10
# longest first-step segment per slot; longer catch-ups (a fresh prompt) are fed in chunks first
MAX_CATCH_UP_ROWS = 256


@dataclass
class ChainRows:
    """The rows one slot feeds in the first draft step: catch-up rows, then the last sampled token."""
    slot: int
    tokens: "torch.Tensor | np.ndarray"  # [n] int64 target token ids
    pos0: int                            # position of tokens[0]
    hidden: "torch.Tensor | np.ndarray | None" = None   # [n, H] input hidden rows (hidden-state drafters)


def joined_hidden(parts: list) -> torch.Tensor:
    """Slots' hidden rows [n_i, H] (tensors, or numpy views of the tap store) as one tensor."""
    if isinstance(parts[0], np.ndarray):
        return torch.from_numpy(parts[0] if len(parts) == 1 else np.concatenate(parts))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


StepFn = Callable[[StepBatch, "torch.Tensor | None"], "tuple[torch.Tensor | None, torch.Tensor | None]"]


def draft_cap(settings: SimpleNamespace, req: DraftRequest) -> int:
    """Most tokens to draft for this request: --spec-draft-n-max (--spec-draft-n-max-sampled at T > 0), or
    the caller's or the scheduler's smaller cap."""
    own = settings.n_max_sampled if req.temperature > 0 else settings.n_max
    return min(cap for cap in (own, req.n_max, req.n_scheduled) if cap > 0)


def pick_tokens(logits: torch.Tensor, requests: list[DraftRequest], settings: SimpleNamespace,
                id_map: torch.Tensor | None, vocab_size: int):
    """The pick per row: the argmax, or for a sampled request a draw from its sampler over the row. Returns
    (target token ids [S], top-1 probability among the top 10 [S], q rows [vocab] or None per row)."""
    logits = logits.float()
    if settings.p_min <= 0 and not (settings.sample and any(r.temperature > 0 for r in requests)):
        chosen = logits.argmax(dim=-1)        # nothing reads the probabilities: skip the top-10 softmax
        if id_map is not None:
            chosen = id_map[chosen]
        return chosen.tolist(), [1.0] * len(requests), [None] * len(requests)
    values = torch.topk(logits, min(TOP_K, logits.shape[-1]), dim=-1).values
    top_prob = torch.softmax(values, dim=-1)[:, 0].tolist()
    chosen = logits.argmax(dim=-1)            # the top-1, on ties the lowest id
    if id_map is not None:
        chosen = id_map[chosen]
    chosen = chosen.tolist()
    q_rows: list[torch.Tensor | None] = [None] * len(requests)
    if settings.sample:
        for i, req in enumerate(requests):
            if req.temperature > 0:
                q = target_probs(logits[i:i + 1], req.sampler())[0]
                pick = draw_with_uniform(q, float(draw_uniforms(req.generator, 1)[0]))
                chosen[i] = pick if id_map is None else int(id_map[pick])
                q_rows[i] = q if id_map is None else torch.zeros(vocab_size).index_copy_(0, id_map, q)
    return chosen, top_prob, q_rows


def feed_long_catch_ups(first: list[ChainRows], step: StepFn) -> None:
    """Feed all but the last MAX_CATCH_UP_ROWS rows of long segments, one batched forward per chunk."""
    while True:
        long_rows = [r for r in first if r.tokens.shape[0] > MAX_CATCH_UP_ROWS]
        if not long_rows:
            return
        n = MAX_CATCH_UP_ROWS
        batch = StepBatch.build([(r.slot, r.tokens[:n], r.pos0) for r in long_rows], [])
        hidden = None if long_rows[0].hidden is None else joined_hidden([r.hidden[:n] for r in long_rows])
        step(batch, hidden)
        for r in long_rows:
            r.tokens, r.pos0 = r.tokens[n:], r.pos0 + n
            if r.hidden is not None:
                r.hidden = r.hidden[n:]


class ChainPick:
    """The picks of a one-call chain that are not plain argmaxes (kernels.h `ss_chain_pick`): per slot its
    sampler and uniforms (as many as the step loop would draw) for `--spec-draft-sample` slots, and the q
    rows the kernel writes; and with --spec-draft-p-min each step's top-1 probability.
    Its buffers are reused from call to call (`for_call`): a chain's q is read by the verification of the
    same step, before the next draft."""

    def __init__(self, n_slots: int, n_steps: int, vocab_size: int, p_min: float):
        # numpy buffers: right after a forward each small torch operation costs several µs more than numpy's
        self.p_min = p_min
        self.temperature = np.zeros(n_slots, dtype=np.float32)
        self.top_k = np.zeros(n_slots, dtype=np.int32)
        self.top_p = np.ones(n_slots, dtype=np.float32)
        self.min_p = np.zeros(n_slots, dtype=np.float32)
        self.uniforms = np.zeros((n_slots, n_steps))
        self.q = np.zeros((n_slots, n_steps, vocab_size), dtype=np.float32)
        self.top_prob = np.zeros((n_slots, n_steps), dtype=np.float32)
        self.struct = capi.ChainPick(TOP_K, n_steps, *(a.ctypes.data for a in (
            self.temperature, self.top_k, self.top_p, self.min_p, self.uniforms, self.q)),
            vocab_size, p_min, self.top_prob.ctypes.data)
        self.ref = ctypes.byref(self.struct)
        self.sampled: list[bool] = []

    @classmethod
    def for_call(cls, pool: dict, requests: list[DraftRequest], caps: list[int], vocab_size: int, sample: bool,
                 p_min: float) -> "ChainPick":
        """The pool's ChainPick for this many slots and steps (made on first use), set for these requests."""
        key = (len(requests), max(caps))
        pick = pool.get(key)
        if pick is None:
            pick = pool[key] = cls(len(requests), max(caps), vocab_size, p_min)
        pick.sampled = sampled = [sample and r.temperature > 0 for r in requests]
        pick.top_prob.fill(0)           # steps the kernel does not run stay below any p_min
        pick.temperature[:] = [r.temperature if on else 0.0 for r, on in zip(requests, sampled)]
        pick.uniforms.fill(0)
        for i, (req, cap, on) in enumerate(zip(requests, caps, sampled)):
            if on:
                pick.uniforms[i, :cap] = draw_uniforms(req.generator, cap)
                pick.top_k[i], pick.top_p[i], pick.min_p[i] = req.top_k, req.top_p, req.min_p
        return pick

    @staticmethod
    def needed(requests: list[DraftRequest], settings: SimpleNamespace) -> bool:
        return settings.p_min > 0 or (settings.sample and any(r.temperature > 0 for r in requests))

    def kept(self, i: int, cap: int) -> int:
        """How many of slot i's drafts stand: up to its cap, and before the first step below p_min."""
        if self.p_min <= 0:
            return cap
        below = np.flatnonzero(self.top_prob[i, :cap] < self.p_min)
        return int(below[0]) if below.size else cap

    def q_rows(self, i: int, n: int) -> np.ndarray | None:
        """Slot i's q for its first n drafts [n, vocab], or None for a greedy slot."""
        return self.q[i, :n] if self.sampled[i] else None


def one_call_chain(requests: list[DraftRequest], first: list[ChainRows], step: StepFn, settings: SimpleNamespace,
                   chain: Callable, vocab_size: int, picks: dict) -> dict[int, Draft]:
    """run_chain's drafts with every step in one native call: chain(batch, hidden, n_more, pick) -> target
    ids [S, 1 + n_more], the batch's output rows being each slot's last row; `pick` (a ChainPick, or None
    for argmaxes alone) samples the `--spec-draft-sample` slots and reports the probabilities that
    --spec-draft-p-min cuts drafts at. Small Python operations between native calls run on cold caches
    and cost more than a small drafter's layers."""
    feed_long_catch_ups(first, step)
    by_slot = {r.slot: r for r in requests}
    reqs = [by_slot[r.slot] for r in first]
    caps = [draft_cap(settings, r) for r in reqs]
    pick = ChainPick.for_call(picks, reqs, caps, vocab_size, settings.sample, settings.p_min) \
        if ChainPick.needed(reqs, settings) else None
    last_rows = list(accumulate(r.tokens.shape[0] for r in first))
    batch = StepBatch.build([(r.slot, r.tokens, r.pos0) for r in first], [n - 1 for n in last_rows])
    hidden = None if first[0].hidden is None else joined_hidden([r.hidden for r in first])
    drafts = chain(batch, hidden, max(caps) - 1, pick).tolist()
    out = {}
    for i, (r, cap, tokens) in enumerate(zip(first, caps, drafts)):
        n = cap if pick is None else pick.kept(i, cap)
        if n >= max(1, settings.n_min):
            out[r.slot] = Draft(tokens[:n], None if pick is None else pick.q_rows(i, n))
    return out


def run_chain(requests: list[DraftRequest], first: list[ChainRows], step: StepFn, settings: SimpleNamespace,
              vocab_size: int, id_map: torch.Tensor | None = None) -> dict[int, Draft]:
    """Draft for every slot in `first` (a subset of `requests`), one forward per draft step."""
    by_slot = {r.slot: r for r in requests}
    tokens: dict[int, list[int]] = {r.slot: [] for r in first}
    q_probs: dict[int, list[torch.Tensor]] = {r.slot: [] for r in first}
    feed_long_catch_ups(first, step)
    rows = first
    hidden = None if not first or first[0].hidden is None else joined_hidden([r.hidden for r in first])
    while rows:
        outputs, end = [], 0
        for r in rows:
            end += r.tokens.shape[0]
            outputs.append(end - 1)
        batch = StepBatch.build([(r.slot, r.tokens, r.pos0) for r in rows], outputs)
        logits, next_hidden = step(batch, hidden)
        reqs = [by_slot[r.slot] for r in rows]
        chosen, top_prob, q_rows = pick_tokens(logits, reqs, settings, id_map, vocab_size)
        next_rows, keep = [], []
        for i, (r, req) in enumerate(zip(rows, reqs)):
            if top_prob[i] < settings.p_min:
                if q_rows[i] is not None:    # draw the uniforms of the steps not run, as the one-call chain does
                    draw_uniforms(req.generator, draft_cap(settings, req) - len(tokens[r.slot]) - 1)
                continue
            tokens[r.slot].append(chosen[i])
            if q_rows[i] is not None:
                q_probs[r.slot].append(q_rows[i])
            if len(tokens[r.slot]) >= draft_cap(settings, req):
                continue
            next_rows.append(ChainRows(r.slot, torch.tensor([chosen[i]]), r.pos0 + r.tokens.shape[0]))
            keep.append(i)
        rows = next_rows
        hidden = next_hidden[keep] if next_hidden is not None and keep else None
    drafts = {}
    for slot, toks in tokens.items():
        if toks and len(toks) >= settings.n_min:
            qs = q_probs[slot]
            drafts[slot] = Draft(toks, torch.stack(qs) if len(qs) == len(toks) else None)
    return drafts
