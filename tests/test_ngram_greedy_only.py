"""--spec-ngram-greedy-only: the n-gram types draft for greedy requests and not for sampled ones, alone and in
front of a model drafter (which still drafts for sampled requests as its own options say); sampled requests
then decode as without the n-gram type (same seeds, same tokens) and greedy output stays the target's."""
import pytest

from support.model_drafters import perturbed_copy
from support.prompts import NGRAM_PROMPTS
from specserve import LLM, SamplingParams

TEMPERATURES = [0.0, 0.5, 0.0, 0.5]
NGRAM = {"spec_ngram_simple_size_n": 2, "spec_ngram_simple_size_m": 4}


def params():
    return [SamplingParams(temperature=t, max_tokens=24, ignore_eos=True, seed=i) for i, t in enumerate(TEMPERATURES)]


def run(target, spec_type, draft_model=None, **options):
    """Outputs and the (proposer, temperature) of every draft returned."""
    llm = LLM(target, spec_type=spec_type, draft_model=draft_model, n_parallel=len(TEMPERATURES), **NGRAM, **options)
    drafted = []
    for proposer in llm.engine.driver.proposers:
        def spy(requests, propose=proposer.draft, name=proposer.name):
            result = propose(requests)
            drafted.extend((name, r.temperature) for r in requests if r.slot in result)
            return result
        proposer.draft = spy
    outs = llm.generate([list(p) for p in NGRAM_PROMPTS[:4]], params())
    return [o.token_ids for o in outs], drafted


@pytest.fixture(scope="module")
def near_draft(tiny_qwen3, tmp_path_factory):
    return perturbed_copy(tiny_qwen3, tmp_path_factory.mktemp("drafts") / "near", noise=0.004)


def test_ngram_type_drafts_for_greedy_requests_only(tiny_qwen3):
    plain = [o.token_ids for o in LLM(tiny_qwen3, n_parallel=4).generate([list(p) for p in NGRAM_PROMPTS[:4]], params())]
    outs, drafted = run(tiny_qwen3, "ngram-simple")
    assert ("ngram-simple", 0.5) in drafted            # without the option it drafts for sampled requests too
    outs, drafted = run(tiny_qwen3, "ngram-simple", spec_ngram_greedy_only=True)
    assert drafted and all(t == 0.0 for _, t in drafted)
    assert outs == plain                                # sampled: nothing drafted, the same draws; greedy: lossless


def test_model_drafter_behind_it_still_drafts_for_sampled_requests(tiny_qwen3, near_draft):
    outs, drafted = run(tiny_qwen3, "ngram-simple,draft-simple", near_draft, spec_ngram_greedy_only=True)
    assert ("draft-simple", 0.5) in drafted
    assert ("ngram-simple", 0.0) in drafted
    assert ("ngram-simple", 0.5) not in drafted
    reference = [o.token_ids for o in LLM(tiny_qwen3).generate(
        [list(NGRAM_PROMPTS[0]), list(NGRAM_PROMPTS[2])], SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))]
    assert [outs[0], outs[2]] == reference
