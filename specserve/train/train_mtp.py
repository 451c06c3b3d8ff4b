"""`specserve train-draft --method draft-mtp`: a DeepSeek-style MTP (nextn) head for the target,
trained with training-time test (train/ttt.py) and shipped as a head-only folder that
draft-mtp merges over the target checkpoint (`-md DIR`; models/mtp_format.py).

The head pairs each next token's embedding with the target's final (post-norm) hidden state,
[enorm(embedding), hnorm(hidden)] -> eh_proj -> one decoder block of the target's family ->
shared_head.norm -> the target's lm_head, and chains on its own post-norm output. The block
starts as a copy of the target's last layer, eh_proj as the identity on the hidden half.
"""
from __future__ import annotations

import torch

from ..models.mtp_format import save_head_folder
from ..models.mtp_head import MtpHead
from ..models.rope import RotaryEmbedding
from ..models.transformer import init_weights
from .draft_loop import optimize
from .drafter_common import (DrafterJob, usage, load_frozen_target, served_acceptance,
                             target_distribution, write_card)
from .ttt import mtp_step, unrolled_loss

HELP = "a DeepSeek-style MTP head for --spec-type draft-mtp (head-only folder, -md DIR)"


SHARED_OPTIONS = ("ttt_depth",)        # declared by train_eagle3.add_arguments


def add_arguments(group) -> None:
    """No options of its own: --ttt-depth is shared with eagle3 (SHARED_OPTIONS)."""


def build_head(target, seed: int) -> MtpHead:
    cfg = target.config
    head = MtpHead(cfg)
    init_weights(head, std=0.02, seed=seed)
    last = target.model.layers[-1].state_dict()
    with torch.no_grad():
        head.block.load_state_dict({k: v.float() for k, v in last.items()})
        head.out_norm.weight.copy_(target.model.norm.weight.float())
        hidden = cfg.hidden_size
        head.eh_proj.weight[:, hidden:].copy_(torch.eye(hidden))
    head.embedding = target.model.embed_tokens.weight.detach()
    head.head = target.lm_head_weight.detach()
    return head


def train(job: DrafterJob) -> dict:
    opts, log = job.options, job.log
    target = load_frozen_target(job.target_dir)
    head = build_head(target, job.seed)
    head.train()
    depth = int(opts.get("ttt_depth", 3))
    cfg = head.config
    rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, cfg.max_position_embeddings,
                           job.seq_len + depth + 1)
    sampler = job.sampler()
    log(f"mtp: TTT depth {depth}, {sum(p.numel() for p in head.parameters()) / 1e6:.2f}M parameters")

    def step(_):
        batch = sampler.next_batch()
        with torch.no_grad():
            final, _ = target.forward_full(batch.tokens)
            probs = target_distribution(target, final)
            embedded = target.embed(batch.tokens).float()
        with job.autocast():
            loss, metrics = unrolled_loss(mtp_step, head, rope, embedded, final.float(), probs, batch.label_mask,
                                          depth, denominator=job.dp.denominator,
                                          tv_weight=job.options.get("tv_weight", 0.0))
        return {"loss": loss, **metrics}

    summary = optimize(head, step, job.loop, log, job.dp)
    if not job.dp.is_main:
        return summary
    save_head_folder(head, job.target_dir, job.out_dir)
    summary.update(served_acceptance(job, "draft-mtp"))
    log(f"mtp: measured tau {summary['acceptance']['tau']:.2f}")
    n = cfg.num_hidden_layers
    write_card(job.out_dir, job.out_dir.name,
               "A multi-token-prediction head for `--spec-type draft-mtp`, trained for the target it ships next "
               "to. This folder holds only the head: draft-mtp reads it with `-md` and takes everything it lacks "
               "(embedding, lm_head) from the target checkpoint, exactly as if the tensors were inside it.",
               [("layout", f"DeepSeek-style nextn tensors `model.layers.{n}.{{enorm, hnorm, eh_proj, "
                           "shared_head.norm}` plus a decoder block under the same prefix; config.json is the "
                           "target's with `num_nextn_predict_layers: 1`"),
                ("input", "[enorm(embedding of token t+1), hnorm(target final hidden at t)]"),
                ("chaining", "the same head for every draft step, fed its own post-norm output"),
                ("training-time test", f"{depth} unrolled steps, loss weights 0.8^step"),
                ("weights", "bfloat16 safetensors")],
               job, summary, usage(job, "draft-mtp"))
    return summary
