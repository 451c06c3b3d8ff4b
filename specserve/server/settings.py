"""What the HTTP layer needs to know about the server it is part of."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..sampling import LLAMA_CPP_DEFAULTS, SamplingParams


@dataclass
class ServerSettings:
    model_name: str
    model_path: str = ""
    api_keys: list[str] = field(default_factory=list)
    metrics: bool = False
    timeout: float = 600.0           # seconds per request, queueing included; <= 0: no limit
    defaults: SamplingParams = field(default_factory=lambda: LLAMA_CPP_DEFAULTS)   # for fields a request omits
    spec_types: list[str] = field(default_factory=list)
    spec_options: dict = field(default_factory=dict)
