"""`export-gguf` writes what llama.cpp's converter writes: the same metadata keys, types and values and
the same tensor names, types and shapes (tests/data/gguf_conventions.json, recorded from the converter
by scripts/record_gguf_conventions.py) for the bundled model and drafters and for one probe checkpoint
per target architecture, including llama's q/k row order.

With llama.cpp's files at hand (GGUF_DIR, and GGUF_VENV + LLAMACPP_SRC for the converter; see
docs/llamacpp.md) the converter's own output is also loaded and compared with the safetensors originals."""
import json
import os
from pathlib import Path

import pytest
import torch

from support.gguf_conventions import DATA, HASHED, convert_with_llamacpp, converter_available, describe
from support.gguf_probes import PROBES, write_probe
from support.prompts import SMALL_PROMPTS
from specserve import LLM, SamplingParams
from specserve.bundled import STDLIB_CODER, STDLIB_CODER_DRAFTERS
from specserve.models.gguf_export import export_gguf
from specserve.models.gguf_writer import parse_outtype

RECORD = json.loads(DATA.read_text(encoding="utf-8"))
BUNDLED = {"stdlib-coder-f32": (STDLIB_CODER, "f32"), "stdlib-coder-bf16": (STDLIB_CODER, "bf16")}
BUNDLED.update({f"{folder.name}-f32": (folder, "f32") for spec, (folder, _) in STDLIB_CODER_DRAFTERS.items()
                if spec != "draft-mtp"})
GGUF_DIR = Path(os.environ["GGUF_DIR"]) if os.environ.get("GGUF_DIR") else None
needs_gguf_dir = pytest.mark.skipif(GGUF_DIR is None or not (GGUF_DIR / "stdlib-coder-f32.gguf").is_file(),
                                    reason="GGUF_DIR with llama.cpp's converted bundled files is not set")


def _compare(got: dict, want: dict, hashed_too: bool = True) -> None:
    assert sorted(got["metadata"]) == sorted(want["metadata"])
    for key, (types, value) in want["metadata"].items():
        if key in HASHED and not hashed_too:
            value, got_value = value["len"], got["metadata"][key][1]["len"]
        else:
            got_value = got["metadata"][key][1]
        assert (got["metadata"][key][0], got_value) == (types, value), key
    assert got["tensors"] == want["tensors"]


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_exports_match_the_converter(tmp_path, name):
    src, outtype = BUNDLED[name]
    out = tmp_path / f"{name}.gguf"
    export_gguf(src, out, parse_outtype(outtype), STDLIB_CODER)
    _compare(describe(out), RECORD["bundled"][name])


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_exports_match_the_converter(tmp_path, name):
    src = write_probe(tmp_path / name, name)
    out = tmp_path / f"{name}.gguf"
    export_gguf(src, out, parse_outtype("f32"))
    got, want = describe(out, probe_rows=True), RECORD["probes"][name]
    _compare(got, want, hashed_too=False)          # the probes' trained tokenizers may differ by library version
    assert got["rows"] == want["rows"]             # llama.cpp's q/k row order (permuted for llama only)


# ---------------------------------------------------------------------------- llama.cpp's own files, when present
@needs_gguf_dir
@pytest.mark.parametrize("name", ["stdlib-coder-f32", "stdlib-coder-bf16"])
def test_converter_output_gives_the_safetensors_logits_and_tokens(name):
    ids = SMALL_PROMPTS[2] + SMALL_PROMPTS[0]
    original, converted = LLM(STDLIB_CODER, dtype="float32"), LLM(GGUF_DIR / f"{name}.gguf", dtype="float32")
    assert (converted.score(ids) - original.score(ids)).abs().max().item() < 1e-4
    texts = ("def f(x):\n\treturn x  # ünï ✓ 日本\n", "I've 3333 <|endoftext|>  \r\n", Path(__file__).read_text())
    for text in texts:
        assert converted.tokenizer.encode(text) == original.tokenizer.encode(text)


@needs_gguf_dir
@pytest.mark.parametrize("spec_type", ["draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"])
def test_converter_drafters_draft_like_the_folders(spec_type):
    folder, n_max = STDLIB_CODER_DRAFTERS[spec_type]
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    prompts = ["def fibonacci(n):", "class Stack:\n    def __init__(self):"]
    runs = []
    for target, draft in ((STDLIB_CODER, folder), (GGUF_DIR / "stdlib-coder-f32.gguf",
                                                    GGUF_DIR / f"{folder.name}-f32.gguf")):
        llm = LLM(target, spec_type=spec_type, draft_model=draft, dtype="float32", spec_draft_n_max=n_max)
        stats = llm.engine.driver.stats_dict
        runs.append(([o.token_ids for o in llm.generate(prompts, params)],
                     stats()[spec_type]["n_gen_tokens"], stats()[spec_type]["n_acc_tokens"]))
    assert runs[0] == runs[1]


@pytest.mark.skipif(not converter_available(), reason="llama.cpp's converter (GGUF_VENV, LLAMACPP_SRC) is not set up")
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PROBES))
def test_converter_probe_output_gives_the_safetensors_logits(tmp_path, name):
    src = write_probe(tmp_path / name, name)
    out = convert_with_llamacpp(src, tmp_path / f"{name}.gguf")
    ids = list(range(3, 300, 2))
    a, b = LLM(src, dtype="float32"), LLM(out, dtype="float32")
    assert (a.score(ids) - b.score(ids)).abs().max().item() < 1e-4
    text = "def add(a, b):\n    return a + b  # ünï ✓"
    assert a.tokenizer.encode(text) == b.tokenizer.encode(text)
    assert torch.equal(a.score(ids[:5]), b.score(ids[:5]))
