"""Which decoder family a DFlash / DSpark draft stack is built from.

The public drafts are Qwen3-style stacks, but the KV-injection design works with any of the
decoder families the target path runs, so three backbones are served:

  qwen3   q/k RMSNorm per head, no bias (the z-lab / DeepSpec / SpecForge releases);
  llama   no q/k norm, no bias;
  qwen2   no q/k norm, bias on q/k/v (none on o_proj).

The config's `model_type` decides when it is llama or qwen2. A `model_type` of qwen3 is
taken as such only when the checkpoint has the q/k norms, because the public formats build
their configs from a Qwen3 template whatever the stack holds; the tensors decide otherwise
(and for any other `model_type`): `layers.0.self_attn.q_norm.weight` -> qwen3,
`layers.0.self_attn.q_proj.bias` -> qwen2, else llama. Configs written by specserve
(`draft_method` key) state their backbone on purpose, so for them a qwen3 without q/k norms is
an error too. After that every layer's attention tensors must agree with the chosen backbone;
a disagreement is a ModelLoadError naming the tensor.
"""
from __future__ import annotations

import copy

from ..errors import ModelLoadError
from .config import ModelConfig

DRAFT_ARCHS = ("qwen3", "llama", "qwen2")
_STYLES = {"qwen3": "Qwen3-style (q/k norm)", "llama": "Llama-style (no q/k norm)",
           "qwen2": "Qwen2-style (no q/k norm, q/k/v bias)"}
Q_NORM = "layers.{}.self_attn.q_norm.weight"
K_NORM = "layers.{}.self_attn.k_norm.weight"
QKV_BIAS = tuple(f"layers.{{}}.self_attn.{p}_proj.bias" for p in "qkv")
O_BIAS = "layers.{}.self_attn.o_proj.bias"


def arch_from_tensors(key_map: dict) -> str:
    if Q_NORM.format(0) in key_map:
        return "qwen3"
    if QKV_BIAS[0].format(0) in key_map:
        return "qwen2"
    return "llama"


def resolve_backbone_config(raw: dict, key_map: dict, source: str) -> tuple[dict, str]:
    """A copy of the draft config with `model_type` (and, when the tensors decide,
    `attention_bias`) set for the draft stack, and how it was decided: "config" or "tensors"."""
    declared = raw.get("model_type")
    found = arch_from_tensors(key_map)
    out = copy.deepcopy(raw)
    if declared in ("llama", "qwen2") or (declared == "qwen3" and (found == "qwen3" or "draft_method" in raw)):
        if found == "qwen3" and declared != "qwen3":
            raise ModelLoadError(f"{source}: model_type {declared!r} describes a {_STYLES[declared]} draft, but the "
                                 f"checkpoint has {Q_NORM.format(0)!r} (a Qwen3-style draft): set model_type qwen3")
        if declared == "qwen3" and found != "qwen3":
            raise ModelLoadError(f"{source}: model_type 'qwen3' describes a Qwen3-style draft, but tensor "
                                 f"{Q_NORM.format(0)!r} is missing from the checkpoint (a {_STYLES[found]} stack: "
                                 f"set model_type {found})")
        return out, "config"
    out["model_type"] = found
    out["attention_bias"] = QKV_BIAS[0].format(0) in key_map     # a template's attention_bias is not evidence
    return out, "tensors"


def check_backbone_tensors(cfg: ModelConfig, key_map: dict, where: str) -> None:
    """Every layer's q/k norms and attention biases present exactly when the backbone has them."""
    what = f"a {_STYLES[cfg.family]} draft (model_type {cfg.model_type}, attention_bias {str(cfg.qkv_bias).lower()})"
    expected = [(Q_NORM, cfg.qk_norm), (K_NORM, cfg.qk_norm), (O_BIAS, cfg.o_bias)]
    expected += [(name, cfg.qkv_bias) for name in QKV_BIAS]
    for layer in range(cfg.num_hidden_layers):
        for pattern, wanted in expected:
            key = pattern.format(layer)
            if wanted and key not in key_map:
                raise ModelLoadError(f"{where}: the config describes {what}, but tensor {key!r} is missing")
            if not wanted and key in key_map:
                raise ModelLoadError(f"{where}: the config describes {what}, but the checkpoint has {key!r}")
