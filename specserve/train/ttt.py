"""Training-time test (as EAGLE-3 trains): a one-layer draft head (EAGLE-3 or MTP) is unrolled
for `depth` chained steps over whole sequences.

Step j, row t sees what chained draft step j+1 sees at inference after a prefix ending at t:
input token x[t+1+j], input hidden = the target feature at t (step 0) or the head's own output
of step j-1 at row t, position t+j; attention over the step-0 rows 0..t (causal) plus row t's
keys of steps 1..j. Its label is the target's distribution at position t+1+j.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ..models.rope import RotaryEmbedding, apply_rope
from .data_parallel import DataParallel
from .drafter_common import soft_cross_entropy


class UnrollState:
    def __init__(self):
        self.keys: list[torch.Tensor] = []      # per step: [B, kv_heads, T, d]
        self.values: list[torch.Tensor] = []


def ttt_attention(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor], group: int) -> torch.Tensor:
    """q [B, heads, T, d]; step-0 keys causal, later steps' keys on the diagonal only."""
    d, n = q.shape[-1], q.shape[-2]
    scale = d ** -0.5
    k0, v0 = keys[0].repeat_interleave(group, 1), values[0].repeat_interleave(group, 1)
    scores = [(q @ k0.transpose(-1, -2) * scale).masked_fill(
        torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))]
    later = [(k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)) for k, v in zip(keys[1:], values[1:])]
    scores += [(q * k).sum(-1, keepdim=True) * scale for k, _ in later]
    probs = torch.softmax(torch.cat(scores, dim=-1).float(), dim=-1).to(q.dtype)
    ctx = probs[..., :n] @ v0
    for i, (_, v) in enumerate(later):
        ctx = ctx + probs[..., n + i:n + i + 1] * v
    return ctx.transpose(1, 2).reshape(q.shape[0], n, -1)


def attention_sublayer(layer, cfg, x_in, cos, sin, state: UnrollState) -> torch.Tensor:
    """o_proj(attention) of a decoder layer whose q/k/v read `x_in` [B, T, *]."""
    attn = layer.self_attn
    b, t = x_in.shape[:2]
    heads, kv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    q = attn.q_proj(x_in).view(b, t, heads, d)
    k = attn.k_proj(x_in).view(b, t, kv, d)
    v = attn.v_proj(x_in).view(b, t, kv, d)
    if cfg.qk_norm:
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    state.keys.append(k.transpose(1, 2))
    state.values.append(v.transpose(1, 2))
    ctx = ttt_attention(q.transpose(1, 2), state.keys, state.values, heads // kv)
    return attn.o_proj(ctx)


def mlp_sublayer(layer, act, x: torch.Tensor) -> torch.Tensor:
    h = layer.post_attention_layernorm(x)
    return x + layer.mlp.down_proj(act(layer.mlp.gate_proj(h)) * layer.mlp.up_proj(h))


def eagle3_step(head, emb, hidden, positions, cos, sin, state):
    z, residual = head.layer0_inputs(emb, hidden)
    layer = head.layers[0]
    return mlp_sublayer(layer, head.act, residual + attention_sublayer(layer, head.config, z, cos, sin, state))


def mtp_step(head, emb, hidden, positions, cos, sin, state):
    x = head.combine(emb, hidden, positions)
    block = head.block
    x = x + attention_sublayer(block, head.config, block.input_layernorm(x), cos, sin, state)
    return mlp_sublayer(block, head.act, x)


def _shift(x: torch.Tensor, by: int, length: int) -> torch.Tensor:
    """x[:, by:by+length] right-padded with zeros to `length` rows."""
    part = x[:, by:by + length]
    if part.shape[1] < length:
        pad = part.new_zeros((part.shape[0], length - part.shape[1]) + tuple(part.shape[2:]))
        part = torch.cat([part, pad], dim=1)
    return part


def unrolled_loss(step: Callable, head, rope: RotaryEmbedding, embedded: torch.Tensor, hidden0: torch.Tensor,
                  target_probs: torch.Tensor, label_mask: torch.Tensor, depth: int, decay: float = 0.8,
                  denominator: Callable = DataParallel().denominator, tv_weight: float = 0.0,
                  ) -> tuple[torch.Tensor, dict]:
    """embedded [B, L, H] token embeddings; hidden0 [B, L, H] step-0 hidden inputs; target_probs
    [B, L, V'] the target's distribution per position (restricted to the draft vocabulary);
    label_mask [B, L] trained label positions. `denominator` turns a step's row count into its
    normaliser (DataParallel.denominator: the global one); tv_weight as in soft_cross_entropy. Returns (loss,
    per-step top-1 agreement)."""
    length = embedded.shape[1] - 1
    hidden = hidden0[:, :length]
    state = UnrollState()
    total, weights, metrics = 0.0, 0.0, {}
    for j in range(depth):
        positions = torch.arange(length) + j
        cos, sin = rope.gather(positions)
        h = step(head, _shift(embedded, 1 + j, length), hidden, positions, cos.to(embedded.dtype),
                 sin.to(embedded.dtype), state)
        normed, hidden = head.normed_and_next(h)
        mask = _shift(label_mask, 1 + j, length)
        rows = denominator(mask.sum())
        if rows < 0.5:          # no trained row at this depth on any rank
            break
        logits = F.linear(normed[mask], head.lm_head_weight).float()
        labels = _shift(target_probs, 1 + j, length)[mask]
        ce = soft_cross_entropy(logits, labels, lambda _: rows, tv_weight)
        total = total + decay ** j * ce
        weights += decay ** j
        metrics[f"acc{j}"] = float((logits.argmax(-1) == labels.argmax(-1)).float().mean()) if len(logits) else 0.0
    return total / max(weights, 1e-9), metrics
