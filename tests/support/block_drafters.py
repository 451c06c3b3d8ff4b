"""Tiny random DFlash / DSpark draft checkpoints written in each public format, with the real
key names and config-key variants (docs/reference/dflash-dspark.md §1.1-§1.3, §3.6)."""
from __future__ import annotations

import collections
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from specserve.models.block_drafter import BlockDrafter
from specserve.models.block_drafter_format import BONUS_ANCHOR, new_block_drafter_config
from specserve.models.config import load_config
from specserve.models.loader import Checkpoint

FORMATS = ("zlab", "deepspec", "specforge", "specforge-legacy", "specserve")
DRAFT_ARCHS = ("qwen3", "llama", "qwen2")


def _backbone_keys(shape) -> dict:
    b = shape.backbone
    return {"hidden_size": b.hidden_size, "intermediate_size": b.intermediate_size,
            "num_hidden_layers": b.num_hidden_layers, "num_attention_heads": b.num_attention_heads,
            "num_key_value_heads": b.num_key_value_heads, "head_dim": b.head_dim, "hidden_act": "silu",
            "rms_norm_eps": b.rms_norm_eps, "max_position_embeddings": b.max_position_embeddings,
            "attention_bias": b.qkv_bias, "attention_dropout": 0.0, "tie_word_embeddings": False,
            "vocab_size": b.vocab_size, "dtype": "float32",
            "layer_types": ["full_attention"] * b.num_hidden_layers, "use_sliding_window": False,
            "sliding_window": None}


def random_block_drafter(target_dir, *, markov_rank=0, confidence=False, block_size=4, num_layers=2,
                         target_layer_ids=None, layout=None, seed=0, std=0.1, mask_token_id=1,
                         draft_arch="qwen3") -> BlockDrafter:
    """draft_arch: the backbone family (qwen3 / llama / qwen2) whatever the target's."""
    cfg = load_config(target_dir)
    shape = new_block_drafter_config(cfg, block_size=block_size, num_layers=num_layers, mask_token_id=mask_token_id,
                                  target_layer_ids=target_layer_ids, markov_rank=markov_rank,
                                  confidence_head=confidence, draft_arch=draft_arch,
                                  **({"layout": layout} if layout else {}))
    model = BlockDrafter(shape)
    model.init_weights(std=std, seed=seed)
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():       # random heads, biases and q/k norms too, so tests exercise them
        for name, param in model.named_parameters():
            if name.startswith(("markov_head", "confidence_head")):
                param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
            elif name.endswith(".bias"):
                param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                param.copy_(1 + torch.randn(param.shape, generator=gen) * 0.2)
    return model


def bigram_dspark_drafter(target_dir, prompts, outputs, *, layout, draft_arch="qwen3", block_size=6) -> BlockDrafter:
    """A DSpark draft whose full-rank Markov head encodes the target's observed greedy bigrams
    (`outputs`: its greedy continuations of `prompts`), confident everywhere (sigmoid(2) = 0.88).

    The peaky random targets mostly continue from their last token, so this drafter is often
    right: it makes acceptance (and partial rejection) happen in the engine tests."""
    vocab = load_config(target_dir).vocab_size
    follow = collections.Counter()
    for prompt, out in zip(prompts, outputs):
        seq = list(prompt) + list(out)
        follow.update(zip(seq[:-1], seq[1:]))
    best = {}
    for (a, b), count in sorted(follow.items(), key=lambda kv: -kv[1]):
        best.setdefault(a, b)
    model = random_block_drafter(target_dir, markov_rank=vocab, confidence=True, block_size=block_size,
                                 layout=layout, std=0.02, draft_arch=draft_arch)
    with torch.no_grad():
        model.markov_head.markov_w1.weight.copy_(torch.eye(vocab))
        w2 = torch.zeros(vocab, vocab)
        for a, b in best.items():
            w2[b, a] = 20.0
        model.markov_head.markov_w2.weight.copy_(w2)
        model.confidence_head.proj.weight.zero_()
        model.confidence_head.proj.bias.fill_(2.0)
    return model


def write_block_drafter(out, target_dir, fmt: str = "deepspec", *, variant: str = "", model_type: str | None = None,
                        **kwargs) -> Path:
    """fmt: zlab | deepspec | specforge | specforge-legacy | specserve. variant: '' | 'nested' (block_size
    and ids under dflash_config / top-level swapped) | 'model-prefix' (backbone keys under `model.`).
    model_type: what config.json says (default: the backbone's family, `draft_arch` in kwargs)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "zlab":
        kwargs.setdefault("layout", BONUS_ANCHOR)
    model = random_block_drafter(target_dir, **kwargs)
    shape = model.config
    target_cfg = load_config(target_dir)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    base = _backbone_keys(shape)
    ids, mask, block = list(shape.target_layer_ids), shape.mask_token_id, shape.block_size
    n_target = target_cfg.num_hidden_layers
    if fmt == "zlab":
        config = {"architectures": ["DFlashDraftModel"], "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
                  "model_type": "qwen3", "num_target_layers": n_target, "rope_theta": target_cfg.rope_theta,
                  "rope_scaling": None, "dflash_config": {"mask_token_id": mask, "target_layer_ids": ids}, **base}
        if variant == "nested":       # Qwen3.5-style heads: block_size under dflash_config
            config["dflash_config"]["block_size"] = block
        else:
            config["block_size"] = block
    elif fmt in ("deepspec", "specserve"):
        config = {"architectures": ["Qwen3DSparkModel"], "model_type": "qwen3", "num_target_layers": n_target,
                  "block_size": block, "target_layer_ids": ids, "mask_token_id": mask, "num_anchors": 512,
                  "markov_rank": shape.markov_rank, "enable_confidence_head": shape.has_confidence_head,
                  "rope_parameters": {"rope_theta": target_cfg.rope_theta, "rope_type": "default"}, **base}
        if shape.markov_rank:
            config["markov_head_type"] = "vanilla"
        if shape.has_confidence_head:
            config["confidence_head_with_markov"] = shape.confidence_with_markov
        if fmt == "deepspec":          # frozen copies of the target's embedding and head
            target_ckpt = Checkpoint(target_dir)
            embed = target_ckpt.get("model.embed_tokens.weight")
            state["embed_tokens.weight"] = embed.clone()
            head = "lm_head.weight" if "lm_head.weight" in target_ckpt else "model.embed_tokens.weight"
            state["lm_head.weight"] = target_ckpt.get(head).clone()
        else:
            config["sample_from_anchor"] = shape.layout != BONUS_ANCHOR
    elif fmt.startswith("specforge"):
        heads = {"attention_mode": "gqa", "mask_token_id": mask, "target_layer_ids": ids, "projector_type": "dspark",
                 "markov_rank": shape.markov_rank, "markov_head_type": "vanilla", "confidence_head_alpha": 1.0,
                 "enable_confidence_head": shape.has_confidence_head,
                 "confidence_head_with_markov": shape.confidence_with_markov}
        config = {"architectures": ["DSparkDraftModel"], "auto_map": {"AutoModel": "dspark.DSparkDraftModel"},
                  "model_type": "qwen3", "block_size": block, "num_target_layers": n_target,
                  "rope_theta": target_cfg.rope_theta, "dflash_config": heads, **base}
        if variant == "nested":       # newer SpecForge: DSpark fields top-level
            for key in ("markov_rank", "markov_head_type", "enable_confidence_head", "confidence_head_with_markov"):
                config[key] = heads.pop(key)
        if fmt == "specforge-legacy":
            state = {("logit_head." + k if k.startswith(("markov_head.", "confidence_head.")) else k): v
                     for k, v in state.items()}
    else:
        raise ValueError(fmt)
    config["model_type"] = model_type or shape.backbone.family
    if variant == "model-prefix":
        state = {("model." + k if k.startswith(("layers.", "norm.")) else k): v for k, v in state.items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return out
