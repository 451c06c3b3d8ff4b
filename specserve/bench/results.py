"""What one request (a turn) and one sample (all its turns) measured.

Figures come from the server where it reports them: token counts from `usage` (else
llama-server's `timings.prompt_n` / `predicted_n`), prompt and generation times from
`timings` (else the client's TTFT and the time after it), drafted / accepted tokens from
`timings.draft_n` / `draft_n_accepted` (else vLLM's `metrics.speculative_decoding`), and
verify steps and per-position acceptance from `metrics.speculative_decoding`
(`per_position_accepted`, or derived from `acceptance_histogram`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class TurnResult:
    latency: float = 0.0                  # seconds, request sent -> last byte
    ttft: float | None = None             # seconds to the first generated text (streaming only)
    prompt_tokens: int = 0
    predicted_tokens: int = 0
    prompt_ms: float | None = None
    predicted_ms: float | None = None
    draft_n: int = 0
    draft_n_accepted: int = 0
    spec_steps: int | None = None         # verify steps with a draft (None: the server does not say)
    accepted_per_pos: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    text: str = ""
    error: str | None = None


def per_position_from_histogram(histogram: list[int]) -> list[int]:
    """Accepted tokens at draft position i = steps that accepted more than i drafts."""
    counts, running = [], 0
    for j in range(len(histogram) - 1, 0, -1):
        running += histogram[j]
        counts.append(running)
    return counts[::-1]


def turn_from_response(text: str, usage: dict | None, timings: dict | None, metrics: dict | None,
                       finish_reason: str | None, latency: float, ttft: float | None) -> TurnResult:
    usage, timings = usage or {}, timings or {}
    spec = (metrics or {}).get("speculative_decoding") or {}
    turn = TurnResult(latency=latency, ttft=ttft, finish_reason=finish_reason, text=text)
    turn.prompt_tokens = int(usage.get("prompt_tokens", timings.get("prompt_n", 0)) or 0)
    turn.predicted_tokens = int(usage.get("completion_tokens", timings.get("predicted_n", 0)) or 0)
    if "prompt_ms" in timings:
        turn.prompt_ms, turn.predicted_ms = float(timings["prompt_ms"]), float(timings.get("predicted_ms", 0.0))
    elif ttft is not None:
        turn.prompt_ms, turn.predicted_ms = ttft * 1000, (latency - ttft) * 1000
    turn.draft_n = int(timings.get("draft_n", spec.get("num_draft_tokens", 0)) or 0)
    turn.draft_n_accepted = int(timings.get("draft_n_accepted", spec.get("num_accepted_draft_tokens", 0)) or 0)
    if "num_spec_steps" in spec:
        turn.spec_steps = int(spec["num_spec_steps"])
    if spec.get("per_position_accepted") is not None:
        turn.accepted_per_pos = [int(c) for c in spec["per_position_accepted"]]
    elif spec.get("acceptance_histogram"):
        turn.accepted_per_pos = per_position_from_histogram([int(c) for c in spec["acceptance_histogram"]])
    return turn


def add_lists(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


def mean_acceptance_length(accepted: int, steps: int | None) -> float | None:
    """vLLM's definition: 1 + accepted / verify steps (the bonus token counted)."""
    return 1 + accepted / steps if steps else None


def rate(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


@dataclass
class SampleResult:
    """One sample (conversation); the per-sample fields of llama.cpp's SPEED-Bench client plus ours."""
    question_id: str
    category: str
    turns: int = 0                        # turns completed
    success: bool = True
    error: str | None = None
    latency: float = 0.0                  # seconds, summed over turns
    ttft: float | None = None             # the first turn's
    prompt_tokens: int = 0
    predicted_tokens: int = 0
    prompt_t_s: float | None = None
    pred_t_s: float | None = None
    draft_n: int = 0
    draft_n_accepted: int = 0
    spec_steps: int | None = None
    accepted_per_pos: list[int] = field(default_factory=list)
    accept_rate: float | None = None
    mean_acceptance_length: float | None = None
    outputs: list[str] = field(default_factory=list)
    turn_results: list[dict] = field(default_factory=list)

    @classmethod
    def from_turns(cls, question_id: str, category: str, turns: list[TurnResult]) -> "SampleResult":
        s = cls(question_id, category)
        done = [t for t in turns if t.error is None]
        failed = next((t for t in turns if t.error is not None), None)
        s.success, s.error = failed is None, failed.error if failed is not None else None
        s.turns = len(done)
        s.turn_results = [asdict(t) for t in turns]
        s.outputs = [t.text for t in done]
        s.latency = sum(t.latency for t in turns)
        s.ttft = turns[0].ttft if turns else None
        s.prompt_tokens = sum(t.prompt_tokens for t in done)
        s.predicted_tokens = sum(t.predicted_tokens for t in done)
        prompt_ms = [t.prompt_ms for t in done if t.prompt_ms is not None]
        predicted_ms = [t.predicted_ms for t in done if t.predicted_ms is not None]
        if prompt_ms and sum(prompt_ms) > 0:
            s.prompt_t_s = s.prompt_tokens / (sum(prompt_ms) / 1000)
        if predicted_ms and sum(predicted_ms) > 0:
            s.pred_t_s = s.predicted_tokens / (sum(predicted_ms) / 1000)
        s.draft_n = sum(t.draft_n for t in done)
        s.draft_n_accepted = sum(t.draft_n_accepted for t in done)
        steps = [t.spec_steps for t in done if t.spec_steps is not None]
        s.spec_steps = sum(steps) if steps else None
        for t in done:
            s.accepted_per_pos = add_lists(s.accepted_per_pos, t.accepted_per_pos)
        s.accept_rate = rate(s.draft_n_accepted, s.draft_n)
        s.mean_acceptance_length = mean_acceptance_length(s.draft_n_accepted, s.spec_steps)
        return s
