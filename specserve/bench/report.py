"""`report.md` plus PNG charts from run, sweep and compare files.

What is drawn depends on what the files hold:
* a baseline run and speculative runs (or a compare file): decode speedup per category;
* speculative runs: mean acceptance length per category, and acceptance per draft position
  when the server reported per-position counts;
* sweep files: throughput and latency against concurrency.
The baseline is `--baseline`, else the first run without speculation.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import OptionError
from . import plots
from .compare import compare, compare_markdown, unique_labels
from .records import is_speculative
from .sweep import sweep_markdown
from .tables import SUMMARY_HEADERS, markdown_table, summary_rows

FILES = {
    "speedup": "speedup_per_category.png",
    "length": "acceptance_length_per_category.png",
    "position": "acceptance_per_position.png",
    "sweep": "throughput_vs_concurrency.png",
}


def _config_line(record: dict) -> str:
    config = record.get("config") or {}
    keys = ("url", "model_dir", "model", "spec_types", "bench", "bench_file", "category", "osl", "concurrency",
            "levels", "endpoint", "extra_inputs")
    return ", ".join(f"{k}={config[k]}" for k in keys if config.get(k) not in (None, "", []))


def pick_baseline(runs: list[dict], baseline: dict | None) -> tuple[dict | None, list[dict]]:
    """(baseline run, speculative runs to compare with it)."""
    if baseline is None:
        baseline = next((r for r in runs if not is_speculative(r)), None)
    others = [r for r in runs if r is not baseline and r.get("path") != (baseline or {}).get("path")]
    return baseline, [r for r in others if is_speculative(r)]


def build_report(records: list[dict], out_dir: str | Path, baseline: dict | None = None,
                 title: str = "specserve bench report") -> list[Path]:
    """Writes report.md and the charts the records support; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = [r for r in records if r["kind"] == "run"]
    sweeps = [r for r in records if r["kind"] == "sweep"]
    compares = [r for r in records if r["kind"] == "compare"]
    if not (runs or sweeps or compares) and baseline is None:
        raise OptionError("nothing to report: give run, sweep or compare files")
    base, specs = pick_baseline(runs, baseline)
    if base is not None and specs:
        compares = [compare(base, specs), *compares]
    written: list[Path] = []
    md = [f"# {title}", "", "## Inputs", ""]
    all_runs = ([base] if base is not None and base not in runs else []) + runs
    everything = all_runs + sweeps
    # labels are unique among runs and among sweeps (a sweep may share its server's label)
    labels = (unique_labels(all_runs) if all_runs else []) + (unique_labels(sweeps) if sweeps else [])
    for label, record in zip(labels, everything):
        md.append(f"* `{record.get('path', '?')}` ({record['kind']}, **{label}**): {_config_line(record)}")
    md.append("")

    for i, result in enumerate(compares):
        suffix = "" if i == 0 else f"_{i + 1}"
        png = plots.speedup_per_category(result, out / FILES["speedup"].replace(".png", f"{suffix}.png"))
        written.append(png)
        md += [f"## Speedup over {result['baseline']}" + (f" ({i + 1})" if i else ""), "", compare_markdown(result),
               "", f"![decode speedup per category]({png.name})", ""]

    spec_runs = {label: r["summary"] for label, r in zip(labels, everything) if r["kind"] == "run"
                 and is_speculative(r)}
    if spec_runs:
        png = plots.acceptance_length_per_category(spec_runs, out / FILES["length"])
        written.append(png)
        md += ["## Mean acceptance length per category", "", f"![mean acceptance length]({png.name})", ""]
    per_position = {label: s["overall"].get("accept_rate_per_pos") for label, s in spec_runs.items()
                    if s.get("overall", {}).get("accept_rate_per_pos")}
    if per_position:
        png = plots.acceptance_per_position(per_position, out / FILES["position"])
        written.append(png)
        depth = max(len(v) for v in per_position.values())
        rows = [[str(i + 1), *[f"{v[i]:.3f}" if i < len(v) else "" for v in per_position.values()]]
                for i in range(depth)]
        md += ["## Acceptance per draft position", "",
               "Accepted tokens at each draft position / verify steps (all categories).", "",
               markdown_table(["position", *per_position], rows), "",
               f"![acceptance per draft position]({png.name})", ""]

    sweep_labels = {label: r for label, r in zip(labels, everything) if r["kind"] == "sweep"}
    if sweep_labels:
        png = plots.throughput_vs_concurrency({k: r["levels"] for k, r in sweep_labels.items()}, out / FILES["sweep"])
        written.append(png)
        md += ["## Concurrency sweep", ""]
        for label, record in sweep_labels.items():
            md += [f"**{label}**", "", sweep_markdown(record), ""]
        md += [f"![throughput and latency vs concurrency]({png.name})", ""]

    run_labels = [(label, r) for label, r in zip(labels, everything) if r["kind"] == "run"]
    if run_labels:
        md += ["## Runs", ""]
        for label, record in run_labels:
            elapsed = record.get("elapsed")
            md += [f"### {label}", "", f"{record.get('completed_samples', '?')} of "
                   f"{record.get('selected_samples', '?')} samples completed"
                   + (f" in {elapsed:.2f} s" if elapsed is not None else "") + ".", "",
                   markdown_table(SUMMARY_HEADERS, summary_rows(record["summary"])), ""]
            for f in record.get("failures") or []:
                md.append(f"* failed: {f['category']}/{f['question_id']}: {f['error']}")
            md.append("")
    report = out / "report.md"
    report.write_text("\n".join(md).rstrip() + "\n", encoding="utf-8")
    return [report, *written]
