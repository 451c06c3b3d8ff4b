"""Writing one GGUF file with gguf's GGUFWriter: metadata entries and tensors in the output type.

Which tensors take the output type follows llama.cpp's converter (`ModelBase.prepare_tensors` in
`conversion/base.py`): one-dimensional tensors, `*_norm.weight` and anything not named `.weight`
stay F32; integer tensors keep their type; a matrix whose rows do not split into Q8_0's 32-value
blocks falls back to F16.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path

import gguf
import numpy as np
import torch

from ..errors import ModelLoadError, OptionError

Q = gguf.GGMLQuantizationType
OUTTYPES = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0}
FILE_TYPES = {Q.F32: gguf.LlamaFileType.ALL_F32, Q.F16: gguf.LlamaFileType.MOSTLY_F16,
              Q.BF16: gguf.LlamaFileType.MOSTLY_BF16, Q.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0}
Q8_BLOCK = 32
logging.getLogger("gguf").setLevel(logging.WARNING)     # the writer logs every file it opens at INFO


def parse_outtype(name: str) -> gguf.GGMLQuantizationType:
    try:
        return OUTTYPES[name.lower()]
    except KeyError:
        raise OptionError(f"--outtype must be one of {', '.join(OUTTYPES)}, got {name!r}") from None


def stored_type(name: str, tensor: torch.Tensor, outtype) -> gguf.GGMLQuantizationType:
    """The GGML type `tensor` (GGUF name `name`) is written in, for a file of type `outtype`."""
    if not tensor.is_floating_point():
        return Q.I64 if tensor.dtype == torch.int64 else Q.I32
    if tensor.dim() <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return Q.F32
    if outtype == Q.Q8_0 and tensor.shape[-1] % Q8_BLOCK:
        return Q.F16
    return outtype


def encode(tensor: torch.Tensor, qtype) -> np.ndarray:
    """The bytes (as numpy) of `tensor` in GGML type `qtype`."""
    if qtype in (Q.I64, Q.I32):
        return tensor.to(torch.int64 if qtype == Q.I64 else torch.int32).numpy()
    data = tensor.detach().float().cpu().contiguous().numpy()
    if qtype == Q.F32:
        return data
    if qtype == Q.F16:
        return data.astype(np.float16)
    return gguf.quants.quantize(data, qtype)      # BF16 (round to nearest even) and Q8_0, as llama.cpp does


def display_name(source: Path) -> str:
    """general.name from a folder name, as the converter derives it ("stdlib-coder" -> "Stdlib Coder")."""
    return " ".join(part[:1].upper() + part[1:] for part in re.split(r"[-_ ]+", source.name) if part)


class GgufOut:
    """Collects metadata and tensors, then writes the file in one go."""

    def __init__(self, arch: str, outtype):
        self.arch = arch
        self.outtype = outtype
        self.entries: list[tuple] = []
        self.tensors: dict[str, tuple[np.ndarray, object]] = {}
        self.n_params = 0

    def add(self, entries: list[tuple]) -> None:
        """(key, value, type) or (key, list, ARRAY, element type) entries, in order."""
        self.entries.extend(entries)

    def tensor(self, name: str, tensor: torch.Tensor) -> None:
        if name in self.tensors:
            raise ModelLoadError(f"tensor {name!r} written twice")
        qtype = stored_type(name, tensor, self.outtype)
        self.tensors[name] = (encode(tensor, qtype), qtype)
        if tensor.is_floating_point():
            self.n_params += tensor.numel()

    def write(self, path: Path, source: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = gguf.GGUFWriter(path, self.arch)
        try:
            writer.add_type("model")
            writer.add_name(display_name(source))
            writer.add_size_label(gguf.model_weight_count_rounded_notation(self.n_params))
            for entry in self.entries:
                key, value, vtype = entry[:3]
                writer.add_key_value(key, value, vtype, *entry[3:])
            writer.add_file_type(FILE_TYPES[self.outtype])
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
            for name, (data, qtype) in self.tensors.items():
                writer.add_tensor(name, data, raw_dtype=qtype)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()
        return path
