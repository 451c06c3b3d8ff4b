"""At temperature > 0, draft-dspark (Markov chain sampled, q passed to rejection sampling) and
draft-dflash (greedy one-hot drafts, or sampled with q) give exactly the target's distribution:
the empirical distribution of generated token pairs matches the one enumerated from the model."""
import json

import pytest
import torch

from support.block_drafters import random_block_drafter
from support.models import write_model
from specserve import LLM
from specserve.models.block_drafter import save_block_drafter
from support.distribution import VOCAB, assert_target_pair_distribution


@pytest.fixture(scope="module")
def small_vocab(tmp_path_factory):
    root = tmp_path_factory.mktemp("v8-block")
    target = write_model(root / "target", "qwen3", seed=11, std=0.6, tokenizer=False, vocab_size=VOCAB,
                         num_hidden_layers=3)
    drafts = {}
    for name, rank in (("dspark", 4), ("dflash", 0)):
        model = random_block_drafter(target, markov_rank=rank, block_size=3, std=0.3, mask_token_id=VOCAB - 1,
                                     seed=7, confidence=rank > 0)
        drafts[name] = save_block_drafter(model, root / name, torch.float32)
    return target, drafts


@pytest.mark.parametrize("spec_type,mode", [("draft-dspark", "auto"), ("draft-dflash", "auto"),
                                            ("draft-dflash", "sample"), ("draft-dspark", "schedule")])
def test_block_drafts_keep_the_target_distribution(small_vocab, tmp_path, spec_type, mode):
    target, drafts = small_vocab
    extra = {}
    if mode == "schedule":
        # each row costs 2 % more: drafts are verified only where their survival is high enough,
        # a decision that depends on the confidences of the drafts sampled so far
        table = tmp_path / "cost.json"
        table.write_text(json.dumps({"rows": list(range(1, 65)), "seconds": [0.01 * (1 + 0.02 * r)
                                                                             for r in range(1, 65)]}))
        extra = dict(spec_dspark_schedule=True, spec_dspark_cost_table=str(table))
    llm = LLM(target, draft_model=drafts[spec_type.split("-")[1]], spec_type=spec_type, n_parallel=16, ctx_size=64,
              spec_draft_n_max=3, spec_dflash_sample="auto" if mode == "schedule" else mode, **extra)
    proposer = llm.engine.driver.proposers[0]
    seen_q = []
    original = proposer.draft

    def spy(requests):
        out = original(requests)
        seen_q.extend(d.q_probs is not None for d in out.values())
        return out

    proposer.draft = spy
    # 4 tokens: after the first, a 2-token block is drafted, so token 3's draft is conditioned on
    # the SAMPLED token 2 (the Markov chain under sampling); tokens 2 and 3 are checked jointly
    stats = assert_target_pair_distribution(llm, spec_type, max_tokens=4)
    if mode == "schedule":      # the scheduler cut some blocks (the cap is 2 drafts after the first token)
        assert stats["n_gen_tokens"] < 2 * stats["n_gen_drafts"]
    else:
        assert len(stats["n_acc_per_pos"]) == 2        # second drafts were accepted too
    # DSpark and sampling DFlash hand q to rejection sampling; greedy DFlash is verified one-hot
    assert seen_q and all(seen_q) == (spec_type == "draft-dspark" or mode == "sample")
    assert any(seen_q) == all(seen_q)
