"""PNG charts of bench results (matplotlib, Agg backend: no display needed)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: E402


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _bars_width(categories: list, series: dict) -> float:
    """Inches: wide enough for the bars' labels, never wider than a page."""
    return min(13.0, max(6.0, 2.0 + len(categories) * (0.5 + 0.22 * len(series))))


def _grouped_bars(ax, categories: list[str], series: dict[str, list[float | None]]) -> None:
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        xs = [c + (i - (len(series) - 1) / 2) * width for c in range(len(categories))]
        heights = [v if v is not None else 0.0 for v in values]
        bars = ax.bar(xs, heights, width, label=label)
        for bar, value in zip(bars, values):
            if value is not None:
                ax.annotate(f"{value:.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, rotation=30, ha="right")
    ax.legend(fontsize=8)


def speedup_per_category(compare: dict, path: Path) -> Path:
    """Decode speedup over the baseline, a bar per speculative run in each category."""
    categories = list(dict.fromkeys(r["category"] for r in compare["rows"]))
    series = {run: [next((r["decode_speedup"] for r in compare["rows"] if r["run"] == run and r["category"] == c),
                         None) for c in categories] for run in compare["runs"]}
    fig, ax = plt.subplots(figsize=(_bars_width(categories, series), 4.5))
    _grouped_bars(ax, categories, series)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_ylabel(f"decode speedup vs {compare['baseline']} (x)")
    ax.set_title("Decode speedup per category")
    return _save(fig, path)


def acceptance_length_per_category(runs: dict[str, dict], path: Path) -> Path:
    """runs: label -> run summary; the mean acceptance length of each category."""
    categories = list(dict.fromkeys(c for summary in runs.values() for c in summary))
    series = {label: [summary.get(c, {}).get("mean_acceptance_length") for c in categories]
              for label, summary in runs.items()}
    fig, ax = plt.subplots(figsize=(_bars_width(categories, series), 4.5))
    _grouped_bars(ax, categories, series)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_ylabel("mean acceptance length (tokens per verify step)")
    ax.set_title("Mean acceptance length per category")
    return _save(fig, path)


def acceptance_per_position(rates: dict[str, list[float]], path: Path) -> Path:
    """rates: label -> accepted at draft position i / verify steps (vLLM's per-position rate)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, values in rates.items():
        ax.plot(range(1, len(values) + 1), values, marker="o", label=label)
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate (accepted / verify steps)")
    ax.set_ylim(0, 1.05)
    ax.set_title("Acceptance per draft position")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def throughput_vs_concurrency(sweeps: dict[str, list[dict]], path: Path) -> Path:
    """sweeps: label -> levels; output throughput and request latency against concurrency."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.2))
    for label, levels in sweeps.items():
        xs = [lv["concurrency"] for lv in levels]
        left.plot(xs, [lv["output_t_s"] or 0.0 for lv in levels], marker="o", label=label)
        line, = right.plot(xs, [lv["latency_mean"] or 0.0 for lv in levels], marker="o", label=f"{label} mean")
        right.plot(xs, [lv["latency_p90"] or 0.0 for lv in levels], marker="x", linestyle="--",
                   color=line.get_color(), label=f"{label} p90")
    levels_seen = sorted({lv["concurrency"] for levels in sweeps.values() for lv in levels})
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels_seen)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("concurrency")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_ylim(bottom=0)
    left.set_ylabel("output tokens/s")
    left.set_title("Throughput vs concurrency")
    right.set_ylabel("request latency (s)")
    right.set_title("Latency vs concurrency")
    return _save(fig, path)
