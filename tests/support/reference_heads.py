"""Straightforward full-sequence reference forwards of the EAGLE-3 and MTP heads, written from the
equations in docs/reference/eagle3-mtp.md and reading checkpoint tensors by their ORIGINAL names, so the
tests check specserve's name mapping, concatenation orders and norm placement independently."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, positions, theta):
    """x [T, heads, d], rotate-half layout."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = positions.float()[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1)[:, None], torch.cat([ang.sin(), ang.sin()], -1)[:, None]
    rot = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos + rot * sin


def attention(x_qkv, t, p, positions, heads, kv_heads, head_dim, theta, qk_norm=False):
    """Causal self-attention of T rows (each row attends to rows 0..itself)."""
    n = x_qkv.shape[0]
    q = (x_qkv @ t[p + "self_attn.q_proj.weight"].T).view(n, heads, head_dim)
    k = (x_qkv @ t[p + "self_attn.k_proj.weight"].T).view(n, kv_heads, head_dim)
    v = (x_qkv @ t[p + "self_attn.v_proj.weight"].T).view(n, kv_heads, head_dim)
    if p + "self_attn.q_proj.bias" in t:
        q = q + t[p + "self_attn.q_proj.bias"].view(heads, head_dim)
        k = k + t[p + "self_attn.k_proj.bias"].view(kv_heads, head_dim)
        v = v + t[p + "self_attn.v_proj.bias"].view(kv_heads, head_dim)
    if qk_norm:
        q, k = rms(q, t[p + "self_attn.q_norm.weight"]), rms(k, t[p + "self_attn.k_norm.weight"])
    q, k = rope(q, positions, theta), rope(k, positions, theta)
    rep = heads // kv_heads
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / head_dim ** 0.5
    scores = scores.masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf"))
    ctx = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, heads * head_dim)
    return ctx @ t[p + "self_attn.o_proj.weight"].T


def mlp(x, t, p):
    return (F.silu(x @ t[p + "mlp.gate_proj.weight"].T) * (x @ t[p + "mlp.up_proj.weight"].T)) @ \
        t[p + "mlp.down_proj.weight"].T


def eagle3(t, cfg, feats, tokens, positions, embed, layer0="midlayer.", chain_from=None):
    """Rows (token_i, feature_i) for i < chain_from, then chained rows whose hidden input is the
    previous row's output (pre-norm h, or norm(h) with norm_output). Returns logits [T, Vd]."""
    heads, kvh, hd, theta = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["rope_theta"]
    nbr, norm_out = cfg.get("norm_before_residual", False), cfg.get("norm_output", False)
    f = torch.cat(feats, -1)
    if "fc_norm.0.weight" in t:
        f = torch.cat([rms(c, t[f"fc_norm.{i}.weight"]) for i, c in enumerate(f.chunk(len(feats), -1))], -1)
    g = f @ t["fc.weight"].T
    n = tokens.shape[0]
    chain_from = n if chain_from is None else chain_from
    logits = []
    # rows are processed one by one, so chained rows can take the previous output as input
    hidden_in = list(g[:chain_from])
    out_h = []
    for i in range(n):
        if i >= chain_from:
            hidden_in.append(out_h[-1])
        hin = torch.stack(hidden_in[:i + 1])
        e = embed[tokens[:i + 1]]
        gn = rms(hin, t[layer0 + "hidden_norm.weight"])
        z = torch.cat([rms(e, t[layer0 + "input_layernorm.weight"]), gn], -1)
        h1 = (gn if nbr else hin) + attention(z, t, layer0, positions[:i + 1], heads, kvh, hd, theta)
        h = h1 + mlp(rms(h1, t[layer0 + "post_attention_layernorm.weight"]), t, layer0)
        hn = rms(h[-1], t["norm.weight"])
        logits.append(hn @ t["lm_head.weight"].T)
        out_h.append(hn if norm_out else h[-1])
    return torch.stack(logits)


def mtp(t, p, names, cfg, hidden, tokens, positions, embed, head_w, hidden_first=False, qk_norm=False,
        chain_from=None, out_norm_name=None):
    """MTP head over rows (token_i, hidden_i); chained rows take the previous post-norm output."""
    heads, kvh, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    theta = cfg.get("rope_theta", 10000.0)
    n = tokens.shape[0]
    chain_from = n if chain_from is None else chain_from
    hidden_in, outs, logits = list(hidden[:chain_from]), [], []
    for i in range(n):
        if i >= chain_from:
            hidden_in.append(outs[-1])
        h = torch.stack(hidden_in[:i + 1])
        e = embed[tokens[:i + 1]].clone()
        e[positions[:i + 1] == 0] = 0
        en, hn = rms(e, t[p + names["enorm"]]), rms(h, t[p + names["hnorm"]])
        x = torch.cat([hn, en] if hidden_first else [en, hn], -1) @ t[p + names["eh_proj"]].T
        x = x + attention(rms(x, t[p + "input_layernorm.weight"]), t, p, positions[:i + 1], heads, kvh, hd, theta,
                          qk_norm)
        x = x + mlp(rms(x, t[p + "post_attention_layernorm.weight"]), t, p)
        out = rms(x[-1], t[out_norm_name or (p + names["out_norm"])])
        outs.append(out)
        logits.append(out @ head_w.T)
    return torch.stack(logits)
