"""EAGLE-3 and MTP heads draft their chain in one native call (kernels/native/head_chain.cpp); the drafts
must be the ones the step-by-step loop gives, for every head layout, at 1 and 3 slots, greedy and with
drafts sampled at T > 0 (the same uniforms of the request's generator)."""
import pytest
import torch

from support.model_drafters import add_mtp, write_eagle3
from support.models import write_model
from support.prompts import DRAFTER_PROMPTS as PROMPTS
from specserve import LLM, SamplingParams, kernels
from specserve.speculative.hidden_chain import HiddenChainProposer

pytestmark = pytest.mark.skipif(kernels.requested() == "torch", reason="SPECSERVE_KERNELS=torch")


@pytest.fixture(scope="module")
def target6(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("t6"), "qwen3", seed=4, std=0.25, num_hidden_layers=6,
                       tokenizer=False)


def record_drafts(llm) -> list:
    """(slot, draft tokens) of every draft the engine gets, in order."""
    seen, draft = [], llm.engine.driver.draft

    def spy(requests):
        result = draft(requests)
        seen.extend((slot, list(d.tokens), None if d.q_probs is None else torch.as_tensor(d.q_probs).nonzero().tolist())
                    for slot, d in sorted(result.items()))
        return result

    llm.engine.driver.draft = spy
    return seen


def run_both_ways(monkeypatch, spec_type: str, target, draft=None, n_max: int = 4, temperature: float = 0.0,
                  p_min: float = 0.0):
    """Every draft (with its q when sampled), the outputs and the counters at 1 and 3 slots, with the
    one-call chain and with the step loop."""
    params = [SamplingParams(temperature=temperature, max_tokens=24, ignore_eos=True, seed=i)
              for i in range(len(PROMPTS))]
    results = []
    for one_call in (True, False):
        calls = []
        original = HiddenChainProposer._chain_call
        monkeypatch.setattr(HiddenChainProposer, "_one_call", lambda self: one_call)
        monkeypatch.setattr(HiddenChainProposer, "_chain_call",
                            lambda self, *a: calls.append(1) or original(self, *a))
        counters = []
        for n_parallel in (1, 3):
            llm = LLM(target, spec_type=spec_type, draft_model=draft, n_parallel=n_parallel, spec_draft_n_max=n_max,
                      spec_draft_sample=temperature > 0, spec_draft_p_min=p_min)
            drafts = record_drafts(llm)
            outs = llm.generate(PROMPTS, params)
            stats = llm.engine.driver.stats_dict()[spec_type]
            counters.append((drafts, [o.token_ids for o in outs], stats["n_gen_tokens"], stats["n_acc_tokens"],
                             stats["n_acc_per_pos"]))
        assert bool(calls) == one_call
        results.append(counters)
    assert results[0] == results[1]
    lengths = [len(d) for _, d, _ in results[0][0][0]]
    assert len(lengths) > (8 if p_min else 20) and max(lengths) == n_max
    if p_min:
        assert min(lengths) < n_max           # the cut happened


@pytest.mark.parametrize("layout,kwargs", [
    ("specforge", {"draft_vocab": 200}),                                      # d2t id map
    ("specforge", {"fc_norm": True, "norm_output": True}),                    # EAGLE-3.1: normed row fed back
    ("speculators", {"norm_before_residual": True, "own_embedding": True}),
    ("speculators", {"hidden": 48, "own_embedding": True, "n_layers": 2}),    # narrower head, a second layer
])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_eagle3_one_call_chain_drafts_what_the_step_loop_drafts(tmp_path, target6, monkeypatch, layout, kwargs,
                                                                temperature):
    draft = write_eagle3(tmp_path / "d", target6, layout, layer_ids=[0, 2, 5] if layout == "speculators" else None,
                         **kwargs)
    run_both_ways(monkeypatch, "draft-eagle3", target6, draft, temperature=temperature)


@pytest.mark.parametrize("layout", ["deepseek", "mimo"])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_mtp_one_call_chain_drafts_what_the_step_loop_drafts(tmp_path, monkeypatch, layout, temperature):
    target = write_model(tmp_path, "qwen2" if layout == "mimo" else "qwen3", seed=1, std=0.25, tokenizer=False)
    add_mtp(target, layout, std=0.3)
    run_both_ways(monkeypatch, "draft-mtp", target, n_max=3, temperature=temperature)


@pytest.mark.parametrize("spec_type", ["draft-eagle3", "draft-mtp"])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_p_min_cut_in_one_call_matches_the_step_loop(tmp_path, target6, monkeypatch, spec_type, temperature):
    """--spec-draft-p-min: the one-call chain reports each step's top-1 probability and stops once every
    slot was cut; the drafts it keeps are the step loop's."""
    if spec_type == "draft-mtp":
        target = write_model(tmp_path, "qwen3", seed=1, std=0.25, tokenizer=False)
        add_mtp(target, "deepseek", std=0.3)
        run_both_ways(monkeypatch, spec_type, target, n_max=4, temperature=temperature, p_min=0.2)
    else:
        draft = write_eagle3(tmp_path / "d", target6, "specforge", draft_vocab=200)
        run_both_ways(monkeypatch, spec_type, target6, draft, temperature=temperature, p_min=0.2)
