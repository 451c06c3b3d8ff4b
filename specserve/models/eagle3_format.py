"""EAGLE-3 draft checkpoints in every public layout -> Eagle3Draft (docs/reference/eagle3-mtp.md §1.2-§1.5, §1.8).

| layout | architectures | layers | layer ids |
|---|---|---|---|
| EAGLE (yuhuili) | LlamaForCausalLM (+ pytorch_model.bin) | midlayer.* | none: default |
| SpecForge / NVIDIA | LlamaForCausalLMEagle3 | midlayer.* | eagle_config.eagle_aux_hidden_state_layer_ids, output-of-layer |
| vLLM / AngelSlim | Eagle3LlamaForCausalLM | midlayer.* | none: default |
| speculators | Eagle3Speculator (Llama params in transformer_layer_config) | layers.0.* | top-level ids, input-of-layer |
| GGUF (llama.cpp) | general.architecture eagle3 | blk.0.* | eagle3.target_layers, input-of-layer (gguf_drafters.py) |

`target_layer_taps` is the ONE place where layer ids become specserve taps (tap L = residual
output of target layer L, -1 = the embedding output, so "input of layer k" = tap k-1).
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

from ..errors import IncompatibleDraftError, ModelLoadError
from .config import config_from_dict, read_json
from .eagle3_model import Eagle3Draft, Eagle3Options
from .gguf_drafters import eagle3_from_gguf
from .gguf_file import is_gguf
from .loader import Checkpoint

ARCHITECTURES = {
    "LlamaForCausalLM": "eagle",
    "LlamaForCausalLMEagle3": "specforge",
    "Eagle3LlamaForCausalLM": "vllm",
    "Eagle3Speculator": "speculators",
}
LAYER_PARAMS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings",
                "hidden_act", "attention_bias", "mlp_bias", "vocab_size")


def target_layer_taps(raw: dict, n_target_layers: int) -> tuple[int, ...]:
    """Target taps an EAGLE-3 config asks for, converted from its layer-id convention.

    * top-level `eagle_aux_hidden_state_layer_ids` (speculators, vLLM): input-of-layer ids, i.e.
      Hugging Face `hidden_states` indices k (k = 0 embeddings, k = N the last layer's output);
    * nested `eagle_config.eagle_aux_hidden_state_layer_ids` (SpecForge, SGLang): output-of-layer ids;
    * absent: the inputs of layers 2, N//2 and N-3, as every EAGLE-3 implementation defaults to.
    """
    top = raw.get("eagle_aux_hidden_state_layer_ids")
    nested = (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if top:
        inputs_of = [int(i) for i in top]
    elif nested:
        inputs_of = [int(i) + 1 for i in nested]
    else:
        n = n_target_layers
        inputs_of = [2, n // 2, n - 3]
    bad = [i for i in inputs_of if not 0 <= i <= n_target_layers]
    if bad:
        raise IncompatibleDraftError(
            f"EAGLE-3 draft reads target hidden states {inputs_of} (as inputs of layers), but the target has "
            f"{n_target_layers} layers: valid inputs are 0..{n_target_layers}")
    return tuple(i - 1 for i in inputs_of)


def _flag(raw: dict, key: str, default: bool = False) -> bool:
    value = raw.get(key)
    if value is None:
        value = (raw.get("eagle_config") or {}).get(key)
    return default if value is None else bool(value)


def read_weights(draft_dir: Path) -> dict[str, torch.Tensor]:
    """All tensors of a draft folder: safetensors (single/sharded) or an EAGLE pytorch_model.bin."""
    if any(draft_dir.glob("*.safetensors")) or (draft_dir / "model.safetensors.index.json").is_file():
        ckpt = Checkpoint(draft_dir)
        return {name: ckpt.get(name) for name in ckpt.keys()}
    path = draft_dir / "pytorch_model.bin"
    if not path.is_file():
        raise ModelLoadError(f"no weights in {draft_dir}: expected model.safetensors or pytorch_model.bin")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:   # torch raises several unrelated types for corrupt files
        raise ModelLoadError(f"cannot read {path}: {exc}") from exc
    if not isinstance(state, dict):
        raise ModelLoadError(f"{path} does not hold a state dict")
    return state


def canonical_name(name: str) -> str | None:
    """Map a checkpoint tensor name to Eagle3Draft's parameter name (None: not used at inference)."""
    if name.startswith("model."):
        name = name[len("model."):]
    name = name.replace("midlayer.", "layers.0.")
    match = re.match(r"additional_layers\.(\d+)\.", name)
    if match:
        name = f"layers.{int(match.group(1)) + 1}." + name[match.end():]
    if name == "draft_id_to_target_id":
        name = "d2t"
    return None if name == "t2d" else name


def read_source(draft_dir: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config dict, tensors under Eagle3Draft's names) of a draft folder or GGUF file."""
    if is_gguf(draft_dir):
        return eagle3_from_gguf(draft_dir)
    raw = read_json(draft_dir / "config.json", "EAGLE-3 draft config.json")
    state = {}
    for name, tensor in read_weights(draft_dir).items():
        canon = canonical_name(name)
        if canon is not None:
            state[canon] = tensor
    return raw, state


def load_eagle3(draft_dir: str | Path, target) -> tuple[Eagle3Draft, tuple[int, ...]]:
    """(draft head on the target's device/dtype, target taps it reads). `target` is the CausalLM."""
    draft_dir = Path(draft_dir)
    raw, state = read_source(draft_dir)
    arch = (raw.get("architectures") or ["LlamaForCausalLM"])[0]
    if arch not in ARCHITECTURES:
        raise ModelLoadError(f"{draft_dir}: architecture {arch!r} is not an EAGLE-3 draft; known: "
                             f"{', '.join(ARCHITECTURES)}")
    layer_raw = raw.get("transformer_layer_config") if arch == "Eagle3Speculator" else raw
    if not isinstance(layer_raw, dict):
        raise ModelLoadError(f"{draft_dir}/config.json: Eagle3Speculator needs a transformer_layer_config object")
    layer_ids = {int(m.group(1)) for m in (re.match(r"layers\.(\d+)\.", k) for k in state) if m}
    if 0 not in layer_ids:
        raise ModelLoadError(f"{draft_dir}: no EAGLE-3 decoder layer (midlayer.* or layers.0.*) in the weights")
    n_layers = max(layer_ids) + 1      # trust the tensors: some configs copy the target's layer count
    params = {k: layer_raw[k] for k in LAYER_PARAMS if k in layer_raw}
    model_type = layer_raw.get("model_type") if layer_raw.get("model_type") in ("llama", "qwen3") else "llama"
    cfg = config_from_dict({**params, "model_type": model_type, "num_hidden_layers": n_layers,
                            "tie_word_embeddings": False, "attention_bias": layer_raw.get("attention_bias", False)},
                           str(draft_dir / "config.json"))
    tcfg = target.config
    where = f"EAGLE-3 draft {draft_dir}"
    if cfg.vocab_size != tcfg.vocab_size:
        raise IncompatibleDraftError(f"{where}: vocab_size {cfg.vocab_size} differs from the target's "
                                     f"{tcfg.vocab_size}")
    declared_ht = raw.get("target_hidden_size")
    if declared_ht is not None and int(declared_ht) != tcfg.hidden_size:
        raise IncompatibleDraftError(f"{where}: target_hidden_size {declared_ht} but the target's hidden size is "
                                     f"{tcfg.hidden_size}")
    use_aux = _flag(raw, "use_aux_hidden_state", True)
    taps = target_layer_taps(raw, tcfg.num_hidden_layers) if use_aux else ()
    fc = state.get("fc.weight")
    if use_aux:
        if fc is None:
            raise ModelLoadError(f"{where}: tensor 'fc.weight' missing")
        expected = len(taps) * tcfg.hidden_size
        if fc.shape[1] != expected or fc.shape[0] != cfg.hidden_size:
            raise IncompatibleDraftError(
                f"{where}: fc.weight has shape {tuple(fc.shape)} but this target needs "
                f"[{cfg.hidden_size}, {len(taps)} x {tcfg.hidden_size} = {expected}] (draft hidden size "
                f"{cfg.hidden_size}, {len(taps)} target features of hidden size {tcfg.hidden_size})")
    elif cfg.hidden_size != tcfg.hidden_size:
        raise IncompatibleDraftError(f"{where}: use_aux_hidden_state=false needs the draft hidden size "
                                     f"{cfg.hidden_size} to equal the target's {tcfg.hidden_size}")
    draft_vocab = int(raw.get("draft_vocab_size") or (layer_raw.get("draft_vocab_size") or cfg.vocab_size))
    default_nbr = arch == "Eagle3Speculator"          # speculators-trained heads normalise before the residual
    opts = Eagle3Options(
        vocab_size=cfg.vocab_size, draft_vocab_size=draft_vocab, target_hidden_size=tcfg.hidden_size,
        n_aux=max(len(taps), 1), use_aux=use_aux, fc_bias="fc.bias" in state,
        fc_norm="fc_norm.0.weight" in state, norm_before_fc="input_norm.weight" in state,
        norm_before_residual=_flag(raw, "norm_before_residual", default_nbr), norm_output=_flag(raw, "norm_output"))
    own_embedding = "embed_tokens.weight" in state
    own_head = "lm_head.weight" in state
    with torch.device("meta"):
        model = Eagle3Draft(cfg, opts, n_layers, own_embedding, own_head)
    _check_shared(model, target, where)
    load_state(model, state, where, target.dtype)
    model.to(device=target.device)
    model.eval().requires_grad_(False)
    if not own_embedding:
        model.shared_embedding = target.model.embed_tokens.weight.detach()
    if not own_head:
        model.shared_lm_head = target.lm_head_weight.detach()
    return model, taps


def _check_shared(model: Eagle3Draft, target, where: str) -> None:
    cfg, tcfg = model.config, target.config
    if model.embed_tokens is None and cfg.hidden_size != tcfg.hidden_size:
        raise IncompatibleDraftError(f"{where}: ships no embed_tokens and its hidden size {cfg.hidden_size} differs "
                                     f"from the target's {tcfg.hidden_size}, so the target's cannot be used")
    if model.lm_head is None and (model.opts.draft_vocab_size != tcfg.vocab_size
                                  or cfg.hidden_size != tcfg.hidden_size):
        raise IncompatibleDraftError(f"{where}: ships no lm_head and its vocabulary/hidden size differ from the "
                                     "target's, so the target's cannot be used")


def load_state(model: Eagle3Draft, state: dict[str, torch.Tensor], where: str, dtype: torch.dtype) -> None:
    wanted = model.state_dict()
    values = {}
    for name, param in wanted.items():
        tensor = state.get(name)
        if tensor is None:
            if name == "d2t" and model.opts.draft_vocab_size == model.opts.vocab_size:
                tensor = torch.zeros(model.opts.draft_vocab_size, dtype=torch.int64)
            else:
                raise ModelLoadError(f"{where}: tensor {name!r} missing")
        if tuple(tensor.shape) != tuple(param.shape):
            raise IncompatibleDraftError(f"{where}: tensor {name!r} has shape {tuple(tensor.shape)}, expected "
                                         f"{tuple(param.shape)}")
        values[name] = tensor.to(torch.int64) if name == "d2t" else tensor.to(dtype)
    ids = torch.arange(model.opts.draft_vocab_size) + values["d2t"]
    if ids.min() < 0 or ids.max() >= model.opts.vocab_size or torch.unique(ids).numel() != ids.numel():
        raise IncompatibleDraftError(f"{where}: d2t maps draft ids outside the target vocabulary "
                                     f"(0..{model.opts.vocab_size - 1}) or onto the same target id twice")
    model.load_state_dict(values, assign=True)


def export_specforge(model: Eagle3Draft, taps: tuple[int, ...], n_target_layers: int) -> tuple[dict, dict]:
    """(config.json dict, tensors) in the SpecForge `LlamaForCausalLMEagle3` layout (output-of-layer ids)."""
    cfg, opts = model.config, model.opts
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": len(model.layers), "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
        "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta, "rope_scaling": cfg.rope_scaling,
        "max_position_embeddings": cfg.max_position_embeddings, "hidden_act": cfg.hidden_act,
        "vocab_size": opts.vocab_size, "draft_vocab_size": opts.draft_vocab_size,
        "target_hidden_size": opts.target_hidden_size, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "norm_before_residual": opts.norm_before_residual, "norm_output": opts.norm_output,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(taps), "use_aux_hidden_state": True},
    }
    assert target_layer_taps(config, n_target_layers) == tuple(taps)
    tensors = {}
    for name, tensor in model.state_dict().items():
        out = name.replace("layers.0.", "midlayer.", 1) if name.startswith("layers.0.") else name
        tensors[out] = tensor.detach().contiguous() if name == "d2t" else tensor.detach().to(torch.bfloat16).contiguous()
    return config, tensors
