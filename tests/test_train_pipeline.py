"""Fast checks of the training pipeline code on tiny inputs (no full training run)."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from specserve.models.transformer import CausalLM
from specserve.train import corpus
from specserve.train.pretrain import PackedBatches, TrainConfig, build_model, evaluate, lr_at, train
from specserve.train.tokenizer_train import save_tokenizer, train_tokenizer

pytestmark = pytest.mark.train

TINY_ARCH = {
    "model_type": "qwen3", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
    "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
}
TINY_TEXTS = ["def f(x):\n    return x + 1\n", "class A:\n    pass\n", "caf\u00e9 = '\u65e5\u672c'\n"] * 20


@pytest.fixture()
def fake_stdlib(tmp_path):
    files = {
        "os.py": "import sys\n",
        "json/__init__.py": "def dumps(obj):\n    return str(obj)\n",
        "test/test_x.py": "def test_x():\n    assert True\n",
        "site-packages/pkg/mod.py": "EXCLUDED = True\n",
        "notes.txt": "not python\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    (tmp_path / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\nname = '\xe9t\xe9'\n")
    return tmp_path


def test_list_and_split(fake_stdlib):
    files = corpus.list_files(fake_stdlib)
    assert files == ["json/__init__.py", "latin.py", "os.py", "test/test_x.py"]
    train, held = corpus.split_files(files)
    assert sorted(train + held) == files and set(train).isdisjoint(held)
    for rel in files:
        expected = int(hashlib.sha1(rel.encode()).hexdigest(), 16) % 20 == 0
        assert corpus.is_held_out(rel) == expected == (rel in held)
    # About 1 in 20 of many synthetic paths is held out.
    share = sum(corpus.is_held_out(f"pkg/mod_{i}.py") for i in range(4000)) / 4000
    assert 0.04 < share < 0.06


def test_read_source_honours_coding_cookie(fake_stdlib):
    assert "name = '\u00e9t\u00e9'" in corpus.read_source(fake_stdlib / "latin.py")


def test_tokenizer_trainer_round_trip(tmp_path):
    tok = train_tokenizer(TINY_TEXTS, vocab_size=300)
    assert 258 < tok.get_vocab_size() <= 300          # the tiny corpus runs out of merges
    assert tok.token_to_id("<|endoftext|>") == 0 and tok.token_to_id("<|mask|>") == 1
    for text in TINY_TEXTS[:3] + ["unseen \U0001f40d text\r\n\t", ""]:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == text
    # Training is deterministic.
    assert train_tokenizer(TINY_TEXTS, vocab_size=300).to_str() == tok.to_str()
    save_tokenizer(tok, tmp_path, 64)
    import transformers
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert hf.eos_token_id == 0 and hf.mask_token_id == 1 and hf.model_max_length == 64
    assert hf.decode(hf("x = 'caf\u00e9'\n")["input_ids"]) == "x = 'caf\u00e9'\n"


def test_encode_files_joins_with_eos_and_caches(fake_stdlib, tmp_path):
    tok = train_tokenizer(TINY_TEXTS, vocab_size=300)
    files = corpus.list_files(fake_stdlib)
    cache = tmp_path / "cache"
    ids = corpus.encode_files(tok, fake_stdlib, files, cache)
    assert ids.dtype == np.uint16 and int((ids == 0).sum()) == len(files) and ids[-1] == 0
    assert 1 not in ids
    docs = tok.decode(ids.tolist(), skip_special_tokens=False).split("<|endoftext|>")
    assert docs[:-1] == [corpus.read_source(fake_stdlib / f) for f in files]
    assert len(list(cache.glob("tokens-*.npy"))) == 1
    assert np.array_equal(corpus.encode_files(tok, fake_stdlib, files, cache), ids)


def test_packed_batches_are_deterministic():
    tokens = np.arange(1000, dtype=np.uint16)
    a = PackedBatches(tokens, seq_len=16, batch_size=4, seed=7)
    b = PackedBatches(tokens, seq_len=16, batch_size=4, seed=7)
    for step in (0, 5, 40, 3):                              # also across epochs and out of order
        xa, ya = a.batch(step)
        xb, yb = b.batch(step)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert torch.equal(xa[:, 1:], ya[:, :-1]) and torch.equal(ya - xa, torch.ones_like(xa))


def test_lr_schedule():
    cfg = TrainConfig(steps=100, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(cfg, 0) == pytest.approx(1e-4) and lr_at(cfg, 9) == pytest.approx(1e-3)
    assert lr_at(cfg, 99) > lr_at(cfg, 100) == pytest.approx(1e-4)


class _Stop(Exception):
    pass


def _tiny_run(work, resume=False, stop_at=None):
    model = build_model(TINY_ARCH, seed=3)
    cfg = TrainConfig(steps=8, seq_len=16, batch_size=2, lr=3e-3, warmup_steps=2, compile=False,
                      log_every=1, eval_every=4, eval_windows=2, checkpoint_minutes=0.0)
    data = (np.arange(3000) % 37 + 2).astype(np.uint16)        # a learnable periodic stream

    def log(msg):
        if stop_at is not None and msg.startswith(f"step {stop_at}/"):
            raise _Stop                                        # an interruption mid-run

    stats = train(model, cfg, data[:2500], data[2500:], work, resume=resume, log=log)
    return model, cfg, stats, data


def test_training_reduces_loss_and_resume_matches(tmp_path):
    full, cfg, stats, data = _tiny_run(tmp_path / "full")
    assert stats["steps"] == 8 and stats["tokens_seen"] == 8 * cfg.tokens_per_step
    with pytest.raises(_Stop):
        _tiny_run(tmp_path / "split", stop_at=5)            # checkpoint of step 4 survives
    resumed, _, stats, _ = _tiny_run(tmp_path / "split", resume=True)
    assert stats["steps"] == 8
    for (name, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name
    before = evaluate(build_model(TINY_ARCH, seed=3), data[2500:], 16)["loss"]
    after = evaluate(full, data[2500:], 16)["loss"]
    assert after < before - 0.3


def test_build_model_is_seeded():
    a, b = build_model(TINY_ARCH, seed=5), build_model(TINY_ARCH, seed=5)
    assert isinstance(a, CausalLM)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
