"""Request (the engine's per-request state) and RequestOutput (what callers receive)."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from ..models.tokenizer import IncrementalDetokenizer
from ..sampling import SamplingParams
from ..speculative.stats import RequestDraftStats


class State(enum.Enum):
    WAITING = "waiting"
    PREFILL = "prefill"
    GENERATING = "generating"
    FINISHED = "finished"


@dataclass
class Timings:
    """llama-server's `timings` object (plus the time spent waiting for a slot)."""
    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    queue_ms: float = 0.0

    def as_dict(self, draft_stats: RequestDraftStats | None = None) -> dict:
        d = {
            "cache_n": 0,
            "prompt_n": self.prompt_n,
            "prompt_ms": self.prompt_ms,
            "prompt_per_token_ms": self.prompt_ms / self.prompt_n if self.prompt_n else 0.0,
            "prompt_per_second": 1000.0 * self.prompt_n / self.prompt_ms if self.prompt_ms > 0 else 0.0,
            "predicted_n": self.predicted_n,
            "predicted_ms": self.predicted_ms,
            "predicted_per_token_ms": self.predicted_ms / self.predicted_n if self.predicted_n else 0.0,
            "predicted_per_second": 1000.0 * self.predicted_n / self.predicted_ms if self.predicted_ms > 0 else 0.0,
        }
        if draft_stats is not None and draft_stats.n_draft_tokens > 0:
            d["draft_n"] = draft_stats.n_draft_tokens
            d["draft_n_accepted"] = draft_stats.n_draft_accepted
        return d


def timing_lines(timings: dict) -> list[str]:
    """llama.cpp's three timing lines (prompt eval, eval, total) for a timings dict."""
    pn, pms = timings["prompt_n"], timings["prompt_ms"]
    gn, gms = timings["predicted_n"], timings["predicted_ms"]
    return [
        f"prompt eval time = {pms:10.2f} ms / {pn:5d} tokens ({pms / max(pn, 1):8.2f} ms per token, "
        f"{timings['prompt_per_second']:8.2f} tokens per second)",
        f"       eval time = {gms:10.2f} ms / {gn:5d} tokens ({gms / max(gn, 1):8.2f} ms per token, "
        f"{timings['predicted_per_second']:8.2f} tokens per second)",
        f"      total time = {pms + gms:10.2f} ms / {pn + gn:5d} tokens",
    ]


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]]


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    text: str
    token_ids: list[int]
    finish_reason: str | None                # "stop", "length", "abort", "error" or None while running
    timings: dict
    draft_stats: dict                 # drafted / accepted / verify_steps / accepted_per_pos
    finished: bool = False
    stop_reason: str | int | None = None     # the stop string or token that ended generation
    error: str | None = None
    new_text: str = ""                       # text added since the previous update (streaming)
    new_token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None


@dataclass
class Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    on_update: Callable[[RequestOutput], None] | None = None   # called from the engine thread
    # runtime state, owned by the engine
    state: State = State.WAITING
    slot: int = -1
    tokens: np.ndarray | None = None          # tokens in the target cache (prompt + accepted)
    n_cached: int = 0
    id_last: int = -1                         # sampled, emitted, not yet in the cache
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    detok: IncrementalDetokenizer | None = None
    lazy_text: bool = False                   # text decoded once at the end (no stop strings, no streaming)
    generator: torch.Generator | None = None
    seed: int = 0
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    error: str | None = None
    draft_stats: RequestDraftStats = field(default_factory=RequestDraftStats)
    logprobs: list[TokenLogprob] | None = None
    t_arrival: float = field(default_factory=time.perf_counter)
    t_start: float = 0.0
    t_first_token: float = 0.0
    t_end: float = 0.0
    abort_requested: bool = False
    stopper: object = None                    # engine.stopping.StopChecker
    hold: int = 0                             # trailing chars that may start a stop string
    _sent_text: int = 0
    _sent_tokens: int = 0

    @property
    def finished(self) -> bool:
        return self.state == State.FINISHED

    def timings(self) -> Timings:
        now = self.t_end or time.perf_counter()
        t = Timings(prompt_n=len(self.prompt_ids), predicted_n=len(self.output_ids))
        if self.t_start:
            t.queue_ms = (self.t_start - self.t_arrival) * 1000
        if self.t_first_token:
            t.prompt_ms = (self.t_first_token - self.t_start) * 1000
            t.predicted_ms = (now - self.t_first_token) * 1000
        return t

    def snapshot(self) -> RequestOutput:
        """The request's output so far, with the text and tokens added since the last snapshot."""
        visible = len(self.text) - (0 if self.finished else self.hold)
        new_text = self.text[self._sent_text:visible]
        new_ids = self.output_ids[self._sent_tokens:]
        self._sent_text, self._sent_tokens = max(self._sent_text, visible), len(self.output_ids)
        return RequestOutput(
            request_id=self.request_id, prompt_token_ids=self.prompt_ids, text=self.text,
            token_ids=list(self.output_ids), finish_reason=self.finish_reason,
            timings=self.timings().as_dict(self.draft_stats), draft_stats=self.draft_stats.as_dict(),
            finished=self.finished, stop_reason=self.stop_reason, error=self.error, new_text=new_text, new_token_ids=new_ids,
            logprobs=self.logprobs)
