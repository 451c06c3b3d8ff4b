"""`specserve train-draft --method draft-simple`: distil a small draft model for draft-simple.

The draft has the target's architecture and tokenizer with fewer layers; its embedding,
final norm and head start as copies of the target's and its layers as copies of chosen
target layers (layer dropping), then everything is trained to match the target's
next-token distribution (soft cross-entropy) on target-regenerated text.
"""
from __future__ import annotations

import json

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from ..models.config import config_from_dict
from ..models.transformer import CausalLM
from ..errors import OptionError
from .draft_loop import optimize
from .drafter_common import (DrafterJob, usage, copy_tokenizer, load_frozen_target, served_acceptance,
                             soft_cross_entropy, target_distribution, write_card)

HELP = "a small distilled draft model for --spec-type draft-simple (-md DIR)"


def add_arguments(group) -> None:
    group.add_argument("--draft-layers", type=int, default=2, help="draft-simple: decoder layers of the draft model")
    group.add_argument("--init-layers", default="first,last",
                       help="draft-simple: target layers copied into the draft layers: 'first,last' or indices")


def _init_indices(spec: str, n_draft: int, n_target: int) -> list[int]:
    if n_draft < 1:
        raise OptionError(f"--draft-layers must be at least 1, got {n_draft}")
    if spec == "first,last":
        return [round(i * (n_target - 1) / max(n_draft - 1, 1)) for i in range(n_draft)]
    try:
        picks = [int(x) for x in spec.split(",")]
    except ValueError:
        raise OptionError(f"--init-layers must be 'first,last' or comma-separated layer indices, got {spec!r}") from None
    if any(not -n_target <= p < n_target for p in picks):
        raise OptionError(f"--init-layers {spec}: the target has layers 0..{n_target - 1}")
    if len(picks) != n_draft:
        raise OptionError(f"--init-layers names {len(picks)} layers for a {n_draft}-layer draft (--draft-layers)")
    return [p % n_target for p in picks]


def build_draft(target: CausalLM, n_layers: int, init: str) -> tuple[CausalLM, dict]:
    raw = {**target.config.raw, "num_hidden_layers": n_layers, "torch_dtype": "bfloat16"}
    raw.pop("layer_types", None)
    raw.pop("max_window_layers", None)
    draft = CausalLM(config_from_dict(raw))
    picks = _init_indices(init, n_layers, target.config.num_hidden_layers)
    source = target.state_dict()
    state = {}
    for name in draft.state_dict():
        src = name
        if name.startswith("model.layers."):
            i, rest = name[len("model.layers."):].split(".", 1)
            src = f"model.layers.{picks[int(i)]}.{rest}"
        state[name] = source[src].float().clone()
    draft.load_state_dict(state)
    return draft, raw


def distillation_step(job: DrafterJob, target: CausalLM, draft: CausalLM):
    """The loss of one step: soft cross-entropy to the target on this rank's windows."""
    sampler = job.sampler()

    def step(_):
        batch = sampler.next_batch()
        mask = batch.label_mask
        with torch.no_grad():
            final, _ = target.forward_full(batch.tokens)
            probs = target_distribution(target, final[mask])
        with job.autocast():
            hidden, _ = draft.forward_full(batch.tokens)
            logits = F.linear(hidden[mask], draft.lm_head_weight)
        loss = soft_cross_entropy(logits, probs, job.dp.denominator, job.options.get("tv_weight", 0.0))
        agree = (logits.argmax(-1) == probs.argmax(-1)).float().mean()
        return {"loss": loss, "acc": float(agree)}
    return step


def train(job: DrafterJob) -> dict:
    opts, log = job.options, job.log
    target = load_frozen_target(job.target_dir)
    draft, raw = build_draft(target, int(opts.get("draft_layers", 2)), str(opts.get("init_layers", "first,last")))
    draft.train()
    log(f"draft-simple: {raw['num_hidden_layers']}-layer draft, "
        f"{sum(p.numel() for p in draft.parameters()) / 1e6:.2f}M parameters")
    summary = optimize(draft, distillation_step(job, target, draft), job.loop, log, job.dp)
    if not job.dp.is_main:
        return summary
    save(draft, raw, job)
    summary.update(served_acceptance(job, "draft-simple"))
    log(f"draft-simple: measured tau {summary['acceptance']['tau']:.2f}")
    write_card(job.out_dir, job.out_dir.name,
               "A small draft model for `--spec-type draft-simple`, distilled from the target it ships "
               "next to. Same architecture family and tokenizer as the target, fewer layers.",
               [("architecture", f"`{raw['architectures'][0]}`, {raw['num_hidden_layers']} layers, hidden "
                                 f"{raw['hidden_size']}, vocabulary {raw['vocab_size']} (the target's)"),
                ("target", f"`{job.target_dir.name}`"),
                ("initialisation", f"target embedding/norm/head; layers copied from target layers "
                                   f"{opts.get('init_layers', 'first,last')}"),
                ("loss", "soft cross-entropy to the target's next-token distribution on the regenerated part"),
                ("weights", "bfloat16 safetensors")],
               job, summary, usage(job, "draft-simple"))
    return summary


def save(draft: CausalLM, raw: dict, job: DrafterJob) -> None:
    out = job.out_dir
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in draft.state_dict().items()}
    if draft.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    copy_tokenizer(job.target_dir, out)
