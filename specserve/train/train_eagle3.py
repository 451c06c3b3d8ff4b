"""`specserve train-draft --method draft-eagle3`: an EAGLE-3 head for the target, trained with
training-time test (train/ttt.py) and saved in the SpecForge layout (`LlamaForCausalLMEagle3`,
`midlayer.*`, output-of-layer ids in `eagle_config`).

The head reads the residual outputs of three target layers (low, middle, last by default),
uses the target's embedding, and predicts over a reduced vocabulary: the `--draft-vocab`
most frequent tokens of the regenerated text, mapped back to target ids with `d2t`.
Its lm_head starts as the target's rows for those tokens and its final norm as the target's.
"""
from __future__ import annotations

import json

import numpy as np
import torch
from safetensors.torch import save_file

from ..models.config import config_from_dict
from ..models.eagle3_format import export_specforge
from ..models.eagle3_model import Eagle3Draft, Eagle3Options
from ..models.rope import RotaryEmbedding
from ..models.transformer import init_weights
from .draft_loop import optimize
from .drafter_common import (DrafterJob, usage, load_frozen_target, served_acceptance,
                             target_distribution, write_card)
from .token_ranking import ranked_ids, regenerated_counts
from .ttt import eagle3_step, unrolled_loss

HELP = "an EAGLE-3 head for --spec-type draft-eagle3 (-md DIR)"


def add_arguments(group) -> None:
    group.add_argument("--eagle3-layers", default="",
                       help="eagle3: target layers whose outputs feed fc (output-of-layer ids, comma-separated); "
                            "default: 1, N//2, N-1")
    group.add_argument("--draft-vocab", type=int, default=0,
                       help="eagle3: reduced draft vocabulary size (0 = half the target's)")
    group.add_argument("--ttt-depth", type=int, default=3, help="eagle3/mtp: unrolled steps of training-time test")
    group.add_argument("--eagle3-init", choices=("target", "random"), default="target",
                       help="eagle3: start the layer as the target's last layer reading the last feature (target), "
                            "or from random weights")


def frequent_tokens(samples, vocab: int, n: int) -> torch.Tensor:
    """The n most frequent regenerated tokens, sorted (ties by id), padded with low ids if too few."""
    return torch.from_numpy(np.sort(ranked_ids(regenerated_counts(samples, vocab))[:n]))


def build_head(target, taps: tuple[int, ...], used: torch.Tensor, seed: int) -> Eagle3Draft:
    tcfg = target.config
    raw = {"model_type": "llama", "vocab_size": tcfg.vocab_size, "hidden_size": tcfg.hidden_size,
           "intermediate_size": tcfg.intermediate_size, "num_hidden_layers": 1,
           "num_attention_heads": tcfg.num_attention_heads, "num_key_value_heads": tcfg.num_key_value_heads,
           "head_dim": tcfg.head_dim, "rms_norm_eps": tcfg.rms_norm_eps, "rope_theta": tcfg.rope_theta,
           "max_position_embeddings": tcfg.max_position_embeddings, "tie_word_embeddings": False}
    opts = Eagle3Options(vocab_size=tcfg.vocab_size, draft_vocab_size=len(used), target_hidden_size=tcfg.hidden_size,
                         n_aux=len(taps))
    head = Eagle3Draft(config_from_dict(raw), opts, n_layers=1, own_embedding=False, own_lm_head=True)
    init_weights(head, std=0.02, seed=seed)
    with torch.no_grad():
        head.lm_head.weight.copy_(target.lm_head_weight[used].float())
        head.norm.weight.copy_(target.model.norm.weight.float())
        head.d2t.copy_(used - torch.arange(len(used)))
    head.shared_embedding = target.model.embed_tokens.weight.detach()
    return head


def init_from_target(head: Eagle3Draft, target) -> None:
    """Start as the target's last layer applied to the last feature: fc passes that feature through,
    q/k/v read it with the target's weights (the embedding half starts small and random), and the
    attention output and MLP are the target's. MTP heads start the same way (train_mtp.py)."""
    hidden = head.config.hidden_size
    layer, source = head.layers[0], target.model.layers[-1]
    with torch.no_grad():
        head.fc.weight[:, -hidden:].copy_(torch.eye(hidden))
        for name in ("q_proj", "k_proj", "v_proj"):
            getattr(layer.self_attn, name).weight[:, hidden:].copy_(getattr(source.self_attn, name).weight.float())
        layer.self_attn.o_proj.weight.copy_(source.self_attn.o_proj.weight.float())
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(layer.mlp, name).weight.copy_(getattr(source.mlp, name).weight.float())
        layer.post_attention_layernorm.weight.copy_(source.post_attention_layernorm.weight.float())
        layer.hidden_norm.weight.copy_(source.input_layernorm.weight.float())


def default_taps(n_layers: int) -> tuple[int, ...]:
    return (1, n_layers // 2, n_layers - 1)


def train(job: DrafterJob) -> dict:
    opts, log = job.options, job.log
    target = load_frozen_target(job.target_dir)
    n_layers = target.config.num_hidden_layers
    spec = str(opts.get("eagle3_layers") or "")
    taps = tuple(int(x) for x in spec.split(",")) if spec else default_taps(n_layers)
    vocab = target.config.vocab_size
    used = frequent_tokens(job.train_samples, vocab, int(opts.get("draft_vocab") or vocab // 2))
    head = build_head(target, taps, used, job.seed)
    if opts.get("eagle3_init", "target") == "target":
        init_from_target(head, target)
    head.train()
    depth = int(opts.get("ttt_depth", 3))
    rope = RotaryEmbedding(head.config.head_dim, head.config.rope_theta, None,
                           head.config.max_position_embeddings, job.seq_len + depth + 1)
    sampler = job.sampler()
    log(f"eagle3: taps {taps} (outputs of target layers), draft vocabulary {len(used)}/{vocab}, "
        f"TTT depth {depth}, {sum(p.numel() for p in head.parameters()) / 1e6:.2f}M parameters")

    def step(_):
        batch = sampler.next_batch()
        with torch.no_grad():
            final, feats = target.forward_full(batch.tokens, taps=taps)
            probs = target_distribution(target, final)[..., used]
            probs = probs / probs.sum(-1, keepdim=True).clamp_min(1e-9)
            embedded = target.embed(batch.tokens).float()
        with job.autocast():
            g = head.project([feats[t].float() for t in taps])
            loss, metrics = unrolled_loss(eagle3_step, head, rope, embedded, g, probs, batch.label_mask, depth,
                                          denominator=job.dp.denominator, tv_weight=job.options.get("tv_weight", 0.0))
        return {"loss": loss, **metrics}

    summary = optimize(head, step, job.loop, log, job.dp)
    if not job.dp.is_main:
        return summary
    save(head, taps, n_layers, job)
    summary.update(served_acceptance(job, "draft-eagle3"))
    summary["taps"] = list(taps)
    log(f"eagle3: measured tau {summary['acceptance']['tau']:.2f}")
    write_card(job.out_dir, job.out_dir.name,
               "An EAGLE-3 draft head for `--spec-type draft-eagle3`, trained with training-time test on the "
               "target's own hidden states. Saved in the SpecForge layout that SGLang, vLLM and llama.cpp's "
               "converter also read.",
               [("layout", "`LlamaForCausalLMEagle3`: `fc`, `midlayer.*`, `norm`, `lm_head`, `d2t`, `t2d`"),
                ("target features", f"outputs of target layers {list(taps)} "
                                    "(`eagle_config.eagle_aux_hidden_state_layer_ids`, output-of-layer)"),
                ("draft layer", f"1 Llama layer, hidden {head.config.hidden_size}, q/k/v over 2 x hidden"),
                ("vocabulary", f"{len(used)} draft tokens (the most frequent regenerated ones) of {vocab}, "
                               "mapped with `d2t`; the target's embedding is shared"),
                ("initialisation", "the target's last layer reading the last feature (q/k/v hidden half, "
                                   "attention output, MLP), lm_head rows and final norm from the target"
                 if opts.get("eagle3_init", "target") == "target" else "random layer and fc; lm_head rows and "
                 "final norm from the target"),
                ("training-time test", f"{depth} unrolled steps, loss weights 0.8^step"),
                ("weights", "bfloat16 safetensors")],
               job, summary, usage(job, "draft-eagle3"))
    return summary


def save(head: Eagle3Draft, taps, n_target_layers: int, job: DrafterJob) -> None:
    out = job.out_dir
    out.mkdir(parents=True, exist_ok=True)
    config, tensors = export_specforge(head, taps, n_target_layers)
    t2d = torch.zeros(head.opts.vocab_size, dtype=torch.bool)
    t2d[head.target_ids()] = True
    tensors["t2d"] = t2d
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
