"""Hugging Face `config.json` -> ModelConfig for the decoder families we run.

Llama 1/2/3.x, Qwen2/2.5 (q/k/v bias), Qwen3 (q/k RMSNorm) and MiMo (a Qwen2 backbone
with MTP layers) share one decoder; the differences are captured by a few flags here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError

# model_type -> (qkv_bias default, o_proj bias default, qk_norm)
_FAMILIES = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "mimo": "qwen2",
    "qwen3": "qwen3",
}

# "freq_factors": per-dimension divisors of the RoPE frequencies (GGUF's rope_freqs tensor)
ROPE_TYPES = ("linear", "dynamic", "llama3", "yarn", "freq_factors")

_ACTIVATIONS = {"silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_new", "relu"}


@dataclass
class ModelConfig:
    model_type: str
    family: str                      # "llama", "qwen2" or "qwen3"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    rope_theta: float
    rope_scaling: dict | None
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    hidden_act: str
    torch_dtype: str | None
    bos_token_id: int | None
    eos_token_ids: list[int] = field(default_factory=list)
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim


def _as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise ModelLoadError(f"{what} not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{what} is not valid JSON: {path}: {exc}") from exc


def rope_settings(raw: dict) -> tuple[float, dict | None]:
    """(theta, scaling) from either the classic keys or transformers' newer `rope_parameters`."""
    params = raw.get("rope_parameters")
    scaling = raw.get("rope_scaling")
    theta = raw.get("rope_theta")
    if isinstance(params, dict):
        theta = params.get("rope_theta", theta)
        if params.get("rope_type", "default") != "default":
            scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    if isinstance(scaling, dict):
        scaling = dict(scaling)
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        scaling["rope_type"] = rope_type
        scaling.pop("type", None)
        if rope_type == "default":
            scaling = None
    else:
        scaling = None
    return float(theta if theta is not None else 10000.0), scaling


def config_from_dict(raw: dict, source: str = "config.json") -> ModelConfig:
    model_type = raw.get("model_type")
    family = _FAMILIES.get(model_type)
    if family is None:
        raise ModelLoadError(
            f"{source}: unsupported model_type {model_type!r}; supported: {', '.join(sorted(_FAMILIES))}")
    try:
        hidden = int(raw["hidden_size"])
        heads = int(raw["num_attention_heads"])
        cfg = ModelConfig(
            model_type=model_type,
            family=family,
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(raw["intermediate_size"]),
            num_hidden_layers=int(raw["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
            rope_theta=0.0,
            rope_scaling=None,
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", family != "llama")),
            qkv_bias=bool(raw.get("attention_bias", family == "qwen2")),
            o_bias=bool(raw.get("attention_bias", False)) and family != "qwen2",
            mlp_bias=bool(raw.get("mlp_bias", False)),
            qk_norm=family == "qwen3",
            hidden_act=str(raw.get("hidden_act", "silu")),
            torch_dtype=raw.get("torch_dtype") or raw.get("dtype"),
            bos_token_id=raw.get("bos_token_id"),
            eos_token_ids=_as_id_list(raw.get("eos_token_id")),
            raw=raw,
        )
    except KeyError as exc:
        raise ModelLoadError(f"{source}: missing required key {exc.args[0]!r}") from exc
    except (TypeError, ValueError) as exc:
        raise ModelLoadError(f"{source}: invalid value: {exc}") from exc
    if family == "qwen2" and raw.get("attention_bias") is None:
        cfg.qkv_bias = True          # Qwen2 always has q/k/v bias, o_proj none
    if family == "qwen2" and raw.get("use_sliding_window"):
        raise ModelLoadError(f"{source}: use_sliding_window=true is not supported")
    if cfg.hidden_act not in _ACTIVATIONS:
        raise ModelLoadError(f"{source}: unsupported hidden_act {cfg.hidden_act!r}")
    if cfg.num_attention_heads % cfg.num_key_value_heads:
        raise ModelLoadError(f"{source}: num_attention_heads must be a multiple of num_key_value_heads")
    cfg.rope_theta, cfg.rope_scaling = rope_settings(raw)
    if cfg.rope_scaling and cfg.rope_scaling["rope_type"] not in ROPE_TYPES:
        raise ModelLoadError(f"{source}: unsupported rope scaling type {cfg.rope_scaling['rope_type']!r}")
    return cfg


def load_config(model_dir: str | Path) -> ModelConfig:
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelLoadError(f"model directory not found: {model_dir}")
    raw = read_json(model_dir / "config.json", "config.json")
    cfg = config_from_dict(raw, str(model_dir / "config.json"))
    gen_path = model_dir / "generation_config.json"
    if gen_path.is_file():
        gen = read_json(gen_path, "generation_config.json")
        eos = _as_id_list(gen.get("eos_token_id"))
        if eos:
            cfg.eos_token_ids = eos
        if cfg.bos_token_id is None:
            cfg.bos_token_id = gen.get("bos_token_id")
    return cfg
