"""At temperature > 0 speculative output has exactly the target's distribution.

A model with an 8-token vocabulary is sampled many times for 3 tokens; the empirical
distribution of the tokens at positions 2 and 3 (the ones verified against drafts) is
compared with the exact distribution computed from the model's own logits, for plain
sampling, one-hot drafts (sample-and-compare) and drafts that carry q (rejection sampling).
"""
import math

import pytest
import torch

from helpers import write_model
from proposers_for_tests import FixedQ
from specserve import LLM, SamplingParams
from specserve.penalties import adjust_logits
from specserve.sampling import target_probs
from specserve.speculative import registry
from specserve.speculative.verify import verify_rejection, verify_sample_compare

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


@pytest.fixture(scope="module")
def small_vocab_model(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("v8"), "qwen3", seed=11, std=0.6, tokenizer=False,
                       vocab_size=VOCAB)


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


@pytest.mark.parametrize("mode", ["none", "one-hot", "with-q"])
def test_sampled_output_has_target_distribution(small_vocab_model, monkeypatch, mode):
    q = torch.softmax(torch.randn(VOCAB, generator=torch.Generator().manual_seed(5)), -1)
    monkeypatch.setattr(FixedQ, "q", q)
    monkeypatch.setattr(FixedQ, "pass_q", mode == "with-q")
    monkeypatch.setitem(registry.REGISTRY, FixedQ.name, FixedQ)
    llm = LLM(small_vocab_model, spec_type="none" if mode == "none" else FixedQ.name, n_parallel=16, ctx_size=64)
    assert_target_pair_distribution(llm, None if mode == "none" else FixedQ.name)


def test_rejection_sampling_accepts_more_than_sample_compare():
    """With q close to p, true rejection sampling accepts far more often than one-hot checks."""
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(4, 50, generator=gen), -1)
    q = p[:3] * 0.9 + 0.1 / 50
    acc_q, acc_onehot = 0, 0
    for _ in range(400):
        draft = [int(torch.multinomial(q[i], 1, generator=gen)) for i in range(3)]
        acc_q += len(verify_rejection(draft, p, q, gen)) - 1
        acc_onehot += len(verify_sample_compare(draft, p, gen)) - 1
    assert acc_q > 2 * acc_onehot


def test_rejection_rule_marginals():
    """First emitted token ~ p[0]; second, given the first draft was accepted, ~ p[1]."""
    gen = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(3, 5, generator=gen), -1)
    q = torch.softmax(torch.randn(2, 5, generator=gen), -1)
    first, second = torch.zeros(5), torch.zeros(5)
    n = 20000
    for _ in range(n):
        draft = [int(torch.multinomial(q[i], 1, generator=gen)) for i in range(2)]
        out = verify_rejection(draft, p, q, gen)
        first[out[0]] += 1
        if len(out) > 1:
            second[out[1]] += 1
    assert chi_square_p_value(first.tolist(), p[0].tolist()) > 1e-3
    assert chi_square_p_value(second.tolist(), p[1].tolist()) > 1e-3
