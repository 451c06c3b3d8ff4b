"""EAGLE-3: layer-id conventions, every public checkpoint layout against a reference forward,
d2t, clear errors, and greedy losslessness through the engine."""
import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from support.model_drafters import write_eagle3
from support.models import write_model
from support.reference_heads import eagle3 as ref_eagle3
from support.prompts import DRAFTER_PROMPTS as PROMPTS
from specserve import LLM, SamplingParams
from specserve.errors import IncompatibleDraftError, ModelLoadError
from specserve.models.eagle3_format import load_eagle3, target_layer_taps
from specserve.models.tap_store import FINAL
from specserve.models.step_batch import StepBatch
from specserve.models.transformer import CausalLM

N_LAYERS = 6


@pytest.fixture(scope="module")
def target6(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("t6"), "qwen3", seed=4, std=0.25, num_hidden_layers=N_LAYERS)


# ---------------------------------------------------------------------------- layer ids: one conversion
def test_default_layers_are_inputs_of_2_mid_and_n_minus_3():
    # inputs of layers 2, N//2, N-3 = outputs of layers 1, N//2-1, N-4
    assert target_layer_taps({}, 32) == (1, 15, 28)          # Llama-3.1-8B: HF hidden_states [2, 16, 29]
    assert target_layer_taps({}, 6) == (1, 2, 2)


def test_nested_ids_are_output_of_layer():
    # SpecForge / SGLang convention: DeepSeek-V3 [1, 29, 57] is the same tensors as the default [2, 30, 58]
    raw = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}}
    assert target_layer_taps(raw, 61) == target_layer_taps({}, 61) == (1, 29, 57)
    assert target_layer_taps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 5]}}, 6) == (0, 2, 5)


def test_top_level_ids_are_input_of_layer():
    # speculators / vLLM convention: HF hidden_states indices; N = the last layer's (pre-norm) output
    assert target_layer_taps({"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}, 32) == (1, 15, 28)
    assert target_layer_taps({"eagle_aux_hidden_state_layer_ids": [0, 3, 6]}, 6) == (-1, 2, 5)


def test_layer_ids_outside_the_target_are_an_error():
    with pytest.raises(IncompatibleDraftError, match="valid inputs are 0..6"):
        target_layer_taps({"eagle_aux_hidden_state_layer_ids": [2, 3, 7]}, 6)
    with pytest.raises(IncompatibleDraftError):
        target_layer_taps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 6]}}, 6)


def test_taps_are_hf_hidden_states_shifted_by_one(target6):
    """tap k-1 (residual output of layer k-1, -1 = embeddings) == transformers hidden_states[k], k < N."""
    ids = torch.randint(0, 320, (1, 20), generator=torch.Generator().manual_seed(1))
    ours = CausalLM.from_pretrained(target6)
    _, taps = ours.forward_full(ids, taps=tuple(range(-1, N_LAYERS)))
    with torch.no_grad():
        hf = AutoModelForCausalLM.from_pretrained(target6, dtype=torch.float32)(ids, output_hidden_states=True)
    for k in range(N_LAYERS):
        assert torch.allclose(taps[k - 1], hf.hidden_states[k], rtol=1e-4, atol=1e-4), k


# ---------------------------------------------------------------------------- layouts vs the reference
LAYOUTS = [
    ("eagle", {}, None),
    ("specforge", {}, [0, 2, 4]),
    ("specforge", {"fc_norm": True, "norm_output": True}, [1, 3, 5]),
    ("specforge", {"draft_vocab": 200}, None),
    ("vllm", {}, None),
    ("speculators", {"norm_before_residual": True, "own_embedding": True}, [1, 3, 6]),
    ("speculators", {"hidden": 48, "own_embedding": True}, [0, 2, 4]),      # draft hidden != target hidden
]


def _expected_hf_indices(layout, layer_ids):
    if layer_ids is None:
        return [2, N_LAYERS // 2, N_LAYERS - 3]
    return [i + 1 for i in layer_ids] if layout == "specforge" else list(layer_ids)


@pytest.mark.parametrize("layout,kwargs,layer_ids", LAYOUTS)
def test_layout_matches_reference_forward(tmp_path, target6, layout, kwargs, layer_ids):
    draft_dir = write_eagle3(tmp_path / "d", target6, layout, layer_ids=layer_ids, **kwargs)
    target = CausalLM.from_pretrained(target6)
    head, taps = load_eagle3(draft_dir, target)
    hf_idx = _expected_hf_indices(layout, layer_ids)
    assert taps == tuple(k - 1 for k in hf_idx)
    tokens = torch.randint(0, 320, (24,), generator=torch.Generator().manual_seed(2))
    # reference features straight from transformers' hidden_states (pre-final-norm for index N)
    with torch.no_grad():
        hf = AutoModelForCausalLM.from_pretrained(target6, dtype=torch.float32)
        captured = {}
        hook = hf.model.norm.register_forward_hook(lambda mod, inp, out: captured.setdefault("pre_norm", inp[0]))
        out = hf(tokens[None], output_hidden_states=True)
        hook.remove()
        pre_norm_last = captured["pre_norm"]
    feats = [(pre_norm_last if k == N_LAYERS else out.hidden_states[k])[0, :20] for k in hf_idx]
    # rows: (token t+1, feature t) for t < 20, then 3 chained rows fed with the drafted tokens
    raw_tensors = (torch.load(draft_dir / "pytorch_model.bin") if layout == "eagle"
                   else load_file(str(draft_dir / "model.safetensors")))
    raw_cfg = json.loads((draft_dir / "config.json").read_text())
    cfg = raw_cfg.get("transformer_layer_config", raw_cfg) | {k: v for k, v in raw_cfg.items()
                                                              if k.startswith("norm_")}
    embed = raw_tensors.get("embed_tokens.weight", target.model.embed_tokens.weight)
    prefix = "layers.0." if layout == "speculators" else "midlayer."
    row_tokens = torch.cat([tokens[1:21], tokens[21:24]])
    ref = ref_eagle3(raw_tensors, cfg, feats, row_tokens, torch.arange(23), embed, layer0=prefix, chain_from=20)
    # ours: the prefix through the serving path, then the chained rows one step each
    cache = head.new_cache(2, 64)
    with torch.no_grad():
        _, out_taps = target.forward_full(tokens[None, :20], taps=taps)
        g = head.project([out_taps[t][0] for t in taps])
        logits, hidden = head.forward_step(StepBatch.build([(1, row_tokens[:20], 0)], list(range(20))), g, cache)
        ours = [logits]
        for i in range(20, 23):
            logits, h = head.forward_step(StepBatch.build([(1, row_tokens[i:i + 1], i)], [0]), hidden[-1:], cache)
            hidden = h
            ours.append(logits)
    ours = torch.cat(ours)
    assert ours.shape == (23, head.opts.draft_vocab_size)
    assert (ours - ref).abs().max().item() < 1e-4


def test_two_layer_head_and_qwen3_type_layer_load_and_run(tmp_path, target6):
    for kwargs in ({"n_layers": 2}, {"model_type": "qwen3"}):
        d = write_eagle3(tmp_path / str(kwargs), target6, "speculators", layer_ids=[1, 3, 5], **kwargs)
        llm = LLM(target6, spec_type="draft-eagle3", draft_model=d, n_parallel=2)
        assert len(llm.generate([[5, 6, 7, 8]], SamplingParams(temperature=0, max_tokens=8))[0].token_ids) == 8


def test_d2t_maps_draft_ids_to_target_ids(tmp_path, target6):
    d = write_eagle3(tmp_path / "d", target6, "specforge", draft_vocab=100)
    head, _ = load_eagle3(d, CausalLM.from_pretrained(target6))
    d2t = load_file(str(d / "model.safetensors"))["d2t"]
    assert torch.equal(head.target_ids(), torch.arange(100) + d2t)
    llm = LLM(target6, spec_type="draft-eagle3", draft_model=d, n_parallel=2)
    drafted = []
    driver_draft = llm.engine.driver.draft

    def spy(requests):
        result = driver_draft(requests)
        drafted.extend(t for draft in result.values() for t in draft.tokens)
        return result

    llm.engine.driver.draft = spy
    llm.generate([[5, 6, 7, 8, 9, 10], [40, 41, 42]], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))
    assert len(drafted) > 10
    assert set(drafted) <= set(head.target_ids().tolist())     # 100 of 320 ids: unmapped ids would show


# ---------------------------------------------------------------------------- errors
def _rewrite(d, drop=None, config=None):
    tensors = load_file(str(d / "model.safetensors"))
    if drop:
        del tensors[drop]
    save_file(tensors, str(d / "model.safetensors"))
    if config:
        raw = json.loads((d / "config.json").read_text())
        raw.update(config)
        (d / "config.json").write_text(json.dumps(raw))


def test_clear_errors(tmp_path, target6):
    target = CausalLM.from_pretrained(target6)
    other = write_model(tmp_path / "wide", "qwen3", hidden_size=96, num_attention_heads=4, head_dim=24,
                        num_hidden_layers=N_LAYERS, tokenizer=False)
    d = write_eagle3(tmp_path / "a", target6, "vllm")
    with pytest.raises(IncompatibleDraftError, match="fc.weight has shape"):
        load_eagle3(d, CausalLM.from_pretrained(other))
    d = write_eagle3(tmp_path / "a2", target6, "specforge")
    with pytest.raises(IncompatibleDraftError, match="target_hidden_size 64 but the target's hidden size is 96"):
        load_eagle3(d, CausalLM.from_pretrained(other))
    d = write_eagle3(tmp_path / "b", target6, "specforge")
    _rewrite(d, drop="midlayer.hidden_norm.weight")
    with pytest.raises(ModelLoadError, match="layers.0.hidden_norm.weight"):
        load_eagle3(d, target)
    d = write_eagle3(tmp_path / "c", target6, "specforge")
    _rewrite(d, drop="fc.weight")
    with pytest.raises(ModelLoadError, match="'fc.weight' missing"):
        load_eagle3(d, target)
    d = write_eagle3(tmp_path / "e", target6, "specforge")
    _rewrite(d, config={"vocab_size": 400})
    with pytest.raises(IncompatibleDraftError, match="vocab_size 400"):
        load_eagle3(d, target)
    d = write_eagle3(tmp_path / "f", target6, "specforge")
    _rewrite(d, config={"target_hidden_size": 128})
    with pytest.raises(IncompatibleDraftError, match="target_hidden_size 128"):
        load_eagle3(d, target)
    d = write_eagle3(tmp_path / "g", target6, "speculators", hidden=48)    # no own embedding, H != Ht
    with pytest.raises(IncompatibleDraftError, match="no embed_tokens"):
        load_eagle3(d, target)
    d = write_eagle3(tmp_path / "h", target6, "specforge", draft_vocab=100)
    tensors = load_file(str(d / "model.safetensors"))
    tensors["d2t"][5] = 10_000
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(IncompatibleDraftError, match="d2t"):
        load_eagle3(d, target)
    with pytest.raises(ModelLoadError, match="not an EAGLE-3 draft"):
        _rewrite(d, config={"architectures": ["MistralForCausalLM"]})
        load_eagle3(d, target)


# ---------------------------------------------------------------------------- lossless through the engine


@pytest.mark.parametrize("layout,kwargs", [("specforge", {"draft_vocab": 200}), ("speculators", {"hidden": 48,
                                                                                                  "own_embedding": True})])
def test_greedy_identical_with_and_without_eagle3(tmp_path, target6, layout, kwargs):
    d = write_eagle3(tmp_path / "d", target6, layout, layer_ids=[0, 2, 5] if layout == "speculators" else None,
                     **kwargs)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    reference = [o.token_ids for o in LLM(target6).generate(PROMPTS, params)]
    for n_parallel in (1, 3):
        llm = LLM(target6, spec_type="draft-eagle3", draft_model=d, n_parallel=n_parallel, spec_draft_n_max=4)
        for order in (range(len(PROMPTS)), reversed(range(len(PROMPTS)))):
            order = list(order)
            outs = llm.generate([PROMPTS[i] for i in order], params)
            assert [o.token_ids for o in outs] == [reference[i] for i in order]
        assert llm.engine.driver.stats_dict()["draft-eagle3"]["n_gen_tokens"] > 0


def test_head_without_aux_features_reads_the_final_hidden_state(tmp_path, target6):
    """use_aux_hidden_state: false (EAGLE-1-style input, e.g. NVIDIA short-context heads): no fc."""
    d = write_eagle3(tmp_path / "d", target6, "specforge")
    _rewrite(d, drop="fc.weight", config={"eagle_config": {"use_aux_hidden_state": False}})
    head, taps = load_eagle3(d, CausalLM.from_pretrained(target6))
    assert head.fc is None and taps == ()
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    reference = [o.token_ids for o in LLM(target6).generate(PROMPTS, params)]
    llm = LLM(target6, spec_type="draft-eagle3", draft_model=d, n_parallel=2)
    assert llm.engine.driver.store.layers == (FINAL,)          # the store keeps only the final state
    assert [o.token_ids for o in llm.generate(PROMPTS, params)] == reference
    assert llm.engine.driver.stats_dict()["draft-eagle3"]["n_gen_tokens"] > 0
