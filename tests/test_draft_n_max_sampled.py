"""--spec-draft-n-max-sampled: requests sampled at T > 0 draft at most that many tokens (none at 0) and greedy
ones --spec-draft-n-max, for a chain drafter and a block drafter, alone and in a mixed batch; a greedy
request's drafts do not change with sampled requests beside it, and greedy output stays the target's."""
import pytest

from support.block_drafters import write_block_drafter
from support.model_drafters import perturbed_copy
from support.prompts import DRAFTER_PROMPTS as PROMPTS
from specserve import LLM, SamplingParams
from specserve.errors import OptionError

N_MAX, N_SAMPLED = 5, 2


@pytest.fixture(scope="module")
def drafters(tiny_qwen3, tmp_path_factory):
    root = tmp_path_factory.mktemp("drafters")
    return {"draft-simple": perturbed_copy(tiny_qwen3, root / "near", noise=0.004),
            "draft-dspark": write_block_drafter(root / "dspark", tiny_qwen3, "deepspec", block_size=6,
                                                markov_rank=16, confidence=True)}


def run(target, spec_type, draft, prompts, temperatures, n_sampled=N_SAMPLED):
    """Outputs and, per request (by its prompt), (temperature, draft tokens) of every draft it got."""
    llm = LLM(target, spec_type=spec_type, draft_model=draft, n_parallel=len(prompts), spec_draft_n_max=N_MAX,
              spec_draft_n_max_sampled=n_sampled)
    drafts: dict[tuple, list] = {tuple(p): [] for p in prompts}
    propose = llm.engine.driver.draft

    def spy(requests):
        result = propose(requests)
        for req in requests:
            key = next(p for p in drafts if tuple(req.tokens[:len(p)]) == p)
            if req.slot in result:
                drafts[key].append((req.temperature, result[req.slot].tokens))
        return result

    llm.engine.driver.draft = spy
    params = [SamplingParams(temperature=t, max_tokens=24, ignore_eos=True, seed=i) for i, t in enumerate(temperatures)]
    outs = llm.generate(prompts, params)
    return [o.token_ids for o in outs], drafts


@pytest.mark.parametrize("spec_type", ["draft-simple", "draft-dspark"])
def test_sampled_requests_draft_shorter(tiny_qwen3, drafters, spec_type):
    prompts = [list(p) for p in PROMPTS[:4]]
    greedy_only = [prompts[0], prompts[2]]
    reference = [o.token_ids for o in LLM(tiny_qwen3).generate(
        greedy_only, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))]
    outs, mixed = run(tiny_qwen3, spec_type, drafters[spec_type], prompts, [0.0, 0.9, 0.0, 0.9])
    assert [outs[0], outs[2]] == reference
    lengths = {t: [len(d) for key in mixed for temp, d in mixed[key] if temp == t] for t in (0.0, 0.9)}
    assert max(lengths[0.9]) == N_SAMPLED and max(lengths[0.0]) == N_MAX
    # the greedy requests got the very drafts they get without sampled requests beside them
    outs_alone, alone = run(tiny_qwen3, spec_type, drafters[spec_type], greedy_only, [0.0, 0.0])
    assert outs_alone == reference
    assert all(alone[tuple(p)] == mixed[tuple(p)] for p in greedy_only)


@pytest.mark.parametrize("spec_type", ["draft-simple", "draft-dspark"])
def test_zero_leaves_sampled_requests_undrafted(tiny_qwen3, drafters, spec_type):
    """0: sampled requests decode as without speculation (same seeds, same tokens); greedy ones still draft."""
    prompts = [list(p) for p in PROMPTS[:4]]
    temperatures = [0.0, 0.9, 0.0, 0.9]
    plain = LLM(tiny_qwen3, n_parallel=4).generate(
        prompts, [SamplingParams(temperature=t, max_tokens=24, ignore_eos=True, seed=i) for i, t in enumerate(temperatures)])
    outs, drafts = run(tiny_qwen3, spec_type, drafters[spec_type], prompts, temperatures, n_sampled=0)
    assert outs == [o.token_ids for o in plain]
    assert all(temp == 0.0 for key in drafts for temp, _ in drafts[key])
    assert drafts[tuple(prompts[0])] and drafts[tuple(prompts[2])]


def test_n_max_sampled_is_checked(tiny_qwen3, drafters):
    for bad in (-2, N_MAX + 1):
        with pytest.raises(OptionError, match="--spec-draft-n-max-sampled must be between 0"):
            LLM(tiny_qwen3, spec_type="draft-simple", draft_model=drafters["draft-simple"], spec_draft_n_max=N_MAX,
                spec_draft_n_max_sampled=bad)
