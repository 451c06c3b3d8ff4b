"""draft-dflash / draft-dspark beyond Qwen3: Llama- and Qwen2-style draft stacks on a Qwen3 target,
drafts of every backbone on a Llama target, and on a Qwen2 target. Greedy output is identical to no speculation,
batched (3 slots, prompts in two orders), in both layouts; the DSpark drafts really get accepted."""
import pytest
import torch

from support.block_drafters import bigram_dspark_drafter, write_block_drafter
from support.models import write_model
from specserve import LLM, SamplingParams
from specserve.models.block_drafter import save_block_drafter
from specserve.models.block_drafter_format import ANCHOR_FIRST, BONUS_ANCHOR
from support.prompts import BLOCK_PROMPTS as PROMPTS

# (target fixture, draft backbone): the Qwen3 backbone on a Qwen3 target is test_dflash_engine.py's
CASES = [("tiny_qwen3", "llama"), ("tiny_qwen3", "qwen2"),
         ("tiny_llama", "qwen3"), ("tiny_llama", "llama"), ("tiny_llama", "qwen2"),
         ("tiny_qwen2", "qwen3"), ("tiny_qwen2", "qwen2")]
ORDERS = (list(range(len(PROMPTS))), [3, 0, 4, 2, 1])


def _greedy(n=32):
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("qwen2"), "qwen2", seed=4, std=0.25)


@pytest.fixture(scope="module")
def references(request):
    """Greedy output of each target without speculation."""
    return {name: [o.token_ids for o in LLM(request.getfixturevalue(name)).generate(PROMPTS, _greedy())]
            for name in sorted({name for name, _ in CASES})}


def _check_lossless(target_dir, draft_dir, spec_type, layout, reference):
    llm = LLM(target_dir, draft_model=draft_dir, spec_type=spec_type, n_parallel=3, spec_draft_n_max=8,
              spec_dflash_layout=layout)
    for order in ORDERS:
        outs = llm.generate([PROMPTS[i] for i in order], _greedy())
        assert [o.token_ids for o in outs] == [reference[i] for i in order], (spec_type, layout)
    proposer = llm.engine.driver.proposers[0]
    return proposer.drafter, next(iter(llm.engine.driver.stats_dict().values()))


@pytest.mark.parametrize("layout", [ANCHOR_FIRST, BONUS_ANCHOR])
@pytest.mark.parametrize("target_name,draft_arch", CASES)
def test_random_dflash_backbones_are_lossless(request, tmp_path, references, target_name, draft_arch, layout):
    target_dir = request.getfixturevalue(target_name)
    fmt = "zlab" if layout == BONUS_ANCHOR else "deepspec"
    draft = write_block_drafter(tmp_path / "d", target_dir, fmt, block_size=5, draft_arch=draft_arch)
    drafter, stats = _check_lossless(target_dir, draft, "draft-dflash", layout, references[target_name])
    assert drafter.config.backbone.family == draft_arch and drafter.config.layout == layout
    assert stats["n_gen_tokens"] > 0


@pytest.mark.parametrize("layout", [ANCHOR_FIRST, BONUS_ANCHOR])
@pytest.mark.parametrize("target_name,draft_arch", CASES)
def test_accepting_dspark_backbones_are_lossless(request, tmp_path, references, target_name, draft_arch, layout):
    target_dir = request.getfixturevalue(target_name)
    reference = references[target_name]
    model = bigram_dspark_drafter(target_dir, PROMPTS, reference, layout=layout, draft_arch=draft_arch)
    draft = save_block_drafter(model, tmp_path / "d", torch.float32)
    drafter, stats = _check_lossless(target_dir, draft, "draft-dspark", layout, reference)
    assert drafter.config.backbone.family == draft_arch and drafter.config.backbone_from == "config"
    assert 0 < stats["n_acc_tokens"] < stats["n_gen_tokens"]        # accepted and rejected drafts both happen
