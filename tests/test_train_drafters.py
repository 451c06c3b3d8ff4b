"""Drafter training: the training-time-test forward computes exactly what the served head computes
for chained drafts, and each trainer produces a folder that loads and drafts through the engine."""
import json
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from support.model_drafters import random_eagle3
from support.models import write_model
from specserve import LLM, SamplingParams
from specserve.models.mtp_format import load_mtp_head
from specserve.models.rope import RotaryEmbedding
from specserve.models.step_batch import StepBatch
from specserve.models.transformer import CausalLM, init_weights
from specserve.train import train_draft_simple, train_eagle3, train_mtp
from specserve.train.draft_loop import LoopSettings
from specserve.train.draft_windows import WindowSampler
from specserve.train.drafter_common import DrafterJob, soft_cross_entropy
from specserve.train.ttt import UnrollState, _shift, eagle3_step, mtp_step

pytestmark = pytest.mark.train


@dataclass
class Sample:
    tokens: np.ndarray
    n_prompt: int


@pytest.fixture(scope="module")
def target4(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("t4"), "qwen3", seed=1, std=0.25, num_hidden_layers=4)


def _served_chain(head, tokens, hidden0, t, depth):
    """Served logits of chained steps 0..depth-1 after the prefix ending at row t."""
    cache = head.new_cache(1, 64)
    rows = tokens[1:t + 2]
    logits, hidden = head.forward_step(StepBatch.build([(0, rows, 0)], [t]), hidden0[:t + 1], cache)
    out = [logits[0]]
    for j in range(1, depth):
        logits, hidden = head.forward_step(StepBatch.build([(0, tokens[t + 1 + j:t + 2 + j], t + j)], [0]),
                                           hidden, cache)
        out.append(logits[0])
    return out


def _trained_chain(step, head, embedded, hidden0, depth):
    length = embedded.shape[1] - 1
    rope = RotaryEmbedding(head.config.head_dim, head.config.rope_theta, None, 512, 64)
    state, hidden, out = UnrollState(), hidden0[:, :length], []
    for j in range(depth):
        positions = torch.arange(length) + j
        cos, sin = rope.gather(positions)
        h = step(head, _shift(embedded, 1 + j, length), hidden, positions, cos, sin, state)
        normed, hidden = head.normed_and_next(h)
        out.append(normed @ head.lm_head_weight.T)
    return out


@pytest.mark.parametrize("kind", ["eagle3", "eagle3-norm-output", "mtp"])
def test_training_time_test_equals_served_chain(target4, kind):
    target = CausalLM.from_pretrained(target4)
    tokens = torch.randint(0, 320, (20,), generator=torch.Generator().manual_seed(0))
    final, taps = target.forward_full(tokens[None], taps=(1, 2, 3))
    if kind.startswith("eagle3"):
        head, _ = random_eagle3(target4, std=0.2, norm_output=kind.endswith("output"))
        head.shared_embedding = target.model.embed_tokens.weight.detach()
        hidden0 = head.project([taps[i] for i in (1, 2, 3)])[0]
        step = eagle3_step
    else:
        head = train_mtp.build_head(target, seed=3)
        init_weights(head.block, std=0.2, seed=4)        # not just a copy of the target's layer
        hidden0 = final[0]
        step = mtp_step
    head.eval()
    with torch.no_grad():
        trained = _trained_chain(step, head, target.embed(tokens)[None], hidden0[None], depth=3)
        for t in (0, 5, 13):
            served = _served_chain(head, tokens, hidden0, t, depth=3)
            for j in range(3):
                assert torch.allclose(trained[j][0, t], served[j], atol=1e-4), (t, j)


def test_windows_train_only_on_regenerated_tokens():
    samples = [Sample(np.arange(100, 130), 10), Sample(np.arange(200, 210), 4)]
    sampler = WindowSampler(samples, seq_len=16, batch_size=4, seed=0)
    for _ in range(5):
        batch = sampler.next_batch()
        for row, mask in zip(batch.tokens, batch.label_mask):
            base = 100 if row[0] >= 100 and row[0] < 200 else 200
            n_prompt, n = (10, 30) if base == 100 else (4, 10)
            for p in range(len(row)):
                pos = int(row[p]) - base if (row[p] != 0 or p == 0) else None
                if pos is not None and mask[p]:
                    assert n_prompt <= pos + 1 < n
            assert mask.any()


@pytest.fixture(scope="module")
def regen_samples(target4):
    rng = np.random.default_rng(0)
    prompts = [rng.integers(5, 300, size=int(rng.integers(4, 12))).tolist() for _ in range(40)]
    outs = LLM(target4, n_parallel=8).generate(prompts, SamplingParams(temperature=0, max_tokens=32, ignore_eos=True))
    return [Sample(np.array(p + o.token_ids), len(p)) for p, o in zip(prompts, outs)]


@pytest.mark.parametrize("method,spec_type,module,options", [
    ("draft-simple", "draft-simple", train_draft_simple, {"draft_layers": 1, "tv_weight": 1.0}),
    ("eagle3", "draft-eagle3", train_eagle3, {"ttt_depth": 2, "draft_vocab": 200}),
    ("mtp", "draft-mtp", train_mtp, {"ttt_depth": 2, "tv_weight": 2.0}),
])
def test_trainer_writes_a_servable_drafter(tmp_path, target4, regen_samples, method, spec_type, module, options):
    out = tmp_path / method
    job = DrafterJob(target4, out, regen_samples[:34], regen_samples[34:],
                     LoopSettings(steps=40, lr=3e-3, warmup=5, log_every=20), batch_size=4, seq_len=48,
                     options=options, command=f"specserve train-draft --method {method}", data_path="test",
                     log=lambda m: None)
    summary = module.train(job)
    assert summary["steps"] == 40 and summary["acceptance"]["drafted"] > 0
    card = (out / "README.md").read_text()
    assert f"| {summary['acceptance']['tau']:.2f} |" in card
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    prompts = [list(s.tokens[:s.n_prompt]) for s in regen_samples[34:]]
    reference = [o.token_ids for o in LLM(target4).generate(prompts, params)]
    llm = LLM(target4, spec_type=spec_type, draft_model=out, n_parallel=3)
    assert [o.token_ids for o in llm.generate(prompts, params)] == reference
    if method == "mtp":
        assert load_mtp_head(CausalLM.from_pretrained(target4), out).hidden_first is False


def test_tv_weight_adds_the_total_variation_distance():
    """--tv-weight W: the loss is the soft cross-entropy plus W x 1/2 sum |p - q| per row, whose complement is the
    acceptance of a draft sampled from q at T=1."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 30, generator=gen)
    p = torch.softmax(torch.randn(6, 30, generator=gen), -1)
    q = torch.softmax(logits, -1)
    ce = -(p * q.log()).sum(-1).mean()
    tv = 0.5 * (p - q).abs().sum(-1).mean()
    assert torch.allclose(soft_cross_entropy(logits, p), ce, atol=1e-6)
    assert torch.allclose(soft_cross_entropy(logits, p, tv_weight=2.0), ce + 2 * tv, atol=1e-6)
    assert torch.allclose(1 - tv, torch.minimum(p, q).sum(-1).mean(), atol=1e-6)


def test_schedule_follows_steps_or_the_time_budget():
    from specserve.train.draft_loop import lr_at
    s = LoopSettings(steps=100, lr=1.0, warmup=10)
    assert lr_at(s, 0) == pytest.approx(0.1) and lr_at(s, 10) == pytest.approx(1.0)
    assert lr_at(s, 99) == pytest.approx(0.1, abs=1e-3)
    timed = LoopSettings(steps=100, lr=1.0, warmup=10, max_minutes=1.0)
    assert lr_at(timed, 20, elapsed_s=0.0) == pytest.approx(lr_at(s, 20))
    assert lr_at(timed, 20, elapsed_s=60.0) == pytest.approx(0.1)       # the time budget is spent


def test_train_draft_command(tiny_qwen3, tmp_path, capsys):
    from specserve.cli import main
    from specserve.train.regen_data import build_regen_dataset
    data = tmp_path / "regen.npz"
    build_regen_dataset(tiny_qwen3, data, n_parallel=4, progress=False, n_samples=24, new_tokens=24,
                        prompt_tokens_min=8, prompt_tokens_max=24)
    out = tmp_path / "eagle3"
    assert main(["train-draft", "--method", "eagle3", "--target", str(tiny_qwen3), "--data", str(data),
                 "--out", str(out), "--steps", "8", "--batch-size", "2", "--seq-len", "48", "--eval-samples", "4",
                 "--eagle3-layers", "0,1,1", "--draft-vocab", "160"]) == 0
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["steps"] == 8 and summary["taps"] == [0, 1, 1]
    assert summary["acceptance"]["temperature"] == 0 and summary["acceptance_t1"]["temperature"] == 1
    assert json.loads((out / "config.json").read_text())["draft_vocab_size"] == 160
    card = (out / "README.md").read_text()
    assert "specserve train-draft" in card and "| T=0 |" in card and "| T=1 (drafts sampled" in card
    assert main(["train-draft", "--method", "mtp", "--target", str(tiny_qwen3), "--data", str(tmp_path / "none.npz"),
                 "--out", str(tmp_path / "x")]) == 1
    assert "data file not found" in capsys.readouterr().err
