"""Bad input gives a clear error naming the problem, and the engine keeps serving."""
import json
import shutil

import pytest

from specserve import LLM, SamplingParams
from specserve.engine.request import Request
from specserve.errors import ContextOverflowError, InvalidRequestError, ModelLoadError, OptionError
from specserve.models.transformer import CausalLM
from specserve.speculative.registry import parse_spec_types


def copy_model(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_missing_folder_and_files(tmp_path, tiny_qwen3):
    with pytest.raises(ModelLoadError, match="model directory not found"):
        CausalLM.from_pretrained(tmp_path / "nope")
    d = copy_model(tiny_qwen3, tmp_path / "m1")
    (d / "config.json").unlink()
    with pytest.raises(ModelLoadError, match="config.json not found"):
        CausalLM.from_pretrained(d)
    d = copy_model(tiny_qwen3, tmp_path / "m2")
    (d / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="no weights"):
        CausalLM.from_pretrained(d)


def test_corrupt_files(tmp_path, tiny_qwen3):
    d = copy_model(tiny_qwen3, tmp_path / "m1")
    (d / "model.safetensors").write_bytes(b"\x00\x01garbage" * 10)
    with pytest.raises(ModelLoadError, match="cannot read safetensors file"):
        CausalLM.from_pretrained(d)
    d = copy_model(tiny_qwen3, tmp_path / "m2")
    (d / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        CausalLM.from_pretrained(d)
    d = copy_model(tiny_qwen3, tmp_path / "m3")
    cfg = json.loads((d / "config.json").read_text())
    cfg["hidden_size"] = 96
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="has shape .* expected"):
        CausalLM.from_pretrained(d)
    cfg["model_type"] = "gpt2"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="unsupported model_type 'gpt2'"):
        CausalLM.from_pretrained(d)


def test_missing_tensor_and_bad_index(tmp_path, tiny_qwen3):
    from safetensors.torch import load_file, save_file
    d = copy_model(tiny_qwen3, tmp_path / "m1")
    state = load_file(str(d / "model.safetensors"))
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, str(d / "model.safetensors"))
    with pytest.raises(ModelLoadError, match="model.layers.1.mlp.up_proj.weight.* missing"):
        CausalLM.from_pretrained(d)
    d = copy_model(tiny_qwen3, tmp_path / "m2")
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "model-2.safetensors"}}))
    with pytest.raises(ModelLoadError, match="shard"):
        CausalLM.from_pretrained(d)


def test_unknown_spec_type_lists_valid_ones():
    with pytest.raises(OptionError, match="unknown spec type.*'draft-magic'.*valid types: none, ngram-simple"):
        parse_spec_types("ngram-simple,draft-magic")
    assert parse_spec_types("none,ngram-simple") == []


def test_unknown_option(tiny_qwen3):
    with pytest.raises(OptionError, match="unknown option.*spec_ngram_simple_size_q") as error:
        LLM(tiny_qwen3, spec_type="ngram-simple", spec_ngram_simple_size_q=3)
    for name in ("n_parallel", "ctx_size", "n_batch", "dtype", "threads", "quant", "spec_draft_n_max"):
        assert name in str(error.value)


def test_bad_requests_leave_the_engine_usable(tiny_qwen3):
    llm = LLM(tiny_qwen3, ctx_size=64, n_parallel=2)
    with pytest.raises(ContextOverflowError, match="prompt has 70 tokens but the context size is 64"):
        llm.generate([5] * 70, SamplingParams(max_tokens=4))
    with pytest.raises(InvalidRequestError, match="prompt is empty"):
        llm.generate("", SamplingParams(max_tokens=4))
    with pytest.raises(InvalidRequestError, match="outside the vocabulary"):
        llm.generate([5, 100000], SamplingParams(max_tokens=4))
    for bad, match in [(dict(top_p=0), "top_p"), (dict(max_tokens=-3), "max_tokens"), (dict(min_p=2), "min_p"),
                       (dict(stop=[5]), "stop"), (dict(logprobs=99), "logprobs")]:
        with pytest.raises(InvalidRequestError, match=match):
            SamplingParams(**bad)
    out = llm.generate([5, 6, 7], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))[0]
    assert len(out.token_ids) == 4


def test_abort_frees_the_slot(tiny_qwen3):
    llm = LLM(tiny_qwen3, n_parallel=1)
    long = Request("long", [5, 6, 7], SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))
    short = Request("short", [8, 9], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    llm.engine.add_request(long)
    llm.engine.add_request(short)
    for _ in range(5):
        llm.engine.step()
    llm.engine.abort("long")
    while not short.finished:
        llm.engine.step()
    assert long.finish_reason == "abort" and short.finish_reason == "length"
