"""Per-category summaries of a run, plus `overall` (llama.cpp SPEED-Bench's fields and ours).

Averages of speeds, latencies and TTFT are means over the category's successful samples;
acceptance figures are totals: accept_rate = accepted / drafted, mean acceptance length =
1 + accepted / verify steps, per-position rate = accepted at position i / verify steps.
"""
from __future__ import annotations

from .results import SampleResult, add_lists, mean_acceptance_length, rate

OVERALL = "overall"


def mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def percentile(values, q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    pos = (len(values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def category_summary(results: list[SampleResult]) -> dict:
    ok = [r for r in results if r.success]
    drafted = sum(r.draft_n for r in ok)
    accepted = sum(r.draft_n_accepted for r in ok)
    step_counts = [r.spec_steps for r in ok if r.spec_steps is not None]
    steps = sum(step_counts) if step_counts else None
    per_pos = []
    for r in ok:
        per_pos = add_lists(per_pos, r.accepted_per_pos)
    return {
        "requests": len(results),
        "turns": sum(r.turns for r in ok),
        "failed": len(results) - len(ok),
        "avg_prompt_t_s": mean(r.prompt_t_s for r in ok),
        "avg_pred_t_s": mean(r.pred_t_s for r in ok),
        "avg_latency": mean(r.latency for r in ok),
        "avg_ttft": mean(r.ttft for r in ok),
        "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "predicted_tokens": sum(r.predicted_tokens for r in ok),
        "draft_n": drafted,
        "accepted": accepted,
        "accept_rate": rate(accepted, drafted),
        "spec_steps": steps,
        "mean_acceptance_length": mean_acceptance_length(accepted, steps),
        "accept_rate_per_pos": [c / steps for c in per_pos] if steps else [],
    }


def summarise(results: list[SampleResult], elapsed: float | None = None) -> dict:
    """{category: summary} in the order categories first appear, then `overall`."""
    categories = list(dict.fromkeys(r.category for r in results))
    out = {c: category_summary([r for r in results if r.category == c]) for c in categories}
    overall = category_summary(results)
    if elapsed:
        overall["elapsed"] = elapsed
        overall["output_t_s"] = overall["predicted_tokens"] / elapsed
    out[OVERALL] = overall
    return out
