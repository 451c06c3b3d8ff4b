"""DFlash / DSpark draft checkpoints: every format loads, the cached serving forward equals the
training-mask forward, the Markov chain matches its teacher-forced form, and bad pairs fail clearly."""
import itertools
import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from specserve import kernels

from support.block_drafters import DRAFT_ARCHS, write_block_drafter
from support.models import write_model
from specserve.errors import IncompatibleDraftError, ModelLoadError
from specserve.models import block_drafter as block_drafter_module
from specserve.models.block_drafter import load_block_drafter
from specserve.models.block_drafter_format import (ANCHOR_FIRST, BONUS_ANCHOR, build_target_layer_ids,
                                                   read_block_drafter)
from specserve.models.transformer import CausalLM
from specserve.speculative.markov_chain import draft_uniforms, run_block_chain, teacher_forced_logits

DSPARK = dict(markov_rank=8, confidence=True)


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("target"), "qwen3", seed=3, std=0.2, num_hidden_layers=5)


@pytest.fixture(scope="module")
def target(target_dir):
    return CausalLM.from_pretrained(target_dir)


def test_build_target_layer_ids():
    assert build_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    assert build_target_layer_ids(40, 5) == [1, 10, 19, 28, 37]
    assert build_target_layer_ids(36, 1) == [18]
    assert build_target_layer_ids(6, 3) == [1, 2, 3]
    assert build_target_layer_ids(4, 3) == [0, 1, 2]       # too shallow for the paper's rule


@pytest.mark.parametrize("fmt,variant,kwargs,layout,rank", [
    ("zlab", "", {}, BONUS_ANCHOR, 0),
    ("zlab", "nested", {}, BONUS_ANCHOR, 0),
    ("zlab", "model-prefix", {}, BONUS_ANCHOR, 0),
    ("deepspec", "", {}, ANCHOR_FIRST, 0),                   # DeepSpec's DFlash release: markov_rank 0
    ("deepspec", "", DSPARK, ANCHOR_FIRST, 8),
    ("specforge", "", DSPARK, ANCHOR_FIRST, 8),
    ("specforge", "nested", DSPARK, ANCHOR_FIRST, 8),
    ("specforge-legacy", "", DSPARK, ANCHOR_FIRST, 8),      # heads under logit_head.
    ("specserve", "", dict(markov_rank=8, confidence=True, layout=BONUS_ANCHOR), BONUS_ANCHOR, 8),
])
def test_every_format_loads(tmp_path, target_dir, target, fmt, variant, kwargs, layout, rank):
    d = write_block_drafter(tmp_path / "d", target_dir, fmt, variant=variant, block_size=5, **kwargs)
    drafter = load_block_drafter(d, target)
    config = drafter.config
    assert (config.layout, config.markov_rank, config.block_size) == (layout, rank, 5)
    assert config.max_drafts == (4 if layout == BONUS_ANCHOR else 5)
    assert config.target_layer_ids == build_target_layer_ids(5, 3) and config.mask_token_id == 1
    assert (drafter.confidence_head is not None) == bool(kwargs.get("confidence"))
    # the target's embedding and head are shared, never copied into the draft
    assert drafter.shared.embed.data_ptr() == target.model.embed_tokens.weight.data_ptr()
    assert all("embed" not in k and "lm_head" not in k for k in drafter.state_dict())
    # an explicit option overrides the checkpoint's layout
    other = ANCHOR_FIRST if layout == BONUS_ANCHOR else BONUS_ANCHOR
    assert load_block_drafter(d, target, layout=other).config.layout == other


def _taps(target, tokens, layer_ids):
    with torch.inference_mode():
        _, taps = target.forward_full(torch.tensor([tokens]), taps=layer_ids)
    return torch.cat([taps[i] for i in layer_ids], dim=-1)          # [1, T, m*H]


@pytest.mark.parametrize("draft_arch", DRAFT_ARCHS)
@pytest.mark.parametrize("fmt,kwargs", [("zlab", {}), ("deepspec", DSPARK)])
def test_cached_inference_equals_training_mask_forward(tmp_path, target_dir, target, fmt, kwargs, draft_arch):
    drafter = load_block_drafter(write_block_drafter(tmp_path / "d", target_dir, fmt, block_size=5,
                                                     draft_arch=draft_arch, **kwargs), target)
    assert drafter.config.backbone.family == draft_arch
    tokens = [(7 * i + 3) % 300 + 2 for i in range(24)]
    feats = _taps(target, tokens, drafter.config.target_layer_ids)
    anchors = [3, 4, 11, 17]                        # overlapping blocks
    nb, mask = 5, drafter.config.mask_token_id
    block = torch.full((1, len(anchors), nb), mask)
    block[0, :, 0] = torch.tensor([tokens[a] for a in anchors])
    with torch.inference_mode():
        trained = drafter.forward_train(feats, torch.tensor([anchors]), block)[0]       # [N, nb, H]
        cache = drafter.new_cache(3, 64)
        for i, a in enumerate(anchors):
            slot = i % 3
            cache.clear(slot)
            cut = a // 2              # the context arrives in two chunks, each followed by a block
            for lo, hi in ((0, cut), (cut, a)):
                pos = torch.arange(lo, hi)
                out = drafter.forward_cached(cache, feats[0, lo:hi], torch.full((hi - lo,), slot), pos, [slot],
                                             torch.tensor([hi]), block[0, i:i + 1])
                cache.lengths[slot] = hi
            assert torch.allclose(out[0], trained[i], atol=2e-5), (a, (out[0] - trained[i]).abs().max())
        # all four anchors as four slots in ONE call: same rows
        cache = drafter.new_cache(4, 64)
        slots_of_rows = torch.cat([torch.full((a,), s) for s, a in enumerate(anchors)])
        pos = torch.cat([torch.arange(a) for a in anchors])
        rows = torch.cat([feats[0, :a] for a in anchors])
        together = drafter.forward_cached(cache, rows, slots_of_rows, pos, [0, 1, 2, 3], torch.tensor(anchors),
                                          block[0])
    assert torch.allclose(together, trained, atol=2e-5)


def _markov_drafter(tmp_path, target_dir, target):
    return load_block_drafter(write_block_drafter(tmp_path / "d", target_dir, "deepspec", block_size=6, **DSPARK),
                              target)


def test_teacher_forced_markov_equals_sequential_chain(tmp_path, target_dir, target):
    drafter = _markov_drafter(tmp_path, target_dir, target)
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(3, 6, 320, generator=gen) * 3
    anchors = torch.tensor([5, 17, 250])
    with torch.inference_mode():
        for temps, noise in ((None, None),
                             (torch.tensor([0.7, 0.0, 1.3]), draft_uniforms([gen, None, gen], [True, False, True], 6))):
            chain = run_block_chain(base, anchors, drafter.markov_head, temps, noise)
            forced, prev = teacher_forced_logits(base, anchors, chain.tokens, drafter.markov_head)
            assert np.array_equal(chain.prev, prev.numpy())
            assert torch.allclose(forced, chain.logits, atol=1e-5)
            # the vectorised multi-slot chain equals a per-slot loop
            for s in range(3):
                one = run_block_chain(base[s:s + 1], anchors[s:s + 1], drafter.markov_head,
                                      None if temps is None else temps[s:s + 1],
                                      None if noise is None else noise[s:s + 1])
                assert torch.equal(one.tokens[0], chain.tokens[s])
                assert torch.allclose(one.logits[0], chain.logits[s], atol=1e-5)
        greedy = run_block_chain(base, anchors, drafter.markov_head)
        assert torch.equal(greedy.tokens, greedy.logits.argmax(-1))          # T=0: argmax of the biased logits


def test_serving_confidence_equals_the_head(tmp_path, target_dir, target):
    """The serving path's confidences (numpy, the Markov feature folded into a per-token table) are the
    confidence head's sigmoid, and follow its weights when they change."""
    drafter = _markov_drafter(tmp_path, target_dir, target)
    gen = torch.Generator().manual_seed(1)
    rows, prev = torch.randn(3, 5, drafter.cfg.hidden_size, generator=gen), torch.randint(0, 320, (3, 5), generator=gen)
    with torch.no_grad():
        for _ in range(2):
            expected = torch.sigmoid(drafter.confidence_logits(rows, prev).float()).numpy()
            np.testing.assert_allclose(drafter.confidence(rows, prev), expected, atol=1e-5)
            drafter.confidence_head.proj.bias.add_(0.5)


@pytest.mark.skipif(kernels.requested() == "torch", reason="SPECSERVE_KERNELS=torch")
@pytest.mark.parametrize("layout,rope,cut", [(ANCHOR_FIRST, None, False), (BONUS_ANCHOR, None, False),
                                             (ANCHOR_FIRST, {"rope_type": "dynamic", "factor": 2.0}, False),
                                             (ANCHOR_FIRST, None, True)])
def test_native_draft_call_equals_the_pytorch_pipeline(tmp_path, target_dir, layout, rope, cut):
    """One native call (layers, lm_head, Markov chain, confidence head) gives the drafts, logits, rows and
    confidences of the PyTorch pipeline forward_cached -> lm_head -> run_block_chain -> confidence, greedy and
    sampled (also with a request's top-k, top-p and min-p), for slots with context; also with the lm_head cut to
    some tokens (--spec-draft-vocab)."""
    d = write_block_drafter(tmp_path / "d", target_dir, "specserve", block_size=6, layout=layout, **DSPARK)
    if rope:                    # RoPE tables that depend on the length: the call is given its rows
        _edit_config(d, rope_scaling=rope, max_position_embeddings=16)
    with torch.no_grad():       # round the Markov head to bfloat16 values: the kernel reads W2 in bfloat16
        native = load_block_drafter(d, CausalLM.from_pretrained(target_dir))
        native.markov_head.markov_w2.weight.copy_(native.markov_head.markov_w2.weight.bfloat16().float())
    kernels.configure(kernels="torch")
    try:
        reference = load_block_drafter(d, CausalLM.from_pretrained(target_dir))
        reference.load_state_dict(native.state_dict())
        kept = torch.randperm(native.cfg.vocab_size, generator=torch.Generator().manual_seed(1))[:150].sort().values
        for drafter in (native, reference) if cut else ():
            drafter.cut_vocab(kept)
        ref_cache = reference.new_cache(3, 64)
    finally:
        kernels.configure(kernels="auto")
    cache = native.new_cache(3, 64)
    assert native.native is not None and reference.native is None
    gen = torch.Generator().manual_seed(0)
    n = native.config.max_drafts
    feats = torch.randn(20, 3 * native.cfg.hidden_size, generator=gen)
    ctx_slots, ctx_pos = torch.tensor([0] * 12 + [2] * 8), torch.cat([torch.arange(12), torch.arange(8)])
    pos0, slots = torch.tensor([12, 8]), [0, 2]
    block = torch.full((2, native.block_rows_for(n)), 1)
    block[:, 0] = anchors = torch.tensor([7, 30])
    with torch.inference_mode():
        sampled = (torch.tensor([0.8, 1.3]), draft_uniforms([gen, gen], [True, True], n))
        filters = [SimpleNamespace(top_k=5, top_p=1.0, min_p=0.0), SimpleNamespace(top_k=0, top_p=0.8, min_p=0.05)]
        for (temps, noise, samplers), markov in itertools.product(
                ((None, None, None), (*sampled, None), (*sampled, filters)), (True, False)):   # DSpark, DFlash
            for c in (cache, ref_cache):
                c.lengths = [0, 0, 0]
            hidden, tokens, logits, q, confidence = native.draft_native(cache, feats, ctx_slots, ctx_pos, slots, pos0,
                                                                        block, n, anchors, markov, temps, noise,
                                                                        confidence=markov, samplers=samplers)
            rows = native.draft_rows(hidden)
            ref_rows = reference.draft_rows(reference.forward_cached(ref_cache, feats, ctx_slots, ctx_pos, slots, pos0,
                                                                     block))
            chain = run_block_chain(reference.logits(ref_rows), anchors, reference.markov_head if markov else None,
                                    temps, noise, reference.vocab_ids, samplers)
            torch.testing.assert_close(rows, ref_rows.float(), atol=2e-4, rtol=1e-4)
            torch.testing.assert_close(logits, chain.logits, atol=2e-3, rtol=1e-4)
            assert torch.equal(tokens, chain.tokens)
            assert logits.shape[-1] == (len(kept) if cut else native.cfg.vocab_size)
            assert not cut or set(tokens.flatten().tolist()) <= set(kept.tolist())
            if noise is not None:           # the distributions drawn from, over the target's vocabulary
                expected = torch.zeros(*chain.q.shape[:2], native.cfg.vocab_size).index_copy_(2, kept, chain.q) \
                    if cut else chain.q
                torch.testing.assert_close(q, expected, atol=1e-6, rtol=1e-4)
                if samplers:                # q is the request's sampler: slot 0 keeps its top 5
                    assert int((q[0] > 0).sum(-1).max()) == 5
            assert (native.rope.rope_type == "dynamic") == bool(rope)
            if markov:                      # the confidence head, evaluated inside the same call
                np.testing.assert_allclose(confidence, reference.confidence(ref_rows.float(), chain.prev), atol=1e-5)
            else:
                assert confidence is None


@pytest.mark.parametrize("cut", [False, True])
def test_markov_table_gives_the_bits_of_the_worked_out_bias(tmp_path, target_dir, monkeypatch, cut):
    """The native chain reads each token's Markov bias from a table when the vocabulary is small enough; the
    drafts, logits and q are bit for bit those of the bias worked out in the call, for any number of slots,
    also with the lm_head (and so the table's columns) cut to some tokens."""
    d = write_block_drafter(tmp_path / "d", target_dir, "specserve", block_size=6, **DSPARK)
    outputs = []
    for limit in (block_drafter_module.MARKOV_TABLE_MAX_VOCAB, 0):
        monkeypatch.setattr(block_drafter_module, "MARKOV_TABLE_MAX_VOCAB", limit)
        drafter = load_block_drafter(d, CausalLM.from_pretrained(target_dir))
        if cut:
            drafter.cut_vocab(torch.arange(0, drafter.cfg.vocab_size, 3))
        cache = drafter.new_cache(5, 64)
        assert drafter.native is not None
        assert (drafter.native_call().markov_weights[2] is None) == (limit == 0)
        gen = torch.Generator().manual_seed(0)
        n = drafter.config.max_drafts
        feats = torch.randn(5 * 4, 3 * drafter.cfg.hidden_size, generator=gen)
        ctx_slots, ctx_pos = torch.arange(5).repeat_interleave(4), torch.arange(4).repeat(5)
        block = torch.full((5, drafter.block_rows_for(n)), 1)
        block[:, 0] = anchors = torch.tensor([7, 30, 2, 99, 150])
        with torch.inference_mode():
            temps, noise = torch.tensor([0.8, 0.0, 1.3, 1.0, 0.0]), draft_uniforms([gen] * 5, [True] * 5, n)
            _, tokens, logits, q, _ = drafter.draft_native(cache, feats, ctx_slots, ctx_pos, list(range(5)),
                                                           torch.full((5,), 4), block, n, anchors, True, temps, noise)
        outputs.append((tokens.clone(), logits.clone(), q[temps > 0].clone()))    # q of the sampled slots
    for tabled, worked_out in zip(*outputs):
        assert torch.equal(tabled, worked_out)


def test_chain_samples_from_q(tmp_path, target_dir, target):
    """At T>0 each drafted token is a draw from softmax(logits'/T): check the first position's frequencies."""
    drafter = _markov_drafter(tmp_path, target_dir, target)
    base = torch.zeros(1, 2, 320)
    base[0, 0, :4] = torch.tensor([2.0, 1.0, 0.5, 0.0]) + 20
    gen = torch.Generator().manual_seed(1)
    counts = torch.zeros(4)
    with torch.inference_mode():
        for _ in range(2000):
            uniforms = draft_uniforms([gen], [True], 2)
            chain = run_block_chain(base, torch.tensor([9]), drafter.markov_head, torch.tensor([0.8]), uniforms)
            counts[int(chain.tokens[0, 0])] += 1
        q = torch.softmax(chain.logits[0, 0] / 0.8, -1)[:4]
    assert torch.allclose(counts / 2000, q / q.sum(), atol=0.03)


def _edit_config(d, **changes):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))


def test_incompatible_drafts_fail_clearly(tmp_path, target_dir, target):
    good = write_block_drafter(tmp_path / "good", target_dir, "deepspec", block_size=4, **DSPARK)

    def variant(name, **changes):
        d = shutil.copytree(good, tmp_path / name)
        _edit_config(d, **changes)
        return d

    with pytest.raises(IncompatibleDraftError, match="target_layer_ids .* outside the target's layers"):
        load_block_drafter(variant("ids", target_layer_ids=[0, 2, 9]), target)
    with pytest.raises(IncompatibleDraftError, match="mask_token_id 5000 has no embedding row"):
        load_block_drafter(variant("mask", mask_token_id=5000), target)
    with pytest.raises(IncompatibleDraftError, match="trained for a target with 36 layers"):
        load_block_drafter(variant("layers", num_target_layers=36), target)
    other = write_model(tmp_path / "wide", "qwen3", hidden_size=96, num_attention_heads=6, num_key_value_heads=2,
                        tokenizer=False, num_hidden_layers=5)
    with pytest.raises(IncompatibleDraftError, match="hidden size 64 differs from the target's 96"):
        load_block_drafter(good, CausalLM.from_pretrained(other))
    bigger = write_model(tmp_path / "v400", "qwen3", vocab_size=400, tokenizer=False, num_hidden_layers=5)
    with pytest.raises(IncompatibleDraftError, match="vocab_size 320 differs from the target's 400"):
        load_block_drafter(good, CausalLM.from_pretrained(bigger))
    no_mask = variant("nomask")
    cfg = json.loads((no_mask / "config.json").read_text())
    del cfg["mask_token_id"]
    (no_mask / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(IncompatibleDraftError, match="no mask_token_id"):
        load_block_drafter(no_mask, target)
    with pytest.raises(ModelLoadError, match="markov_rank is 16 but the checkpoint's Markov head has rank 8"):
        read_block_drafter(variant("rank", markov_rank=16))
    with pytest.raises(ModelLoadError, match="not a DFlash/DSpark draft"):
        read_block_drafter(target_dir)
    with pytest.raises(ModelLoadError, match="no block_size"):
        read_block_drafter(variant("noblock", block_size=None))
    with pytest.raises(ModelLoadError, match="sliding_attention.* not supported"):
        read_block_drafter(variant("swa", layer_types=["sliding_attention"] * 2))


def test_mask_token_from_tokenizer(tmp_path, target_dir, target):
    """Early z-lab configs carry no mask_token_id: the target tokenizer's mask token is used."""
    from specserve.models.tokenizer import Tokenizer
    d = write_block_drafter(tmp_path / "z", target_dir, "zlab", block_size=4)
    cfg = json.loads((d / "config.json").read_text())
    del cfg["dflash_config"]["mask_token_id"]
    (d / "config.json").write_text(json.dumps(cfg))
    drafter = load_block_drafter(d, target, tokenizer=Tokenizer(target_dir))
    assert drafter.config.mask_token_id == Tokenizer(target_dir).token_to_id("<|mask|>")
