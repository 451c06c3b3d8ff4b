"""At temperature > 0 speculative output has exactly the target's distribution.

A model with an 8-token vocabulary is sampled many times for 3 tokens; the empirical
distribution of the tokens at positions 2 and 3 (the ones verified against drafts) is
compared with the exact distribution computed from the model's own logits, for plain
sampling, one-hot drafts (sample-and-compare) and drafts that carry q (rejection sampling).
"""
import pytest
import torch

from support.distribution import VOCAB, assert_target_pair_distribution, chi_square_p_value
from support.proposers import FixedQ
from specserve import LLM, kernels
from specserve.kernels import sampling as native_sampling
from specserve.speculative import registry
from specserve.sampling import draw_with_uniform
from specserve.speculative.verify import verify_greedy, verify_rejection, verify_sample_compare


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


def _rule(draft, p, q, uniforms):
    """The rejection rule written out with given uniforms (k + 1 of them)."""
    k = len(draft)
    n = 0
    while n < k and q[n, draft[n]] > 0 and uniforms[n] * float(q[n, draft[n]]) <= float(p[n, draft[n]]):
        n += 1
    row = p[n] if n == k else (p[n] - q[n]).clamp_min(0)
    if n < k and not row.sum() > 0:
        row = p[n]
    cumulative = row.double().cumsum(0)
    token = int(torch.searchsorted(cumulative, float(uniforms[k]) * cumulative[-1], right=True))
    return draft[:n] + [min(token, int(row.nonzero()[-1]))]


SETTINGS = [(0, 1.0, 0.0, 1.0), (5, 1.0, 0.0, 0.7), (0, 0.9, 0.05, 1.3), (20, 0.8, 0.1, 0.5)]   # k, p, min-p, T


@pytest.mark.skipif(kernels.requested() == "torch", reason="SPECSERVE_KERNELS=torch")
def test_native_call_follows_the_rules_with_the_generators_uniforms():
    """verify_logits (one call from the logits, rows worked out only as needed) emits what the rules give on
    the whole rows of sampling_probs with the same uniforms, and leaves the generator where they leave it:
    the rejection rule with q, sample and compare without (plain sampling with no draft)."""
    gen = torch.Generator().manual_seed(3)
    for trial in range(400):
        k, vocab, settings = trial % 5, 40 + trial % 3, SETTINGS[trial % 4]
        logits = torch.randn(k + 1, vocab, generator=gen) * 2
        p = native_sampling.sampling_probs(logits, *settings)
        q = torch.softmax(torch.randn(k, vocab, generator=gen) * 2, -1) if trial % 2 else None
        # drafts the target often accepts, so that later rows are reached
        draft = [int(torch.multinomial(p[i] if q is None else q[i], 1, generator=gen)) for i in range(k)]
        state = gen.get_state()
        out = native_sampling.verify_logits(logits, draft, q, *settings, gen)
        again = torch.Generator().set_state(state)
        uniforms = torch.rand(k + 1, generator=again, dtype=torch.float64).tolist()
        if q is None:
            samples = [draw_with_uniform(p[i], uniforms[i]) for i in range(k + 1)]
            assert out == verify_greedy(draft, samples)
        else:
            assert out == _rule(draft, p, q, uniforms)
        assert gen.get_state().equal(again.get_state())


@pytest.mark.skipif(kernels.requested() == "torch", reason="SPECSERVE_KERNELS=torch")
def test_a_malformed_draft_is_an_error_not_a_read_past_its_q():
    logits = torch.randn(3, 40)
    for draft, q in (([5, 6], torch.full((2, 3), 1 / 3)), ([45, 1], torch.full((2, 40), 1 / 40)),
                     ([1, 2, 3], torch.full((3, 40), 1 / 40)), ([1, 2, 3], None), ([-1], None)):
        with pytest.raises(ValueError, match="does not fit"):
            native_sampling.verify_logits(logits, draft, q, 0, 1.0, 0.0, 1.0, torch.Generator().manual_seed(0))
