"""Block-drafter training: anchors and masks, losses, a short run that resumes exactly from its
checkpoint, the exported drafter serving losslessly, and the convert-draft / train-draft commands."""
import json
import logging
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from support.block_drafters import write_block_drafter
from support.models import write_model
from specserve import LLM, SamplingParams
from specserve.cli import main
from specserve.models.block_drafter_format import read_block_drafter
from specserve.train.block_anchors import make_block_batch, sample_anchors
from specserve.train.block_losses import LOSS_WEIGHTS, acceptance_estimates, block_losses
from specserve.train.block_trainer import BlockTrainConfig, BlockTrainer

pytestmark = pytest.mark.train


@dataclass
class Sample:
    tokens: np.ndarray
    n_prompt: int


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("t4"), "qwen3", seed=1, std=0.25, num_hidden_layers=4)


def _regen(target_dir):
    """The target's own greedy continuations of random prompts (what regen_data makes)."""
    rng = np.random.default_rng(0)
    prompts = [rng.integers(4, 300, size=int(rng.integers(4, 12))).tolist() for _ in range(24)]
    outs = LLM(target_dir, n_parallel=8).generate(prompts, SamplingParams(temperature=0, max_tokens=40,
                                                                          ignore_eos=True))
    return [Sample(np.array(p + o.token_ids, dtype=np.int64), len(p)) for p, o in zip(prompts, outs)]


@pytest.fixture(scope="module")
def regen_samples(target_dir):
    return _regen(target_dir)


@pytest.fixture(scope="module")
def llama_target(tmp_path_factory):
    target = write_model(tmp_path_factory.mktemp("llama4"), "llama", seed=2, std=0.25, num_hidden_layers=4)
    return target, _regen(target)


def test_anchors_and_labels():
    gen = torch.Generator().manual_seed(0)
    anchors, keep = sample_anchors(5, 12, 10, gen)
    kept = anchors[keep]
    assert keep.sum() == 6 and kept.tolist() == sorted(set(kept.tolist())) and kept.min() >= 5 and kept.max() <= 10
    seq = torch.arange(100, 112)
    batch = make_block_batch([(seq, 5), (torch.arange(200, 208), 6)], 4, 4, 4, 1, gen)
    assert batch.block_tokens[0, :, 1:].eq(1).all()
    for n in range(4):
        a = int(batch.anchors[0, n])
        assert batch.block_tokens[0, n, 0] == 100 + a
        for k in range(4):
            assert batch.valid[0, n, k] == (a + 1 + k < 12)
            if batch.valid[0, n, k]:
                assert batch.labels[0, n, k] == 100 + a + 1 + k
    # the short sequence has one anchor (position 6): one valid label, three dummy blocks
    assert batch.keep[1].tolist() == [True, False, False, False] and batch.valid[1].sum() == 1


def test_losses_and_estimates():
    logits = torch.tensor([[5.0, 0, 0], [0, 5.0, 0]])
    target = torch.tensor([[5.0, 0, 0], [5.0, 0, 0]])
    labels, positions = torch.tensor([0, 0]), torch.tensor([0, 1])
    total, metrics, accept, match = block_losses(logits, target, labels, positions, torch.zeros(2),
                                                 LOSS_WEIGHTS["draft-dspark"], 4.0)
    assert accept[0] == 1 and accept[1] < 0.05 and match.tolist() == [1, 0]
    assert metrics["loss_l1"] > 0 and "loss_conf" in metrics
    est = acceptance_estimates(torch.tensor([[[1.0, 0.5]]]), torch.tensor([[[1.0, 1.0]]]),
                               torch.tensor([[[True, True]]]))
    assert est["tau_prob"] == pytest.approx(2.5) and est["tau_greedy"] == pytest.approx(3.0)


def _config(target_dir, out, method, steps=120, num_layers=1, **kw):
    return BlockTrainConfig(method=method, target_dir=str(target_dir), out_dir=str(out), steps=steps, batch_size=4,
                            max_len=64, anchors=8, block_size=4, num_layers=num_layers, markov_rank=16, lr=3e-3,
                            checkpoint_every=40, eval_samples=4, **kw)


@pytest.mark.parametrize("method", ["dflash", "dspark"])
def test_training_learns_resumes_and_serves(tmp_path, target_dir, regen_samples, method):
    full = BlockTrainer(_config(target_dir, tmp_path / "full", method), regen_samples, progress=False)
    final = full.train()
    log = [json.loads(line) for line in (tmp_path / "full" / "train_log.jsonl").read_text().splitlines()]
    losses = [r["loss_ce"] for r in log if "loss" in r]
    assert np.mean(losses[-3:]) < losses[0] - 0.5           # it fits the (small) training set
    assert set(final) >= {"tau_prob", "tau_greedy", "accept_rate@0"}
    # interrupted after 50 steps, then resumed: the same weights as the uninterrupted run
    part = BlockTrainer(_config(target_dir, tmp_path / "part", method), regen_samples, progress=False)
    part.train(stop_after=50)
    assert part.step == 50 and part.checkpoint_path.is_file()
    resumed = BlockTrainer(_config(target_dir, tmp_path / "part", method), regen_samples, progress=False)
    resumed.train()
    assert resumed.step == 120
    for (name, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), name
    # the exported folder: anchor-first DeepSpec format with every key explicit, tokenizer included
    config = read_block_drafter(tmp_path / "full")
    assert config.layout == "anchor-first" and config.raw["sample_from_anchor"] is True
    assert (config.markov_rank > 0) == (method == "dspark") and config.has_confidence_head == (method == "dspark")
    assert (tmp_path / "full" / "tokenizer.json").is_file() and "tau" in (tmp_path / "full" / "README.md").read_text()
    prompts = [s.tokens[:s.n_prompt].tolist() for s in full.train_set[:6]]   # continuations it has learnt
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    reference = [o.token_ids for o in LLM(target_dir).generate(prompts, params)]
    llm = LLM(target_dir, draft_model=tmp_path / "full", spec_type=f"draft-{method}", n_parallel=3,
              spec_draft_n_max=4)
    assert [o.token_ids for o in llm.generate(prompts, params)] == reference
    stats = llm.engine.driver.stats_dict()[f"draft-{method}"]
    assert stats["n_acc_tokens"] > 0


def test_train_draft_and_convert_draft_commands(tmp_path, target_dir, regen_samples, monkeypatch, capsys):
    from specserve.train import block_trainer
    monkeypatch.setattr(block_trainer.BlockTrainer, "_load_samples", lambda self, s: regen_samples)
    out = tmp_path / "cli-dspark"
    rc = main(["train-draft", "--method", "draft-dspark", "--target", str(target_dir), "--out", str(out), "--steps", "4",
               "--batch-size", "2", "--max-len", "48", "--anchors", "4", "--block-size", "4", "--layers", "1",
               "--markov-rank", "8", "--checkpoint-every", "2", "--no-progress", "--data", "unused",
               "--tap-layers", "0,3"])
    assert rc == 0 and "tau_prob" in capsys.readouterr().out
    assert "specserve train-draft --method draft-dspark" in (out / "README.md").read_text()
    # --tap-layers: the target's last layer among them, and the drafter serves it losslessly
    assert read_block_drafter(out).target_layer_ids == [0, 3]
    prompts = [s.tokens[:s.n_prompt].tolist() for s in regen_samples[:2]]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    served = LLM(target_dir, draft_model=out, spec_type="draft-dspark", spec_draft_n_max=4).generate(prompts, params)
    assert [o.token_ids for o in served] == [o.token_ids for o in LLM(target_dir).generate(prompts, params)]
    # a SpecForge legacy checkpoint and a z-lab one become self-contained folders that load the same way
    for fmt, kwargs in (("specforge-legacy", dict(markov_rank=8, confidence=True)), ("zlab", {})):
        src = write_block_drafter(tmp_path / fmt, target_dir, fmt, block_size=4, **kwargs)
        dst = tmp_path / f"{fmt}-converted"
        assert main(["convert-draft", str(src), "--target-model-dir", str(target_dir), "--out", str(dst)]) == 0
        before, after = read_block_drafter(src), read_block_drafter(dst)
        cfg = json.loads((dst / "config.json").read_text())
        assert cfg["sample_from_anchor"] == (before.layout == "anchor-first") and cfg["converted_from"]
        assert (after.layout, after.block_size, after.target_layer_ids, after.markov_rank) == \
               (before.layout, before.block_size, before.target_layer_ids, before.markov_rank)
        assert after.num_target_layers == 4 and (dst / "tokenizer.json").is_file()
        prompts = [s.tokens[:s.n_prompt].tolist() for s in regen_samples[:3]]
        params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
        spec_type = "draft-dspark" if kwargs else "draft-dflash"
        a = LLM(target_dir, draft_model=src, spec_type=spec_type, spec_draft_n_max=4).generate(prompts, params)
        b = LLM(target_dir, draft_model=dst, spec_type=spec_type, spec_draft_n_max=4).generate(prompts, params)
        assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert main(["convert-draft", str(tmp_path / "zlab"), "--target-model-dir", str(tmp_path / "nope"),
                 "--out", str(tmp_path / "x")]) == 1
    assert "model directory not found" in capsys.readouterr().err


@pytest.mark.parametrize("target_family,draft_arch", [("llama", "llama"), ("qwen3", "qwen2")])
def test_train_draft_with_other_backbones(tmp_path, target_dir, regen_samples, llama_target, monkeypatch, caplog,
                                          target_family, draft_arch):
    """`--draft-arch`: the draft layers' family. init-from-target copies the target's layers only when
    they are of the same family (a llama draft for a llama target), otherwise it says so and keeps
    the random initialisation; either way the folder states its backbone, loads and serves."""
    from specserve.train import block_trainer
    caplog.set_level(logging.INFO, logger="specserve.train")
    target, samples = llama_target if target_family == "llama" else (target_dir, regen_samples)
    monkeypatch.setattr(block_trainer.BlockTrainer, "_load_samples", lambda self, s: samples)
    # right after initialisation: same family -> the draft layers are copies of the target's last ones
    trainer = BlockTrainer(_config(target, tmp_path / "init", "dflash", num_layers=2, draft_arch=draft_arch),
                           samples, progress=False)
    copied = target_family == draft_arch
    draft_layer, target_layer = trainer.model.layers[1].state_dict(), trainer.target.model.layers[-1].state_dict()
    if copied:
        assert draft_layer.keys() == target_layer.keys()
        assert all(torch.equal(draft_layer[k], target_layer[k]) for k in draft_layer)
    else:
        assert not any(torch.equal(draft_layer[k], target_layer[k]) for k in ("self_attn.q_proj.weight",
                                                                               "mlp.down_proj.weight"))
    skipped = [r.getMessage() for r in caplog.records if "init from target skipped" in r.getMessage()]
    assert skipped == ([] if copied else [f"init from target skipped (a {draft_arch} draft for a {target_family} "
                                          f"target): the draft starts from a random initialisation"])
    out = tmp_path / f"{draft_arch}-draft"
    assert main(["train-draft", "--method", "dflash", "--draft-arch", draft_arch, "--target", str(target),
                 "--out", str(out), "--steps", "60", "--lr", "3e-3", "--batch-size", "4", "--max-len", "64",
                 "--anchors", "8", "--block-size", "4", "--layers", "1", "--checkpoint-every", "30",
                 "--no-progress", "--data", "unused"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["model_type"], cfg["attention_bias"]) == (draft_arch, draft_arch == "qwen2")
    assert f"{draft_arch}-style" in (out / "README.md").read_text()
    prompts = [s.tokens[:s.n_prompt].tolist() for s in samples[:6]]
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    reference = [o.token_ids for o in LLM(target).generate(prompts, params)]
    llm = LLM(target, draft_model=out, spec_type="draft-dflash", n_parallel=3, spec_draft_n_max=4)
    assert llm.engine.driver.proposers[0].drafter.config.backbone.family == draft_arch
    assert [o.token_ids for o in llm.generate(prompts, params)] == reference
    assert llm.engine.driver.stats_dict()["draft-dflash"]["n_acc_tokens"] > 0
