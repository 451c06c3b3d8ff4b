"""GGUF models: a checkpoint written to GGUF by `export-gguf` loads back to exactly the same model (every
target architecture, tied and untied, biases, linear / YaRN / llama3 RoPE scaling), the 16-bit types
round-trip within their precision, Q8_0 is dequantized within its block error, and the engine serves a
.gguf as it serves the folder."""
import pytest
import torch

from support.gguf_probes import write_probe
from support.models import write_model
from support.prompts import SMALL_PROMPTS
from specserve import LLM, SamplingParams
from specserve.models.gguf_export import export_gguf
from specserve.models.gguf_writer import parse_outtype
from specserve.models.transformer import CausalLM

IDS = list(range(3, 300, 3))
GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def _export(src, tmp_path, outtype="f32", name="model"):
    path = tmp_path / f"{name}-{outtype}.gguf"
    export_gguf(src, path, parse_outtype(outtype))
    return path


def _logits(model_path, **kwargs):
    return LLM(model_path, dtype="float32", **kwargs).score(IDS)


@pytest.mark.parametrize("family,overrides", [
    ("qwen3", {}),
    ("qwen3", {"tie_word_embeddings": False}),
    ("qwen2", {}),
    ("llama", {}),
    ("llama", {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True}),
])
def test_f32_gguf_gives_the_same_logits(tmp_path, family, overrides):
    src = write_model(tmp_path / "hf", family, seed=5, std=0.2, **overrides)
    gguf = _export(src, tmp_path)
    reference = _logits(src)
    assert (reference - _logits(gguf)).abs().max().item() < 1e-4
    a, b = CausalLM.from_pretrained(src, dtype="float32"), CausalLM.from_pretrained(gguf)
    assert a.config.tie_word_embeddings == b.config.tie_word_embeddings
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name


@pytest.mark.parametrize("probe", ["llama", "qwen2", "qwen3"])
def test_rope_scaling_and_llama_row_order_survive(tmp_path, probe):
    """llama3 (rope_freqs), YaRN and linear scaling, and llama's permuted q/k rows with biases."""
    src = write_probe(tmp_path / "hf", probe)
    gguf = _export(src, tmp_path)
    assert (_logits(src) - _logits(gguf)).abs().max().item() < 1e-4


@pytest.mark.parametrize("outtype,tolerance", [("bf16", 0.0), ("f16", 1e-3)])
def test_16_bit_types_round_trip_within_their_precision(tmp_path, tiny_qwen3_bf16, outtype, tolerance):
    gguf = _export(tiny_qwen3_bf16, tmp_path, outtype)
    reference, loaded = _logits(tiny_qwen3_bf16), _logits(gguf)
    assert (reference - loaded).abs().max().item() <= tolerance * reference.abs().max().item()
    auto = CausalLM.from_pretrained(gguf)
    assert auto.dtype == (torch.bfloat16 if outtype == "bf16" else torch.float32)


def test_q8_0_is_dequantized_within_its_block_error(tmp_path, tiny_qwen3):
    gguf = _export(tiny_qwen3, tmp_path, "q8_0")
    a, b = CausalLM.from_pretrained(tiny_qwen3, dtype="float32"), CausalLM.from_pretrained(gguf)
    assert b.dtype == torch.float32              # dequantized exactly into float32, not rounded again
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        if x.dim() == 2:
            # symmetric 8-bit blocks of 32, step d = block absmax / 127 stored as float16: error at most
            # half a step plus 127 times the scale's float16 rounding (2^-11 d)
            step = x.reshape(x.shape[0], -1, 32).abs().amax(-1, keepdim=True) / 127
            err = (x.reshape(step.shape[0], -1, 32) - y.reshape(step.shape[0], -1, 32)).abs()
            assert bool((err <= step * (0.5 + 127 / 2048) + 1e-7).all()), name
        else:
            assert torch.equal(x, y), name           # norms stay float32
    reference, loaded = _logits(tiny_qwen3), _logits(gguf)
    assert 0 < (reference - loaded).abs().max().item() < 0.05 * reference.abs().max().item()


def test_engine_serves_the_gguf_like_the_folder(tmp_path, tiny_qwen3):
    gguf = _export(tiny_qwen3, tmp_path)
    folder = LLM(tiny_qwen3, n_parallel=2, spec_type="ngram-simple", spec_ngram_simple_size_n=1)
    from_gguf = LLM(gguf, n_parallel=2, spec_type="ngram-simple", spec_ngram_simple_size_n=1)
    assert [o.token_ids for o in folder.generate(SMALL_PROMPTS, GREEDY)] == \
        [o.token_ids for o in from_gguf.generate(SMALL_PROMPTS, GREEDY)]
    text = "def add(a, b):\n    return a + b\n"
    assert [o.text for o in folder.generate([text], GREEDY)] == [o.text for o in from_gguf.generate([text], GREEDY)]
    counts = [{k: llm.engine.driver.stats_dict()["ngram-simple"][k] for k in ("n_gen_tokens", "n_acc_tokens")}
              for llm in (folder, from_gguf)]
    assert counts[0] == counts[1] and counts[0]["n_gen_tokens"] > 0
