"""One .gguf file, read with the `gguf` package: metadata values and tensors as torch tensors.

Every problem (missing, corrupt or truncated file, a tensor type specserve cannot read) is a
ModelLoadError that names the file and the problem. Supported tensor types: F32, F16, BF16 and
Q8_0 (dequantized exactly to float32: a float16 scale times an int8 fits float32's mantissa),
plus the integer tensors drafters carry (EAGLE-3's `d2t` is I64).
"""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch

from ..errors import ModelLoadError

GGUF_SUFFIX = ".gguf"
_MAGIC = b"GGUF"
_REQUIRED = object()
_Q = gguf.GGMLQuantizationType
SUPPORTED_TYPES = (_Q.F32, _Q.F16, _Q.BF16, _Q.Q8_0, _Q.I64, _Q.I32)


def is_gguf(path) -> bool:
    """Whether a model path names a GGUF file (by its suffix; folders are Hugging Face layout)."""
    return path is not None and str(path).lower().endswith(GGUF_SUFFIX)


def _float32_value(value: float) -> float:
    """The shortest decimal that rounds to a stored float32 (1e-06, not 9.999999974752427e-07)."""
    return float(str(np.float32(value)))


class GgufFile:
    """Metadata and tensors of one GGUF file; tensors are read on demand."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise ModelLoadError(f"GGUF file not found: {self.path}")
        with open(self.path, "rb") as handle:
            magic = handle.read(4)
        if magic != _MAGIC:
            raise ModelLoadError(f"{self.path} is not a GGUF file (it does not start with the GGUF magic bytes)")
        try:
            self.reader = gguf.GGUFReader(self.path)
        except Exception as exc:  # the reader raises ValueError, IndexError, ... for damaged files
            raise ModelLoadError(f"cannot read GGUF file {self.path}: it is corrupt or truncated (the gguf reader "
                                 f"says: {exc})") from exc
        self.tensors = {t.name: t for t in self.reader.tensors}
        size = self.path.stat().st_size
        for tensor in self.reader.tensors:
            if tensor.data_offset + tensor.n_bytes > size:
                raise ModelLoadError(f"GGUF file {self.path} is truncated: tensor {tensor.name!r} ends at byte "
                                     f"{tensor.data_offset + tensor.n_bytes}, the file has {size}")
            if tensor.tensor_type not in SUPPORTED_TYPES:
                raise ModelLoadError(
                    f"{self.path}: tensor {tensor.name!r} has type {tensor.tensor_type.name}, which specserve cannot "
                    f"read; supported tensor types: {', '.join(t.name for t in SUPPORTED_TYPES)}")

    # ------------------------------------------------------------------ metadata
    def __contains__(self, key: str) -> bool:
        return key in self.reader.fields

    def value(self, key: str, default=_REQUIRED):
        """A metadata value as a Python value (float32 values as their shortest decimal)."""
        field = self.reader.fields.get(key)
        if field is None:
            if default is _REQUIRED:
                raise ModelLoadError(f"{self.path}: metadata key {key!r} is missing")
            return default
        try:
            value = field.contents()
        except Exception as exc:
            raise ModelLoadError(f"{self.path}: cannot read metadata key {key!r}: {exc}") from exc
        if field.types and field.types[-1] == gguf.GGUFValueType.FLOAT32:
            value = [_float32_value(v) for v in value] if isinstance(value, list) else _float32_value(value)
        return value

    @property
    def architecture(self) -> str:
        return str(self.value("general.architecture"))

    # ------------------------------------------------------------------ tensors
    def shape(self, name: str) -> tuple[int, ...]:
        """A tensor's shape in PyTorch order (rows first), from the header."""
        return tuple(int(n) for n in reversed(self._tensor(name).shape))

    def _tensor(self, name: str):
        tensor = self.tensors.get(name)
        if tensor is None:
            raise ModelLoadError(f"tensor {name!r} missing from GGUF file {self.path}")
        return tensor

    def tensor(self, name: str) -> torch.Tensor:
        """A tensor copied out of the file: float32, float16 or bfloat16 as stored, Q8_0 dequantized to float32."""
        tensor = self._tensor(name)
        data = tensor.data
        try:
            if tensor.tensor_type == _Q.BF16:
                out = torch.from_numpy(np.ascontiguousarray(data).view(np.int16).copy()).view(torch.bfloat16)
            elif tensor.tensor_type == _Q.Q8_0:
                out = torch.from_numpy(gguf.quants.dequantize(np.asarray(data), _Q.Q8_0))
            else:
                out = torch.from_numpy(np.array(data))
            return out.reshape(self.shape(name))
        except (ValueError, RuntimeError) as exc:
            raise ModelLoadError(f"cannot read tensor {name!r} from {self.path}: {exc}") from exc
