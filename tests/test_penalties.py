"""Logit bias and presence / frequency / repetition penalties: the adjustment itself on hand-worked
rows, and speculation staying exactly lossless with them (greedy and sampled)."""
import math

import pytest
import torch

from support.proposers import FixedQ, Oracle
from specserve import LLM, SamplingParams
from specserve.errors import InvalidRequestError
from specserve.penalties import adjust_logits
from specserve.speculative import registry
from support.prompts import ENGINE_PROMPTS as PROMPTS
from support.distribution import VOCAB, assert_target_pair_distribution


def test_penalties_count_the_generated_tokens_and_each_rows_drafts():
    logits = torch.tensor([[1.0, 2.0, -1.0, 4.0, 0.5, 0.0]]).expand(3, 6)
    params = SamplingParams(presence_penalty=0.5, frequency_penalty=0.25, repetition_penalty=2.0)
    # prompt [1], generated [2, 2, 3], drafts [3, 4]: row i counts the generated tokens and drafts[:i]
    x = adjust_logits(logits, params, [1], [2, 2, 3], [3, 4])
    # token 1 is only in the prompt: repetition (2.0 -> 1.0) but no presence / frequency
    assert x[:, 1].tolist() == [1.0, 1.0, 1.0]
    # token 2 twice: -1.0 * 2 (repetition, negative) - 0.25 * 2 - 0.5
    assert x[:, 2].tolist() == [-3.0, -3.0, -3.0]
    # token 3: once in rows 0, twice from row 1 on (draft 1 is a 3)
    assert x[:, 3].tolist() == [4.0 / 2 - 0.25 - 0.5, 4.0 / 2 - 0.5 - 0.5, 4.0 / 2 - 0.5 - 0.5]
    # token 4 only once draft 2 is in the history (row 2)
    assert x[:, 4].tolist() == [0.5, 0.5, 0.5 / 2 - 0.25 - 0.5]
    assert x[:, 0].tolist() == [1.0, 1.0, 1.0]


def test_llama_window_counts_prompt_and_output_tokens():
    logits = torch.zeros(2, 5)
    params = SamplingParams(presence_penalty=1.0, penalty_last_n=2)
    # history [1, 2] + generated [3]: row 0 sees the last two (2, 3), row 1 (3, draft 4)
    x = adjust_logits(logits, params, [1, 2], [3], [4])
    assert x.tolist() == [[0, 0, -1, -1, 0], [0, 0, 0, -1, -1]]
    off = SamplingParams(presence_penalty=1.0, penalty_last_n=0)
    assert not off.adjusts_logits


def test_logit_bias_forces_and_bans_tokens(tiny_qwen3):
    llm = LLM(tiny_qwen3)
    forced = llm.generate([5, 9, 12], SamplingParams(temperature=0, max_tokens=5, logit_bias={42: 100.0}))[0]
    assert forced.token_ids == [42] * 5
    plain = llm.generate([5, 9, 12], SamplingParams(temperature=0, max_tokens=1))[0].token_ids[0]
    banned = llm.generate([5, 9, 12], SamplingParams(temperature=0, max_tokens=1,
                                                     logit_bias={plain: -math.inf}))[0].token_ids[0]
    assert banned != plain
    with pytest.raises(InvalidRequestError, match="logit_bias token id 99999 is outside the vocabulary"):
        llm.generate([5], SamplingParams(logit_bias={99999: 1.0}))
    with pytest.raises(InvalidRequestError, match="presence_penalty: must be a number in"):
        SamplingParams(presence_penalty=3)


PENALTIES = [dict(presence_penalty=0.8, frequency_penalty=0.3), dict(repetition_penalty=1.5),
             dict(frequency_penalty=0.5, penalty_last_n=8, logit_bias={7: 2.0})]


@pytest.mark.parametrize("penalties", PENALTIES)
def test_greedy_with_penalties_is_identical_with_speculation(tiny_qwen3, monkeypatch, penalties):
    monkeypatch.setitem(registry.REGISTRY, Oracle.name, Oracle)
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True, **penalties)
    reference = [o.token_ids for o in LLM(tiny_qwen3).generate(PROMPTS, params)]
    assert reference != [o.token_ids for o in LLM(tiny_qwen3).generate(
        PROMPTS, SamplingParams(temperature=0, max_tokens=32, ignore_eos=True))]    # the penalties matter
    for spec_type in ("ngram-simple", "test-oracle"):
        llm = LLM(tiny_qwen3, spec_type=spec_type, n_parallel=3, spec_ngram_simple_size_n=3)
        assert [o.token_ids for o in llm.generate(PROMPTS, params)] == reference, spec_type
    # the oracle drafts the unpenalised continuation: some of it survives the penalties, some not
    stats = llm.engine.driver.stats_dict()["test-oracle"]
    assert 0 < stats["n_acc_tokens"] < stats["n_gen_tokens"]


@pytest.mark.parametrize("pass_q", [False, True])
def test_sampled_with_penalties_has_the_penalised_distribution(small_vocab_model, monkeypatch, pass_q):
    monkeypatch.setattr(FixedQ, "q", torch.softmax(torch.randn(VOCAB, generator=torch.Generator().manual_seed(5)), -1))
    monkeypatch.setattr(FixedQ, "pass_q", pass_q)
    monkeypatch.setitem(registry.REGISTRY, FixedQ.name, FixedQ)
    llm = LLM(small_vocab_model, spec_type=FixedQ.name, n_parallel=16, ctx_size=64)
    assert_target_pair_distribution(llm, FixedQ.name, presence_penalty=1.2, frequency_penalty=0.4,
                                    logit_bias={2: 1.0})
