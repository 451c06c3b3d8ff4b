"""Rotary position embeddings: default, linear, dynamic NTK, llama3 and YaRN, as in transformers,
plus per-dimension frequency divisors (`freq_factors`: how GGUF files store llama3 scaling)."""
from __future__ import annotations

import math

import torch


def _base_inv_freq(theta: float, dim: int) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).double() / dim))


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    factor = scaling["factor"]
    low_freq_factor = scaling.get("low_freq_factor", 1.0)
    high_freq_factor = scaling.get("high_freq_factor", 4.0)
    old_context = scaling.get("original_max_position_embeddings", 8192)
    low_freq_wavelen = old_context / low_freq_factor
    high_freq_wavelen = old_context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def _yarn_inv_freq(theta: float, dim: int, scaling: dict, max_pos: int) -> tuple[torch.Tensor, float]:
    factor = scaling["factor"]
    original = scaling.get("original_max_position_embeddings") or max_pos
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")

    def get_mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
        else:
            attention_factor = get_mscale(factor)
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1

    def correction_dim(num_rotations):
        return (dim * math.log(original / (num_rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = theta ** (torch.arange(0, dim, 2).double() / dim)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)
    ramp = ((torch.arange(dim // 2).double() - low) / (high - low)).clamp(0, 1)
    extrapolation_factor = 1 - ramp
    inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    return inv_freq, float(attention_factor)


def llama3_freq_factors(theta: float, head_dim: int, scaling: dict) -> torch.Tensor:
    """llama3 scaling as per-dimension divisors of the base frequencies (the form GGUF files store)."""
    base = _base_inv_freq(theta, head_dim)
    return base / _llama3_inv_freq(base, scaling)


class RotaryEmbedding:
    """Precomputed cos/sin tables; `gather(positions)` returns rows for a batch of positions."""

    def __init__(self, head_dim: int, theta: float, scaling: dict | None, max_position_embeddings: int,
                 max_positions: int, device=None):
        self.head_dim = head_dim
        self.theta = theta
        self.scaling = scaling
        self.original_max = max_position_embeddings
        self.device = device
        self.rope_type = scaling["rope_type"] if scaling else "default"
        self.attention_factor = 1.0
        inv_freq = _base_inv_freq(theta, head_dim)
        if self.rope_type == "linear":
            inv_freq = inv_freq / scaling["factor"]
        elif self.rope_type == "llama3":
            inv_freq = _llama3_inv_freq(inv_freq, scaling)
        elif self.rope_type == "freq_factors":
            inv_freq = inv_freq / torch.tensor(scaling["factors"], dtype=torch.float64)
        elif self.rope_type == "yarn":
            inv_freq, self.attention_factor = _yarn_inv_freq(theta, head_dim, scaling, max_position_embeddings)
        self.inv_freq = inv_freq.float()
        self.cos, self.sin = self._table(self.inv_freq, max_positions)

    def _table(self, inv_freq: torch.Tensor, n: int):
        freqs = torch.outer(torch.arange(n, dtype=torch.float32), inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        return ((emb.cos() * self.attention_factor).to(self.device),
                (emb.sin() * self.attention_factor).to(self.device))

    def _dynamic_inv_freq(self, seq_len: int) -> torch.Tensor:
        factor = self.scaling["factor"]
        base = self.theta * ((factor * seq_len / self.original_max) - (factor - 1)) ** (
            self.head_dim / (self.head_dim - 2))
        return _base_inv_freq(base, self.head_dim).float()

    def gather(self, positions: torch.Tensor, seq_len: int | None = None):
        """cos, sin of shape [len(positions), head_dim].

        Dynamic NTK scaling (as transformers does) recomputes frequencies once the
        sequence grows past the original context; `seq_len` is that sequence's length.
        """
        if self.rope_type == "dynamic" and seq_len is not None and seq_len > self.original_max:
            freqs = torch.outer(positions.float(), self._dynamic_inv_freq(seq_len).to(positions.device))
            emb = torch.cat([freqs, freqs], dim=-1)
            return emb.cos(), emb.sin()
        return self.cos[positions], self.sin[positions]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [N, heads, d]; cos/sin: [N, d] (neox / rotate_half layout)."""
    half = x.shape[-1] // 2
    cos = cos.unsqueeze(-2)
    sin = sin.unsqueeze(-2)
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
