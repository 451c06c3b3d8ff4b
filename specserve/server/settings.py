"""What the HTTP layer needs to know about the server it is part of."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SamplingDefaults:
    """Values for fields a request leaves out (the command line's sampling options, as llama-server does)."""
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None          # None: a random seed per request
    max_tokens: int | None = None    # None: until EOS or the context is full
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    penalty_last_n: int = 64         # llama-server's --repeat-last-n
    logit_bias: dict = field(default_factory=dict)


@dataclass
class ServerSettings:
    model_name: str
    model_path: str = ""
    api_keys: list[str] = field(default_factory=list)
    metrics: bool = False
    timeout: float = 600.0           # seconds per request, queueing included; <= 0: no limit
    defaults: SamplingDefaults = field(default_factory=SamplingDefaults)
    spec_types: list[str] = field(default_factory=list)
    spec_options: dict = field(default_factory=dict)
