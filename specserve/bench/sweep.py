"""Concurrency sweep: the same samples at each concurrency level, one server (or engine).

Per level: output throughput = generated tokens of the level / its wall time, request
latency (mean, p50, p90) and TTFT (mean, p50, p90) over every request (turn) of the level,
and the level's acceptance. Levels run one after another against the same server, so a
method that learns across requests (ngram-mod's shared pool, ngram-cache) has seen the
earlier levels' text.
"""
from __future__ import annotations

from ..errors import OptionError
from .results import SampleResult, mean_acceptance_length, rate
from .runner import Target, Workload, run_samples
from .samples import Sample
from .summary import mean, percentile
from .tables import length, markdown_table, ratio, seconds, speed, text_table

HEADERS = ["concurrency", "requests", "failed", "output_t/s", "req/s", "lat_mean", "lat_p50", "lat_p90",
           "ttft_mean", "ttft_p50", "ttft_p90", "accept_rate", "mean_acc_len"]


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise OptionError(f"--levels must be comma-separated integers, got {text!r}") from None
    if not levels or any(c < 1 for c in levels):
        raise OptionError(f"--levels must list concurrency levels >= 1, got {text!r}")
    return levels


def level_stats(concurrency: int, results: list[SampleResult], elapsed: float) -> dict:
    ok = [r for r in results if r.success]
    turns = [t for r in ok for t in r.turn_results]
    latencies = [t["latency"] for t in turns]
    ttfts = [t["ttft"] for t in turns if t["ttft"] is not None]
    output_tokens = sum(r.predicted_tokens for r in ok)
    drafted, accepted = sum(r.draft_n for r in ok), sum(r.draft_n_accepted for r in ok)
    steps = [r.spec_steps for r in ok if r.spec_steps is not None]
    return {
        "concurrency": concurrency, "samples": len(results), "requests": len(turns),
        "failed": len(results) - len(ok), "elapsed": elapsed, "output_tokens": output_tokens,
        "output_t_s": output_tokens / elapsed if elapsed > 0 else None,
        "requests_per_s": len(turns) / elapsed if elapsed > 0 else None,
        "avg_pred_t_s": mean(r.pred_t_s for r in ok),
        "latency_mean": mean(latencies), "latency_p50": percentile(latencies, 50),
        "latency_p90": percentile(latencies, 90),
        "ttft_mean": mean(ttfts), "ttft_p50": percentile(ttfts, 50), "ttft_p90": percentile(ttfts, 90),
        "accept_rate": rate(accepted, drafted),
        "mean_acceptance_length": mean_acceptance_length(accepted, sum(steps) if steps else None),
    }


def run_sweep(target: Target, samples: list[Sample], workload: Workload, levels: list[int],
              progress: bool = True) -> tuple[list[dict], list[dict]]:
    """(per-level stats, failures with their level)."""
    out, failures = [], []
    for concurrency in levels:
        results, elapsed = run_samples(target, samples, workload, concurrency, progress,
                                       desc=f"concurrency {concurrency}")
        out.append(level_stats(concurrency, results, elapsed))
        failures += [{"concurrency": concurrency, "question_id": r.question_id, "category": r.category,
                      "error": r.error} for r in results if not r.success]
    return out, failures


def _cells(level: dict) -> list[str]:
    return [str(level["concurrency"]), str(level["requests"]), str(level["failed"]), speed(level["output_t_s"]),
            speed(level["requests_per_s"]), seconds(level["latency_mean"]), seconds(level["latency_p50"]),
            seconds(level["latency_p90"]), seconds(level["ttft_mean"]), seconds(level["ttft_p50"]),
            seconds(level["ttft_p90"]), ratio(level["accept_rate"]), length(level["mean_acceptance_length"])]


def sweep_text(record: dict) -> str:
    lines = ["Concurrency sweep", text_table(HEADERS, [_cells(lv) for lv in record["levels"]])]
    failures = record.get("failures") or []
    if failures:
        lines.append(f"{len(failures)} failed sample(s):")
        lines += [f"  concurrency {f['concurrency']}: {f['category']}/{f['question_id']}: {f['error']}"
                  for f in failures]
    return "\n".join(lines)


def sweep_markdown(record: dict) -> str:
    return markdown_table(HEADERS, [_cells(lv) for lv in record["levels"]])
