"""The n-gram family end to end: greedy output identical with and without speculation for
every type and combinations, batched; statistics counters on a hand-computed scenario;
--spec-default."""
import pytest

from support.prompts import NGRAM_PROMPTS as PROMPTS, arr
from specserve import LLM, SamplingParams
from specserve.speculative.base import DraftRequest, ProposerContext
from specserve.speculative.driver import SpecDriver
from specserve.speculative.ngram_map import NgramMapK
from specserve.speculative.ngram_mod import NgramMod


# small sizes so drafting starts early in short test sequences
SMALL = {
    "spec_ngram_simple_size_n": 3, "spec_ngram_simple_size_m": 6,
    "spec_ngram_map_k_size_n": 2, "spec_ngram_map_k_size_m": 6,
    "spec_ngram_map_k4v_size_n": 2, "spec_ngram_map_k4v_size_m": 6,
    "spec_ngram_mod_n_match": 3, "spec_ngram_mod_n_min": 1, "spec_ngram_mod_n_max": 8,
}


def _greedy(max_tokens=40):
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)


@pytest.fixture(scope="module")
def cases(tiny_qwen3):
    """Prompts and their greedy outputs; two prompts end with the model's own (loopy) output,
    so their continuations repeat n-grams of the prompt (what ngram-cache learns from)."""
    base = LLM(tiny_qwen3)
    first = [o.token_ids for o in base.generate([PROMPTS[0], PROMPTS[3]], _greedy(25))]
    prompts = PROMPTS + [PROMPTS[0] + first[0], PROMPTS[3] + first[1]]
    return prompts, [o.token_ids for o in base.generate(prompts, _greedy())]


@pytest.mark.parametrize("spec_type", ["ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
                                       "ngram-mod,ngram-map-k4v,ngram-simple", "ngram-cache,ngram-map-k"])
def test_greedy_identical_with_every_ngram_type(tiny_qwen3, cases, spec_type):
    prompts, reference = cases
    for n_parallel in (1, 3):
        llm = LLM(tiny_qwen3, spec_type=spec_type, n_parallel=n_parallel, **SMALL)
        for order in (list(range(len(prompts))), list(reversed(range(len(prompts))))):
            outs = llm.generate([prompts[i] for i in order], _greedy())
            for i, out in zip(order, outs):
                assert out.token_ids == reference[i], (spec_type, n_parallel, i)
        stats = llm.engine.driver.stats_dict()
        assert sum(c["n_gen_tokens"] for c in stats.values()) > 0, spec_type
        assert sum(c["n_acc_tokens"] for c in stats.values()) > 0, spec_type
        lines = llm.stats_lines()
        assert len(lines) == len(spec_type.split(","))
        assert all(c["n_call_begin"] == 2 * len(prompts) for c in stats.values())


def test_precedence_in_a_combination_is_fixed(tiny_qwen3):
    llm = LLM(tiny_qwen3, spec_type="ngram-cache,ngram-mod,ngram-map-k4v,ngram-map-k,ngram-simple", **SMALL)
    assert [p.name for p in llm.engine.driver.proposers] == [
        "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]


def test_spec_default_enables_ngram_mod(tiny_qwen3):
    llm = LLM(tiny_qwen3, spec_default=True)
    (mod,) = llm.engine.driver.proposers
    assert mod.name == "ngram-mod" and (mod.n, mod.n_min, mod.n_max) == (24, 48, 64)
    assert [p.name for p in LLM(tiny_qwen3, spec_type="none", spec_default=True).engine.driver.proposers] == [
        "ngram-mod"]
    # an explicit type wins
    assert [p.name for p in LLM(tiny_qwen3, spec_type="ngram-simple", spec_default=True).engine.driver.proposers] \
        == ["ngram-simple"]
    assert not LLM(tiny_qwen3).engine.driver.enabled and LLM(tiny_qwen3).engine.driver.proposers == []


def test_statistics_counters_hand_computed():
    ctx = ProposerContext(target=None, n_slots=2, max_ctx=1000, options={
        "spec_ngram_map_k_size_n": 2, "spec_ngram_map_k_size_m": 3,
        "spec_ngram_mod_n_match": 3, "spec_ngram_mod_n_min": 1, "spec_ngram_mod_n_max": 4})
    map_k, mod = NgramMapK(ctx), NgramMod(ctx)
    driver = SpecDriver([map_k, mod], 2)
    p0 = [9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1]
    p1 = [20, 21, 22, 23, 20, 21]
    driver.begin(0, arr(p0))
    driver.begin(1, arr(p1))
    # round 1: map-k drafts slot 0 ([1, 2] -> [3, 4, 5]); slot 1 is too short for map-k, and
    # ngram-mod drafts [23, 20, 21], truncated to the caller's cap of 2
    drafts = driver.draft([DraftRequest(0, 10, 11, 2, arr(p0)), DraftRequest(1, 2, 6, 22, arr(p1))])
    assert drafts[0].tokens == [3, 4, 5] and drafts[1].tokens == [23, 20]
    assert mod.slots[1].n_draft_last == 3                  # recorded before the caller's cap
    driver.verified(0, 3, 2, 3)
    driver.verified(1, 2, 0, 5)
    # round 2: only slot 0 asks; map-k drafts at most the 2 accepted last time; ngram-mod is not called
    h0 = p0 + [2, 3, 4, 7, 1]
    assert driver.draft([DraftRequest(0, 10, 16, 2, arr(h0))])[0].tokens == [3, 4]
    driver.verified(0, 2, 2, 3)
    # round 3: nobody drafts for slot 1: both are called, no accept follows
    assert driver.draft([DraftRequest(1, 10, 6, 99, arr([40, 41, 42, 43, 44, 45]))]) == {}
    lines = [line.split(", dur(b,g,a)")[0] for line in driver.stats_lines()]
    assert lines == [
        "statistics      ngram-map-k: #calls(b,g,a) =    2      3      2, #gen drafts =      2, "
        "#acc drafts =     2, #gen tokens =      5, #acc tokens =     4, #mean acc len = 3.00, "
        "#acc rate/pos = (1.000, 1.000)",
        "statistics        ngram-mod: #calls(b,g,a) =    2      2      1, #gen drafts =      1, "
        "#acc drafts =     0, #gen tokens =      2, #acc tokens =     0, #mean acc len = 1.00, "
        "#acc rate/pos = ()",
    ]
    assert mod.slots[1].n_low == 1 and mod.slots[0].n_low == 0
    assert driver.max_draft() == 4 and map_k.max_draft() == 3


def test_seeded_sampling_is_independent_of_the_batch(tiny_qwen3, cases):
    """ngram-mod's pool is shared by the slots, so drafts differ with the batch; sampled output must not."""
    prompts = cases[0][:4]
    params = [SamplingParams(temperature=0.9, top_k=50, seed=500 + i, max_tokens=24, ignore_eos=True)
              for i in range(len(prompts))]
    spec = "ngram-mod,ngram-map-k4v,ngram-cache"
    alone = [LLM(tiny_qwen3, spec_type=spec, **SMALL).generate(p, sp)[0].token_ids for p, sp in zip(prompts, params)]
    batched = LLM(tiny_qwen3, spec_type=spec, n_parallel=4, **SMALL).generate(prompts, params)
    assert [o.token_ids for o in batched] == alone
