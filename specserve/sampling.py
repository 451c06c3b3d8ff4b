"""Sampling parameters, the target's sampling distribution and per-request random generators.

The order of the truncation samplers follows llama.cpp's default chain:
top-k -> top-p -> min-p (all on the temperature-1 distribution) -> temperature.
Temperature <= 0 means greedy (argmax, first index on ties). On the CPU with the native
kernels both the distribution and the draw run in C (kernels/native/sampler.cpp).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from . import kernels
from .errors import InvalidRequestError
from .kernels import sampling as native_sampling
from .random_stream import RequestGenerator

WHOLE_HISTORY = 1 << 30          # penalty_last_n for "every token" (llama.cpp's repeat_last_n = -1)


@dataclass
class SamplingParams:
    """How one request samples. The defaults are vLLM's (the Python API); the command line and the
    fields a server request leaves out use llama.cpp's, LLAMA_CPP_DEFAULTS below."""
    max_tokens: int | None = 16           # None: until EOS or the context is full
    temperature: float = 1.0
    top_k: int = 0                        # <= 0: disabled
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None               # None: a random seed per request
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None           # number of top alternatives to report per token
    # logit adjustments before sampling (specserve/penalties.py); neutral by default
    presence_penalty: float = 0.0         # subtracted once from every token already generated
    frequency_penalty: float = 0.0        # subtracted per occurrence
    repetition_penalty: float = 1.0       # seen tokens: positive logits divided, negative multiplied
    penalty_last_n: int | None = None     # None: presence/frequency over the output, repetition over
    #                                       prompt + output (vLLM); N: all three over the last N tokens
    #                                       of prompt + output (llama.cpp; 0 disables)
    logit_bias: dict[int, float] = field(default_factory=dict)     # token id -> added (-inf bans)

    def __post_init__(self):
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = [s for s in (self.stop or []) if s]
        self.validate()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    @property
    def adjusts_logits(self) -> bool:
        return bool(self.logit_bias) or self.penalty_last_n != 0 and (
            self.presence_penalty != 0 or self.frequency_penalty != 0 or self.repetition_penalty != 1)

    def validate(self) -> None:
        def bad(field_name, why):
            raise InvalidRequestError(f"invalid {field_name}: {why}")

        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens < 1):
            bad("max_tokens", f"must be a positive integer, got {self.max_tokens!r}")
        if not isinstance(self.temperature, (int, float)) or self.temperature != self.temperature:
            bad("temperature", f"must be a number, got {self.temperature!r}")
        if not isinstance(self.top_k, int):
            bad("top_k", f"must be an integer, got {self.top_k!r}")
        if not isinstance(self.top_p, (int, float)) or not 0.0 < self.top_p <= 1.0:
            bad("top_p", f"must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.min_p, (int, float)) or not 0.0 <= self.min_p <= 1.0:
            bad("min_p", f"must be in [0, 1], got {self.min_p!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            bad("seed", f"must be an integer, got {self.seed!r}")
        if self.logprobs is not None and (not isinstance(self.logprobs, int) or not 0 <= self.logprobs <= 20):
            bad("logprobs", f"must be an integer in [0, 20], got {self.logprobs!r}")
        if any(not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            bad("stop_token_ids", "must be non-negative integers")
        if any(not isinstance(s, str) for s in self.stop):
            bad("stop", "must be a string or a list of strings")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not -2.0 <= value <= 2.0:
                bad(name, f"must be a number in [-2, 2], got {value!r}")
        if not isinstance(self.repetition_penalty, (int, float)) or not 0.0 < self.repetition_penalty <= 10.0:
            bad("repetition_penalty", f"must be a number in (0, 10], got {self.repetition_penalty!r}")
        if self.penalty_last_n is not None and (not isinstance(self.penalty_last_n, int) or self.penalty_last_n < 0):
            bad("penalty_last_n", f"must be a non-negative integer, got {self.penalty_last_n!r}")
        if not isinstance(self.logit_bias, dict) or any(
                not isinstance(t, int) or t < 0 or not isinstance(b, (int, float)) or b != b
                for t, b in self.logit_bias.items()):
            bad("logit_bias", "must map non-negative token ids to numbers")


# llama.cpp's defaults (common/common.h `common_params_sampling`): what `generate` and `serve` use
# unless told otherwise, and what llama-server fills in for fields a request leaves out
LLAMA_CPP_DEFAULTS = SamplingParams(max_tokens=None, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
                                    penalty_last_n=64)


def make_generator(seed: int | None) -> tuple[RequestGenerator, int]:
    if seed is None or seed < 0:
        seed = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
    return RequestGenerator(seed), seed


def on_native_kernels(t: torch.Tensor) -> bool:
    """Whether rows of t are sampled by the native kernels (CPU tensors, native kernel mode)."""
    return t.is_cpu and kernels.mode() == "native"      # is_cpu: no device object made every step


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution plain sampling draws from, for rows of float32 logits [R, V]."""
    if on_native_kernels(logits):
        return native_sampling.sampling_probs(logits, params.top_k, params.top_p, params.min_p, params.temperature)
    x = logits.float()
    vocab = x.shape[-1]
    if 0 < params.top_k < vocab:
        kth = torch.topk(x, params.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_x, order = torch.sort(x, dim=-1, descending=True)
        sorted_p = torch.softmax(sorted_x, dim=-1)
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p      # mass strictly before each token
        drop = before >= params.top_p
        drop[..., 0] = False                                    # always keep the top token
        x = x.scatter(-1, order, sorted_x.masked_fill(drop, float("-inf")))
    if params.min_p > 0.0:
        p = torch.softmax(x, dim=-1)
        x = x.masked_fill(p < params.min_p * p.max(dim=-1, keepdim=True).values, float("-inf"))
    return torch.softmax(x / params.temperature, dim=-1)


def draw_with_uniform(probs: torch.Tensor, u: float) -> int:
    """The first token whose cumulative probability exceeds u * total: the native kernels' draw, for the
    drafters' PyTorch paths that must pick what the kernels pick from the same uniform."""
    cumulative = probs.double().cumsum(0)
    index = int(torch.searchsorted(cumulative, u * cumulative[-1], right=True))
    return min(index, int(probs.nonzero()[-1]))


def sample_rows(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of probs [R, V]."""
    if on_native_kernels(probs):
        return native_sampling.sample(probs, generator)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
