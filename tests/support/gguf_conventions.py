"""What a GGUF file says, in a form small enough to record and compare: every metadata key with its
type and value (long arrays and the chat template as length + sha256), every tensor's type and shape,
and the stored row order of the probed q/k tensors (support/gguf_probes.py). Also: running llama.cpp's
converter when it is installed (GGUF_VENV, LLAMACPP_SRC; see docs/llamacpp.md)."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType

from specserve.models.gguf_file import GgufFile

DATA = Path(__file__).resolve().parent.parent / "data" / "gguf_conventions.json"
HASHED = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type", "tokenizer.chat_template")
# general.* keys that only describe the file (derived from folder names and parameter counts)
DESCRIPTIVE = ("general.name", "general.size_label")
PROBED_ROWS = ("blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_q.bias", "blk.0.attn_k.bias")
CONVERTER_WRAPPER = Path.home() / ".cache/llamacpp-peer/llamacpp-tools/convert_hf_to_gguf_gpt2pre.py"


def _digest(value) -> dict:
    text = json.dumps(value, ensure_ascii=False)
    return {"len": len(value), "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def describe(path: Path, probe_rows: bool = False) -> dict:
    """{"metadata": {key: [types, value]}, "tensors": {name: [type, shape]}, "rows": {name: [row ids]}}."""
    reader = GGUFReader(path)
    ours = GgufFile(path)
    metadata = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in DESCRIPTIVE:
            continue
        value = ours.value(key)
        types = [GGUFValueType(t).name for t in field.types]
        metadata[key] = [types, _digest(value) if key in HASHED else value]
    tensors = {t.name: [t.tensor_type.name, [int(n) for n in reversed(t.shape)]] for t in reader.tensors}
    out = {"metadata": metadata, "tensors": tensors}
    if probe_rows:
        out["rows"] = {name: [int(v) for v in np.asarray(ours.tensor(name)).reshape(ours.shape(name)[0], -1)[:, 0]]
                       for name in PROBED_ROWS if name in ours.tensors}
    return out


def converter_available() -> bool:
    return bool(os.environ.get("GGUF_VENV") and os.environ.get("LLAMACPP_SRC") and CONVERTER_WRAPPER.is_file())


def convert_with_llamacpp(model_dir: Path, out: Path, outtype: str = "f32", target_dir: Path | None = None) -> Path:
    """Run llama.cpp's convert_hf_to_gguf.py (through the pre-tokenizer wrapper llamacpp-peer.sh installs)."""
    cmd = [f"{os.environ['GGUF_VENV']}/bin/python", str(CONVERTER_WRAPPER), os.environ["LLAMACPP_SRC"],
           str(model_dir), "--outtype", outtype, "--outfile", str(out)]
    if target_dir is not None:
        cmd += ["--target-model-dir", str(target_dir)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 or not out.is_file():
        raise RuntimeError(f"llama.cpp's converter failed on {model_dir}:\n{result.stderr[-2000:]}")
    return out
