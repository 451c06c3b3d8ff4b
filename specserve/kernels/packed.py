"""Weights packed once for the native matrix multiply, and the call that uses them.

`PackedLinear(weight, bias)` is a drop-in for `F.linear(x, weight, bias)` on float32 rows:
bfloat16 weights stay bfloat16 (with AVX-512 BF16, dot products of bf16 pairs with float32
accumulation, the rows rounded to bf16 first, as a bf16 matmul does; with AVX2, widened to float32
in registers and multiplied into the float32 rows), float32 weights stay float32, and
`quant="int8"` stores int8 weights with one float32 scale per output row (symmetric, round to
nearest), computed once here; `quant="q8"` stores the same int8 weights and also rounds each input
row to int8 with its own scale, so that the products are integer dot products (AVX-512 VNNI or AVX2,
native/gemm_q8.cpp): about four times the multiply rate of int8 weights on float rows, at the cost
of the rows' rounding (llama.cpp's Q8_0 treats activations the same way).
"""
from __future__ import annotations

import ctypes

import torch

from ..errors import OptionError
from . import capi, has_bf16_weights, library

QUANT_TYPES = (None, "none", "int8", "q8")
BLOCK = 16


def _padded(values: torch.Tensor | None, n_padded: int) -> torch.Tensor | None:
    if values is None:
        return None
    out = torch.zeros(n_padded, dtype=torch.float32)
    out[:values.shape[0]] = values.detach().float()
    return out


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 [n, k], float32 scales [n]) with weight ~= q * scale[:, None]."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / scale.unsqueeze(1)).clamp_(-127, 127).to(torch.int8)
    return q.contiguous(), scale


def check_quant(quant: str | None, what: str = "--quant") -> str | None:
    if quant not in QUANT_TYPES:
        raise OptionError(f"{what} must be one of none, int8, q8; got {quant!r}")
    return None if quant in (None, "none") else quant


class PackedLinear:
    """y = x W^T + b for float32 rows x [m, k] with a weight packed for the native kernels."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, quant: str | None = None,
                 act: str | None = None):
        lib = library()
        quant = check_quant(quant)
        n, k = weight.shape
        self.out_features = n
        self.in_features = k
        n_padded = -(-n // BLOCK) * BLOCK
        scales = None
        if quant in ("int8", "q8"):
            source, scales = quantize_int8(weight)
            wtype, src_bf16 = capi.W_I8 if quant == "int8" else capi.W_Q8, 0
        elif weight.dtype == torch.bfloat16 and has_bf16_weights():
            source, wtype, src_bf16 = weight.detach().contiguous(), capi.W_BF16, 1
        else:     # float32 kernels: exact for bf16 weights on CPUs without bf16 dot products
            source, wtype, src_bf16 = weight.detach().float().contiguous(), capi.W_F32, 0
        self.buffer = torch.empty(lib.ss_packed_bytes(wtype, n, k), dtype=torch.uint8)
        lib.ss_pack(wtype, source.data_ptr(), src_bf16, n, k, self.buffer.data_ptr())
        self.scales = _padded(scales, n_padded)
        self.bias = _padded(bias, n_padded)
        self.weight_type = wtype
        self.struct = capi.Weight(self.buffer.data_ptr(), _ptr(self.scales), _ptr(self.bias), wtype, n, k,
                                  capi.ACTIVATION_IDS.get(act or "silu", 0))
        self._struct_ref = ctypes.byref(self.struct)

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() + sum(t.numel() * 4 for t in (self.scales, self.bias) if t is not None)

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None, mode: int = capi.OUT_STORE) -> torch.Tensor:
        x = x.float().contiguous()
        m = x.shape[0]
        if out is None:
            width = self.out_features // 2 if mode == capi.OUT_SWIGLU else self.out_features
            out = torch.empty(m, width, dtype=torch.float32)
        library().ss_linear(self._struct_ref, x.data_ptr(), m, self.in_features, out.data_ptr(), out.shape[1], mode)
        return out


def gated_mlp_weight(gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, int]:
    """gate/up [I, k] -> one [2*I', k] weight whose 16-row blocks alternate gate and up (I' = I rounded up
    to 16, zero rows added), the layout of the fused act(gate) * up epilogue; returns (weight, I')."""
    inter, k = gate.shape
    padded = -(-inter // BLOCK) * BLOCK
    if padded != inter:
        pad = gate.new_zeros(padded - inter, k)
        gate, up = torch.cat([gate, pad]), torch.cat([up, pad])
    both = torch.stack([gate.reshape(-1, BLOCK, k), up.reshape(-1, BLOCK, k)], dim=1)
    return both.reshape(2 * padded, k).contiguous(), padded


def gated_mlp_bias(gate_b: torch.Tensor | None, up_b: torch.Tensor | None, padded: int) -> torch.Tensor | None:
    if gate_b is None:
        return None
    pad = padded - gate_b.shape[0]
    gate_b = torch.cat([gate_b.float(), gate_b.new_zeros(pad).float()])
    up_b = torch.cat([up_b.float(), up_b.new_zeros(pad).float()])
    return torch.stack([gate_b.view(-1, BLOCK), up_b.view(-1, BLOCK)], dim=1).reshape(-1)


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()
