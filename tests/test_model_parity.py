"""Our decoder against transformers on tiny random checkpoints (float32)."""
import pytest
import torch
from transformers import AutoModelForCausalLM

from support.models import write_model
from specserve import LLM, SamplingParams
from specserve.models.step_batch import StepBatch
from specserve.models.transformer import CausalLM

ROPE_VARIANTS = {
    "default": {},
    "linear": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "dynamic": {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 32},
    "llama3": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 32}},
    "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128},
             "max_position_embeddings": 512},
    "rope_parameters": {"rope_parameters": {"rope_type": "linear", "factor": 3.0, "rope_theta": 5000.0}},
}

CASES = [
    ("llama", {}), ("llama", {"tie_word_embeddings": True}), ("llama", {"attention_bias": True, "mlp_bias": True}),
    ("qwen2", {}), ("qwen2", {"tie_word_embeddings": False}),
    ("qwen3", {}), ("qwen3", {"tie_word_embeddings": False}),
] + [("llama", v) for k, v in ROPE_VARIANTS.items() if k != "default"] + [("qwen3", ROPE_VARIANTS["yarn"])]


def _hf(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.mark.parametrize("family,overrides", CASES)
def test_logits_match_transformers(tmp_path, family, overrides):
    model_dir = write_model(tmp_path, family, seed=3, std=0.05, tokenizer=False, **overrides)
    ours = CausalLM.from_pretrained(model_dir)
    ids = torch.randint(0, 320, (1, 60), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = _hf(model_dir)(ids).logits[0]
    # the serving path, with the prompt split over two steps (dynamic NTK depends on the
    # sequence length seen by each forward, as in transformers, so it runs as one chunk)
    split = 60 if "dynamic" in str(overrides) else 23
    cache = ours.new_cache(2, 128)
    first = ours.forward_step(StepBatch.build([(1, ids[0, :split], 0)], list(range(split))), cache)
    step_logits = first.logits
    if split < 60:
        second = ours.forward_step(StepBatch.build([(1, ids[0, split:], split)], list(range(60 - split))), cache)
        step_logits = torch.cat([first.logits, second.logits])
    assert (step_logits - ref).abs().max().item() < 1e-4
    hidden, _ = ours.forward_full(ids)
    assert (ours.logits(hidden[0]) - ref).abs().max().item() < 1e-4


def test_sharded_checkpoint_and_half_dtypes(tmp_path):
    model_dir = write_model(tmp_path, "qwen3", seed=4, std=0.05, tokenizer=False, shards=3)
    ours = CausalLM.from_pretrained(model_dir)
    ids = torch.randint(0, 320, (1, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = _hf(model_dir)(ids).logits[0]
    hidden, _ = ours.forward_full(ids)
    assert (ours.logits(hidden[0]) - ref).abs().max() < 1e-4
    for dtype in ("bfloat16", "float16"):
        half = CausalLM.from_pretrained(model_dir, dtype=dtype)
        assert half.dtype == getattr(torch, dtype)
        cache = half.new_cache(1, 64)
        out = half.forward_step(StepBatch.build([(0, ids[0], 0)], list(range(20))), cache)
        assert out.logits.dtype == torch.float32
        assert (out.logits - ref).abs().max() < 0.1


def test_taps_are_layer_outputs(tmp_path):
    model_dir = write_model(tmp_path, "qwen3", seed=5, std=0.05, tokenizer=False, num_hidden_layers=3)
    ours = CausalLM.from_pretrained(model_dir)
    ids = torch.randint(0, 320, (1, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        hf_out = _hf(model_dir)(ids, output_hidden_states=True)
    cache = ours.new_cache(1, 64)
    out = ours.forward_step(StepBatch.build([(0, ids[0], 0)], [11]), cache, taps=(-1, 0, 1, 2),
                            want_final_hidden=True)
    # HF hidden_states[L+1] is the output of layer L, except the last entry, which is final-normed
    for layer in (-1, 0, 1):
        assert (out.tap(layer) - hf_out.hidden_states[layer + 1][0]).abs().max() < 1e-5
    assert (out.final_hidden - hf_out.hidden_states[3][0]).abs().max() < 1e-5
    assert not torch.allclose(out.tap(2), out.final_hidden)
    _, full_taps = ours.forward_full(ids, taps=(0, 2))
    assert (full_taps[2][0] - out.tap(2)).abs().max() < 1e-5
    assert out.tap_layers == (-1, 0, 1, 2) and out.taps.shape == (12, 4 * out.tap(0).shape[1])


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_greedy_generation_matches_transformers(tmp_path, family):
    model_dir = write_model(tmp_path, family, seed=6, std=0.2)
    prompt = [5, 17, 33, 90, 41, 7]
    hf = _hf(model_dir)
    with torch.no_grad():
        ref = hf.generate(torch.tensor([prompt]), max_new_tokens=40, do_sample=False, eos_token_id=None,
                          pad_token_id=0)[0, len(prompt):].tolist()
    out = LLM(model_dir).generate(prompt, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))[0]
    assert out.token_ids == ref
