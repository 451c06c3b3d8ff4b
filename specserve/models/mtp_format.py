"""MTP heads from a target checkpoint (or a head-only folder merged over it) -> MtpHead.

Layouts (docs/reference/eagle3-mtp.md §3.1, §3.3), N = the target's num_hidden_layers:
  * DeepSeek-style nextn on Llama / Qwen2 / Qwen3 backbones: `model.layers.{N}.{enorm, hnorm,
    eh_proj, shared_head.norm, shared_head.head, embed_tokens}` plus a decoder block under the
    same prefix; shared_head.* and embed_tokens are optional (the target's are used);
  * MiMo (`model_type: mimo`): `model.mtp_layers.0.{token_layernorm, hidden_layernorm,
    input_proj, final_layernorm}` plus a Qwen2 block under the same prefix; [hidden, embedding].
Only the first head is used; it is reused for every chained step.
A head-only folder (`-md DIR`) holds just the head tensors (and a config.json that must
describe the same backbone); anything it lacks is read from the target checkpoint.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..errors import IncompatibleDraftError, ModelLoadError
from .config import read_json
from .gguf_file import is_gguf
from .loader import Checkpoint
from .mtp_head import MtpHead

DEEPSEEK_NAMES = {"enorm.weight": "enorm.weight", "hnorm.weight": "hnorm.weight", "eh_proj.weight": "eh_proj.weight",
                  "out_norm.weight": "shared_head.norm.weight"}
MIMO_NAMES = {"enorm.weight": "token_layernorm.weight", "hnorm.weight": "hidden_layernorm.weight",
              "eh_proj.weight": "input_proj.weight", "out_norm.weight": "final_layernorm.weight"}
SAME_BACKBONE_KEYS = ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
                      "num_key_value_heads", "intermediate_size")


class _Sources:
    """Checkpoints searched in order (a head-only folder first, then the target)."""

    def __init__(self, checkpoints: list[Checkpoint]):
        self.checkpoints = checkpoints

    def find(self, name: str) -> Checkpoint | None:
        return next((c for c in self.checkpoints if name in c), None)

    def get(self, name: str, dtype, shape, where: str) -> torch.Tensor:
        ckpt = self.find(name)
        if ckpt is None:
            raise ModelLoadError(f"{where}: MTP tensor {name!r} missing")
        try:
            return ckpt.get(name, dtype, shape)
        except ModelLoadError as exc:
            raise IncompatibleDraftError(f"{where}: {exc}") from None


def _check_head_config(head_dir: Path, target) -> None:
    if not (head_dir / "config.json").is_file():
        return
    raw = read_json(head_dir / "config.json", "MTP head config.json")
    traw = target.config.raw
    for key in SAME_BACKBONE_KEYS:
        if key in raw and key in traw and raw[key] != traw[key]:
            raise IncompatibleDraftError(f"MTP head {head_dir}: {key} = {raw[key]} but the target has {traw[key]}")


def load_mtp_head(target, head_dir: str | Path | None = None) -> MtpHead:
    cfg = target.config
    checkpoints = []
    if head_dir is not None:
        head_dir = Path(head_dir)
        if is_gguf(head_dir):
            raise ModelLoadError(f"{head_dir}: draft-mtp reads MTP heads from safetensors folders only; GGUF has no "
                                 "MTP head for llama / qwen2 / qwen3 models (llama.cpp cannot run one either)")
        _check_head_config(head_dir, target)
        checkpoints.append(Checkpoint(head_dir))
    checkpoints.append(target.checkpoint)
    sources = _Sources(checkpoints)
    where = f"MTP head of {head_dir or target.model_dir}"
    n = cfg.num_hidden_layers
    if sources.find(f"model.layers.{n}.eh_proj.weight"):
        prefix, names, hidden_first = f"model.layers.{n}.", DEEPSEEK_NAMES, False
    elif sources.find("model.mtp_layers.0.input_proj.weight"):
        prefix, names, hidden_first = "model.mtp_layers.0.", MIMO_NAMES, True
    else:
        raise IncompatibleDraftError(
            f"{head_dir or target.model_dir} has no MTP head: expected model.layers.{n}.eh_proj.weight "
            "(DeepSeek-style nextn tensors) or model.mtp_layers.0.input_proj.weight (MiMo)")
    with torch.device("meta"):
        head = MtpHead(cfg, hidden_first)
    values = {}
    for name, param in head.state_dict().items():
        stored = prefix + (names[name] if name in names else name[len("block."):])
        if name == "out_norm.weight" and sources.find(stored) is None:
            stored = "model.norm.weight"           # DeepSeek: shared_head.norm is optional
        values[name] = sources.get(stored, target.dtype, tuple(param.shape), where)
    head.load_state_dict(values, assign=True)
    head.to(device=target.device)
    head.eval().requires_grad_(False)
    v, hidden = cfg.vocab_size, cfg.hidden_size
    own_embed, own_head = prefix + "embed_tokens.weight", prefix + "shared_head.head.weight"
    head.embedding = (sources.get(own_embed, target.dtype, (v, hidden), where).to(target.device)
                      if sources.find(own_embed) else target.model.embed_tokens.weight.detach())
    head.head = (sources.get(own_head, target.dtype, (v, hidden), where).to(target.device)
                 if sources.find(own_head) else target.lm_head_weight.detach())
    return head


def save_head_folder(head: MtpHead, target_dir: Path, out_dir: Path) -> None:
    """A head-only folder for `-md`: the target's config plus num_nextn_predict_layers, and the
    DeepSeek-style `model.layers.{N}.*` tensors of the head (embedding and lm_head stay shared)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = json.loads((target_dir / "config.json").read_text(encoding="utf-8"))
    raw["num_nextn_predict_layers"] = 1
    (out_dir / "config.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    prefix = f"model.layers.{head.config.num_hidden_layers}."
    tensors = {}
    for name, tensor in head.state_dict().items():
        stored = DEEPSEEK_NAMES.get(name, name[len("block."):] if name.startswith("block.") else name)
        tensors[prefix + stored] = tensor.detach().to(torch.bfloat16).contiguous()
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
