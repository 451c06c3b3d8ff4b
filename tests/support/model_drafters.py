"""Tiny random drafter checkpoints written in the public layouts (real key names and config keys)."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from specserve.models.config import config_from_dict
from specserve.models.eagle3_model import Eagle3Draft, Eagle3Options
from specserve.models.mtp_head import MtpHead
from specserve.models.transformer import init_weights

LAYER = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 512,
         "hidden_act": "silu"}


def _target_config(target_dir: Path) -> dict:
    return json.loads((Path(target_dir) / "config.json").read_text())


def random_eagle3(target_dir: Path, seed: int = 0, std: float = 0.1, hidden: int = 64, draft_vocab: int | None = None,
                  n_aux: int = 3, n_layers: int = 1, own_embedding: bool = False, fc_norm: bool = False,
                  norm_before_residual: bool = False, norm_output: bool = False, model_type: str = "llama",
                  fc_bias: bool = False, norm_before_fc: bool = False):
    """(Eagle3Draft with random weights, its layer config dict)."""
    tcfg = _target_config(target_dir)
    vocab = tcfg["vocab_size"]
    layer = {**LAYER, "hidden_size": hidden, "vocab_size": vocab, "model_type": model_type}
    cfg = config_from_dict({**layer, "num_hidden_layers": n_layers, "tie_word_embeddings": False,
                            "attention_bias": False})
    opts = Eagle3Options(vocab_size=vocab, draft_vocab_size=draft_vocab or vocab,
                         target_hidden_size=tcfg["hidden_size"], n_aux=n_aux, fc_bias=fc_bias, fc_norm=fc_norm,
                         norm_before_fc=norm_before_fc, norm_before_residual=norm_before_residual,
                         norm_output=norm_output)
    model = Eagle3Draft(cfg, opts, n_layers, own_embedding, own_lm_head=True)
    init_weights(model, std=std, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():                     # non-trivial norm weights, so a swapped norm is caught
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or ".norm" in name or "fc_norm" in name:
                p.mul_(1 + 0.5 * torch.rand(p.shape, generator=gen))
    if opts.draft_vocab_size < vocab:
        used = torch.sort(torch.randperm(vocab, generator=gen)[:opts.draft_vocab_size]).values
        model.d2t.copy_(used - torch.arange(opts.draft_vocab_size))
    return model, layer


def write_eagle3(out: Path, target_dir: Path, layout: str = "specforge", layer_ids=None, **kwargs) -> Path:
    """Write a random EAGLE-3 draft in `layout`: eagle | specforge | vllm | speculators.

    layer_ids: for specforge, nested output-of-layer ids; for speculators, top-level input-of-layer ids.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model, layer = random_eagle3(target_dir, **kwargs)
    opts = model.opts
    tensors = {}
    for name, tensor in model.state_dict().items():
        stored = name
        if layout != "speculators" and name.startswith("layers.0."):
            stored = "midlayer." + name[len("layers.0."):]
        tensors[stored] = tensor.detach().clone().contiguous()
    tensors["t2d"] = torch.zeros(opts.vocab_size, dtype=torch.bool)
    tensors["t2d"][model.target_ids()] = True
    flags = {"norm_before_residual": opts.norm_before_residual, "norm_output": opts.norm_output}
    common = {**layer, "num_hidden_layers": 1, "draft_vocab_size": opts.draft_vocab_size,
              "tie_word_embeddings": False, "torch_dtype": "float32"}
    if layout == "eagle":
        config = {"architectures": ["LlamaForCausalLM"], **common, **flags}
        torch.save(tensors, out / "pytorch_model.bin")
    else:
        if layout == "specforge":
            config = {"architectures": ["LlamaForCausalLMEagle3"], **common, **flags,
                      "target_hidden_size": opts.target_hidden_size,
                      "eagle_config": {"use_aux_hidden_state": True}}
            if opts.fc_norm:
                config["fc_norm"] = True
            if layer_ids is not None:
                config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(layer_ids)
        elif layout == "vllm":
            config = {"architectures": ["Eagle3LlamaForCausalLM"], **common, **flags, "target_model_type": "qwen3"}
        elif layout == "speculators":
            config = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
                      "transformer_layer_config": {**common, "architectures": ["LlamaForCausalLM"]},
                      "draft_vocab_size": opts.draft_vocab_size, "target_hidden_size": None,
                      "norm_before_residual": opts.norm_before_residual,
                      "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                             "proposal_methods": [{"proposal_type": "greedy",
                                                                   "speculative_tokens": 3}],
                                             "verifier": {"name_or_path": str(target_dir)}}}
            if layer_ids is not None:
                config["eagle_aux_hidden_state_layer_ids"] = list(layer_ids)
        else:
            raise ValueError(layout)
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config))
    return out


def add_mtp(target_dir: Path, layout: str = "deepseek", seed: int = 5, std: float = 0.1,
            own_head: bool = False) -> dict[str, torch.Tensor]:
    """Add a random MTP head to a target checkpoint folder (in place); returns the head tensors written."""
    target_dir = Path(target_dir)
    raw = _target_config(target_dir)
    cfg = config_from_dict(raw)
    head = MtpHead(cfg)
    init_weights(head, std=std, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    n = cfg.num_hidden_layers
    if layout == "deepseek":
        prefix = f"model.layers.{n}."
        rename = {"enorm.weight": "enorm.weight", "hnorm.weight": "hnorm.weight", "eh_proj.weight": "eh_proj.weight",
                  "out_norm.weight": "shared_head.norm.weight"}
    else:
        prefix = "model.mtp_layers.0."
        rename = {"enorm.weight": "token_layernorm.weight", "hnorm.weight": "hidden_layernorm.weight",
                  "eh_proj.weight": "input_proj.weight", "out_norm.weight": "final_layernorm.weight"}
    head_tensors = {}
    for name, tensor in head.state_dict().items():
        stored = rename.get(name, name[len("block."):] if name.startswith("block.") else name)
        t = tensor.detach().clone()
        if name.endswith("norm.weight"):
            t = t * (1 + 0.5 * torch.rand(t.shape, generator=gen))
        head_tensors[prefix + stored] = t.contiguous()
    if own_head and layout == "deepseek":
        head_tensors[prefix + "shared_head.head.weight"] = torch.randn(cfg.vocab_size, cfg.hidden_size,
                                                                        generator=gen) * 0.2
    if layout == "mimo":
        raw["model_type"], raw["architectures"] = "mimo", ["MiMoForCausalLM"]
    state = load_file(str(target_dir / "model.safetensors"))
    state.update(head_tensors)
    save_file(state, str(target_dir / "model.safetensors"), metadata={"format": "pt"})
    raw["num_nextn_predict_layers"] = 1
    (target_dir / "config.json").write_text(json.dumps(raw))
    return head_tensors


def perturbed_copy(src: Path, out: Path, noise: float, seed: int = 0, **config_overrides) -> Path:
    """A copy of a model folder (tokenizer included) with Gaussian noise added to every weight:
    a draft model that agrees with the target often but not always."""
    import shutil
    out = Path(out)
    shutil.copytree(src, out)
    gen = torch.Generator().manual_seed(seed)
    state = load_file(str(out / "model.safetensors"))
    state = {k: (v + noise * torch.randn(v.shape, generator=gen)).contiguous() for k, v in state.items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    if config_overrides:
        raw = json.loads((out / "config.json").read_text())
        raw.update(config_overrides)
        (out / "config.json").write_text(json.dumps(raw))
    return out
