"""safetensors checkpoints (one file or a sharded index) -> tensors, with clear errors."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from ..errors import ModelLoadError

DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "f32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "f16": torch.float16, "half": torch.float16,
}


def parse_dtype(name: str | torch.dtype | None, default: torch.dtype = torch.float32) -> torch.dtype:
    if name is None or name == "auto":
        return default
    if isinstance(name, torch.dtype):
        return name
    try:
        return DTYPES[str(name).lower()]
    except KeyError:
        raise ModelLoadError(f"unsupported dtype {name!r}; use one of float32, bfloat16, float16") from None


class Checkpoint:
    """Lazy view over the safetensors files of one model folder.

    Tensors are read on demand so that, for example, an MTP head can pick its own
    tensors out of a target checkpoint without the target loading them.
    """

    def __init__(self, model_dir: str | Path):
        self.model_dir = Path(model_dir)
        self.weight_map: dict[str, Path] = {}
        index = self.model_dir / "model.safetensors.index.json"
        single = self.model_dir / "model.safetensors"
        if index.is_file():
            try:
                mapping = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (json.JSONDecodeError, KeyError, UnicodeDecodeError) as exc:
                raise ModelLoadError(f"corrupt index file {index}: {exc}") from exc
            for name, shard in mapping.items():
                self.weight_map[name] = self.model_dir / shard
            missing = sorted({p for p in self.weight_map.values() if not p.is_file()})
            if missing:
                raise ModelLoadError(f"{index} lists shard(s) that do not exist: {', '.join(map(str, missing))}")
        elif single.is_file():
            for name in self._keys_of(single):
                self.weight_map[name] = single
        else:
            files = sorted(self.model_dir.glob("*.safetensors"))
            if not files:
                raise ModelLoadError(
                    f"no weights in {self.model_dir}: expected model.safetensors or model.safetensors.index.json")
            for path in files:
                for name in self._keys_of(path):
                    self.weight_map[name] = path
        self._handles: dict[Path, object] = {}

    @staticmethod
    def _keys_of(path: Path) -> list[str]:
        try:
            with safe_open(str(path), framework="pt") as handle:
                return list(handle.keys())
        except (SafetensorError, OSError, ValueError) as exc:
            raise ModelLoadError(f"cannot read safetensors file {path}: {exc}") from exc

    def _handle(self, path: Path):
        if path not in self._handles:
            try:
                self._handles[path] = safe_open(str(path), framework="pt")
            except (SafetensorError, OSError, ValueError) as exc:
                raise ModelLoadError(f"cannot read safetensors file {path}: {exc}") from exc
        return self._handles[path]

    def __contains__(self, name: str) -> bool:
        return name in self.weight_map

    def keys(self) -> list[str]:
        return list(self.weight_map)

    def shape(self, name: str) -> tuple[int, ...]:
        """A tensor's shape, read from the file header without loading the data."""
        path = self.weight_map.get(name)
        if path is None:
            raise ModelLoadError(f"tensor {name!r} missing from checkpoint {self.model_dir}")
        return tuple(self._handle(path).get_slice(name).get_shape())

    def get(self, name: str, dtype: torch.dtype | None = None, shape: tuple | None = None) -> torch.Tensor:
        path = self.weight_map.get(name)
        if path is None:
            raise ModelLoadError(f"tensor {name!r} missing from checkpoint {self.model_dir}")
        try:
            tensor = self._handle(path).get_tensor(name)
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise ModelLoadError(f"cannot read tensor {name!r} from {path}: {exc}") from exc
        if shape is not None and tuple(tensor.shape) != tuple(shape):
            raise ModelLoadError(
                f"tensor {name!r} in {path} has shape {tuple(tensor.shape)}, expected {tuple(shape)}")
        if dtype is not None:
            tensor = tensor.to(dtype)
        return tensor

    def optional(self, name: str, dtype: torch.dtype | None = None, shape: tuple | None = None):
        return self.get(name, dtype, shape) if name in self else None
