"""Logit adjustments applied before sampling: logit bias, then repetition, frequency and
presence penalties (the order of vLLM and of llama.cpp's sampler chain).

For a verification step the rows are [last token, draft 1..k]: row i is the distribution after
the committed tokens and the first i drafts, so its penalties count those drafts too. This is
what keeps speculation lossless with penalties: every row sees exactly the history plain
decoding would have had if the drafts up to it are accepted.

Which tokens count (SamplingParams.penalty_last_n):
  None  presence/frequency: the generated tokens; repetition: prompt and generated (vLLM, OpenAI)
  N     all three: the last N tokens of prompt and generated (llama.cpp's penalty_last_n)
"""
from __future__ import annotations

import torch

from .sampling import SamplingParams


def _row_counts(history: torch.Tensor, n_committed: int, n_rows: int, window: int | None, vocab: int,
                ) -> torch.Tensor:
    """[n_rows, vocab] occurrences in history[:n_committed + i] (its last `window` tokens) for row i."""
    if window is None:
        base = torch.bincount(history[:n_committed], minlength=vocab)[:vocab].float()
        counts = base.expand(n_rows, vocab).clone()
        if n_rows > 1:
            drafts = torch.nn.functional.one_hot(history[n_committed:n_committed + n_rows - 1], vocab).float()
            counts[1:] += torch.cumsum(drafts, dim=0)
        return counts
    counts = torch.zeros(n_rows, vocab)
    for i in range(n_rows):
        end = n_committed + i
        counts[i] = torch.bincount(history[max(0, end - window):end], minlength=vocab)[:vocab].float()
    return counts


def adjust_logits(logits: torch.Tensor, params: SamplingParams, prompt_ids, output_ids, drafts=()) -> torch.Tensor:
    """float32 rows [k+1, V] for the step that verifies `drafts` (k of them) after prompt + output."""
    x = logits.float().clone()
    vocab = x.shape[-1]
    if params.logit_bias:
        ids = torch.tensor([t for t in params.logit_bias if t < vocab], dtype=torch.int64)
        bias = torch.tensor([params.logit_bias[int(t)] for t in ids], dtype=torch.float32)
        x[:, ids] += bias
    if params.penalty_last_n == 0 or (params.presence_penalty == 0 and params.frequency_penalty == 0
                                      and params.repetition_penalty == 1):
        return x
    n_rows = x.shape[0]
    drafts = list(drafts)[:n_rows - 1]
    window = params.penalty_last_n
    if window is None:
        generated = torch.tensor(list(output_ids) + drafts, dtype=torch.int64)
        counts = _row_counts(generated, len(output_ids), n_rows, None, vocab)
        seen = counts > 0
        if params.repetition_penalty != 1:
            in_prompt = torch.zeros(vocab, dtype=torch.bool)
            in_prompt[torch.as_tensor(list(prompt_ids), dtype=torch.int64)] = True
            repeated = seen | in_prompt
    else:
        history = torch.tensor(list(prompt_ids) + list(output_ids) + drafts, dtype=torch.int64)
        counts = _row_counts(history, len(prompt_ids) + len(output_ids), n_rows, window, vocab)
        seen = repeated = counts > 0
    if params.repetition_penalty != 1:
        rp = params.repetition_penalty
        x = torch.where(repeated, torch.where(x > 0, x / rp, x * rp), x)
    return x - params.frequency_penalty * counts - params.presence_penalty * seen.float()
