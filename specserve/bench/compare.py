"""Baseline run vs one or more speculative runs, per category.

decode_speedup = spec avg_pred_t/s / baseline avg_pred_t/s and latency_speedup = baseline
avg_latency / spec avg_latency (llama.cpp's speed_bench_compare.py), plus the speculative
run's accept rate and mean acceptance length, and how many samples produced exactly the
baseline's output (at temperature 0 speculation must not change a single token). Where a run
drafted nothing in a category its speedup measures only noise: the tables say "no drafts"
instead, and such a run is never a category's best.
"""
from __future__ import annotations

from ..errors import OptionError
from .records import label_of
from .results import rate
from .summary import OVERALL
from .tables import length, markdown_table, ratio, speed, text_table, times

HEADERS = ["category", "run", "base_pred_t/s", "spec_pred_t/s", "decode_speedup", "latency_speedup",
           "accept_rate", "mean_acc_len", "same_output"]
BEST_HEADERS = ["category", "best_run", "decode_speedup", "latency_speedup", "accept_rate", "mean_acc_len"]


def unique_labels(records: list[dict]) -> list[str]:
    labels, seen = [], {}
    for record in records:
        label = label_of(record)
        seen[label] = seen.get(label, 0) + 1
        labels.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return labels


def _outputs(record: dict) -> dict:
    return {(r["category"], r["question_id"]): r.get("outputs") for r in record.get("results", [])
            if r.get("success", True) and r.get("outputs") is not None}


def _same_output(base: dict, spec: dict, category: str) -> tuple[int, int] | None:
    pairs = [(b, spec[key]) for key, b in base.items()
             if key in spec and (category == OVERALL or key[0] == category)]
    if not pairs:
        return None
    return sum(1 for b, s in pairs if b == s), len(pairs)


def compare(baseline: dict, specs: list[dict]) -> dict:
    if not specs:
        raise OptionError("give at least one speculative run to compare with the baseline")
    labels = unique_labels([baseline, *specs])
    base_summary, base_outputs = baseline["summary"], _outputs(baseline)
    rows = []
    for label, spec in zip(labels[1:], specs):
        spec_summary, spec_outputs = spec["summary"], _outputs(spec)
        common = [c for c in base_summary if c in spec_summary and c != OVERALL]
        if OVERALL in base_summary and OVERALL in spec_summary:
            common.append(OVERALL)
        if not common:
            raise OptionError(f"{spec.get('path', label)} has no category in common with the baseline")
        for category in common:
            b, s = base_summary[category], spec_summary[category]
            same = _same_output(base_outputs, spec_outputs, category)
            rows.append({
                "category": category, "run": label,
                "base_pred_t_s": b.get("avg_pred_t_s"), "spec_pred_t_s": s.get("avg_pred_t_s"),
                "decode_speedup": rate(s.get("avg_pred_t_s"), b.get("avg_pred_t_s")),
                "latency_speedup": rate(b.get("avg_latency"), s.get("avg_latency")),
                "accept_rate": s.get("accept_rate"), "mean_acceptance_length": s.get("mean_acceptance_length"),
                "same_output": same[0] if same else None, "samples_compared": same[1] if same else None,
                "drafted": s.get("draft_n"),
            })
    return {"kind": "compare", "baseline": labels[0], "runs": labels[1:], "rows": rows, "best": best_per_category(rows)}


def best_per_category(rows: list[dict]) -> list[dict]:
    """For each category the run with the highest decode speedup."""
    best: dict[str, dict] = {}
    for row in rows:
        current = best.get(row["category"])
        if row["decode_speedup"] is None or row.get("drafted") == 0:
            continue
        if current is None or row["decode_speedup"] > current["decode_speedup"]:
            best[row["category"]] = row
    return [best[c] for c in dict.fromkeys(r["category"] for r in rows) if c in best]


def _cells(row: dict) -> list[str]:
    same = "n/a" if row["same_output"] is None else f"{row['same_output']}/{row['samples_compared']}"
    no_drafts = row.get("drafted") == 0
    return [row["category"], row["run"], speed(row["base_pred_t_s"]), speed(row["spec_pred_t_s"]),
            "no drafts" if no_drafts else times(row["decode_speedup"]),
            "no drafts" if no_drafts else times(row["latency_speedup"]), ratio(row["accept_rate"]),
            length(row["mean_acceptance_length"]), same]


def _best_cells(row: dict) -> list[str]:
    return [row["category"], row["run"], times(row["decode_speedup"]), times(row["latency_speedup"]),
            ratio(row["accept_rate"]), length(row["mean_acceptance_length"])]


def compare_text(result: dict) -> str:
    parts = [f"Speedup over the baseline ({result['baseline']})",
             text_table(HEADERS, [_cells(r) for r in result["rows"]])]
    if len(result["runs"]) > 1:
        parts += ["", "Best run per category", text_table(BEST_HEADERS, [_best_cells(r) for r in result["best"]])]
    return "\n".join(parts)


def compare_markdown(result: dict) -> str:
    parts = [markdown_table(HEADERS, [_cells(r) for r in result["rows"]])]
    if len(result["runs"]) > 1:
        parts += ["", "Best run per category:", "", markdown_table(BEST_HEADERS, [_best_cells(r) for r in result["best"]])]
    return "\n".join(parts)
