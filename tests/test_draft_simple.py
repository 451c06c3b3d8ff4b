"""draft-simple: vocabulary compatibility, the batched draft loop's p_min / n_min / n_max rules,
greedy losslessness, and sampled losslessness with q (rejection sampling)."""
import json
import shutil

import pytest
import torch

from support.model_drafters import perturbed_copy
from support.models import write_model, write_tokenizer
from specserve import LLM, SamplingParams, kernels
from specserve.errors import IncompatibleDraftError, OptionError
from specserve.models.tokenizer import Tokenizer
from specserve.speculative.base import DraftRequest
from specserve.speculative.draft_chain import ChainRows, run_chain
from specserve.speculative.draft_options import draft_settings
from specserve.speculative.vocab_compat import check_vocab_compatible
from support.distribution import VOCAB, assert_target_pair_distribution
from support.prompts import DRAFTER_PROMPTS as PROMPTS


# ---------------------------------------------------------------------------- vocabulary check
def test_vocabulary_compatibility(tmp_path, tiny_qwen3):
    tok = Tokenizer(tiny_qwen3)
    check_vocab_compatible(tok, 320, tiny_qwen3, 320)
    check_vocab_compatible(tok, 320, tiny_qwen3, 320 + 128)             # padding rows are allowed
    with pytest.raises(IncompatibleDraftError, match="differs from the target's 320 by 129"):
        check_vocab_compatible(tok, 320, tiny_qwen3, 320 + 129)
    other = tmp_path / "other"
    write_tokenizer(other, vocab_size=300)
    data = json.loads((other / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    swapped = {v: k for k, v in vocab.items()}
    a, b = swapped[40], swapped[41]                  # swap two ordinary tokens: the first mismatch is id 40
    vocab[a], vocab[b] = 41, 40
    (other / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(IncompatibleDraftError, match="token 40 is"):
        check_vocab_compatible(tok, 320, other, 320)
    cfg = json.loads((other / "tokenizer_config.json").read_text())
    shutil.copy(tiny_qwen3 / "tokenizer.json", other / "tokenizer.json")
    (other / "tokenizer_config.json").write_text(json.dumps({**cfg, "add_bos_token": True, "bos_token": "<|im_start|>"}))
    with pytest.raises(IncompatibleDraftError, match="add_bos_token"):
        check_vocab_compatible(tok, 320, other, 320)
    (other / "tokenizer.json").unlink()
    with pytest.raises(IncompatibleDraftError, match="no tokenizer.json"):
        check_vocab_compatible(tok, 320, other, 320)


def _settings(n_max: int, n_min: int, p_min: float, sample: bool):
    return draft_settings({"spec_draft_n_max": n_max, "spec_draft_n_min": n_min, "spec_draft_p_min": p_min,
                           "spec_draft_sample": sample})

def test_incompatible_draft_model_is_refused(tmp_path, tiny_qwen3):
    big = write_model(tmp_path / "big", "qwen3", vocab_size=512)
    with pytest.raises(IncompatibleDraftError, match="vocabulary size 512"):
        LLM(tiny_qwen3, spec_type="draft-simple", draft_model=big)
    with pytest.raises(OptionError, match="needs a draft model"):
        LLM(tiny_qwen3, spec_type="draft-simple")


# ---------------------------------------------------------------------------- the draft loop
def _fixed_step(top_probs_per_step):
    """A step whose output rows have top-10 softmax top-1 prob given per step (token = 10 + step)."""
    calls = []

    def step(batch, hidden):
        i = len(calls)
        calls.append(batch)
        n = batch.output_rows.numel()
        p = top_probs_per_step[i]
        logits = torch.full((n, 50), -1e9)
        logits[:, :10] = 0.0
        # top-1 prob p among 10 candidates: e^x / (e^x + 9) = p
        logits[:, 10 + i if 10 + i < 50 else 0] = float(torch.log(torch.tensor(9 * p / (1 - p))))
        return logits, None
    return step, calls


def _req(slot, n_max=0, temperature=0.0):
    return DraftRequest(slot, n_max, 4, 3, torch.arange(4).numpy(), temperature, torch.Generator().manual_seed(slot))


def test_draft_loop_rules():
    first = lambda: [ChainRows(0, torch.tensor([1, 2, 3]), 2), ChainRows(1, torch.tensor([3]), 5)]  # noqa: E731
    step, calls = _fixed_step([0.9, 0.9, 0.9, 0.9, 0.9])
    drafts = run_chain([_req(0), _req(1, n_max=2)], first(), step, _settings(4, 0, 0.0, False), 50)
    assert drafts[0].tokens == [10, 11, 12, 13] and drafts[1].tokens == [10, 11]   # n_max 4, caller cap 2
    assert len(calls) == 4                                     # one forward per step for both slots
    assert calls[0].segments[0].n_rows == 3 and calls[1].n_tokens == 2 and calls[2].n_tokens == 1
    assert calls[1].positions.tolist() == [5, 6]               # each slot continues after its own rows
    step, _ = _fixed_step([0.9, 0.5, 0.9])
    drafts = run_chain([_req(0)], first()[:1], step, _settings(4, 0, 0.6, False), 50)
    assert drafts[0].tokens == [10]                            # stops BEFORE the token below p_min
    step, _ = _fixed_step([0.9, 0.5, 0.9])
    assert run_chain([_req(0)], first()[:1], step, _settings(4, 2, 0.6, False), 50) == {}   # shorter than n_min


def test_sampled_drafts_carry_their_distribution():
    """A sampled draft is drawn from the request's own sampler over the draft's logits, and carries it."""
    step, _ = _fixed_step([0.6, 0.6, 0.6])
    drafts = run_chain([_req(0, temperature=0.7)], [ChainRows(0, torch.tensor([1]), 0)], step,
                       _settings(3, 0, 0.0, True), 50)
    d = drafts[0]
    assert d.q_probs.shape == (3, 50)
    assert torch.allclose(d.q_probs.sum(-1), torch.ones(3))
    assert all(d.q_probs[i, t] > 0 for i, t in enumerate(d.tokens))
    assert (d.q_probs[0] > 0).sum() == 11                      # every token with mass, not only a top 10
    step, _ = _fixed_step([0.6, 0.6, 0.6])
    req = _req(0, temperature=0.7)
    req.top_k = 1                                              # the request's top-k: q is its one token
    d = run_chain([req], [ChainRows(0, torch.tensor([1]), 0)], step, _settings(3, 0, 0.0, True), 50)[0]
    assert d.tokens == [10, 11, 12] and d.q_probs[[0, 1, 2], [10, 11, 12]].tolist() == [1.0, 1.0, 1.0]


# ---------------------------------------------------------------------------- lossless
@pytest.fixture(scope="module")
def near_draft(tmp_path_factory, tiny_qwen3):
    return perturbed_copy(tiny_qwen3, tmp_path_factory.mktemp("near") / "m", noise=0.004)


def test_greedy_identical_with_and_without_draft_model(tiny_qwen3, near_draft, tmp_path):
    far_draft = write_model(tmp_path / "far", "qwen3", seed=9, std=0.25, num_hidden_layers=1)
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    reference = [o.token_ids for o in LLM(tiny_qwen3).generate(PROMPTS, params)]
    for draft, n_max in ((near_draft, 5), (far_draft, 3)):
        for n_parallel in (1, 3):
            llm = LLM(tiny_qwen3, spec_type="draft-simple", draft_model=draft, n_parallel=n_parallel,
                      spec_draft_n_max=n_max, n_batch=24)
            for order in (list(range(len(PROMPTS))), list(reversed(range(len(PROMPTS))))):
                outs = llm.generate([PROMPTS[i] for i in order], params)
                assert [o.token_ids for o in outs] == [reference[i] for i in order]
            stats = llm.engine.driver.stats_dict()["draft-simple"]
            assert stats["n_gen_tokens"] > 0
            if draft is near_draft:
                assert 0.3 * stats["n_gen_tokens"] < stats["n_acc_tokens"] < stats["n_gen_tokens"]


@pytest.mark.skipif(kernels.requested() == "torch", reason="SPECSERVE_KERNELS=torch")
@pytest.mark.parametrize("temperature,p_min", [(0.0, 0.0), (0.9, 0.0), (0.0, 0.5), (0.9, 0.5)])
def test_one_call_chain_drafts_what_the_step_loop_drafts(tiny_qwen3, near_draft, monkeypatch, temperature, p_min):
    """The chain in one native call and the step-by-step loop give the same drafts (so the same
    counters), at 1 and 3 slots with per-request caps, greedy and sampled (--spec-draft-sample), with
    and without a --spec-draft-p-min cut."""
    from specserve.speculative.draft_simple import DraftSimple
    sampler = dict(top_k=20, top_p=0.9, min_p=0.02) if temperature else {}       # q follows the request's sampler
    params = [SamplingParams(temperature=temperature, max_tokens=24, ignore_eos=True, seed=i, **sampler)
              for i in range(len(PROMPTS))]

    def run(one_call: bool):
        monkeypatch.setattr(DraftSimple, "_one_call", lambda self: one_call)
        counters = []
        for n_parallel in (1, 3):
            llm = LLM(tiny_qwen3, spec_type="draft-simple", draft_model=near_draft, n_parallel=n_parallel,
                      spec_draft_n_max=4, spec_draft_sample=temperature > 0, spec_draft_p_min=p_min)
            assert llm.engine.driver.proposers[0].model.native is not None
            outs = llm.generate(PROMPTS, params)
            stats = llm.engine.driver.stats_dict()["draft-simple"]
            counters.append(([o.token_ids for o in outs], stats["n_gen_tokens"], stats["n_acc_tokens"],
                             stats["n_acc_per_pos"]))
        return counters

    one_call = run(True)
    assert one_call == run(False)
    if p_min:       # the cut happened: fewer tokens drafted than without it
        n_drafted = one_call[0][1]
        assert 0 < n_drafted < 4 * sum(len(t) for t in one_call[0][0]) / 2


@pytest.mark.parametrize("sample", [False, True])
def test_sampled_output_has_target_distribution(tmp_path, sample):
    target = write_model(tmp_path / "t", "qwen3", seed=11, std=0.6, tokenizer=False, vocab_size=VOCAB)
    draft = perturbed_copy(target, tmp_path / "d", noise=0.1)
    llm = LLM(target, spec_type="draft-simple", draft_model=draft, n_parallel=16, ctx_size=64,
              spec_draft_n_max=2, spec_draft_sample=sample)
    assert_target_pair_distribution(llm, "draft-simple")
