"""Greedy output with speculation equals output without it, whatever the batch composition;
seeded sampling gives the same output whatever else is in the batch."""
import dataclasses
import itertools

import pytest
import torch

from support.proposers import Oracle
from support.prompts import ENGINE_PROMPTS as PROMPTS
from specserve import LLM, SamplingParams
from specserve.models.step_batch import StepBatch
from specserve.models.transformer import CausalLM
from specserve.speculative import registry


# small n-grams so drafting starts early in short test sequences
NGRAM = {"spec_ngram_simple_size_n": 3, "spec_ngram_simple_size_m": 6}


@pytest.fixture
def oracle(monkeypatch):
    monkeypatch.setitem(registry.REGISTRY, Oracle.name, Oracle)
    return Oracle.name


def _greedy(max_tokens=48):
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)


@pytest.mark.parametrize("checkpoint", ["tiny_qwen3", "tiny_qwen3_bf16"])
def test_batch_invariant_logits(checkpoint, request):
    """A slot's logits are bit-identical whether it runs alone or beside other slots."""
    model = CausalLM.from_pretrained(request.getfixturevalue(checkpoint))
    rows_a = torch.arange(10, 47)
    alone = model.forward_step(StepBatch.build([(0, rows_a, 0)], list(range(37))), model.new_cache(3, 512))
    for others in ([(1, torch.arange(3, 5), 0)], [(1, torch.arange(1, 200), 0), (2, torch.tensor([4]), 0)]):
        cache = model.new_cache(3, 512)
        rows = [(0, rows_a, 0)] + others
        n_other = sum(len(r[1]) for r in others)
        mixed = model.forward_step(StepBatch.build(rows[::-1], list(range(n_other, n_other + 37))), cache)
        assert torch.equal(mixed.logits, alone.logits)
    # a decode row after a prefix: alone (1 row) vs verified together with 4 draft rows
    c1, c2 = model.new_cache(1, 512), model.new_cache(1, 512)
    model.forward_step(StepBatch.build([(0, rows_a, 0)], [36]), c1)
    model.forward_step(StepBatch.build([(0, rows_a, 0)], [36]), c2)
    one = model.forward_step(StepBatch.build([(0, [7], 37)], [0]), c1)
    five = model.forward_step(StepBatch.build([(0, [7, 8, 9, 10, 11], 37)], [0, 1, 2, 3, 4]), c2)
    assert torch.equal(one.logits[0], five.logits[0])


@pytest.mark.parametrize("spec_type,checkpoint", [("ngram-simple", "tiny_qwen3"), ("test-oracle", "tiny_qwen3"),
                                                  ("ngram-simple,test-oracle", "tiny_qwen3"),
                                                  ("test-oracle", "tiny_qwen3_bf16")])
def test_greedy_identical_with_and_without_speculation(oracle, spec_type, checkpoint, request):
    tiny_qwen3 = request.getfixturevalue(checkpoint)
    reference = [o.token_ids for o in LLM(tiny_qwen3).generate(PROMPTS, _greedy())]
    assert any(len(set(r)) < len(r) / 2 for r in reference), "test model should loop so n-grams match"
    for n_parallel in (1, 3, 8):
        llm = LLM(tiny_qwen3, spec_type=spec_type, n_parallel=n_parallel, **NGRAM)
        for order in (list(range(len(PROMPTS))), list(reversed(range(len(PROMPTS))))):
            outs = llm.generate([PROMPTS[i] for i in order], _greedy())
            for i, out in zip(order, outs):
                assert out.token_ids == reference[i], (spec_type, n_parallel, i)
        drafted = sum(c["n_gen_tokens"] for c in llm.engine.driver.stats_dict().values())
        accepted = sum(c["n_acc_tokens"] for c in llm.engine.driver.stats_dict().values())
        assert drafted > 0
        if "oracle" in spec_type:   # random weights rarely repeat long n-grams; the oracle drafts well
            assert 0 < accepted < drafted


def test_requests_joining_mid_generation(tiny_qwen3, oracle):
    """Requests added while others are decoding (continuous batching) still match."""
    reference = [o.token_ids for o in LLM(tiny_qwen3).generate(PROMPTS, _greedy(30))]
    llm = LLM(tiny_qwen3, spec_type="test-oracle", n_parallel=2, n_batch=16)
    from specserve.engine.request import Request
    requests = [Request(f"r{i}", p, _greedy(30)) for i, p in enumerate(PROMPTS)]
    pending = list(requests)
    llm.engine.add_request(pending.pop(0))
    steps = 0
    while not all(r.finished for r in requests):
        llm.engine.step()
        steps += 1
        if pending and steps % 3 == 0:
            llm.engine.add_request(pending.pop(0))
    assert [r.output_ids for r in requests] == reference


def test_seeded_sampling_independent_of_batch(tiny_qwen3, oracle):
    params = [SamplingParams(temperature=0.9, top_k=50, top_p=0.95, min_p=0.02, seed=1000 + i,
                             max_tokens=30, ignore_eos=True) for i in range(len(PROMPTS))]
    for spec_type in ("none", "ngram-simple,test-oracle"):
        alone = [LLM(tiny_qwen3, spec_type=spec_type, **NGRAM).generate(p, sp)[0].token_ids
                 for p, sp in zip(PROMPTS, params)]
        batched = [o.token_ids for o in
                   LLM(tiny_qwen3, spec_type=spec_type, n_parallel=4, **NGRAM).generate(PROMPTS, params)]
        assert batched == alone
    unseeded = LLM(tiny_qwen3).generate([PROMPTS[0]] * 2, SamplingParams(temperature=1.0, max_tokens=30))
    assert unseeded[0].token_ids != unseeded[1].token_ids


def test_stop_conditions(tiny_qwen3):
    llm = LLM(tiny_qwen3, spec_type="ngram-simple", **NGRAM)
    free = llm.generate(PROMPTS[0], _greedy(40))[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 40
    # a stop string taken from the middle of the free-running text
    stop = free.text[len(free.text) // 2:len(free.text) // 2 + 3]
    assert stop
    cut = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=40, ignore_eos=True, stop=[stop]))[0]
    assert cut.finish_reason == "stop" and cut.stop_reason == stop
    assert cut.text == free.text[:free.text.index(stop)]
    # a stop token id: generation ends at its first occurrence
    tok = free.token_ids[10]
    stopped = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=40, ignore_eos=True,
                                                      stop_token_ids=[tok]))[0]
    assert stopped.token_ids == free.token_ids[:free.token_ids.index(tok) + 1]
    assert stopped.finish_reason == "stop"


def test_eos_ends_generation_with_and_without_speculation(tiny_qwen3):
    """EOS (token 0 in the test checkpoints) ends generation unless ignore_eos; a logit bias on it makes
    the model emit it mid-stream, also inside accepted drafts."""
    params = SamplingParams(temperature=0, max_tokens=40, logit_bias={0: 4.0})
    plain = LLM(tiny_qwen3).generate(PROMPTS, params)
    ended = [o for o in plain if o.finish_reason == "stop"]
    assert len(ended) >= 3 and all(o.token_ids[-1] == 0 and 0 not in o.token_ids[:-1] for o in ended)
    spec = LLM(tiny_qwen3, spec_type="ngram-simple", n_parallel=3, **NGRAM).generate(PROMPTS, params)
    assert [(o.token_ids, o.finish_reason) for o in spec] == [(o.token_ids, o.finish_reason) for o in plain]
    kept = LLM(tiny_qwen3, n_parallel=3).generate(PROMPTS, dataclasses.replace(params, ignore_eos=True))
    assert all(o.finish_reason == "length" and len(o.token_ids) == 40 for o in kept)


def test_context_fills_up(tiny_qwen3):
    llm = LLM(tiny_qwen3, spec_type="ngram-simple", ctx_size=64, **NGRAM)
    out = llm.generate(PROMPTS[3], SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))[0]
    assert out.finish_reason == "length"
    assert len(PROMPTS[3]) + len(out.token_ids) == 64


def test_every_combination_of_slot_counts_and_chunking(tiny_qwen3):
    reference = [o.token_ids for o in LLM(tiny_qwen3).generate(PROMPTS, _greedy(20))]
    for n_parallel, n_batch in itertools.product((2, 5), (7, 512)):
        llm = LLM(tiny_qwen3, spec_type="ngram-simple", n_parallel=n_parallel, n_batch=n_batch, **NGRAM)
        assert [o.token_ids for o in llm.generate(PROMPTS, _greedy(20))] == reference
