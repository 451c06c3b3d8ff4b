"""draft-dflash / draft-dspark in the engine: greedy output identical to no speculation for every
batch composition and both layouts, drafts really accepted, p_min / n_max / scheduling options,
and the clear errors."""
import numpy as np
import pytest
import torch

from support.block_drafters import bigram_dspark_drafter, write_block_drafter
from support.prompts import BLOCK_PROMPTS as PROMPTS
from specserve import LLM, SamplingParams
from specserve.errors import OptionError
from specserve.models.block_drafter import save_block_drafter
from specserve.models.block_drafter_format import ANCHOR_FIRST, BONUS_ANCHOR


def _greedy(n=40):
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)


@pytest.fixture(scope="module")
def reference(tiny_qwen3):
    return [o.token_ids for o in LLM(tiny_qwen3).generate(PROMPTS, _greedy())]


@pytest.fixture(scope="module")
def bigram_dspark(tiny_qwen3, reference, tmp_path_factory):
    """DSpark drafts (both layouts) that mostly guess right: see bigram_dspark_drafter."""
    paths = {}
    for layout in (ANCHOR_FIRST, BONUS_ANCHOR):
        model = bigram_dspark_drafter(tiny_qwen3, PROMPTS, reference, layout=layout)
        paths[layout] = save_block_drafter(model, tmp_path_factory.mktemp(f"bigram-{layout}"), torch.float32)
    return paths


@pytest.fixture(scope="module")
def random_drafts(tiny_qwen3, tmp_path_factory):
    root = tmp_path_factory.mktemp("random-drafts")
    return {
        ("draft-dflash", BONUS_ANCHOR): write_block_drafter(root / "zlab", tiny_qwen3, "zlab", block_size=6),
        ("draft-dflash", ANCHOR_FIRST): write_block_drafter(root / "ds-dflash", tiny_qwen3, "deepspec", block_size=5),
        ("draft-dspark", ANCHOR_FIRST): write_block_drafter(root / "ds-dspark", tiny_qwen3, "deepspec", block_size=5,
                                                            markov_rank=16, confidence=True),
        ("draft-dspark", BONUS_ANCHOR): write_block_drafter(root / "sf", tiny_qwen3, "specforge-legacy",
                                                            block_size=5, markov_rank=16, confidence=True),
    }


def _counters(llm):
    return next(iter(llm.engine.driver.stats_dict().values()))


@pytest.mark.parametrize("key", [("draft-dflash", BONUS_ANCHOR), ("draft-dflash", ANCHOR_FIRST),
                                 ("draft-dspark", ANCHOR_FIRST), ("draft-dspark", BONUS_ANCHOR)])
def test_greedy_identical_random_drafters(tiny_qwen3, reference, random_drafts, key):
    spec_type, layout = key
    for n_parallel in (1, 3):
        llm = LLM(tiny_qwen3, draft_model=random_drafts[key], spec_type=spec_type, n_parallel=n_parallel,
                  spec_draft_n_max=8, spec_dflash_layout=layout)
        for order in (list(range(len(PROMPTS))), list(reversed(range(len(PROMPTS))))):
            outs = llm.generate([PROMPTS[i] for i in order], _greedy())
            assert [o.token_ids for o in outs] == [reference[i] for i in order]
        stats = _counters(llm)
        assert stats["n_gen_tokens"] > 0


@pytest.mark.parametrize("layout", [ANCHOR_FIRST, BONUS_ANCHOR])
def test_greedy_identical_with_accepting_drafter(tiny_qwen3, reference, bigram_dspark, layout):
    for n_parallel in (1, 2, 5):
        llm = LLM(tiny_qwen3, draft_model=bigram_dspark[layout], spec_type="draft-dspark", n_parallel=n_parallel,
                  spec_draft_n_max=8)
        for order in (list(range(len(PROMPTS))), [3, 0, 4, 2, 1]):
            outs = llm.generate([PROMPTS[i] for i in order], _greedy())
            assert [o.token_ids for o in outs] == [reference[i] for i in order], (layout, n_parallel)
        stats = _counters(llm)
        assert 0 < stats["n_acc_tokens"] < stats["n_gen_tokens"]
        assert stats["n_acc_tokens"] > stats["n_gen_tokens"] / 4       # the bigram drafter is mostly right
        assert len(stats["n_acc_per_pos"]) >= 4                          # whole blocks were accepted


def test_n_max_is_clamped_to_the_trained_block(tiny_qwen3, random_drafts):
    for key, most in (((("draft-dflash", BONUS_ANCHOR)), 5), ((("draft-dspark", ANCHOR_FIRST)), 5)):
        llm = LLM(tiny_qwen3, draft_model=random_drafts[key], spec_type=key[0], spec_draft_n_max=50)
        assert llm.engine.driver.max_draft() == most
        llm = LLM(tiny_qwen3, draft_model=random_drafts[key], spec_type=key[0], spec_draft_n_max=2)
        assert llm.engine.driver.max_draft() == 2
        out = llm.generate(PROMPTS[0], _greedy(20))[0]
        assert out.draft_stats["drafted"] <= 2 * out.draft_stats["verify_steps"]


def test_p_min_truncates_blocks(tiny_qwen3, reference, bigram_dspark):
    # the bigram drafter's confidence is 0.88 everywhere: p_min 0.9 drafts nothing, 0.5 everything
    kwargs = dict(draft_model=bigram_dspark[ANCHOR_FIRST], spec_type="draft-dspark", spec_draft_n_max=8)
    full = LLM(tiny_qwen3, spec_draft_p_min=0.5, **kwargs)
    assert [o.token_ids for o in full.generate(PROMPTS, _greedy())] == reference
    assert _counters(full)["n_gen_tokens"] > 0
    none = LLM(tiny_qwen3, spec_draft_p_min=0.9, **kwargs)
    assert [o.token_ids for o in none.generate(PROMPTS, _greedy())] == reference
    assert _counters(none)["n_gen_tokens"] == 0
    # per-position truncation: make confidence depend on the previous token
    proposer = full.engine.driver.proposers[0]
    head = proposer.drafter.confidence_head.proj
    with torch.no_grad():
        head.weight.zero_()
        head.weight[0, 64 + 0] = 1.0           # the Markov feature of prev token 0 (identity w1)
        head.bias.fill_(-3.0)
    conf = proposer._confidence(torch.zeros(1, 3, 64), type("C", (), {"prev": np.array([[0, 0, 5]]), "confidence": None})())
    lengths = proposer._choose_lengths([None], np.array([3]), conf)
    assert lengths.tolist() == [0]
    with torch.no_grad():
        head.bias.fill_(-0.5)                 # conf: prev 0 -> 0.62, prev 5 -> 0.38
    conf = proposer._confidence(torch.zeros(1, 3, 64), type("C", (), {"prev": np.array([[0, 0, 5]]), "confidence": None})())
    assert proposer._choose_lengths([None], np.array([3]), conf).tolist() == [2]


def test_dflash_p_min_uses_top_probability(tiny_qwen3, reference, random_drafts):
    llm = LLM(tiny_qwen3, draft_model=random_drafts[("draft-dflash", ANCHOR_FIRST)], spec_type="draft-dflash",
              spec_draft_n_max=8, spec_draft_p_min=0.999)
    assert [o.token_ids for o in llm.generate(PROMPTS, _greedy())] == reference
    assert _counters(llm)["n_gen_tokens"] == 0          # a random draft is never that sure


def test_scheduled_verification_is_lossless(tiny_qwen3, reference, bigram_dspark, tmp_path):
    table = tmp_path / "cost.json"
    # a flat step time up to 12 rows, then twice as slow: the scheduler keeps batches <= 12 rows
    table.write_text('{"rows": [1, 12, 13, 64], "seconds": [0.01, 0.01, 0.02, 0.08]}')
    llm = LLM(tiny_qwen3, draft_model=bigram_dspark[ANCHOR_FIRST], spec_type="draft-dspark", n_parallel=3,
              spec_draft_n_max=8, spec_dspark_schedule=True, spec_dspark_cost_table=str(table))
    # one scheduler for every type: the DSpark flag turns it on and feeds it the confidence head
    assert llm.engine.driver.scheduler is not None and llm.engine.driver.proposers[0].schedule
    outs = llm.generate(PROMPTS, _greedy())
    assert [o.token_ids for o in outs] == reference
    stats = _counters(llm)
    assert 0 < stats["n_acc_tokens"] < stats["n_gen_tokens"]
    # profiling at start-up (no table given) also works
    llm = LLM(tiny_qwen3, draft_model=bigram_dspark[ANCHOR_FIRST], spec_type="draft-dspark", n_parallel=2,
              spec_draft_n_max=4, spec_dspark_schedule=True)
    assert llm.engine.driver.scheduler.cost_table.rows.tolist() == list(range(1, 2 * 5 + 1))
    assert [o.token_ids for o in llm.generate(PROMPTS[:2], _greedy())] == reference[:2]


def test_clear_errors(tiny_qwen3, random_drafts, tmp_path):
    with pytest.raises(OptionError, match="needs a draft model folder"):
        LLM(tiny_qwen3, spec_type="draft-dflash")
    with pytest.raises(OptionError, match="has a Markov head .* use --spec-type draft-dspark"):
        LLM(tiny_qwen3, draft_model=random_drafts[("draft-dspark", ANCHOR_FIRST)], spec_type="draft-dflash")
    with pytest.raises(OptionError, match="has no Markov head .* use --spec-type draft-dflash"):
        LLM(tiny_qwen3, draft_model=random_drafts[("draft-dflash", ANCHOR_FIRST)], spec_type="draft-dspark")
    no_conf = write_block_drafter(tmp_path / "noconf", tiny_qwen3, "deepspec", block_size=4, markov_rank=8)
    with pytest.raises(OptionError, match="--spec-draft-p-min 0.5 needs a confidence head"):
        LLM(tiny_qwen3, draft_model=no_conf, spec_type="draft-dspark", spec_draft_p_min=0.5)
    with pytest.raises(OptionError, match="--spec-dspark-schedule needs a confidence head"):
        LLM(tiny_qwen3, draft_model=no_conf, spec_type="draft-dspark", spec_dspark_schedule=True)
    with pytest.raises(OptionError, match="--spec-dflash-layout must be"):
        LLM(tiny_qwen3, draft_model=no_conf, spec_type="draft-dspark", spec_dflash_layout="sideways")
    with pytest.raises(OptionError, match="--spec-dflash-sample must be"):
        LLM(tiny_qwen3, draft_model=no_conf, spec_type="draft-dspark", spec_dflash_sample="maybe")
    with pytest.raises(OptionError, match="step cost table not found"):
        LLM(tiny_qwen3, draft_model=random_drafts[("draft-dspark", ANCHOR_FIRST)], spec_type="draft-dspark",
            spec_dspark_schedule=True, spec_dspark_cost_table=str(tmp_path / "missing.json"))
    # the engine still serves after these failures
    llm = LLM(tiny_qwen3, draft_model=no_conf, spec_type="draft-dspark")
    assert len(llm.generate(PROMPTS[0], _greedy(5))[0].token_ids) == 5


def test_bfloat16_target_and_drafter(tiny_qwen3_bf16, tmp_path):
    """A bfloat16 target serves a drafter in bfloat16 (linear layers) with float32 attention: still exact."""
    draft = write_block_drafter(tmp_path / "d", tiny_qwen3_bf16, "deepspec", block_size=5, markov_rank=16,
                                confidence=True)
    reference = [o.token_ids for o in LLM(tiny_qwen3_bf16).generate(PROMPTS, _greedy(24))]
    llm = LLM(tiny_qwen3_bf16, draft_model=draft, spec_type="draft-dspark", n_parallel=3, spec_draft_n_max=5)
    assert llm.engine.driver.proposers[0].drafter.dtype == torch.bfloat16
    assert [o.token_ids for o in llm.generate(PROMPTS, _greedy(24))] == reference


@pytest.mark.slow
def test_generate_command_with_a_block_drafter(tiny_qwen3, bigram_dspark):
    from support.cli import run
    r = run("generate", "-m", str(tiny_qwen3), "-p", "def add(a, b):", "-n", "24", "--temp", "0", "--ignore-eos",
            "--spec-type", "draft-dspark", "-md", str(bigram_dspark[ANCHOR_FIRST]), "--spec-draft-n-max", "6",
            "--spec-draft-p-min", "0.5")
    assert r.returncode == 0, r.stderr
    assert "statistics     draft-dspark: #calls(b,g,a) =    1" in r.stderr
    r = run("generate", "-m", str(tiny_qwen3), "-p", "x", "--spec-type", "draft-dflash",
            "-md", str(bigram_dspark[ANCHOR_FIRST]))
    assert r.returncode == 1 and "use --spec-type draft-dspark" in r.stderr


def test_seeded_sampling_independent_of_batch(tiny_qwen3, bigram_dspark):
    """The draft forward is batch-invariant too, so a seeded request samples the same tokens alone
    or beside others, even though its draft (sampled with its own generator) is verified by rejection."""
    params = [SamplingParams(temperature=0.9, top_k=50, seed=1000 + i, max_tokens=30, ignore_eos=True)
              for i in range(len(PROMPTS))]
    kwargs = dict(draft_model=bigram_dspark[ANCHOR_FIRST], spec_type="draft-dspark", spec_draft_n_max=6)
    alone = [LLM(tiny_qwen3, **kwargs).generate(p, sp)[0].token_ids for p, sp in zip(PROMPTS, params)]
    llm = LLM(tiny_qwen3, n_parallel=3, **kwargs)
    assert [o.token_ids for o in llm.generate(PROMPTS, params)] == alone
    assert _counters(llm)["n_acc_tokens"] > 0
