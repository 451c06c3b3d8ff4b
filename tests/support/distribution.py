"""Sampled output has the target's distribution: an 8-token model is sampled many times for a few
tokens, and the joint distribution of tokens 2 and 3 (the ones verified against drafts) is compared
with the exact one computed from the model's own logits (chi-square)."""
import math

import torch

from specserve import SamplingParams
from specserve.penalties import adjust_logits
from specserve.sampling import target_probs

VOCAB = 8
PROMPT = [3, 1, 4, 1, 5]
PARAMS = dict(temperature=0.8, top_k=6, top_p=0.97, max_tokens=3, ignore_eos=True)


def chi_square_p_value(observed, expected_probs):
    """Upper tail of the chi-square statistic (Wilson-Hilferty), merging cells with small expectations."""
    n = sum(observed)
    obs, exp, acc_o, acc_e = [], [], 0, 0.0
    for o, p in sorted(zip(observed, expected_probs), key=lambda x: x[1]):
        acc_o += o
        acc_e += p * n
        if acc_e >= 5:
            obs.append(acc_o)
            exp.append(acc_e)
            acc_o, acc_e = 0, 0.0
    if acc_e > 0:
        obs[-1] += acc_o
        exp[-1] += acc_e
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp))
    k = len(obs) - 1
    z = ((stat / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def exact_pair_distribution(llm, params: SamplingParams | None = None):
    """P(t2, t3) under plain sampling, from the model's logits (and the params' penalties)."""
    params = params or SamplingParams(**PARAMS)

    def dist(generated):
        row = llm.score(PROMPT + generated)[-1:]
        if params.adjusts_logits:
            row = adjust_logits(row, params, PROMPT, generated)
        return target_probs(row, params)[0]

    p1 = dist([])
    joint = torch.zeros(VOCAB, VOCAB)
    for t1 in range(VOCAB):
        p2 = dist([t1])
        for t2 in range(VOCAB):
            joint[t2] += p1[t1] * p2[t2] * dist([t1, t2])
    return joint.flatten()


def assert_target_pair_distribution(llm, spec_type: str | None, n: int = 3000, max_tokens: int = 3, **extra):
    """n seeded requests for PROMPT (PARAMS plus `extra` sampling fields): tokens 2 and 3 jointly
    follow plain sampling (chi-square), and with speculation some drafts were accepted and some
    rejected. Returns the stats dict."""
    fields = dict(PARAMS, max_tokens=max_tokens, **extra)
    outs = llm.generate([PROMPT] * n, [SamplingParams(seed=i, **fields) for i in range(n)])
    counts = torch.zeros(VOCAB * VOCAB)
    for o in outs:
        assert len(o.token_ids) == max_tokens
        counts[o.token_ids[1] * VOCAB + o.token_ids[2]] += 1
    expected = exact_pair_distribution(llm, SamplingParams(**fields))
    assert chi_square_p_value(counts.tolist(), expected.tolist()) > 1e-3
    if spec_type is None:
        return None
    stats = llm.engine.driver.stats_dict()[spec_type]
    assert 0 < stats["n_acc_tokens"] < stats["n_gen_tokens"]
    return stats
