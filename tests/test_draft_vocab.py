"""--spec-draft-vocab: the model drafters draft only among a ranking's most frequent tokens (their lm_head
cut to those rows). Greedy output stays the target's, every draft and every sampled q lives on the kept
tokens, the one-call native chain drafts what the step loop drafts, and a bad ranking or option is named.
(The block drafters' native call against their PyTorch pipeline with a cut: tests/test_block_drafter.py.)"""
import json

import numpy as np
import pytest
import torch

from support.block_drafters import write_block_drafter
from support.model_drafters import add_mtp, perturbed_copy, write_eagle3
from support.models import write_model
from support.prompts import DRAFTER_PROMPTS as PROMPTS
from specserve import LLM, SamplingParams, kernels
from specserve.errors import OptionError
from specserve.speculative.draft_simple import DraftSimple
from specserve.speculative.draft_vocab import kept_token_ids
from specserve.speculative.hidden_chain import HiddenChainProposer
from specserve.train.regen_data import RegenSample, save_regen_dataset
from specserve.train.token_ranking import main as ranking_main, write_ranking

VOCAB, KEPT = 320, 96
COUNTS = np.random.default_rng(0).integers(0, 1000, VOCAB)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """A target with an MTP head and a ranking in its folder, an EAGLE-3 draft, a draft-simple draft."""
    root = tmp_path_factory.mktemp("vocab")
    t = write_model(root / "t", "qwen3", seed=1, std=0.25, tokenizer=False, num_hidden_layers=4)
    simple = perturbed_copy(t, root / "s", noise=0.02)
    add_mtp(t, "deepseek", std=0.3)
    write_ranking(t / "token_ranking.json", COUNTS, "test counts")      # found in the target folder
    return {"target": t, "draft-mtp": None, "draft-eagle3": write_eagle3(root / "e", t, "specforge"),
            "draft-simple": simple, "draft-dflash": write_block_drafter(root / "df", t),
            "draft-dspark": write_block_drafter(root / "ds", t, markov_rank=8, confidence=True)}


def kept_set(target) -> set:
    return set(kept_token_ids(target["target"] / "token_ranking.json", KEPT, VOCAB).tolist())


def run(target, spec_type, n_parallel=1, temperature=0.0, **options):
    """(outputs, every draft's tokens, every sampled draft's q support)."""
    llm = LLM(target["target"], spec_type=spec_type, draft_model=target.get(spec_type), n_parallel=n_parallel,
              spec_draft_n_max=4, spec_draft_sample=temperature > 0, **options)
    drafts, support, draft = [], [], llm.engine.driver.draft

    def spy(requests):
        result = draft(requests)
        for d in result.values():
            drafts.extend(d.tokens)
            if d.q_probs is not None:
                support.extend(torch.as_tensor(d.q_probs).nonzero()[:, -1].tolist())
        return result

    llm.engine.driver.draft = spy
    params = [SamplingParams(temperature=temperature, max_tokens=20, ignore_eos=True, seed=i) for i in range(len(PROMPTS))]
    return [o.token_ids for o in llm.generate(PROMPTS, params)], drafts, support


def test_ranking_round_trip_and_cli(tmp_path, target):
    order = np.lexsort((np.arange(VOCAB), -COUNTS))
    assert kept_token_ids(target["target"] / "token_ranking.json", KEPT, VOCAB).tolist() == sorted(order[:KEPT])
    data = tmp_path / "regen.npz"
    save_regen_dataset(data, [RegenSample(np.array([1, 2, 7, 7, 7, 3]), 2), RegenSample(np.array([5, 3]), 1)], {})
    assert ranking_main(["--target", str(target["target"]), "--out", str(tmp_path / "r.json"), "--data", str(data)]) == 0
    ranking = json.loads((tmp_path / "r.json").read_text())
    assert ranking["token_ids"][:3] == [7, 3, 0] and ranking["counts"][:3] == [3, 2, 0]   # prompts not counted
    missing = ["--target", str(target["target"]), "--out", str(tmp_path / "x.json"), "--data", str(tmp_path / "no.npz")]
    assert ranking_main(missing) == 1 and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("spec_type", ["draft-simple", "draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark"])
def test_cut_vocabulary_is_lossless_and_drafts_only_kept_tokens(target, spec_type):
    plain = LLM(target["target"]).generate(PROMPTS, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))
    expected = [o.token_ids for o in plain]
    outs, uncut_drafts, _ = run(target, spec_type)
    assert outs == expected and not set(uncut_drafts) <= kept_set(target)      # the cut has drafts to remove
    for n_parallel in (1, 3):
        outs, drafts, _ = run(target, spec_type, n_parallel, spec_draft_vocab=KEPT)
        assert outs == expected and drafts and set(drafts) <= kept_set(target)


@pytest.mark.parametrize("spec_type", ["draft-mtp", "draft-dspark"])
def test_sampled_q_lives_on_the_kept_tokens(target, spec_type):
    """At T > 0 a sampled draft's q is a distribution over the kept tokens only, in target ids."""
    _, drafts, support = run(target, spec_type, 2, 0.9, spec_draft_vocab=KEPT)
    assert support and set(support) <= kept_set(target) and set(drafts) <= kept_set(target)


@pytest.mark.skipif(kernels.requested() == "torch", reason="SPECSERVE_KERNELS=torch: no one-call chain")
@pytest.mark.parametrize("spec_type", ["draft-simple", "draft-mtp"])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_one_call_chain_drafts_what_the_step_loop_drafts(target, monkeypatch, spec_type, temperature):
    proposer = DraftSimple if spec_type == "draft-simple" else HiddenChainProposer
    results = []
    for one_call in (True, False):
        monkeypatch.setattr(proposer, "_one_call", lambda self: one_call)
        results.append(run(target, spec_type, 3, temperature, spec_draft_vocab=KEPT))
    assert results[0] == results[1]
    outs, drafts, support = results[0]
    assert set(drafts) <= kept_set(target)
    if temperature > 0:        # a sampled draft's q is a distribution over the kept tokens only
        assert support and set(support) <= kept_set(target)


@pytest.mark.parametrize("options,message", [
    ({"spec_draft_vocab": VOCAB + 1}, "between 1 and the 320 tokens"),
    ({"spec_draft_vocab": -1}, "must be >= 0"),
    ({"spec_draft_token_ranking": "r.json"}, "needs --spec-draft-vocab N"),
    ({"spec_draft_vocab": 8, "spec_draft_token_ranking": "missing.json"}, "no such file"),
    ({"spec_draft_vocab": 8, "spec_draft_token_ranking": "bad.json"}, "not a readable token ranking"),
    ({"spec_draft_vocab": 8, "spec_draft_token_ranking": "other.json"}, "not a token ranking"),
    ({"spec_draft_vocab": 8, "spec_draft_token_ranking": "small.json"}, "the target has 320"),
    ({"spec_draft_vocab": 8, "spec_draft_token_ranking": "dup.json"}, "must be distinct ids"),
])
def test_bad_rankings_and_options_are_named(tmp_path, target, monkeypatch, options, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"token_ids": [1, 2]}))
    write_ranking(tmp_path / "small.json", COUNTS[:100], "short")
    write_ranking(tmp_path / "dup.json", COUNTS, "dup")
    dup = json.loads((tmp_path / "dup.json").read_text())
    dup["token_ids"][1] = dup["token_ids"][0]
    (tmp_path / "dup.json").write_text(json.dumps(dup))
    with pytest.raises(OptionError, match=message):
        LLM(target["target"], spec_type="draft-mtp", **options)


def test_a_missing_ranking_is_named(tmp_path):
    bare = write_model(tmp_path / "bare", "qwen3", seed=1, std=0.25, tokenizer=False)
    add_mtp(bare, "deepseek", std=0.3)
    with pytest.raises(OptionError, match="no token_ranking.json in the draft or target folder"):
        LLM(bare, spec_type="draft-mtp", spec_draft_vocab=8)


def test_eagle3_cut_that_keeps_none_of_its_draft_vocabulary_is_named(tmp_path, target):
    """EAGLE-3 keeps those of its own draft-vocabulary rows whose tokens are ranked in: with none, an error."""
    from safetensors.torch import load_file
    draft = write_eagle3(tmp_path / "e200", target["target"], "specforge", draft_vocab=200)
    d2t = next(v for k, v in load_file(str(draft / "model.safetensors")).items() if k.endswith("d2t"))
    own = set((np.arange(len(d2t)) + d2t.numpy()).tolist())
    outside = [i for i in range(VOCAB) if i not in own]
    ranking = {"format": "specserve-token-ranking", "vocab_size": VOCAB, "token_ids": outside + sorted(own)}
    (tmp_path / "r.json").write_text(json.dumps(ranking))
    options = {"spec_draft_token_ranking": str(tmp_path / "r.json")}
    with pytest.raises(OptionError, match="none of the draft-eagle3 drafter's 200 draft-vocabulary tokens"):
        LLM(target["target"], spec_type="draft-eagle3", draft_model=draft, spec_draft_vocab=len(outside), **options)
    llm = LLM(target["target"], spec_type="draft-eagle3", draft_model=draft, spec_draft_vocab=len(outside) + 1,
              **options)
    assert len(llm.engine.driver.proposers[0].id_map) == 1
